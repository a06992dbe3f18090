"""Seeded random subset of a molecule TSV (header kept, rows in their original order).

The default model's decoder saw less than one pass over its corpus in the CPU time a session has,
so its corpus was cut to what that budget uses, at random rather than by position (the file is
ordered by source):

    python scripts/sample_molecules.py ../shared/data/molecules.tsv.gz runs/molecules_sub340k.tsv.gz \\
        --rows 340000 --seed 0
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="TSV with a header line (.gz or plain)")
    p.add_argument("out", help="subset TSV to write (.gz or plain)")
    p.add_argument("--rows", type=int, required=True, help="rows to keep")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    opener = gzip.open if args.source.endswith(".gz") else open
    with opener(args.source, "rt", encoding="utf-8") as fh:
        rows = fh.read().splitlines()
    head, body = rows[0], rows[1:]
    if not 0 < args.rows <= len(body):
        p.error(f"--rows {args.rows} must be between 1 and the {len(body):,} data rows of {args.source}")
    keep = sorted(random.Random(args.seed).sample(range(len(body)), args.rows))
    writer = gzip.open if args.out.endswith(".gz") else open
    with writer(args.out, "wt", encoding="utf-8") as fh:
        fh.write(head + "\n")
        for i in keep:
            fh.write(body[i] + "\n")
    print(f"kept {args.rows:,} of {len(body):,} rows (seed {args.seed}) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
