"""Known structures ranked together with de novo candidates: the measurement that chooses the merged score.

A structure library adds known structures to a spectrum's candidate pool (issue #36); they must be ranked in
ONE ranking with the decoder's de novo candidates. The de novo candidates were generated to match the
predicted fingerprint, so under the fingerprint score alone their look-alikes outscore a known true
structure; a prior that lifts every known structure lets a library's hundreds of isomers crowd out a correct
de novo answer. This module measures candidate merged scores and chooses one (:class:`MergedScore`)::

    python -m training.studies.retrieval --mgf ../shared/data/massbank_dev.mgf.gz \\
        --corpus ../shared/data/molecules.tsv.gz --out runs/retrieval/v10 \\
        --choose-spectra 150 --report-spectra 200

**Sets.** One seeded spectrum per structure (:func:`training.evaluation.evaluate.select_spectra`, as ``msgpt-eval
--one-per-structure``; adducts the model supports): weights are chosen on ``FOLD=train`` spectra of
structures the bundle's encoder never trained on (:func:`training.encoder.noise.unseen_structures` with the licences
its ``config.json`` records), and reported on ``FOLD=val``.

**Libraries** (two tracks, as MassSpecGym's retrieval): the *formula* track is the true structure plus up to
255 corpus structures of its formula, the *mass* track the truth plus up to 255 corpus structures within
10 ppm of its neutral mass (a uniform sample of the window that reuses the formula track's draws, so the two
share most structures); corpus structures with the truth's InChIKey first block are left out first. The
corpus is indexed once as an :mod:`engine.library` structure library (kept in ``$MSGPT_HOME``).

**Pools.** Each spectrum's de novo search runs as the app runs it (:class:`~engine.elucidation.pipeline.
SpectrumSession`, default :class:`~engine.elucidation.pipeline.QueryParams`: B=100, seed 0); every candidate
(library or de novo; a structure in both is one candidate) gets its fingerprint score
(:class:`~engine.model.scoring.FingerprintScorer` of the spectrum's posterior, as the app's), its decoder
log-probability under a few band queries (teacher-forced, conditioned on its own formula, as
:func:`engine.insight.structure_score.decoder_log_probs`; each query timed apart) and, for the first
``--fragment-spectra`` spectra, the share of intensity its fragments explain
(:func:`engine.spectra.fragments.explain_peaks`). Pools are cached in ``<out>/pools.jsonl`` as they are done,
so a rerun (or a larger ``--*-spectra``) costs only what is new. ``--library-only`` pools hold the library
tracks alone (the encoder runs, nothing is drawn or decoder-scored, nothing is analysed): what
:mod:`training.studies.retrieval_forward`'s suspect-list rule needs, in seconds.

**Rankings** (:func:`evaluate_pools`): Hit@1/5/20 of the truth ranked among the library alone and among the
library plus the de novo candidates, per track; ties are broken at random in expectation
(:func:`expected_hits`). The crowding check removes the truth from the library (it is then reachable de
novo only) and compares de novo Top-1/Top-10 with the library on and off.

Its table: docs/known_compounds.md, "Why the bundled library gets no bonus and a suspect list comes first" (the
prior-b table and the MassSpecGym-style view), with the command above.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from engine.errors import ConfigError, MsgptError
from training.studies.retrieval_pools import (
    DECODER_WEIGHTS,
    FRAGMENT_WEIGHTS,
    HIT_KS,
    LIBRARY_SIZE,
    MergedScore,
    PRIORS,
    Pool,
    QUERY_POSITIONS,
    SHORTLIST,
    TRACKS,
    Variant,
    choose,
    crowding_summary,
    evaluate_pools,
    strip_private,
)
from training.studies.retrieval_pools import (  # noqa: F401  (re-exported)
    CHOSEN,
    CROWDING_KS,
    FORMAT_VERSION,
    MASS_PPM,
    SETTINGS,
    SETTING_KS,
    fill_missing,
    hits_matrix,
    pool_hits,
    setting_rows,
    shortlist_mask,
    sweep,
    track_rows,
    two_stage,
)
from training.studies.retrieval_pools import expected_hits  # noqa: F401  (re-exported)
from training.studies.retrieval_data import (
    RetrievalConfig,
    _pools_of,
    cached_sets,
    compute_pools,
    corpus_fingerprint_bits,
    open_corpus,
)
from training.studies.retrieval_data import (  # noqa: F401  (re-exported)
    _Entry,
    _spectrum_dict,
    mgf_labels,
    query_indices,
    read_jsonl,
    rescore_keys,
)


# -- the analysis --------------------------------------------------------------------------------------
DEC, COUNT = "decoder_weight", "count_weight"
COUNT_WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
COUNT_FAMILY = "fingerprint + prior + count"
FAMILIES = (  # (template, swept weight, priors, weights, crowding limit)
    (Variant("fingerprint + prior"), DEC, PRIORS, (0.0,), True),
    (Variant("fingerprint + decoder (1 query)"), DEC, (0.0,), DECODER_WEIGHTS, True),
    (Variant("fingerprint + prior + decoder (1 query)"), DEC, PRIORS, DECODER_WEIGHTS, True),
    (Variant("fingerprint + prior + decoder (3 queries)", queries=(0, 1, 2)), DEC, PRIORS, DECODER_WEIGHTS, True),
    (Variant("fingerprint + sized prior + decoder (1 query)", sized_prior=True), DEC, PRIORS, DECODER_WEIGHTS, True),
    (Variant(COUNT_FAMILY), COUNT, PRIORS, COUNT_WEIGHTS, True),
    (Variant("fingerprint + prior, no crowding limit"), DEC, PRIORS, (0.0,), False),
    (Variant(COUNT_FAMILY + ", no crowding limit"), COUNT, PRIORS, COUNT_WEIGHTS, False),
)
# built on the count family's chosen weights: (name, swept weight, its grid)
ON_COUNT = ((COUNT_FAMILY + " + decoder (1 query)", DEC, DECODER_WEIGHTS),)
FRAGMENTS = (COUNT_FAMILY + " + fragments", "fragment_weight", FRAGMENT_WEIGHTS)
FIXED = (Variant("random", random=True), Variant("fingerprint (today)"),
         Variant("decoder re-ranks fingerprint top 20 (1 query)", fp_weight=0.0, decoder_weight=1.0),
         Variant("decoder re-ranks fingerprint top 20 (3 queries)", fp_weight=0.0, decoder_weight=1.0,
                 queries=(0, 1, 2)))
TRADEOFF_PRIORS = (-4.0, 0.0, 2.0, 4.0, 6.0, 10.0, 20.0, 60.0)


def ci95(values: Sequence[float], seed: int = 0, n: int = 2000) -> list[float]:
    """Bootstrap 95% interval of the mean."""
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return [float("nan"), float("nan")]
    means = v[np.random.default_rng(seed).integers(0, len(v), (n, len(v)))].mean(1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def describe_variant(v: Variant) -> dict:
    return {k: val for k, val in asdict(v).items() if k != "name"}


def _measure(v: Variant, sets: dict[str, list[Pool]], today: dict[str, dict]) -> dict:
    out = {"weights": describe_variant(v)}
    for name, pools in sets.items():
        res = evaluate_pools(v, pools)
        out[name] = strip_private(res)
        out[name]["crowding"] = crowding_summary(res, today[name])
        out[name]["n"] = len(pools)
        for t in TRACKS:
            for s in ("library", "joint"):
                out[name][t][s]["hit1_ci95"] = ci95(res[t][s]["_top1"])
    return out


def analyse(choose_pools: list[Pool], report_pools: list[Pool], frag_choose: list[Pool], frag_report: list[Pool],
            tolerance: float, progress: Callable[[str], None] | None = None) -> dict:
    """Every fixed variant, and every family with its weights chosen on ``choose_pools``, measured on both
    sets; the trade-off of the prior; the fragment score on the spectra that have it."""
    sets = {"choose": choose_pools, "report": report_pools}
    today = {k: evaluate_pools(Variant("fingerprint"), p) for k, p in sets.items()}
    variants = {v.name: _measure(v, sets, today) for v in FIXED}
    chosen = {}

    def run_family(template, field_name, pools, priors, weights, limit):
        if progress:
            progress(template.name)
        v, info = choose(template, field_name, pools, priors, weights, limit)
        chosen[template.name] = v
        return v, info

    for template, field_name, priors, weights, limited in FAMILIES:
        v, info = run_family(template, field_name, choose_pools, priors, weights, tolerance if limited else None)
        variants[v.name] = {**_measure(v, sets, today), "choice": info}
    for name, field_name, weights in ON_COUNT:
        v, info = run_family(replace(chosen[COUNT_FAMILY], name=name), field_name, choose_pools, PRIORS, weights,
                             tolerance)
        variants[v.name] = {**_measure(v, sets, today), "choice": info}
    out = {"variants": variants, "tradeoff": tradeoff(sets, chosen[COUNT_FAMILY].count_weight)}
    if frag_choose and frag_report:
        name, field_name, weights = FRAGMENTS
        v, info = run_family(replace(chosen[COUNT_FAMILY], name=name), field_name, frag_choose, PRIORS, weights,
                             tolerance)
        fsets = {"choose": frag_choose, "report": frag_report}
        ftoday = {k: evaluate_pools(Variant("fingerprint"), p) for k, p in fsets.items()}
        shown = (Variant("fingerprint (today)"), chosen[COUNT_FAMILY])
        out["fragment_subset"] = {"variants": {x.name: _measure(x, fsets, ftoday) for x in shown}}
        out["fragment_subset"]["variants"][v.name] = {**_measure(v, fsets, ftoday), "choice": info}
    return out


def tradeoff(sets: dict[str, list[Pool]], count_weight: float) -> list[dict]:
    """Joint Hit@1/5 and the crowding check (truth out of the library) along the prior, without and with
    the count term, per set and track."""
    rows = []
    for c in sorted({0.0, float(count_weight)}):
        for b in TRADEOFF_PRIORS:
            row = {"prior": b, "count_weight": c}
            for name, pools in sets.items():
                res = evaluate_pools(Variant("t", prior=b, count_weight=c), pools)
                for t in TRACKS:
                    row[f"{name}_{t}"] = {"joint_hit1": res[t]["joint"]["hit1"], "joint_hit5": res[t]["joint"]["hit5"],
                                          "crowded_top1": res[t]["crowded"]["hit1"],
                                          "crowded_top10": res[t]["crowded"]["hit10"]}
            rows.append(row)
    return rows


def timing_summary(records: Iterable[dict], frags: Iterable[dict]) -> dict:
    """Median seconds per spectrum: the de novo search; the fingerprint score of a 256-structure library;
    SAFE encoding, each decoder query and the fragments of a shortlist of :data:`SHORTLIST`; and the share of
    the de novo time that scoring a 256-structure library takes with 1 and with every query."""
    records = list(records)
    if not records:
        return {}
    lib = np.array([LIBRARY_SIZE / max(len(r["candidates"]), 1) for r in records])
    short = np.array([SHORTLIST / max(r["n_rescored"], 1) for r in records])
    denovo = np.array([r["seconds"]["denovo"] for r in records])
    fp = np.array([r["seconds"]["fingerprint"] for r in records]) * lib
    safe = np.array([r["seconds"]["safe"] for r in records]) * short
    dec = np.array([r["seconds"]["decoder"] for r in records]) * short[:, None]
    out = {"spectra": len(records), "denovo_s": float(np.median(denovo)),
           "fingerprint_s_per_256": float(np.median(fp)), "safe_s_per_shortlist": float(np.median(safe)),
           "decoder_s_per_shortlist_per_query": [float(np.median(dec[:, q])) for q in range(dec.shape[1])],
           "decoder_s_per_256_per_query": float(np.median(dec[:, 0] / short * LIBRARY_SIZE
                                                          / np.array([max(r["n_rescored"], 1) for r in records]))),
           "candidates_per_spectrum": float(np.median([len(r["candidates"]) for r in records])),
           "rescored_per_spectrum": float(np.median([r["n_rescored"] for r in records]))}
    for k in (1, dec.shape[1]):
        out[f"library_scoring_share_{k}_queries"] = float(np.median((fp + safe + dec[:, :k].sum(1)) / denovo))
    n = {r["key"]: r["n_rescored"] for r in records}
    frags = [f for f in frags if f["key"] in n]
    if frags:
        out["fragments_s_per_shortlist"] = float(np.median([f["seconds"] * SHORTLIST / max(n[f["key"]], 1)
                                                            for f in frags]))
    return out


def recommend(result: dict, timings: dict, budget: float = 0.2) -> tuple[str, MergedScore]:
    """The family with the best joint Hit@1 (then Hit@5, then fewer decoder queries) on the choose set among
    those within the crowding limit (any, if none is) whose library scoring fits ``budget`` (share of the
    de novo time; a family without the decoder always does), as a :class:`MergedScore` (a sized prior and
    the fragment score are not part of one: they are reported, not recommended)."""
    best, best_key = None, None
    for name, m in result["variants"].items():
        choice, w = m.get("choice"), m["weights"]
        if not choice or "no crowding limit" in name or w["sized_prior"] or w["fragment_weight"]:
            continue
        k = len(w["queries"]) if w["decoder_weight"] else 0
        if k and timings.get(f"library_scoring_share_{k}_queries", 0.0) > budget:
            continue
        key = (choice["crowding_ok"], round(choice["joint_hit1"], 9), round(choice["joint_hit5"], 9), -k)
        if best_key is None or key > best_key:
            best, best_key = name, key
    w = result["variants"][best]["weights"]
    positions = tuple(QUERY_POSITIONS[q] for q in w["queries"]) if w["decoder_weight"] else (QUERY_POSITIONS[0],)
    return best, MergedScore(library_prior=w["prior"], count_weight=w["count_weight"],
                             decoder_weight=w["decoder_weight"], query_positions=positions, shortlist=w["shortlist"])


# -- the report ----------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _weights_text(w: dict) -> str:
    if w.get("random"):
        return "–"
    parts = []
    if w["prior"] or w["sized_prior"]:
        parts.append(f"b={w['prior']:g}" + (" − ln n" if w["sized_prior"] else ""))
    if w["count_weight"]:
        parts.append(f"c={w['count_weight']:g}")
    if w["decoder_weight"]:
        q = len(w["queries"])
        parts.append(("decoder only" if w["fp_weight"] == 0 else f"a={w['decoder_weight']:g}")
                     + f", {q} quer{'y' if q == 1 else 'ies'}, top {w['shortlist']}")
    if w["fragment_weight"]:
        parts.append(f"fragments {w['fragment_weight']:g}")
    return "; ".join(parts) or "–"


def markdown_tables(variants: dict, set_name: str) -> str:
    """Hit@1/5/20 per variant, track and setting, and the crowding check, of one set."""
    lines = ["| variant | weights | formula: library | formula: + de novo | mass: library | mass: + de novo |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, m in variants.items():
        r = m[set_name]
        cells = [" / ".join(_pct(r[t][s][f"hit{k}"]) for k in HIT_KS) for t in TRACKS for s in ("library", "joint")]
        lines.append(f"| {name} | {_weights_text(m['weights'])} | " + " | ".join(cells) + " |")
    lines += ["", ("Crowding check, truth removed from the library (reachable de novo only): de novo Top-1 / Top-10 "
                   "today (fingerprint score, no library) → the variant with the library off → with it on; "
                   "*pushed down*: spectra whose truth the variant ranks first with the library off but not on."),
              "", "| variant | formula track | pushed down | mass track | pushed down |",
              "| --- | --- | --- | --- | --- |"]
    for name, m in variants.items():
        c = m[set_name]["crowding"]
        cells = []
        for t in TRACKS:
            x = c[t]
            cells += [" → ".join(f"{_pct(x[a + '_top1'])} / {_pct(x[a + '_top10'])}" for a in ("today", "off", "on")),
                      f"{x['pushed_down']:g}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tradeoff_table(rows: list[dict]) -> str:
    """Joint Hit@1 / Hit@5 and de novo Top-1 / Top-10 with the library on (truth out of it) along the prior."""
    head = ["prior b", "count c"] + [f"{s} {t}: joint H1 / H5; crowded Top-1 / Top-10"
                                     for s in ("val", "train-unseen") for t in TRACKS]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [f"{r['prior']:g}", f"{r['count_weight']:g}"]
        for s in ("report", "choose"):
            for t in TRACKS:
                x = r[f"{s}_{t}"]
                cells.append(f"{_pct(x['joint_hit1'])} / {_pct(x['joint_hit5'])}; "
                             f"{_pct(x['crowded_top1'])} / {_pct(x['crowded_top10'])}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_text(t: dict) -> str:
    if not t:
        return ""
    dec = ", ".join(f"{x:.3f}" for x in t["decoder_s_per_shortlist_per_query"])
    shares = ", ".join(f"{k.split('_')[3]} quer{'y' if k.split('_')[3] == '1' else 'ies'} {100 * v:.0f}%"
                       for k, v in t.items() if k.startswith("library_scoring_share"))
    return (f"Median per spectrum ({t['spectra']} spectra): de novo search {t['denovo_s']:.2f} s; fingerprint score "
            f"of 256 structures {t['fingerprint_s_per_256']:.4f} s; for a shortlist of {SHORTLIST}: SAFE encoding "
            f"{t['safe_s_per_shortlist']:.3f} s, decoder {dec} s per query (all 256 would take "
            f"{t['decoder_s_per_256_per_query']:.2f} s per query)"
            + (f", fragments {t['fragments_s_per_shortlist']:.2f} s" if "fragments_s_per_shortlist" in t else "")
            + f". Scoring a 256-structure library / de novo time: {shares}.")


def report_text(metrics: dict) -> str:
    res = metrics["result"]
    n = {k: next(iter(res["variants"].values()))[k]["n"] for k in ("choose", "report")}
    parts = [f"# Library + de novo ranking ({metrics['run']['model']})", "",
             (f"Hit@1 / Hit@5 / Hit@20 (%) of the truth ranked among its library track (truth + up to "
              f"{LIBRARY_SIZE - 1} corpus structures) alone, and together with the de novo candidates."), "",
             f"## FOLD=val, {n['report']} spectra (reported)", "", markdown_tables(res["variants"], "report"), "",
             f"## FOLD=train, structures the encoder never trained on, {n['choose']} spectra (weights chosen here)",
             "", markdown_tables(res["variants"], "choose"), ""]
    if "tradeoff" in res:
        parts += ["## The prior's trade-off", "", tradeoff_table(res["tradeoff"]), ""]
    if "fragment_subset" in res:
        fv = res["fragment_subset"]["variants"]
        m = next(iter(fv.values()))
        title = (f"## Fragment score: the first {m['report']['n']} val spectra (weights on the first "
                 f"{m['choose']['n']} train-unseen)")
        parts += [title, "", markdown_tables(fv, "report"), ""]
    parts += ["## Time", "", timing_text(metrics["timings"]), "",
              f"Chosen: `{metrics['recommended']['merged_score']}` ({metrics['recommended']['variant']})", ""]
    return "\n".join(parts)


# -- command line --------------------------------------------------------------------------------------
def run(cfg: RetrievalConfig) -> dict:
    """Pools (cached), the analysis, ``metrics.json`` and ``report.md`` in ``cfg.out``; returns the metrics."""
    import torch

    from engine.model.bundle import load_bundle
    from engine.paths import default_model_dir

    from training.evaluation.evaluate import code_version, machine

    started = time.time()
    if cfg.library_only and cfg.fragment_spectra:
        raise ConfigError("--library-only pools have no decoder shortlist to give fragment shares to; "
                          "leave out --fragment-spectra")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    model = load_bundle(cfg.model or default_model_dir(), device=cfg.device, precision=cfg.precision)
    library = open_corpus(cfg.corpus, cfg.home)
    if corpus_fingerprint_bits(library) != model.decoder.config.fp_bits:
        raise ConfigError(f"the corpus library has {corpus_fingerprint_bits(library)}-bit fingerprints, the model "
                          f"{model.decoder.config.fp_bits}")
    run_key = cfg.run_key(model, library)
    run_path = out / "run.json"
    old = json.loads(run_path.read_text()).get("run_key") if run_path.exists() else None
    if old is not None and old != run_key and (out / "pools.jsonl").exists():
        changed = sorted(k for k in run_key if old.get(k) != run_key[k])
        raise ConfigError(f"{out} holds pools of another model or settings ({', '.join(changed)}); use a new --out")
    run_path.write_text(json.dumps({"run_key": run_key, "command": cfg.command}, indent=1))
    in_corpus = (lambda key: library.row_of_key(key) is not None) if cfg.choose_outside_corpus else None
    sets = cached_sets(model, cfg.mgf, cfg.choose_spectra, cfg.report_spectra, cfg.seed, cfg.licenses,
                       out / "selection.json", in_corpus, "in corpus" if in_corpus else "")
    pools, frags = compute_pools(cfg, model, library, sets, out)
    if cfg.library_only:
        print(f"library-only pools of {len(pools)} spectra in {out / 'pools.jsonl'}; rank them with "
              f"`python -m training.studies.retrieval_forward --pools {out}` (no analysis: it needs de novo pools)",
              file=sys.stderr)
        return {"run": {"library_only": True, "pools": len(pools), "seconds": time.time() - started}}
    choose_p, report_p = _pools_of(sets.choose, pools, frags), _pools_of(sets.report, pools, frags)
    fc, fr = (_pools_of(sets.choose, pools, frags, True), _pools_of(sets.report, pools, frags, True))
    print("choosing weights ...", file=sys.stderr)
    result = analyse(choose_p, report_p, fc, fr, cfg.tolerance,
                     progress=lambda name: print(f"  {name}", file=sys.stderr))
    keys = {p.key for p in choose_p + report_p}
    timings = timing_summary([pools[k] for k in keys], frags.values())
    name, merged = recommend(result, timings)
    metrics = {
        "run": {"model": f"{model.name} [{model.checksum[:12]}]", "mgf": cfg.mgf, "corpus": cfg.corpus,
                "corpus_structures": len(library), "seed": cfg.seed, "machine": machine(model),
                "code_version": code_version(), "command": cfg.command, "run_key": run_key,
                "seconds": time.time() - started, "sets": sets.info,
                "truth_in_corpus": {"choose": sum(library.row_of_key(r.inchikey14) is not None for _, r in sets.choose),
                                    "report": sum(library.row_of_key(r.inchikey14) is not None for _, r in sets.report)}},
        "timings": timings, "result": result,
        "recommended": {"variant": name, "merged_score": repr(merged), **asdict(merged)},
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    (out / "report.md").write_text(report_text(metrics))
    return metrics


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.studies.retrieval", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model bundle folder (default: the bundled model)")
    p.add_argument("--mgf", required=True, help="labelled MGF with FOLD and LICENSE (massbank_dev.mgf.gz)")
    p.add_argument("--corpus", required=True, help="structure table (smiles, inchikey14, source): the decoys")
    p.add_argument("--out", default="runs/retrieval/default", help="output folder (pools are cached there)")
    p.add_argument("--choose-spectra", type=int, default=150, metavar="N",
                   help="FOLD=train spectra of structures the encoder never trained on, to choose weights on")
    p.add_argument("--report-spectra", type=int, default=200, metavar="N", help="FOLD=val spectra to report on")
    p.add_argument("--fragment-spectra", type=int, default=0, metavar="N",
                   help="also the fragment explanation score, on the first N spectra of each set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"))
    p.add_argument("--home", help="MSGPT_HOME for the corpus index (default: the environment's)")
    p.add_argument("--trained-licenses", nargs="+", metavar="LICENSE",
                   help="licences the encoder trained on (default: as the bundle's config.json records them)")
    p.add_argument("--choose-outside-corpus", action=argparse.BooleanOptionalAction, default=False,
                   help="choose on structures outside the corpus only, as FOLD=val's (the decoder pretrained on "
                        "the corpus: it saw the decoys, not the truth); default off: the de novo search almost "
                        "never finds those, so the crowding limit would not bind")
    p.add_argument("--crowding-tolerance", type=float, default=0.0, metavar="SHARE",
                   help="allowed loss of de novo Top-1/Top-10 against today's ranking when choosing (default 0)")
    p.add_argument("--library-only", action="store_true",
                   help="pools of the library tracks alone: the encoder runs, the de novo search and the decoder "
                        "scores do not (750 pools in seconds instead of hours), and nothing is analysed; for "
                        "measures of a library's own order, such as training.studies.retrieval_forward's suspect-list rule")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    cfg = RetrievalConfig(
        mgf=args.mgf, corpus=args.corpus, out=args.out, model=args.model or "", choose_spectra=args.choose_spectra,
        report_spectra=args.report_spectra, fragment_spectra=args.fragment_spectra, seed=args.seed,
        threads=args.threads, device=args.device, precision=args.precision, home=args.home,
        licenses=tuple(args.trained_licenses) if args.trained_licenses else None, tolerance=args.crowding_tolerance,
        choose_outside_corpus=args.choose_outside_corpus, library_only=args.library_only,
        command="python -m training.studies.retrieval " + " ".join(argv))
    try:
        metrics = run(cfg)
    except KeyboardInterrupt:
        print("interrupted; run the same command again to continue (finished pools are kept)", file=sys.stderr)
        return 130
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not cfg.library_only:
        print(report_text(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
