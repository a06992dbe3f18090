"""benchmarks/suspect_ranking.py: what it reads from a training.studies.retrieval run, and how it ranks the truth."""

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


def test_truth_rank_counts_over_every_ranked_candidate():
    c = [SimpleNamespace(suspect=False, inchikey14="D"), SimpleNamespace(suspect=True, inchikey14="A"),
         SimpleNamespace(suspect=True, inchikey14="T")]
    assert suspect_ranking.truth_rank(c, "T") == 3
    assert suspect_ranking.truth_rank(c, "X") is None


def test_the_rule_before_moves_the_identification_to_rank_1():
    c = [SimpleNamespace(inchikey14=k, identified=k == "I") for k in "TAI"]
    assert [x.inchikey14 for x in suspect_ranking.identification_first(c)] == ["I", "T", "A"]
    assert suspect_ranking.identification_first(c[:2]) == c[:2]


def record(accession: str, smiles: str, fold: str = "val") -> str:
    return (f"BEGIN IONS\nTITLE={accession}\nPEPMASS=47.0491\nCHARGE=1+\nIONMODE=positive\nADDUCT=[M+H]+\n"
            f"SMILES={smiles}\nINSTRUMENT_TYPE=LC-ESI-QTOF\nLICENSE=CC BY\nFOLD={fold}\n29.0386 100\nEND IONS\n")


def test_reference_spectra_hold_the_truths_other_records(tmp_path, make_spectrum):
    mgf = tmp_path / "records.mgf"
    mgf.write_text(record("MSBNK-Lab1-1", "CCO") + record("MSBNK-Lab1-2", "CCO") + record("MSBNK-Lab2-3", "CCO")
                   + record("MSBNK-Lab2-4", "CCN") + record("MSBNK-Lab2-5", "CCO", fold="train"))
    sets = [(make_spectrum(id="MSBNK-Lab1-1"), "LFQSCWFLJHTTHZ", ["CCO", "COC"])]
    assert suspect_ranking.lab("MSBNK-Lab1-2") == "Lab1"
    assert suspect_ranking.reference_spectra(mgf, sets, "none") is None
    loso = suspect_ranking.reference_spectra(mgf, sets, "loso")
    assert sorted(loso.columns["accession"]) == ["MSBNK-Lab1-2", "MSBNK-Lab2-3"]
    assert suspect_ranking.reference_spectra(mgf, sets, "other_lab").columns["accession"] == ["MSBNK-Lab2-3"]
