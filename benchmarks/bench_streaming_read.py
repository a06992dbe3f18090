"""Reading a long spectra file streams: resident memory stays flat however many records (engine/spectra/io.py).

Writes a gzipped MGF of ``--spectra`` records (mellein, [M+H]+, 30 peaks each, unique TITLEs), then reads it
with :func:`engine.spectra.io.iter_spectra` in this process, one record at a time as
``msgpt predict`` does, and reports the resident set size (/proc/self/statm) after 10 % of the records and at
the end, its growth, and the time. Reading only: the model is not involved (``benchmarks/bench_batch.py`` measures
a whole ``msgpt predict`` batch). Linux only (/proc). Exit status 1 when the growth passes ``--max-growth-mb``.

    python benchmarks/bench_streaming_read.py --spectra 100000

This was the manual check ``MSGPT_MANUAL_CHECKS=1 pytest tests/engine/spectra/test_io.py -k streaming`` (issue
#61: no test depends on a manual switch); its figure is in docs/cli.md ("Long batches stream").
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.spectra.io import iter_spectra  # noqa: E402
from engine.spectra.spectrum import Spectrum  # noqa: E402

RECORD = ("BEGIN IONS\nTITLE={title}\nPEPMASS=179.0703\nCHARGE=1+\nADDUCT=[M+H]+\nFORMULA=C10H10O3\n"
          "SMILES=CC1Cc2cccc(O)c2C(=O)O1\n{peaks}\nEND IONS\n")
PEAKS = "\n".join(f"{50 + j * 7.1:.4f} {100 + j}" for j in range(30))


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def write_mgf(path: Path, n: int) -> Path:
    with gzip.open(path, "wt") as fh:
        for i in range(n):
            fh.write(RECORD.format(title=f"s{i}", peaks=PEAKS))
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spectra", type=int, default=100_000, help="records to write and read (default 100,000)")
    p.add_argument("--max-growth-mb", type=float, default=20.0,
                   help="RSS growth from 10%% of the records to the end that counts as not flat (default 20)")
    args = p.parse_args(argv)
    if not os.path.exists("/proc/self/statm"):
        sys.exit("Linux only: reads /proc/self/statm.")
    if args.spectra < 10:
        sys.exit("--spectra: at least 10.")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = write_mgf(Path(tmp) / "big.mgf.gz", args.spectra)
        written_s = time.perf_counter() - t0
        size_mb = path.stat().st_size / 2**20
        tenth, rss, n = max(args.spectra // 10, 1), {}, 0
        start_mb = rss_mb()
        t0 = time.perf_counter()
        for n, item in enumerate(iter_spectra(path), 1):
            if not isinstance(item, Spectrum):
                sys.exit(f"record {n} was skipped: {item}")
            if n in (tenth, args.spectra):
                rss[n] = rss_mb()
        read_s = time.perf_counter() - t0
    if n != args.spectra:
        sys.exit(f"read {n} records of {args.spectra}")
    growth = rss[args.spectra] - rss[tenth]
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"wrote {args.spectra:,} records ({size_mb:.1f} MB gzipped) in {written_s:.1f} s; read them in {read_s:.1f} s "
          f"({args.spectra / read_s:,.0f} records/s)")
    print(f"RSS before reading {start_mb:.1f} MB, after {tenth:,} records {rss[tenth]:.1f} MB, after {args.spectra:,} "
          f"{rss[args.spectra]:.1f} MB: growth {growth:+.1f} MB (flat means under {args.max_growth_mb:g} MB)")
    return 0 if growth < args.max_growth_mb else 1


if __name__ == "__main__":
    sys.exit(main())
