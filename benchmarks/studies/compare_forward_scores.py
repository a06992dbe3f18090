"""Two forward scores on the same retrieval pools: the paired 95% interval of the library-alone Hit@1 gain.

``training.studies.retrieval_forward`` pairs weights of one score (its suspect-rule table); this pairs two of its runs,
each at its own weight, for instance the unweighted score at ``w = 8`` against the intensity-weighted one at
``w = 4``. Both runs' ``forward_scores.jsonl`` must cover the pools (run ``training.studies.retrieval_forward`` first).
Per set (train-unseen, FOLD=val) and track it prints Hit@1 of A and B and the interval of B − A, for the mean
over both tracks too; ``--fresh N`` also prints the FOLD=val pools after the first N (spectra not looked at by
an earlier choice)::

    python benchmarks/studies/compare_forward_scores.py --pools runs/retrieval/v10_lib_all \\
        --a runs/retrieval_forward/all_shipped:8 --b runs/retrieval_forward/all_int4:4 --fresh 150

Its table: docs/evidence/suspect_order.md, "Intensity weights (adopted)" (the paired 95% interval of the library-
alone Hit@1 gain), with the command above.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from training.studies.retrieval import TRACKS, Pool, ci95  # noqa: E402
from training.studies.retrieval_forward import SETS, library_hit1, read_score_cache, with_forward  # noqa: E402
from training.studies.retrieval_scorer import pool_spectra  # noqa: E402


def run_and_weight(text: str) -> tuple[Path, float]:
    folder, _, w = text.rpartition(":")
    try:
        return Path(folder), float(w)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FOLDER:WEIGHT, got {text!r}") from None


def _ci(gain: np.ndarray) -> str:
    lo, hi = ci95(gain)
    return f"{100 * gain.mean():+.1f} ({100 * lo:+.1f} … {100 * hi:+.1f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pools", required=True, type=Path, help="a training.studies.retrieval output folder")
    p.add_argument("--a", required=True, type=run_and_weight, help="FOLDER:WEIGHT of the baseline run")
    p.add_argument("--b", required=True, type=run_and_weight, help="FOLDER:WEIGHT of the run compared with it")
    p.add_argument("--shortlist", type=int, default=10)
    p.add_argument("--fresh", type=int, default=0, help="also the FOLD=val pools after the first N")
    a = p.parse_args(argv)
    records, _ = pool_spectra(a.pools)
    caches = {}
    for name, (folder, _) in (("a", a.a), ("b", a.b)):
        caches[name] = read_score_cache(folder / "forward_scores.jsonl")
        missing = [k for k in records if k not in caches[name]]
        if missing:
            p.error(f"{folder} has no forward scores for {len(missing)} of the {len(records)} pools; run "
                    f"training.studies.retrieval_forward --pools {a.pools} --out {folder} first")
    print(f"A = {a.a[0]} at w = {a.a[1]:g}; B = {a.b[0]} at w = {a.b[1]:g}; top {a.shortlist}; Hit@1 gain B − A, "
          "points (95% interval, paired bootstrap)")
    for _, fold, label in SETS:
        keys = [k for k, r in records.items() if r["fold"] == fold]
        hits = {}
        for name, (_, w) in (("a", a.a), ("b", a.b)):
            pools = [with_forward(Pool.from_record(records[k]), records[k], caches[name][k]["fw"]) for k in keys]
            hits[name] = library_hit1(pools, a.shortlist, w)
        parts = [(f"{label} ({len(keys)})", slice(None))]
        if fold == "val" and a.fresh:
            parts.append((f"{label} after the first {a.fresh} ({max(len(keys) - a.fresh, 0)})", slice(a.fresh, None)))
        for title, sel in parts:
            cells = [f"{t} {100 * hits['a'][t][sel].mean():.1f} → {100 * hits['b'][t][sel].mean():.1f}: "
                     f"{_ci(hits['b'][t][sel] - hits['a'][t][sel])}" for t in TRACKS]
            mean = np.mean([hits["b"][t][sel] - hits["a"][t][sel] for t in TRACKS], axis=0)
            print(f"{title}: " + "; ".join(cells) + f"; mean {_ci(mean)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
