"""The suspect order's terms beside the fingerprint score: the forward model's fragment score
(engine.elucidation.ranking.FragmentRerank) and the analog score (AnalogRerank)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.chem import molecules as chem
from engine.elucidation.ranking import (
    AnalogReference,
    AnalogRerank,
    CandidatePool,
    FragmentRerank,
    KnownStructure,
    SpectralEvidence,
    rank_group,
)
from engine.model.forward import ForwardRanking

# Isomers of C3H8O: what the fingerprint score and the forward score of each are, in the tests below.
PROPANOL, ISOPROPANOL, METHOXYETHANE = "CCCO", "CC(C)O", "CCOC"


def key(smiles: str) -> str:
    return chem.inchikey(chem.mol_from_smiles(smiles))[:14]


def bits(smiles: str) -> np.ndarray:
    return chem.morgan_bits(chem.mol_from_smiles(smiles))


class StubScorer:
    """Fingerprint scores by structure (the pool asks with a structure's bits)."""

    def __init__(self, scores: dict[str, float]):
        self.by_bits = {tuple(bits(s).tolist()): v for s, v in scores.items()}

    def score(self, b: np.ndarray) -> float:
        return self.by_bits[tuple(np.asarray(b).tolist())]


class Forward:
    """Forward scores by SMILES, counting the calls."""

    def __init__(self, scores: dict[str, float | None]):
        self.scores, self.calls = scores, []

    def __call__(self, smiles: str) -> float | None:
        self.calls.append(smiles)
        return self.scores[smiles]


def pool(fp: dict[str, float], suspects=(), samples=(), fragments=None) -> CandidatePool:
    p = CandidatePool("C3H8O", [bits(PROPANOL)], StubScorer(fp), fragments=fragments)
    p.add_known(KnownStructure(s, key(s), "C3H8O", bits(s), "mine", suspect=True) for s in suspects)
    p.add([(0, j) for j in range(len(samples))], list(samples))
    return p


def order(p: CandidatePool, ranking: str = "fingerprint") -> list[str]:
    return [c.smiles for c in p.rank(ranking=ranking)[0]]


FP = {PROPANOL: -1.0, ISOPROPANOL: -2.0, METHOXYETHANE: -3.0}


def test_suspects_are_reordered_by_fingerprint_plus_weighted_forward_score():
    fw = Forward({PROPANOL: -10.0, ISOPROPANOL: -1.0, METHOXYETHANE: -5.0})
    p = pool(FP, suspects=FP, fragments=FragmentRerank(fw, ForwardRanking(weight=1.0, shortlist=2)))
    candidates, _ = p.rank(ranking="fingerprint")
    # shortlist (first two by fingerprint score): propanol -1 - 10 = -11, isopropanol -2 - 1 = -3;
    # methoxyethane is outside it and takes the shortlist's lowest forward score: -3 - 10 = -13
    assert [c.smiles for c in candidates] == [ISOPROPANOL, PROPANOL, METHOXYETHANE]
    assert [c.score for c in candidates] == pytest.approx([-3.0, -11.0, -13.0])
    assert candidates[0].fragment_score == -1.0 and candidates[1].fragment_score == -10.0
    assert math.isnan(candidates[2].fragment_score)  # not scored: outside the shortlist
    assert [c.fingerprint_score for c in candidates] == [-2.0, -1.0, -3.0]  # the fingerprint score is kept
    assert sorted(fw.calls) == sorted([PROPANOL, ISOPROPANOL])  # only the shortlist is scored


def test_suspect_scope_leaves_the_predictions_alone():
    fw = Forward({PROPANOL: -10.0, ISOPROPANOL: -1.0, METHOXYETHANE: -5.0})
    fragments = FragmentRerank(fw, ForwardRanking(weight=1.0, shortlist=5, scope="suspects"))
    p = pool(FP, suspects=[METHOXYETHANE], samples=[PROPANOL, ISOPROPANOL], fragments=fragments)
    assert order(p) == [METHOXYETHANE, PROPANOL, ISOPROPANOL]  # de novo: by fingerprint score alone
    assert fw.calls == [METHOXYETHANE]
    ranked, _ = p.rank(ranking="fingerprint")
    assert all(math.isnan(c.fragment_score) for c in ranked[1:])


def test_scope_all_reorders_the_predictions_too_but_never_above_a_suspect():
    fw = Forward({PROPANOL: -10.0, ISOPROPANOL: -1.0, METHOXYETHANE: -50.0})
    fragments = FragmentRerank(fw, ForwardRanking(weight=1.0, shortlist=5, scope="all"))
    p = pool(FP, suspects=[METHOXYETHANE], samples=[PROPANOL, ISOPROPANOL], fragments=fragments)
    assert order(p) == [METHOXYETHANE, ISOPROPANOL, PROPANOL]


def test_the_predictions_have_a_weight_and_shortlist_of_their_own():
    fw = Forward({PROPANOL: -10.0, ISOPROPANOL: -1.0, METHOXYETHANE: -50.0})
    ranking = ForwardRanking(weight=0.0, shortlist=5, others_weight=0.5, others_shortlist=2)
    p = pool(FP, samples=[PROPANOL, ISOPROPANOL, METHOXYETHANE], fragments=FragmentRerank(fw, ranking))
    ranked, _ = p.rank(ranking="fingerprint")
    # propanol -1 - 5 = -6, isopropanol -2 - 0.5 = -2.5; methoxyethane outside the shortlist of 2: -3 - 5 = -8
    assert [c.smiles for c in ranked] == [ISOPROPANOL, PROPANOL, METHOXYETHANE]
    assert [c.score for c in ranked] == pytest.approx([-2.5, -6.0, -8.0])
    assert sorted(fw.calls) == sorted([PROPANOL, ISOPROPANOL])
    assert FragmentRerank(fw, ranking).groups() == (2,) and ranking.fragments_on
    # the suspects keep their own weight (0 here: fingerprint order), the predictions theirs
    fw.calls.clear()
    p = pool(FP, suspects=[PROPANOL, METHOXYETHANE], samples=[ISOPROPANOL], fragments=FragmentRerank(fw, ranking))
    assert order(p) == [PROPANOL, METHOXYETHANE, ISOPROPANOL] and fw.calls == [ISOPROPANOL]
    with pytest.raises(Exception, match="others_weight"):
        ForwardRanking(others_weight=-1.0)
    with pytest.raises(Exception, match="others_shortlist"):
        ForwardRanking(others_shortlist=0)


def test_no_rerank_for_frequency_ranking_weight_zero_or_nothing_scorable():
    fw = Forward({PROPANOL: -10.0, ISOPROPANOL: -1.0, METHOXYETHANE: -5.0})
    p = pool(FP, samples=[ISOPROPANOL, PROPANOL, PROPANOL], fragments=FragmentRerank(fw, ForwardRanking(1.0, 5, "all")))
    assert order(p, "frequency") == [PROPANOL, ISOPROPANOL]
    assert fw.calls == []
    p = pool(FP, suspects=FP, fragments=FragmentRerank(fw, ForwardRanking(weight=0.0)))
    assert order(p) == [PROPANOL, ISOPROPANOL, METHOXYETHANE]
    none = Forward(dict.fromkeys(FP))
    p = pool(FP, suspects=FP, fragments=FragmentRerank(none, ForwardRanking(weight=1.0)))
    assert order(p) == [PROPANOL, ISOPROPANOL, METHOXYETHANE]


def test_an_unscorable_shortlist_member_takes_the_lowest_score_of_the_shortlist():
    fw = Forward({PROPANOL: None, ISOPROPANOL: -1.0, METHOXYETHANE: -4.0})
    p = pool(FP, suspects=FP, fragments=FragmentRerank(fw, ForwardRanking(weight=1.0, shortlist=3)))
    # propanol -1 - 4 = -5; isopropanol -2 - 1 = -3; methoxyethane -3 - 4 = -7
    assert order(p) == [ISOPROPANOL, PROPANOL, METHOXYETHANE]


# -- the analog score: likeness to the structures of the spectrum's analog hits ------------------------------
def analogs(weight: float, *refs: tuple[str, float]) -> AnalogRerank:
    return AnalogRerank(tuple(AnalogReference(s, bits(smiles), f"R{i}", smiles) for i, (smiles, s) in enumerate(refs)),
                        weight)


def test_the_analog_score_is_the_best_similarity_times_tanimoto():
    term = analogs(1.0, (ISOPROPANOL, 0.5), (METHOXYETHANE, 0.9))
    value, ref = term.best(bits(METHOXYETHANE))
    assert value == pytest.approx(0.9) and ref.accession == "R1" and ref.label == f"R1 {METHOXYETHANE}"
    t = chem.tanimoto(bits(PROPANOL), bits(ISOPROPANOL))
    u = chem.tanimoto(bits(PROPANOL), bits(METHOXYETHANE))
    assert term.best(bits(PROPANOL))[0] == pytest.approx(max(0.5 * t, 0.9 * u))
    assert analogs(1.0).best(bits(PROPANOL)) == (0.0, None)


def test_suspects_gain_weight_times_their_analog_score_and_predictions_keep_their_order():
    p = pool(FP, suspects=[ISOPROPANOL, METHOXYETHANE], samples=[PROPANOL])
    p.analogs = analogs(10.0, (METHOXYETHANE, 0.5))
    ranked, _ = p.rank(ranking="fingerprint")
    # methoxyethane -3 + 10 · 0.5 = 2 before isopropanol -2 + 10 · 0.5 · T; the prediction comes after both
    assert [c.smiles for c in ranked] == [METHOXYETHANE, ISOPROPANOL, PROPANOL]
    assert ranked[0].score == pytest.approx(2.0) and ranked[0].analog_score == pytest.approx(0.5)
    assert ranked[0].analog_reference == f"R0 {METHOXYETHANE}"
    t = chem.tanimoto(bits(ISOPROPANOL), bits(METHOXYETHANE))
    assert ranked[1].score == pytest.approx(-2.0 + 5.0 * t)
    assert math.isnan(ranked[2].analog_score) and ranked[2].score == -1.0  # the prediction is not scored


def test_the_fragment_shortlist_is_the_first_by_fingerprint_and_analog_score():
    fw = Forward({PROPANOL: -1.0, ISOPROPANOL: -2.0, METHOXYETHANE: -30.0})
    p = pool(FP, suspects=FP, fragments=FragmentRerank(fw, ForwardRanking(weight=1.0, shortlist=1)))
    p.analogs = analogs(100.0, (METHOXYETHANE, 1.0))
    ranked, _ = p.rank(ranking="fingerprint")
    assert fw.calls == [METHOXYETHANE]  # first once the analog term is in, not by fingerprint score alone
    assert ranked[0].smiles == METHOXYETHANE and ranked[0].score == pytest.approx(-3.0 + 100.0 - 30.0)
    assert ranked[0].fragment_score == -30.0
    # the others are outside the shortlist: they take its lowest forward score and keep their order
    assert all(math.isnan(c.fragment_score) for c in ranked[1:])
    for c in ranked[1:]:
        assert c.score == pytest.approx(c.fingerprint_score + 100.0 * c.analog_score - 30.0)


def test_no_analog_term_for_the_frequency_ranking_or_weight_zero():
    p = pool(FP, suspects=FP)
    p.analogs = analogs(100.0, (METHOXYETHANE, 1.0))
    assert all(math.isnan(c.analog_score) for c in p.rank(ranking="frequency")[0])
    p.analogs = analogs(0.0, (METHOXYETHANE, 1.0))
    assert order(p) == [PROPANOL, ISOPROPANOL, METHOXYETHANE]


def test_the_other_candidates_take_the_others_weight():
    p = pool(FP, suspects=[METHOXYETHANE], samples=[PROPANOL, ISOPROPANOL])
    p.analogs = AnalogRerank(analogs(1.0, (ISOPROPANOL, 1.0)).references, weight=0.0, others_weight=10.0)
    ranked, _ = p.rank(ranking="fingerprint")
    # the suspect still ranks first, unscored at weight 0; the predictions: isopropanol -2 + 10 · 1 = 8 before
    # propanol -1 + 10 · T(propanol, isopropanol)
    assert [c.smiles for c in ranked] == [METHOXYETHANE, ISOPROPANOL, PROPANOL]
    assert math.isnan(ranked[0].analog_score)
    assert ranked[1].score == pytest.approx(8.0) and ranked[1].analog_score == pytest.approx(1.0)
    t = chem.tanimoto(bits(PROPANOL), bits(ISOPROPANOL))
    assert ranked[2].score == pytest.approx(-1.0 + 10.0 * t)


def test_the_predictions_take_the_de_novo_weight_and_an_undrawn_library_structure_does_not():
    p = CandidatePool("C3H8O", [bits(PROPANOL)], StubScorer(FP))
    p.add_known([KnownStructure(METHOXYETHANE, key(METHOXYETHANE), "C3H8O", bits(METHOXYETHANE), "bundled")])
    p.add([(0, 0)], [PROPANOL])  # drawn
    p.add_edits([ISOPROPANOL])  # made by an edit
    p.analogs = AnalogRerank(analogs(1.0, (METHOXYETHANE, 1.0)).references, weight=0.0, others_weight=0.0,
                             de_novo_weight=10.0)
    by = {c.smiles: c for c in p.rank(ranking="fingerprint")[0]}
    assert by[PROPANOL].score == pytest.approx(-1.0 + 10.0 * chem.tanimoto(bits(PROPANOL), bits(METHOXYETHANE)))
    assert by[ISOPROPANOL].score == pytest.approx(-2.0 + 10.0 * chem.tanimoto(bits(ISOPROPANOL), bits(METHOXYETHANE)))
    # the library structure no sample proposed: its own fingerprint score, however like the analog hit it is
    assert by[METHOXYETHANE].score == pytest.approx(-3.0) and math.isnan(by[METHOXYETHANE].analog_score)
    term = AnalogRerank((), weight=1.0, others_weight=2.0, de_novo_weight=3.0)
    assert (term.weight_of(1, True), term.weight_of(2, False), term.weight_of(2, True)) == (1.0, 2.0, 3.0)
    assert AnalogRerank((), 1.0, 2.0).weight_of(2, True) == 2.0  # 0: the predictions take the others' weight


def test_the_undrawn_prior_spares_library_structures_drawn_or_made_by_deep_search():
    p = CandidatePool("C3H8O", [bits(PROPANOL)], StubScorer(FP), undrawn_prior=-10.0)
    p.add_known(KnownStructure(s, key(s), "C3H8O", bits(s), "bundled") for s in FP)
    p.add([(0, 0)], [PROPANOL])  # drawn
    p.add_edits([ISOPROPANOL])  # made from a drawn candidate by deep search's edits
    by = {c.smiles: c for c in p.rank()[0]}
    assert by[PROPANOL].score == pytest.approx(-1.0) and by[ISOPROPANOL].score == pytest.approx(-2.0)
    assert by[METHOXYETHANE].score == pytest.approx(-13.0) and by[METHOXYETHANE].count == 0


# -- an identification among the suspects (rank_group) ------------------------------------------------------
def identified(smiles: str, similarity: float = 0.9) -> KnownStructure:
    evidence = SpectralEvidence(similarity, 5, "REF1", "refs", identified=True)
    return KnownStructure(smiles, key(smiles), "C3H8O", bits(smiles), "refs", spectral=evidence)


def test_the_analog_term_ranks_an_identification_with_the_suspects_by_score():
    p = pool(FP, suspects=[PROPANOL, ISOPROPANOL], samples=[PROPANOL])
    p.add_known([identified(METHOXYETHANE)])
    assert order(p) == [METHOXYETHANE, PROPANOL, ISOPROPANOL]  # no analog term: the identification first
    ranked, _ = p.rank(ranking="fingerprint")
    assert [c.rank_group for c in ranked] == [0, 1, 1]
    # its reference resembles propanol's spectra: propanol -1 + 10 · 1 = 9 leads; methoxyethane -3 + 10 · T
    p.analogs = analogs(10.0, (PROPANOL, 1.0))
    ranked, _ = p.rank(ranking="fingerprint")
    assert [c.smiles for c in ranked] == [PROPANOL, ISOPROPANOL, METHOXYETHANE]
    assert [c.rank_group for c in ranked] == [1, 1, 1] and ranked[2].identified
    assert ranked[2].score == pytest.approx(-3.0 + 10.0 * chem.tanimoto(bits(PROPANOL), bits(METHOXYETHANE)))
    # the identification's own reference among the analog hits lifts it above the suspects
    p.analogs = analogs(10.0, (PROPANOL, 0.5), (METHOXYETHANE, 0.9))
    assert order(p)[0] == METHOXYETHANE
    # the frequency ranking weighs no analog score: the identification first again
    assert order(p, ranking="frequency")[0] == METHOXYETHANE
    p.analogs = analogs(10.0, (PROPANOL, 1.0))
    assert order(p, ranking="frequency")[0] == METHOXYETHANE


def test_an_identification_still_ranks_above_every_prediction():
    p = pool({**FP, METHOXYETHANE: -50.0}, samples=[PROPANOL, ISOPROPANOL])
    p.add_known([identified(METHOXYETHANE)])
    p.analogs = analogs(10.0, (PROPANOL, 1.0))
    ranked, _ = p.rank(ranking="fingerprint")
    assert [c.smiles for c in ranked] == [METHOXYETHANE, PROPANOL, ISOPROPANOL]
    assert [c.rank_group for c in ranked] == [1, 2, 2]


def test_rank_group():
    assert [rank_group(*flags) for flags in ((True, False, False), (True, True, False), (True, False, True),
                                             (False, True, False), (False, True, True), (False, False, True),
                                             (False, False, False))] == [0, 0, 1, 1, 1, 2, 2]
