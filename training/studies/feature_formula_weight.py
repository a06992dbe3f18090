"""Should a feature's ranking weigh each candidate by its formula's probability?

``msgpt predict`` runs a spectrum without a given formula for its best 3 formula candidates (each with a probability
P(formula) from :func:`engine.formulas.candidates.rank_formulas`, ``formula_score``) and for the formulas the
libraries add (the mass track of the structure libraries and the formula of an identification: ``formula_source``
set, no probability), and ranks all candidates of the feature together
(:func:`engine.insight.identification.feature_ranks`): rank groups first, then the ranking's score ``c.score``.
Those scores are not comparable across formulas (each is under its own formula's posterior, tens of nats apart; a
small formula scores higher), so a structure of a formula of P < 0.005 can come first. This study measures the key
``c.score + w · log(max(P(formula), eps))`` of the rest (rank group 2; the suspects keep their score, as in the
engine: no suspect list here) for several ``w`` (``w = 0``: the score alone, the rule before), on the same pipeline
results:

* ``collect``: the FOLD=val spectra that ``benchmarks/known_compounds.py`` selects (its loader: the first
  ``--positive`` [M+H]+ and ``--negative`` [M-H]- records, one per structure, none in a shipped library) go through
  ``msgpt predict`` once, formula hidden, as a user runs it (bundled model, B = 100, best 3 formulas, the bundled
  libraries, seed 0, one thread). Each feature's formula runs are kept (the first ``KEEP`` candidates of each: its
  InChIKey first block, formula, score, rank group, reference similarity; the run's formula, ion type, source and
  P(formula)), with the formula table's probability of every formula (what a library-added run would get), one
  JSON line a spectrum in ``--cache`` (resumable).
* ``evaluate``: for every ``w`` and each rule for a library-added run (``best``: the probability of the feature's
  best formula candidate; ``none``: no term, log 1; ``eps``: the floor; ``table``: the probability the formula
  table gives its formula, ``eps`` when absent), the feature Top-1 / Top-5 / Top-10 of the truth (first InChIKey
  block), how often rank 1's formula is the true formula, how often rank 1 comes from a formula with P < 0.05 (the
  table's P for a library-added run), and a paired bootstrap 95% interval of the Top-1 difference against
  ``w = 0``. ``formula order`` (P first, then score; ``table``) is printed for reference. The first ``KEEP``
  candidates of a run suffice for Top-10: a constant per run keeps a run's own order.

``eps`` = 1e-4: ``formula_score`` is written with 4 decimals. Chosen from the table (the engine's
``engine.insight.identification.FORMULA_WEIGHT`` = 16, library-added runs at the floor, ``eps``): the largest ``w``
whose Top-1 / Top-5 / Top-10 are no lower than with 0 (32 moved one truth from rank 2 to 35)::

    python -m training.studies.feature_formula_weight collect --mgf ../shared/data/massbank_dev.mgf.gz \\
        --positive 300 --negative 200 --cache /tmp/feature_formula_weight.jsonl
    python -m training.studies.feature_formula_weight evaluate --cache /tmp/feature_formula_weight.jsonl

(409 of the 500 spectra run: the others have a precursor written to 0.01 Da, a neutral mass above 1000 Da or no
formula within the tolerance, which ``msgpt predict`` skips without a formula; 20 min on one thread.)

Its table: docs/evidence/feature_formula_weight.md.

``budget`` (issue #58) asks which of those runs are worth their samples: for each threshold, the formula runs below
it that are not the feature's best lose their de novo candidates (their library structures stay, as
engine.elucidation.formula_runs runs them), and the engine's feature ranking (``FORMULA_WEIGHT``, library-added runs
at the floor) gives Top-1/5/10 against sampling every run, paired, with the share of the pipeline's seconds the
unsampled runs took; ``--measured`` compares a second ``collect`` made with the budget on (msgpt predict's own run,
not the simulation). A cache collected before candidates carried their sample count and origin must be collected
again. Its table: docs/evidence/formula_run_budget.md::

    python -m training.studies.feature_formula_weight collect --min-formula-p 0 \\
        --cache /tmp/feature_formula_weight.jsonl
    python -m training.studies.feature_formula_weight collect --cache /tmp/feature_formula_weight_budget.jsonl
    python -m training.studies.feature_formula_weight budget --cache /tmp/feature_formula_weight.jsonl \\
        --measured /tmp/feature_formula_weight_budget.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.known_compounds import field, select, shipped_keys

#: 0-2 asked first; above, since scores of different formulas differ by tens of nats
WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
EPS = 1e-4  # formula_score is written with 4 decimals: a probability below it reads 0.0000
LOW = 0.05  # a formula this improbable is "unlikely" in the table
KEEP = 50  # candidates kept per formula run
RULES = ("best", "none", "eps", "table")  # what a library-added run (no probability) gets


# --------------------------------------------------------------------------------------------------- collect
def _norm(formula: str) -> str:
    from engine.chem.formula import normalize_formula

    try:
        return normalize_formula(formula) if formula else ""
    except Exception:  # noqa: BLE001 - a formula the parser refuses stays as written
        return formula


def _run_record(result) -> dict:
    md = result.spectrum.metadata
    score = md.get("formula_score", "")
    return {"formula": _norm(result.spectrum.formula or ""), "adduct": result.spectrum.adduct or "",
            "source": md.get("formula_source", ""), "rank": md.get("formula_rank", ""),
            "p": float(score) if score not in (None, "") else None,
            "seconds": result.seconds, "samples": result.new_samples,
            "cands": [[c.inchikey14, _norm(c.formula), None if c.score != c.score else float(c.score), c.rank_group,
                       None if c.spectral is None else float(c.spectral.similarity), c.count, c.origin,
                       bool(c.suspect)]
                      for c in result.candidates[:KEEP]]}


def collect(a: argparse.Namespace) -> int:
    """Run ``msgpt predict`` (formula hidden) on the selected spectra, keeping each feature's runs in ``--cache``."""
    from engine.files import export
    import engine.formulas.candidates as fc
    from engine.cli import main as msgpt

    records = select(a.mgf, a.positive, a.negative)
    keys = {field(r, "INCHIKEY")[:14] for r in records}
    overlap = keys & shipped_keys()
    if overlap:
        raise SystemExit(f"{len(overlap)} selected structures are in a shipped library: not held out")
    truth = {field(r, "TITLE"): {"truth": field(r, "INCHIKEY")[:14], "formula": _norm(field(r, "FORMULA")),
                                 "adduct": field(r, "ADDUCT")} for r in records}
    done = set()
    if a.cache.exists():
        for line in a.cache.read_text(encoding="utf-8").splitlines():
            try:
                done.add(json.loads(line)["id"])
            except (json.JSONDecodeError, KeyError):
                continue  # a line cut by an interrupted run
    todo = [r for r in records if field(r, "TITLE") not in done]
    print(f"{len(records)} spectra selected, {len(done)} already in {a.cache}, {len(todo)} to run", file=sys.stderr)
    if not todo:
        return 0
    tables: dict[str, dict[str, float]] = {}  # spectrum id -> "formula ion_type" -> P of the formula table
    rank_formulas, write_feature = fc.rank_formulas, export.CandidateWriter.write_feature

    def ranking(spectrum, **kw):
        table = rank_formulas(spectrum, **kw)
        tables[spectrum.id] = {f"{_norm(c.formula)} {c.ion_type}": c.probability for c in table.candidates
                               if c.probability >= EPS / 10}
        return table

    def keep(self, results):
        sid = results[0].spectrum.id
        rec = {"id": sid, **truth.get(sid, {}), "table": tables.pop(sid, {}), "runs": [_run_record(r) for r in results],
               "seconds": sum(r.seconds for r in results)}
        with open(a.cache, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
        return write_feature(self, results)

    fc.rank_formulas, export.CandidateWriter.write_feature = ranking, keep
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            query = Path(tmp) / "query.mgf"  # the formula hidden, as in a real run; the SMILES stays
            query.write_text("".join(line for r in todo for line in r if not line.startswith("FORMULA=")))
            rc = msgpt(["predict", str(query), "-o", str(Path(tmp) / "out.csv"), "-q", "--seed", "0",
                        "--top", str(KEEP), "--threads", "1",
                        *([] if a.min_formula_p is None else ["--min-formula-p", str(a.min_formula_p)]),
                        *(["--full-formula-runs"] if a.full_formula_runs else [])])
    finally:
        fc.rank_formulas, export.CandidateWriter.write_feature = rank_formulas, write_feature
    print(f"msgpt predict exited with {rc} after {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return rc


# -------------------------------------------------------------------------------------------------- evaluate
def load(cache: Path) -> list[dict]:
    out, seen = [], set()
    for line in cache.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec["id"] not in seen:
            seen.add(rec["id"])
            out.append(rec)
    return out


def run_probability(run: dict, rec: dict, rule: str, eps: float = EPS) -> float | None:
    """P(formula) of a run; for a library-added one (no probability) by ``rule``; None: no term."""
    if run["p"] is not None:
        return run["p"]
    if rule == "none":
        return None
    if rule == "best":
        ps = [r["p"] for r in rec["runs"] if r["p"] is not None]
        return max(ps) if ps else None
    if rule == "eps":
        return eps
    return rec["table"].get(f"{run['formula']} {run['adduct']}", eps)  # "table"


def feature_order(rec: dict, w: float, rule: str, eps: float = EPS) -> list[tuple[str, str, float | None]]:
    """The feature's candidates (InChIKey first block, formula, P(formula): the formula table's for a library-added
    run) in the order of the weighted key
    (:func:`engine.insight.identification.feature_ranks` with ``score + w log max(P, eps)``); ``w = inf``: formula
    order within each group (P first, then score)."""
    rows = []
    for i, run in enumerate(rec["runs"]):
        p = run_probability(run, rec, rule, eps)
        logp = 0.0 if p is None else math.log(max(p, eps))
        for j, (key, formula, score, group, sim, *_) in enumerate(run["cands"]):
            if group == 0:
                k = (0, -(sim or 0.0), 0.0)
            elif score is None:
                k = (group, math.inf, 0.0)
            elif group != 2:  # suspects keep their score alone (the engine's rule; none in this data)
                k = (group, -score, 0.0)
            elif math.isinf(w):
                k = (group, -logp, -score)
            else:
                k = (group, -(score + w * logp), 0.0)
            rows.append((k, i, j, key, formula, run_probability(run, rec, "table", eps)))
    rows.sort(key=lambda r: r[:3])  # ties: formula order, then rank
    return [(key, formula, p) for _, _, _, key, formula, p in rows]


def metrics(records: list[dict], w: float, rule: str, eps: float = EPS) -> dict[str, np.ndarray]:
    top1, top5, top10, right_formula, unlikely = [], [], [], [], []
    for rec in records:
        order = feature_order(rec, w, rule, eps)
        rank = next((k + 1 for k, (key, _, _) in enumerate(order) if key == rec["truth"]), None)
        top1.append(rank == 1)
        top5.append(rank is not None and rank <= 5)
        top10.append(rank is not None and rank <= 10)
        first = order[0] if order else None
        right_formula.append(first is not None and first[1] == rec["formula"])
        unlikely.append(first is not None and first[2] < LOW)
    return {k: np.array(v, dtype=float) for k, v in (("top1", top1), ("top5", top5), ("top10", top10),
                                                      ("formula", right_formula), ("unlikely", unlikely))}


def evaluate(a: argparse.Namespace) -> int:
    from training.evaluation.report import bootstrap_ci

    records = [r for r in load(a.cache) if r.get("truth") and any(run["cands"] for run in r["runs"])]
    everything = load(a.cache)
    n = len(records)
    adducts = {}
    for r in records:
        adducts[r["adduct"]] = adducts.get(r["adduct"], 0) + 1
    in_runs = sum(any(run["formula"] == r["formula"] for run in r["runs"]) for r in records)
    in_ranked = sum(any(run["formula"] == r["formula"] and run["p"] is not None for run in r["runs"]) for r in records)
    lib_runs = sum(run["p"] is None for r in records for run in r["runs"])
    seconds = sum(r.get("seconds", 0.0) for r in everything)
    print(f"data: {a.cache}: {len(everything)} FOLD=val spectra run ({n} with candidates: "
          + ", ".join(f"{v} {k}" for k, v in sorted(adducts.items())) + f"); pipeline {seconds / 60:.0f} min, "
          f"machine {platform.processor() or platform.machine()}, one thread")
    print(f"true formula among the runs: {in_runs} ({in_ranked} among the ranked formula candidates); "
          f"library-added runs: {lib_runs} ({lib_runs / max(n, 1):.1f} a spectrum); eps = {a.eps:g}")
    base = metrics(records, 0.0, "table", a.eps)
    print("| w | library-added run | Top-1 | Top-5 | Top-10 | rank 1 of the true formula | rank 1 of P < "
          f"{LOW:g} | ΔTop-1 vs w = 0 (95%) | ΔTop-10 |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    out = {}
    for w in [*a.weights, math.inf]:
        for rule in (RULES if w > 0 else ("table",)):
            if math.isinf(w) and rule != "table":
                continue
            m = metrics(records, w, rule, a.eps)
            d = m["top1"] - base["top1"]
            lo, hi = bootstrap_ci(d)
            name = "formula order" if math.isinf(w) else f"{w:g}"
            what = "–" if w == 0 else rule
            cells = " | ".join(f"{100 * m[k].mean():.1f}" for k in ("top1", "top5", "top10", "formula", "unlikely"))
            diff = ("– | –" if w == 0 else f"{100 * d.mean():+.1f} ({100 * lo:+.1f} … {100 * hi:+.1f}) | "
                    f"{100 * (m['top10'] - base['top10']).mean():+.1f}")
            print(f"| {name} | {what} | {cells} | {diff} |")
            out[f"{name} {what}"] = {k: float(v.mean()) for k, v in m.items()}
    print(f"(% of {n} spectra)")
    if a.json:
        a.json.write_text(json.dumps({"spectra": n, "eps": a.eps, "results": out}, indent=1))
    return 0


# ---------------------------------------------------------------------------------------------------- budget
def budget_record(rec: dict, threshold: float, undrawn: float) -> tuple[dict, float, int]:
    """``rec`` as the formula-run budget (engine.elucidation.formula_runs) would have run it: a ranked formula run
    below ``threshold`` that is not the best loses its de novo candidates; its library structures stay (one a sample
    drew, neither suspect nor identified, takes the ``undrawn`` prior, as a structure no sample drew); the run goes
    when none stays. Returns the record, the seconds its unsampled runs took and how many runs were unsampled."""
    runs, saved, cut = [], 0.0, 0
    ranked = [r for r in rec["runs"] if r["p"] is not None]
    best = ranked[0] if ranked else None
    for run in rec["runs"]:
        if run["p"] is None or run is best or run["p"] >= threshold:
            runs.append(run)
            continue
        saved, cut = saved + run.get("seconds", 0.0), cut + 1
        kept = []
        for key, formula, score, group, sim, count, origin, suspect in run["cands"]:
            if origin == "de_novo":
                continue
            if count and score is not None and group == 2 and not suspect:
                score += undrawn
            kept.append([key, formula, score, group, sim, count, origin, suspect])
        if kept:
            kept.sort(key=lambda c: -(c[2] if c[2] is not None else -math.inf))
            runs.append({**run, "cands": kept})
    return {**rec, "runs": runs}, saved, cut


def budget(a: argparse.Namespace) -> int:
    """Top-1/5/10 of the feature ranking (the engine's: ``FORMULA_WEIGHT``, library-added runs at the floor) when
    formula runs below each threshold are not sampled, against sampling all, with paired intervals; and the share
    of the pipeline's seconds and of the sampled runs saved."""
    from engine.elucidation.libraries import UNDRAWN_PRIOR
    from engine.insight.identification import FORMULA_FLOOR, FORMULA_WEIGHT
    from training.evaluation.report import bootstrap_ci

    records = [r for r in load(a.cache) if r.get("truth") and any(run["cands"] for run in r["runs"])]
    if records and len(records[0]["runs"][0]["cands"][0] if records[0]["runs"][0]["cands"] else [0] * 8) < 8:
        raise SystemExit(f"{a.cache} was collected before candidates carried their count and origin: collect again")
    total = sum(r.get("seconds", 0.0) for r in records)
    sampled_runs = sum(run["p"] is not None for r in records for run in r["runs"])
    base = metrics(records, FORMULA_WEIGHT, "eps", FORMULA_FLOOR)
    print(f"data: {a.cache}: {len(records)} FOLD=val spectra with candidates, {sampled_runs} ranked formula runs "
          f"({sampled_runs / max(len(records), 1):.2f} a spectrum), pipeline {total / 60:.1f} min; "
          f"w = {FORMULA_WEIGHT:g}, floor {FORMULA_FLOOR:g}, undrawn prior {UNDRAWN_PRIOR:g}")
    print("| min P sampled | Top-1 | Top-5 | Top-10 | ΔTop-1 (95%) | ΔTop-10 (95%) | runs unsampled "
          "| seconds saved |")
    print("| ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |")
    out = {}
    for t in a.thresholds:
        done = [budget_record(r, t, UNDRAWN_PRIOR) for r in records]
        m = metrics([d[0] for d in done], FORMULA_WEIGHT, "eps", FORMULA_FLOOR)
        d1, d10 = m["top1"] - base["top1"], m["top10"] - base["top10"]
        (l1, h1), (l10, h10) = bootstrap_ci(d1), bootstrap_ci(d10)
        saved, cut = sum(d[1] for d in done), sum(d[2] for d in done)
        print(f"| {t:g} | {100 * m['top1'].mean():.1f} | {100 * m['top5'].mean():.1f} | {100 * m['top10'].mean():.1f} "
              f"| {100 * d1.mean():+.1f} ({100 * l1:+.1f} … {100 * h1:+.1f}) "
              f"| {100 * d10.mean():+.1f} ({100 * l10:+.1f} … {100 * h10:+.1f}) "
              f"| {cut} ({100 * cut / max(sampled_runs, 1):.0f}%) | {100 * saved / max(total, 1e-9):.0f}% |")
        out[f"{t:g}"] = {**{k: float(v.mean()) for k, v in m.items()}, "unsampled": cut, "seconds_saved": saved}
    print(f"(% of {len(records)} spectra; 0 = every one of the best 3 sampled, today's rule)")
    if a.measured:
        out["measured"] = measured(records, a.measured, FORMULA_WEIGHT, FORMULA_FLOOR, bootstrap_ci)
    if a.json:
        a.json.write_text(json.dumps({"spectra": len(records), "results": out}, indent=1))
    return 0


def measured(records: list[dict], cache: Path, w: float, floor: float, bootstrap_ci) -> dict:
    """The budget as ``msgpt predict`` ran it (``cache``: a ``collect`` of the same spectra with the budget on) against
    ``records`` (sampling all): Top-1/5/10 paired on the spectra both ran, and the pipeline's seconds."""
    new = {r["id"]: r for r in load(cache) if r.get("truth")}
    pairs = [(r, new[r["id"]]) for r in records if r["id"] in new]
    before = metrics([p[0] for p in pairs], w, "eps", floor)
    after = metrics([p[1] for p in pairs], w, "eps", floor)
    t0, t1 = sum(p[0].get("seconds", 0.0) for p in pairs), sum(p[1].get("seconds", 0.0) for p in pairs)
    runs = [sum(run["p"] is not None and run.get("samples", 1) > 0 for run in p[1]["runs"]) for p in pairs]
    print(f"\nmeasured: msgpt predict with the budget ({cache}) on {len(pairs)} of these spectra: "
          f"{sum(runs) / max(len(pairs), 1):.2f} sampled formula runs a spectrum; the pipeline's seconds "
          f"{t1 / 60:.1f} min against {t0 / 60:.1f} ({t0 / max(t1, 1e-9):.2f}x, the two collects ran at different "
          "times on a shared machine)")
    out = {"spectra": len(pairs), "seconds_before": t0, "seconds_after": t1}
    for k in ("top1", "top5", "top10"):
        d = after[k] - before[k]
        lo, hi = bootstrap_ci(d)
        print(f"  {k}: {100 * before[k].mean():.1f}% -> {100 * after[k].mean():.1f}% "
              f"(paired difference {100 * d.mean():+.1f}, 95% {100 * lo:+.1f} … {100 * hi:+.1f})")
        out[k] = [float(before[k].mean()), float(after[k].mean())]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="step", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--mgf", type=Path, default=ROOT.parent / "shared/data/massbank_dev.mgf.gz")
    c.add_argument("--positive", type=int, default=300)
    c.add_argument("--negative", type=int, default=200)
    c.add_argument("--cache", type=Path, default=Path("/tmp/feature_formula_weight.jsonl"))
    c.add_argument("--min-formula-p", type=float, default=None,
                   help="msgpt predict's run budget (default its own; 0 samples every formula run, as before #58)")
    c.add_argument("--full-formula-runs", action="store_true",
                   help="every sampled formula run draws the full pool (msgpt predict --full-formula-runs)")
    e = sub.add_parser("evaluate")
    e.add_argument("--cache", type=Path, default=Path("/tmp/feature_formula_weight.jsonl"))
    e.add_argument("--weights", type=float, nargs="+", default=list(WEIGHTS))
    e.add_argument("--eps", type=float, default=EPS)
    e.add_argument("--json", type=Path, default=None)
    b = sub.add_parser("budget", help="the formula-run budget: Top-k when unlikely formulas are not sampled")
    b.add_argument("--cache", type=Path, default=Path("/tmp/feature_formula_weight.jsonl"))
    b.add_argument("--thresholds", type=float, nargs="+", default=[0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0])
    b.add_argument("--json", type=Path, default=None)
    b.add_argument("--measured", type=Path, default=None,
                   help="a collect of the same spectra made with the budget on: its Top-k paired against --cache's")
    a = p.parse_args(argv)
    return {"collect": collect, "evaluate": evaluate, "budget": budget}[a.step](a)


if __name__ == "__main__":
    sys.exit(main())
