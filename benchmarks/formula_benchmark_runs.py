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

**Every ion type** (issue #56): ``--adducts all`` takes every ion type of
:data:`engine.chem.adducts.COMMON_ION_TYPES` that has FOLD=val spectra, and the table gets one row per ion type
with its count (``--max-per-adduct`` keeps the first N structures of each, in the seeded order, to subsample the
common ones)::

    OMP_NUM_THREADS=1 python benchmarks/formula_benchmark_runs.py --mgf ../shared/data/massbank_dev.mgf.gz \
        --fold val --adducts all --methods recalibrated --out runs/formula_benchmark_runs_ion_types.json

The ion types tried for each spectrum are ``engine.formulas.candidates``' defaults of its polarity, or those of
``--ion-types`` (``all``: every COMMON_ION_TYPES entry of the polarity, each with its prior).

**Co-detected adduct partners** (:func:`add_partners`): a molecule seen as one ion type in a real survey scan is
often seen as others too (``[M+Na]+`` beside ``[M+H]+``). With ``--partner-rate`` p (default
:data:`PARTNER_RATE`), each other ion type of :data:`PARTNER_ION_TYPES` of the spectrum's polarity is put into its
survey scan with probability p, as a monoisotopic peak at 10^U(-1, 0.5) times the ion's own intensity, with the
run's m/z error and scatter, removed below the instrument's trim and outside the 40 Da survey window a real
feature keeps (``FeatureConfig.ms1_window_da``). A permanently charged ``[M]+`` has no partners. ``--partner-rate 0``
gives the survey scans of before (no partners).
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

from engine.chem.adducts import (
    COMMON_ION_TYPES,
    parse_adduct,
    precursor_mz_from_neutral,
)
from engine.chem.formula import formula_mass, parse_formula
from engine.formulas.candidates import FormulaConfig, rank_formulas
from engine.formulas.recalibration import RecalibrationConfig, recalibrate_run
from engine.formulas.scorer import default_scorer
from engine.spectra.features import FeatureConfig

METHODS = ("no_ms1", "ms1", "recalibrated")
#: The ion types put beside a spectrum's own in its survey scan as co-detected partners, by polarity.
PARTNER_ION_TYPES = {
    "positive": ("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M+K]+"),
    "negative": ("[M-H]-", "[M+Cl]-", "[M+HCOO]-", "[M+CH3COO]-"),
}
#: Default probability that each partner ion type is in a survey scan.
PARTNER_RATE = 0.5
#: A partner's monoisotopic intensity relative to the spectrum's own ion: 10 ** U(low, high).
PARTNER_LOG10_RATIO = (-1.0, 0.5)
#: Ion types that have no adduct partners (a permanent cation is not protonated or sodiated).
NO_PARTNERS = frozenset({"[M]+"})


def partner_peaks(formula: str, adduct: str, main_mz: float, main_intensity: float, calibration, instrument,
                  rng, rate: float, window_da: float) -> tuple[np.ndarray, np.ndarray]:
    """``(mz, intensity)`` of the co-detected partner ions of one spectrum's molecule (module notes)."""
    ion = parse_adduct(adduct)
    if rate <= 0 or ion.name in NO_PARTNERS:
        return np.zeros(0), np.zeros(0)
    mass = formula_mass(parse_formula(formula))
    mz, intensity = [], []
    for other in PARTNER_ION_TYPES[ion.polarity]:
        if other == ion.name:
            continue
        present, ratio = rng.random() < rate, 10 ** rng.uniform(*PARTNER_LOG10_RATIO)
        theo = precursor_mz_from_neutral(mass, other)
        shifted = theo * (1.0 + (float(calibration.ppm(theo)) + rng.normal(0.0, instrument.scatter_ppm)) * 1e-6)
        counts = main_intensity * ratio
        if present and counts >= instrument.trim_counts and abs(shifted - main_mz) <= window_da:
            mz.append(shifted)
            intensity.append(counts)
    return np.asarray(mz, dtype=np.float64), np.asarray(intensity, dtype=np.float64)


def add_partners(items, calibration, instrument, rng, rate: float, window_da: float | None = None) -> list:
    """The simulated spectra of one run with their partner ions added to their survey scans (module notes)."""
    window_da = FeatureConfig().ms1_window_da if window_da is None else window_da
    out = []
    for it in items:
        if it.ms1 is None:
            out.append(it)
            continue
        mz, intensity = partner_peaks(it.formula, it.adduct, it.ms1.precursor_mz, it.ms1.precursor_intensity,
                                      calibration, instrument, rng, rate, window_da)
        if len(mz):
            all_mz, all_int = np.r_[it.ms1.mz, mz], np.r_[it.ms1.intensity, intensity]
            order = np.argsort(all_mz, kind="stable")
            ms1 = dataclasses.replace(it.ms1, mz=all_mz[order], intensity=all_int[order])
            it = dataclasses.replace(it, ms1=ms1)
        out.append(it)
    return out


def rank_of(table, formula: str, adduct: str) -> int | None:
    for c in table.candidates:
        if c.formula == formula and c.ion_type == adduct:
            return c.rank
    return None


def run_instrument(spectra, instrument, run_size: int, seed: int, config: FormulaConfig, scorer,
                   methods=METHODS, recalibration: RecalibrationConfig | None = None,
                   partner_rate: float = PARTNER_RATE) -> list[dict]:
    rng = np.random.default_rng(seed)
    partner_rng = np.random.default_rng(seed + 101)  # its own stream: the runs' other draws stay as before
    rows = []
    groups = ([s for s in spectra if parse_adduct(s.adduct).charge > 0], [s for s in spectra if parse_adduct(s.adduct).charge < 0])
    runs = [group[i:i + run_size] for group in groups for i in range(0, len(group), run_size)]  # one polarity each
    for number, run in enumerate(runs, 1):
        calibration, items = perturb_run(run, instrument, rng)
        items = add_partners(items, calibration, instrument, partner_rng, partner_rate)
        t0 = time.perf_counter()
        recal = recalibrate_run([(it.spectrum.with_adduct(None), it.ms1) for it in items], config=config, scorer=scorer,
                                recalibration=recalibration or RecalibrationConfig())
        t_recal = time.perf_counter() - t0
        print(f"  {instrument.name} run {number}: true {calibration.offset_ppm:+.1f} ppm "
              f"{calibration.slope_ppm:+.1f} ppm/1000; {recal.describe()}", file=sys.stderr, flush=True)
        for it in items:
            query = it.spectrum.with_adduct(None)
            row = {"id": query.id, "formula": it.formula, "adduct": it.adduct, "has_ms1": it.ms1 is not None,
                   "partners": _n_partners(it),
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


def _n_partners(it) -> int:
    """How many partner ions of the spectrum's molecule its survey scan holds (within 10 ppm)."""
    if it.ms1 is None or parse_adduct(it.adduct).name in NO_PARTNERS:
        return 0
    ion, mass = parse_adduct(it.adduct), formula_mass(parse_formula(it.formula))
    found = 0
    for other in PARTNER_ION_TYPES[ion.polarity]:
        if other != ion.name:
            target = precursor_mz_from_neutral(mass, other)
            found += bool(np.any(np.abs(it.ms1.mz - target) <= 10e-6 * target + 1e-9))
    return found


def choose_adducts(names: list[str]) -> tuple[str, ...]:
    """The ion types of ``--adducts`` or ``--ion-types``: ``all`` is every entry of COMMON_ION_TYPES, names are
    normalised."""
    if names == ["all"]:
        return tuple(a for mode in ("positive", "negative") for a in COMMON_ION_TYPES[mode])
    return tuple(dict.fromkeys(parse_adduct(a).name for a in names))


def cap_per_adduct(spectra: list, cap: int | None) -> list:
    """The first ``cap`` spectra of each ion type, in their (seeded) order; all when ``cap`` is None."""
    if not cap:
        return list(spectra)
    seen: dict[str, int] = {}
    out = []
    for s in spectra:
        seen[s.adduct] = seen.get(s.adduct, 0) + 1
        if seen[s.adduct] <= cap:
            out.append(s)
    return out


def summarise(rows: list[dict]) -> dict:
    entry = {"n": len(rows), "with_ms1": sum(r["has_ms1"] for r in rows),
             "with_partner": sum(r.get("partners", 0) > 0 for r in rows)}
    adducts = sorted({r["adduct"] for r in rows})
    if len(adducts) > 1:
        entry["by_adduct"] = {a: summarise([r for r in rows if r["adduct"] == a]) for a in adducts}
    for method in METHODS:
        for k in (1, 5):
            hits = [r[method] is not None and r[method] <= k for r in rows if method in r]
            entry[f"{method}_top{k}"] = 100.0 * float(np.mean(hits)) if hits else float("nan")
            entry[f"{method}_top{k}_hits"] = int(np.sum(hits))
    errors = [abs(r["estimated_offset_ppm"] - r["true_offset_ppm"]) for r in rows if r["estimated_offset_ppm"] is not None]
    entry["recalibrated_share"] = 100.0 * len(errors) / len(rows)
    entry["calibration_error_ppm_median"] = float(np.median(errors)) if errors else float("nan")
    entry["seconds_per_spectrum"] = float(np.mean([r["seconds"] + r["recalibration_seconds"] for r in rows]))
    return entry


def _cell(entry: dict, method: str) -> str:
    """``Top-1 / Top-5 %`` of one ion type's row, with the Top-1 count when it is small (``1 of 9``)."""
    top1, top5 = entry[f"{method}_top1"], entry[f"{method}_top5"]
    if np.isnan(top1):
        return "—"
    count = f" ({entry[f'{method}_top1_hits']} of {entry['n']})" if entry["n"] < 50 else ""
    return f"{top1:.1f} / {top5:.1f}{count}"


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
    p.add_argument("--adducts", nargs="+", default=["[M+H]+"],
                   help="ion types of the spectra chosen (one per structure each); 'all': every COMMON_ION_TYPES entry")
    p.add_argument("--max-per-adduct", type=int, help="at most this many structures of each ion type (seeded order)")
    p.add_argument("--ion-types", nargs="+", metavar="ION",
                   help="the ion types tried for every spectrum (default: engine.formulas.candidates' defaults of its "
                   "polarity); 'all': every COMMON_ION_TYPES entry")
    p.add_argument("--partner-rate", type=float, default=PARTNER_RATE,
                   help="probability that each other ion type of the molecule is in its survey scan (0: none)")
    p.add_argument("--max-structures", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the per-spectrum ranks and the summary as JSON")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="rankings compared")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="FormulaConfig fields to change from the defaults, e.g. isotope_peaks=6 (for tuning on train)")
    p.add_argument("--recalibration", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="RecalibrationConfig fields to change from the defaults, e.g. fragment_weight=0 (for tuning on train)")
    args = p.parse_args(argv)
    if not 0.0 <= args.partner_rate <= 1.0:
        raise SystemExit(f"--partner-rate {args.partner_rate}: give a probability from 0 to 1.")
    adducts = choose_adducts(args.adducts)
    chosen, _ = select(args.mgf, args.fold, args.seed, None, adducts)
    spectra = [s for s in chosen if args.min_mass <= formula_mass(parse_formula(s.formula)) < args.max_mass]
    spectra = cap_per_adduct(spectra, args.max_per_adduct)[: args.max_structures]
    counts = {a: sum(s.adduct == a for s in spectra) for a in adducts}
    print(f"{len(spectra)} FOLD={args.fold} spectra (one per structure and ion type: "
          f"{', '.join(f'{a} {n}' for a, n in counts.items())}) of {args.min_mass:g} to below {args.max_mass:g} Da, "
          f"runs of {args.run_size}, partner rate {args.partner_rate:g}; ion types tried: "
          f"{', '.join(choose_adducts(args.ion_types)) if args.ion_types else 'the defaults of engine.formulas.candidates'}"
          f"; machine: {platform.processor() or platform.machine()}", flush=True)
    config, scorer = formula_config(args.set), default_scorer()
    if args.ion_types:
        config = dataclasses.replace(config, ion_types=choose_adducts(args.ion_types))
    recalibration = formula_config(args.recalibration, RecalibrationConfig(), "--recalibration")
    report = {"fold": args.fold, "config": args.set, "ion_types": args.ion_types, "recalibration": args.recalibration, "adducts": list(adducts),
              "counts": counts, "partner_rate": args.partner_rate, "max_per_adduct": args.max_per_adduct,
              "min_mass": args.min_mass, "max_mass": args.max_mass, "run_size": args.run_size, "seed": args.seed,
              "runs": {}}
    print("| instrument | n (with MS1; with a partner) | no MS1 Top-1 / Top-5 | MS1, as measured | MS1, recalibrated | "
          "runs recalibrated % | calibration error, median ppm | s / spectrum |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.instruments:
        rows = run_instrument(spectra, INSTRUMENTS[name], args.run_size, args.seed, config, scorer, args.methods,
                              recalibration, args.partner_rate)
        e = summarise(rows)
        report["runs"][name] = {"summary": e, "rows": rows}
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1))
        print(f"| {name} | {e['n']} ({e['with_ms1']}; {e['with_partner']}) | {_cell(e, 'no_ms1')} | {_cell(e, 'ms1')} | "
              f"{_cell(e, 'recalibrated')} | {e['recalibrated_share']:.0f} | {e['calibration_error_ppm_median']:.2f} | {e['seconds_per_spectrum']:.2f} |",
              flush=True)
        for adduct in adducts:
            a = e.get("by_adduct", {}).get(adduct)
            if a is not None:
                print(f"| {name}: {adduct} | {a['n']} ({a['with_ms1']}; {a['with_partner']}) | {_cell(a, 'no_ms1')} | {_cell(a, 'ms1')} | "
                      f"{_cell(a, 'recalibrated')} | {a['recalibrated_share']:.0f} | "
                      f"{a['calibration_error_ppm_median']:.2f} | {a['seconds_per_spectrum']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
