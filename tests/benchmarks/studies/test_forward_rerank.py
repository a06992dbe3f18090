"""The arithmetic of benchmarks/studies/forward_rerank.py, by hand."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "forward_rerank.py"
_spec = importlib.util.spec_from_file_location("forward_rerank", _PATH)
forward_rerank = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(forward_rerank)


def test_forward_score_counts_seen_missing_and_unexplained_peaks():
    # fragments: one observed (q 0.8), one absent (q 0.3); three observed peaks, so two are unexplained
    got = forward_rerank.forward_score([0.8, 0.3], [1, 0], 3, eps=0.01)
    assert got == pytest.approx(math.log(0.8) + math.log(0.7) + 2 * math.log(0.01))
    # a candidate that explains more observed peaks scores higher, all else equal
    score = forward_rerank.forward_score
    assert score([0.8, 0.3], [1, 1], 3, 0.01) > score([0.8, 0.3], [1, 0], 3, 0.01)
    assert math.isfinite(forward_rerank.forward_score([1.0, 0.0], [0, 1], 1, 0.01))  # clipped, never -inf


def test_rank_of_sorts_descending_and_keeps_ties_in_list_order():
    keys = ["A", "B", "C"]
    assert forward_rerank.rank_of("C", keys, [1.0, 2.0, 3.0]) == 1
    assert forward_rerank.rank_of("B", keys, [5.0, 5.0, 1.0]) == 2
    assert forward_rerank.rank_of("Z", keys, [1.0, 2.0, 3.0]) is None
