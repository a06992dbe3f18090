"""Searching spectral libraries (engine/spectral_library/search.py) on synthetic spectra with known answers:
identity against analog (hybrid) search, matched peaks, ion-mode groups, answers and parameters."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.errors import ConfigError
from engine.spectral_library import (
    AnswerThreshold,
    ReferenceSpectrum,
    SearchParams,
    library_from_references,
    search,
    search_peaks,
)
from engine.spectral_library.search import matched_peaks

METHYL = 14.01565


def reference(i, precursor, mz, intensity, polarity="positive", key=None):
    return ReferenceSpectrum(index=i, line=1 + 10 * i, precursor_mz=precursor,
                             charge=1 if polarity == "positive" else -1,
                             mz=np.asarray(mz, float), intensity=np.asarray(intensity, float),
                             accession=f"REF{i:03d}", name=f"compound {i}", polarity=polarity,
                             inchikey14=key or f"KEY{i:011d}", license="CC0")


def random_spectra(n, seed=1, polarity="positive"):
    rng = np.random.default_rng(seed)
    refs = []
    for i in range(n):
        precursor = 150.0 + 7.3 * i + rng.uniform(0, 0.5)
        mz = np.sort(rng.choice(np.arange(50.0, precursor - 5.0, 0.5), size=8, replace=False)
                     + rng.uniform(0.0, 0.2, size=8))
        refs.append(reference(i, precursor, mz, rng.uniform(5, 100, size=8), polarity))
    return refs


@pytest.fixture(scope="module")
def refs():
    return random_spectra(40)


@pytest.fixture(scope="module")
def library(refs):
    return library_from_references(refs, "synthetic")


def test_identity_finds_the_query_itself_with_all_its_peaks(library, refs):
    target = refs[17]
    rng = np.random.default_rng(5)
    noisy_mz = target.mz + rng.uniform(-0.003, 0.003, size=target.mz.size)
    noisy_int = target.intensity * rng.uniform(0.9, 1.1, size=target.mz.size)
    matches = search_peaks(library, target.precursor_mz + 0.002, noisy_mz, noisy_int, "positive")
    best = matches.hits[0]
    assert best.reference.accession == "REF017" and best.row == 17 and best.rank == 1
    assert best.similarity > 0.95 and best.matched_peaks == 8
    assert best.reference.name == "compound 17" and best.reference.license == "CC0"
    assert best.precursor_delta == pytest.approx(0.002, abs=1e-9)
    assert len(matches.hits) == 1  # no other reference within 0.01 Da of the precursor
    assert matches.libraries == ("synthetic",) and matches.notes == ()


def test_matched_peaks_point_at_peaks_within_the_tolerance(library, refs):
    target = refs[3]
    half = target.mz.size // 2  # the query shares half the reference's peaks
    mz = np.concatenate([target.mz[:half], target.mz[half:] + 1.3])
    matches = search_peaks(library, target.precursor_mz, mz, target.intensity, "positive")
    hit = matches.hits[0]
    assert hit.row == 3 and hit.matched_peaks == half and hit.loss_pairs.shape == (0, 2)
    ref_mz, ref_int = library.peaks(hit.row)
    assert ref_int.sum() == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_array_equal(hit.reference_mz, ref_mz)  # the hit carries them, for a mirror plot
    np.testing.assert_array_equal(hit.reference_intensity, ref_int)
    q, r = hit.fragment_pairs[:, 0], hit.fragment_pairs[:, 1]
    assert np.all(np.abs(matches.query_mz[q] - ref_mz[r]) <= 0.02)
    np.testing.assert_allclose(matches.query_mz[q], target.mz[:half], atol=1e-4)


def analog_pair():
    """A reference and its methylated analog: two fragments keep their m/z, two carry the methyl (same neutral
    loss from the heavier precursor)."""
    precursor = 300.1
    kept = [91.0542, 119.0491]
    carried = [180.0655, 222.0761]
    parent = reference(0, precursor, kept + carried, [40, 100, 60, 80], key="PARENTKEYAAAAA")
    analog = reference(1, precursor + METHYL, kept + [m + METHYL for m in carried], [40, 100, 60, 80],
                       key="ANALOGKEYAAAAA")
    return parent, analog


def test_identity_misses_an_analog_that_hybrid_finds():
    parent, analog = analog_pair()
    library = library_from_references([analog], "analogs")
    query = (parent.precursor_mz, parent.mz, parent.intensity, "positive")
    assert search_peaks(library, *query).hits == ()  # another precursor: no identity hit
    open_hit = search_peaks(library, *query, params=SearchParams(mode="open")).hits[0]
    hybrid_hit = search_peaks(library, *query, params=SearchParams(mode="hybrid")).hits[0]
    assert open_hit.matched_peaks == 2 and open_hit.loss_pairs.shape == (0, 2)
    assert hybrid_hit.matched_peaks == 4 and hybrid_hit.fragment_pairs.shape == (2, 2)
    assert hybrid_hit.similarity > open_hit.similarity
    assert hybrid_hit.precursor_delta == pytest.approx(-METHYL)
    # a loss pair: the same neutral loss from each precursor
    ref_mz, _ = library.peaks(0)
    q, r = hybrid_hit.loss_pairs[:, 0], hybrid_hit.loss_pairs[:, 1]
    np.testing.assert_allclose(parent.precursor_mz - parent.mz[q], analog.precursor_mz - ref_mz[r], atol=1e-3)


def test_analog_hits_are_never_an_answer():
    parent, analog = analog_pair()
    library = library_from_references([parent, analog], "both")
    lenient = AnswerThreshold(0.1, 1)
    identity = search(library, parent, SearchParams())
    hybrid = search(library, parent, SearchParams(mode="hybrid"))
    assert identity.answer(lenient).reference.inchikey14 == "PARENTKEYAAAAA"
    assert hybrid.hits[0].row == 0 and hybrid.answer(lenient) is None
    assert identity.answer(AnswerThreshold(1.01, 1)) is None


def test_neutral_loss_mode_counts_losses_only():
    parent, analog = analog_pair()
    library = library_from_references([analog], "analogs")
    hit = search(library, parent, SearchParams(mode="neutral_loss")).hits[0]
    assert hit.fragment_pairs.shape == (0, 2) and hit.matched_peaks == 2


def test_queries_search_their_own_ion_mode():
    positive = random_spectra(5, seed=3)
    negative = [reference(10 + r.index, r.precursor_mz, r.mz, r.intensity, "negative") for r in positive]
    library = library_from_references(positive + negative, "mixed")
    target = negative[2]
    assert search_peaks(library, target.precursor_mz, target.mz, target.intensity, "negative").hits[0].row == 7
    assert search_peaks(library, target.precursor_mz, target.mz, target.intensity, "positive").hits[0].row == 2
    both = search_peaks(library, target.precursor_mz, target.mz, target.intensity, None)
    assert sorted(h.row for h in both.hits) == [2, 7]


def test_several_libraries_rank_together_and_polarity_notes():
    pos = library_from_references(random_spectra(6, seed=4), "pos")
    neg = library_from_references(random_spectra(6, seed=4, polarity="negative"), "neg")
    target = random_spectra(6, seed=4)[1]
    matches = search([pos, neg], target)
    assert [h.library for h in matches.hits] == ["pos"]
    assert matches.libraries == ("pos", "neg")
    assert matches.notes == (("neg holds only negative-mode spectra (6); a positive-mode spectrum cannot match "
                              "any of them. Add a library of positive-mode spectra."),)


def test_min_matched_peaks_and_top_k(library, refs):
    target = refs[9]
    wide = SearchParams(mode="open", top_k=3)
    hits = search(library, target, wide).hits
    assert len(hits) <= 3 and hits[0].row == 9
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(a.similarity >= b.similarity for a, b in itertools.pairwise(hits))
    strict = search(library, target, SearchParams(mode="open", min_matched_peaks=8)).hits
    assert [h.row for h in strict] == [9]


def test_a_query_without_fragments_is_told(library):
    matches = search_peaks(library, 200.0, [199.5, 200.0], [10, 100], "positive")
    assert matches.hits == () and "no fragment peak to compare" in matches.notes[0]


@pytest.mark.parametrize("kwargs, words", [
    ({"mode": "fuzzy"}, "mode 'fuzzy' is not one of identity, open, neutral_loss, hybrid"),
    ({"fragment_tol_da": 0.05}, "Fragment tolerance 0.05 Da must be > 0 and <= 0.024"),
    ({"precursor_tol_da": 0}, "Precursor tolerance 0 Da"),
    ({"top_k": 0}, "top_k 0"),
    ({"min_similarity": 2.0}, "min_similarity 2.0"),
])
def test_bad_parameters_name_the_value(kwargs, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        SearchParams(**kwargs)


def test_bad_query_values(library):
    with pytest.raises(ConfigError, match="Precursor m/z 'abc'"):
        search_peaks(library, "abc", [50.0], [1.0])
    with pytest.raises(ConfigError, match="Polarity 'pos'"):
        search_peaks(library, 200.0, [50.0], [1.0], "pos")


def test_matched_peaks_hybrid_counts_a_peak_once():
    # query peak 0 matches reference peak 0 as a fragment, and also as a loss of the shifted precursor: once.
    q = np.array([100.0, 150.0])
    r = np.array([100.0, 164.0157])
    fragments, losses = matched_peaks(q, 200.0, r, 214.0157, 0.02, "hybrid")
    assert fragments.tolist() == [[0, 0]] and losses.tolist() == [[1, 1]]
