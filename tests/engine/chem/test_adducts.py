"""Adduct parsing, normalisation and neutral <-> precursor m/z."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.chem.adducts import (
    Adduct,
    neutral_mass_from_precursor,
    parse_adduct,
    parse_adduct_or_none,
    precursor_mz_from_neutral,
)
from engine.chem.formula import formula_mass, parse_formula
from engine.errors import AdductError

MELLEIN = formula_mass(parse_formula("C10H10O3"))  # 178.062994


@pytest.mark.parametrize(
    "text, name, charge, k",
    [
        ("[M+H]+", "[M+H]+", 1, 1),
        ("M+H", "[M+H]+", 1, 1),
        ("[M + H]+", "[M+H]+", 1, 1),
        ("[M+H]1+", "[M+H]+", 1, 1),
        ("[M+H]+1", "[M+H]+", 1, 1),
        ("[M+H]", "[M+H]+", 1, 1),
        ("M+Na", "[M+Na]+", 1, 1),
        ("[M+K]+", "[M+K]+", 1, 1),
        ("[M+NH4]+", "[M+NH4]+", 1, 1),
        ("[M-H]-", "[M-H]-", -1, 1),
        ("M-H", "[M-H]-", -1, 1),
        ("[M-H2O+H]+", "[M-H2O+H]+", 1, 1),
        ("[M+H-H2O]+", "[M-H2O+H]+", 1, 1),
        ("[2M+H]+", "[2M+H]+", 1, 2),
        ("[M]+", "[M]+", 1, 1),
        ("[M]+*", "[M]+*", 1, 1),
        ("[M]•+", "[M]+*", 1, 1),
        ("[M+2H]2+", "[M+2H]2+", 2, 1),
        ("[M+2H]++", "[M+2H]2+", 2, 1),
        ("[M-2H]--", "[M-2H]2-", -2, 1),
        ("[M+FA-H]-", "[M+HCOO]-", -1, 1),
        ("[M+HCOO]-", "[M+HCOO]-", -1, 1),
        ("[M+HCOOH-H]-", "[M+HCOO]-", -1, 1),
        ("[M+HCO2]-", "[M+HCOO]-", -1, 1),
        ("[M-H+CH2O2]-", "[M+HCOO]-", -1, 1),
        ("[M+Cl]-", "[M+Cl]-", -1, 1),
        ("M+Cl", "[M+Cl]-", -1, 1),
        ("[M+CH3COO]-", "[M+CH3COO]-", -1, 1),
        ("[M+CH3COOH-H]-", "[M+CH3COO]-", -1, 1),
        ("[M+Hac-H]-", "[M+CH3COO]-", -1, 1),
        ("[M+AcOH-H]-", "[M+CH3COO]-", -1, 1),
        ("[M-H-H2O]-", "[M-H2O-H]-", -1, 1),
        ("[M+ACN+H]+", "[M+ACN+H]+", 1, 1),
        ("[M+MeOH+H]+", "[M+CH3OH+H]+", 1, 1),
        ("[M-H]+", "[M-H]+", 1, 1),  # hydride abstraction: kept as written, charge as written
        ("[M-H-CO2-2HF]-", "[M-H-CO2-2HF]-", -1, 1),  # generic groups with a multiplier
    ],
)
def test_parse_adduct_normalises(text, name, charge, k):
    adduct = parse_adduct(text)
    assert (adduct.name, adduct.charge, adduct.n_molecules) == (name, charge, k)
    assert parse_adduct(adduct.name) == adduct  # the normalised name parses to itself


@pytest.mark.parametrize(
    "text, message",
    [
        ("M", "gives no charge"),
        ("[M+H2O]", "gives no charge"),
        ("[M+Xy]+", r"Unknown group 'Xy' in adduct '\[M\+Xy\]\+'.*examples: \[M\+H\]\+"),
        ("[M+H+", r"Cannot parse adduct '\[M\+H\+'"),
        ("M+H]+", "Cannot parse adduct"),
        ("foo", r"Cannot parse adduct 'foo'.*\[M\+Na\]\+"),
        ("[M+H]+-", "Cannot read the charge"),
        ("[M+H]0+", "charge 0"),
        ("[0M+H]+", "0 molecules"),
        ("[M+H]+ (low)", "Cannot parse adduct"),
        ("unknown", "missing"),
    ],
)
def test_parse_adduct_errors_show_the_string_and_examples(text, message):
    with pytest.raises(AdductError, match=message):
        parse_adduct(text)


@pytest.mark.parametrize("text", [None, "", "  ", "unknown", "Unknown", "N/A", "NA", "null", "None"])
def test_missing_adducts_are_none(text):
    assert parse_adduct_or_none(text) is None


def test_parse_adduct_or_none_still_rejects_garbage():
    with pytest.raises(AdductError):
        parse_adduct_or_none("[M+Qq]+")


@pytest.mark.parametrize(
    "adduct, mz",
    [
        ("[M+H]+", 179.070270),
        ("[M+Na]+", 201.052215),
        ("[M+K]+", 217.026152),
        ("[M+NH4]+", 196.096820),
        ("[M-H]-", 177.055718),
        ("[M+Cl]-", 213.032395),
        ("[M+HCOO]-", 223.061197),
        ("[M]+", 178.062445),
        ("[M-H2O+H]+", 161.059706),
        ("[2M+H]+", 357.133264),
        ("[M+2H]2+", 90.038773),
    ],
)
def test_precursor_mz_of_mellein(adduct, mz):
    assert precursor_mz_from_neutral(MELLEIN, adduct) == pytest.approx(mz, abs=2e-6)
    assert neutral_mass_from_precursor(mz, adduct) == pytest.approx(MELLEIN, abs=5e-6)


@given(
    mass=st.floats(min_value=50, max_value=2000),
    name=st.sampled_from(["[M+H]+", "[M+Na]+", "[M-H]-", "[2M+H]+", "[M+2H]2+", "[M-H2O+H]+"]),
)
def test_neutral_and_precursor_are_inverse(mass, name):
    assert neutral_mass_from_precursor(precursor_mz_from_neutral(mass, name), name) == pytest.approx(mass, abs=1e-9)


def test_add_and_remove_counts_as_written():
    a = parse_adduct("[M-H2O+H]+")
    assert dict(a.add_counts) == {"H": 1}
    assert dict(a.remove_counts) == {"H": 2, "O": 1}
    assert a.net_counts == {"H": -1, "O": -1}


def test_counts_are_read_only():
    with pytest.raises(TypeError):
        parse_adduct("[M+Na]+").add_counts["Na"] = 2


@pytest.mark.parametrize(
    "adduct, ion",
    [
        ("[M+H]+", {"C": 10, "H": 11, "O": 3}),
        ("[M+Na]+", {"C": 10, "H": 10, "O": 3, "Na": 1}),
        ("[M-H]-", {"C": 10, "H": 9, "O": 3}),
        ("[M-H2O+H]+", {"C": 10, "H": 9, "O": 2}),
        ("[2M+H]+", {"C": 20, "H": 21, "O": 6}),
        ("[M+FA-H]-", {"C": 11, "H": 11, "O": 5}),
    ],
)
def test_ion_counts(adduct, ion):
    assert parse_adduct(adduct).ion_counts({"C": 10, "H": 10, "O": 3}) == ion


def test_ion_counts_refuses_removing_missing_atoms():
    with pytest.raises(AdductError, match=r"short of 1 O"):
        parse_adduct("[M-H2O+H]+").ion_counts({"C": 6, "H": 6})


@pytest.mark.parametrize("text, polarity", [("[M+H]+", "positive"), ("[M-H]-", "negative"), ("[M+Cl]-", "negative")])
def test_polarity(text, polarity):
    assert parse_adduct(text).polarity == polarity


def test_adduct_is_hashable_and_passes_through():
    a = parse_adduct("[M+H]+")
    assert isinstance(a, Adduct) and str(a) == "[M+H]+"
    assert parse_adduct(a) is a
    assert len({a, parse_adduct("M+H")}) == 1
