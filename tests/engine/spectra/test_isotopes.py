"""Isotope patterns: theoretical (against brute-force isotopologues) and matched to survey peaks."""

from collections import defaultdict

import numpy as np
import pytest

from engine.chem.formula import ELECTRON_MASS
from engine.errors import ConfigError
from engine.spectra.isotopes import isotope_pattern, isotope_score, match_isotopes, observed_pattern


def brute_force(formula: str, n: int = 4):
    """Aggregated peaks from pyteomics' isotopologue enumeration."""
    from pyteomics import mass

    abundance, weighted = defaultdict(float), defaultdict(float)
    for comp, ab in mass.isotopologues(formula, report_abundance=True, overall_threshold=1e-9,
                                          isotope_threshold=1e-6):
        m = mass.calculate_mass(composition=comp)
        abundance[round(m)] += ab
        weighted[round(m)] += ab * m
    keys = sorted(abundance)[:n]
    return np.array([weighted[k] / abundance[k] for k in keys]), np.array([abundance[k] for k in keys]) / abundance[keys[0]]


@pytest.mark.parametrize("formula", ["C10H10O3", "C6H5Cl", "C7H7BrO", "C4H6N2O2S", "C3H10OSi"])
def test_pattern_agrees_with_isotopologue_enumeration(formula):
    masses, abundances = isotope_pattern(formula, 4)
    ref_masses, ref_abundances = brute_force(formula)
    assert abundances == pytest.approx(ref_abundances, abs=2e-4)
    assert masses == pytest.approx(ref_masses, abs=2e-4)


def test_halogen_signatures():
    _, cl = isotope_pattern("C6H5Cl", 3)
    _, br = isotope_pattern("C6H5Br", 3)
    _, br2 = isotope_pattern("CH2Br2", 3)
    assert cl[2] == pytest.approx(0.32, abs=0.01) and br[2] == pytest.approx(0.97, abs=0.01)
    assert br2[2] == pytest.approx(1.95, abs=0.02)  # 1 : 2 : 1


def test_ion_pattern_in_mz():
    neutral, _ = isotope_pattern("C10H11O3", 2)  # the [M+H]+ ion's atoms
    ion, _ = isotope_pattern("C10H11O3", 2, charge=1)
    assert ion[0] == pytest.approx(neutral[0] - ELECTRON_MASS) and ion[0] == pytest.approx(179.0703, abs=1e-4)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="`n_peaks` must be"):
        isotope_pattern("C6H6", 0)


def test_observed_pattern_takes_the_most_intense_peak_in_tolerance():
    mz = np.array([100.0, 101.0030, 101.0034, 102.5])
    intensity = np.array([10.0, 1.0, 3.0, 5.0])
    obs_mz, obs_int = observed_pattern(mz, intensity, np.array([100.0, 101.0034, 102.0]))
    assert obs_mz[:2].tolist() == [100.0, 101.0034] and np.isnan(obs_mz[2])
    assert obs_int.tolist() == [10.0, 3.0, 0.0]


def survey_of(formula: str, scale: float = 1e6, noise_floor: float = 1e3, n: int = 4):
    masses, abundances = isotope_pattern(formula, n, charge=1)
    keep = abundances * scale >= noise_floor
    return masses[keep], abundances[keep] * scale


def test_matching_pattern_scores_near_zero_and_chlorine_mismatch_is_penalised():
    mz, intensity = survey_of("C9H9ClNO")  # a chlorinated [M+H]+ ion
    precursor = mz[0]
    right = match_isotopes({"C": 9, "H": 9, "Cl": 1, "N": 1, "O": 1}, 1, mz, intensity, precursor)
    assert right.score == pytest.approx(0.0, abs=1e-6) and right.observed[2] == pytest.approx(0.33, abs=0.02)
    # the same nominal ion without chlorine (another formula) expects no 32 % M+2 peak
    wrong = match_isotopes({"C": 12, "H": 10, "N": 1, "O": 2}, 1, mz, intensity, precursor)
    assert wrong.score < -50


def test_peaks_below_the_detection_limit_are_not_penalised():
    mz, intensity = survey_of("C10H11O3", scale=2e4, noise_floor=1e3)  # M+2 (1.2 %) and M+3 under the floor
    assert len(mz) == 2
    floor_peak = (np.array([50.0]), np.array([1e3]))  # the scan's weakest peak sets the detection limit
    all_mz, all_int = np.concatenate([floor_peak[0], mz]), np.concatenate([floor_peak[1], intensity])
    match = match_isotopes({"C": 10, "H": 11, "O": 3}, 1, all_mz, all_int, mz[0])
    assert match.detectable.tolist() == [True, True, False, False]
    assert match.score == pytest.approx(0.0, abs=1e-6)


def test_no_monoisotopic_peak_gives_none():
    assert match_isotopes({"C": 6, "H": 7}, 1, np.array([50.0]), np.array([1.0]), 79.0542) is None


def test_score_formula():
    assert isotope_score([1, 0.1], [1, 0.1], [True, True]) == 0.0
    assert isotope_score([1, 0.0], [1, 0.2], [True, True]) == pytest.approx(-0.5 * (0.2 / 0.04) ** 2)
    assert isotope_score([1, 0.0], [1, 0.2], [True, False]) == 0.0  # missing and undetectable


def test_envelope_sums_resolved_fine_structure():
    from engine.spectra.isotopes import isotope_envelope

    mono = 200.0
    mz = np.array([mono, mono + 1.00335, mono + 1.99705, mono + 2.00671, mono + 2.5])  # 37Cl and 13C2 apart
    intensity = np.array([100.0, 10.0, 30.0, 2.0, 50.0])
    env_mz, env_int = isotope_envelope(mz, intensity, mono, n_peaks=4)
    assert env_int.tolist() == [100.0, 10.0, 32.0, 0.0]  # 202.5 is no isotope peak
    assert env_mz[2] == pytest.approx((mono + 1.99705) * 30 / 32 + (mono + 2.00671) * 2 / 32) and np.isnan(env_mz[3])


def test_a_detector_factor_on_all_ratios_keeps_the_shape_deciding():
    # issue #38: M+1 read at ~60% of theory pushed low-carbon, fluorine-rich formulas first
    _, true = isotope_pattern("C15H18ClN4", 5, charge=1)
    _, low_carbon = isotope_pattern("C9H20ClF2N4O2", 5, charge=1)
    observed = np.r_[1.0, true[1:] * 0.6]
    detectable = [True] * 5
    as_measured = isotope_score(observed, low_carbon, detectable) - isotope_score(observed, true, detectable)
    with_factor = (isotope_score(observed, low_carbon, detectable, ratio_sd=0.25)
                   - isotope_score(observed, true, detectable, ratio_sd=0.25))
    assert as_measured > 2 and abs(with_factor) < 0.5  # the isotopes no longer decide it: mass and fragments do
    # the factor costs: a pattern as measured scores 0, one off by 0.6 less
    assert isotope_score(true, true, detectable, ratio_sd=0.25) == pytest.approx(0.0, abs=1e-9)
    assert -2.5 < isotope_score(observed, true, detectable, ratio_sd=0.25) < -0.5
    assert isotope_score(observed, true, detectable) < -4


def test_m4_tells_three_chlorines_from_bromine_and_two_sulfurs():
    _, cl3 = isotope_pattern("C14H9Cl3F3N2O", 5, charge=1)
    _, br_s2 = isotope_pattern("C11H16BrN2O4S2", 5, charge=1)
    assert cl3[4] > 0.25 and br_s2[4] < 0.15
    detectable = [True] * 5
    assert isotope_score(cl3, br_s2, detectable, ratio_sd=0.25) < isotope_score(cl3, cl3, detectable, ratio_sd=0.25) - 5
