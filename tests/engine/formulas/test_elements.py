"""Element evidence: isotope patterns and scores of many formulas at once, diagnostic fragments, the table notes."""

import numpy as np
import pytest

from engine.chem.adducts import parse_adduct, precursor_mz_from_neutral
from engine.chem.formula import (
    ELECTRON_MASS,
    formula_mass,
    formula_vector,
    parse_formula,
)
from engine.formulas.candidates import FormulaConfig, rank_formulas
from engine.formulas.elements import (
    ElementEvidence,
    combine,
    fragment_elements,
    isotope_elements,
)
from engine.formulas.prior import FormulaPrior
from engine.formulas.scorer import FormulaScorer
from engine.spectra.features import MS1Evidence
from engine.spectra.isotopes import (
    isotope_pattern,
    isotope_patterns_many,
    isotope_scores_many,
    match_isotopes,
    observed_isotopes,
)
from engine.spectra.spectrum import Spectrum


@pytest.mark.parametrize("formula,ion_type", [
    ("C14H8Cl3F3N2O", "[M+H]+"), ("C15H17ClN4", "[M+Na]+"), ("C13H22NO3PS", "[M+NH4]+"),
    ("C20H30Br2O", "[M-H]-"), ("C10H12O2S3", "[M+K]+"), ("C8H9IO", "[M+Cl]-"), ("C6H6", "[2M+H]+"),
])
def test_patterns_of_many_formulas_are_those_of_one(formula, ion_type):
    ion = parse_adduct(ion_type)
    _, one = isotope_pattern(ion.ion_counts(parse_formula(formula)), 6, ion.charge)
    many = isotope_patterns_many(np.stack([formula_vector(parse_formula(formula))] * 3), ion_type, 6)
    assert many.shape == (3, 6)
    np.testing.assert_allclose(many, np.tile(one, (3, 1)), rtol=1e-9, atol=1e-12)


def scan(formula: str, ion_type: str = "[M+H]+", factor: float = 1.0, floor: float = 1e3) -> MS1Evidence:
    ion = parse_adduct(ion_type)
    mz, ab = isotope_pattern(ion.ion_counts(parse_formula(formula)), 6, ion.charge)
    ab = ab * np.r_[1.0, np.full(5, factor)] * 1e6
    keep = ab >= floor
    mz, ab = np.r_[mz[keep], mz[0] - 5.0], np.r_[ab[keep], floor]  # an unrelated weak peak: the detection limit
    order = np.argsort(mz)
    return MS1Evidence(scan_id="ms1", retention_time=1.0, precursor_mz=float(mz[0]),
                       precursor_intensity=1e6, mz=mz[order], intensity=ab[order])


@pytest.mark.parametrize("ratio_sd", [0.0, 0.25])
def test_scores_of_many_formulas_are_match_isotopes_scores(ratio_sd):
    ms1 = scan("C14H8Cl3F3N2O", factor=0.6)
    precursor = precursor_mz_from_neutral(formula_mass(parse_formula("C14H8Cl3F3N2O")), "[M+H]+")
    formulas = ["C14H8Cl3F3N2O", "C13H12Cl2O7S", "C11H15BrN2O4S2", "C20H19N2O4"]
    vectors = np.stack([formula_vector(parse_formula(f)) for f in formulas])
    observed = observed_isotopes(ms1, precursor, 1, 6, 10.0, 0.005)
    many = isotope_scores_many(isotope_patterns_many(vectors, "[M+H]+", 6), observed, ratio_sd, chunk=3)
    ion = parse_adduct("[M+H]+")
    one = [match_isotopes(ion.ion_counts(parse_formula(f)), 1, ms1.mz, ms1.intensity, precursor, n_peaks=6,
                          ratio_sd=ratio_sd, abs_error=0.0).score for f in formulas]
    np.testing.assert_allclose(many, one, rtol=1e-9, atol=1e-9)
    if ratio_sd:  # M+1 .. M+5 read at 60%: with a detector factor the Cl3 pattern still fits its formula best
        assert np.argmax(many) == 0
    assert observed_isotopes(ms1, precursor + 0.5, 1, 6, 10.0, 0.005) is None  # no precursor peak there


def _evidence_of(formula: str, others: list[str], factor: float = 1.0) -> ElementEvidence:
    ms1 = scan(formula, factor=factor)
    precursor = precursor_mz_from_neutral(formula_mass(parse_formula(formula)), "[M+H]+")
    vectors = np.stack([formula_vector(parse_formula(f)) for f in [formula, *others]])
    observed = observed_isotopes(ms1, precursor, 1, 6, 10.0, 0.005)
    scores = isotope_scores_many(isotope_patterns_many(vectors, "[M+H]+", 6), observed, 0.25)
    return isotope_elements(vectors, scores, observed)


def test_isotopes_show_chlorine_present_or_absent_and_say_nothing_when_unsure():
    present = _evidence_of("C15H17ClN4", ["C16H21N2O2P", "C14H21N3O3"], factor=0.55)  # a weak M+1, as on a QTOF
    assert present.present == (("Cl", "Br"),) and present.absent == ()
    assert present.notes[0].startswith("isotopes: Cl or Br present (M+2 at ") and present.notes[0].endswith("% of M)")
    absent = _evidence_of("C20H19NO4", ["C18H18ClNO3"])
    assert absent.absent == ("Cl", "Br") and "no Cl or Br" in absent.notes[0]
    assert _evidence_of("C20H19NO4", ["C21H23NO3"]) == ElementEvidence()  # no halogen formula to compare with


def fragment_spectrum(precursor: float, peaks: dict[float, float]) -> tuple[np.ndarray, np.ndarray]:
    mz = np.array([*peaks, precursor])
    return mz, np.array([*peaks.values(), 100.0])


def test_diagnostic_losses_and_ions_show_elements():
    precursor = 350.0
    mz, intensity = fragment_spectrum(precursor, {precursor - 35.976678: 40.0, precursor - 20.006228: 2.0})
    shown = fragment_elements(mz, intensity, precursor, "positive", 10.0, 0.002)
    assert shown.present == (("Cl",),)  # the HF loss is below 5% of the base peak
    assert shown.notes == (f"fragments: Cl (HCl loss at m/z {precursor - 35.976678:.4f})",)
    # negative mode: a bromide ion (an anion carries an electron); a positive spectrum never reads it
    bromide = 78.918337 + ELECTRON_MASS
    mz, intensity = fragment_spectrum(precursor, {bromide: 80.0, 96.969618 + ELECTRON_MASS: 30.0})
    assert fragment_elements(mz, intensity, precursor, "negative", 10.0, 0.002).present == (("Br",), ("P",))
    chloride = fragment_spectrum(precursor, {34.968853 + ELECTRON_MASS: 50.0})  # below m/z 40: an ion still counts
    assert fragment_elements(*chloride, precursor, "negative", 10.0, 0.002).present == (("Cl",),)
    tiny = fragment_spectrum(50.0, {50.0 - 20.006228: 50.0})  # an HF loss leaving m/z 30: not looked for
    assert fragment_elements(*tiny, 50.0, "positive", 10.0, 0.002) == ElementEvidence()
    assert fragment_elements(mz, intensity, precursor, "positive", 10.0, 0.002).present == ()
    off = fragment_elements(mz + 0.01, intensity, precursor, "negative", 10.0, 0.002)  # 10 mDa off: nothing
    assert off == ElementEvidence()


def test_combine_joins_evidence():
    shown = ElementEvidence(present=(("Cl",),), notes=("a",))
    both = combine(shown, ElementEvidence(present=(("Cl",), ("S",)), absent=("Br",), notes=("b",)))
    assert both.present == (("Cl",), ("S",)) and both.absent == ("Br",) and both.notes == ("a", "b")
    vectors = np.stack([formula_vector(parse_formula(f)) for f in ["C8H9ClO", "C8H10O2S", "C9H10O2"]])
    assert both.holds(vectors, ("Cl", "S")).tolist() == [True, True, False]


def test_the_formula_table_notes_what_isotopes_and_fragments_show_and_ranks_as_without():
    truth = "C15H17ClN4"
    prior = FormulaPrior.fit({"C16H21N2O2P": 1, "C14H21N3O3": 40, "C17H19NO3": 30, truth: 2})
    weights = {"mass_error": -1.0, "prior_isomers": 1.0, "prior_pattern": 2.0}
    scorer = FormulaScorer(prior=prior, stage1=weights, stage2=weights, ion_type_log_prior={"[M+H]+": 0.0})
    precursor = precursor_mz_from_neutral(formula_mass(parse_formula(truth)), "[M+H]+")
    hcl_loss = precursor - 35.976678
    s = Spectrum(id="x", precursor_mz=precursor, mz=[hcl_loss, precursor], intensity=[30.0, 100.0], adduct="[M+H]+")
    ms1 = scan(truth, factor=0.6)
    table = rank_formulas(s, ms1=ms1, scorer=scorer)
    quiet = rank_formulas(s, ms1=ms1, scorer=scorer, config=FormulaConfig(element_evidence=False))
    assert table.elements.present == (("Cl", "Br"), ("Cl",))
    assert table.notes[-2].startswith("isotopes: Cl or Br present (M+2 at ") and table.notes[-2].endswith("% of M)")
    assert table.notes[-1] == f"fragments: Cl (HCl loss at m/z {hcl_loss:.4f})"
    assert quiet.elements == ElementEvidence() and not any(n.startswith(("isotopes:", "fragments:")) for n in quiet.notes)
    assert [(c.formula, c.score) for c in table.candidates] == [(c.formula, c.score) for c in quiet.candidates]
    assert table.candidates[0].formula == truth
    no_scan = rank_formulas(s, scorer=scorer)  # fragments alone
    assert no_scan.elements.present == (("Cl",),)
