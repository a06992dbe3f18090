"""A compound group decides together (engine.formulas.groups): one neutral formula over all members, the
best-fragmenting member elucidated, every member showing the group's answer."""

import dataclasses
from types import SimpleNamespace

import pytest
from synthetic_run import CAFFEINE, ion_mz, write_adduct_run

from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.errors import ConfigError
from engine.formulas.candidates import FormulaCandidate, FormulaConfig, FormulaTable
from engine.formulas.groups import (
    GROUP_ANSWER_KEY,
    MEMBER_ISOTOPE_FLOOR,
    as_member_result,
    choose_lead,
    decide_group,
    joint_scores,
    member_view,
)
from engine.spectra.run_features import iter_features
from engine.spectra.spectrum import SkippedRecord

RIGHT, WRONG = "C8H10N4O2", "C7H14O6"  # caffeine; another formula of its mass within 10 ppm


@dataclasses.dataclass(frozen=True)
class Result:  # what as_member_result needs of a SpectrumResult
    spectrum: object
    candidates: tuple


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    path = write_adduct_run(tmp_path_factory.mktemp("groups") / "adducts.mzML")
    features = [f for f in iter_features(path) if not isinstance(f, SkippedRecord)]
    grouped = [f for f in features if f.group is not None]
    assert len(grouped) == 2
    return grouped[0].group_members


def candidate(formula, ion, mz, terms, rank=1, explained=0.0, n=0):
    mass = formula_mass(parse_formula(formula))
    theo = precursor_mz_from_neutral(mass, ion)
    return FormulaCandidate(rank=rank, formula=formula, ion_type=ion, neutral_mass=mass, theoretical_mz=theo,
                            ppm_error=(mz - theo) / theo * 1e6, rdbe=0.0, terms=terms, score=sum(terms.values()),
                            probability=0.0, explained_intensity=explained, n_explained=n, isomers=1)


def terms(prior, fragments, isotopes=0.0):
    return {"mass": 0.0, "prior": prior, "fragments": fragments, "ion_type": 0.0, "isotopes": isotopes, "adducts": 0.0}


def table(cands):
    return FormulaTable(spectrum_id="x", precursor_mz=0.0, ion_types=(), candidates=tuple(cands), n_decompositions=0,
                        has_ms1=True, n_fragment_peaks=0)


def member(fid, ion, formula=RIGHT):
    return SimpleNamespace(id=fid, ion_type_in_group=ion, index=0,
                           precursor_mz=precursor_mz_from_neutral(formula_mass(parse_formula(formula)), ion))


def test_the_joint_score_sums_the_members_evidence_and_counts_the_prior_once():
    h, na = member("H", "[M+H]+"), member("Na", "[M+Na]+")
    # the sodium adduct alone prefers the wrong formula (its fragments say little); the [M+H]+ the right one
    t_h = table([candidate(RIGHT, "[M+H]+", h.precursor_mz, terms(-1.0, 6.0)),
                 candidate(WRONG, "[M+H]+", h.precursor_mz, terms(-0.5, 1.0), rank=2)])
    t_na = table([candidate(WRONG, "[M+Na]+", na.precursor_mz, terms(-0.5, 2.0)),
                  candidate(RIGHT, "[M+Na]+", na.precursor_mz, terms(-1.0, 0.5), rank=2)])
    joint = joint_scores([t_h, t_na], [h, na], [FormulaConfig(ppm=1000.0)] * 2)
    assert joint[RIGHT]["prior"] == -1.0 and joint[RIGHT]["fragments"] == 6.5  # prior once, fragments summed
    assert sum(joint[RIGHT].values()) > sum(joint[WRONG].values())


def test_a_formula_that_cannot_explain_a_member_is_left_out_and_a_bad_isotope_term_is_floored():
    h, na = member("H", "[M+H]+"), member("Na", "[M+Na]+")
    far = "C20H30O2"  # explains neither member's m/z
    t_h = table([candidate(RIGHT, "[M+H]+", h.precursor_mz, terms(-1.0, 6.0)),
                 candidate(far, "[M+H]+", h.precursor_mz, terms(0.0, 9.0), rank=2)])
    t_na = table([candidate(RIGHT, "[M+Na]+", na.precursor_mz, terms(-1.0, 0.5, isotopes=-6000.0))])
    joint = joint_scores([t_h, t_na], [h, na], [FormulaConfig()] * 2)
    assert set(joint) == {RIGHT}
    assert joint[RIGHT]["isotopes"] == MEMBER_ISOTOPE_FLOOR


def test_the_lead_is_the_member_whose_fragments_the_formula_explains_best():
    h, na = member("H", "[M+H]+"), member("Na", "[M+Na]+")
    tables = {"H": table([candidate(RIGHT, "[M+H]+", h.precursor_mz, terms(0, 0), explained=0.8, n=4)]),
              "Na": table([candidate(RIGHT, "[M+Na]+", na.precursor_mz, terms(0, 0), explained=0.9, n=1)])}
    assert choose_lead([h, na], tables, RIGHT) == "H"
    assert choose_lead([h, na], tables, RIGHT, runnable=["[M+Na]+"]) == "Na"  # the model runs only that one
    even = {"H": tables["H"], "Na": table([candidate(RIGHT, "[M+Na]+", na.precursor_mz, terms(0, 0), explained=0.8,
                                                     n=4)])}
    assert choose_lead([na, h], even, RIGHT) == "H"  # a tie goes to [M+H]+


def test_the_group_of_a_run_decides_caffeine_and_its_protonated_member_leads(members):
    decision = decide_group(members)
    h, na = members
    assert decision.lead_id == h.id and decision.joint.candidates[0].formula == CAFFEINE
    assert decision.joint.candidates[0].ion_type == "[M+H]+"
    view = member_view(decision, na.id)
    assert view.candidates[0].formula == CAFFEINE and view.candidates[0].ion_type == "[M+Na]+"
    assert view.candidates[0].theoretical_mz == pytest.approx(ion_mz(CAFFEINE, "[M+Na]+"))
    assert [c.probability for c in view.candidates] == pytest.approx([c.probability for c in decision.joint.candidates])
    assert "compound group G0001" in view.notes[-1]


def test_a_member_shows_the_leads_result_as_its_own(members):
    decision = decide_group(members)
    h, na = members
    lead_spectrum = h.spectrum.with_adduct("[M+H]+", check=False).with_formula(CAFFEINE, check=False)
    lead_spectrum = dataclasses.replace(lead_spectrum, metadata={**lead_spectrum.metadata, "formula_rank": "1"})
    result = Result(spectrum=lead_spectrum, candidates=("the group's candidates",))
    shown = as_member_result(result, na, decision)
    assert shown.candidates == result.candidates
    s = shown.spectrum
    assert s.id == na.id and s.adduct == "[M+Na]+" and s.formula == CAFFEINE and s.precursor_mz == na.precursor_mz
    assert s.metadata["compound_group"] == "G0001" and s.metadata["group_lead"] == h.id
    assert s.metadata["formula_rank"] == "1" and h.id in s.metadata[GROUP_ANSWER_KEY]


def test_decide_group_needs_the_members_of_one_group(members):
    with pytest.raises(ConfigError, match="member features"):
        decide_group(members[:1])
