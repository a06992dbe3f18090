"""Bond-cleavage fragments of a structure and the peaks they explain."""

import numpy as np
import pytest

from engine.chem import molecules as chem
from engine.chem.formula import ELECTRON_MASS, element_masses, format_formula, formula_vector, vector_to_counts
from engine.errors import ConfigError
from engine.spectra.fragments import FragmentSettings, explain_peaks, fragment_formulas


def formulas(smiles, max_breaks, **kw):
    found, complete = fragment_formulas(chem.mol_from_smiles(smiles), max_breaks, **kw)
    return {format_formula(vector_to_counts(v)) for v in found}, complete


def test_ethanol_pieces_by_number_of_cuts():
    assert formulas("CCO", 0) == ({"C2H6O"}, True)
    assert formulas("CCO", 1) == ({"C2H6O", "CH3", "CH3O", "C2H5", "HO"}, True)
    assert formulas("CCO", 2)[0] == {"C2H6O", "CH3", "CH3O", "C2H5", "HO", "CH2"}


def test_a_ring_opens_only_with_two_cuts():
    assert formulas("C1CCCCC1", 1) == ({"C6H12"}, True)
    assert formulas("C1CCCCC1", 2)[0] == {"CH2", "C2H4", "C3H6", "C4H8", "C5H10", "C6H12"}


def test_a_cap_on_the_enumeration_is_reported():
    assert formulas("CCCCCCCCCCCCCCCCCCCC", 3, max_states=5)[1] is False


def ion_mz(formula_vec):
    return float((formula_vec + formula_vector({"H": 1})) @ element_masses() - ELECTRON_MASS)


def test_peaks_made_from_a_structures_fragments_are_all_explained_and_an_isomer_explains_fewer():
    planted, isomer = "CC(=O)Nc1ccc(O)cc1", "COc1ccc(N)cc1C=O"  # paracetamol and an isomer, C8H9NO2
    found, _ = fragment_formulas(chem.mol_from_smiles(planted), 1)
    mz = np.array(sorted({round(ion_mz(v), 5) for v in found if v.sum()}))
    intensity = np.linspace(1, 2, mz.size)
    mine = explain_peaks(chem.mol_from_smiles(planted), mz, intensity, "[M+H]+")
    other = explain_peaks(chem.mol_from_smiles(isomer), mz, intensity, "[M+H]+")
    assert mine.n_explained == mine.n_peaks == mz.size and mine.explained_intensity == pytest.approx(1.0)
    assert other.n_explained < mine.n_explained and other.explained_intensity < 1.0
    assert all(f is not None and f.endswith("+") for f in mine.ion_formula)


def test_tolerance_and_ion_parts_follow_the_annotation_rules():
    mol = chem.mol_from_smiles("CCO")
    protonated = ion_mz(formula_vector({"C": 2, "H": 6, "O": 1}))
    near, far = protonated + 0.0015, protonated + 0.01  # inside the 2 mDa floor; outside any window
    e = explain_peaks(mol, [near, far], [1.0, 1.0], "[M+H]+")
    assert e.matched.tolist() == [True, False] and e.ion_formula[0] == "C2H7O+"
    na = float(formula_vector({"C": 2, "H": 6, "O": 1}) @ element_masses()) + 22.98976928 - ELECTRON_MASS
    assert explain_peaks(mol, [na], [1.0], "[M+Na]+").ion_formula == ("C2H6NaO+",)


def test_empty_spectrum_explains_nothing():
    e = explain_peaks(chem.mol_from_smiles("CCO"), [], [], "[M+H]+")
    assert e.n_peaks == 0 and e.explained_intensity == 0.0


@pytest.mark.parametrize("kw, match", [
    (dict(max_breaks=4), "`max_breaks` must be 0, 1, 2 or 3"),
    (dict(h_shift=-1), "`h_shift` must be an integer"),
    (dict(tol_ppm=0, tol_da=0), "not both zero"),
])
def test_settings_are_checked(kw, match):
    with pytest.raises(ConfigError, match=match):
        FragmentSettings(**kw)
