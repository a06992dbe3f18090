"""benchmarks/known_compounds.py: how it scores a run's CSV, the confidence check included."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "known_compounds.py"
_spec = importlib.util.spec_from_file_location("known_compounds_bench", _PATH)
known_compounds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(known_compounds)


def test_calibration_of_confidence_against_rank1_right():
    cal = known_compounds.calibration([(0.05, False), (0.07, False), (0.15, True), (0.95, True)])
    assert cal["spectra"] == 4 and cal["rank1_right"] == pytest.approx(0.5)
    assert cal["mean_confidence"] == pytest.approx(0.305)
    assert cal["brier"] == pytest.approx((0.05**2 + 0.07**2 + 0.85**2 + 0.05**2) / 4)
    assert cal["brier_base_rate"] == pytest.approx(0.25) and cal["auroc"] == pytest.approx(1.0)
    # the confidence model's bins: [0.05, 0.1) holds 0.05 and 0.07 (none right), [0.1, 0.2) 0.15, [0.4, 1] 0.95
    assert cal["ece"] == pytest.approx((0.05 + 0.07 + 0.85 + 0.05) / 4)
    assert known_compounds.calibration([]) == {"spectra": 0}


def test_score_reads_rank1_by_feature_rank_its_origin_and_confidence(tmp_path):
    path = tmp_path / "run.csv"
    cols = ["spectrum_id", "feature_rank", "is_reference", "identification_level", "origin", "spectrum_confidence"]
    rows = [("A", 1, "yes", "3", "de_novo", "0.4"), ("A", 2, "no", "3", "structure_library", "0.4"),
            ("B", 1, "no", "3", "structure_library", "0.1"), ("B", 5, "yes", "3", "de_novo", "0.1"),
            ("C", 1, "no", "2a", "spectral_library", "")]
    with open(path, "w", newline="") as fh:
        fh.write("# msgpt_version: test\n")
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerows(rows)
    got = known_compounds.score(path)
    assert (got["spectra"], got["top1"], got["top10"], got["truth_written"], got["identified_rank1"]) == (3, 1, 2, 2, 1)
    assert got["top5"] == 2
    assert got["rank1_origin"] == {"de_novo": 1, "spectral_library": 1, "structure_library": 1}
    assert got["confidence"]["spectra"] == 2 and got["confidence"]["rank1_right"] == pytest.approx(0.5)  # C has none


def test_formula_isomers_are_the_formula_track_of_the_first_pool_of_each_truth(tmp_path):
    pools = [
        {"truth": {"inchikey14": "A"}, "candidates": [{"k": "A", "s": "CCO", "fl": 1}, {"k": "B", "s": "COC", "fl": 1},
                                                      {"k": "C", "s": "CC=O", "ml": 1}]},
        {"truth": {"inchikey14": "A"}, "candidates": [{"k": "D", "s": "OCC", "fl": 1}]},
        {"truth": {"inchikey14": "Z"}, "candidates": [{"k": "E", "s": "CCN", "fl": 1}]},
    ]
    (tmp_path / "pools.jsonl").write_text("\n".join(json.dumps(p) for p in pools) + "\n{\"cut")
    assert known_compounds.formula_isomers(tmp_path, {"A", "Q"}) == {"A": ["COC"]}
