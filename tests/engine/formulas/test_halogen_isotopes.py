"""Isotope evidence to M+4 (issue #56, item 3): a Cl3 survey pattern is read to M+4 and M+5 as a TripleTOF scan
shows it (the 37Cl2 peak 19 mDa below four 13C, read 2 mDa light), so the Cl3 formula beats the bromine formula
that won the fluopicolide feature, and the isotope plot's data carry the observed M+4.

The shipped formula scorer ranks; nothing here depends on a model trained in the test.
"""

import numpy as np
import pytest

from engine.chem.adducts import parse_adduct
from engine.chem.formula import parse_formula
from engine.formulas.candidates import FormulaConfig, isotope_comparison, rank_formulas
from engine.spectra.features import MS1Evidence
from engine.spectra.isotopes import (
    ISOTOPE_WINDOW_DA,
    NEUTRON_SHIFT,
    isotope_envelope,
    isotope_pattern,
    isotope_window,
)
from engine.spectra.spectrum import Spectrum

FLUOPICOLIDE = "C14H8Cl3F3N2O"
BROMINE_FORMULA = "C13H10BrF3O5"  # what the TripleTOF run ranked first (2.5 ppm from fluopicolide)


def cl3_survey(error_da: float = -0.002) -> MS1Evidence:
    """Fluopicolide's [M+H]+ survey peaks M .. M+5 (centroids of the unresolved fine structure), M+2 and above
    read ``error_da`` off (5 ppm at m/z 387 for -2 mDa), with unrelated ions around; the weakest peak is 1% of M."""
    ion = parse_adduct("[M+H]+").ion_counts(parse_formula(FLUOPICOLIDE))
    mz, abundance = isotope_pattern(ion, 6, charge=1)
    mz = mz + np.r_[0.0, 0.0, np.full(4, error_da)]
    others = np.array([361.1, 377.0, 395.2]), np.array([2e5, 1e4, 5e4])
    all_mz, all_int = np.r_[mz, others[0]], np.r_[abundance * 1e6, others[1]]
    order = np.argsort(all_mz)
    return MS1Evidence(scan_id="s1", retention_time=None, precursor_mz=float(mz[0]), precursor_intensity=1e6,
                       mz=all_mz[order], intensity=all_int[order])


def test_the_m4_window_reaches_two_37cl_and_two_81br():
    low, high = isotope_window(4, 1)
    assert low < 2 * 1.99705 - 0.007 and high > 4 * NEUTRON_SHIFT + 0.004  # 37Cl2 read 7 mDa light, 13C4 4 heavy
    assert low < 2 * 1.99580 - 0.004  # two 34S
    assert high - low < 0.04  # narrower than the old 40 mDa: fewer unrelated ions fall in
    assert low > 3 * NEUTRON_SHIFT + 0.5 and high < 5 * 0.997 - 0.5  # and nothing of M+3 or M+5
    margin = ISOTOPE_WINDOW_DA
    assert isotope_window(2, 2) == pytest.approx(tuple(x / 2 + d for x, d in zip(isotope_window(2, 1, 0.0),
                                                                                   (-margin, margin))))
    assert isotope_window(0) == (0.0, 0.0)


def test_a_cl3_survey_scan_read_light_shows_its_m4_and_m5():
    ms1 = cl3_survey()
    _, expected = isotope_pattern(parse_adduct("[M+H]+").ion_counts(parse_formula(FLUOPICOLIDE)), 6, charge=1)
    _, envelope = isotope_envelope(ms1.mz, ms1.intensity, ms1.precursor_mz, 6)
    assert envelope / envelope[0] == pytest.approx(expected, rel=1e-6)  # M+4 ~ 32 %, M+5 ~ 5 %
    assert expected[4] > 0.3


def test_the_cl3_formula_beats_the_bromine_formula():
    ms1 = cl3_survey()
    config = FormulaConfig()
    cl3 = isotope_comparison((FLUOPICOLIDE, "[M+H]+"), ms1, ms1.precursor_mz, config)
    br = isotope_comparison((BROMINE_FORMULA, "[M+H]+"), ms1, ms1.precursor_mz, config)
    assert cl3.observed[4] == pytest.approx(cl3.theoretical[4], rel=1e-3)  # the plot's observed M+4 bar
    assert cl3.score > -1.0 and br.score < cl3.score - 10
    query = Spectrum(id="fluopicolide", mz=np.array([91.0]), intensity=np.array([1.0]),
                     precursor_mz=ms1.precursor_mz, polarity="positive")
    table = rank_formulas(query, ms1=ms1, config=config)
    ranks = {c.formula: c.rank for c in table.candidates if c.ion_type == "[M+H]+"}
    assert FLUOPICOLIDE in ranks
    assert ranks[FLUOPICOLIDE] < ranks.get(BROMINE_FORMULA, len(table.candidates) + 1)
    assert ranks[FLUOPICOLIDE] <= 5  # without fragments: among the few Cl3 formulas of this mass


def test_the_table_notes_the_m4_it_read():
    ms1 = cl3_survey()
    query = Spectrum(id="fluopicolide", mz=np.array([91.0]), intensity=np.array([1.0]),
                     precursor_mz=ms1.precursor_mz, polarity="positive")
    table = rank_formulas(query, ms1=ms1)
    assert "isotopes: Cl or Br present (M+2 at 97%, M+4 at 32% of M)" in table.notes
