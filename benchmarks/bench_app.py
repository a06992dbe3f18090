"""The app's start-up and Run All speed, today's code against a baseline commit, in one run (issue #58).

Each code version runs in its own process (``--code DIR``: the source tree imported, ``sys.path.insert(0, DIR)``),
offscreen (``QT_QPA_PLATFORM=offscreen``), one torch thread, a fresh ``MSGPT_HOME`` (settings, autosaves, caches)
with the same inputs and seed. The baseline is a ``git worktree`` of ``--baseline`` (default ``ed963ef``, the code
before issue #58) made in a temporary folder and removed afterwards. Each version is started twice: the first
start indexes the bundled libraries (their indexes in the data folder are copied to the second's) (a user's every start but the first), the second is measured::

    python benchmarks/bench_app.py                       # the current tree against ed963ef, 30 features
    python benchmarks/bench_app.py --features 10 --profile /tmp/app.prof   # cProfile of the current tree's run
    python benchmarks/bench_app.py --no-baseline --startup-only
    python benchmarks/bench_app.py --compare --live-all    # docs/evidence/app_speed.md's table

It prints, per version: (a) start-up, seconds from the process start to the window shown and turning its event
loop (a zero-delay timer fired), to the model loaded, to the bundled libraries ready, to the run's features
listed, the longest the event loop stood still meanwhile (a 20 ms timer's longest gap: how usable the window is while
things load), and the first start's libraries ready (indexing them); (b) Run All over the first
``--features`` features of ``--mzml`` (the QC-pool Q Exactive run) with the bundled libraries on, from the click
(``run_entries`` of the Run menu, as Run All does for the listed features) to the run's end, as features per
hour and per CPU hour of the app's process (all its threads: a machine other jobs share changes the wall time far
more than this), the longest the event loop stood still during it, the live rankings and progress events the worker sent the
window; and the ratios current / baseline. ``--live-all`` adds the current tree ranking every spectrum live with the
preview stage, as the app did before #58 (only the spectrum on screen is, now): what that saves on its own. ``--compare`` also checks whether the versions ranked the same
candidates (every formula run's final InChIKey-14s and scores, in order) and prints the features that differ.

The driver uses only what the baseline has too: ``msgpt_gui.app.create_window``, the window's ``run_menu``,
``spectra`` (entries), ``libraries.controller.sources``, ``bundle``, ``busy``, ``loader`` and ``run_finished``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.worktree import worktree  # noqa: E402
DEFAULT_MZML = ROOT.parent / "shared" / "data" / "mzml" / "qexactive_dda_qc_pool.mzML"
BASELINE = "ed963ef"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", default=str(ROOT), help="source tree to measure (default: this one)")
    p.add_argument("--baseline", default=BASELINE, help="commit to compare with (a git worktree of it)")
    p.add_argument("--no-baseline", action="store_true", help="measure --code alone")
    p.add_argument("--mzml", default=str(DEFAULT_MZML), help="the LC-MS run whose features Run All runs")
    p.add_argument("--features", type=int, default=30, help="how many of the run's first listed features to run")
    p.add_argument("--startup-only", action="store_true", help="measure start-up only (no Run All)")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up start (cold library caches)")
    p.add_argument("--profile", metavar="FILE", help="cProfile the current tree's Run All into FILE (pstats)")
    p.add_argument("--stages", action="store_true",
                   help="the current tree's Run All by engine stage (engine.timing), the rest being the app's")
    p.add_argument("--compare", action="store_true", help="check both versions ranked the same candidates")
    p.add_argument("--live-all", action="store_true",
                   help="also measure the current tree ranking every spectrum live, each with the preview stage (the "
                        "app before #58 did): what showing only the spectrum on screen saves, with identical results")
    p.add_argument("--timeout", type=float, default=3600, help="seconds a version may take")
    p.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)  # internal: measure one version into JSON
    p.add_argument("--child-live-all", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child-stages", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------------------------
# the measured process
# ----------------------------------------------------------------------------------------------------------------
def child(args: argparse.Namespace) -> int:
    t_spawn = float(os.environ["BENCH_APP_T0"])
    sys.path.insert(0, args.code)
    stamps: dict = {}

    def since() -> float:
        return time.time() - t_spawn

    from msgpt_gui.app import create_window

    argv = ["--device", "cpu", args.mzml]
    app, window = create_window(argv)
    stamps["window_created"] = since()
    from PySide6.QtCore import QEventLoop, QTimer

    turned = []
    QTimer.singleShot(0, lambda: turned.append(since()))

    def wait(condition, what: str, timeout: float = args.timeout, step_ms: int = 10) -> None:
        t0 = time.time()
        while not condition():
            if time.time() - t0 > timeout:
                raise SystemExit(f"timed out waiting for {what}")
            loop = QEventLoop()
            QTimer.singleShot(step_ms, loop.quit)
            loop.exec()

    def sources():
        return window.libraries.controller.sources

    wait(lambda: bool(turned), "the event loop", step_ms=1)
    stamps["window_responsive"] = turned[0]
    ticks = [time.perf_counter()]  # a 20 ms timer while the model, libraries and file load: its longest gap
    ticker = QTimer(interval=20)
    ticker.timeout.connect(lambda: ticks.append(time.perf_counter()))
    ticker.start()
    model_at, libs_at = [], []

    def poll() -> bool:
        if not model_at and window.bundle is not None:
            model_at.append(since())
        if not libs_at and all(s.state not in ("waiting", "opening") for s in sources()):
            libs_at.append(since())
        return bool(model_at and libs_at)

    wait(poll, "the model and the libraries", step_ms=5)
    stamps["model_loaded"], stamps["libraries_ready"] = model_at[0], libs_at[0]
    stamps["libraries"] = [(Path(s.path).name, s.state) for s in sources()]
    wait(lambda: window.loader is None and not window.busy, "the mzML file")
    stamps["file_listed"] = since()
    ticker.stop()
    stamps["longest_stall"] = max(b - a for a, b in itertools.pairwise(ticks)) if len(ticks) > 1 else 0.0
    if args.startup_only:
        return _finish(args, window, app, stamps, [])
    entries = [e for e in window.spectra.entries if e.spectrum is not None][:args.features]
    stamps["features"] = len(entries)
    window.select_entry(entries[0].key)  # the chemist looks at the first feature while the run goes on
    if args.child_live_all:  # every spectrum ranked live after every batch, with the preview stage (before #58)
        from msgpt_gui.logic.live import EVERYTHING

        window.runs.live = EVERYTHING
    finished = []
    window.run_finished.connect(finished.append)
    events: dict[str, int] = {}  # what the run's worker sent the window, by kind

    def count(worker) -> None:
        if worker.name == "elucidation":
            worker.yielded.connect(lambda ev: events.__setitem__(type(ev).__name__,
                                                                 events.get(type(ev).__name__, 0) + 1))

    window.worker_started.connect(count)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    clock = None
    if args.child_stages:
        from engine.timing import measure as measure_stages

        clock = measure_stages()
        stage_clock = clock.__enter__()
    run_ticks = [time.perf_counter()]  # the same 20 ms timer during the run: how usable the window stays
    ticker.timeout.disconnect()
    ticker.timeout.connect(lambda: run_ticks.append(time.perf_counter()))
    ticker.start()
    t0, cpu0 = time.perf_counter(), time.process_time()
    started = window.run_menu.run_entries(entries)
    if not started:
        raise SystemExit("the run did not start")
    wait(lambda: finished, "the run")
    stamps["run_seconds"] = time.perf_counter() - t0
    stamps["run_cpu_seconds"] = time.process_time() - cpu0  # every thread of the process: robust to a busy machine
    ticker.stop()
    stamps["run_stall"] = max(b - a for a, b in itertools.pairwise(run_ticks)) if len(run_ticks) > 1 else 0.0
    if clock is not None:
        clock.__exit__(None, None, None)
        stamps["stages"] = stage_clock.table(stamps["run_seconds"])
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    stamps["run_outcome"] = finished[0]
    stamps["live_rankings"] = events.get("EntryRanking", 0)
    stamps["progress_events"] = events.get("EntryProgress", 0)
    return _finish(args, window, app, stamps, entries)


def _ranking(entry) -> list:
    """What a feature ended with: per formula run (or the entry itself), its formula, adduct and candidates."""
    out = []
    for r in (entry.formula_runs or [entry]):
        res = r.result
        if res is None:
            out.append([r.spectrum.formula, r.spectrum.adduct, None])
            continue
        out.append([r.spectrum.formula, r.spectrum.adduct,
                    [[c.inchikey14, round(float(c.score), 6)] for c in res.candidates]])
    return out


def _finish(args, window, app, stamps: dict, entries) -> int:
    stamps["rankings"] = {e.id: _ranking(e) for e in entries}
    window.popups = False
    window.projects.may_close = lambda: True
    window.close()
    app.processEvents()
    Path(args.child).write_text(json.dumps(stamps))
    return 0


# ----------------------------------------------------------------------------------------------------------------
# the driver
# ----------------------------------------------------------------------------------------------------------------
def measure(code: Path, args: argparse.Namespace, profile: str | None, startup_only: bool,
            live_all: bool = False) -> dict:
    """One version: a warm-up start (unless --no-warmup), then the measured one, in fresh processes."""
    home = Path(tempfile.mkdtemp(prefix="msgpt-bench-app-"))
    try:
        runs = ([True] if not args.no_warmup else []) + [False]
        first = None
        for warmup in runs:
            out = home / "stamps.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(out), "--code", str(code),
                   "--mzml", args.mzml, "--features", str(args.features)]
            if warmup or startup_only:
                cmd.append("--startup-only")
            if profile and not warmup:
                cmd += ["--profile", profile]
            if live_all:
                cmd.append("--child-live-all")
            if args.stages and not warmup and not live_all:
                cmd.append("--child-stages")
            env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                   "MSGPT_HOME": str(home / "warm" if warmup else home / "measured"),
                   "PYTHONPATH": str(code), "BENCH_APP_T0": repr(time.time())}
            if not warmup and not args.no_warmup:  # the measured start finds the library indexes the warm-up made
                for sub in ("data", "cache"):
                    if (home / "warm" / sub).is_dir():
                        shutil.copytree(home / "warm" / sub, home / "measured" / sub, dirs_exist_ok=True)
            subprocess.run(cmd, env=env, check=True, timeout=args.timeout, cwd=str(code))
            if warmup:
                first = json.loads(out.read_text())
        stamps = json.loads(out.read_text())
        if first is not None:
            stamps["first_start_window"] = first["window_responsive"]
            stamps["first_start_libraries_ready"] = first["libraries_ready"]
        return stamps
    finally:
        shutil.rmtree(home, ignore_errors=True)


def differing(a: dict, b: dict) -> list[str]:
    """Features whose final rankings differ between two versions (formula runs, candidates, scores, order)."""
    return [k for k in a if a[k] != b.get(k)]


def table(results: dict[str, dict], n_features: int, startup_only: bool) -> str:
    rows = [("window shown and responsive (s)", "window_responsive", False),
            ("model loaded (s)", "model_loaded", False),
            ("bundled libraries ready (s)", "libraries_ready", False),
            ("run's features listed (s)", "file_listed", False),
            ("longest event-loop stall while loading (s)", "longest_stall", False),
            ("first start ever: window shown and responsive (s)", "first_start_window", False),
            ("first start ever: libraries indexed and ready (s)", "first_start_libraries_ready", False)]
    if not startup_only:
        rows += [(f"Run All, {n_features} features (s)", "run_seconds", False), ("features per hour", "fph", True),
                 (f"Run All, {n_features} features: CPU seconds of the app's process", "run_cpu_seconds", False),
                 ("features per CPU hour (what a busy machine does not change)", "fpcpuh", True),
                 ("longest event-loop stall during the run (s)", "run_stall", False),
                 ("live rankings sent to the window", "live_rankings", False),
                 ("progress events sent to the window", "progress_events", False)]
    for r in results.values():
        if "run_seconds" in r:
            r["fph"] = 3600 * r["features"] / r["run_seconds"]
        if r.get("run_cpu_seconds"):
            r["fpcpuh"] = 3600 * r["features"] / r["run_cpu_seconds"]
    names = list(results)
    ratio = len(names) >= 2 and names[0].startswith("baseline")
    head = "| | " + " | ".join(names) + (" | current / baseline |" if ratio else " |")
    lines = [head, "|" + "---|" * (len(names) + 1 + ratio)]
    for label, key, higher in rows:
        vals = [results[n].get(key) for n in names]
        cells = [f"{v:.2f}" if isinstance(v, float) and v < 1 else f"{v:.1f}" if isinstance(v, float) else str(v) for v in vals]
        if ratio:
            r = vals[names.index("current")] / vals[0] if None not in vals and vals[0] else None
            cells.append("" if r is None else f"{r:.2f}×" if r >= 0.1 else f"{r:.3f}×")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    if not args.startup_only and not Path(args.mzml).is_file():
        sys.exit(f"No LC-MS run at {args.mzml}: give --mzml FILE (the QC-pool run is in ../shared/data/mzml/).")
    results: dict[str, dict] = {}
    if not args.no_baseline:
        with worktree(args.baseline) as tree:
            results[f"baseline {args.baseline}"] = measure(tree, args, None, args.startup_only)
    load = os.getloadavg()[0]
    results["current"] = measure(Path(args.code).resolve(), args, args.profile, args.startup_only)
    if args.live_all and not args.startup_only:
        results["current, every spectrum live"] = measure(Path(args.code).resolve(), args, None, False, live_all=True)
    print(f"bench_app: {Path(args.mzml).name}, first {args.features} features, bundled model and libraries, "
          f"one torch thread, offscreen; {os.cpu_count()} CPUs, load average {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(table(results, args.features, args.startup_only))
    for name, r in results.items():
        if r.get("stages"):
            print(f"\n{name}: Run All by stage (engine.timing; 'unmarked' is what no engine stage covers: the app's "
                  "jobs, Qt events, waiting for the GIL)")
            print("| stage | seconds | calls | share |\n|---|---|---|---|")
            for stage_name, seconds, calls, share in r["stages"]:
                print(f"| {stage_name} | {seconds:.1f} | {calls} | {100 * share:.0f}% |")
    if args.compare and not args.startup_only:
        current = results["current"]["rankings"]
        for name, r in results.items():
            if name != "current":
                diff = differing(r["rankings"], current)
                print(f"final rankings, {name} against current: {len(current) - len(diff)} of {len(current)} "
                      "features identical" + (f"; differ: {', '.join(diff)}" if diff else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
