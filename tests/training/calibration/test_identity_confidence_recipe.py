"""The recipe of the confidence of identifications (training/calibration/identity_confidence.py): the lab of an
accession, the choice of the rule's probability, the JSON it writes (read by the engine's rule and model alike),
and the collection's leave-one-lab-out searches on a tiny library."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.model.confidence import ConfidenceModel, identity_model
from engine.spectral_library import ReferenceSpectrum, library_from_references
from engine.spectral_library.identity import IDENTITY_FEATURES, ISOMER_WINDOW, load_rule
from training.calibration import identity_confidence as ic


def row(p_feature: float, right: bool, identified: bool, isomer: float = 0.0, similarity: float = 0.9) -> dict:
    f = {k: 0.0 for k in IDENTITY_FEATURES}
    f.update(similarity=similarity, log_matched=math.log(5), isomer_similarity=isomer)
    return {"right": right, "identified": identified, "ion_type_ok": True, "features": f, "p": p_feature}


def test_lab_is_the_accessions_lab_code():
    assert ic.lab("MSBNK-Athens_Univ-AU406406") == "Athens_Univ" and ic.lab("CCMSLIB0001") == "CCMSLIB0001"


def test_the_rule_halves_the_wrong_identifications_and_keeps_the_most_right_ones():
    """Today's rule identifies 10 right and 4 wrong; on the rows written out here a least probability in
    (0.86, 0.905] keeps 11 right and 2 wrong (half of 4); 0.86 or less lets a third wrong one in; above 0.905 the
    right one today's rule missed goes (10 right). The most right among those halving the wrong ones is 11, first
    reached at 0.865."""
    rows, probs = [], []
    for _ in range(10):
        rows.append(row(0.95, True, True))
    for _ in range(2):
        rows.append(row(0.92, False, True))  # today's wrong ones the probability keeps
    for _ in range(2):
        rows.append(row(0.5, False, True))  # today's wrong ones it drops
    rows.append(row(0.905, True, False))  # a right one today's rule missed
    rows.append(row(0.86, False, False))
    probs = np.array([r["p"] for r in rows])
    rule, grid = ic.choose_rule(rows, probs)
    assert grid[0][1:] == (10, 4)  # today's rule
    assert 0.86 < rule.min_probability <= 0.905 and rule.window == ISOMER_WINDOW
    y = np.array([r["right"] for r in rows])
    assert ic.counts(rule.level_2a(rows, probs), y) == (11, 2)
    # an isomer within the window withholds 2a
    rows[0]["features"]["isomer_similarity"] = rows[0]["features"]["similarity"] - ISOMER_WINDOW / 2
    assert not rule.level_2a(rows, probs)[0] and ic.Rule(0.9, 0.0).level_2a(rows, probs)[0]


def test_fit_writes_a_model_and_rule_the_engine_reads_alike(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "collected"
    folder.mkdir()
    with open(folder / "train.jsonl", "w") as fh:
        for _ in range(400):
            s = float(rng.uniform(0.3, 1.0))
            right = bool(rng.random() < s)  # the more similar, the more often right
            f = {k: float(rng.normal()) for k in IDENTITY_FEATURES}
            f.update(similarity=s, log_matched=math.log(int(rng.integers(1, 20))), isomer_similarity=0.0)
            fh.write(json.dumps({"right": right, "identified": s > 0.7, "ion_type_ok": True, "features": f}) + "\n")
    model, section = ic.fit(folder)
    path = ic.save(model, section, tmp_path / "confidence.json")
    back = ConfidenceModel.load(path)
    rule = load_rule(path)
    assert back == model and identity_model(path) == model
    assert rule.min_probability == section["min_probability"] and rule.min_matched_peaks == section["min_matched_peaks"]
    assert back.weights[IDENTITY_FEATURES.index("similarity")] > 0  # similarity raises the probability
    for _ in range(5):
        f = {k: float(rng.normal()) for k in IDENTITY_FEATURES}
        assert rule.probability(f) == pytest.approx(back.probability(f), abs=1e-12)


def test_collect_searches_without_the_querys_lab(tmp_path):
    """A structure measured by two labs is found from the other lab; one only its own lab measured finds the isomer
    another lab holds: a wrong rank 1."""
    peaks = np.array([71.05, 99.04, 127.08, 155.07, 183.10])
    heights = np.array([30.0, 100.0, 60.0, 45.0, 80.0])

    def ref(i, lab, key, scale=1.0):
        return ReferenceSpectrum(index=i, line=1 + 10 * i, precursor_mz=301.1, charge=1, mz=peaks,
                                 intensity=heights * scale, accession=f"MSBNK-{lab}-{i:06d}", polarity="positive",
                                 inchikey14=key, formula="C15H16O6", adduct="[M+H]+", license="CC0")

    lib = library_from_references([ref(0, "A", "KEYA"), ref(1, "B", "KEYA", np.array([1, 1, 0.9, 1, 1])),
                                   ref(2, "A", "KEYC"), ref(3, "B", "KEYD", np.array([1, 0.5, 1, 1, 1]))], "bundled")
    labs = ic.lab_rows(lib)
    assert {k: list(v) for k, v in labs.items()} == {"A": [0, 2], "B": [1, 3]}
    from engine.spectral_library.search import search_peaks

    for row_, truth, right in ((0, "KEYA", True), (2, "KEYC", False)):
        mz, intensity = lib.peaks(row_)
        matches = search_peaks(lib, 301.1, mz, intensity, "positive", ic.PARAMS, {"bundled": labs["A"]})
        rec = ic.record(matches, truth, "[M+H]+", f"MSBNK-A-{row_:06d}")
        assert rec["right"] is right and rec["lab"] == "A" and rec["ion_type_ok"]
        assert rec["rank1"] in ("KEYA", "KEYD")  # never a record of lab A


def test_extra_features_read_instrument_and_energy_agreement():
    row = {"extra": {"query_peaks": 8, "precursor_mz": 250.0, "instrument": "LC-ESI-QTOF",
                     "reference_instrument": "ESI-TOF", "energy": "20 eV", "reference_energy": "45(NCE)"}}
    assert ic.extra_features(row) == pytest.approx([math.log(8), 0.5, 1.0, 0.5, 0.0])  # no reference m/z: 0 ppm
    row["extra"].update(reference_instrument="LC-ESI-QFT", reference_energy="")
    assert ic.extra_features(row)[2:4] == [0.0, 0.5]  # another instrument class; an unknown energy
    row["extra"].update(reference_mz=250.0025)  # 10 ppm off
    assert ic.extra_features(row)[4] == pytest.approx(math.log1p(10.0), rel=1e-3)
    row["extra"].update(reference_mz=251.0)  # 0.4% off: capped at 50 ppm
    assert ic.extra_features(row)[4] == pytest.approx(math.log1p(50.0))


def test_other_formula_compares_the_query_and_reference_formulas():
    assert ic.other_formula({"extra": {"formula": "C9H13ClN6", "reference_formula": "C14H12N2O2"}})
    assert not ic.other_formula({"extra": {"formula": "C2H6O", "reference_formula": "CH3CH2OH"}})  # the same
    assert not ic.other_formula({"extra": {"formula": "C2H6O", "reference_formula": ""}})  # unknown: not counted
    assert not ic.other_formula({"extra": {}}) and not ic.other_formula({"extra": {"formula": "C2H6O",
                                                                                  "reference_formula": "Xx2"}})
