"""Does likeness to the compounds of a spectrum's analog hits order a suspect list better?

A suspect list's structures rank before every prediction, so its own order decides the answer
(docs/evidence/suspect_order.md). The shipped order is the fingerprint score plus the bundle's fragment score
(``forward.json``'s ``ranking``, chosen by :mod:`training.studies.retrieval_forward`). This module measures a third term
on the same cached pools of a :mod:`training.studies.retrieval` run: the **analog score** of
:class:`engine.elucidation.ranking.AnalogRerank`,

    max over the query's first H analog hits i of similarity_i × Tanimoto(candidate, structure_i)

where the hits are the spectrum's Flash entropy hybrid search (fragments and neutral losses, any precursor;
:func:`engine.elucidation.libraries.search_analogs`) in the bundled spectral library (46,679 FOLD=train MassBank
spectra). A pool's own true structure is taken out of its hits (the benchmark asks about a structure with no
reference spectrum; one with a reference would be identified by the identity search), so the score says how
much a suspect looks like the *other* compounds whose spectra resemble the query's.

**Ranking**, as the app does it (:meth:`engine.elucidation.ranking.CandidatePool.rank`): per track (formula:
the truth among up to 255 corpus structures of its formula; mass: those within 10 ppm), every structure gets
its fingerprint score plus ``v ·`` its analog score; then the first ``shortlist`` by that get ``w ·`` their
forward score and the others ``w ·`` the lowest of those (the bundle's ``w``, shortlist and intensity weight).
Forward scores are reused from a ``training.studies.retrieval_forward`` run (``--scores``) and the missing ones computed
into ``<out>/forward_scores.jsonl`` (each ``v`` shortlists other structures). Hit@k is expected over ties.

**Choice.** ``(H, v)`` is the best mean library-alone Hit@1 over both tracks on train-unseen (FOLD=train spectra
of structures the encoder never trained on), then Hit@5, then the smaller ``v`` and ``H``: the rule
:mod:`training.studies.retrieval_forward` uses for a suspect list's order. FOLD=val is reported, with the paired
bootstrap 95% interval of the gain over ``v = 0``, and, as a control, the same setting with each spectrum given
the hits of another spectrum of its set (a gain there would be a prior on structures, not evidence from the
spectrum)::

    python -m training.studies.retrieval_analogs --pools runs/retrieval/v10_lib_all \\
        --scores runs/retrieval_forward/all_int4 --out runs/retrieval_analogs/v10 --fresh 150 \\
        --install resources/default_model

``--fragment-weights W ... --fragment-shortlists K ...`` also chooses the fragment term's ``w`` and shortlist
again, together with ``v`` at the chosen H, by the same rule (they were chosen before the analog term existed) and
reports the choice against the bundle's setting with paired intervals on both sets; it never installs it.

On pools with de novo candidates (a ``training.studies.retrieval`` run without ``--library-only``) it also chooses the
weight of every other candidate, the bundled library's structures and the predictions (:func:`others_rule`: the
de novo rule of :mod:`training.studies.retrieval_forward`, which refuses any loss of de novo answers), and checks the
bundle's confidence on the reordered de novo rankings when that weight is above 0.

Outputs: ``<out>/metrics.json`` and ``<out>/report.md`` (also printed); the hits of every pool are cached in
``<out>/hits.json``. ``--install BUNDLE`` writes ``analog_weight`` and ``analog_hits`` (and, from pools with de
novo candidates, ``analog_weight_others``) into the bundle's ``forward.json`` ranking (nothing when the suspect
rule chose ``v = 0``).

Its table: docs/evidence/suspect_order.md, "The analog score: likeness to the compounds of similar spectra", with
the commands written there.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from training.studies.retrieval import TRACKS, Pool
from training.studies.retrieval_forward import (
    ALONE,
    SETS,
    _cpu_name,
    check_score_settings,
    config_file,
    grid_table,
    library_only_pools,
    read_score_cache,
    run_shortlist,
    with_forward,
)
from training.studies.retrieval_scorer import pool_spectra
from training.studies.analog_scores import (
    KS,
    analog_scores,
    choose,
    choose_fragment,
    complete_scores,
    fingerprint,
    fragment_grid,
    hits_table,
    mean_hit1,
    missing,
    paired,
    pool_hits,
    suspect_scores,
)
from training.studies.analog_scores import _best, _bits, hit_at  # noqa: F401  (re-exported)

HITS = (5, 10, 20, 30)
WEIGHTS = (0.0, 80.0, 160.0, 320.0, 640.0, 1280.0, 2560.0, 5120.0)


# -- report -----------------------------------------------------------------------------------------------
def _cell(table: dict, t: str) -> str:
    return " / ".join(f"{100 * table[t][:, i].mean():.1f}" for i in range(len(KS)))


def report_text(m: dict) -> str:
    run = m["run"]
    out = ["# Analog score for a suspect list's order", "",
           (f"Pools `{run['pools']}` ({', '.join(f'{s}: {n}' for s, n in run['n'].items())}); the bundle's "
            f"forward score at w = {run['forward_weight']:g}, shortlist {run['shortlist']}, intensity weight "
            f"{run['intensity_weight']:g}; spectral libraries: {', '.join(run['libraries'])}; {run['machine']}."),
           "",
           f"Chosen on train-unseen: **H = {m['chosen']['hits']}, v = {m['chosen']['weight']:g}**.", "",
           "Library-alone Hit@1 / Hit@5 / Hit@20 (%), formula | mass track:", "",
           "| set | H | v | formula | mass | mean Hit@1 |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for s in m["sets"]:
        for row in s["grid"]:
            out.append(f"| {s['label']} | {row['hits']} | {row['weight']:g} | {row['formula']} | {row['mass']} | "
                       f"{row['mean_hit1']:.1f} |")
    out += ["", "Chosen setting against v = 0, paired bootstrap 95% interval of the Hit@1 gain (points):", ""]
    for s in m["sets"]:
        for part in s["gains"]:
            cells = "; ".join(f"{t} {g[0]:+.1f} ({g[1]:+.1f} … {g[2]:+.1f})" for t, g in part["hit1"].items())
            out.append(f"- {s['label']}, {part['label']}: {cells}")
        c = s["control"]
        out.append(f"- {s['label']}, control (another spectrum's hits): formula {c['formula']}, mass {c['mass']}")
    if m.get("refit"):
        r = m["refit"]
        w, n, v = r["chosen"]
        out += ["", "## The fragment weight and shortlist, chosen again with the analog term (reported, not installed)",
                "", (f"The same rule over w, shortlist and v at H = {m['chosen']['hits']} chooses **w = {w:g}, "
                     f"shortlist {n}, v = {v:g}** (every setting's mean Hit@1 in metrics.json):"), "",
                "| set | w | shortlist | v | formula | mass | mean Hit@1 |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for s in r["sets"]:
            out += [f"| {s['label']} | {row['setting'][0]:g} | {row['setting'][1]} | {row['setting'][2]:g} | "
                    f"{row['formula']} | {row['mass']} | {row['mean_hit1']:.1f} |" for row in s["rows"]]
        out += ["", "Against the bundle's, paired bootstrap 95% interval of the Hit@1 gain (points):", ""]
        out += [f"- {s['label']}: " + "; ".join(f"{t} {g[0]:+.1f} ({g[1]:+.1f} … {g[2]:+.1f})"
                                                for t, g in s["gain"].items()) for s in r["sets"]]
    if m.get("others"):
        o = m["others"]
        kept = "" if o["crowding_ok"] else " (no weight keeps the de novo answers)"
        out += ["", (f"## Every other candidate (the bundled library's, the predictions): v = {o['chosen']:g} chosen "
                     f"by the de novo rule{kept}"), "",
                ("Hit@1 / Hit@5 / Hit@20 (%) of the truth, its library track alone and with the de novo candidates; "
                 "de novo Top-1 / Top-10 with the structure libraries off (the spectral library on) and on (truth "
                 "out), against the fingerprint score with no library at v = 0:")]
        for label, table in o["tables"].items():
            out += ["", f"{label}:", "", table]
        if o.get("confidence"):
            out += ["", "The bundle's confidence of the de novo rank 1 (B = 100, structure libraries off), by ranking:",
                    "", "| set | ranking | spectra | Top-1 % | mean confidence % | Brier (base rate) |",
                    "| --- | --- | ---: | ---: | ---: | ---: |"]
            for label, by in o["confidence"].items():
                out += [f"| {label} | {name} | {r['n']} | {r['top1']:.1f} | {r['mean_confidence']:.1f} | "
                        f"{r['brier']:.4f} ({r['brier_base_rate']:.4f}) |" for name, r in by.items()]
    out += ["", f"Analog search: {run['search_seconds_per_spectrum'] * 1000:.0f} ms per spectrum (H + 10 hits).",
            "", f"Command: `{run['command']}`", ""]
    return "\n".join(out)


def refit_report(grids: dict[str, dict], shipped: tuple[float, int, float], choose_label: str) -> dict:
    """The re-choice of ``(w, shortlist, v)`` on ``choose_label``'s grid against ``shipped`` (the bundle's ``w``
    and shortlist at the chosen ``v``), per set: both rows and the paired interval of the Hit@1 gain."""
    chosen = choose_fragment(grids[choose_label])
    sets = []
    for label, grid in grids.items():
        rows = [{"setting": list(g), "formula": _cell(grid[g], "formula"), "mass": _cell(grid[g], "mass"),
                 "mean_hit1": 100 * mean_hit1(grid[g])} for g in dict.fromkeys([shipped, chosen])]
        sets.append({"label": label, "rows": rows, "gain": paired(grid[shipped], grid[chosen])})
    grid_rows = [{"setting": list(g), "mean_hit1": 100 * mean_hit1(t)} for g, t in grids[choose_label].items()]
    return {"chosen": list(chosen), "shipped": list(shipped), "sets": sets, "grid": grid_rows}


def install(bundle: str, hits: int, weight: float, command: str, others_weight: float | None = None) -> str:
    """Write ``analog_hits`` and ``analog_weight`` (and ``analog_weight_others`` when measured) into the forward
    ranking of ``bundle``'s ``forward.json``."""
    import tempfile

    from engine.model.bundle import add_bundle_file
    from engine.model.forward import load_forward

    model = load_forward(bundle, "forward.json")
    training = json.loads((Path(bundle) / "forward.json").read_text(encoding="utf-8")).get("training") or {}
    model.ranking = replace(model.ranking, analog_weight=float(weight), analog_hits=int(hits))
    if others_weight is not None:
        model.ranking = replace(model.ranking, analog_weight_others=float(others_weight))
    with tempfile.TemporaryDirectory() as tmp:
        model.save(tmp, extra={**training, "analogs_chosen_by": command}, config_file="forward.json")
        add_bundle_file(bundle, Path(tmp) / "forward.safetensors")
        add_bundle_file(bundle, Path(tmp) / "forward.json")
    return f"installed into {bundle}: {model.ranking}"


ALL = 10**9  # a shortlist longer than any pool: the analog score is every candidate's


def others_rule(records: dict, analog: dict[str, np.ndarray], weights: Sequence[float]) -> dict:
    """The analog weight of every candidate that is not a suspect (the bundled library's, the predictions), by
    :mod:`training.studies.retrieval_forward`'s de novo rule on pools with de novo candidates: the best mean joint Hit@1
    over both tracks among the weights that lower no de novo Top-1/Top-10 (with the structure libraries off and
    with them on, the truth taken out) below the fingerprint score's. The analog score fills the forward score's
    slot of those pools for every candidate; "libraries off" there still has the spectral library (the analog
    score's source), and the fingerprint score it is held against is ranking with no library at all."""
    sets = {}
    adducts = {}
    for name, fold, _ in SETS:
        ks = [k for k, r in records.items() if r["fold"] == fold]
        sets[name] = [with_forward(Pool.from_record(records[k]), records[k],
                                   {c["k"]: float(v) for c, v in zip(records[k]["candidates"], analog[k])}) for k in ks]
        adducts[name] = [records[k]["adduct"] for k in ks]
    result = run_shortlist(ALL, weights, sets, adducts)
    result["grid"].pop(ALONE, None)
    return {"chosen": float(result["chosen"]), "crowding_ok": result["chosen_crowding_ok"],
            "tables": {label: grid_table(result, name) for name, _, label in SETS}}


def confidence_check(confidence, records: dict, analog: dict[str, np.ndarray], weight: float) -> dict:
    """Does the bundle's confidence (:mod:`engine.model.confidence`, fitted on fingerprint-ranked pools) still
    hold when the analog term reorders the de novo candidates? Per set, the rank 1 of each pool's de novo
    candidates (B = 100) by fingerprint score and by fingerprint + ``weight ·`` analog score: Top-1, the mean
    confidence, and the Brier score against always predicting the set's Top-1."""
    from engine.model.confidence import confidence_features

    out = {}
    for _, fold, label in SETS:
        rows: dict[str, list] = {"fingerprint score": [], f"+ {weight:g} · analog score": []}
        for k, rec in records.items():
            drawn = [i for i, c in enumerate(rec["candidates"]) if c.get("n", 0) > 0]
            if rec["fold"] != fold or not drawn:
                continue
            cands = [rec["candidates"][i] for i in drawn]
            fp = np.array([c["fp"] for c in cands])
            counts = np.array([c["n"] for c in cands])
            keys = np.array([c["k"] for c in cands])
            for (name, rows_), w in zip(rows.items(), (0.0, weight)):
                order = np.lexsort((keys, -(fp + w * analog[k][drawn])))
                features = confidence_features(counts[order][:10], fp[order][:10], 100, int(counts.sum()), len(cands))
                rows_.append((confidence.probability(features), keys[order[0]] == rec["truth"]["inchikey14"]))
        out[label] = {}
        for name, r in rows.items():
            p, y = np.array([x[0] for x in r]), np.array([x[1] for x in r], dtype=np.float64)
            out[label][name] = {"n": len(r), "top1": 100 * float(y.mean()), "mean_confidence": 100 * float(p.mean()),
                                "brier": float(np.mean((p - y) ** 2)), "brier_base_rate": float(y.var())}
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.studies.retrieval_analogs", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pools", required=True,
                   help="training.studies.retrieval output folder (--library-only pools measure the suspects' weight only)")
    p.add_argument("--scores",
                   help="a training.studies.retrieval_forward output folder at the bundle's intensity weight: its forward "
                        "scores are reused (the ones missing are computed into --out)")
    p.add_argument("--bundle", default="resources/default_model",
                   help="model bundle whose forward ranking (w, shortlist) the analog term joins")
    p.add_argument("--spectral-library", action="append", default=[], metavar="FILE",
                   help="search these spectral libraries (MSP/MGF) instead of the bundled one (repeatable)")
    p.add_argument("--out", default="runs/retrieval_analogs/v10")
    p.add_argument("--hits", type=int, nargs="+", default=list(HITS), help="analog hits H")
    p.add_argument("--weights", type=float, nargs="+", default=list(WEIGHTS), help="analog-score weights v")
    p.add_argument("--fresh", type=int, default=0, help="also report the FOLD=val pools after the first N")
    p.add_argument("--seed", type=int, default=0, help="seed of the control's shuffle and of nothing else")
    p.add_argument("--install", metavar="BUNDLE", help="write the chosen H and v into this bundle's forward.json")
    p.add_argument("--fragment-weights", type=float, nargs="+", metavar="W",
                   help="also re-choose the fragment weight w (these and the bundle's), its shortlist and v together, "
                        "at the chosen H, by the same rule: reported, never installed")
    p.add_argument("--fragment-shortlists", type=int, nargs="+", metavar="K",
                   help="fragment shortlists of that re-choice (these and the bundle's)")
    return p


class _ForwardScores:
    """The pools' forward scores: the cached ones merged (``fw``), the missing ones computed into the first cache."""

    def __init__(self, model, records: dict, spectra: dict, caches: list[Path]):
        self.model, self.records, self.spectra, self.caches = model, records, spectra, caches
        self.fw = self._merged()

    def _merged(self) -> dict[str, dict]:
        merged: dict[str, dict] = {k: {} for k in self.records}
        for path in reversed(self.caches):
            for k, c in read_score_cache(path).items():
                if k in merged:
                    merged[k].update(c["fw"])
        return merged

    def complete(self, need: dict[str, set]) -> None:
        from engine.model.forward import UNEXPLAINED_EPS

        complete_scores(self.model, self.records, self.spectra, need, self.caches[0], UNEXPLAINED_EPS,
                        self.model.ranking.intensity_weight)
        self.fw = self._merged()


def _analog_sets(a: argparse.Namespace, scores: _ForwardScores, analog: dict, keys: dict[str, list[str]],
                 hits: dict) -> tuple[int, float, list[dict]]:
    """The grid of analog hits H and weights v on every set, the (H, v) chosen on the first, and each set's rows,
    paired gains and shuffled-hits control at that choice."""
    records, ranking = scores.records, scores.model.ranking
    rng = random.Random(a.seed)
    shuffled = {}  # the control: each pool scored with the hits of another pool of its set
    for ks in keys.values():
        other = ks[:]
        rng.shuffle(other)
        shuffled.update({k: o for k, o in zip(ks, other)})
    need = {k: set() for k in records}
    for n in a.hits:
        for v in a.weights:
            for k, rec in records.items():
                need[k] |= missing(rec, scores.fw[k], ranking.shortlist, fingerprint(rec) + v * analog[n][k])
    scores.complete(need)

    def scores_at(n: int, v: float, analogs: dict[str, np.ndarray]) -> dict[str, dict]:
        return {k: suspect_scores(rec, scores.fw[k], ranking.weight, ranking.shortlist, analogs[k], v)
                for k, rec in records.items()}

    grids = {label: {} for label in keys}
    for n in a.hits:
        for v in a.weights:
            at = scores_at(n, v, analog[n])
            for label, ks in keys.items():
                grids[label][(n, v)] = hits_table(at, records, ks)
    choose_label, report_label = (label for _, _, label in SETS)
    n_best, v_best = choose(grids[choose_label])
    control = {k: analog_scores(records[k], hits[o], n_best) for k, o in shuffled.items()}
    scores.complete({k: missing(rec, scores.fw[k], ranking.shortlist, fingerprint(rec) + v_best * control[k])
                     for k, rec in records.items()})
    control_scores = scores_at(n_best, v_best, control)
    sets = []
    for label, ks in keys.items():
        grid = grids[label]
        rows = [{"hits": n, "weight": v, "formula": _cell(grid[(n, v)], "formula"), "mass": _cell(grid[(n, v)], "mass"),
                 "mean_hit1": 100 * mean_hit1(grid[(n, v)])}
                for (n, v) in [*((n_best, v) for v in a.weights), *((n, v_best) for n in a.hits if n != n_best)]]
        parts = [("all", slice(None))]
        if label == report_label and a.fresh:
            parts.append((f"after the first {a.fresh}", slice(a.fresh, None)))
        gains = [{"label": f"{name} ({len(ks[sel])})",
                  "hit1": paired({t: grid[(n_best, 0.0)][t][sel] for t in TRACKS},
                                 {t: grid[(n_best, v_best)][t][sel] for t in TRACKS})} for name, sel in parts]
        table = hits_table(control_scores, records, ks)
        sets.append({"label": label, "grid": rows, "gains": gains, "control": {t: _cell(table, t) for t in TRACKS}})
    return n_best, v_best, sets


def _refit(a: argparse.Namespace, scores: _ForwardScores, analog: dict, keys: dict[str, list[str]],
           v_best: float) -> dict:
    """The fragment term's setting (w, shortlist) chosen again together with the analog weight: reported only."""
    records, ranking = scores.records, scores.model.ranking
    ws = sorted({ranking.weight, *(a.fragment_weights or ())})
    lengths = sorted({ranking.shortlist, *(a.fragment_shortlists or ())})
    scores.complete({k: set().union(*(missing(rec, scores.fw[k], n, fingerprint(rec) + v * analog[k])
                                      for n in lengths for v in a.weights)) for k, rec in records.items()})
    choose_label = SETS[0][2]
    return refit_report(fragment_grid(records, scores.fw, analog, keys, ws, lengths, a.weights),
                        (ranking.weight, ranking.shortlist, v_best), choose_label)


def _others(a: argparse.Namespace, records: dict, analog: dict) -> dict:
    """The weight of the analog term on every other candidate (pools with de novo candidates), and the confidence
    model checked with it."""
    from engine.model.bundle import load_bundle

    others = others_rule(records, analog, a.weights)
    confidence = load_bundle(a.bundle, device="cpu").confidence
    if confidence is not None and others["chosen"] > 0:
        others["confidence"] = confidence_check(confidence, records, analog, others["chosen"])
    return others


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = _parser()
    a = p.parse_args(argv)
    if 0.0 not in a.weights:
        p.error("--weights must include 0 (the shipped order the others are measured against)")

    from engine.errors import ConfigError
    from engine.model.forward import UNEXPLAINED_EPS, load_forward
    from engine.spectral_library import load_bundled_spectral_library, load_spectral_library

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model = load_forward(a.bundle, config_file(a.bundle))
    ranking = model.ranking
    settings = {"eps": UNEXPLAINED_EPS, "intensity_weight": ranking.intensity_weight}
    caches = [out / "forward_scores.jsonl"]
    try:
        check_score_settings(out, settings)
        if a.scores:
            check_score_settings(Path(a.scores), settings)
            caches.append(Path(a.scores) / "forward_scores.jsonl")
    except ConfigError as e:
        p.error(f"{e} (the bundle ranks with {settings})")
    records, spectra = pool_spectra(Path(a.pools))
    libraries = ([load_spectral_library(f) for f in a.spectral_library] if a.spectral_library
                 else [load_bundled_spectral_library()])
    hits, search_seconds = pool_hits(libraries, records, spectra, max(a.hits), out / "hits.json")
    analog = {n: {k: analog_scores(rec, hits[k], n) for k, rec in records.items()} for n in a.hits}
    keys = {label: [k for k, r in records.items() if r["fold"] == fold] for _, fold, label in SETS}
    scores = _ForwardScores(model, records, spectra, caches)
    n_best, v_best, sets = _analog_sets(a, scores, analog, keys, hits)
    refit = (_refit(a, scores, analog[n_best], keys, v_best)
             if a.fragment_weights or a.fragment_shortlists else None)
    # pools with de novo candidates: the weight of every other candidate
    others = None if library_only_pools(Path(a.pools)) else _others(a, records, analog[n_best])
    metrics = {
        "run": {"command": "python -m training.studies.retrieval_analogs " + " ".join(argv), "pools": a.pools,
                "scores": a.scores, "bundle": a.bundle, "forward_weight": ranking.weight,
                "shortlist": ranking.shortlist, "intensity_weight": ranking.intensity_weight,
                "libraries": [f"{lib.name} ({len(lib)} spectra)" for lib in libraries],
                "n": {label: len(ks) for label, ks in keys.items()},
                "machine": f"{platform.processor() or platform.machine()}, {_cpu_name()}",
                "search_seconds_per_spectrum": search_seconds},
        "chosen": {"hits": n_best, "weight": v_best},
        "sets": sets,
        "refit": refit,
        "others": others,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1), encoding="utf-8")
    text = report_text(metrics)
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    if a.install:
        others_weight = others["chosen"] if others is not None else None
        print(install(a.install, n_best, v_best, metrics["run"]["command"], others_weight) if v_best > 0
              else "not installed: the rule chose v = 0")
    return 0

if __name__ == "__main__":
    sys.exit(main())
