"""benchmarks/suspect_ranking.py: what it reads from a training.retrieval run, and how it ranks the truth."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "suspect_ranking.py"
_spec = importlib.util.spec_from_file_location("suspect_ranking", _PATH)
suspect_ranking = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suspect_ranking)


def spectrum_dict(s) -> dict:
    d = {f.name: getattr(s, f.name) for f in fields(s)}
    d["mz"], d["intensity"] = list(map(float, s.mz)), list(map(float, s.intensity))
    return d


def test_val_sets_pair_each_val_spectrum_with_its_formula_track(tmp_path, make_spectrum):
    spectra = [make_spectrum(id=f"S{i}", source="run.mgf", index=i) for i in range(3)]
    (tmp_path / "selection.json").write_text(json.dumps({"choose": [], "report": [spectrum_dict(s) for s in spectra]}))
    key = [f"run.mgf#{i}:S{i}" for i in range(3)]
    pools = [
        {"key": "train#0:T", "fold": "train", "truth": {"inchikey14": "X"}, "candidates": [{"s": "C", "fl": 1}]},
        {"key": key[0], "fold": "val", "truth": {"inchikey14": "A"},
         "candidates": [{"s": "CCO", "fl": 1}, {"s": "COC", "fl": 1}, {"s": "CC=O", "n": 3}]},
        {"key": key[1], "fold": "val", "truth": {"inchikey14": "B"}, "candidates": [{"s": "CCN", "fl": 1}]},
    ]
    (tmp_path / "pools.jsonl").write_text("\n".join(map(json.dumps, pools)) + "\n{\"cut")
    sets = suspect_ranking.val_sets(tmp_path, 5)
    assert [(s.id, truth, isomers) for s, truth, isomers in sets] == [("S0", "A", ["CCO", "COC"]), ("S1", "B", ["CCN"])]
    assert len(suspect_ranking.val_sets(tmp_path, 1)) == 1


def test_truth_rank_counts_among_the_suspects_only():
    c = [SimpleNamespace(suspect=False, inchikey14="D"), SimpleNamespace(suspect=True, inchikey14="A"),
         SimpleNamespace(suspect=True, inchikey14="T")]
    result = SimpleNamespace(candidates=c)
    assert suspect_ranking.truth_rank(result, "T") == 2
    assert suspect_ranking.truth_rank(result, "D") is None
