"""benchmarks/bench_run.py: how it reads the outputs it compares, the stage table and the truths' ranks (the runs
themselves happen in the benchmark, never in a test: timing lives in benchmarks)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_run.py"
_spec = importlib.util.spec_from_file_location("bench_run", _PATH)
bench_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_run)

HEADER = "spectrum_id,feature_rank,inchikey\n"


def write(path: Path, rows: list[tuple[str, int, str]]) -> Path:
    path.write_text("# msgpt predict\n" + HEADER + "".join(f"{s},{r},{k}-AAAAAAAAAA-N\n" for s, r, k in rows))
    return path


def test_answers_are_read_in_feature_rank_order(tmp_path):
    out = write(tmp_path / "a.csv", [("F1", 2, "B" * 14), ("F1", 1, "A" * 14), ("F2", 1, "C" * 14)])
    assert bench_run.feature_answers(out) == {"F1": ["A" * 14, "B" * 14], "F2": ["C" * 14]}


def test_the_comparison_counts_the_same_rank_1_and_features_only_one_wrote(tmp_path):
    base = write(tmp_path / "b.csv", [("F1", 1, "A" * 14), ("F2", 1, "C" * 14), ("F3", 1, "D" * 14)])
    new = write(tmp_path / "n.csv", [("F1", 1, "A" * 14), ("F2", 1, "E" * 14)])
    line = bench_run.compare(base, new)
    assert line.startswith("2 features in both outputs (1 only in the baseline's, 0 only in the current's): "
                           "the same rank 1 for 1;")


def test_truth_ranks_and_their_line(tmp_path):
    out = write(tmp_path / "c.csv", [("S1", 1, "T" * 14), ("S2", 1, "X" * 14), ("S2", 2, "U" * 14)])
    ranks = bench_run.truth_ranks(out, {"S1": "T" * 14, "S2": "U" * 14, "S3": "V" * 14})
    assert ranks == [1, 2, None]
    assert bench_run.top_k_line("x", ranks) == ("x: Top-1 1/3, Top-10 2/3, truth among the written candidates 2/3")


def test_the_stage_table_adds_what_no_stage_covered():
    lines = bench_run.stage_table({"sampling": [6.0, 10], "ranking": [2.0, 3]}, 10.0)
    assert lines[2] == "| sampling | 6.0 | 10 | 60% |" and lines[3] == "| ranking | 2.0 | 3 | 20% |"
    assert lines[-1].startswith("| unmarked") and "| 2.0 |" in lines[-1]
