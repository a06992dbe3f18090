"""How many of a model's candidates are structures it was trained on (the novelty flag, measured).

Reads the ``results.jsonl`` of an ``msgpt-eval`` run (each line holds a spectrum's top candidates by
first InChIKey block) and a set of known structures (a bundle's ``known_structures.npz``, or the
bundle folder), and prints per variant: spectra with a candidate, the share of rank-1 candidates and
of all listed top candidates found in the set, and the share of rank-1 candidates that are the
reference. On the validation fold the references are held out of the training corpus, so a rank-1
candidate from the corpus is always wrong there: the model recalled a structure it saw::

    python benchmarks/studies/novelty_share.py runs/eval_c13b/results.jsonl --known resources/default_model

Its table: docs/insights.md, "Known or new" (the share of candidates that are training structures), with the command
above.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    from engine.model.known import FILE_NAME, KnownStructures

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="results.jsonl of an msgpt-eval run")
    p.add_argument("--known", required=True, help="known_structures.npz, or a bundle folder holding one")
    args = p.parse_args(argv)
    path = Path(args.known)
    known = KnownStructures.load(path / FILE_NAME if path.is_dir() else path)
    by_variant: dict[str, list[dict]] = defaultdict(list)
    with open(args.results, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                by_variant[row["variant"]].append(row)
    print(f"known structures: {len(known):,} ({known.source})")
    print("| variant | spectra | with a candidate | rank 1 in the training corpus % | listed top candidates in the "
          "corpus % | rank 1 is the reference % |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for variant, rows in by_variant.items():
        with_cand = [r for r in rows if r.get("top_inchikey14")]
        first = [r["top_inchikey14"][0] for r in with_cand]
        listed = [k for r in with_cand for k in r["top_inchikey14"]]
        in_first = known.contains(first).mean() * 100 if first else 0.0
        in_listed = known.contains(listed).mean() * 100 if listed else 0.0
        correct = sum(r["top_inchikey14"][0] == r.get("inchikey14") for r in with_cand) / max(len(with_cand), 1) * 100
        print(f"| {variant} | {len(rows)} | {len(with_cand)} | {in_first:.1f} | {in_listed:.1f} "
              f"({len(listed):,} candidates) | {correct:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
