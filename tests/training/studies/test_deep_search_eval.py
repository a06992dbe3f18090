"""The deep search evaluation's tables (issue #58): named deep variants, the phase profile, the paired comparison with
a baseline run (exact McNemar, bootstrap intervals) and a rerun's lines laid over a run's."""

import json

import pytest

from engine.elucidation.deep import DeepConfig
from training.studies.deep_search_eval import (
    deep_configs,
    heavy_atoms,
    mcnemar_p,
    paired_table,
    summarize,
)


def rows(path, spec):
    """``spec``: (spectrum, method, rank, seconds[, phase_seconds, truth_sources]) lines of a results.jsonl."""
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "results.jsonl", "w") as fh:
        for key, method, rank, seconds, *deep in spec:
            row = {"spectrum": key, "method": method, "rank": rank, "seconds": seconds, "n_candidates": 3,
                   "reference": "CCO", "top_smiles": ["CCO"] if rank else ["COC"]}
            if deep:
                row["phase_seconds"], row["truth_sources"] = deep
            fh.write(json.dumps(row) + "\n")
    return path


def test_mcnemar_exact():
    assert mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(0, 4) == pytest.approx(0.125)  # 2 * (1/2)^4
    assert mcnemar_p(1, 9) == pytest.approx(2 * 11 / 1024)
    assert mcnemar_p(5, 5) == 1.0


def test_deep_variants_are_overrides_of_the_defaults():
    configs = deep_configs({"max_new_samples": 100}, ['lean={"rounds": 1}'])
    assert configs["deep"] == DeepConfig(max_new_samples=100)
    assert configs["deep:lean"] == DeepConfig(rounds=1)
    with pytest.raises(SystemExit, match="NAME="):
        deep_configs({}, ['{"rounds": 1}'])


def test_paired_table_counts_discordant_spectra_and_each_runs_own_ratio(tmp_path):
    new = rows(tmp_path / "new", [(f"s{i}", m, r, t) for i in range(6) for m, r, t in
                                   (("standard", None, 1.0), ("deep", 1 if i < 2 else None, 4.0))])
    base = rows(tmp_path / "base", [(f"s{i}", m, r, t) for i in range(6) for m, r, t in
                                     (("standard", None, 2.0), ("deep", 1 if i < 5 else None, 20.0))])
    from training.studies.deep_search_eval import _rows_by_spectrum

    table = "\n".join(paired_table(_rows_by_spectrum(new / "results.jsonl"), "deep",
                                   _rows_by_spectrum(base / "results.jsonl"), "deep", "old", reps=200))
    assert "| truth in pool | 2 | 5 | 0 | 3 | 0.250 | -3 " in table  # 3 spectra only the baseline found
    assert "| × standard (each run's own) | 4.00 (4.00 to 4.00) | 10.00 |" in table


def test_summary_overlays_a_rerun_and_profiles_the_phases(tmp_path):
    phases = {"standard": 1.0, "allocation": 2.0, "edits": 1.0}
    run = rows(tmp_path / "run", [("a", "standard", None, 1.0), ("a", "deep", None, 4.0, phases, []),
                                  ("b", "standard", None, 1.0), ("b", "deep", 2, 4.0, phases, ["edits"])])
    rows(tmp_path / "rerun", [("a", "standard", None, 1.0),
                                      ("a", "deep", 1, 6.0, phases, ["allocation", "round 1"])])
    plain = summarize(run / "results.jsonl", ["standard", "deep"])
    assert "| deep | 1 | 0 | 1 |" in plain and "| edits | 1.00 | 25% | 1 |" in plain
    laid = summarize(run / "results.jsonl", ["standard", "deep"], overlay=tmp_path / "rerun")
    assert "| deep | 2 | 1 | 2 |" in laid and "| 5.00 | 5.00 |" in laid  # spectrum a's lines are the rerun's
    assert "| allocation | 2.00 | 50% | 1 |" in laid and "| edits | 1.00 | 25% | 1 |" in laid


def test_heavy_atoms():
    assert heavy_atoms("C10H12N2O") == 13
