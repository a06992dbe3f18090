"""The Spectrum record (validation, immutability) and the preprocessing steps."""

import dataclasses

import numpy as np
import pytest

from engine.errors import AdductError, FormulaError, SpectrumError
from engine.spectra.spectrum import (
    SkippedRecord,
    Spectrum,
    check_formula_matches_precursor,
    sort_and_merge_peaks,
)

# ---------------------------------------------------------------------------------------------
# The record
# ---------------------------------------------------------------------------------------------


def test_builder_gives_a_normalised_spectrum(make_spectrum):
    s = make_spectrum(adduct="M+H", formula="O3H10C10")
    assert s.adduct == "[M+H]+"
    assert s.formula == "C10H10O3"
    assert (s.charge, s.polarity) == (1, "positive")
    assert s.mz.dtype == np.float64 and s.intensity.dtype == np.float64
    assert s.n_peaks == 4
    assert s.formula_counts == {"C": 10, "H": 10, "O": 3}
    assert s.neutral_mass == pytest.approx(178.063, abs=1e-3)
    assert s.adduct_info.charge == 1


def test_defaults_mean_unknown(make_spectrum):
    s = make_spectrum(adduct=None, formula=None)
    assert (s.adduct, s.charge, s.polarity, s.formula, s.smiles, s.retention_time) == (None, 0, None, None, None, None)
    assert s.neutral_mass is None and s.formula_counts is None and s.adduct_info is None


def test_peaks_are_sorted_copied_and_read_only(make_spectrum):
    mz = np.array([300.0, 100.0, 200.0])
    s = make_spectrum(mz=mz, intensity=[3.0, 1.0, 2.0], precursor_mz=400.0, formula=None)
    assert list(s.mz) == [100.0, 200.0, 300.0] and list(s.intensity) == [1.0, 2.0, 3.0]
    mz[0] = -1  # the caller's array is not shared
    assert list(s.mz) == [100.0, 200.0, 300.0]
    with pytest.raises(ValueError, match="read-only"):
        s.mz[0] = 5.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.precursor_mz = 1.0


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        (dict(precursor_mz=-1.0), SpectrumError, "positive number"),
        (dict(precursor_mz="abc"), SpectrumError, "must be a number, got 'abc'"),
        (dict(precursor_mz=float("nan")), SpectrumError, "positive number"),
        (dict(mz=[1.0, 2.0]), SpectrumError, "`mz` has 2 values but `intensity` has 4"),
        (dict(intensity=[1.0, np.nan, 1.0, 1.0]), SpectrumError, "`intensity` contains NaN"),
        (dict(mz=[[1.0, 2.0], [3.0, 4.0]]), SpectrumError, "one-dimensional"),
        (dict(charge=2), SpectrumError, r"Adduct \[M\+H\]\+ has charge \+1 but the spectrum's charge is \+2"),
        (dict(charge=1.0), SpectrumError, "signed integer"),
        (dict(polarity="negative"), SpectrumError, r"adduct \[M\+H\]\+ is positive but the spectrum's polarity is negative"),
        (dict(polarity="pos"), SpectrumError, "'positive', 'negative' or None"),
        (dict(adduct="[M+Qq]+"), AdductError, "Unknown group 'Qq'"),
        (dict(formula="C10H10O3Na"), FormulaError, "Unsupported element 'Na'"),
        (dict(retention_time=-5), SpectrumError, "Retention time must be >= 0"),
    ],
)
def test_invalid_fields_are_rejected(make_spectrum, overrides, error, message):
    with pytest.raises(error, match=message):
        make_spectrum(**overrides)


def test_polarity_follows_a_known_charge(make_spectrum):
    s = make_spectrum(adduct=None, formula=None, charge=-1)
    assert s.polarity == "negative"


def test_equality_compares_peaks(make_spectrum):
    assert make_spectrum() == make_spectrum()
    assert make_spectrum() != make_spectrum(intensity=[1.0, 1.0, 1.0, 1.0])
    with pytest.raises(TypeError):
        hash(make_spectrum())


def test_with_formula_and_adduct_return_validated_copies(make_spectrum):
    s = make_spectrum(adduct=None, formula=None, precursor_mz=201.0522)
    t = s.with_adduct("M+Na").with_formula("C10H10O3")
    assert (t.adduct, t.formula, t.charge) == ("[M+Na]+", "C10H10O3", 1)
    assert s.adduct is None and s.formula is None  # the original is untouched
    assert t.with_formula(None).formula is None and t.with_adduct(None).adduct is None


def test_with_formula_checks_the_precursor(make_spectrum):
    s = make_spectrum(formula=None)
    with pytest.raises(SpectrumError, match="fix FORMULA or ADDUCT"):
        s.with_formula("C10H12O3")
    assert s.with_formula("C10H12O3", check=False).formula == "C10H12O3"


def test_with_adduct_rejects_the_other_polarity(make_spectrum):
    with pytest.raises(SpectrumError, match=r"\[M-H\]- is negative"):
        make_spectrum(formula=None).with_adduct("[M-H]-")


def test_skipped_record_fields():
    r = SkippedRecord("a.mgf", 3, "X1", "no peaks")
    assert (r.source, r.index, r.spectrum_id, r.reason) == ("a.mgf", 3, "X1", "no peaks")


# ---------------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------------


def _peaks(s):
    return list(zip(s.mz.tolist(), s.intensity.tolist()))


@pytest.mark.parametrize(
    "mz, intensity, tolerance, expected",
    [
        ([100.0, 100.0005, 200.0], [1.0, 3.0, 5.0], 0.001, [(100.000375, 4.0), (200.0, 5.0)]),
        ([100.0, 100.0, 200.0], [1.0, 2.0, 5.0], 0.0, [(100.0, 3.0), (200.0, 5.0)]),
        ([100.0, 100.0005, 200.0], [1.0, 3.0, 5.0], 0.0, [(100.0, 1.0), (100.0005, 3.0), (200.0, 5.0)]),
        ([100.0, 100.0008, 100.0016], [1.0, 1.0, 2.0], 0.001, [(100.0010, 4.0)]),  # chains merge
        ([100.0, 100.0004], [0.0, 0.0], 0.001, [(100.0002, 0.0)]),
    ],
)
def test_sort_and_merge_peaks(make_spectrum, mz, intensity, tolerance, expected):
    s = make_spectrum(mz=mz, intensity=intensity, formula=None, precursor_mz=300.0)
    merged = sort_and_merge_peaks(s, tolerance_da=tolerance)
    # (m/z, intensity) rows; pytest.approx takes no nested tuples (pytest >= 9.2 raises TypeError)
    got = np.column_stack([merged.mz, merged.intensity])
    np.testing.assert_allclose(got, np.array(expected, dtype=np.float64).reshape(-1, 2), rtol=1e-9, atol=1e-12)


def test_merging_never_mutates_its_input(make_spectrum):
    s = make_spectrum(mz=[100.0, 100.0001, 179.0703, 200.0], intensity=[0.0, 2.0, 4.0, 1.0])
    before = (s.mz.copy(), s.intensity.copy())
    out = sort_and_merge_peaks(s)
    assert isinstance(out, Spectrum) and out.id == s.id and out.adduct == s.adduct and out.n_peaks == 3
    assert np.array_equal(s.mz, before[0]) and np.array_equal(s.intensity, before[1])


# ---------------------------------------------------------------------------------------------
# Formula / precursor consistency
# ---------------------------------------------------------------------------------------------


def test_consistent_formula_passes_unchanged(make_spectrum):
    s = make_spectrum()
    assert check_formula_matches_precursor(s) is s


def test_inconsistent_formula_message(make_spectrum):
    s = make_spectrum(precursor_mz=200.1)
    expected = (
        r"formula C10H10O3 gives \[M\+H\]\+ m/z 179.0703 but PEPMASS is 200.1 "
        r"\(Δ 21.03 Da, 117000 ppm; tolerance 0.01 Da\); fix FORMULA or ADDUCT"
    )
    with pytest.raises(SpectrumError, match=expected):
        check_formula_matches_precursor(s)


@pytest.mark.parametrize(
    "precursor_mz, tol_ppm, tol_da, ok",
    [
        (179.0703 + 0.009, 10, 0.01, True),  # 0.01 Da is larger than 10 ppm (0.0018 Da) here
        (179.0703 + 0.011, 10, 0.01, False),
        (179.0703 + 0.0015, 10, 0.0, True),
        (179.0703 + 0.0025, 10, 0.0, False),
        (179.5, 0, 0.5, True),
    ],
)
def test_tolerance_is_the_larger_of_ppm_and_da(make_spectrum, precursor_mz, tol_ppm, tol_da, ok):
    s = make_spectrum(precursor_mz=precursor_mz)
    if ok:
        check_formula_matches_precursor(s, tol_ppm=tol_ppm, tol_da=tol_da)
    else:
        with pytest.raises(SpectrumError, match="fix FORMULA or ADDUCT"):
            check_formula_matches_precursor(s, tol_ppm=tol_ppm, tol_da=tol_da)


def test_nothing_to_check_without_formula_or_adduct(make_spectrum):
    for s in (make_spectrum(formula=None, precursor_mz=500.0), make_spectrum(adduct=None, precursor_mz=500.0)):
        assert check_formula_matches_precursor(s) is s


def test_negative_mode_check(make_spectrum):
    s = make_spectrum(adduct="[M-H]-", precursor_mz=177.0557)
    assert check_formula_matches_precursor(s) is s


@pytest.mark.parametrize("text, decimals", [("163", 0), ("163.1", 1), (" 163.1077 1200 ", 4), ("1.6e2", None)])
def test_written_decimals(text, decimals):
    from engine.spectra.spectrum import written_decimals

    assert written_decimals(text) == decimals


def test_written_precision_widens_the_formula_check(make_spectrum):
    from engine.spectra.spectrum import precursor_precision_da

    nominal = make_spectrum(precursor_mz=179.0, metadata={"precursor_mz_decimals": "0"})
    assert precursor_precision_da(nominal) == 1.0
    assert check_formula_matches_precursor(nominal) is nominal
    assert check_formula_matches_precursor(nominal.with_formula("C10H10O3")) is not None  # kept by copies
    with pytest.raises(SpectrumError, match="tolerance 0.01 Da\\)"):
        check_formula_matches_precursor(make_spectrum(precursor_mz=179.0))  # no precision recorded: 10 ppm


# ---------------------------------------------------------------------------------------------
# Precursor-only spectra
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mz, expected",
    [
        ([179.0703], False),  # the precursor alone
        ([177.1, 178.0, 179.0703, 180.0736], False),  # within 2 Da: precursor, isotope, loss of H2
        ([177.0, 179.0703], True),  # 2.07 Da below: a fragment
        ([51.0, 179.0703], True),
    ],
)
def test_has_fragments(make_spectrum, mz, expected):
    from engine.spectra.spectrum import has_fragments

    assert has_fragments(make_spectrum(mz=mz, intensity=[1.0] * len(mz))) is expected


def test_note_no_fragments_is_pure_and_added_once(make_spectrum):
    from engine.spectra.spectrum import NO_FRAGMENTS_NOTE, note_no_fragments

    with_fragments = make_spectrum()
    assert note_no_fragments(with_fragments) is with_fragments
    bare = make_spectrum(mz=[179.0703], intensity=[10.0], metadata={"warnings": "1 peak dropped"})
    noted = note_no_fragments(bare)
    assert noted.metadata["warnings"] == f"1 peak dropped; {NO_FRAGMENTS_NOTE}"
    assert bare.metadata["warnings"] == "1 peak dropped"  # the input is unchanged
    assert note_no_fragments(noted) is noted
    assert NO_FRAGMENTS_NOTE == "no fragments: candidates reflect the formula only"
