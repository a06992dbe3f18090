"""How building, keeping and querying a structure library (engine/library) scale with its size.

Writes a library file of ``--rows`` structures (synthetic: drug-like SMILES enumerated from ring systems,
linkers and chains, with a name and an identifier, as a PubChemLite-like CSV; or the first rows of a
``smiles``-column table given by ``--molecules``, e.g. ../shared/data/molecules.tsv.gz), then times, in a
temporary data folder (``MSGPT_HOME``):

- the first open (hashing, RDKit for every row, sorting, writing the index), as rows per second;
- the index file's size, per structure;
- reopening (stamp check and loading the index) and loading the index alone;
- formula queries (formulas of the library), mass queries (masses of the library within ``--ppm``) and
  fingerprint and record look-ups, as queries per second and the mean size of a result (rows; bits).

No assertion on time: the numbers are to compare sizes and machines. ::

    python benchmarks/bench_structure_library.py --rows 50000
    python benchmarks/bench_structure_library.py --rows 500000   # several minutes of RDKit a 100k rows
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.library import StructureLibrary, load_library  # noqa: E402
from engine.library.cache import index_path  # noqa: E402

SUBSTITUENTS = ("C", "CC", "Cl", "F", "Br", "O", "N", "OC", "C(F)(F)F", "C#N", "S(C)(=O)=O", "C(=O)O")  # -Y
PREFIXES = ("C", "CC", "Cl", "F", "Br", "O", "N", "CO", "FC(F)(F)", "N#C", "CS(=O)(=O)", "OC(=O)")  # X- (the same)
HEADS = ("c1ccc(cc1)", "c1ccc(nc1)", "c1ccc(s1)", "c1ccc(o1)", "C1CCC(CC1)", "C1CCN(CC1)")  # X-ring-
TAILS = ("c1ccc({})cc1", "c1ccc({})nc1", "c1ccc({})s1", "c1ccc({})o1", "C1CCC({})CC1", "N1CCC({})CC1")
LINKERS = ("", "C", "CC", "O", "N", "S", "C(=O)", "C(=O)N", "NC(=O)", "OC(=O)", "C=C", "C#C", "CN", "CO",
           "S(=O)(=O)", "NC(=O)N")
CHAINS = tuple("C" * k for k in range(8))


def synthetic_smiles(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct-looking SMILES: X-ring, linker, chain, ring-Y, drawn without replacement."""
    heads = [x + h for x in ("", *PREFIXES[:11]) for h in HEADS]  # 72
    tails = [t.format(y).replace("()", "") for y in ("", *SUBSTITUENTS[:11]) for t in TAILS]  # 72
    sizes = (len(heads), len(LINKERS), len(CHAINS), len(tails))
    total = int(np.prod(sizes))
    if n > total:
        raise SystemExit(f"--rows {n} is more than the {total:,} synthetic structures; use --molecules")
    picks = np.random.default_rng(seed).choice(total, size=n, replace=False)
    out = []
    for p in picks.tolist():
        p, t = divmod(p, sizes[3])
        p, c = divmod(p, sizes[2])
        h, link = divmod(p, sizes[1])
        out.append(heads[h] + LINKERS[link] + CHAINS[c] + tails[t])
    return out


def write_source(path: Path, n: int, molecules: str | None) -> None:
    if molecules:
        opener = gzip.open if molecules.endswith(".gz") else open
        with opener(molecules, "rt", encoding="utf-8") as fh:
            header = fh.readline().rstrip("\n").split("\t")
            col = [c.lower() for c in header].index("smiles")
            smiles = [line.rstrip("\n").split("\t")[col] for line in itertools.islice(fh, n)]
    else:
        smiles = synthetic_smiles(n)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("Identifier,CompoundName,SMILES\n")
        fh.writelines(f"{i + 1},compound {i + 1},{s}\n" for i, s in enumerate(smiles))


def timed(fn, repeat: int = 1):
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    return out, (time.perf_counter() - t0) / repeat


def queries(lib: StructureLibrary, n: int, ppm: float, seed: int = 1) -> dict[str, tuple[float, float]]:
    """Queries a second and mean rows found, for each kind of query."""
    rng = np.random.default_rng(seed)
    formulas = rng.choice(lib.formulas(), size=n).tolist()
    rows = rng.integers(0, len(lib), size=n)
    masses = (lib.masses[rows] * (1 + rng.uniform(-ppm, ppm, size=n) * 1e-6)).tolist()
    out = {}
    t0 = time.perf_counter()
    found = sum(len(lib.rows_of_formula(f)) for f in formulas)
    out["formula"] = (n / (time.perf_counter() - t0), found / n)
    t0 = time.perf_counter()
    found = sum(len(lib.rows_near_mass(m, ppm)) for m in masses)
    out[f"mass ±{ppm:g} ppm"] = (n / (time.perf_counter() - t0), found / n)
    t0 = time.perf_counter()
    found = sum(len(lib.bits(int(r))) for r in rows)
    out["bits(row)"] = (n / (time.perf_counter() - t0), found / n)
    t0 = time.perf_counter()
    found = sum(len(lib.record(int(r)).smiles) > 0 for r in rows)
    out["record(row)"] = (n / (time.perf_counter() - t0), found / n)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--molecules", help="take the SMILES of this table (smiles column, .gz allowed) instead")
    p.add_argument("--queries", type=int, default=20_000)
    p.add_argument("--ppm", type=float, default=5.0)
    args = p.parse_args(argv)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["MSGPT_HOME"] = str(tmp / "home")
        source = tmp / "library.csv"
        _, t_write = timed(lambda: write_source(source, args.rows, args.molecules))
        print(f"source: {args.rows:,} rows, {source.stat().st_size / 1e6:.1f} MB CSV (written in {t_write:.1f} s)")
        lib, t_build = timed(lambda: load_library(source))
        index = index_path(lib.checksum)
        size = index.stat().st_size
        print(f"first open (hash, RDKit, sort, write): {t_build:.1f} s = {args.rows / t_build:,.0f} rows/s; "
              f"{len(lib):,} structures ({lib.info['n_duplicates']:,} duplicates, {lib.n_problems} unreadable), "
              f"{len(lib.formulas()):,} formulas")
        print(f"index: {size / 1e6:.1f} MB = {size / len(lib):.0f} bytes a structure "
              f"({lib.arrays()['bits'].size / len(lib):.1f} fingerprint bits a structure)")
        _, t_reopen = timed(lambda: load_library(source), repeat=3)
        _, t_load = timed(lambda: StructureLibrary.load(index), repeat=3)
        print(f"reopen: {t_reopen * 1e3:.0f} ms (load alone {t_load * 1e3:.0f} ms = "
              f"{size / 1e6 / t_load:,.0f} MB/s; {t_build / t_reopen:,.0f}x faster than the first open)")
        for kind, (per_s, hits) in queries(lib, args.queries, args.ppm).items():
            print(f"  {kind:<14} {per_s:>10,.0f} queries/s ({1e6 / per_s:6.1f} µs), mean result size {hits:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
