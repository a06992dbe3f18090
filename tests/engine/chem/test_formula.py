"""Formulas: parsing, Hill order, masses, the 14-element vector."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.chem.formula import (
    ELEMENTS,
    element_mass,
    format_formula,
    formula_mass,
    formula_vector,
    normalize_formula,
    parse_formula,
    vector_to_counts,
)
from engine.errors import FormulaError


@pytest.mark.parametrize(
    "text, counts",
    [
        ("C10H10O3", {"C": 10, "H": 10, "O": 3}),
        ("H2O", {"H": 2, "O": 1}),
        ("CH3CH2OH", {"C": 2, "H": 6, "O": 1}),  # repeated elements add up
        (" C6H5Cl ", {"C": 6, "H": 5, "Cl": 1}),
        ("C14H20FN3OSi", {"C": 14, "H": 20, "F": 1, "N": 3, "O": 1, "Si": 1}),
        ("C2H6O0", {"C": 2, "H": 6}),  # zero counts dropped
    ],
)
def test_parse_formula(text, counts):
    assert parse_formula(text) == counts


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("C12H17N4OS+", r"'\+' is not allowed \(give the neutral formula"),
        ("C2H6O·H2O", "without brackets or hydrate dots"),
        ("c10h10o3", r"start with a capital letter .* Did you mean 'C10H10O3'\?"),
        ("C10H10o3", r"Did you mean 'C10H10O3'\?"),
        ("C6H5CL", r"Unsupported element 'L' .* Did you mean 'C6H5Cl'\?"),
        ("sih4", r"Did you mean 'SiH4' or 'SIH4'\?"),
        ("c10h10o3X", r"start with a capital letter[^?]*$"),  # no spelling of it works: no suggestion
        ("2H2O", "must start with an element symbol"),
        ("C10H10Na", r"Unsupported element 'Na'.*put Na in the adduct \(e.g. \[M\+Na\]\+\)"),
        ("C1234567H2", r"Count 1234567 of C in formula 'C1234567H2' is too large \(at most 999,999\)"),
        ("C" + "9" * 5000, "is too large"),  # int() of 5000 digits would raise a plain ValueError
        ("Co2", r"Did you mean 'CO' \(two elements\)"),
        ("C0", "has no atoms"),
    ],
)
def test_parse_formula_errors_name_the_problem(text, message):
    with pytest.raises(FormulaError, match=message):
        parse_formula(text)


def test_parse_formula_rejects_non_strings():
    with pytest.raises(FormulaError, match="must be a string"):
        parse_formula(None)


@pytest.mark.parametrize(
    "text, hill",
    [("OC2H6", "C2H6O"), ("H2O", "H2O"), ("ClH", "ClH"), ("BrCH3", "CH3Br"), ("NH3", "H3N"), ("CO2", "CO2")],
)
def test_normalize_formula_uses_hill_order(text, hill):
    assert normalize_formula(text) == hill


def test_formula_mass_of_mellein():
    assert formula_mass(parse_formula("C10H10O3")) == pytest.approx(178.062994, abs=1e-6)


def test_element_mass_of_unknown_symbol_is_a_formula_error(capfd):
    with pytest.raises(FormulaError, match="Unknown element symbol 'Xx'"):
        element_mass("Xx")
    assert "Violation" not in capfd.readouterr().err  # no RDKit C++ stack trace


def test_element_mass_accepts_any_real_element():
    assert element_mass("Na") == pytest.approx(22.98976928)


def test_formula_vector_round_trip():
    counts = {"C": 10, "H": 10, "O": 3, "As": 1}
    vec = formula_vector(counts)
    assert vec.shape == (len(ELEMENTS),) and vec.dtype == np.int64
    assert vector_to_counts(vec) == counts


def test_formula_vector_rejects_unsupported_element():
    with pytest.raises(FormulaError, match="Unsupported element 'Na'"):
        formula_vector({"C": 1, "Na": 1})


@given(st.dictionaries(st.sampled_from(ELEMENTS), st.integers(min_value=1, max_value=60), min_size=1))
def test_format_then_parse_round_trips(counts):
    assert parse_formula(format_formula(counts)) == counts
