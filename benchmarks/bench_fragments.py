"""Fragment pieces and piece fingerprints, the hot path of the forward model's candidates: the first, plain
implementations against the fast ones, on the same molecules in the same run.

    OMP_NUM_THREADS=1 python benchmarks/bench_fragments.py                    # the test's 40 structures
    OMP_NUM_THREADS=1 python benchmarks/bench_fragments.py --smiles FILE      # one SMILES a line
    OMP_NUM_THREADS=1 python benchmarks/bench_fragments.py --pools runs/retrieval/v10/pools.jsonl --n 100

``--pools`` takes the middle candidate of each of the first ``--n`` spectra of a retrieval run's pools (typical
candidate structures). Per molecule (stereo removed), the work of the forward model's ``candidates()``:
:func:`engine.spectra.fragments.fragment_pieces` at ``--max-breaks`` cuts, then
:func:`engine.spectra.fragments.piece_fingerprint` (512 bits, radius 2) of each piece a candidate takes (per
neutral formula with up to ``--h-shift`` hydrogens moved, the piece with the smallest shift, then the fewest
cuts, then the first reached). The old and the new code run one after the other on each molecule; their
results are compared (they must be identical) and the times summed. Prints milliseconds per molecule for
each part, old and new, and old / new as a ratio. The reference code is the copy kept in
``tests/engine/spectra/test_fragments_equivalence.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.chem import molecules as chem
from engine.chem.formula import ELEMENT_INDEX
from engine.errors import ConfigError
from engine.spectra.fragments import MAX_STATES, fragment_pieces, piece_fingerprint

REFERENCE = ROOT / "tests" / "engine" / "spectra" / "test_fragments_equivalence.py"
_H = ELEMENT_INDEX["H"]


def load_reference():
    spec = importlib.util.spec_from_file_location("fragments_reference", REFERENCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pools_smiles(path: Path, n: int) -> list[str]:
    out = []
    with open(path) as f:
        for line in f:
            candidates = json.loads(line).get("candidates") or []
            if candidates:
                out.append(candidates[len(candidates) // 2]["s"])
            if len(out) >= n:
                break
    return out


def candidate_pieces(pieces, h_shift: int) -> list[int]:
    """The pieces the forward model's candidates take a fingerprint of (its rule, see the module docstring)."""
    best: dict[bytes, tuple[int, int, int]] = {}
    for i, f in enumerate(pieces.formulas):
        for shift in range(-h_shift, h_shift + 1):
            if f[_H] + shift < 0:
                continue
            g = f.copy()
            g[_H] += shift
            rank = (abs(shift), int(pieces.breaks[i]), i)
            key = g.tobytes()
            if key not in best or rank < best[key]:
                best[key] = rank
    return sorted({rank[2] for rank in best.values()})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--smiles", type=Path, help="a file of SMILES, one a line")
    source.add_argument("--pools", type=Path, help="a retrieval run's pools.jsonl")
    parser.add_argument("--n", type=int, default=100, help="molecules taken from --pools (default 100)")
    parser.add_argument("--max-breaks", type=int, default=2)
    parser.add_argument("--h-shift", type=int, default=2)
    args = parser.parse_args(argv)

    reference = load_reference()
    if args.pools:
        smiles = pools_smiles(args.pools, args.n)
    elif args.smiles:
        smiles = [s.strip() for s in args.smiles.read_text().splitlines() if s.strip()]
    else:
        smiles = list(reference.SMILES)
    implementations = {
        "old": (reference.old_fragment_pieces, reference.old_piece_fingerprint),
        "new": (fragment_pieces, piece_fingerprint),
    }
    seconds = {(name, part): 0.0 for name in implementations for part in ("pieces", "fingerprints")}
    n_mols = n_fingerprints = 0
    for s in smiles:
        mol = chem.mol_from_smiles(s)
        if mol is None:
            continue
        chem.remove_stereo(mol)
        try:
            reference.old_fragment_pieces(mol, 0)
        except ConfigError as e:  # an element the fragmenter does not support
            print(f"skipped {s}: {e}", file=sys.stderr)
            continue
        results = {}
        for name, (fragment, fingerprint) in implementations.items():
            t0 = time.perf_counter()
            pieces, complete = fragment(mol, args.max_breaks, MAX_STATES)
            t1 = time.perf_counter()
            chosen = candidate_pieces(pieces, args.h_shift)
            t2 = time.perf_counter()
            bits = [fingerprint(mol, pieces.atom_indices(i), 512, 2) for i in chosen]
            t3 = time.perf_counter()
            seconds[name, "pieces"] += t1 - t0
            seconds[name, "fingerprints"] += t3 - t2
            results[name] = (pieces, complete, bits)
        (old, old_complete, old_bits), (new, new_complete, new_bits) = results["old"], results["new"]
        same = (old.atoms == new.atoms and old_complete == new_complete and np.array_equal(old.breaks, new.breaks)
                and np.array_equal(old.formulas, new.formulas) and len(old_bits) == len(new_bits)
                and all(np.array_equal(a, b) for a, b in zip(old_bits, new_bits)))  # fmt: skip
        if not same:
            print(f"DIFFERENT RESULTS for {s}", file=sys.stderr)
            return 1
        n_mols += 1
        n_fingerprints += len(new_bits)

    print(f"{n_mols} molecules, max_breaks={args.max_breaks}, {n_fingerprints / max(n_mols, 1):.0f} fingerprinted "
          f"pieces per molecule; old and new results identical")
    print(f"{'ms per molecule':<16}{'old':>10}{'new':>10}{'old/new':>10}")
    for part in ("pieces", "fingerprints", "total"):
        if part == "total":
            old = sum(seconds["old", p] for p in ("pieces", "fingerprints"))
            new = sum(seconds["new", p] for p in ("pieces", "fingerprints"))
        else:
            old, new = seconds["old", part], seconds["new", part]
        print(f"{part:<16}{1000 * old / n_mols:>10.1f}{1000 * new / n_mols:>10.1f}{old / new:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
