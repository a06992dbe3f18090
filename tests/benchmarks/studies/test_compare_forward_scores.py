"""benchmarks/studies/compare_forward_scores.py: two forward-score runs on the same pools, paired."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from test_suspect_ranking import spectrum_dict

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "compare_forward_scores.py"
_spec = importlib.util.spec_from_file_location("compare_forward_scores", _PATH)
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


def _pools(folder: Path, make_spectrum) -> list[str]:
    """Two train-unseen and two FOLD=val library-only pools; in each the fingerprint puts decoy D before truth T."""
    folder.mkdir()
    keys, recs = [], []
    for i, fold in enumerate(("train", "train", "val", "val")):
        keys.append(f"run.mgf#{i}:S{i}")
        recs.append({"key": keys[-1], "fold": fold, "truth": {"inchikey14": f"T{i}"}, "queries": [],
                     "candidates": [{"k": f"T{i}", "s": "CCO", "fp": -2.0, "fl": 1, "ml": 1},
                                    {"k": f"D{i}", "s": "COC", "fp": -1.0, "fl": 1, "ml": 1}]})
    (folder / "pools.jsonl").write_text("\n".join(map(json.dumps, recs)) + "\n")
    spectra = [spectrum_dict(make_spectrum(id=f"S{i}", source="run.mgf", index=i)) for i in range(4)]
    (folder / "selection.json").write_text(json.dumps({"choose": spectra[:2], "report": spectra[2:]}))
    return keys


def _scores(folder: Path, keys: list[str], truth: float, decoy: float, only: int | None = None) -> None:
    folder.mkdir()
    lines = [{"key": k, "k": 10, "fw": {f"T{i}": truth, f"D{i}": decoy}, "seconds": 0.0}
             for i, k in enumerate(keys) if only is None or i < only]
    (folder / "forward_scores.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")


def test_b_against_a_pairs_each_pool(tmp_path, make_spectrum, capsys):
    keys = _pools(tmp_path / "pools", make_spectrum)
    _scores(tmp_path / "a", keys, truth=-1.0, decoy=-1.0)  # no help: the decoy stays first at any weight
    _scores(tmp_path / "b", keys, truth=0.0, decoy=-2.0)  # at w = 1 the truth scores -2 + 0 > -1 - 2
    assert compare.main(["--pools", str(tmp_path / "pools"), "--a", f"{tmp_path / 'a'}:8",
                         "--b", f"{tmp_path / 'b'}:1", "--fresh", "1"]) == 0
    out = capsys.readouterr().out
    assert "train-unseen (2): formula 0.0 → 100.0: +100.0 (+100.0 … +100.0)" in out
    assert "FOLD=val (2):" in out and "FOLD=val after the first 1 (1): formula 0.0 → 100.0" in out
    assert "mean +100.0 (+100.0 … +100.0)" in out


def test_a_run_without_every_pools_scores_is_named(tmp_path, make_spectrum, capsys):
    keys = _pools(tmp_path / "pools", make_spectrum)
    _scores(tmp_path / "a", keys, truth=-1.0, decoy=-1.0, only=3)
    _scores(tmp_path / "b", keys, truth=0.0, decoy=-2.0)
    with pytest.raises(SystemExit) as e:
        compare.main(["--pools", str(tmp_path / "pools"), "--a", f"{tmp_path / 'a'}:8", "--b", f"{tmp_path / 'b'}:1"])
    assert e.value.code == 2 and "no forward scores for 1 of the 4 pools" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main(["--pools", str(tmp_path / "pools"), "--a", "folder-without-weight", "--b", "x:1"])
