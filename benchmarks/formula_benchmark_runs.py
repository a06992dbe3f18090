"""Formula ranking on spectra made to look like real LC-MS/MS runs: Top-1 / Top-5 of the true formula and ion type.

::

    OMP_NUM_THREADS=1 python benchmarks/formula_benchmark_runs.py --mgf ../shared/data/massbank_dev.mgf.gz \\
        --fold val --instruments qtof orbitrap --out runs/formula_benchmark_runs.json

The spectra of ``benchmarks/formula_benchmark.py`` (FOLD=val, one seeded spectrum per structure and ion type of
``--adducts``, default ``[M+H]+``, neutral mass from ``--min-mass`` to below ``--max-mass``) are cut into
simulated runs of ``--run-size`` spectra of one polarity; each run gets one instrument type's perturbations
(``benchmarks/realistic_runs.py``: a run-level m/z offset and slope with per-peak scatter, a survey scan with the
formula's isotope pattern under detector and trimming errors, MS2 noise peaks). Formula and ion type are hidden:
``[M+H]+``, ``[M+Na]+`` and ``[M+NH4]+`` are all possible (``[M-H]-``, ``[M+Cl]-`` and ``[M+HCOO]-`` in negative
mode), as for a user with a run and nothing else (a hit needs both formula and ion type). Heavier or other ion
types, e.g.::

    OMP_NUM_THREADS=1 python benchmarks/formula_benchmark_runs.py --mgf ../shared/data/massbank_dev.mgf.gz \
        --fold val --adducts "[M+Na]+" "[M+NH4]+" "[M-H]-" --out runs/formula_benchmark_runs_adducts.json
    OMP_NUM_THREADS=1 python benchmarks/formula_benchmark_runs.py --mgf ../shared/data/massbank_dev.mgf.gz \
        --fold val --min-mass 500 --max-mass 1000 --out runs/formula_benchmark_runs_heavy.json

Rankings compared:

* ``no MS1``: :func:`~engine.formulas.candidates.rank_formulas` without the survey scan;
* ``MS1, as measured``: with the survey scan, the run's m/z as they are;
* ``MS1, recalibrated``: the run's m/z error estimated from the run itself and corrected first
  (:mod:`engine.formulas.recalibration`), tolerances from its measured scatter.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from formula_benchmark import select  # benchmarks/ is the script folder
from realistic_runs import INSTRUMENTS, perturb_run

from engine.chem.adducts import parse_adduct
from engine.chem.formula import formula_mass, parse_formula
from engine.formulas.candidates import FormulaConfig, rank_formulas
from engine.formulas.recalibration import RecalibrationConfig, recalibrate_run
from engine.formulas.scorer import default_scorer

METHODS = ("no_ms1", "ms1", "recalibrated")


def rank_of(table, formula: str, adduct: str) -> int | None:
    for c in table.candidates:
        if c.formula == formula and c.ion_type == adduct:
            return c.rank
    return None


def run_instrument(spectra, instrument, run_size: int, seed: int, config: FormulaConfig, scorer,
                   methods=METHODS, recalibration: RecalibrationConfig | None = None) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    groups = ([s for s in spectra if parse_adduct(s.adduct).charge > 0], [s for s in spectra if parse_adduct(s.adduct).charge < 0])
    runs = [group[i:i + run_size] for group in groups for i in range(0, len(group), run_size)]  # one polarity each
    for number, run in enumerate(runs, 1):
        calibration, items = perturb_run(run, instrument, rng)
        t0 = time.perf_counter()
        recal = recalibrate_run([(it.spectrum.with_adduct(None), it.ms1) for it in items], config=config, scorer=scorer,
                                recalibration=recalibration or RecalibrationConfig())
        t_recal = time.perf_counter() - t0
        print(f"  {instrument.name} run {number}: true {calibration.offset_ppm:+.1f} ppm "
              f"{calibration.slope_ppm:+.1f} ppm/1000; {recal.describe()}", file=sys.stderr, flush=True)
        for it in items:
            query = it.spectrum.with_adduct(None)
            row = {"id": query.id, "formula": it.formula, "adduct": it.adduct, "has_ms1": it.ms1 is not None,
                   "true_offset_ppm": float(calibration.ppm(query.precursor_mz)),
                   "estimated_offset_ppm": float(recal.ppm(query.precursor_mz)) if recal.applied else None,
                   "recalibration_seconds": t_recal / len(items)}
            if "no_ms1" in methods:
                row["no_ms1"] = rank_of(rank_formulas(query, config=config, scorer=scorer), it.formula, it.adduct)
            if "ms1" in methods:
                table = rank_formulas(query, ms1=it.ms1, config=config, scorer=scorer)
                row["ms1"] = rank_of(table, it.formula, it.adduct)
            t0 = time.perf_counter()
            fixed, fixed_ms1 = recal.apply(query), recal.apply_ms1(it.ms1)
            table = rank_formulas(fixed, ms1=fixed_ms1, config=recal.formula_config(config), scorer=scorer)
            row["recalibrated"] = rank_of(table, it.formula, it.adduct)
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
    return rows


def summarise(rows: list[dict]) -> dict:
    entry = {"n": len(rows), "with_ms1": sum(r["has_ms1"] for r in rows)}
    adducts = sorted({r["adduct"] for r in rows})
    if len(adducts) > 1:
        entry["by_adduct"] = {a: summarise([r for r in rows if r["adduct"] == a]) for a in adducts}
    for method in METHODS:
        for k in (1, 5):
            hits = [r[method] is not None and r[method] <= k for r in rows if method in r]
            entry[f"{method}_top{k}"] = 100.0 * float(np.mean(hits)) if hits else float("nan")
    errors = [abs(r["estimated_offset_ppm"] - r["true_offset_ppm"]) for r in rows if r["estimated_offset_ppm"] is not None]
    entry["recalibrated_share"] = 100.0 * len(errors) / len(rows)
    entry["calibration_error_ppm_median"] = float(np.median(errors)) if errors else float("nan")
    entry["seconds_per_spectrum"] = float(np.mean([r["seconds"] + r["recalibration_seconds"] for r in rows]))
    return entry


def formula_config(settings: list[str], base=None, flag: str = "--set"):
    """``base`` (FormulaConfig(), or RecalibrationConfig()) with ``FIELD=VALUE`` changes (numbers as float or
    int, as the field's default)."""
    base, changes = FormulaConfig() if base is None else base, {}
    for item in settings:
        name, _, value = item.partition("=")
        default = getattr(base, name, None)
        if not value or default is None or not isinstance(default, (int, float)):
            raise SystemExit(f"{flag} {item!r}: give FIELD=VALUE for a numeric or yes/no {type(base).__name__} field.")
        if isinstance(default, bool):
            if value.lower() not in ("0", "1", "false", "true", "no", "yes"):
                raise SystemExit(f"{flag} {item!r}: {name} is yes/no; give {name}=true or {name}=false.")
            changes[name] = value.lower() in ("1", "true", "yes")
        else:
            changes[name] = type(default)(value)
    return dataclasses.replace(base, **changes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mgf", required=True)
    p.add_argument("--fold", default="val")
    p.add_argument("--instruments", nargs="+", choices=sorted(INSTRUMENTS), default=["qtof", "orbitrap"])
    p.add_argument("--run-size", type=int, default=25, help="spectra per simulated run")
    p.add_argument("--max-mass", type=float, default=500.0, help="neutral masses at or above this are left out, Da")
    p.add_argument("--min-mass", type=float, default=0.0, help="neutral masses below this are left out, Da")
    p.add_argument("--adducts", nargs="+", default=["[M+H]+"], help="ion types of the spectra chosen (one per structure each)")
    p.add_argument("--max-structures", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the per-spectrum ranks and the summary as JSON")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="rankings compared")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="FormulaConfig fields to change from the defaults, e.g. isotope_peaks=6 (for tuning on train)")
    p.add_argument("--recalibration", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="RecalibrationConfig fields to change from the defaults, e.g. fragment_weight=0 (for tuning on train)")
    args = p.parse_args(argv)
    chosen, _ = select(args.mgf, args.fold, args.seed, None, tuple(args.adducts))
    spectra = [s for s in chosen if args.min_mass <= formula_mass(parse_formula(s.formula)) < args.max_mass]
    spectra = spectra[: args.max_structures]
    print(f"{len(spectra)} FOLD={args.fold} spectra ({', '.join(args.adducts)}; one per structure and ion type) of "
          f"{args.min_mass:g} to below {args.max_mass:g} Da, runs of {args.run_size}; "
          f"machine: {platform.processor() or platform.machine()}", flush=True)
    config, scorer = formula_config(args.set), default_scorer()
    recalibration = formula_config(args.recalibration, RecalibrationConfig(), "--recalibration")
    report = {"fold": args.fold, "config": args.set, "recalibration": args.recalibration, "adducts": args.adducts,
              "min_mass": args.min_mass, "max_mass": args.max_mass, "run_size": args.run_size, "seed": args.seed,
              "runs": {}}
    print("| instrument | n (with MS1) | no MS1 Top-1 / Top-5 | MS1, as measured | MS1, recalibrated | "
          "runs recalibrated % | calibration error, median ppm | s / spectrum |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.instruments:
        rows = run_instrument(spectra, INSTRUMENTS[name], args.run_size, args.seed, config, scorer, args.methods,
                              recalibration)
        e = summarise(rows)
        report["runs"][name] = {"summary": e, "rows": rows}
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1))
        print(f"| {name} | {e['n']} ({e['with_ms1']}) | {e['no_ms1_top1']:.1f} / {e['no_ms1_top5']:.1f} | "
              f"{e['ms1_top1']:.1f} / {e['ms1_top5']:.1f} | {e['recalibrated_top1']:.1f} / {e['recalibrated_top5']:.1f} | "
              f"{e['recalibrated_share']:.0f} | {e['calibration_error_ppm_median']:.2f} | {e['seconds_per_spectrum']:.2f} |",
              flush=True)
        for adduct, a in e.get("by_adduct", {}).items():
            print(f"| {name}: {adduct} | {a['n']} ({a['with_ms1']}) | {a['no_ms1_top1']:.1f} / {a['no_ms1_top5']:.1f} | "
                  f"{a['ms1_top1']:.1f} / {a['ms1_top5']:.1f} | {a['recalibrated_top1']:.1f} / {a['recalibrated_top5']:.1f} | "
                  f"{a['recalibrated_share']:.0f} | {a['calibration_error_ppm_median']:.2f} | {a['seconds_per_spectrum']:.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
