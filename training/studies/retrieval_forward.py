"""Does the forward model's spectrum score, added to the fingerprint score, rank a known true structure higher?

Issue #36 ranks a spectrum's library isomers together with its de novo candidates by the fingerprint score
(the log-likelihood of a candidate's Morgan bits under the encoder's posterior). This module measures a
second, spectrum-based score on the cached pools of a :mod:`training.studies.retrieval` run (``<pools>/pools.jsonl``:
FOLD=train spectra of structures the encoder never trained on, "train-unseen", 600 in the shipped choice, and
150 FOLD=val spectra): the **forward score** of :class:`engine.model.forward.ForwardScorer`, the
log-likelihood of the spectrum's peak formulas under the fragment-level forward model of
:mod:`training.encoder.forward` (trained on FOLD=train spectra of the encoder's licences, so it never saw a pool
truth: the run checks that)::

    Σ over the candidate's bond-cleavage fragment formulas f of [o_f log q_f + (1 − o_f) log(1 − q_f)]
    + (observed peak formulas no fragment explains) · log eps

The observed peak formulas are the encoder's peak tokens (:func:`engine.model.featurize.featurize_annotation`,
the forward model's training annotation settings) of the spectrum annotated with the *candidate's own*
formula (the same for every formula-track and de novo candidate; mass-track isomers of another formula get
their own annotation, so no candidate reads the truth's formula). A candidate the forward model cannot score
(an element the fragmenter does not support) takes the lowest forward score of its pool.

**Ranking.** Per track and setting (:func:`training.studies.retrieval.setting_rows`: library alone, library + de
novo, de novo alone, library with the truth removed + de novo), the first ``K`` candidates by fingerprint
score are re-ranked by ``fingerprint + w · forward`` above the rest, which keep their fingerprint order
(:class:`training.studies.retrieval.Variant` with the forward score in its fragment slot). ``w`` is chosen on
train-unseen only: the best mean joint Hit@1 over both tracks (then Hit@5, then the smaller ``w``) among the
weights that keep de novo Top-1/Top-10, libraries off and library on with the truth removed, at least at
``w = 0`` on both tracks (:func:`training.studies.retrieval_scorer.selection_key`); it is then reported on FOLD=val
with a paired bootstrap 95% interval of the Hit@1 gain over ``w = 0``. The shortlist re-ranked
by the forward score alone is reported beside the grid, never chosen. Forward scores are cached in
``<out>/forward_scores.jsonl`` (one line per pool and pass); a rerun, or a longer shortlist, computes only
what is missing (so ``--shard I/N`` lets N processes fill it side by side, and a run without it then reports; a
line cut short is computed again)::

    OMP_NUM_THREADS=1 python -m training.studies.retrieval_forward --forward runs/forward \\
        --pools runs/retrieval/v10 --out runs/retrieval_forward/v10 --shortlists 20 50

Outputs: ``<out>/metrics.json`` and ``<out>/report.md`` (also printed).

A second rule, for a suspect list's own order (its structures rank before every prediction, so de novo answers
are not at stake), chooses the weight of the best mean library-alone Hit@1 over both tracks. That rule needs
no de novo candidates: on pools of ``training.studies.retrieval --library-only`` (the same library candidates and
fingerprint scores, made in seconds) the report says so and ``--install`` only writes the suspect rule's
weight. ``--forward`` may name an ensemble (``training.encoder.forward ensemble``); ``--intensity-weight`` weighs the
observed peak formulas by their intensity (:class:`engine.model.forward.ForwardScorer`). ``--install
BUNDLE`` writes the forward model into a model bundle with what was chosen (``forward.json`` +
``forward.safetensors``, :class:`engine.model.forward.ForwardRanking`): scope ``all`` at the first rule's weight
when it is above 0, else scope ``suspects`` at the second rule's; nothing when both chose 0.

Its table: docs/evidence/suspect_order.md, "The fragment score: a suspect list's own order" and "Intensity weights
(adopted)", with the commands written there.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from training.studies.retrieval import (
    CROWDING_KS,
    HIT_KS,
    SETTINGS,
    TRACKS,
    Pool,
    Variant,
    _pct,
    ci95,
    crowding_summary,
    evaluate_pools,
    setting_rows,
    shortlist_mask,
    strip_private,
)
from training.studies.retrieval_scorer import de_novo_loss, pool_spectra, selection_key

WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
ALONE = "forward alone"  # a reference row: the shortlist re-ranked by the forward score alone (never chosen)
FIELD = "fragment_weight"  # the Variant slot the forward score fills
SETS = (("choose", "train", "train-unseen"), ("report", "val", "FOLD=val"))


# -- the forward score ------------------------------------------------------------------------------------
def forward_scorer(model, spectrum, eps: float, intensity_weight: float = 0.0):
    """:class:`engine.model.forward.ForwardScorer` of ``spectrum``, annotated as the forward model's training
    spectra were (the small encoder preset's settings)."""
    from engine.model.encoder import EncoderConfig
    from engine.model.forward import ForwardScorer, PeakSettings

    peaks = PeakSettings.of_encoder(EncoderConfig.from_preset("small"))
    return ForwardScorer(model, spectrum, peaks, eps, intensity_weight)


def shortlist_rows(pool: Pool, k: int) -> np.ndarray:
    """Pool rows any first-``k`` shortlist by fingerprint score can hold (every track and setting)."""
    need = np.zeros(len(pool.fingerprint), dtype=bool)
    for track in TRACKS:
        for setting in SETTINGS:
            rows, _, _ = setting_rows(pool, track, setting)
            need[rows[shortlist_mask(pool.fingerprint[rows], k)]] = True
    return np.flatnonzero(need)


def compute_scores(model, records: dict, spectra: dict, keys: Sequence[str], k: int, path: Path,
                   eps: float, intensity_weight: float = 0.0) -> dict[str, dict]:
    """Forward scores by pool key (candidate InChIKey first block -> score or None) of every candidate a
    first-``k`` shortlist can hold, appended to the jsonl ``path`` as they are done (what it holds is reused)."""
    import torch
    from tqdm import tqdm

    cache = read_score_cache(path)
    torch.set_num_threads(1)
    with torch.no_grad():
        for key in tqdm(keys, desc=f"forward scores (top {k})", unit="pool", file=sys.stderr, dynamic_ncols=True):
            rec = records[key]
            pool = Pool.from_record(rec)
            have = cache.get(key, {"fw": {}})["fw"]
            todo = [rec["candidates"][i] for i in shortlist_rows(pool, k) if rec["candidates"][i]["k"] not in have]
            if not todo:
                continue
            scorer = forward_scorer(model, spectra[key], eps, intensity_weight)
            t = time.perf_counter()
            fw = {}
            for c in todo:
                s = scorer.score(c["s"])
                fw[c["k"]] = None if s is None else round(s, 4)
            line = {"key": key, "k": k, "fw": fw, "seconds": time.perf_counter() - t}
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
            c = cache.setdefault(key, {"fw": {}, "seconds": 0.0})
            c["fw"].update(fw)
            c["seconds"] += line["seconds"]
    return cache


def read_score_cache(path: Path) -> dict[str, dict]:
    """A ``forward_scores.jsonl`` by pool key: ``{"fw": {candidate key: score or None}, "seconds": ...}``."""
    cache: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interrupted run
            c = cache.setdefault(rec["key"], {"fw": {}, "seconds": 0.0})
            c["fw"].update(rec["fw"])
            c["seconds"] += rec["seconds"]
    return cache


def library_hit1(pools: Sequence[Pool], k: int, w: float) -> dict[str, np.ndarray]:
    """Per track, each pool's library-alone Hit@1 (expected over ties) at shortlist ``k`` and weight ``w``."""
    res = evaluate_pools(replace(Variant("x", shortlist=k), **{FIELD: float(w)}), pools)
    return {t: np.asarray(res[t]["library"]["_top1"]) for t in TRACKS}


def with_forward(pool: Pool, rec: dict, fw: dict) -> Pool:
    """The pool with the forward score in its fragment slot; ``scored`` marks the candidates that have one
    (the Variant refuses a shortlist holding another). Uncomputable ones take the pool's lowest score."""
    keys = [c["k"] for c in rec["candidates"]]
    have = np.array([k in fw for k in keys])
    vals = np.array([np.nan if fw.get(k) is None else fw[k] for k in keys], dtype=np.float64)
    finite = np.isfinite(vals)
    low = float(vals[finite].min()) if finite.any() else 0.0
    vals[have & ~finite] = low
    return replace(pool, fragments=vals, scored=have)


# -- measuring --------------------------------------------------------------------------------------------
def measure(variant: Variant, pools: Sequence[Pool], today_res: dict, adducts: Sequence[str]) -> dict:
    """Hit@k per track and setting, the crowding check and the paired Hit@1 gain over ``today_res`` (the
    ``w = 0`` ranking's :func:`~training.studies.retrieval.evaluate_pools` on the same pools), as
    :func:`training.studies.retrieval_scorer.measure` lays them out; and, per precursor ion type (``adducts``, one
    per pool), the mean joint Hit@1 over the tracks and the de novo Top-1 with the libraries off."""
    res = evaluate_pools(variant, pools)
    out = strip_private(res)
    out["crowding"] = crowding_summary(res, today_res)
    out["today_crowded"] = {t: {f"top{k}": today_res[t]["crowded"][f"hit{k}"] for k in CROWDING_KS} for t in TRACKS}
    gains = {t: {s: np.subtract(res[t][s]["_top1"], today_res[t][s]["_top1"]) for s in ("library", "joint")}
             for t in TRACKS}
    out["hit1_gain_ci95"] = {t: {s: ci95(g) for s, g in gs.items()} for t, gs in gains.items()}
    mean_joint = np.mean([gains[t]["joint"] for t in TRACKS], axis=0)
    out["mean_joint_hit1_gain_ci95"] = ci95(mean_joint)
    out["spectra_up_down"] = {t: [int((gains[t]["joint"] > 0).sum()), int((gains[t]["joint"] < 0).sum())]
                              for t in TRACKS}
    out["mean_joint_hit1"] = float(np.mean([out[t]["joint"]["hit1"] for t in TRACKS]))
    out["de_novo_loss"] = de_novo_loss(out)
    out["n"] = len(pools)
    out["_library_top1"] = np.mean([res[t]["library"]["_top1"] for t in TRACKS], axis=0)  # dropped after use
    ion = np.asarray(adducts)
    out["by_adduct"] = {a: {"n": int((ion == a).sum()),
                            "joint_hit1": float(np.mean([np.asarray(res[t]["joint"]["_top1"])[ion == a]
                                                         for t in TRACKS])),
                            "denovo_off_top1": float(np.mean(np.asarray(res["formula"]["denovo"]["_top1"])[ion == a]))}
                        for a in sorted(set(adducts))}
    return out


def run_shortlist(k: int, weights: Sequence[float], sets: dict[str, list[Pool]], adducts: dict[str, list[str]]) -> dict:
    """The weight grid at shortlist ``k`` on both sets, and the weight chosen on train-unseen."""
    base = Variant(f"fingerprint + w·forward, top {k}", shortlist=k)
    today = {s: evaluate_pools(Variant("fingerprint"), pools) for s, pools in sets.items()}
    grid = {f"{w:g}": {s: measure(replace(base, **{FIELD: float(w)}), pools, today[s], adducts[s])
                       for s, pools in sets.items()} for w in weights}
    keyed = {w: selection_key(m["choose"]) + (-float(w),) for w, m in grid.items()}
    chosen = max(keyed, key=keyed.get)
    library = {w: library_key(m["choose"]) + (-float(w),) for w, m in grid.items()}
    alone = replace(base, fp_weight=0.0, **{FIELD: 1.0})
    grid[ALONE] = {s: measure(alone, pools, today[s], adducts[s]) for s, pools in sets.items()}
    chosen_library = max(library, key=library.get)
    base = {s: grid[chosen_library][s]["_library_top1"] for s in sets}
    for m in grid.values():  # how sure the library rule's choice is: every row paired against it
        for s in sets:
            m[s]["library_hit1_vs_chosen_ci95"] = ci95(m[s].pop("_library_top1") - base[s])
    return {"shortlist": k, "grid": grid, "chosen": chosen, "chosen_crowding_ok": bool(keyed[chosen][0]),
            "chosen_library": chosen_library}


def library_key(m: dict) -> tuple:
    """(mean library-alone Hit@1, then Hit@5, over the tracks): the rule for ranking a suspect list's own
    structures, which rank before every prediction, so de novo answers are not at stake."""
    return tuple(round(float(np.mean([m[t]["library"][f"hit{k}"] for t in TRACKS])), 9) for k in (1, 5))


def config_file(forward_dir: str | Path) -> str:
    """The forward model's config in ``forward_dir``: ``forward.json`` in a model bundle (whose ``config.json``
    is the bundle's), else ``config.json`` (a ``training.encoder.forward`` output folder)."""
    return "forward.json" if (Path(forward_dir) / "forward.json").is_file() else "config.json"


def forward_training_overlap(forward_dir: str, mgf: str | None, truths: set[str]) -> int | None:
    """How many pool truths have a spectrum the forward model trained on (FOLD=train, its licences)."""
    if not mgf:
        return None
    from training.studies.retrieval import mgf_labels

    cfg = json.loads((Path(forward_dir) / config_file(forward_dir)).read_text(encoding="utf-8"))
    training = cfg.get("training") or {}
    training = training.get("fit", training)  # a bundle's forward.json keeps the fit's record under "fit"
    members = training.get("members") or [training]  # an ensemble keeps each member's record
    per_member = [((m.get("metrics") or {}).get("config") or {}).get("licenses") for m in members]
    licenses = None if any(v is None for v in per_member) else sorted({x for v in per_member for x in v})
    fold, lic, keys = mgf_labels(mgf)
    seen = (fold == "train") & (np.isin(lic, list(licenses)) if licenses else True)
    return len(truths & set(keys[seen].tolist()))


# -- the report -------------------------------------------------------------------------------------------
def _hits(r: dict, track: str, setting: str) -> str:
    return " / ".join(_pct(r[track][setting][f"hit{k}"]) for k in HIT_KS)


def _crowd(r: dict, track: str, which: str) -> str:
    c = r["crowding"][track]
    return f"{_pct(c[which + '_top1'])} / {_pct(c[which + '_top10'])}"


def _ci(ci: Sequence[float]) -> str:
    return f"{100 * ci[0]:+.1f} … {100 * ci[1]:+.1f}"


def grid_table(result: dict, set_name: str) -> str:
    lines = [("| w | formula: library | formula: + de novo | mass: library | mass: + de novo | mean joint Hit@1 "
             "| joint Hit@1 gain vs w=0, 95% CI (formula; mass) | de novo off, formula | de novo on, truth out: "
             "formula | mass |"), "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for w, m in result["grid"].items():
        r = m[set_name]
        mark = " (chosen)" if w == result["chosen"] else ""
        cis = "; ".join(_ci(r["hit1_gain_ci95"][t]["joint"]) for t in TRACKS)
        lines.append(f"| {w}{mark} | " + " | ".join(_hits(r, t, s) for t in TRACKS for s in ("library", "joint"))
                     + f" | {_pct(r['mean_joint_hit1'])} | {cis} | {_crowd(r, 'formula', 'off')} | "
                     + " | ".join(_crowd(r, t, "on") for t in TRACKS) + " |")
    return "\n".join(lines)


def library_table(result: dict) -> str:
    """The library rule's measure (mean library-alone Hit@1 over the tracks) per weight on both sets, with the
    paired 95% interval of its difference from the weight the rule chose."""
    lines = ["| w | " + " | ".join(f"{label}: mean library Hit@1, vs chosen w (95% CI)" for _, _, label in SETS)
             + " |", "| --- |" + " --- |" * len(SETS)]
    for w, m in result["grid"].items():
        mark = " (chosen for suspects)" if w == result["chosen_library"] else ""
        cells = []
        for set_name, _, _ in SETS:
            r = m[set_name]
            mean = float(np.mean([r[t]["library"]["hit1"] for t in TRACKS]))
            ci = r.get("library_hit1_vs_chosen_ci95")
            cells.append(_pct(mean) + (f", {_ci(ci)}" if ci is not None and not mark else ""))
        lines.append(f"| {w}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def adduct_table(result: dict, set_name: str) -> str:
    """Mean joint Hit@1 over the tracks and de novo Top-1 (libraries off), per precursor ion type."""
    first = next(iter(result["grid"].values()))[set_name]["by_adduct"]
    lines = ["| w | " + " | ".join(f"{a} ({v['n']}): joint Hit@1, de novo Top-1" for a, v in first.items()) + " |",
             "| --- |" + " --- |" * len(first)]
    for w, m in result["grid"].items():
        b = m[set_name]["by_adduct"]
        lines.append(f"| {w} | " + " | ".join(f"{_pct(b[a]['joint_hit1'])}, {_pct(b[a]['denovo_off_top1'])}"
                                             for a in first) + " |")
    return "\n".join(lines)


def report_text(metrics: dict) -> str:
    run = metrics["run"]
    out = [(f"# Forward score on the retrieval pools ({run['n']['choose']} train-unseen, {run['n']['report']} "
           "FOLD=val spectra)"), "",
           ("Cells: Hit@1 / Hit@5 / Hit@20 (%) of the truth among its library track alone and with the de novo "
            "candidates; de novo Top-1 / Top-10 (%) with the libraries off and with the library on, truth removed. "
            "w = weight of the forward score added to the fingerprint score inside the top-K shortlist; w chosen "
            "on train-unseen."), ""]
    if run.get("library_only"):
        out += [("**Library-only pools** (`training.studies.retrieval --library-only`): no de novo candidates, so the "
                 "\"+ de novo\" cells repeat the library alone, the de novo cells are empty and the de novo rule is "
                 "not measured; only the library rule (a suspect list's own order) applies."), ""]
    for res in metrics["shortlists"]:
        k = res["shortlist"]
        for set_name, _, label in SETS[::-1]:
            out += [f"## Top {k}, {label}", "", grid_table(res, set_name), "", adduct_table(res, set_name), ""]
        ch = res["grid"][res["chosen"]]["report"]
        if not run.get("library_only"):  # library-only pools measure no de novo answers: no de novo rule
            out += [f"Chosen on train-unseen: w = {res['chosen']} (crowding kept: {res['chosen_crowding_ok']}); "
                    f"FOLD=val mean joint Hit@1 gain {_ci(ch['mean_joint_hit1_gain_ci95'])} points (95% CI); joint "
                    f"Hit@1 up/down spectra: " + "; ".join(f"{t} {u}/{d}" for t, (u, d) in ch["spectra_up_down"].items()),
                    ""]  # fmt: skip
        if "chosen_library" in res:
            out += [f"## Top {k}, the suspect rule", "", library_table(res), ""]
            lib = res["grid"][res["chosen_library"]]["report"]
            out += [f"Chosen on train-unseen for the library alone (a suspect list's own order): w = "
                    f"{res['chosen_library']}; FOLD=val library Hit@1 gain over w = 0, 95% CI: "
                    + "; ".join(f"{t} {_ci(lib['hit1_gain_ci95'][t]['library'])}" for t in TRACKS), ""]
    t = run["timing"]
    out += [(f"Forward score: {t['candidates']} candidates in {t['seconds']:.0f} s, {1000 * t['per_candidate']:.0f} ms "
            f"per candidate ({t['failed']} not computable), {run['machine']}, one thread. Pool truths among the "
            f"forward model's training structures: {run['truths_in_forward_training']}."), "",
            f"Command: `{run['command']}`", ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m training.studies.retrieval_forward", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--forward", default="runs/forward",
                   help="forward model folder (python -m training.encoder.forward fit or ensemble), or a model bundle "
                        "(its forward.json)")
    p.add_argument("--pools", default="runs/retrieval/v10", help="training.studies.retrieval output folder")
    p.add_argument("--out", default="runs/retrieval_forward/v10")
    p.add_argument("--shortlists", type=int, nargs="+", default=[20], help="shortlist lengths K")
    p.add_argument("--weights", type=float, nargs="+", default=list(WEIGHTS), help="forward-score weights w")
    p.add_argument("--n", type=int, default=0, help="first N pools of each set (0: all)")
    p.add_argument("--eps", type=float, default=0.01, help="probability of an observed peak no fragment explains")
    p.add_argument("--intensity-weight", type=float, default=0.0, metavar="A",
                   help="weigh each observed peak formula's term by 1 + A·sqrt(I/I_max) (default 0: every peak once, "
                        "whatever the model's saved ranking says; --install records A; a cache in --out holds the "
                        "scores of one A only)")
    p.add_argument("--mgf", help="labelled MGF, to check that no pool truth trained the forward model")
    p.add_argument("--shard", metavar="I/N",
                   help="only compute the forward scores of every N-th pool from the I-th (0-based) into the shared "
                   "cache, then stop: run N shards side by side, then once without --shard for the report")
    p.add_argument("--install", metavar="BUNDLE",
                   help="put the forward model into this model bundle (forward.json + forward.safetensors) with the "
                   "ranking chosen here: scope all at the weight the de novo rule chose, else scope suspects at the "
                   "weight the library-alone rule chose; nothing when both chose 0")
    p.add_argument("--install-shortlist", type=int, metavar="K",
                   help="the shortlist whose choices --install uses (one of --shortlists; default the first)")
    a = p.parse_args(argv)
    if a.install_shortlist is not None and a.install_shortlist not in a.shortlists:
        p.error(f"--install-shortlist {a.install_shortlist} is not one of --shortlists {a.shortlists}")
    if 0.0 not in a.weights:
        p.error("--weights must include 0 (the fingerprint ranking the others are measured against)")
    shard = parse_shard(a.shard) if a.shard else None
    if a.shard and shard is None:
        p.error(f"--shard must be I/N with 0 <= I < N, got {a.shard!r}")
    if shard and a.install:
        p.error("--shard only computes scores; --install goes with the run without --shard that reports")

    from engine.errors import ConfigError
    from engine.model.forward import load_forward

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        check_score_settings(out, {"eps": a.eps, "intensity_weight": a.intensity_weight})
    except ConfigError as e:
        p.error(str(e))
    model = load_forward(a.forward, config_file(a.forward))
    records, spectra = pool_spectra(Path(a.pools))
    keys = {name: [k for k, r in records.items() if r["fold"] == fold] for name, fold, _ in SETS}
    if a.n:
        keys = {name: ks[: a.n] for name, ks in keys.items()}
    order = [k for pair in zip(*keys.values()) for k in pair]  # interleaved: an interrupted run stays balanced
    order += [k for ks in keys.values() for k in ks[len(order) // 2 :]]
    cache: dict = {}
    for k in sorted(a.shortlists):
        todo = order if shard is None else order[shard[0] :: shard[1]]
        cache = compute_scores(model, records, spectra, todo, k, out / "forward_scores.jsonl", a.eps,
                               a.intensity_weight)
    if shard is not None:
        print(f"shard {a.shard}: forward scores of {len(order[shard[0] :: shard[1]])} pools in {out}")
        return 0
    sets = {name: [with_forward(Pool.from_record(records[k]), records[k], cache[k]["fw"]) for k in ks]
            for name, ks in keys.items()}
    adducts = {name: [records[k]["adduct"] for k in ks] for name, ks in keys.items()}
    shortlists = [run_shortlist(k, a.weights, sets, adducts) for k in a.shortlists]
    used = [cache[k] for k in order]
    n_cand = sum(len(c["fw"]) for c in used)
    seconds = sum(c["seconds"] for c in used)
    metrics = {
        "run": {"command": "OMP_NUM_THREADS=1 python -m training.studies.retrieval_forward " + " ".join(argv),
                "forward": a.forward, "pools": a.pools, "eps": a.eps, "intensity_weight": a.intensity_weight,
                "n": {s: len(v) for s, v in sets.items()},
                "library_only": library_only_pools(Path(a.pools)),
                "machine": f"{platform.processor() or platform.machine()}, {_cpu_name()}",
                "truths_in_forward_training": forward_training_overlap(
                    a.forward, a.mgf, {records[k]["truth"]["inchikey14"] for k in order}),
                "timing": {"candidates": n_cand, "seconds": seconds, "per_candidate": seconds / max(n_cand, 1),
                           "failed": sum(v is None for c in used for v in c["fw"].values())}},
        "shortlists": shortlists,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1), encoding="utf-8")
    text = report_text(metrics)
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    if a.install:
        k = a.install_shortlist or a.shortlists[0]
        print(install(model, next(r for r in shortlists if r["shortlist"] == k), a.install, metrics["run"]))
    return 0


def check_score_settings(out: Path, settings: dict) -> None:
    """Record the settings the score cache in ``out`` is computed with; refuse other settings there (the cached
    scores would be of another score)."""
    from engine.errors import ConfigError

    path = out / "score_settings.json"
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old != settings:
            raise ConfigError(f"{out} caches forward scores computed with {old}, not {settings}; use a new --out.")
    elif not (out / "forward_scores.jsonl").is_file() or settings == {"eps": 0.01, "intensity_weight": 0.0}:
        path.write_text(json.dumps(settings), encoding="utf-8")  # a cache from before this file used the defaults
    else:
        raise ConfigError(f"{out} caches forward scores of unrecorded settings (the defaults); use a new --out "
                          f"for {settings}.")  # fmt: skip


def parse_shard(text: str) -> tuple[int, int] | None:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``; None when it is not that."""
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        return None
    return (i, n) if 0 <= i < n else None


def library_only_pools(pools_dir: Path) -> bool:
    """Whether ``pools_dir`` holds pools of the library tracks alone (``training.studies.retrieval --library-only``)."""
    path = pools_dir / "run.json"
    if not path.is_file():
        return False
    return bool(json.loads(path.read_text(encoding="utf-8")).get("run_key", {}).get("library_only"))


def chosen_ranking(result: dict, library_only: bool = False, intensity_weight: float = 0.0):
    """The :class:`~engine.model.forward.ForwardRanking` one shortlist's choices give (see ``--install``), or None.
    ``library_only`` pools measure no de novo answers, so only the library rule counts there; the score's
    ``intensity_weight`` is the one the run measured."""
    from engine.model.forward import ForwardRanking

    k, a = result["shortlist"], float(intensity_weight)
    if float(result["chosen"]) > 0 and not library_only:
        return ForwardRanking(weight=float(result["chosen"]), shortlist=k, scope="all", intensity_weight=a)
    if float(result["chosen_library"]) > 0:
        return ForwardRanking(weight=float(result["chosen_library"]), shortlist=k, scope="suspects",
                              intensity_weight=a)  # fmt: skip
    return None


def install(model, result: dict, bundle: str, run: dict) -> str:
    """Write the forward model with its chosen ranking into ``bundle`` and record both files' checksums."""
    import tempfile

    from engine.model.bundle import add_bundle_file

    ranking = chosen_ranking(result, bool(run.get("library_only")), run.get("intensity_weight", 0.0))
    if ranking is None:
        return f"not installed: both rules chose w = 0 at top {result['shortlist']}"
    old = json.loads((Path(bundle) / "forward.json").read_text(encoding="utf-8")).get("ranking", {}) if (
        Path(bundle) / "forward.json").is_file() else {}
    model.ranking = ranking
    training = json.loads((Path(run["forward"]) / config_file(run["forward"])).read_text(encoding="utf-8")).get(
        "training")  # fmt: skip
    training = (training or {}).get("fit", training)  # from a bundle: its fit's record, not the old choice
    with tempfile.TemporaryDirectory() as tmp:
        model.save(tmp, extra={"fit": training, "ranking_chosen_by": run["command"]}, config_file="forward.json")
        add_bundle_file(bundle, Path(tmp) / "forward.safetensors")
        add_bundle_file(bundle, Path(tmp) / "forward.json")
    note = ""
    if float(old.get("analog_weight", 0.0)) > 0:  # chosen on top of the old forward ranking: choose it again
        note = ("; the analog weight chosen with the old ranking is dropped: run python -m training.studies.retrieval_analogs "
                f"--install {bundle} again")
    return f"installed into {bundle}: {ranking}{note}"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
