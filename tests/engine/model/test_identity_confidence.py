"""The confidence of identifications (engine/model/identity_confidence.py, engine.model.confidence): what an identity
search says about its rank-1 hit (search.py's leave-out rows, isomers, same-structure spectra), the features read off
it, the model's JSON, an identified rank 1 getting the model's probability, and the isomers that withhold level 2a."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from engine.errors import BundleError
from engine.model.confidence import (
    ConfidenceModel,
    identification_confidence,
    identity_model,
    spectrum_confidence,
    why_no_confidence,
)
from engine.spectral_library import (
    ReferenceSpectrum,
    library_from_references,
    search_peaks,
)
from engine.spectral_library.identity import (
    IDENTITY_FEATURES,
    close_isomers,
    identity_features,
)
from engine.spectral_library.index import clean_peaks

PRECURSOR = 301.1
PEAKS = np.array([71.05, 99.04, 127.08, 155.07, 183.10, 211.09, 255.12])
HEIGHTS = np.array([30.0, 100.0, 60.0, 45.0, 80.0, 20.0, 50.0])


def ref(i, key, formula, mz, intensity, precursor=PRECURSOR):
    return ReferenceSpectrum(index=i, line=1 + 10 * i, precursor_mz=precursor, charge=1, mz=np.asarray(mz, float),
                             intensity=np.asarray(intensity, float), accession=f"MSBNK-LAB{i % 2}-{i:06d}",
                             name=f"compound {key}", polarity="positive", inchikey14=key, formula=formula,
                             license="CC0")


@pytest.fixture(scope="module")
def library():
    """Two spectra of structure A, one of its isomer B (one peak's height changed: nearly the same spectrum), one
    of C (another formula at the same precursor, other peaks) and one far away."""
    b_heights = HEIGHTS.copy()
    b_heights[2] = 10.0
    return library_from_references([
        ref(0, "AAAAAAAAAAAAAA", "C15H16O6", PEAKS, HEIGHTS),
        ref(1, "AAAAAAAAAAAAAA", "C15H16O6", PEAKS, HEIGHTS * np.array([1, 1, 1, 1, 1, 0.8, 1])),
        ref(2, "BBBBBBBBBBBBBB", "C15H16O6", PEAKS, b_heights),
        ref(3, "CCCCCCCCCCCCCC", "C16H20O5", PEAKS[[0, 1, 3]] + 0.3, HEIGHTS[[0, 1, 3]]),
        ref(4, "DDDDDDDDDDDDDD", "C10H10O3", PEAKS[:3], HEIGHTS[:3], precursor=179.07),
    ], "lib")


def query():
    """The A spectrum with one extra peak of its own (no reference holds it)."""
    mz = np.append(PEAKS, 140.5)
    return mz, np.append(HEIGHTS, 40.0)


def test_search_reports_isomers_same_structure_spectra_and_leaves_rows_out(library):
    mz, intensity = query()
    m = search_peaks(library, PRECURSOR, mz, intensity, "positive")
    sims = {h.reference.inchikey14: h.similarity for h in reversed(m.hits)}  # best of each structure
    assert m.hits[0].reference.inchikey14 == "AAAAAAAAAAAAAA"
    assert m.formula_structures == 2  # A and B hold C15H16O6; C and D other formulas
    assert m.structure_spectra == 2  # both A spectra score >= 0.5
    assert m.best_isomer is not None and m.best_isomer[1].inchikey14 == "BBBBBBBBBBBBBB"
    assert m.best_isomer[0] == pytest.approx(sims["BBBBBBBBBBBBBB"])
    assert m.other_similarity == pytest.approx(max(sims["BBBBBBBBBBBBBB"], sims.get("CCCCCCCCCCCCCC", 0.0)))
    left_out = search_peaks(library, PRECURSOR, mz, intensity, "positive", exclude={"lib": np.array([0, 1])})
    assert left_out.hits[0].reference.inchikey14 == "BBBBBBBBBBBBBB"
    assert all(h.reference.row not in (0, 1) for h in left_out.hits)
    assert left_out.formula_structures == 1 and left_out.best_isomer is None and left_out.structure_spectra == 1


def test_identity_features_are_read_off_the_rank_1_hit(library):
    mz, intensity = query()
    m = search_peaks(library, PRECURSOR, mz, intensity, "positive")
    f = identity_features(m)
    assert list(f) == list(IDENTITY_FEATURES)
    first = m.hits[0]
    assert f["similarity"] == pytest.approx(first.similarity)
    assert f["log_matched"] == pytest.approx(math.log(7))  # the seven A peaks, not the query's own
    # the matched share of the query's intensity, from the raw heights (cleaning scales them all alike)
    cleaned = clean_peaks(PRECURSOR, mz, intensity)
    assert cleaned.shape[0] == 8
    assert f["matched_intensity"] == pytest.approx(HEIGHTS.sum() / intensity.sum(), abs=1e-4)
    assert f["margin"] == pytest.approx(first.similarity - m.other_similarity)
    assert 0 < f["margin"] < 0.2 and f["isomer_similarity"] == pytest.approx(m.best_isomer[0])
    assert f["log_isomers"] == pytest.approx(math.log(2))
    assert f["log_structure_spectra"] == pytest.approx(math.log(3))
    assert identity_features(None) is None


def model(tmp_path=None):
    rng = np.random.default_rng(0)
    weights = tuple(float(w) for w in rng.uniform(-1, 1, len(IDENTITY_FEATURES)))
    return ConfidenceModel(weights, 0.3, tuple(0.1 * i for i in range(len(IDENTITY_FEATURES))),
                           tuple(1.0 + 0.1 * i for i in range(len(IDENTITY_FEATURES))), IDENTITY_FEATURES,
                           recalibration=((0.0, 0.5, 1.0), (0.1, 0.4, 0.95)))


def by_hand(m: ConfidenceModel, f: dict) -> float:
    z = m.bias + sum(w * (f[k] - mu) / s for w, k, mu, s in zip(m.weights, m.features, m.mean, m.scale))
    return float(np.interp(1 / (1 + math.exp(-z)), *m.recalibration))


def test_the_model_round_trips_through_json(tmp_path, library):
    m = model()
    path = m.save(tmp_path / "confidence.json")
    back = ConfidenceModel.load(path)
    assert back == m
    f = identity_features(search_peaks(library, PRECURSOR, *query(), "positive"))
    assert back.probability(f) == pytest.approx(by_hand(m, f))
    assert identity_model(path) == m
    with pytest.raises(BundleError, match="unknown features"):
        ConfidenceModel((1.0,), 0.0, (0.0,), (1.0,), ("spectral_luck",))


def identified_result(matches, **kw):
    first = SimpleNamespace(identified=True, suspect=False)
    return SimpleNamespace(candidates=[first], spectral_matches=matches, n_samples=0, partial=False, plan=None,
                           spectrum=SimpleNamespace(metadata={}, polarity="positive"), **kw)


def test_an_identified_rank_1_gets_the_identification_confidence(tmp_path, library, monkeypatch):
    m = model()
    path = m.save(tmp_path / "confidence.json")
    monkeypatch.setattr("engine.model.confidence.confidence_path", lambda: path)
    matches = search_peaks(library, PRECURSOR, *query(), "positive")
    result = identified_result(matches)
    bundle = SimpleNamespace(confidence=None)  # no de novo model: the identification's needs none
    assert why_no_confidence(bundle, result) == ""
    p = spectrum_confidence(bundle, result)
    assert p == pytest.approx(by_hand(m, identity_features(matches))) and 0 < p < 1
    assert identification_confidence(matches) == p
    # without the search's hits, or without a model beside the library, no number, and the reason
    assert spectrum_confidence(bundle, identified_result(None)) is None
    assert "does not keep the search's hits" in why_no_confidence(bundle, identified_result(None))
    monkeypatch.setattr("engine.model.confidence.confidence_path", lambda: tmp_path / "none.json")
    assert spectrum_confidence(bundle, result) is None
    assert "no confidence of identifications" in why_no_confidence(bundle, result)


def test_close_isomers_name_the_isomer_within_the_window(library):
    m = search_peaks(library, PRECURSOR, *query(), "positive")
    gap = m.hits[0].similarity - m.best_isomer[0]
    assert 0 < gap < 0.2
    near = close_isomers(m, window=gap + 0.01)
    assert [i.inchikey14 for i in near] == ["BBBBBBBBBBBBBB"]
    assert near[0].text() == f"or its isomer compound BBBBBBBBBBBBBB, similarity {m.best_isomer[0]:.2f}"
    assert close_isomers(m, window=gap - 0.01) == []
    alone = search_peaks(library, PRECURSOR, *query(), "positive", exclude={"lib": np.array([2])})
    assert close_isomers(alone, window=1.0) == []
