"""How sure an answer is, in the words chemists report it: the identification level of Schymanski et al.
(Environ. Sci. Technol. 2014, 48, 2097), and each candidate's rank over all formulas and origins of its feature.

=====  =====================================================================================================
level  when
=====  =====================================================================================================
2a     rank 1 is identified by a reference spectrum: an identity match (precursor within 0.01 Da, same ion
       type) passing the calibrated rule (:class:`engine.spectral_library.identity.IdentityRule`: its probability of
       being the query's structure, :mod:`engine.elucidation.libraries`), and no reference of
       another structure of its formula within :data:`engine.spectral_library.identity.ISOMER_WINDOW` of its
       similarity among the search's hits
2b     rank 1 comes from a suspect list and its confidence (:mod:`engine.model.suspect_confidence`: how its
       fragment, analog and fingerprint evidence set it apart from the list's other structures of its formula)
       reaches the probability the fit chose for a precision of 90%, read at an even share of the list's matches
       present whatever share the user states (``SpectrumResult.level_2b``): probable structure by diagnostic
       evidence, no reference spectrum
3      tentative candidates: structures ranked by the predicted fingerprint (de novo, from a library or a
       suspect list below level 2b), a reference spectrum too weak to identify, or a reference spectrum match whose
       isomer's reference is nearly as similar (identified or not; the level's text names it: "or its isomer X,
       similarity 0.93")
4      no structure, but a molecular formula
5      neither: an exact mass of interest
=====  =====================================================================================================

Level 1 needs a reference standard measured in the same lab, which no software can claim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.elucidation.pipeline import SpectrumResult
from engine.spectral_library.identity import CloseIsomer, close_isomers


@dataclass(frozen=True)
class IdentificationLevel:
    code: str  # "2a", "2b", "3", "4", "5"
    text: str  # one line a chemist can report
    isomers: tuple[CloseIsomer, ...] = ()  # isomers nearly as similar as an identification's reference (level 3)

    def __str__(self) -> str:
        return f"level {self.code}: {self.text}"


def identification_level(results: Sequence[SpectrumResult]) -> IdentificationLevel:
    """The level of a feature's results (one per formula run; the best answer decides)."""
    firsts = [(r.candidates[0], formula_log_probability(r), r) for r in results if r.candidates]
    # the feature's rank 1 (feature_ranks)
    best, _, result = min(firsts, key=lambda clr: _feature_key(clr[0], clr[1])) if firsts else (None, 0.0, None)
    if best is not None and best.identified:
        ev = best.spectral
        match = (f"reference spectrum match, entropy similarity {ev.similarity:.2f} with {ev.matched_peaks} matched "
                 f"peaks ({ev.accession}, {ev.library})")
        isomers = close_isomers(result.spectral_matches)
        if isomers:
            return IdentificationLevel("3", f"{match}, {'; '.join(i.text() for i in isomers)}: the library holds "
                                            "isomers whose spectra it cannot tell apart", tuple(isomers))
        return IdentificationLevel("2a", match)
    if best is not None and result.level_2b and best is result.candidates[0]:
        name = best.compound_name or best.library_id or best.smiles
        return IdentificationLevel("2b", f"suspect list match {name}: its fragments and analog evidence set it apart "
                                         f"from the list's other structures of its formula (confidence "
                                         f"{result.confidence:.0%}), no reference spectrum")
    if any(r.candidates for r in results):
        ambiguous = _ambiguous_match(result)
        if ambiguous is not None:
            return ambiguous
        return IdentificationLevel("3", "tentative candidates ranked by the predicted fingerprint")
    if any(r.spectrum.formula for r in results):
        return IdentificationLevel("4", "molecular formula, no structure")
    return IdentificationLevel("5", "exact mass only")


def _ambiguous_match(result: SpectrumResult | None) -> IdentificationLevel | None:
    """Level 3 naming the isomers when the rank-1 identity hit of ``result``'s search (of its ion type, similarity at
    least the identification rule's floor) is not an identification and references of its isomers match nearly as
    well: the library holds the structure, but cannot say which of them the query is; None otherwise."""
    from engine.elucidation.libraries import is_identification
    from engine.spectral_library.search import AnswerThreshold, default_threshold

    matches = None if result is None else result.spectral_matches
    if matches is None or not matches.hits:
        return None
    first = matches.hits[0]
    floor = default_threshold()
    if not (floor.accepts(first) and is_identification(matches, first, result.spectrum.adduct, AnswerThreshold(0.0, 0))):
        return None
    isomers = close_isomers(matches)
    if not isomers:
        return None
    ref = first.reference
    return IdentificationLevel("3", f"reference spectrum match {ref.name or ref.inchikey14}, entropy similarity "
                                    f"{first.similarity:.2f} with {first.matched_peaks} matched peaks ({ref.accession}, "
                                    f"{ref.library}), {'; '.join(i.text() for i in isomers)}: not identified, the "
                                    "library holds isomers whose spectra it cannot tell apart", tuple(isomers))


#: Weight of a run's formula log-probability in the feature's ranking: a candidate of the rest (rank group 2) ranks by
#: ``score + FORMULA_WEIGHT · log max(P(formula), FORMULA_FLOOR)``. Fingerprint scores of different formulas differ by
#: tens of nats (each under its own formula's posterior; a small formula scores higher), so on their own they put a
#: structure of an improbable formula first. On 409 FOLD=val spectra without a given formula
#: (training/studies/feature_formula_weight.py, docs/evidence/feature_formula_weight.md) a weight of 16 left the
#: feature Top-1 / Top-5 / Top-10 of the truth as they were (10.0 / 15.4 / 16.4% with 0, 16.6% Top-10 with 16) and
#: put rank 1 on the true formula for 80.0% of them instead of 65.8%, on a formula of P < 0.05 for 2.2% instead of
#: 18.8%; 32 began to lose the truth, formula order (P first) lost Top-1 (9.0%).
FORMULA_WEIGHT = 16.0
#: The smallest probability the term uses: ``formula_score`` is written with 4 decimals (a smaller one reads 0.0000).
FORMULA_FLOOR = 1e-4


def formula_log_probability(result: SpectrumResult) -> float:
    """``log max(P(formula), FORMULA_FLOOR)`` of one formula run of a feature: its ``formula_score`` for a ranked
    formula candidate; the floor for a run the libraries add (``formula_source`` set, no probability: the mass track
    of the structure libraries, the formula of an identification), which the formula ranking did not propose (the
    study measured this rule and the formula table's own probability of such formulas alike; the probability of the
    best formula instead put rank 1 on the true formula less often, 74.1% against 80.0%); 0 for a given formula."""
    md = result.spectrum.metadata
    score = md.get("formula_score", "")
    if score not in (None, ""):
        try:
            return math.log(max(float(score), FORMULA_FLOOR))
        except ValueError:
            pass
    return math.log(FORMULA_FLOOR) if md.get("formula_source") else 0.0


def _feature_key(c, log_p: float = 0.0) -> tuple[int, float]:
    group = c.rank_group
    if group == 0:
        return (0, -c.spectral.similarity)
    if c.score != c.score:
        return (group, float("inf"))  # nan (no posterior): last
    return (group, -(c.score + FORMULA_WEIGHT * log_p) if group == 2 else -c.score)


def feature_ranks(results: Sequence[SpectrumResult], top: int | None = None) -> list[list[int]]:
    """For each result of one feature (its formula runs, in formula order), the feature rank of each of its first
    ``top`` candidates in the groups of :func:`engine.elucidation.ranking.rank_group`: identifications ranked
    first outright (most similar reference first), then the structures of suspect lists (with the identifications
    the analog term scored), by the ranking's score whatever their formula, then every other candidate by the
    ranking's score plus ``FORMULA_WEIGHT`` times its formula's log-probability (:func:`formula_log_probability`)
    (ties: formula order, then rank). 1 is the feature's best answer.

    Scores of different formulas alone are not comparable (tens of nats apart; a structure of a formula of
    P < 0.005 came first on a Q Exactive feature, the P = 0.99 formula's best at rank 122): the formula term keeps
    a structure of an improbable formula under those of a probable one unless it scores far better, measured on
    409 FOLD=val spectra (``FORMULA_WEIGHT``). The suspects keep their score alone: a suspect list is matched by
    mass, and its structures of a formula the formula ranking missed (the mass track) are what the list is for;
    no suspect list was measured."""
    shown = [list(r.candidates[:top]) for r in results]
    log_p = [formula_log_probability(r) for r in results]
    order = [(i, j) for i, cands in enumerate(shown) for j in range(len(cands))]
    # stable: ties keep formula and rank order
    order.sort(key=lambda ij: _feature_key(shown[ij[0]][ij[1]], log_p[ij[0]]))
    ranks = [[0] * len(cands) for cands in shown]
    for k, (i, j) in enumerate(order, start=1):
        ranks[i][j] = k
    return ranks
