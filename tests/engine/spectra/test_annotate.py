"""Subformula enumeration and peak annotation (hand-computed masses, tolerance edges, ion types)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.chem.formula import ELEMENTS, element_masses, formula_vector, parse_formula
from engine.errors import AdductError, ConfigError, FormulaError, SpectrumError
from engine.spectra.annotate import (
    DEFAULT_TOL_DA,
    DEFAULT_TOL_PPM,
    ION_TYPES,
    annotate_peaks,
    annotate_spectrum,
    enumerate_subformulas,
    explained_intensity_fraction,
    get_ion_type,
    rdbe,
)
from engine.spectra.spectrum import Spectrum

# Mellein C10H10O3, MassBank AC000001: [M+H]+ and two fragments, plus a peak with no subformula.
MELLEIN_MZ = np.array([133.0648, 155.9743, 161.0597, 179.0703])
MELLEIN_INT = np.array([20.0, 5.0, 40.0, 100.0])
# Hand-computed: C9H8O 132.0575149 + proton 1.0072765 = 133.0647914.
C9H9O_PLUS = 133.0647914


def vec(formula: str) -> np.ndarray:
    return formula_vector(parse_formula(formula))


# ----------------------------------------------------------------------------- enumeration


def test_enumeration_count_is_product_of_counts_without_filter():
    vectors, masses = enumerate_subformulas("CH4O", min_rdbe=None)
    assert len(vectors) == (1 + 1) * (4 + 1) * (1 + 1)
    assert len({tuple(v) for v in vectors}) == len(vectors)
    assert (vectors >= 0).all() and (vectors <= vec("CH4O")).all()
    np.testing.assert_allclose(masses, vectors.astype(float) @ element_masses())


@pytest.mark.parametrize(
    ("min_rdbe", "removed"),
    [
        (-0.5, 2),  # H4 and H4O: rdbe -1
        (0.0, 4),  # also H3 and H3O: rdbe -0.5
    ],
)
def test_enumeration_rdbe_filter_removes_hydrogen_saturated_oddities(min_rdbe, removed):
    vectors, _ = enumerate_subformulas("CH4O", min_rdbe=min_rdbe)
    assert len(vectors) == 20 - removed
    assert (rdbe(vectors) >= min_rdbe).all()


def test_enumeration_is_cached_and_read_only():
    first = enumerate_subformulas("C10H10O3")
    assert enumerate_subformulas({"C": 10, "H": 10, "O": 3})[0] is first[0]
    with pytest.raises(ValueError):
        first[0][0, 0] = 5


def test_enumeration_of_a_large_formula_with_halogens():
    vectors, masses = enumerate_subformulas("C40H60ClN5O10S2")
    assert vectors.shape[1] == len(ELEMENTS) and len(vectors) == len(masses) > 100_000


def test_enumeration_refuses_formulas_too_large():
    with pytest.raises(FormulaError, match="too large"):
        enumerate_subformulas("C200H400N50O100")


def test_rdbe_of_known_molecules():
    assert rdbe(vec("C6H6")) == 4.0  # benzene
    assert rdbe(vec("C10H10O3")) == 6.0  # mellein
    assert rdbe(vec("CH3")) == 0.5  # methyl radical


# ----------------------------------------------------------------------------- annotation


def test_mellein_protonated_fragments():
    a = annotate_peaks(MELLEIN_MZ, MELLEIN_INT, "C10H10O3", "[M+H]+", precursor_mz=179.0697)
    assert a.ion_formula == ("C9H9O+", None, "C10H9O2+", "C10H11O3+")
    assert a.matched.tolist() == [True, False, True, True]
    np.testing.assert_array_equal(a.neutral[0], vec("C9H8O"))
    np.testing.assert_array_equal(a.neutral[1], 0)
    assert a.theoretical_mz[0] == pytest.approx(C9H9O_PLUS, abs=1e-6)
    assert a.error_ppm[0] == pytest.approx((133.0648 - C9H9O_PLUS) / C9H9O_PLUS * 1e6, abs=1e-3)
    assert math.isnan(a.error_ppm[1])
    assert not a.adduct_retained.any()
    # Root: C10H10O3 178.0629942 + proton.
    assert a.root_ion_formula == "C10H11O3+"
    assert a.root_mz == pytest.approx(179.0702707, abs=1e-6)
    np.testing.assert_array_equal(a.root_neutral, vec("C10H10O3"))
    assert a.root_error_ppm == pytest.approx((179.0697 - 179.0702707) / 179.0702707 * 1e6, abs=1e-3)
    assert explained_intensity_fraction(a) == pytest.approx(160 / 165)


@pytest.mark.parametrize(
    ("offset_ppm", "tol_ppm", "matched"),
    [
        (9.9, 10, True),
        (10.1, 10, False),
        (4.9, 5, True),
        (5.1, 5, False),
        (-9.9, 10, True),
        (-10.1, 10, False),
    ],
)
def test_ppm_tolerance_edge(offset_ppm, tol_ppm, matched):
    # The window is tol_ppm of the *observed* m/z: |obs - theo| <= tol_ppm * 1e-6 * obs.
    obs = C9H9O_PLUS / (1 - offset_ppm * 1e-6)
    a = annotate_peaks([obs], [1.0], "C10H10O3", "[M+H]+", tol_ppm=tol_ppm, tol_da=0.0)
    assert a.matched[0] == matched


@pytest.mark.parametrize(("offset_da", "matched"), [(0.0019, True), (0.0021, False), (-0.0019, True)])
def test_da_floor_edge(offset_da, matched):
    # 10 ppm of m/z 133 is 1.3 mDa, so the 2 mDa floor decides here.
    a = annotate_peaks([C9H9O_PLUS + offset_da], [1.0], "C10H10O3", "[M+H]+", tol_ppm=10, tol_da=0.002)
    assert a.matched[0] == matched


def test_defaults_are_ten_ppm_with_two_mda_floor():
    assert (DEFAULT_TOL_PPM, DEFAULT_TOL_DA) == (10.0, 0.002)


def test_closest_candidate_wins():
    # C9H9O+ 133.0648 is 14.8 mDa away, C8H5O2+ 133.0284 is 21.6 mDa away: both within 0.1 Da.
    a = annotate_peaks([133.05], [1.0], "C10H10O3", "[M+H]+", tol_da=0.1)
    assert a.ion_formula == ("C9H9O+",)


def test_sodium_adduct_fragments_keep_sodium_or_are_protonated():
    # C10H10O3 + Na+ = 201.0522149; C10H8O2 + Na+ = 183.0416502; C9H8O + H+ = 133.0647914.
    a = annotate_peaks([133.0648, 183.0416, 201.0522], [1.0, 1.0, 1.0], "C10H10O3", "[M+Na]+")
    assert a.ion_formula == ("C9H9O+", "C10H8NaO2+", "C10H10NaO3+")
    assert a.adduct_retained.tolist() == [False, True, True]
    np.testing.assert_array_equal(a.neutral[1], vec("C10H8O2"))  # the neutral part, without Na
    assert a.root_ion_formula == "C10H10NaO3+"
    assert a.root_mz == pytest.approx(201.0522149, abs=1e-6)


def test_deprotonated():
    # C10H10O3 - H+ = 177.0557177; C9H10O - H+ = 133.0658913.
    a = annotate_peaks([133.0659, 177.0557], [1.0, 1.0], "C10H10O3", "[M-H]-")
    assert a.ion_formula == ("C9H9O-", "C10H9O3-")
    np.testing.assert_array_equal(a.neutral[0], vec("C9H10O"))
    assert a.root_mz == pytest.approx(177.0557177, abs=1e-6)


def test_ammonium_adduct_prefers_the_protonated_route_for_the_same_ion():
    # C2H6N+ is C2H5N + H (from the molecule) or C2H2 + NH4: the protonated route wins.
    # C6H17N2O2+ (the precursor, 149.1284542) needs the adduct's nitrogen.
    a = annotate_peaks([44.0495, 132.1019, 149.1285], [1.0, 1.0, 1.0], "C6H13NO2", "[M+NH4]+")
    assert a.ion_formula == ("C2H6N+", "C6H14NO2+", "C6H17N2O2+")
    assert a.adduct_retained.tolist() == [False, False, True]
    np.testing.assert_array_equal(a.neutral[0], vec("C2H5N"))
    assert a.root_ion_formula == "C6H17N2O2+"


def test_water_loss_precursor_enumerates_from_the_dehydrated_core():
    a = annotate_peaks([161.0597], [1.0], "C10H10O3", "[M+H-H2O]+")
    assert a.ion_type == "[M-H2O+H]+"
    assert a.root_ion_formula == "C10H9O2+"
    np.testing.assert_array_equal(a.root_neutral, vec("C10H8O2"))


def test_adduct_spellings_are_normalised():
    assert get_ion_type("M+H").name == "[M+H]+"
    assert get_ion_type("[M+FA-H]-").name == "[M+HCOO]-"
    assert set(ION_TYPES) >= {"[M+H]+", "[M+Na]+", "[M-H]-"}


def test_unsupported_adduct_names_the_supported_ones():
    with pytest.raises(AdductError, match=r"\[2M\+H\]\+ is not supported.*\[M\+H\]\+"):
        annotate_peaks([100.0], [1.0], "C10H10O3", "[2M+H]+")


def test_formula_too_small_for_the_ion_type():
    with pytest.raises(FormulaError, match="must contain H2O"):
        annotate_peaks([100.0], [1.0], "C6H6", "[M-H2O+H]+")


def test_a_formula_that_cannot_form_the_ion_is_a_clear_error_not_a_crash():
    # [M-H]- needs a hydrogen to lose: octafluorocyclobutane has none, so no ion of it can form
    with pytest.raises(FormulaError, match="C4F8 cannot form a \\[M-H\\]- ion"):
        annotate_peaks(np.array([130.99, 180.99]), np.array([1.0, 1.0]), "C4F8", "[M-H]-")
    ann = annotate_peaks(np.array([130.99]), np.array([1.0]), "C4F8", "[M+H]+")  # a proton it can take
    assert len(ann.mz) == 1


@pytest.mark.parametrize(
    ("mz", "intensity", "message"),
    [
        ([100.0, 200.0], [1.0], "same length"),
        ([float("nan")], [1.0], "NaN"),
        ([100.0], [-1.0], "intensity >= 0"),
    ],
)
def test_bad_peaks(mz, intensity, message):
    with pytest.raises(SpectrumError, match=message):
        annotate_peaks(mz, intensity, "C10H10O3", "[M+H]+")


def test_bad_tolerance():
    with pytest.raises(ConfigError, match="`tol_ppm` and `tol_da`"):
        annotate_peaks([100.0], [1.0], "C10H10O3", "[M+H]+", tol_ppm=0, tol_da=0)


def test_empty_spectrum():
    a = annotate_peaks([], [], "C10H10O3", "[M+H]+")
    assert a.n_matched == 0 and a.neutral.shape == (0, len(ELEMENTS))
    assert explained_intensity_fraction(a) == 0.0


def test_annotate_spectrum_uses_formula_adduct_and_precursor():
    peaks = dict(mz=MELLEIN_MZ, intensity=MELLEIN_INT)
    s = Spectrum(id="AC000001", precursor_mz=179.0697, adduct="M+H", formula="C10H10O3", **peaks)
    a = annotate_spectrum(s)
    assert a.ion_formula[-1] == "C10H11O3+" and a.root_error_ppm == pytest.approx(-3.19, abs=0.01)
    with pytest.raises(SpectrumError, match="has no formula"):
        annotate_spectrum(Spectrum(id="x", precursor_mz=179.07, adduct="[M+H]+", **peaks))
