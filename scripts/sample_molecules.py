"""Seeded random subset of a molecule TSV (header kept, rows in their original order).

The default model's decoder saw less than one pass over its corpus in the CPU time a session has,
so its corpus was cut to what that budget uses, at random rather than by position (the file is
ordered by source):

    python scripts/sample_molecules.py ../shared/data/molecules.tsv.gz runs/molecules_sub340k.tsv.gz \\
        --rows 340000 --seed 0

``--keep-sources`` keeps every row that any of the named sources holds (the third column, ``;``-joined)
and fills the rest of ``--rows`` at random from the other rows, e.g. the corpus's ~98k metabolites,
natural products and MS/MS standards beside as many drug-like structures:

    python scripts/sample_molecules.py ../shared/data/molecules.tsv.gz runs/molecules_bio_balanced.tsv.gz \\
        --rows 195710 --keep-sources massbank_open,repoRT,spectraverse_example,modelseed_metacyc,npclassifier,mibig
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys


def _sources(row: str) -> set[str]:
    """The sources of one ``smiles<TAB>inchikey14<TAB>source`` row (``;``-joined in the third column)."""
    parts = row.split("\t")
    return set(parts[2].split(";")) if len(parts) > 2 else set()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="TSV with a header line (.gz or plain)")
    p.add_argument("out", help="subset TSV to write (.gz or plain)")
    p.add_argument("--rows", type=int, required=True, help="rows to keep")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-sources", default="",
                   help="comma-separated sources whose rows are all kept; --rows is filled from the others")
    args = p.parse_args(argv)
    opener = gzip.open if args.source.endswith(".gz") else open
    with opener(args.source, "rt", encoding="utf-8") as fh:
        rows = fh.read().splitlines()
    head, body = rows[0], rows[1:]
    if not 0 < args.rows <= len(body):
        p.error(f"--rows {args.rows} must be between 1 and the {len(body):,} data rows of {args.source}")
    wanted = {s.strip() for s in args.keep_sources.split(",") if s.strip()}
    kept = [i for i, row in enumerate(body) if wanted & _sources(row)] if wanted else []
    if len(kept) > args.rows:
        p.error(f"--keep-sources hold {len(kept):,} rows, more than --rows {args.rows}: raise --rows to at least that")
    if wanted and not kept:
        p.error(f"no row of {args.source} holds any of --keep-sources {sorted(wanted)}; the third column names them")
    kept_set = set(kept)
    others = [i for i in range(len(body)) if i not in kept_set]
    keep = sorted(kept + random.Random(args.seed).sample(others, args.rows - len(kept)))
    writer = gzip.open if args.out.endswith(".gz") else open
    with writer(args.out, "wt", encoding="utf-8") as fh:
        fh.write(head + "\n")
        for i in keep:
            fh.write(body[i] + "\n")
    extra = f" ({len(kept):,} from --keep-sources)" if wanted else ""
    print(f"kept {args.rows:,} of {len(body):,} rows{extra} (seed {args.seed}) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
