"""Fit and check the confidence of a rank 1 from a suspect list (:mod:`engine.model.suspect_confidence`), and the
least probability of level 2b.

::

    # 0. the spectra and their formulas' corpus isomers: library-only retrieval pools (minutes; the corpus index
    #    is built once in --home)
    python -m training.studies.retrieval --mgf ../shared/data/massbank_dev.mgf.gz \\
        --corpus ../shared/data/molecules.tsv.gz --out runs/retrieval/lib --home runs/retrieval/home \\
        --choose-spectra 800 --report-spectra 800 --library-only
    # 1. suspect lists and the app's ranking of them (one thread; --shard K/N splits the spectra over processes)
    python -m training.calibration.suspect_confidence collect --pools runs/retrieval/lib \\
        --out runs/suspect_confidence
    # 2. fit on the FOLD=train rows, choose level 2b there, write it into the bundle
    python -m training.calibration.suspect_confidence fit --collected runs/suspect_confidence \\
        --bundle resources/default_model
    # 3. every number of docs/evidence/suspect_confidence.md (FOLD=val)
    python -m training.calibration.suspect_confidence report --collected runs/suspect_confidence

**Spectra.** The retrieval run's sets: one spectrum per structure, FOLD=train spectra of structures the bundle's
encoder (and forward model) never trained on ("train-unseen", the fit), and FOLD=val (the report); every ion type
the model runs natively, both ion modes.

**Suspect lists.** A suspect list matches a feature by formula; what decides its rank 1 is how many structures of
that formula it holds and whether the compound is one of them. Each of ``--variants`` lists per set gives every
formula of the set a size drawn from :data:`SIZES` and puts each of the formula's true structures on it with
probability :data:`ON_LIST` (one half), the rest corpus structures of the formula (the pools' formula track, the
set's truths left out). Spectra of one formula share its list, as they would in a run. The list is indexed as a
real suspect list (a CSV, :func:`engine.library.load_library`) and ranked as ``msgpt predict`` ranks it
(:meth:`engine.elucidation.pipeline.SpectrumSession.rank_known`, default :class:`QueryParams`: fingerprint,
analog and fragment scores), with the bundled spectral library. A row is a spectrum's suspect rank 1 (a reference
spectrum's identification, or no suspect of its formula, gives no row); the label is whether it is the spectrum's
structure (first InChIKey block).

**Model**: two L2-penalised logistics over the features of :data:`engine.model.suspect_confidence.SUSPECT_FEATURES`
(:mod:`engine.model.suspect_confidence`): P(right | on the list), fitted on the rows whose compound is on its list,
and P(on the list), fitted on every row at their share on the list; cross-validated by spectrum. **Level 2b**: the
least probability (at :data:`~engine.model.suspect_confidence.PRESENT_DEFAULT`) whose cross-fitted precision on
the fit's rows is at least :data:`engine.model.suspect_confidence.LEVEL_2B_PRECISION` (checked on FOLD=val, never
chosen there). ``report`` also resamples the FOLD=val rows to other shares on the list and checks the model told
that share (:func:`present_table`).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine.errors import ConfigError, MsgptError
from engine.model.confidence import ConfidenceModel, fit_logistic, reliability
from engine.model.suspect_confidence import (
    LEVEL_2B_PRECISION,
    MEASURED_FEATURES,
    POOL_FEATURES,
    PRESENT_DEFAULT,
    SUSPECT_FEATURES,
    suspect_features,
    suspect_probability,
)
from training.calibration.confidence import _folds as folds
from training.calibration.confidence import cross_validate

SIZES = (1, 2, 3, 5, 8, 13, 21)  # structures of a formula on a list
ON_LIST = 0.5  # probability that a formula's true structure is on its list
SETS = (("choose", "train"), ("report", "val"))  # the retrieval run's set, and its name here
SETTINGS = {"fragment_score": True, "analog_score": True}  # the ranking the rows were made with (QueryParams)
LIST_FEATURES = tuple(f for f in MEASURED_FEATURES if f not in POOL_FEATURES)  # what a ranking without a pool has
BINS = (0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class Entry:
    key: str
    spectrum: object  # engine.spectra.spectrum.Spectrum
    truth: str  # first InChIKey block
    isomers: tuple[str, ...]  # corpus SMILES of its formula (formula track), truths of its set left out later


def read_sets(pools: str | Path) -> dict[str, list[Entry]]:
    """The retrieval run's spectra (``selection.json``) with their formula-track isomers (``pools.jsonl``), per
    set name of :data:`SETS`."""
    from engine.spectra.spectrum import Spectrum

    pools = Path(pools)
    try:
        sel = json.loads((pools / "selection.json").read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{pools}: no selection.json ({e}); make the pools first (the module docstring's step 0).")
    spectra = {name: {f"{Path(d['source']).name}#{d['index']}:{d['id']}": Spectrum(**d) for d in sel[part]}
               for part, name in SETS}
    out: dict[str, list[Entry]] = {name: [] for _, name in SETS}
    with open(pools / "pools.jsonl", encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interrupted run
            for name, chosen in spectra.items():
                if rec["key"] in chosen:
                    truth = rec["truth"]["inchikey14"]
                    isomers = tuple(c["s"] for c in rec["candidates"] if c.get("fl") and c["k"] != truth)
                    out[name].append(Entry(rec["key"], chosen[rec["key"]], rec["truth"]["inchikey14"], isomers))
    return out


def suspect_lists(entries: list[Entry], variant: int, seed: int = 0) -> tuple[dict[str, list[str]], dict[str, bool]]:
    """One variant's suspect list per formula of ``entries`` (the module docstring), and for each spectrum's key
    whether its structure is on its formula's list."""
    by_formula: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_formula[e.spectrum.formula].append(e)
    rng = np.random.default_rng([seed, variant])
    lists, on = {}, {}
    for formula in sorted(by_formula):
        group = by_formula[formula]
        truths = {e.truth: e.spectrum.smiles for e in group}
        isomers = sorted({s for e in group for s in e.isomers} - set(truths.values()))
        size = int(rng.choice(SIZES))
        kept = {t: s for t, s in sorted(truths.items()) if rng.random() < ON_LIST}
        rest = [isomers[i] for i in rng.permutation(len(isomers))[: max(size - len(kept), 0)]]
        lists[formula] = list(kept.values()) + rest
        for e in group:
            on[e.key] = e.truth in kept
    return lists, on


def _index(lists: dict[str, list[str]], home: Path, name: str):
    from engine.library import load_library

    table = home / f"{name}.csv"
    with open(table, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Identifier", "SMILES"])
        for formula, smiles in lists.items():
            for i, s in enumerate(smiles):
                w.writerow([f"{formula}_{i}", s])
    library = load_library(table)
    library.suspect = True
    return library


def _ranked(session, first, pool: bool):
    """``session``'s ranking: its library structures alone, or (``pool``) with the standard pool drawn, as ``msgpt
    predict`` draws it. ``first``: the spectrum's session of an earlier list, whose samples and isomer edits (which
    the lists do not change) are reused; None for the first."""
    from engine.elucidation.pipeline import QueryParams
    from engine.progress import run_to_end

    params = QueryParams()
    if not pool:
        return session.rank_known(params)
    if first is not None:
        session.add_drawn_samples(params, first.drawn_samples(params))
        session._edits = dict(first._edits)
    return run_to_end(session.run(params))


def collect(pools: str | Path, out: str | Path, variants: int = 4, seed: int = 0, shard: tuple[int, int] = (0, 1),
            model: str | None = None, pool: bool = False) -> dict:
    """Write ``<set>.jsonl`` rows (``<set>.<k>of<n>.jsonl`` for a shard) into ``out``; returns counts. ``pool``: draw
    each spectrum's standard pool (once; every list reuses it) and record :data:`POOL_FEATURES` too."""
    import torch

    from engine.elucidation.pipeline import SpectrumSession
    from engine.model.bundle import load_bundle
    from engine.paths import default_model_dir
    from engine.spectral_library import load_bundled_spectral_library

    torch.set_num_threads(1)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    bundle = load_bundle(model or default_model_dir(), device="cpu")
    spectral = load_bundled_spectral_library()
    sets = read_sets(pools)
    k, n = shard
    suffix = "" if n == 1 else f".{k}of{n}"
    counts: dict = {"seed": seed, "variants": variants, "pools": str(pools), "bundle": bundle.describe(), "pool": pool}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MSGPT_HOME"] = tmp  # the lists' index, thrown away
        for name, entries in sets.items():
            mine = entries[k::n]
            sessions: dict[str, SpectrumSession] = {}
            skipped: dict[str, int] = defaultdict(int)
            rows = 0
            with open(out / f"{name}{suffix}.jsonl", "w", encoding="utf-8") as f:
                for v in range(variants):
                    lists, on = suspect_lists(entries, v, seed)  # all of the set: a shard sees the same lists
                    library = _index({fo: lists[fo] for fo in {e.spectrum.formula for e in mine}}, Path(tmp),
                                     f"{name}_{v}")
                    for e in mine:
                        first = sessions.get(e.key)
                        session = SpectrumSession(bundle, e.spectrum, libraries=[library, spectral],
                                                  posterior=None if first is None else first.posterior,
                                                  spectral_matches=None if first is None else first.spectral_matches)
                        if first is None:
                            sessions[e.key] = session
                        else:  # one fragment scorer and analog search per spectrum, whatever the list
                            session._fragments, session._analogs = first._fragments, first._analogs
                        try:
                            result = _ranked(session, first, pool)
                        except MsgptError as err:
                            skipped[f"error: {err}"[:80]] += 1
                            continue
                        c = result.candidates[0] if result.candidates else None
                        if c is None or not (c.suspect or c.identified):
                            skipped["no suspect of its formula on the list"] += 1
                            continue
                        if c.identified:
                            skipped["identified by a reference spectrum"] += 1
                            continue
                        features = suspect_features(bundle, result, MEASURED_FEATURES if pool else LIST_FEATURES)
                        if features is None:
                            skipped["no features"] += 1
                            continue
                        f.write(json.dumps({
                            "key": e.key, "variant": v, "right": c.inchikey14 == e.truth, "on_list": on[e.key],
                            "list_size": len(lists[e.spectrum.formula]), "adduct": e.spectrum.adduct,
                            "polarity": e.spectrum.polarity or "positive", "rank1": c.smiles,
                            "samples": result.n_samples, "features": features}) + "\n")
                        rows += 1
                    print(f"{name} variant {v}: {rows} rows ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
            counts[name] = {"spectra": len(mine), "rows": rows, "skipped": dict(skipped)}
    counts["seconds"] = round(time.perf_counter() - t0, 1)
    (out / f"collected{suffix}.json").write_text(json.dumps(counts, indent=1) + "\n", encoding="utf-8")
    return counts


def read_rows(collected: str | Path, name: str) -> list[dict]:
    """The rows of set ``name`` (its shards joined)."""
    files = sorted(Path(collected).glob(f"{name}.jsonl")) + sorted(Path(collected).glob(f"{name}.*of*.jsonl"))
    if not files:
        raise ConfigError(f"{collected}: no {name}.jsonl; run `collect` first.")
    rows = []
    for p in files:
        with open(p, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def matrix(rows: list[dict], features: tuple[str, ...] = SUSPECT_FEATURES) -> tuple[np.ndarray, np.ndarray]:
    X = np.array([[r["features"][k] for k in features] for r in rows], dtype=np.float64)
    return X, np.array([r["right"] for r in rows], dtype=bool)


def compare_features(collected: str | Path, l2: float = 1.0) -> str:
    """On the FOLD=train rows only: cross-validated (by spectrum) AUROC, Brier and ECE of the shipped features, each
    measured extra alone added to them, and all of them; how :data:`SUSPECT_FEATURES` was chosen (the lowest Brier)."""
    rows = read_rows(collected, "train")
    groups = [r["key"] for r in rows]
    measured = tuple(f for f in MEASURED_FEATURES if all(f in r["features"] for r in rows))  # POOL_FEATURES: --pool
    extras = tuple(f for f in measured if f not in SUSPECT_FEATURES)
    base = tuple(f for f in SUSPECT_FEATURES)
    sets = [("shipped", base)] + [(f"+ {f}", base + (f,)) for f in extras] + [("all measured", measured)]
    if all(f in measured for f in POOL_FEATURES):
        sets.append(("+ the pool's three", base + POOL_FEATURES))
    sets += [(f"- {f}", tuple(g for g in base if g != f)) for f in base]
    lines = ["| features | CV AUROC | CV Brier | CV ECE |", "| --- | ---: | ---: | ---: |"]
    for name, names in sets:
        X, y = matrix(rows, names)
        plain, _ = cross_validate(X, y, l2, groups=groups)
        rel = reliability(plain, y)
        lines.append(f"| {name} | {rel['auroc']:.4f} | {rel['brier']:.4f} | {rel['ece']:.4f} |")
    X, y = matrix(rows)
    on = np.array([r["on_list"] for r in rows], dtype=bool)
    for name, label, sel in (("P(on the list)", on, np.ones(len(y), bool)), ("P(right | on the list)", y, on)):
        plain, _ = cross_validate(X[sel], label[sel], l2, groups=[g for g, s in zip(groups, sel) if s])
        lines.append(f"\n{name} from the shipped features, cross-validated: AUROC "
                     f"{reliability(plain, label[sel])['auroc']:.4f} over {int(sel.sum())} rows")
    if "drawn" in measured:
        drawn = np.array([r["features"]["drawn"] > 0 for r in rows], dtype=bool)
        lines.append(f"the decoder drew the suspect for {drawn[y].mean():.1%} of right rank 1s, "
                     f"{drawn[~y & on].mean():.1%} of wrong ones whose compound was on the list, "
                     f"{drawn[~on].mean():.1%} of those whose was not")
    return "\n".join(lines)


MIN_2B_ROWS = 50  # a level-2b bar must hold for at least this many of the fit's rows, else there is none


def choose_level_2b(probs: np.ndarray, y: np.ndarray, precision: float = LEVEL_2B_PRECISION,
                    min_rows: int = MIN_2B_ROWS) -> tuple[float, int, int]:
    """The least probability (0.50 ... 0.99 by 0.01) whose rows at or above it, at least ``min_rows`` of them, are
    right at least ``precision`` of the time, and (right, wrong) there; (2.0, 0, 0) (never) when none is."""
    for p in np.round(np.arange(0.50, 1.0, 0.01), 2):
        sel = probs >= p
        right, wrong = int((sel & y).sum()), int((sel & ~y).sum())
        if right + wrong >= min_rows and right / (right + wrong) >= precision:
            return float(p), right, wrong
    return 2.0, 0, 0


def best_precision(probs: np.ndarray, y: np.ndarray, min_rows: int = MIN_2B_ROWS) -> tuple[float, float, int]:
    """(probability, precision, rows) of the most precise bar with at least ``min_rows`` rows: what level 2b could
    reach when :func:`choose_level_2b` finds no bar."""
    best = (0.0, 0.0, 0)
    for p in np.round(np.arange(0.50, 1.0, 0.01), 2):
        sel = probs >= p
        n = int(sel.sum())
        if n >= min_rows and (sel & y).sum() / n > best[1]:
            best = (float(p), float((sel & y).sum() / n), n)
    return best


def _two_parts(X: np.ndarray, y: np.ndarray, on: np.ndarray, l2: float) -> tuple[ConfidenceModel, ConfidenceModel]:
    """The logistic of P(right | on the list, x), fitted on the rows whose compound is on the list, and that of
    P(on the list | x), fitted on every row."""
    def part(XX, yy, names):
        w, b, mean, scale = fit_logistic(XX, yy, l2=l2)
        return ConfidenceModel(tuple(float(v) for v in w), float(b), tuple(float(v) for v in mean),
                               tuple(float(v) for v in scale), names, dict(SETTINGS))

    return part(X[on], y[on], SUSPECT_FEATURES), part(X, on, SUSPECT_FEATURES)


def _combined(right_if_on: ConfidenceModel, on_list: ConfidenceModel, share: float, meta: dict | None = None
              ) -> ConfidenceModel:
    """The two parts as one model, as the bundle holds it (:func:`engine.model.suspect_confidence.on_list_model`)."""
    part = {"model": on_list.to_json(), "share": round(share, 6),
            "what": "P(the compound is on the list | features) at the fit's share of rows on the list"}
    return replace(right_if_on, meta={**(meta or {}), "on_list": part})


def cross_fitted(X: np.ndarray, y: np.ndarray, on: np.ndarray, groups: list, l2: float = 1.0,
                 present: float = PRESENT_DEFAULT) -> np.ndarray:
    """Each row's two-part probability at ``present`` from parts fitted without its spectrum's fold."""
    p = np.empty(len(y))
    for train, test in folds(len(y), 0, groups):
        model = _combined(*_two_parts(X[train], y[train], on[train], l2), float(on[train].mean()))
        p[test] = [suspect_probability(model, dict(zip(SUSPECT_FEATURES, x)), present) for x in X[test]]
    return p


def fit(collected: str | Path, l2: float = 1.0) -> ConfidenceModel:
    """The two-part model (:mod:`engine.model.suspect_confidence`) fitted on the FOLD=train rows, its level-2b
    probability in ``meta["level_2b"]`` (chosen on cross-fitted probabilities at
    :data:`~engine.model.suspect_confidence.PRESENT_DEFAULT`)."""
    rows = read_rows(collected, "train")
    X, y = matrix(rows)
    on = np.array([r["on_list"] for r in rows], dtype=bool)
    if (y & on).sum() < 10 or (~y & on).sum() < 10 or (~on).sum() < 10:
        raise ConfigError(f"{collected}: {int((y & on).sum())} right and {int((~y & on).sum())} wrong suspect rank 1s "
                          f"whose compound was on the list, {int((~on).sum())} whose was not; collect more "
                          "(--variants) before fitting.")
    groups = [r["key"] for r in rows]
    right_if_on, on_list = _two_parts(X, y, on, l2)
    share = float(on.mean())
    at_share = cross_fitted(X, y, on, groups, l2, present=share)
    probs = cross_fitted(X, y, on, groups, l2)
    cv = {"folds": "5, by spectrum", "rows": len(y), "at_the_fit_share": _short(reliability(at_share, y)),
          "at_present_default": _short(reliability(probs, y))}
    bar, right, wrong = choose_level_2b(probs, y)
    reach = best_precision(probs, y)
    meta = {"what": "P(a rank 1 from a suspect list is the spectrum's structure) = P(on the list | features), its odds "
                    "moved to the share the user states, x P(right | on the list, features) (this file's logistic); "
                    "engine.model.suspect_confidence",
            "polarities": sorted({r["polarity"] for r in rows}),
            "level_2b": {"min_probability": bar, "precision_asked": LEVEL_2B_PRECISION, "min_rows": MIN_2B_ROWS,
                         "present": PRESENT_DEFAULT,
                         "measured": {"where": "FOLD=train train-unseen rows, cross-fitted", "right": right,
                                      "wrong": wrong, "most_precise_bar": {"probability": reach[0],
                                                                           "precision": round(reach[1], 4),
                                                                           "rows": reach[2]}}},
            "fit": {"collected": str(collected), "rows": len(y), "right": int(y.sum()), "on_list": int(on.sum()),
                    "spectra": len(set(groups)), "l2": l2, "on_list_probability": ON_LIST, "sizes": list(SIZES),
                    "how": "train-unseen FOLD=train spectra, suspect lists of corpus isomers (the compound on the "
                           f"list for {ON_LIST:.0%} of formulas), ranked as msgpt predict ranks them",
                    "cross_validated": cv}}
    return _combined(right_if_on, on_list, share, meta)


def _short(rel: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in rel.items() if k != "bins"}


def _row_line(name: str, p: np.ndarray, y: np.ndarray) -> str:
    rel = reliability(p, y, bins=BINS)
    au = "n/a" if rel["auroc"] is None else f"{rel['auroc']:.3f}"
    return (f"| {name} | {rel['n']} | {rel['hits']} | {rel['base_rate']:.3f} | {rel['mean_predicted']:.3f} | "
            f"{rel['ece']:.3f} | {rel['brier']:.3f} | {rel['brier_base_rate']:.3f} | {au} |")


def report(collected: str | Path, model_path: str | Path | None = None) -> str:
    """Reliability of the shipped (or ``model_path``) model on the FOLD=val rows, by population, and level 2b."""
    from engine.paths import default_model_dir

    path = Path(model_path or Path(default_model_dir()) / "suspect_confidence.json")
    model = ConfidenceModel.load(path)
    rows = read_rows(collected, "val")
    X, y = matrix(rows)
    p = np.array([suspect_probability(model, r["features"]) for r in rows])
    on = np.array([r["on_list"] for r in rows], dtype=bool)
    alone = np.array([r["features"]["alone"] > 0 for r in rows], dtype=bool)
    neg = np.array([r["polarity"] == "negative" for r in rows], dtype=bool)
    first = np.array([r["variant"] == 0 for r in rows], dtype=bool)
    lines = [f"model: {path}", f"FOLD=val: {len(rows)} suspect rank 1s of {len({r['key'] for r in rows})} spectra "
             f"({int(y.sum())} right), {len({r['variant'] for r in rows})} list variants",
             "| population | n | right | base rate | mean predicted | ECE | Brier | Brier (base rate) | AUROC |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, sel in (("every suspect rank 1", np.ones(len(y), bool)), ("the first list variant only", first),
                      ("positive mode", ~neg), ("negative mode", neg),
                      ("the compound on the list", on), ("the compound not on the list (all wrong)", ~on),
                      ("the only suspect of its formula", alone), ("2 or more suspects of its formula", ~alone)):
        if sel.any():
            lines.append(_row_line(name, p[sel], y[sel]))
    l2b = model.meta.get("level_2b", {})
    bar = l2b.get("min_probability", 2.0)
    if bar > 1:
        reach = l2b.get("measured", {}).get("most_precise_bar", {})
        lines.append(f"\nlevel 2b: no bar (on FOLD=train no probability gave precision >= "
                     f"{l2b.get('precision_asked', LEVEL_2B_PRECISION):g} over >= {l2b.get('min_rows', MIN_2B_ROWS)} "
                     f"rows; the most precise, P >= {reach.get('probability', 0):g}, {reach.get('precision', 0):.3f} "
                     f"over {reach.get('rows', 0)})")
        for t in (0.6, 0.7, 0.8):
            sel = p >= t
            lines.append(f"  on FOLD=val, P >= {t:g}: {int(sel.sum())} rank 1s, precision "
                         f"{(sel & y).sum() / max(int(sel.sum()), 1):.3f}")
    else:
        sel = p >= bar
        right, wrong = int((sel & y).sum()), int((sel & ~y).sum())
        lines.append(f"\nlevel 2b (P >= {bar:g}, chosen on FOLD=train for precision >= "
                     f"{l2b.get('precision_asked', LEVEL_2B_PRECISION):g}): {right + wrong} of {len(y)} suspect "
                     f"rank 1s, "
                     f"{right} right / {wrong} wrong (precision {right / max(right + wrong, 1):.3f}); among the "
                     f"compounds not on their list {int((sel & ~on).sum())} of {int((~on).sum())} reach it")
    lines.append(f"mean confidence of right rank 1s {p[y].mean():.3f}, of wrong ones {p[~y].mean():.3f}")
    lines.append(present_table(model, rows))
    return "\n".join(lines)


PRESENTS = (0.1, 0.25, 0.5, 0.75, 0.9)


def present_table(model: ConfidenceModel, rows: list[dict], presents: tuple[float, ...] = PRESENTS,
                  seed: int = 0) -> str:
    """Reliability when a share ``present`` of the rank 1s have their compound on the list: the rows resampled
    (seeded, as many as there are) to that share, the model told the share against the model left at
    :data:`~engine.model.suspect_confidence.PRESENT_DEFAULT`."""
    y = np.array([r["right"] for r in rows], dtype=bool)
    on = np.array([r["on_list"] for r in rows], dtype=bool)
    rng = np.random.default_rng(seed)
    lines = [f"\nresampled to a share of rank 1s whose compound is on the list ({len(rows)} rows each, seed {seed}):",
             "| share on the list | right | told the share: mean predicted | ECE | Brier | AUROC | "
             f"left at {PRESENT_DEFAULT:g}: mean predicted | ECE | Brier |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for present in presents:
        k = int(round(len(rows) * present))
        idx = np.concatenate([rng.choice(np.flatnonzero(on), k), rng.choice(np.flatnonzero(~on), len(rows) - k)])
        told = reliability([suspect_probability(model, rows[i]["features"], present) for i in idx], y[idx])
        left = reliability([suspect_probability(model, rows[i]["features"]) for i in idx], y[idx])
        au = "n/a" if told["auroc"] is None else f"{told['auroc']:.3f}"
        lines.append(f"| {present:g} | {y[idx].mean():.3f} | {told['mean_predicted']:.3f} | {told['ece']:.3f} | "
                     f"{told['brier']:.3f} | {au} | {left['mean_predicted']:.3f} | {left['ece']:.3f} | "
                     f"{left['brier']:.3f} |")
    return "\n".join(lines)


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard wants K/N (for example 0/2), got {text!r}") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--shard {text}: K must be 0 .. N-1")
    return k, n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.calibration.suspect_confidence",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="suspect lists ranked as msgpt predict ranks them; one row per rank 1")
    c.add_argument("--pools", required=True, help="a `training.studies.retrieval --library-only` output folder")
    c.add_argument("--out", required=True)
    c.add_argument("--variants", type=int, default=4, help="suspect lists per set (default 4)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--shard", type=_shard, default=(0, 1), metavar="K/N", help="every N-th spectrum from the K-th")
    c.add_argument("--model", help="model bundle (default: the bundled model)")
    c.add_argument("--pool", action="store_true",
                   help="draw each spectrum's standard pool and record the pool's evidence too (about 1 s a spectrum)")
    f = sub.add_parser("fit", help="fit on the FOLD=train rows; write suspect_confidence.json")
    f.add_argument("--collected", required=True)
    f.add_argument("--l2", type=float, default=1.0)
    f.add_argument("--bundle", help="write it into this bundle (recording its checksum in config.json)")
    f.add_argument("--out", help="or write it to this file")
    e = sub.add_parser("features", help="cross-validated measures of feature sets on the FOLD=train rows")
    e.add_argument("--collected", required=True)
    r = sub.add_parser("report", help="reliability and level 2b on the FOLD=val rows")
    r.add_argument("--collected", required=True)
    r.add_argument("--model", help="suspect_confidence.json (default: the bundled model's)")
    a = p.parse_args(argv)
    try:
        if a.command == "collect":
            print(json.dumps(collect(a.pools, a.out, a.variants, a.seed, a.shard, a.model, a.pool), indent=1))
        elif a.command == "fit":
            if not (a.bundle or a.out):
                raise ConfigError("say where to write the model: --bundle FOLDER or --out FILE.")
            model = fit(a.collected, a.l2)
            target = Path(a.out or Path(a.bundle) / "suspect_confidence.json")
            model.save(target)
            if a.bundle:
                from engine.model.bundle import add_bundle_file

                add_bundle_file(a.bundle, target)
            print(json.dumps(model.to_json(), indent=1))
        elif a.command == "features":
            print(compare_features(a.collected))
        else:
            print(report(a.collected, a.model))
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
