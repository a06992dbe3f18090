"""A long batch through ``msgpt predict``: time, throughput and memory (does RSS stay flat?).

Uses the committed tiny test bundle (tests/data/tiny_bundle) and builds an MGF of ``--spectra`` records made by
repeating the real spectra of tests/data/fixture.mgf with unique TITLEs, then runs
``python -m engine.cli predict`` on it in a subprocess and samples the child's resident memory
from /proc while it runs, keyed by how many spectra the journal lists. The fixture's 2 negative-mode
records are skipped by the model (it supports [M+H]+ and [M+Na]+), so 1 record in 6 is a skip.

    python benchmarks/bench_batch.py --spectra 10000 --pool-size 20 --groups 4 --threads 1 --precision fp32

Reports wall time, spectra per second, peak RSS (VmHWM, and getrusage of the children), and RSS
after 1k / 5k / 10k spectra. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
FIXTURE = ROOT / "tests" / "data" / "fixture.mgf"


def repeated_mgf(path: Path, n: int) -> int:
    """Write ``n`` records cycling through the fixture's spectra, TITLE made unique; returns n."""
    records = [r + "END IONS\n" for r in FIXTURE.read_text().split("END IONS\n") if "BEGIN IONS" in r]
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(re.sub(r"^TITLE=(.*)$", lambda m: f"TITLE={m.group(1)}-{i}", records[i % len(records)],
                            count=1, flags=re.M))
    return n


def proc_kb(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh) - 1  # the header line
    except OSError:
        return 0


def run(args: argparse.Namespace, work: Path, bundle: Path, mgf: Path) -> dict:
    out = work / "out.csv"
    journal = out.with_name(out.name + ".journal")
    cmd = [sys.executable, "-m", "engine.cli", "predict", str(mgf), "-o", str(out), "--model", str(bundle),
           "--pool-size", str(args.pool_size), "--groups", str(args.groups), "--threads", str(args.threads),
           "--precision", args.precision, "-q"]
    marks = sorted({m for m in (1000, 2000, 5000, args.spectra) if m <= args.spectra})
    rss_at: dict[int, int] = {}
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    peak = 0
    last = (0, 0)
    while child.poll() is None:
        time.sleep(0.5)
        rss, hwm = proc_kb(child.pid, "VmRSS"), proc_kb(child.pid, "VmHWM")
        peak = max(peak, hwm or 0)
        done = count_lines(journal)
        for m in marks:
            if m not in rss_at and done >= m and rss:
                rss_at[m] = rss
        if rss and done:
            last = (done, rss)  # the journal is gone once the run is complete: keep the last sample
    wall = time.perf_counter() - t0
    if last[0] and last[0] not in rss_at:
        rss_at[last[0]] = last[1]
    err = child.stderr.read()
    if child.returncode != 0:
        raise SystemExit(f"msgpt predict failed ({child.returncode}):\n{err}")
    summary = next((line for line in err.splitlines() if line.startswith("Processed")), "")
    skipped = next((line for line in err.splitlines() if line.startswith("Skipped")), "Skipped 0 spectra:")
    return {
        "wall_s": wall,
        "processed": int(re.search(r"Processed (\d+)", summary).group(1)),
        "skipped": int(re.search(r"Skipped (\d+)", skipped).group(1)),
        "rows": int(re.search(r"; (\d+) candidates", summary).group(1)),
        "peak_rss_mb": max(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024,
        "rss_mb_at": {m: kb / 1024 for m, kb in rss_at.items()},
        "output_mb": out.stat().st_size / 2**20,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spectra", type=int, default=10_000)
    p.add_argument("--pool-size", type=int, default=20)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    p.add_argument("--bundle", type=Path, help="a model bundle (default: the tiny test bundle, tests/data/tiny_bundle)")
    p.add_argument("--work", type=Path, help="folder for the input and output (default: a temporary one)")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        bundle = args.bundle
        if bundle is None:
            from tiny_bundle import BUNDLE_DIR

            bundle = BUNDLE_DIR
        mgf = work / "batch.mgf"
        repeated_mgf(mgf, args.spectra)
        print(f"input: {args.spectra} records, {mgf.stat().st_size / 2**20:.1f} MB; model {bundle}; "
              f"pool B={args.pool_size} M={args.groups}; --threads {args.threads} --precision {args.precision}",
              flush=True)
        r = run(args, work, bundle, mgf)
    n = r["processed"] + r["skipped"]
    print(f"processed {r['processed']}, skipped {r['skipped']}, {r['rows']} candidate rows "
          f"({r['output_mb']:.1f} MB CSV)")
    print(f"wall {r['wall_s']:.1f} s (model load and start included), {n / r['wall_s']:.1f} spectra/s, "
          f"{r['processed'] / r['wall_s']:.1f} processed spectra/s")
    print(f"peak RSS {r['peak_rss_mb']:.0f} MB; RSS after " +
          ", ".join(f"{m:,} spectra: {mb:.0f} MB" for m, mb in sorted(r["rss_mb_at"].items())))


if __name__ == "__main__":
    main()
