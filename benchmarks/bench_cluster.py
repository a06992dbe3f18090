"""``msgpt predict --cluster`` on this machine: throughput against the number of workers, and a worker killed mid-run.

    python benchmarks/bench_cluster.py throughput --workers 1 2 --repeat 2
    python benchmarks/bench_cluster.py fault

Both run the real command (``python -m engine.cli predict``) in subprocesses on an MGF made of ``--repeat`` copies of
the 12 bundled MassBank examples (resources/examples/massbank_examples.mgf, each TITLE made unique), with the bundled
model unless ``--model`` names another, fp32, one torch thread per process, no structure or spectral library (pass
``--libraries`` to keep the bundled ones). Set OMP_NUM_THREADS=1.

``throughput``: one run in one process, then one per ``local:N``. The figure per run is features per second of the
computing part: the time the command reports for the batch ("Processed N spectra in X s"), which starts once the
cluster is up; the cluster's start (worker processes, model loading, "ready in X s") is printed beside it. Prints
``local:2 / local:1`` as a ratio.

``fault``: the issue's check with a real scheduler. Starts ``dask scheduler`` on loopback and two ``dask worker``
processes (one thread each, no nanny, so a killed worker stays dead), runs the batch on them, kills one worker
with SIGKILL once the journal lists ``--kill-after`` features, and checks: exit 0, every spectrum exactly once,
the same rank-1 structure for each as the one-process run with the same seed, and the same rows.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples" / "massbank_examples.mgf"
BIN = Path(sys.executable).parent


def repeated_examples(path: Path, times: int) -> Path:
    text = EXAMPLES.read_text()
    path.write_text("".join(re.sub(r"^TITLE=(.*)$", rf"TITLE=\1-{k}", text, flags=re.MULTILINE) for k in range(times)))
    return path


def predict_command(mgf: Path, out: Path, args, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "engine.cli", "predict", str(mgf), "-o", str(out), "--precision", "fp32",
           "--threads", "1", "--seed", str(args.seed), "-q"]
    if args.model:
        cmd += ["--model", str(args.model)]
    if not args.libraries:
        cmd += ["--no-libraries"]
    return cmd + list(extra)


def run_timed(cmd: list[str]) -> tuple[int, float, float]:
    """(features processed, batch seconds as the command reports them, cluster start seconds or 0)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    done = re.search(r"Processed (\d+) spectra in ([\d.]+) s", proc.stderr)
    ready = re.search(r"ready in ([\d.]+) s", proc.stderr)
    return int(done.group(1)), float(done.group(2)), float(ready.group(1)) if ready else 0.0


def throughput(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mgf = repeated_examples(tmp / "batch.mgf", args.repeat)
        rates = {}
        for label, extra in [("one process", [])] + [(f"local:{n}", ["--cluster", f"local:{n}"]) for n in args.workers]:
            n, seconds, start = run_timed(predict_command(mgf, tmp / f"{label.replace(' ', '_')}.csv", args, *extra))
            rates[label] = n / seconds
            print(f"{label:>12}: {n} features in {seconds:6.1f} s computing = {rates[label]:.3f} features/s"
                  + (f" (cluster start {start:.1f} s, not counted)" if start else ""), flush=True)
        if "local:1" in rates and "local:2" in rates:
            print(f"local:2 / local:1 throughput: {rates['local:2'] / rates['local:1']:.2f}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank1(path: Path) -> dict[str, list[str]]:
    """spectrum_id -> the rank-1 SMILES of each of its rows at rank 1 (one per spectrum when it ran once)."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    out: dict[str, list[str]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row["rank"] == "1":
            out.setdefault(row["spectrum_id"], []).append(row["smiles"])
    return out


def body(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.startswith("# created:")]


def fault(args) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "2"}
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mgf = repeated_examples(tmp / "batch.mgf", args.repeat)
        reference, out = tmp / "reference.csv", tmp / "cluster.csv"
        t = time.perf_counter()
        subprocess.run(predict_command(mgf, reference, args), env=env, cwd=ROOT, check=True, capture_output=True)
        print(f"one-process reference: {time.perf_counter() - t:.1f} s", flush=True)
        port = free_port()
        address = f"tcp://127.0.0.1:{port}"
        try:
            procs.append(subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                           "--no-dashboard"], env=env, cwd=tmp, stderr=subprocess.DEVNULL))
            workers = [subprocess.Popen([str(BIN / "dask"), "worker", address, "--nthreads", "1", "--no-nanny",
                                         "--no-dashboard", "--host", "127.0.0.1"], env=env, cwd=tmp,
                                        stderr=subprocess.DEVNULL) for _ in range(2)]
            procs += workers
            client = subprocess.Popen(predict_command(mgf, out, args, "--cluster", address), env=env, cwd=ROOT,
                                      stderr=subprocess.PIPE, text=True)
            procs.append(client)
            journal = out.with_name(out.name + ".journal")
            while client.poll() is None:  # a script, not a test: it may wait on the run
                if journal.exists() and journal.read_text().count('"status":"done"') >= args.kill_after:
                    os.kill(workers[0].pid, signal.SIGKILL)
                    print(f"killed worker pid {workers[0].pid} with SIGKILL after {args.kill_after} features",
                          flush=True)
                    break
                time.sleep(0.2)
            stderr = client.communicate()[1]
            print("client stderr:\n  " + "\n  ".join(line for line in stderr.splitlines() if line.strip()))
            if "Worker left" not in stderr:
                sys.exit("no worker left during the run: the kill came too late (use a smaller --kill-after)")
            ok = client.returncode == 0
            print(f"exit status: {client.returncode}")
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.terminate()
                    p.wait(timeout=30)
        if not ok:
            sys.exit(1)
        ref, got = rank1(reference), rank1(out)
        once = all(len(v) == 1 for v in got.values())
        print(f"spectra: {len(got)} in the cluster run, {len(ref)} in the reference; each exactly once: {once}")
        print(f"same rank-1 structure for every spectrum: {got == ref}; identical rows: {body(out) == body(reference)}")
        if not (once and got == ref and body(out) == body(reference)):
            sys.exit(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("throughput", "fault"))
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="local:N runs to time (default 1 2)")
    p.add_argument("--repeat", type=int, default=2, help="copies of the 12 examples (default 2: 24 features)")
    p.add_argument("--model", type=Path, help="model bundle (default: the bundled one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--libraries", action="store_true", help="keep the bundled structure and spectral libraries")
    p.add_argument("--kill-after", type=int, default=3, help="fault: kill a worker once this many features are written")
    args = p.parse_args()
    throughput(args) if args.mode == "throughput" else fault(args)


if __name__ == "__main__":
    main()
