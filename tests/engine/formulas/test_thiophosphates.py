"""Thiophosphates and other P/S-rich pesticides are in the formula space (issue #56, item 4): two P with three or
four S (ethion, temephos: Kind & Fiehn's HNOPS rule allowed S < 3), P and S with two halogens (profenofos,
bromophos, iodofenphos: four elements beyond CHNO), and guthion's formula is among the candidates of its [M+H]+
m/z. The shipped formula scorer ranks; nothing here depends on a model trained in the test."""

import numpy as np
import pytest

from engine.chem.formula import formula_mass, formula_vector, parse_formula
from engine.errors import ConfigError
from engine.formulas.candidates import FormulaConfig, rank_formulas, shortlist
from engine.formulas.decompose import (
    DecompositionConfig,
    chemical_rules_mask,
    decompose_mass,
)
from engine.spectra.spectrum import Spectrum

PESTICIDES = {
    "ethion": "C9H22O4P2S4",
    "temephos": "C16H20O6P2S3",
    "profenofos": "C11H15BrClO3PS",
    "bromophos": "C8H8BrCl2O3PS",
    "iodofenphos": "C8H8Cl2IO3PS",
    "guthion": "C10H12N3O3PS2",
    "fenamiphos": "C13H22NO3PS",
    "chlorpyrifos": "C9H11Cl3NO3PS",
}
GUTHION = PESTICIDES["guthion"]


@pytest.mark.parametrize("name", sorted(PESTICIDES))
def test_pesticide_formulas_pass_the_rules_and_are_decomposed(name):
    formula = PESTICIDES[name]
    vector = formula_vector(parse_formula(formula))
    assert chemical_rules_mask(vector[None, :])[0]
    vectors, _ = decompose_mass(formula_mass(parse_formula(formula)), 0.002)
    assert (vectors == vector).all(axis=1).any()


def test_a_fourth_element_needs_p_and_s():
    ok = chemical_rules_mask(np.array([formula_vector(parse_formula(f)) for f in
                                       ("C11H15BrClO3PS", "C11H15BrClFO3S", "C8H8Cl2IO3PS", "C11H15BrClFO3P")]))
    assert ok.tolist() == [True, False, True, False]  # P, S + Cl, Br or Cl, I yes; S, F, Cl, Br and P, F, Cl, Br no
    strict = DecompositionConfig(max_rare_with_p_and_s=3)
    assert not chemical_rules_mask(formula_vector(parse_formula("C11H15BrClO3PS"))[None, :], strict)[0]
    with pytest.raises(ConfigError, match="max_rare_with_p_and_s"):
        DecompositionConfig(max_rare_elements=3, max_rare_with_p_and_s=2)


def test_the_shortlist_keeps_the_best_of_each_element_pattern():
    formulas = ["C10H10O3", "C9H8ClNO", GUTHION, "C8H10N4O2", "C7H6Cl2O", "C13H22NO3PS", "C6H6O"]
    vectors = np.array([formula_vector(parse_formula(f)) for f in formulas])
    stage1 = np.array([5.0, 4.0, -9.0, 3.0, 2.0, -10.0, 1.0])
    assert shortlist(stage1, vectors, 3).tolist() == [0, 1, 3]
    assert shortlist(stage1, vectors, 3, per_pattern=1).tolist() == [0, 1, 3, 2]  # guthion: the best P, S formula
    assert shortlist(stage1, vectors, 0, per_pattern=2).tolist() == [0, 1, 3, 4, 2, 5]
    with pytest.raises(ConfigError, match="per_pattern"):
        FormulaConfig(per_pattern=-1)


@pytest.mark.parametrize(("ion", "mz", "ppm"), [("[M+H]+", 318.0129, 0.0), ("[M+H]+", 318.0129, -6.0),
                                               ("[M+Na]+", 339.9951, 6.0)])
def test_guthion_is_a_candidate_of_its_precursor(ion, mz, ppm):
    # a TripleTOF run read its precursors 4-9 ppm off (issue #38); 60 formulas per ion type lost guthion there
    precursor = mz * (1 + ppm * 1e-6)
    query = Spectrum(id="guthion", mz=np.zeros(0), intensity=np.zeros(0), precursor_mz=precursor, polarity="positive")
    table = rank_formulas(query, config=FormulaConfig(ion_types=("[M+H]+", "[M+Na]+", "[M+NH4]+")))
    assert any(c.formula == GUTHION and c.ion_type == ion for c in table.candidates)
