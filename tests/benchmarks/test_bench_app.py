"""benchmarks/bench_app.py: the table it prints and how it tells which features ranked differently (the app itself
runs in the benchmark, never in a test: timing lives in benchmarks)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_app.py"
_spec = importlib.util.spec_from_file_location("bench_app", _PATH)
bench_app = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_app)


def stamps(run_seconds: float, window: float) -> dict:
    return {"window_responsive": window, "model_loaded": 6.0, "libraries_ready": 5.0, "file_listed": 7.0,
            "longest_stall": 0.25, "first_start_window": window, "first_start_libraries_ready": 20.0,
            "run_seconds": run_seconds, "run_cpu_seconds": run_seconds / 2, "features": 30}


def test_the_table_gives_features_per_hour_and_current_over_baseline():
    results = {"baseline abc": stamps(300.0, 4.0), "current": stamps(100.0, 2.0),
               "current, every spectrum live": stamps(150.0, 2.0)}
    lines = bench_app.table(results, 30, startup_only=False).splitlines()
    assert lines[0] == "| | baseline abc | current | current, every spectrum live | current / baseline |"
    fph = next(line for line in lines if line.startswith("| features per hour"))
    assert fph == "| features per hour | 360.0 | 1080.0 | 720.0 | 3.00× |"
    cpu = next(line for line in lines if line.startswith("| features per CPU hour"))
    assert cpu.endswith("| 720.0 | 2160.0 | 1440.0 | 3.00× |")
    window = next(line for line in lines if line.startswith("| window shown"))
    assert window.endswith("| 4.0 | 2.0 | 2.0 | 0.50× |")
    assert "0.25" in next(line for line in lines if "stall" in line)


def test_start_up_alone_has_no_run_rows_and_no_ratio_without_a_baseline():
    text = bench_app.table({"current": stamps(100.0, 2.0)}, 30, startup_only=True)
    assert "features per hour" not in text and "current / baseline" not in text


def test_features_whose_final_rankings_differ_are_named():
    a = {"F1": [["C6H6", "[M+H]+", [["AAA", 1.0]]]], "F2": [["C6H6", "[M+H]+", [["BBB", 2.0]]]]}
    b = {"F1": [["C6H6", "[M+H]+", [["AAA", 1.0]]]], "F2": [["C6H6", "[M+H]+", [["BBB", 2.5]]]]}
    assert bench_app.differing(a, b) == ["F2"] and bench_app.differing(a, a) == []
