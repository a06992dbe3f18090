"""Precursor features of real LC-MS/MS runs: features found, scans per feature, seconds per run.

::

    python benchmarks/feature_benchmark.py ../shared/data/mzml/qexactive_dda_*.mzML

For each run: MS2 and MS1 scans read, precursor features made (engine.spectra.features, default settings),
scans per feature, the share with MS1 evidence and with fragments, the seconds to read and group
the run, the run's m/z recalibration (engine.formulas.recalibration, as ``msgpt predict`` makes it) and its
seconds, and the seconds to rank the formula candidates of every feature (no structure model).
With ``--predict`` it also times ``msgpt predict`` on the run (bundled model, given pool size).

Adduct groups (engine.spectra.adduct_groups, default settings; issue #56): the run's measured peak width, how many
compound groups of how many features, the ion-type pairs that joined them, and with ``--list-groups`` every group with
its members, the MS1 correlation that joined them and (unless ``--no-formulas``) the group's joint formula against
each member's own first formula (engine.formulas.groups), for a reader to judge their plausibility: a real run has no
ground truth.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from engine.formulas.candidates import FormulaConfig, rank_formulas
from engine.formulas.groups import decide_group
from engine.formulas.recalibration import recalibrate_features, run_formula_config
from engine.formulas.scorer import default_scorer
from engine.spectra.adduct_groups import with_partners
from engine.spectra.features import FeatureConfig
from engine.spectra.run_features import RunCounts, iter_features
from engine.spectra.spectrum import SkippedRecord, has_fragments


def measure(path: str, formulas: bool) -> dict:
    counts = RunCounts()
    t0 = time.perf_counter()
    items = list(iter_features(path, FeatureConfig(), counts=counts))
    t_features = time.perf_counter() - t0
    features = [f for f in items if not isinstance(f, SkippedRecord)]
    scans = np.array([f.n_scans for f in features])
    groups = {f.group.id: f.group for f in features if f.group is not None}
    pairs = Counter(" ~ ".join(sorted((a.ion_type, b.ion_type))) for g in groups.values()
                    for a, b in itertools.combinations(g.members, 2))
    out = {
        "run": Path(path).name, "ms2": counts.n_ms2, "skipped": counts.n_skipped, "ms1": counts.n_survey,
        "features": len(features), "scans_mean": float(scans.mean()), "scans_median": float(np.median(scans)),
        "scans_max": int(scans.max()), "single_scan": int((scans == 1).sum()),
        "with_ms1": int(sum(f.ms1 is not None for f in features)),
        "without_fragments": int(sum(not has_fragments(f.spectrum) for f in features)),
        "seconds_features": t_features,
        "groups": len(groups), "grouped": counts.n_grouped, "peak_width_s": counts.peak_width_s,
        "group_pairs": dict(pairs.most_common()), "group_list": [],
    }
    for g in groups.values():
        r = min(e.correlation for e in g.evidence)
        out["group_list"].append({"group": g.describe(), "min_r": r, "members": [m.feature_id for m in g.members]})
    if formulas:
        default_scorer()  # loaded once, not timed
        t0 = time.perf_counter()
        features = list(recalibrate_features(features, report=lambda r: out.update(recalibration=r.describe())))
        out["seconds_recalibration"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        top_adducts = []
        for f in features:
            table = rank_formulas(f.spectrum, ms1=f.ms1, supported_adducts=("[M+H]+", "[M+Na]+"),
                                  config=run_formula_config(f.spectrum, FormulaConfig()))
            if table.candidates:
                top_adducts.append(table.candidates[0].ion_type)
        out["seconds_formulas"] = time.perf_counter() - t0
        out["top_ion_types"] = {a: top_adducts.count(a) for a in sorted(set(top_adducts))}
        by_id = {f.id: f for f in with_partners(features)}
        for entry in out["group_list"]:
            members = by_id[entry["members"][0]].group_members
            d = decide_group(members, config_of=lambda s: run_formula_config(s, FormulaConfig()))
            joint = d.joint.candidates[0].formula if d.joint.candidates else "none"
            alone = []
            for f in members:
                t = rank_formulas(f.spectrum, ms1=f.ms1, config=run_formula_config(f.spectrum, FormulaConfig()))
                c = t.candidates[0] if t.candidates else None
                alone.append(f"{f.ion_type_in_group}: {c.formula + ' ' + c.ion_type if c else 'none'}")
            entry["joint"] = f"{joint}, lead {d.ion_type(d.lead_id)}; alone " + "; ".join(alone)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="mzML runs")
    p.add_argument("--no-formulas", action="store_true", help="skip timing the formula candidates")
    p.add_argument("--predict", action="store_true", help="also time `msgpt predict RUN` (bundled model)")
    p.add_argument("--pool-size", type=int, default=100, help="pool size B for --predict (default 100)")
    p.add_argument("--list-groups", action="store_true", help="list every compound group of each run")
    args = p.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print("| run | MS2 | MS1 | features | scans / feature (mean, median, max) | single-scan | with MS1 | "
          "no fragments | s features | s formulas |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for run in args.runs:
        m = measure(run, not args.no_formulas)
        print(f"| {m['run']} | {m['ms2']} | {m['ms1']} | {m['features']} | {m['scans_mean']:.2f}, "
              f"{m['scans_median']:g}, {m['scans_max']} | {m['single_scan']} | {m['with_ms1']} | "
              f"{m['without_fragments']} | {m['seconds_features']:.1f} | {m.get('seconds_formulas', float('nan')):.1f} |",
              flush=True)
        print(f"  adduct groups: {m['groups']} groups of {m['grouped']} features, peak width "
              f"{m['peak_width_s'] or float('nan'):.1f} s; pairs {m['group_pairs']}", flush=True)
        if args.list_groups:
            for entry in m["group_list"]:
                print(f"    {entry['group']} (r >= {entry['min_r']:.2f})"
                      + (f"; joint {entry['joint']}" if "joint" in entry else ""), flush=True)
        if "top_ion_types" in m:
            print(f"  best-ranked ion types: {m['top_ion_types']}", flush=True)
            print(f"  {m['recalibration']} ({m['seconds_recalibration']:.1f} s)", flush=True)
        if args.predict:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                rc = subprocess.run([sys.executable, "-m", "engine.cli", "predict", run, "-o", f"{tmp}/out.csv",
                                     "--pool-size", str(args.pool_size), "-q"], capture_output=True, text=True)
                seconds = time.perf_counter() - t0
            tail = rc.stderr.strip().splitlines()[-3:]
            print(f"  msgpt predict (B={args.pool_size}): {seconds:.0f} s, exit {rc.returncode}; " + " / ".join(tail),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
