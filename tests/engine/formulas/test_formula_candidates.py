"""Formula and ion type candidates: scoring terms, ion types, MS1 evidence, the scorer file.

A scorer with explicit weights is built in the tests (nothing here depends on the shipped one's
learned weights): mass error, isomer count, explained minus chance-explained fragment intensity.
"""

import numpy as np
import pytest

from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.errors import ConfigError, SpectrumError
from engine.formulas.candidates import TERMS, FormulaConfig, isotope_comparison, rank_formulas, with_formula_candidate
from engine.formulas.elements import ElementEvidence
from engine.formulas.evidence import FRAGMENT_FEATURES
from engine.formulas.prior import FormulaPrior
from engine.formulas.scorer import STAGE2_FEATURES, FormulaScorer
from engine.spectra.features import MS1Evidence
from engine.spectra.isotopes import isotope_pattern
from engine.spectra.spectrum import Spectrum

CORPUS = {"C8H10N4O2": 6, "C10H10O3": 3, "C9H8ClNO": 2, "C7H14O6": 1, "C12H10N2O": 1, "C8H18OS2": 1}


@pytest.fixture(scope="module")
def scorer():
    prior = FormulaPrior.fit(CORPUS)
    stage1 = {"mass_error": -1.0, "prior_isomers": 1.0}
    stage2 = {**stage1, "frag_intensity": 6.0, "frag_decoy": -3.0}
    return FormulaScorer(prior=prior, stage1=stage1, stage2=stage2,
                         ion_type_log_prior={"[M+H]+": -0.1, "[M+Na]+": -2.5, "[M+NH4]+": -2.5,
                                             "[M-H]-": -0.1, "[M+Cl]-": -2.5, "[M+HCOO]-": -2.5})


def mz_of(formula: str, ion: str = "[M+H]+") -> float:
    return precursor_mz_from_neutral(formula_mass(parse_formula(formula)), ion)


def spectrum(true_formula: str, fragments: list[str], ion: str = "[M+H]+", **fields) -> Spectrum:
    precursor = mz_of(true_formula, ion)
    mz = [mz_of(f) for f in fragments] + [precursor]
    return Spectrum(id="x", precursor_mz=precursor, mz=mz, intensity=[100.0] * len(mz),
                    adduct=fields.pop("adduct", ion), **fields)


CAFFEINE_FRAGMENTS = ["C6H7N3O", "C5H7N3", "C4H5N3", "C7H6N4O"]


def test_fragments_pick_the_formula_that_explains_them(scorer):
    table = rank_formulas(spectrum("C8H10N4O2", CAFFEINE_FRAGMENTS), scorer=scorer)
    best = table.candidates[0]
    assert best.formula == "C8H10N4O2" and best.ion_type == "[M+H]+" and best.rank == 1
    assert best.explained_intensity == pytest.approx(1.0) and best.n_explained == 4
    assert table.n_fragment_peaks == 4 and table.n_decompositions >= len(table.candidates) > 1
    assert any(c.explained_intensity < 1.0 for c in table.candidates[1:])  # others explain less (or, larger, by chance)
    no_fragments = rank_formulas(spectrum("C8H10N4O2", []), scorer=scorer)
    assert {c.terms["fragments"] for c in no_fragments.candidates} == {0.0}


def test_terms_add_up_and_probabilities_are_a_distribution(scorer):
    table = rank_formulas(spectrum("C8H10N4O2", CAFFEINE_FRAGMENTS), scorer=scorer)
    for c in table.candidates:
        assert set(c.terms) == set(TERMS) and c.score == pytest.approx(sum(c.terms.values()))
    assert sum(c.probability for c in table.candidates) == pytest.approx(1.0)
    assert [c.rank for c in table.candidates] == list(range(1, len(table.candidates) + 1))
    assert all(a.score >= b.score for a, b in zip(table.candidates, table.candidates[1:]))
    assert table.candidates[0].isomers == 6 and table.candidates[0].ppm_error == pytest.approx(0.0, abs=1e-6)


def test_without_adduct_every_default_ion_type_is_tried(scorer):
    s = spectrum("C8H10N4O2", CAFFEINE_FRAGMENTS, adduct=None, polarity="positive")
    table = rank_formulas(s, scorer=scorer)
    assert table.ion_types == ("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M+K]+")  # no in-source water loss, no cation
    assert {c.ion_type for c in table.candidates} == set(table.ion_types)
    assert (table.candidates[0].formula, table.candidates[0].ion_type) == ("C8H10N4O2", "[M+H]+")
    only = rank_formulas(s, config=FormulaConfig(ion_types=("[M+Na]+",)), scorer=scorer)
    assert {c.ion_type for c in only.candidates} == {"[M+Na]+"}


def test_negative_mode_uses_negative_ion_types(scorer):
    s = spectrum("C10H10O3", [], ion="[M-H]-", adduct=None, polarity="negative")
    table = rank_formulas(s, scorer=scorer)
    assert table.ion_types == ("[M-H]-", "[M+HCOO]-", "[M+CH3COO]-", "[M+Cl]-", "[M-H2O-H]-")
    assert table.candidates[0].formula == "C10H10O3" and table.candidates[0].ion_type == "[M-H]-"
    assert any("no fragments" in n for n in table.notes)


def test_supported_ion_types_are_marked_and_runnable_skips_the_others(scorer):
    s = spectrum("C8H10N4O2", CAFFEINE_FRAGMENTS, adduct=None)
    table = rank_formulas(s, scorer=scorer, supported_adducts=["[M+H]+", "[M+Na]+"])
    assert {c.supported for c in table.candidates if c.ion_type == "[M+NH4]+"} == {False}
    assert all(c.supported for c in table.runnable(10)) and len(table.runnable(10)) == 10
    assert table.runnable(3)[0].formula == "C8H10N4O2"
    every = table.runnable(len(table.candidates), table.ion_types)  # a model that runs every one tried
    assert every == table.candidates and any(c.ion_type == "[M+NH4]+" for c in every)
    assert table.runnable(5, ["[M+Li]+"]) == ()
    assert table.why_none_runnable(["[M+Li]+"], 10) == (
        "no formula candidate of an ion type the model supports ([M+Li]+; tried [M+H]+, [M+Na]+, [M+NH4]+, [M+K]+)")


def test_why_none_runnable_of_an_empty_table_names_the_tolerance_or_the_notes():
    from engine.formulas.candidates import FormulaTable

    empty = FormulaTable("s1", 195.0877, ("[M+H]+",), (), 0, False, 0, notes=("no fragments: ranked by mass",))
    assert empty.why_none_runnable(["[M+H]+"], 10) == "no formula candidate within 10 ppm for [M+H]+"
    noted = FormulaTable("s1", 1500.0, ("[M+H]+",), (), 0, False, 0, notes=("neutral mass 1499 Da is above 1000 Da",))
    assert noted.why_none_runnable(["[M+H]+"], 10) == "no formula candidate: neutral mass 1499 Da is above 1000 Da"


def test_a_given_formula_keeps_and_only_its_ion_types_are_ranked(scorer):
    s = spectrum("C10H10O3", ["C9H7O"], adduct=None, formula="C10H10O3")
    table = rank_formulas(s, scorer=scorer)
    assert [(c.formula, c.ion_type) for c in table.candidates] == [("C10H10O3", "[M+H]+")]


def test_nominal_precursor_without_formula_is_refused(scorer):
    s = Spectrum(id="n", precursor_mz=163.0, mz=[100.0], intensity=[1.0], adduct="[M+H]+",
                 metadata={"precursor_mz_decimals": "0"})
    with pytest.raises(SpectrumError, match="written to 1 Da; formulas need it to 10 ppm: give the molecular formula"):
        rank_formulas(s, scorer=scorer)


def ms1_for(ion_formula: str, precursor: float, extra: list[tuple[float, float]] = ()) -> MS1Evidence:
    masses, abundances = isotope_pattern(ion_formula, 6, charge=1)
    mz = np.concatenate([masses, [m for m, _ in extra], [precursor - 30.0]])
    intensity = np.concatenate([abundances * 1e6, [i for _, i in extra], [1e3]])  # a weak peak: the detection limit
    order = np.argsort(mz)
    return MS1Evidence(scan_id="ms1", retention_time=10.0, precursor_mz=precursor, precursor_intensity=1e6,
                       mz=mz[order], intensity=intensity[order])


def test_chlorine_isotope_pattern_decides_between_formulas(scorer):
    s = spectrum("C9H8ClNO", [])
    without = rank_formulas(s, scorer=scorer)
    ms1 = ms1_for("C9H9ClNO", s.precursor_mz)
    table = rank_formulas(s, ms1=ms1, scorer=scorer)
    assert table.has_ms1 and table.candidates[0].formula == "C9H8ClNO"
    chlorine = table.candidates[0]
    assert chlorine.terms["isotopes"] == pytest.approx(0.0, abs=1e-6)
    assert all(c.terms["isotopes"] < -10 for c in table.candidates if "Cl" not in c.formula)
    assert len(without.candidates) == len(table.candidates)
    match = isotope_comparison(chlorine, ms1)
    assert match.observed[2] == pytest.approx(0.33, abs=0.02) and match.theoretical[2] == pytest.approx(0.33, abs=0.02)
    assert isotope_comparison(chlorine, None) is None


def test_a_co_detected_sodium_adduct_supports_the_protonated_reading(scorer):
    s = spectrum("C8H10N4O2", CAFFEINE_FRAGMENTS, adduct=None)
    na = mz_of("C8H10N4O2", "[M+Na]+")
    ms1 = ms1_for("C8H11N4O2", s.precursor_mz, extra=[(na, 3e5)])
    table = rank_formulas(s, ms1=ms1, scorer=scorer)
    caffeine = next(c for c in table.candidates if c.formula == "C8H10N4O2" and c.ion_type == "[M+H]+")
    assert caffeine.terms["adducts"] == pytest.approx(2.0)
    assert table.candidates[0] is caffeine


def test_cancel_stops(scorer):
    from engine.errors import Cancelled

    with pytest.raises(Cancelled):
        rank_formulas(spectrum("C8H10N4O2", CAFFEINE_FRAGMENTS), scorer=scorer, cancel=lambda: True)


def test_with_formula_candidate(scorer):
    s = spectrum("C8H10N4O2", CAFFEINE_FRAGMENTS, adduct=None)
    best = rank_formulas(s, scorer=scorer).candidates[0]
    chosen = with_formula_candidate(s, best)
    assert (chosen.formula, chosen.adduct) == ("C8H10N4O2", "[M+H]+")
    assert chosen.metadata["formula_rank"] == "1" and float(chosen.metadata["formula_score"]) == pytest.approx(best.probability, abs=1e-4)
    assert s.formula is None and "formula_rank" not in s.metadata
    assert "formula_evidence" not in chosen.metadata
    noted = with_formula_candidate(s, best, ElementEvidence(present=(("Cl",),), notes=("fragments: Cl (HCl loss)",
                                                                                         "isotopes: no Cl or Br")))
    assert noted.metadata["formula_evidence"] == "fragments: Cl (HCl loss); isotopes: no Cl or Br"
    assert "formula_evidence" not in with_formula_candidate(s, best, ElementEvidence()).metadata


# ---------------------------------------------------------------------------------------------
# Prior and scorer file
# ---------------------------------------------------------------------------------------------


def test_prior_statistics():
    from engine.chem.formula import formula_vector

    prior = FormulaPrior.fit({**CORPUS, "C6H6Si": 1, "XY": 4})  # an unparseable formula is left out
    assert prior.n_structures == sum(CORPUS.values()) + 1
    assert prior.patterns[""] > prior.patterns["Cl"] > prior.unseen_pattern
    v = np.array([formula_vector(parse_formula(f)) for f in ("C8H10N4O2", "C9H8BrNO")])
    feats = prior.features(v, v @ np.array([formula_mass({e: 1}) for e in ("C", "H", "N", "O", "S", "P", "F", "Cl",
                                                                                  "Br", "I", "B", "Si", "Se", "As")]))
    assert feats["prior_isomers"].tolist() == pytest.approx([np.log(7), 0.0])
    assert feats["prior_pattern"][0] > feats["prior_pattern"][1]  # bromine never seen
    left_out = prior.features(v, np.array([194.08, 241.0]), exclude_self=np.array([1, 0]))
    assert left_out["prior_isomers"][0] == pytest.approx(np.log(6))


def test_scorer_round_trip(tmp_path, scorer):
    path = scorer.save(tmp_path)
    assert path.name == "formula_scorer.json" and (tmp_path / "formula_isomers.tsv.gz").is_file()
    again = FormulaScorer.load(tmp_path)
    s = spectrum("C8H10N4O2", CAFFEINE_FRAGMENTS)
    a, b = rank_formulas(s, scorer=scorer), rank_formulas(s, scorer=again)
    assert [(c.formula, round(c.score, 4)) for c in a.candidates] == [(c.formula, round(c.score, 4)) for c in b.candidates]


def test_scorer_rejects_unknown_features_and_files(tmp_path, scorer):
    with pytest.raises(ConfigError, match="unknown features"):
        FormulaScorer(prior=scorer.prior, stage1={"shoe_size": 1.0}, stage2={})
    (tmp_path / "formula_scorer.json").write_text('{"format": "other"}')
    with pytest.raises(ConfigError, match="is not a formula scorer"):
        FormulaScorer.load(tmp_path)


def test_the_shipped_scorer_loads():
    from engine.formulas.scorer import default_scorer

    shipped = default_scorer()
    assert set(shipped.stage2) == set(STAGE2_FEATURES) and shipped.prior.n_structures > 100_000
    assert set(FRAGMENT_FEATURES) <= set(shipped.stage2) and "[M+H]+" in shipped.ion_type_log_prior


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ppm": -1}, "`ppm` must be a number >= 0"),
        ({"ppm": 0, "da": 0}, "both 0"),
        ({"max_scored": 0}, "`max_scored` must be a whole number >= 1"),
        ({"ion_types": ("[M+Xx]+",)}, "`ion_types`"),
        ({"ion_types": ()}, "`ion_types` is empty"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        FormulaConfig(**kwargs)


def test_config_normalises_ion_types():
    assert FormulaConfig(ion_types=("M+H", "[M + Na]+", "[M+H]+")).ion_types == ("[M+H]+", "[M+Na]+")


# ---------------------------------------------------------------------------------------------
# The fragment stage agrees with engine.spectra.annotate
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ion", ["[M+H]+", "[M+Na]+", "[M+NH4]+", "[M-H]-", "[M+Cl]-"])
def test_fragment_features_agree_with_annotate_peaks(ion):
    """Explained peaks (and decoys) of many formulas at once = annotate_peaks formula by formula."""
    from engine.chem.formula import vector_to_counts
    from engine.formulas.decompose import decompose_mass
    from engine.formulas.evidence import DECOY_SHIFTS_DA, fragment_features_many
    from engine.spectra.annotate import annotate_peaks

    rng = np.random.default_rng(0)
    vectors, _ = decompose_mass(formula_mass(parse_formula("C12H14ClN3O2S")), 0.02)
    vectors = vectors[:30]
    # peaks: real subformula ions of the first formula, and random m/z
    mz = np.sort(np.concatenate([[mz_of(f, "[M+H]+") for f in ("C6H5Cl", "C4H5N3", "C7H7NO2")],
                                 rng.uniform(50, 300, 12)]))
    weight = rng.uniform(0.1, 1.0, mz.size)
    many = fragment_features_many(mz, weight, vectors, [ion] * len(vectors))
    for k, v in enumerate(vectors):
        counts = vector_to_counts(v)
        matched = annotate_peaks(mz, weight, counts, ion).matched
        decoy = np.mean([weight[annotate_peaks(mz + d, weight, counts, ion).matched].sum() for d in DECOY_SHIFTS_DA])
        assert many["n_explained"][k] == matched.sum()
        assert many["frag_intensity"][k] == pytest.approx(weight[matched].sum() / weight.sum())
        assert many["frag_decoy"][k] == pytest.approx(decoy / weight.sum())
    assert many["n_explained"].max() >= 3


def test_masses_above_the_limit_are_not_decomposed(scorer):
    s = Spectrum(id="big", precursor_mz=1318.81, mz=[500.0, 1318.81], intensity=[1.0, 1.0], adduct="[M+H]+")
    table = rank_formulas(s, scorer=scorer)
    assert not table.candidates and "above 1000 Da (1317.8 Da as [M+H]+)" in table.notes[-1] and "give the formula" in table.notes[-1]
    assert rank_formulas(s, config=FormulaConfig(max_mass=1400.0, max_scored=2), scorer=scorer).n_decompositions > 0


def test_a_pattern_without_m1_is_not_used_and_the_table_says_why(scorer):
    s = spectrum("C9H8ClNO", [])
    full = ms1_for("C9H9ClNO", s.precursor_mz)
    keep = np.abs(full.mz - (s.precursor_mz + 1.00335)) > 0.02  # the M+1 peak trimmed away
    trimmed = MS1Evidence(scan_id="ms1", retention_time=10.0, precursor_mz=s.precursor_mz, precursor_intensity=1e6,
                          mz=full.mz[keep], intensity=full.intensity[keep])
    table = rank_formulas(s, ms1=trimmed, scorer=scorer)
    assert {c.terms["isotopes"] for c in table.candidates} == {0.0}
    assert any(n.startswith("isotopes not used: no M+1 peak in the survey scan") for n in table.notes)
    assert not any(n.startswith("isotopes not used") for n in rank_formulas(s, ms1=full, scorer=scorer).notes)
