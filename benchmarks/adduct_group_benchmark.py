"""Adduct groups on simulated LC-MS runs with known partners: grouping precision and recall, and formula and ion type
first per ion type, each feature alone against its group's joint decision (issue #56, item 2).

::

    OMP_NUM_THREADS=1 python benchmarks/adduct_group_benchmark.py --mgf ../shared/data/massbank_dev.mgf.gz \\
        --fold val --instruments orbitrap qtof --out runs/adduct_groups_val.json

Compounds: one seeded ``[M+H]+`` spectrum per structure of the fold (neutral mass 100-900 Da, precursor within
10 ppm of the formula), every structure that also has an ``[M+Na]+``, ``[M+NH4]+`` or ``[M+K]+`` spectrum in the
fold, and a seeded sample of the others up to ``--compounds``. Runs of ``--run-size`` compounds
(``benchmarks/realistic_runs.py``, :func:`lcms_run`): apexes drawn over the run (``--seconds-per-compound`` apart
on average, so unrelated compounds co-elute by chance), peak sigma 1.5-3 s, a survey scan every 0.5 s, one MS2 scan
per ion near its apex. Each compound shows its ``[M+H]+`` and partners: those with a real spectrum of the ion type
always (that spectrum is their MS2), others at ``--partner-rates`` with an MS2 of the precursor and noise (a
non-fragmenting adduct); at ``--decoy-rate``, another compound's ion within 3 ppm of a partner m/z the compound does
not show, 1-3 s from its apex (it must stay out of the group). Features and groups are made as ``msgpt predict``
makes them (engine.spectra.features, default settings; the run's m/z recalibration, engine.formulas.recalibration).

Printed, per instrument and in total:

* **grouping**: pairs of features of one compound (true pairs) against pairs put in one group: precision, recall,
  and the share of grouped features given their true ion type; decoys grouped;
* **formula and ion type first**, per true ion type and MS2 source (real / simulated): each feature's own ranking
  (:func:`engine.formulas.candidates.rank_formulas`, ion types ``[M+H]+``, ``[M+Na]+``, ``[M+NH4]+``) against the
  ranking its group gives it (:func:`engine.formulas.groups.member_view`; a feature outside a group keeps its own).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from formula_benchmark import select  # benchmarks/ is the script folder
from realistic_runs import INSTRUMENTS, PARTNER_ION_TYPES, adduct_partner_ions, decoy_ion, lcms_run

from engine.chem.formula import formula_mass, parse_formula
from engine.formulas.candidates import FormulaConfig, rank_formulas
from engine.formulas.groups import PRIOR_COUNTS, decide_group, member_view
from engine.formulas.recalibration import recalibrate_features, run_formula_config
from engine.spectra.adduct_groups import GroupConfig, group_features, with_partners
from engine.spectra.features import FeatureConfig, build_features

ION_TYPES = ("[M+H]+", *PARTNER_ION_TYPES)


def compounds(mgf: str, fold: str, seed: int, n: int):
    """``[(key, [M+H]+ spectrum, {ion type: real partner spectrum})]`` (module notes)."""
    chosen, _ = select(mgf, fold, seed, None, ION_TYPES)
    by = defaultdict(dict)
    for s in chosen:
        by[s.inchikey[:14]][s.adduct] = s
    keys = [k for k in sorted(by) if "[M+H]+" in by[k] and 100 <= formula_mass(parse_formula(by[k]["[M+H]+"].formula)) < 900]
    with_partner = [k for k in keys if len(by[k]) > 1]
    rest = [k for k in keys if len(by[k]) == 1]
    rng = np.random.default_rng(seed)
    rng.shuffle(rest)
    picked = with_partner + rest[: max(0, n - len(with_partner))]
    rng.shuffle(picked)
    return [(k, by[k]["[M+H]+"], {a: s for a, s in by[k].items() if a != "[M+H]+"}) for k in picked]


def simulate(batch, pool, instrument, rng, rates: dict, decoy_rate: float, spacing: float):
    """The ions of one run of the compounds ``batch`` (decoys from ``pool``)."""
    length = spacing * len(batch)
    ions = []
    for key, main, partners in batch:
        apex, sigma = rng.uniform(30.0, 30.0 + length), rng.uniform(1.5, 3.0)
        height = 10 ** (rng.uniform(*instrument.mono_log10) + 1.0)
        own = adduct_partner_ions(key, main, partners, apex, sigma, height,
                                  {a: (1.0 if a in partners else rates.get(a, 0.0)) for a in PARTNER_ION_TYPES}, rng)
        ions.extend(own)
        absent = [a for a in PARTNER_ION_TYPES if a not in {i.ion_type for i in own}]
        if absent and rng.random() < decoy_rate:
            other = pool[int(rng.integers(len(pool)))]
            if other.inchikey[:14] != key:
                target = dataclasses.replace(own[0], ion_type=absent[int(rng.integers(len(absent)))])
                ions.append(decoy_ion(f"decoy:{other.inchikey[:14]}:{key}", target, other, rng))
    return ions, length + 60.0


def grouping_metrics(built, survey, groups: GroupConfig, ion_of: dict):
    """``(metrics, grouped features)`` of one grouping setting on a run's features."""
    fconfig = FeatureConfig(groups=groups)
    features, result = group_features(built, survey, fconfig)
    true_pairs, found_pairs = set(), set()
    for a, b in itertools.combinations(features, 2):
        ia, ib = ion_of[a.id], ion_of[b.id]
        if ia.compound == ib.compound and ia is not ib and "decoy" not in (ia.role, ib.role):
            true_pairs.add((a.id, b.id))
        if a.group is not None and b.group is not None and a.group.id == b.group.id:
            found_pairs.add((a.id, b.id))
    grouped = [f for f in features if f.group is not None]
    return {
        "n_features": len(features), "true_pairs": len(true_pairs), "found_pairs": len(found_pairs),
        "correct_pairs": len(true_pairs & found_pairs), "n_grouped": len(grouped),
        "grouped_right_ion": sum(f.ion_type_in_group == ion_of[f.id].ion_type for f in grouped),
        "decoys_grouped": sum(ion_of[f.id].role == "decoy" for f in grouped),
        "decoys": sum(ion_of[f.id].role == "decoy" for f in features),
        "peak_width_s": None if result is None else result.peak_width_s,
    }, features


def evaluate_run(ions, instrument, rng, rt_end, config: FormulaConfig, groups: GroupConfig,
                 priors: tuple[str, ...] = ("once",), sweep: tuple = (), formulas: bool = True):
    """One simulated run: the grouping's metrics (and each ``sweep`` setting's, ``(label, GroupConfig)``) and, with
    ``formulas``, each partner's formula and ion type first alone and with its group."""
    spectra, survey, _, owner = lcms_run(ions, instrument, rng, (0.0, rt_end))
    of_spectrum = {s.id: ion for s, ion in zip(spectra, owner)}
    built = build_features(spectra, survey, FeatureConfig(groups=groups))
    ion_of = {}
    for f in built:
        owners = [of_spectrum[s.id] for s in f.scans]
        ion_of[f.id] = max(owners, key=owners.count)
    out, features = grouping_metrics(built, survey, groups, ion_of)
    out["sweep"] = {label: grouping_metrics(built, survey, g, ion_of)[0] for label, g in sweep}
    out["rows"] = []
    if not formulas:
        return out
    features = with_partners(list(recalibrate_features(features, config=config)))
    rows = out["rows"]
    decisions = {}
    for f in features:
        ion = ion_of[f.id]
        if ion.role == "decoy":
            continue
        cfg = run_formula_config(f.spectrum, config)
        alone = rank_formulas(f.spectrum, ms1=f.ms1, config=cfg)
        top = alone.candidates[0] if alone.candidates else None
        row = {"ion_type": ion.ion_type, "source": ion.source, "formula": ion.formula, "grouped": f.group is not None,
               "alone": bool(top and top.formula == ion.formula and top.ion_type == ion.ion_type)}
        row["alone_top"] = f"{top.formula} {top.ion_type}" if top else ""
        for prior in priors:
            name = "group" if prior == priors[0] else f"group_{prior}"
            how, weight, mass = (prior.split(":") + ["", ""])[:3]
            row[name] = row["alone"]
            if f.group is not None and f.group_members:
                key = f.group.id, prior
                if key not in decisions:
                    decisions[key] = decide_group(f.group_members, config, prior=how,
                                                  partner_weight=float(weight or 1.0), mass=mass or "sum",
                                                  config_of=lambda s: run_formula_config(s, config))
                d = decisions[key]
                if d.joint.candidates:
                    view = member_view(d, f.id).candidates[0]
                    row[name] = view.formula == ion.formula and view.ion_type == ion.ion_type
                    row[f"{name}_top"] = f"{view.formula} {view.ion_type}"
                    row["lead"] = d.lead_id == f.id
        rows.append(row)
    return out


COUNTS = ("n_features", "true_pairs", "found_pairs", "correct_pairs", "n_grouped", "grouped_right_ion",
          "decoys_grouped", "decoys")


def _grouping_total(runs: list[dict]) -> dict:
    total = {k: sum(r[k] for r in runs) for k in COUNTS}
    total["precision"] = total["correct_pairs"] / total["found_pairs"] if total["found_pairs"] else float("nan")
    total["recall"] = total["correct_pairs"] / total["true_pairs"] if total["true_pairs"] else float("nan")
    return total


def summarise(runs: list[dict]) -> dict:
    total = _grouping_total(runs)
    labels = list(runs[0].get("sweep", {})) if runs else []
    total["sweep"] = {label: _grouping_total([r["sweep"][label] for r in runs]) for label in labels}
    by = defaultdict(list)
    for r in runs:
        for row in r["rows"]:
            by[row["ion_type"], row["source"]].append(row)
    total["formula_first"] = {f"{ion} ({source} MS2)": {
        "n": len(rows), "alone": sum(x["alone"] for x in rows), "group": sum(x["group"] for x in rows),
        "grouped": sum(x["grouped"] for x in rows),
        **{k: sum(x[k] for x in rows) for k in rows[0] if k.startswith("group_") and not k.endswith("_top")}}
        for (ion, source), rows in sorted(by.items()) if rows}
    return total


def _grouping_line(s: dict) -> str:
    return (f"grouping precision {s['precision']:.3f} ({s['correct_pairs']}/{s['found_pairs']} pairs), recall "
            f"{s['recall']:.3f} ({s['correct_pairs']}/{s['true_pairs']}); grouped features with their true ion type "
            f"{s['grouped_right_ion']}/{s['n_grouped']}; decoys grouped {s['decoys_grouped']}/{s['decoys']}")


def report(name: str, s: dict) -> None:
    print(f"{name}: {s['n_features']} features; {_grouping_line(s)}")
    for label, t in s.get("sweep", {}).items():
        print(f"  setting {label}: {_grouping_line(t)}")
    for key, v in s["formula_first"].items():
        print(f"  formula and ion type first, {key}: alone {v['alone']}/{v['n']} ({v['alone'] / v['n']:.1%}), "
              f"with the group {v['group']}/{v['n']} ({v['group'] / v['n']:.1%}); {v['grouped']} grouped"
              + "".join(f"; {k} {n}/{v['n']}" for k, n in v.items() if k.startswith("group_")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mgf", required=True)
    p.add_argument("--fold", default="val")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compounds", type=int, default=120, help="compounds in all (those with real partners first)")
    p.add_argument("--run-size", type=int, default=20)
    p.add_argument("--seconds-per-compound", type=float, default=15.0)
    p.add_argument("--instruments", nargs="+", default=["orbitrap"], choices=sorted(INSTRUMENTS))
    p.add_argument("--partner-rates", nargs=3, type=float, default=[0.5, 0.25, 0.15], metavar=("NA", "NH4", "K"))
    p.add_argument("--decoy-rate", type=float, default=0.3)
    p.add_argument("--min-correlation", type=float, default=GroupConfig().min_correlation)
    p.add_argument("--priors", nargs="+", default=["once"], metavar="PRIOR[:W[:MASS]]",
                   help="how the group's joint score counts the formula prior (engine.formulas.groups: once, each), "
                        "after a colon the partners' weight (default 1), after another sum or mean (the mass terms): "
                        "the first is reported as 'with the group', the others beside it")
    p.add_argument("--apex-fraction", type=float, default=GroupConfig().apex_fraction)
    p.add_argument("--sweep", nargs="*", default=[], metavar="R:F",
                   help="other grouping settings (min correlation : apex fraction) scored on the same runs")
    p.add_argument("--grouping-only", action="store_true", help="skip the formula rankings")
    p.add_argument("--out")
    args = p.parse_args(argv)
    for prior in args.priors:
        if prior.partition(":")[0] not in PRIOR_COUNTS:
            p.error(f"--priors {prior!r}: give once or each, optionally with :WEIGHT")
    t0 = time.perf_counter()
    chosen = compounds(args.mgf, args.fold, args.seed, args.compounds)
    pool = [main for _, main, _ in chosen]
    n_real = {a: sum(a in partners for _, _, partners in chosen) for a in PARTNER_ION_TYPES}
    print(f"{len(chosen)} FOLD={args.fold} compounds; real partner spectra: {n_real}", file=sys.stderr)
    rates = dict(zip(PARTNER_ION_TYPES, args.partner_rates))
    groups = GroupConfig(min_correlation=args.min_correlation, apex_fraction=args.apex_fraction)
    sweep = tuple((label, GroupConfig(min_correlation=float(label.split(":")[0]),
                                      apex_fraction=float(label.split(":")[1]))) for label in args.sweep)
    config = FormulaConfig()
    out = {"settings": vars(args), "machine": f"{platform.processor() or platform.machine()}, "
           f"{platform.system()}, one thread", "instruments": {}}
    every = []
    for name in args.instruments:
        rng = np.random.default_rng(args.seed + 1)
        runs = []
        for start in range(0, len(chosen), args.run_size):
            batch = chosen[start:start + args.run_size]
            ions, end = simulate(batch, pool, INSTRUMENTS[name], rng, rates, args.decoy_rate, args.seconds_per_compound)
            runs.append(evaluate_run(ions, INSTRUMENTS[name], rng, end, config, groups, tuple(args.priors), sweep,
                                     formulas=not args.grouping_only))
            print(f"  {name}: run {len(runs)}, {runs[-1]['n_features']} features, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        s = summarise(runs)
        report(name, s)
        out["instruments"][name] = s
        out.setdefault("rows", {})[name] = [row for r in runs for row in r["rows"]]
        every.extend(runs)
    if len(args.instruments) > 1:
        s = summarise(every)
        report("all instruments", s)
        out["total"] = s
    print(f"{time.perf_counter() - t0:.0f} s on {out['machine']}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
