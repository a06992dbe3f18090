"""Mass decomposition into formulas, and the chemical rules that filter them."""

import itertools

import numpy as np
import pytest

from engine.chem.formula import ELEMENTS, format_formula, formula_mass, formula_vector, parse_formula, vector_to_counts
from engine.errors import ConfigError
from engine.formulas.decompose import DecompositionConfig, chemical_rules_mask, decompose_mass, rdbe_of


def formulas(mass, tol=0.001, **config):
    vectors, _ = decompose_mass(mass, tol, DecompositionConfig(**config))
    return [format_formula(vector_to_counts(v)) for v in vectors]


@pytest.mark.parametrize("formula", ["C8H10N4O2", "C10H10O3", "C9H8ClNO", "C7H7BrO", "C12H26O4Si", "C6H15O4P", "C5H4IN"])
def test_true_formula_is_found(formula):
    assert formula in formulas(formula_mass(parse_formula(formula)))


def test_results_lie_within_tolerance_sorted_by_error():
    mass = formula_mass(parse_formula("C8H10N4O2"))
    vectors, masses = decompose_mass(mass, 0.002)
    assert len(vectors) > 1
    assert np.allclose(vectors @ np.array([formula_mass({e: 1}) for e in ELEMENTS]), masses)
    errors = np.abs(masses - mass)
    assert (errors <= 0.002).all() and (np.diff(errors) >= 0).all()


def test_same_as_brute_force_enumeration():
    """Every formula over C, H, N, O, S within the tolerance and the rules, none missed, none extra."""
    mass, tol = 182.0579, 0.01
    config = DecompositionConfig(elements=("C", "H", "N", "O", "S"))
    grid = np.array(list(itertools.product(range(1, 16), range(0, 40), range(0, 14), range(0, 12), range(0, 6))))
    vectors = np.zeros((len(grid), len(ELEMENTS)), dtype=np.int64)
    for j, e in enumerate(("C", "H", "N", "O", "S")):
        vectors[:, ELEMENTS.index(e)] = grid[:, j]
    masses = vectors @ np.array([formula_mass({e: 1}) for e in ELEMENTS])
    near = vectors[np.abs(masses - mass) <= tol]
    expected = {format_formula(vector_to_counts(v)) for v in near[chemical_rules_mask(near, config)]}
    assert set(formulas(mass, tol, elements=("C", "H", "N", "O", "S"))) == expected and len(expected) > 10


@pytest.mark.parametrize(
    "formula, ok, why",
    [
        ("C2H6O", True, "ethanol"),
        ("CH6", False, "RDBE -1"),
        ("CH3", False, "radical: RDBE 0.5"),
        ("CH2O4", False, "O/C 4 > 3"),
        ("C2H2N10", False, "N/C 5 > 4"),
        ("C20H30N3O3P3S3", False, "rule 5: N, O, P, S all > 1 and S >= 3"),
        ("C6H6", True, "benzene"),
        ("C6Cl6", True, "hexachlorobenzene (no H)"),
        ("H2O", False, "no carbon"),
    ],
)
def test_chemical_rules(formula, ok, why):
    assert chemical_rules_mask(formula_vector(parse_formula(formula))[None, :])[0] == ok, why


@pytest.mark.parametrize("formula", ["CH2O4", "C2H2N10"])  # O/C 4 > 3, N/C 5 > 4: only the golden rules fail them
def test_golden_rules_can_be_switched_off(formula):
    """On (the default) the rules reject the formula, in the mask and in the decomposition; off, both keep it,
    and the rules that are not golden ones (RDBE, radicals) still hold."""
    v = formula_vector(parse_formula(formula))[None, :]
    mass = formula_mass(parse_formula(formula))
    assert not chemical_rules_mask(v)[0] and not chemical_rules_mask(v, DecompositionConfig(golden_rules=True))[0]
    assert formula not in formulas(mass)
    assert chemical_rules_mask(v, DecompositionConfig(golden_rules=False))[0]
    assert formula in formulas(mass, golden_rules=False)
    for bad in ("CH6", "CH3"):
        assert not chemical_rules_mask(formula_vector(parse_formula(bad))[None, :],
                                       DecompositionConfig(golden_rules=False))[0], bad


def test_rdbe_with_lowest_valences():
    for formula, expected in [("C6H6", 4), ("C2H6OS", 0), ("H3PO4", 0), ("C6H5Cl", 4), ("C5H5N", 4), ("C2H6Si", 1)]:
        assert rdbe_of(formula_vector(parse_formula(formula))) == expected, formula


def test_elements_and_rare_element_limits():
    mass = formula_mass(parse_formula("C9H8ClNO"))
    assert not any("Cl" in f for f in formulas(mass, elements=("C", "H", "N", "O")))
    assert all(sum(e in vector_to_counts(formula_vector(parse_formula(f))) for e in ("P", "S", "F", "Cl", "Br", "I", "Si")) == 0
               for f in formulas(mass, max_rare_elements=0))
    assert "C9H8ClNO" not in formulas(mass, max_counts={"Cl": 0})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"elements": ("C", "H", "Na")}, "`elements` holds Na"),
        ({"elements": ("C", "N", "O")}, "`elements` must include C and H"),
        ({"max_counts": {"C": -1}}, "`max_counts` must map"),
        ({"max_rare_elements": -1}, "`max_rare_elements` must be"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DecompositionConfig(**kwargs)


@pytest.mark.parametrize("mass, tol", [(0.0, 0.001), (-5.0, 0.001), (200.0, 0.0), (float("nan"), 0.001)])
def test_bad_mass_or_tolerance(mass, tol):
    with pytest.raises(ConfigError):
        decompose_mass(mass, tol)


def test_small_mass_has_no_formula():
    assert formulas(5.0) == []
