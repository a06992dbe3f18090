"""Formula candidates of the ion types beyond [M+H]+ / [M-H]- (engine.formulas.candidates, #56): a permanently charged
[M]+ gets even-electron cation formulas, and the shipped scorer has a measured prior for every common ion type."""

from engine.chem.adducts import COMMON_ION_TYPES, precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.formulas.candidates import (
    FormulaConfig,
    cation_decompositions,
    rank_formulas,
)
from engine.formulas.scorer import default_scorer
from engine.model.ion_mapping import is_even_electron_cation
from engine.spectra.spectrum import Spectrum

CHOLINE = "C5H14NO"  # (CH3)3N+CH2CH2OH


def test_a_permanent_cation_gets_even_electron_formulas_the_twin_of_its_protonated_neutral():
    mz = precursor_mz_from_neutral(formula_mass(parse_formula(CHOLINE)), "[M]+")
    s = Spectrum(id="choline", precursor_mz=mz, polarity="positive", mz=[58.0651, 60.0808], intensity=[100.0, 50.0])
    table = rank_formulas(s, config=FormulaConfig(ion_types=("[M+H]+", "[M]+")))
    cations = [c for c in table.candidates if c.ion_type == "[M]+"]
    assert CHOLINE in {c.formula for c in cations}
    assert all(is_even_electron_cation(c.formula) and c.rdbe % 1 == 0.5 for c in cations)  # never a radical M+•
    protonated = {c.formula for c in table.candidates if c.ion_type == "[M+H]+"}
    for c in cations:  # the same ion: F = M' + H at the same m/z
        counts = parse_formula(c.formula)
        counts["H"] -= 1
        assert any(parse_formula(p) == {e: n for e, n in counts.items() if n} for p in protonated)
    vectors, masses = cation_decompositions(formula_mass(parse_formula(CHOLINE)), 0.001, FormulaConfig())
    assert len(vectors) and all(abs(m - formula_mass(parse_formula(CHOLINE))) <= 0.001 for m in masses)


def test_the_shipped_scorer_has_a_measured_prior_for_every_common_ion_type():
    prior = default_scorer().ion_type_log_prior
    for names in COMMON_ION_TYPES.values():
        assert set(names) <= set(prior)
        assert prior[names[0]] == max(prior[a] for a in names)  # [M+H]+ / [M-H]- the most frequent of its mode
