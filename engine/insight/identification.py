"""How sure an answer is, in the words chemists report it: the identification level of Schymanski et al.
(Environ. Sci. Technol. 2014, 48, 2097), and each candidate's rank over all formulas and origins of its feature.

=====  =====================================================================================================
level  when
=====  =====================================================================================================
2a     rank 1 is identified by a reference spectrum: an identity match (precursor within 0.01 Da, same ion
       type) passing the calibrated threshold (:mod:`engine.elucidation.libraries`)
3      tentative candidates: structures ranked by the predicted fingerprint (de novo, from a library or a
       suspect list), or a reference spectrum too weak to identify
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


@dataclass(frozen=True)
class IdentificationLevel:
    code: str  # "2a", "3", "4", "5"
    text: str  # one line a chemist can report

    def __str__(self) -> str:
        return f"level {self.code}: {self.text}"


def identification_level(results: Sequence[SpectrumResult]) -> IdentificationLevel:
    """The level of a feature's results (one per formula run; the best answer decides)."""
    firsts = [(r.candidates[0], formula_log_probability(r)) for r in results if r.candidates]
    best = min(firsts, key=lambda cl: _feature_key(*cl))[0] if firsts else None  # the feature's rank 1 (feature_ranks)
    if best is not None and best.identified:
        ev = best.spectral
        return IdentificationLevel("2a", f"reference spectrum match, entropy similarity {ev.similarity:.2f} with "
                                         f"{ev.matched_peaks} matched peaks ({ev.accession}, {ev.library})")
    if any(r.candidates for r in results):
        return IdentificationLevel("3", "tentative candidates ranked by the predicted fingerprint")
    if any(r.spectrum.formula for r in results):
        return IdentificationLevel("4", "molecular formula, no structure")
    return IdentificationLevel("5", "exact mass only")


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
