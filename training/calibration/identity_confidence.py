"""Fit and check the confidence of identifications (:mod:`engine.spectral_library.identity`) on leave-one-lab-out
identity searches, and choose the isomer window that withholds level 2a.

::

    # 1. searches: FOLD=train queries (the bundled library's own records, a seeded subsample) against the library
    #    without any record of the query's lab; FOLD=val queries (every high-resolution record with an ion mode)
    #    against the library plus the FOLD=val records, again without the query's lab, and against the bundled
    #    library alone (structure-disjoint: every hit is wrong). ~5 ms a query, one thread.
    python -m training.calibration.identity_confidence collect --mgf ../shared/data/massbank_dev.mgf.gz \\
        --library resources/spectral_library/massbank_open.mgf.gz --out runs/identity_confidence --train 15000
    # 2. fit on FOLD=train (logistic + isotonic, as engine.model.confidence), write the model beside the library
    python -m training.calibration.identity_confidence fit --collected runs/identity_confidence \\
        --out resources/spectral_library/confidence.json
    # 3. the rule's choice (FOLD=train) and every number of docs/spectral_library.md on FOLD=val
    python -m training.calibration.identity_confidence report --collected runs/identity_confidence
    # features the model does not read (the query's instrument, energy, peaks), measured on FOLD=train
    python -m training.calibration.identity_confidence extras --collected runs/identity_confidence

**Why leave-one-lab-out**: a user's spectrum is never one of the library's; the nearest case MassBank offers is a
query whose own laboratory's records (the lab code of the accession, ``MSBNK-<lab>-...``) are all taken out of the
library, so a structure only that lab measured has no reference left (the hit is then a wrong one, often an
isomer) and one other labs measured is found on another instrument, energy and lab. The label is whether the
rank-1 hit's structure (first InChIKey block) is the query's.

**Population**: every query whose identity search has a rank-1 hit (precursor within 0.01 Da, at least one
matched fragment); the model is checked on those that pass the identification rule (the identifications the app
shows; ``identified``) and on all of them.

**Model**: the seven :data:`engine.spectral_library.identity.IDENTITY_FEATURES`, an L2-penalised logistic regression and the
isotonic map of :mod:`training.calibration.confidence` (kept when it lowers the nested cross-validated Brier score).
Nothing of FOLD=val enters the fit or the choice of the window.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine.elucidation.libraries import SPECTRAL_HITS, is_identification
from engine.errors import ConfigError, MsgptError
from engine.model.confidence import ConfidenceModel, fit_logistic, reliability
from engine.progress import run_to_end
from engine.spectral_library.identity import (
    IDENTITY_FEATURES,
    ISOMER_WINDOW,
    identity_features,
)
from engine.spectral_library.index import (
    SpectralLibrary,
    build_library,
    library_from_references,
)
from engine.spectral_library.read import iter_references
from engine.spectral_library.records import ReferenceSpectrum
from engine.spectral_library.search import (
    AnswerThreshold,
    SearchParams,
    SpectralMatches,
    search_peaks,
)
from training.calibration.confidence import cross_validate, recalibration_knots

log = logging.getLogger(__name__)

PARAMS = SearchParams(mode="identity", top_k=SPECTRAL_HITS)
TODAY = AnswerThreshold(0.675, 3)  # the rule before issue #57 (similarity >= 0.675, >= 3 matched peaks)
ANY = AnswerThreshold(0.0, 0)  # any rank-1 hit (what the ion-type check alone lets through)
PROBABILITIES = tuple(round(0.80 + 0.005 * i, 3) for i in range(40))  # 0.800 ... 0.995
FLOOR = (0.4, 2)  # least similarity and matched peaks of a calibrated identification


def lab(accession: str) -> str:
    """The contributing lab of a MassBank accession ``MSBNK-<lab>-<id>`` (the accession itself otherwise)."""
    parts = accession.split("-")
    return parts[1] if len(parts) >= 3 else accession


def lab_rows(library: SpectralLibrary) -> dict[str, np.ndarray]:
    """Rows of each lab of ``library``."""
    rows: dict[str, list[int]] = defaultdict(list)
    for row, accession in enumerate(library.columns["accession"]):
        rows[lab(accession)].append(row)
    return {k: np.asarray(v, dtype=np.int64) for k, v in rows.items()}


def record(matches: SpectralMatches, truth: str, adduct: str, query_id: str, instrument: str = "",
           energy: str = "", formula: str = "") -> dict | None:
    """One query's row: its rank-1 hit's features, whether it is right, whether it passes the identification rule;
    ``extra``: what the model does not read (the query's peaks, precursor and formula, and its and the reference's
    instrument type, collision energy, precursor and formula), for measuring whether it would help."""
    features = identity_features(matches)
    if features is None:
        return None
    first = matches.hits[0]
    extra = {"query_peaks": int(matches.query_mz.size), "precursor_mz": float(matches.precursor_mz),
             "reference_mz": float(first.reference.precursor_mz), "formula": formula,
             "reference_formula": first.reference.formula,
             "instrument": instrument, "reference_instrument": first.reference.instrument_type,
             "energy": energy, "reference_energy": first.reference.collision_energy}
    return {"id": query_id, "lab": lab(query_id), "truth": truth, "rank1": first.reference.inchikey14,
            "rank1_name": first.reference.name, "adduct": adduct, "right": bool(first.reference.inchikey14 == truth),
            "identified": bool(is_identification(matches, first, adduct or None, TODAY)),
            "ion_type_ok": bool(is_identification(matches, first, adduct or None, ANY)), "features": features,
            "extra": extra}


HIGH_RES = re.compile(r"TOF|FT|ORBITRAP", re.IGNORECASE)  # as training.bundle.spectral_library keeps references


def held_out_queries(mgf: str | Path) -> Iterator[ReferenceSpectrum]:
    """``FOLD=val`` high-resolution spectra with an ion mode (any licence: they are queries, never shipped): the
    queries of ``python -m training.bundle.spectral_library calibrate`` (which a calibration package may not import)."""
    for ref in iter_references(mgf):
        if ref.extra.get("fold", "") == "val" and HIGH_RES.search(ref.instrument_type) and ref.polarity:
            yield ref


def train_queries(library: SpectralLibrary, n: int, seed: int) -> Iterator[tuple[int, str]]:
    """A seeded subsample of ``n`` of the library's rows with a structure and an ion mode, and their labs."""
    rows = [r for r in range(len(library)) if library.columns["inchikey14"][r] and library.columns["polarity"][r]]
    rng = np.random.default_rng(seed)
    for r in sorted(rng.choice(len(rows), size=min(n, len(rows)), replace=False)):
        yield rows[r], lab(library.columns["accession"][rows[r]])


def collect(mgf: str, library_path: str, out: str | Path, n_train: int = 15000, seed: int = 0,
            n_val: int | None = None) -> dict:
    """Write ``train.jsonl``, ``val.jsonl`` and ``disjoint.jsonl`` into ``out`` (see the module docstring)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    bundled = run_to_end(build_library(library_path, "bundled"))
    labs = lab_rows(bundled)
    counts = {}
    with open(out / "train.jsonl", "w", encoding="utf-8") as f:
        n = 0
        for row, query_lab in train_queries(bundled, n_train, seed):
            mz, intensity = bundled.peaks(row)
            matches = search_peaks(bundled, float(bundled.precursor_mz[row]), mz, intensity,
                                   bundled.columns["polarity"][row], PARAMS, {"bundled": labs[query_lab]})
            rec = record(matches, bundled.columns["inchikey14"][row], bundled.columns["adduct"][row],
                         bundled.columns["accession"][row], bundled.columns["instrument_type"][row],
                         bundled.columns["collision_energy"][row], bundled.columns["formula"][row])
            n += 1
            if rec is not None:
                f.write(json.dumps(rec) + "\n")
        counts["train_queries"] = n
    log.info("train: %d queries (%.0f s)", n, time.perf_counter() - t0)
    queries = list(held_out_queries(mgf))[:n_val]
    val_lib = library_from_references(queries, "val")
    val_labs = lab_rows(val_lib)
    empty = np.zeros(0, dtype=np.int64)
    with open(out / "val.jsonl", "w", encoding="utf-8") as fv, open(out / "disjoint.jsonl", "w", encoding="utf-8") as fd:
        for ref in queries:
            query_lab = lab(ref.accession)
            exclude = {"bundled": labs.get(query_lab, empty), "val": val_labs.get(query_lab, empty)}
            for libs, ex, f in (([bundled, val_lib], exclude, fv), ([bundled], None, fd)):
                matches = search_peaks(libs, ref.precursor_mz, ref.mz, ref.intensity, ref.polarity, PARAMS, ex)
                rec = record(matches, ref.inchikey14, ref.adduct, ref.accession, ref.instrument_type,
                             ref.collision_energy, ref.formula)
                if rec is not None:
                    f.write(json.dumps(rec) + "\n")
    counts["val_queries"] = len(queries)
    counts["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "collected.json").write_text(json.dumps({"mgf": mgf, "library": library_path, "n_train": n_train,
                                                    "seed": seed, **counts}, indent=1) + "\n", encoding="utf-8")
    return counts


def read_rows(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def matrix(rows: Sequence[dict]) -> tuple[np.ndarray, np.ndarray]:
    X = np.array([[r["features"][k] for k in IDENTITY_FEATURES] for r in rows], dtype=np.float64)
    return X, np.array([r["right"] for r in rows], dtype=bool)


@dataclass(frozen=True)
class Rule:
    """A level-2a rule measured here: the rank-1 hit's ion type agrees with the query's, its similarity and matched
    peaks reach the floor, its probability ``min_probability`` (0: today's rule, :data:`TODAY`, instead) and no
    isomer within ``window``."""

    min_probability: float
    window: float
    min_similarity: float = FLOOR[0]
    min_matched_peaks: int = FLOOR[1]

    def level_2a(self, rows: Sequence[dict], probs: np.ndarray) -> np.ndarray:
        if self.min_probability <= 0:
            base = np.array([r["identified"] for r in rows], dtype=bool)
        else:
            base = np.array([r["ion_type_ok"] and r["features"]["similarity"] >= self.min_similarity
                             and math.exp(r["features"]["log_matched"]) >= self.min_matched_peaks - 1e-9
                             for r in rows], dtype=bool) & (probs >= self.min_probability)
        return base & ~np.array([close(r, self.window) for r in rows], dtype=bool)


def close(row: dict, window: float) -> bool:
    """The row's rank 1 has a reference of another structure of its formula within ``window`` (0: never)."""
    f = row["features"]
    return window > 0 and f["isomer_similarity"] > 0 and f["isomer_similarity"] >= f["similarity"] - window


def counts(a: np.ndarray, y: np.ndarray) -> tuple[int, int]:
    """(right, wrong) among the rows ``a`` selects."""
    return int((a & y).sum()), int((a & ~y).sum())


def choose_rule(rows: Sequence[dict], probs: np.ndarray) -> tuple[Rule, list[tuple[Rule, int, int]]]:
    """The least probability (:data:`PROBABILITIES`; the isomer window
    :data:`engine.spectral_library.identity.ISOMER_WINDOW` withholding 2a, as at run time) with the most right
    level-2a identifications among those with at most half the wrong ones of today's rule (ties: fewer wrong); the
    strictest when none does. ``probs``: cross-fitted probabilities. Returns it and the grid (today's rule first)."""
    y = np.array([r["right"] for r in rows], dtype=bool)
    _, today_wrong = counts(Rule(0.0, 0.0).level_2a(rows, probs), y)
    grid = [(Rule(0.0, 0.0), *counts(Rule(0.0, 0.0).level_2a(rows, probs), y))]
    for p in PROBABILITIES:
        right, wrong = counts(Rule(p, ISOMER_WINDOW).level_2a(rows, probs), y)
        grid.append((Rule(p, ISOMER_WINDOW), right, wrong))
    ok = [g for g in grid if g[2] <= today_wrong / 2]
    if not ok:
        return Rule(max(PROBABILITIES), ISOMER_WINDOW), grid
    return max(ok, key=lambda g: (g[1], -g[2], -g[0].window))[0], grid


def fit(collected: str | Path, l2: float = 1.0) -> tuple[ConfidenceModel, dict]:
    """The confidence of identifications fitted on ``collected/train.jsonl``, and its identification rule (the JSON
    section ``identification_rule``) chosen there on cross-fitted probabilities."""
    rows = read_rows(Path(collected) / "train.jsonl")
    X, y = matrix(rows)
    if y.sum() < 5 or (~y).sum() < 5:
        raise ConfigError(f"{collected}: {int(y.sum())} right and {int((~y).sum())} wrong rank-1 hits; collect more "
                          "queries (--train) before fitting.")
    w, b, mean, scale = fit_logistic(X, y, l2=l2)
    plain, recalibrated = cross_validate(X, y, l2)
    cv = {"folds": 5, "queries": len(y), "logistic": _short(reliability(plain, y)),
          "recalibrated": _short(reliability(recalibrated, y))}
    kept = bool(cv["recalibrated"]["brier"] < cv["logistic"]["brier"])
    knots = recalibration_knots(X, y, l2) if kept else ()
    rule, grid = choose_rule(rows, recalibrated if kept else plain)
    today = next(g for g in grid if g[0] == Rule(0.0, 0.0))
    chosen = next(g for g in grid if g[0] == rule)
    model = ConfidenceModel(tuple(float(v) for v in w), float(b), tuple(float(v) for v in mean),
                            tuple(float(v) for v in scale), IDENTITY_FEATURES, {}, recalibration=knots)
    meta = {"what": "P(the rank-1 identity hit is the query's structure); engine.spectral_library.identity",
            "fit": {"collected": str(collected), "queries": len(y), "right": int(y.sum()), "l2": l2,
                    "how": "FOLD=train records of the bundled library searched without their lab's records",
                    "cross_validated": cv, "recalibration_kept": kept}}
    section = {"min_probability": rule.min_probability, "min_similarity": rule.min_similarity,
               "min_matched_peaks": rule.min_matched_peaks, "isomer_window": rule.window,
               "measured": {"where": "FOLD=train, leave-one-lab-out, cross-fitted probabilities",
                            "level_2a_right": chosen[1], "level_2a_wrong": chosen[2],
                            "today_right": today[1], "today_wrong": today[2]}}
    return replace(model, meta=meta), section


def save(model: ConfidenceModel, section: dict, out: str | Path) -> Path:
    """Write the model with its ``identification_rule`` (read by :func:`engine.spectral_library.identity.load_rule`)."""
    d = model.to_json()
    d["identification_rule"] = section
    Path(out).write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
    return Path(out)


def _short(rel: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in rel.items() if k != "bins"}


def paired_interval(a: np.ndarray, b: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval (over queries) of sum(b) - sum(a)."""
    rng = np.random.default_rng(seed)
    d = b.astype(int) - a.astype(int)
    sums = [int(d[rng.integers(0, len(d), len(d))].sum()) for _ in range(reps)]
    return float(np.percentile(sums, 2.5)), float(np.percentile(sums, 97.5))


def report(collected: str | Path, model_path: str | Path | None = None) -> str:
    """The numbers of docs/spectral_library.md: the rule's choice on FOLD=train, the confidence's reliability and
    the level-2a counts on FOLD=val (leave-one-lab-out), the structure-disjoint 2a rate."""
    from engine.spectral_library.identity import confidence_path

    collected = Path(collected)
    path = Path(model_path or confidence_path())
    model = ConfidenceModel.load(path)
    section = json.loads(path.read_text(encoding="utf-8"))["identification_rule"]
    rule = Rule(section["min_probability"], section["isomer_window"], section["min_similarity"],
                section["min_matched_peaks"])
    today = Rule(0.0, 0.0)
    val, disjoint = (read_rows(collected / f"{name}.jsonl") for name in ("val", "disjoint"))
    lines = [f"model and rule: {path}", f"FOLD=train (chosen there): {json.dumps(section['measured'])}",
             (f"rule: P >= {rule.min_probability:g}, similarity >= {rule.min_similarity:g}, matched peaks >= "
              f"{rule.min_matched_peaks}, the query's ion type, no isomer within {rule.window:g}")]
    y = np.array([r["right"] for r in val], dtype=bool)
    p = np.array([model.probability(r["features"]) for r in val])
    a_today, a_now = today.level_2a(val, p), rule.level_2a(val, p)
    lines.append(f"\nFOLD=val leave-one-lab-out: {len(val)} queries with a rank-1 hit, {int(y.sum())} right")
    lines.append("| population | n | right | base rate | mean predicted | ECE | Brier | Brier (base rate) | AUROC |")
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, sel in (("identified by the rule before (0.675, 3)", a_today),
                      ("identified by the calibrated rule (level 2a)", a_now),
                      ("every rank-1 hit of the query's ion type", np.array([r["ion_type_ok"] for r in val])),
                      ("every rank-1 hit", np.ones(len(val), bool))):
        rel = reliability(p[sel], y[sel], bins=(0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0))
        au = "n/a" if rel["auroc"] is None else f"{rel['auroc']:.3f}"
        lines.append(f"| {name} | {rel['n']} | {rel['hits']} | {rel['base_rate']:.3f} | {rel['mean_predicted']:.3f} | "
                     f"{rel['ece']:.3f} | {rel['brier']:.3f} | {rel['brier_base_rate']:.3f} | {au} |")
    (r0, w0), (r1, w1) = counts(a_today, y), counts(a_now, y)
    lo_r, hi_r = paired_interval(a_today & y, a_now & y)
    lo_w, hi_w = paired_interval(a_today & ~y, a_now & ~y)
    lines.append(f"\nlevel 2a on FOLD=val: before {r0} right / {w0} wrong (precision {r0 / max(r0 + w0, 1):.3f}); "
                 f"calibrated rule {r1} right / {w1} wrong (precision {r1 / max(r1 + w1, 1):.3f})")
    lines.append(f"  right {r1 - r0:+d} (paired 95% {lo_r:+.0f} … {hi_r:+.0f}); wrong {w1 - w0:+d} "
                 f"(paired 95% {lo_w:+.0f} … {hi_w:+.0f})")
    near = np.array([close(r, rule.window) for r in val], dtype=bool)
    no_window = Rule(rule.min_probability, 0.0, rule.min_similarity, rule.min_matched_peaks).level_2a(val, p)
    for name, before in (("the rule before", a_today), ("the calibrated rule", no_window)):
        f = before & near
        lines.append(f"  the isomer note (window {rule.window:g}) fires on {int(f.sum())} identifications of {name}: "
                     f"{int((f & y).sum())} right, {int((f & ~y).sum())} wrong")
    floor = np.array([r["ion_type_ok"] and r["features"]["similarity"] >= rule.min_similarity for r in val])
    f = floor & near
    lines.append(f"  ... and on {int(f.sum())} rank-1 hits of the query's ion type and similarity >= "
                 f"{rule.min_similarity:g} (level 3 with the isomer named): {int((f & y).sum())} right, "
                 f"{int((f & ~y).sum())} wrong")
    info = json.loads((collected / "collected.json").read_text())
    n_dis = info["val_queries"]
    mh = [r for r in disjoint if r["adduct"] == "[M+H]+"]
    n_mh = info.get("val_queries_mh") or sum(1 for _ in _val_adducts(info["mgf"], "[M+H]+"))
    p_dis = np.array([model.probability(r["features"]) for r in disjoint])
    p_mh = np.array([model.probability(r["features"]) for r in mh])
    for name, r_ in (("before", today), ("calibrated rule", rule)):
        chosen = r_.level_2a(disjoint, p_dis)
        k_all, k_mh = int(chosen.sum()), int(r_.level_2a(mh, p_mh).sum())
        lines.append(f"structure-disjoint (FOLD=val against the bundled library), level 2a {name}: {k_all}/{n_dis} = "
                     f"{k_all / max(n_dis, 1):.2%}; [M+H]+ {k_mh}/{n_mh} = {k_mh / max(n_mh, 1):.2%}")
        other = [r for r, c in zip(disjoint, chosen) if c and other_formula(r)]
        if other:
            lines.append(f"  of which {len(other)} have a reference of another formula than the query's (a run given "
                         f"the formula never ranks them: {k_all - len(other)}/{n_dis} = "
                         f"{(k_all - len(other)) / max(n_dis, 1):.2%} are of its formula)")
    return "\n".join(lines)


def other_formula(row: dict) -> bool:
    """The row's rank-1 reference has another molecular formula than the query (False when either is unknown, as in
    a collection made before the formulas were recorded)."""
    from engine.chem.formula import parse_formula

    a, b = row.get("extra", {}).get("formula") or "", row.get("extra", {}).get("reference_formula") or ""
    if not (a and b):
        return False
    try:
        return parse_formula(a) != parse_formula(b)
    except MsgptError:
        return False


def _instrument_class(text: str) -> str:
    t = text.upper()
    return "tof" if "TOF" in t else "ft" if ("FT" in t or "ORBI" in t) else t


def _energy(text: str) -> float | None:
    m = re.search(r"\d+(\.\d+)?", text or "")
    return float(m.group(0)) if m else None


def extra_features(row: dict) -> list[float]:
    """What the model does not read, as numbers: log query peaks, precursor m/z / 500, the same instrument class as
    the reference (TOF, FT), the collision-energy gap / 50 (capped at 2; 0.5 when either is unknown), and the
    precursor's mass error against the reference's (log 1 + ppm, ppm capped at 50; 0 for a collection made before it
    was recorded)."""
    e = row["extra"]
    a, b = _energy(e["energy"]), _energy(e["reference_energy"])
    gap = min(abs(a - b) / 50, 2.0) if a is not None and b is not None else 0.5
    ref = e.get("reference_mz") or 0.0
    ppm = min(abs(e["precursor_mz"] - ref) / ref * 1e6, 50.0) if ref > 0 else 0.0
    return [math.log(max(e["query_peaks"], 1)), e["precursor_mz"] / 500,
            float(_instrument_class(e["instrument"]) == _instrument_class(e["reference_instrument"])), gap,
            math.log1p(ppm)]


def compare_extras(collected: str | Path, l2: float = 1.0) -> str:
    """On FOLD=train only: the cross-validated AUROC and Brier, and the calibrated rule's best level-2a count at at
    most half of today's wrong ones, with and without the features the model does not read (the query's peaks and
    precursor; instrument and collision-energy agreement with the reference; the precursor's mass error)."""
    rows = read_rows(Path(collected) / "train.jsonl")
    X, y = matrix(rows)
    ex = np.array([extra_features(r) for r in rows])
    _, today_wrong = counts(Rule(0.0, 0.0).level_2a(rows, np.zeros(len(rows))), y)
    lines = ["| features | CV AUROC | CV Brier | level 2a right / wrong at <= half today's wrong |",
             "| --- | ---: | ---: | ---: |"]
    for name, XX in (("shipped (7)", X), ("+ query peaks, precursor", np.hstack([X, ex[:, :2]])),
                     ("+ those, instrument and energy agreement", np.hstack([X, ex[:, :4]])),
                     ("+ the precursor's mass error against the reference's", np.hstack([X, ex[:, 4:]]))):
        _, p = cross_validate(XX, y, l2)
        best = max((counts(Rule(q, ISOMER_WINDOW).level_2a(rows, p), y) for q in PROBABILITIES
                    if counts(Rule(q, ISOMER_WINDOW).level_2a(rows, p), y)[1] <= today_wrong / 2), default=(0, 0))
        lines.append(f"| {name} | {reliability(p, y)['auroc']:.4f} | {np.mean((p - y) ** 2):.4f} | "
                     f"{best[0]} / {best[1]} |")
    far = ex[:, 4] > math.log1p(10.0)
    lines.append(f"\nprecursor more than 10 ppm from the reference's: {far[~y].mean():.1%} of the "
                 f"{int((~y).sum())} wrong rank-1 hits, {far[y].mean():.1%} of the {int(y.sum())} right ones")
    return "\n".join(lines)


def _val_adducts(mgf: str, adduct: str) -> Iterator[str]:
    for ref in held_out_queries(mgf):
        if ref.adduct == adduct:
            yield ref.accession


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.calibration.identity_confidence",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="leave-one-lab-out identity searches of FOLD=train and FOLD=val")
    c.add_argument("--mgf", required=True, help="massbank_dev.mgf.gz (FOLD=val records are the val queries)")
    c.add_argument("--library", required=True, help="the bundled library (massbank_open.mgf.gz)")
    c.add_argument("--out", required=True, help="folder to write")
    c.add_argument("--train", type=int, default=15000, help="FOLD=train queries, a seeded subsample (default 15000)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--val", type=int, default=None, help="only the first N FOLD=val queries (a quick check)")
    f = sub.add_parser("fit", help="fit on train.jsonl and write the model")
    f.add_argument("--collected", required=True)
    f.add_argument("--out", required=True, help="the model's JSON (resources/spectral_library/confidence.json)")
    f.add_argument("--l2", type=float, default=1.0)
    x = sub.add_parser("extras", help="FOLD=train: would the query's peaks, instrument and energy help?")
    x.add_argument("--collected", required=True)
    r = sub.add_parser("report", help="print the window's choice and the FOLD=val numbers")
    r.add_argument("--collected", required=True)
    r.add_argument("--model", default=None, help="model JSON (default: the shipped one)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        if args.command == "collect":
            log.info("%s", collect(args.mgf, args.library, args.out, args.train, args.seed, args.val))
        elif args.command == "fit":
            model, section = fit(args.collected, args.l2)
            save(model, section, args.out)
            log.info("wrote %s: %s; rule %s", args.out, json.dumps(model.meta["fit"]["cross_validated"]),
                     json.dumps(section))
        elif args.command == "extras":
            print(compare_extras(args.collected))
        else:
            print(report(args.collected, args.model))
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
