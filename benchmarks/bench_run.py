"""A whole LC-MS run through ``msgpt predict``: where the time goes, and features per hour against a baseline commit.

::

    python benchmarks/bench_run.py                       # the QC-pool Q Exactive run, against ed963ef
    python benchmarks/bench_run.py --inputs RUN.mzML BATCH.mgf --baseline <rev> --threads 1

Both versions run the same command on the same inputs with the same seed (bundled model and libraries, one torch
thread unless ``--threads``), one after the other, each in its own process: the **baseline** from a ``git worktree``
of ``--baseline`` (made in a temporary folder and removed after), the **current** tree with the engine's stage
timers on (:mod:`engine.timing`). Printed:

* per input and version: features, the seconds of the run (``msgpt predict``'s own "Processed ... in X s": reading,
  formulas, the model, libraries, writing; the model and libraries loaded before it are counted apart as start-up),
  features per hour, and the current/baseline ratio;
* the current version's time per stage (exclusive: a stage inside another is taken out of it; ``unmarked`` is what no
  stage covers: the pipeline's glue, the progress bar, building results);
* the answers compared: per feature, whether rank 1 (``feature_rank`` 1) is the same structure (first InChIKey
  block), and the overlap of the top-10 sets.

``--val N`` runs, instead of ``--inputs``, an MGF batch of the first N FOLD=val ``[M+H]+`` spectra of msgpt-eval's
seeded selection (formula given, as ``training/studies/deep_search_eval.py`` reports on) and prints both versions'
Top-1/Top-10 of the true structures, and for how many spectra the truth's rank differs.

``--concurrency`` also runs the current code on ``--concurrency-input`` (default: the inputs) as one job and as two
jobs at once, with one thread, the default rule (:mod:`engine.threads`), and two threads with spinning or sleeping
waits, and prints each job's wall seconds (issue #58: two jobs on 2 cores no slower each than one on one core).

The machine is shared with whatever else runs: run it when it is quiet, and read the ratios (measured in one run)
rather than the absolute seconds.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.worktree import worktree  # noqa: E402
DEFAULT_RUN = ROOT.parent / "shared/data/mzml/qexactive_dda_qc_pool.mzML"
BASELINE = "ed963ef"  # the code path before issue #58

# Runs in the child process, with the tree to test first on sys.path: msgpt predict, under the stage timers when
# the tree has them; prints one JSON line.
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from engine.cli.predict import main
argv = sys.argv[2:]
try:
    from engine.timing import measure
except ImportError:
    measure = None
if measure is None:
    rc, table = main(argv), None
else:
    with measure() as clock:
        rc = main(argv)
    table = {name: [s, clock.calls[name]] for name, s in clock.seconds.items()}
print("BENCH " + json.dumps({"rc": rc, "wall": time.perf_counter() - t0, "stages": table}), flush=True)
"""

PROCESSED = re.compile(r"Processed (\d+) spectra in ([\d.]+) s")


def run_version(tree: Path, inputs: list[str], out: Path, threads: int | None, extra: list[str]) -> dict:
    """``msgpt predict`` of ``tree`` on ``inputs``; its JSON line plus the run's own seconds and features."""
    argv = ["predict", *inputs, "-o", str(out), "--seed", "0", *(["--threads", str(threads)] if threads else []),
            *extra]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tree), *argv], cwd=tree, env=env, capture_output=True,
                          text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        raise SystemExit(f"msgpt predict of {tree} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(line[6:])
    if result["rc"] != 0:  # a run that stopped (a bad input, a bad flag) has no seconds to compare
        raise SystemExit(f"msgpt predict of {tree} exited with {result['rc']}:\n{proc.stderr[-3000:]}")
    m = PROCESSED.search(proc.stderr)
    result["features"], result["seconds"] = (int(m.group(1)), float(m.group(2))) if m else (0, result["wall"])
    result["stderr"] = proc.stderr
    return result


def val_batch(n: int, path: Path) -> tuple[Path, dict[str, str]]:
    """The first ``n`` spectra of msgpt-eval's seeded one-per-structure FOLD=val ``[M+H]+`` selection (the one
    training/studies/deep_search_eval.py reports on), their records copied as written (formula kept) into ``path``;
    and each one's true InChIKey first block by id."""
    import gzip

    from engine.model.bundle import load_bundle
    from engine.paths import default_model_dir
    from training.evaluation.evaluate import EvalConfig, select_spectra

    mgf = ROOT.parent / "shared/data/massbank_dev.mgf.gz"
    model = load_bundle(default_model_dir())
    sel = select_spectra(model, EvalConfig(model=str(default_model_dir()), mgf=str(mgf), out="", folds=("val",),
                                           one_per_structure=True, seed=0, variants=(), kappa_sweep=False,
                                           adducts=("[M+H]+",)))
    chosen = {s.id: r.inchikey14 for s, r in sel.chosen[:n]}
    blocks, block = [], []
    with gzip.open(mgf, "rt", encoding="utf-8") as fh:
        for line in fh:
            block.append(line)
            if line.startswith("END IONS"):
                title = next((ln[6:].strip() for ln in block if ln.startswith("TITLE=")), "")
                if title in chosen:
                    blocks.append("".join(block))
                block = []
    path.write_text("".join(blocks), encoding="utf-8")
    return path, chosen


def truth_ranks(path: Path, truth: dict[str, str]) -> list[int | None]:
    """Per true structure (in ``truth`` order), its ``feature_rank`` in the output at ``path`` (None: absent)."""
    answers = feature_answers(path)
    return [next((k + 1 for k, key in enumerate(answers.get(sid, [])) if key == t), None) for sid, t in truth.items()]


def top_k_line(name: str, ranks: list[int | None]) -> str:
    n = len(ranks)
    top1 = sum(r == 1 for r in ranks)
    top10 = sum(r is not None and r <= 10 for r in ranks)
    pool = sum(r is not None for r in ranks)
    return f"{name}: Top-1 {top1}/{n}, Top-10 {top10}/{n}, truth among the written candidates {pool}/{n}"


def feature_answers(path: Path) -> dict[str, list[str]]:
    """Per feature (spectrum id), its candidates' first InChIKey blocks in ``feature_rank`` order."""
    rows: dict[str, list[tuple[int, str]]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(line for line in fh if not line.startswith("#")):
            try:
                rank = int(row.get("feature_rank") or row.get("rank") or 0)
            except ValueError:
                continue
            rows.setdefault(row["spectrum_id"], []).append((rank, (row.get("inchikey") or "")[:14]))
    return {k: [key for _, key in sorted(v)] for k, v in rows.items()}


def compare(base: Path, new: Path) -> str:
    a, b = feature_answers(base), feature_answers(new)
    both = sorted(set(a) & set(b))
    same1 = sum(bool(a[k]) and bool(b[k]) and a[k][0] == b[k][0] for k in both)
    overlap = [len(set(a[k][:10]) & set(b[k][:10])) / max(1, len(set(a[k][:10]) | set(b[k][:10]))) for k in both]
    only = (len(set(a) - set(b)), len(set(b) - set(a)))
    mean_overlap = 100 * sum(overlap) / max(1, len(both))
    return (f"{len(both)} features in both outputs ({only[0]} only in the baseline's, {only[1]} only in the "
            f"current's): the same rank 1 for {same1}; top-10 sets overlap {mean_overlap:.0f}% on average (Jaccard)")


def stage_table(stages: dict, seconds: float) -> list[str]:
    rows = sorted(stages.items(), key=lambda kv: -kv[1][0])
    marked = sum(s for s, _ in stages.values())
    lines = ["| stage | seconds | calls | share |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {name} | {s:.1f} | {n} | {100 * s / seconds:.0f}% |" for name, (s, n) in rows]
    lines.append(f"| unmarked (glue, progress, results) | {max(0.0, seconds - marked):.1f} | | "
                 f"{100 * max(0.0, seconds - marked) / seconds:.0f}% |")
    return lines


def _jobs(tree: Path, inputs: list[str], tmp: Path, n: int, threads: int | None, policy: str | None) -> list[float]:
    """``n`` copies of ``msgpt predict`` at once (``threads``: --threads, None: the default rule; ``policy``:
    OMP_WAIT_POLICY, None: unset): each one's wall seconds, start-up included."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["PYTHONPATH"] = str(tree)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    procs = []
    for k in range(n):
        argv = ["predict", *inputs, "-o", str(tmp / f"job{k}.csv"), "--seed", "0", "-q",
                *(["--threads", str(threads)] if threads else [])]
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, str(tree), *argv], cwd=tree, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    walls = []
    for p in procs:
        out, errs = p.communicate()
        line = next((ln for ln in out.splitlines() if ln.startswith("BENCH ")), None)
        if line is None:
            raise SystemExit(f"a job failed:\n{errs[-2000:]}")
        walls.append(json.loads(line[6:])["wall"])
    return walls


def concurrency(tree: Path, inputs: list[str], tmp: Path) -> list[str]:
    """Jobs side by side with threads and wait policies (issue #58): each one's wall seconds, start-up included."""
    rows = [(1, 1, None, "1 (--threads 1)"), (1, None, None, "the default rule"),
            (1, 2, None, "2, waiting threads spinning (torch's default)"),
            (1, 2, "PASSIVE", "2, waiting threads sleeping (OMP_WAIT_POLICY=PASSIVE)"),
            (2, 2, None, "2 each, spinning (torch's default before #58 on 2 cores)"),
            (2, None, None, "the default rule")]
    lines = ["| jobs at once | threads | seconds each |", "| ---: | --- | ---: |"]
    for n, threads, policy, label in rows:
        walls = _jobs(tree, inputs, tmp, n, threads, policy)
        lines.append(f"| {n} | {label} | {' and '.join(f'{w:.1f}' for w in walls)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", nargs="+", default=[str(DEFAULT_RUN)], help="runs or MGF files (default: QC pool)")
    p.add_argument("--baseline", default=BASELINE, help=f"git revision of the baseline (default {BASELINE})")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each version (default 1)")
    p.add_argument("--no-baseline", action="store_true", help="time the current tree only (the stage table)")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more msgpt predict flags, for both")
    p.add_argument("--concurrency", action="store_true", help="also the two-jobs check (see the module docstring)")
    p.add_argument("--concurrency-input", nargs="+", default=None, help="inputs of the two-jobs check")
    p.add_argument("--keep", type=Path, default=None, help="copy both outputs into this folder")
    p.add_argument("--val", type=int, default=0, metavar="N",
                   help="instead of --inputs: an MGF batch of the first N FOLD=val [M+H]+ spectra of msgpt-eval's "
                   "selection (formula given), with Top-1/Top-10 of both versions against the true structures")
    a = p.parse_args(argv)
    missing = [] if a.val else [x for x in a.inputs if not Path(x).is_file()]
    if missing:
        raise SystemExit(f"bench_run: no such input: {', '.join(missing)}. The default is the QC-pool run in "
                         "../shared/data/mzml next to the repository; give another with --inputs RUN.mzML.")

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; python "
          f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}; threads {a.threads}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_run_"))
    truth = None
    try:
        if a.val:
            path, truth = val_batch(a.val, tmp / "val.mgf")
            a.inputs = [str(path)]
        results = {}
        if not a.no_baseline:
            with worktree(a.baseline) as tree:
                results["baseline"] = run_version(tree, a.inputs, tmp / "baseline.csv", a.threads, ["-q"] + a.extra)
        results["current"] = run_version(ROOT, a.inputs, tmp / "current.csv", a.threads, ["-q"] + a.extra)
        print(f"inputs: {' '.join(a.inputs)}; msgpt predict -q --seed 0 --threads {a.threads} {' '.join(a.extra)}")
        print("| version | features | run seconds | features / hour | start-up and loading s | ratio |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        base_rate = None
        for name, r in results.items():
            rate = 3600 * r["features"] / max(r["seconds"], 1e-9)
            base_rate = rate if name == "baseline" else base_rate
            ratio = f"{rate / base_rate:.2f}×" if base_rate and name != "baseline" else "1"
            label = f"{name} ({a.baseline})" if name == "baseline" else f"{name} (working tree)"
            print(f"| {label} | {r['features']} | {r['seconds']:.1f} | {rate:.0f} | {r['wall'] - r['seconds']:.1f} "
                  f"| {ratio} |")
        cur = results["current"]
        if cur["stages"]:
            print("\nCurrent version, time per stage (exclusive) of the run's seconds:")
            print("\n".join(stage_table(cur["stages"], cur["seconds"])))
        if "baseline" in results:
            print("\nAnswers: " + compare(tmp / "baseline.csv", tmp / "current.csv"))
        if truth:
            ranks = {name: truth_ranks(tmp / f"{name}.csv", truth) for name in results}
            for name, r in ranks.items():
                print(top_k_line(name, r))
            if "baseline" in ranks:
                changed = sum(x != y for x, y in zip(ranks["baseline"], ranks["current"]))
                print(f"the truth's rank differs between the versions for {changed} of {len(truth)} spectra")
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            for name in results:
                shutil.copy(tmp / f"{name}.csv", a.keep / f"{name}.csv")
        if a.concurrency:
            print("\n" + "\n".join(concurrency(ROOT, a.concurrency_input or a.inputs, tmp)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
