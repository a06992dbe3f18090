"""Formula ranking on held-out spectra: Top-1 / Top-5 of the true formula, formula hidden.

::

    python benchmarks/formula_benchmark.py --mgf ../shared/data/massbank_dev.mgf.gz --fold val \\
        --noise-ppm 0 3 --out runs/formula_benchmark.json

One seeded spectrum per structure (first InChIKey block) of the fold's ``[M+H]+`` records whose
written precursor lies within 10 ppm of the formula's m/z (the others, nominal or one-decimal
precursors of low-resolution instruments, are counted and left out). The formula is hidden; MGF has
no survey scans, so only fragments, the prior and the mass count. Rankings compared:

* ``mass only``: the decompositions (same rules) by absolute mass error (the baseline);
* ``mass + prior``: stage 1 of the scorer (mass error and corpus prior);
* ``full``: :func:`engine.formulas.candidates.rank_formulas` (stage 2 adds the fragments);
* ``full, ion type unknown``: the same, with ``[M+H]+``, ``[M+Na]+`` and ``[M+NH4]+`` all possible
  (a hit needs formula and ion type).

Each ``--noise-ppm`` value adds a seeded N(0, sd) mass error to the precursor (MassBank writes mostly
the theoretical m/z; 0 = as written). Results are split below / above 500 Da (neutral mass).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from engine.chem.adducts import neutral_mass_from_precursor, precursor_mz_from_neutral
from engine.chem.formula import formula_mass, formula_vector, parse_formula
from engine.formulas.candidates import FormulaConfig, rank_formulas
from engine.formulas.decompose import decompose_mass
from engine.formulas.scorer import STAGE1_FEATURES, FormulaScorer, default_scorer
from engine.spectra.io import iter_spectra
from engine.spectra.spectrum import SkippedRecord


def select(mgf: str, fold: str, seed: int, max_structures: int | None, adducts: tuple[str, ...] = ("[M+H]+",)):
    """One seeded spectrum per structure (first InChIKey block) and ion type of ``adducts`` in ``fold``, with a
    formula and a precursor m/z within 10 ppm of it; and how many structures had only low-resolution records."""
    by_structure: dict[tuple[str, str], list] = defaultdict(list)
    n_low_res = set()
    for item in iter_spectra(mgf):
        if isinstance(item, SkippedRecord) or item.metadata.get("fold") != fold or item.adduct not in adducts:
            continue
        if not item.formula or not item.inchikey:
            continue
        theo = precursor_mz_from_neutral(formula_mass(parse_formula(item.formula)), item.adduct)
        if abs(item.precursor_mz - theo) / theo * 1e6 > 10:
            n_low_res.add((item.inchikey[:14], item.adduct))
            continue
        by_structure[item.inchikey[:14], item.adduct].append(item)
    rng = np.random.default_rng(seed)
    keys = sorted(by_structure)
    rng.shuffle(keys)
    keys = keys[:max_structures] if max_structures else keys
    chosen = [by_structure[k][int(rng.integers(len(by_structure[k])))] for k in keys]
    return chosen, len(n_low_res - set(by_structure))


def rank_of(order_formulas: list[str], truth: str) -> int | None:
    try:
        return order_formulas.index(truth) + 1
    except ValueError:
        return None


def run(spectra, noise_ppm: float, seed: int, config: FormulaConfig, scorer) -> list[dict]:
    rng = np.random.default_rng(seed + 7)
    out = []
    for i, s in enumerate(spectra):
        if i and i % 50 == 0:
            print(f"  {i} / {len(spectra)} spectra", file=sys.stderr, flush=True)
        theo = precursor_mz_from_neutral(formula_mass(parse_formula(s.formula)), "[M+H]+")
        precursor = theo * (1 + rng.normal(0, noise_ppm) * 1e-6) if noise_ppm > 0 else s.precursor_mz
        hidden = dataclasses.replace(s, formula=None, precursor_mz=precursor)
        neutral = neutral_mass_from_precursor(precursor, "[M+H]+")
        row = {"id": s.id, "formula": s.formula, "mass": neutral}
        t0 = time.perf_counter()
        vectors, masses = decompose_mass(neutral, config.tolerance(precursor), config.decomposition)
        target = formula_vector(parse_formula(s.formula))
        hit = np.flatnonzero((vectors == target).all(axis=1))
        row["n_decompositions"] = len(vectors)
        row["mass_only"] = int(hit[0]) + 1 if hit.size else None
        if hit.size:
            theo_mz = precursor_mz_from_neutral(0.0, "[M+H]+") + masses
            feats = scorer.prior.features(vectors, masses)
            feats["mass_error"] = ((precursor - theo_mz) / theo_mz * 1e6 / 10.0) ** 2
            stage1 = sum(scorer.stage1[f] * feats[f] for f in STAGE1_FEATURES)
            row["mass_prior"] = int((stage1 > stage1[hit[0]]).sum()) + 1
        else:
            row["mass_prior"] = None
        table = rank_formulas(hidden, config=config, scorer=scorer)
        row["full"] = rank_of([c.formula for c in table.candidates], s.formula)
        row["seconds"] = time.perf_counter() - t0
        unknown = rank_formulas(hidden.with_adduct(None), config=config, scorer=scorer)
        row["full_unknown_ion"] = rank_of([f"{c.formula} {c.ion_type}" for c in unknown.candidates],
                                          f"{s.formula} [M+H]+")
        out.append(row)
    return out


def summarise(rows: list[dict]) -> dict:
    result = {}
    for label, sel in (("< 500 Da", lambda r: r["mass"] < 500), (">= 500 Da", lambda r: r["mass"] >= 500),
                       ("all", lambda r: True)):
        part = [r for r in rows if sel(r)]
        entry = {"n": len(part)}
        for method in ("mass_only", "mass_prior", "full", "full_unknown_ion"):
            ranks = [r[method] for r in part]
            for k in (1, 5):
                entry[f"{method}_top{k}"] = 100.0 * np.mean([x is not None and x <= k for x in ranks]) if part else float("nan")
        entry["seconds_per_spectrum"] = float(np.mean([r["seconds"] for r in part])) if part else float("nan")
        result[label] = entry
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mgf", required=True)
    p.add_argument("--fold", default="val")
    p.add_argument("--max-structures", type=int)
    p.add_argument("--noise-ppm", type=float, nargs="+", default=[0.0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the per-spectrum ranks and the summary as JSON")
    p.add_argument("--scorer", help="formula scorer folder (default: the one in resources/)")
    args = p.parse_args(argv)
    spectra, n_low = select(args.mgf, args.fold, args.seed, args.max_structures)
    print(f"{len(spectra)} FOLD={args.fold} [M+H]+ structures (one spectrum each); {n_low} structures with "
          f"only low-resolution records left out; machine: {platform.processor() or platform.machine()}", flush=True)
    config = FormulaConfig()
    scorer = FormulaScorer.load(args.scorer) if args.scorer else default_scorer()
    report = {"fold": args.fold, "n_structures": len(spectra), "n_low_resolution_left_out": n_low, "runs": {}}
    for noise in args.noise_ppm:
        rows = run(spectra, noise, args.seed, config, scorer)
        summary = summarise(rows)
        report["runs"][str(noise)] = {"summary": summary, "rows": rows}
        if args.out:  # after each noise level, so a long run leaves its finished part
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1))
        print(f"\nprecursor noise sd {noise:g} ppm")
        print("| mass | n | mass only Top-1 / Top-5 | mass + prior | full (fragments) | full, ion type unknown | s / spectrum |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for label, e in summary.items():
            print(f"| {label} | {e['n']} | {e['mass_only_top1']:.1f} / {e['mass_only_top5']:.1f} | "
                  f"{e['mass_prior_top1']:.1f} / {e['mass_prior_top5']:.1f} | {e['full_top1']:.1f} / {e['full_top5']:.1f} | "
                  f"{e['full_unknown_ion_top1']:.1f} / {e['full_unknown_ion_top5']:.1f} | {e['seconds_per_spectrum']:.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
