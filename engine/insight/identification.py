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
    firsts = [r.candidates[0] for r in results if r.candidates]
    best = min(firsts, key=_feature_key) if firsts else None  # the feature's rank 1 (feature_ranks)
    if best is not None and best.identified:
        ev = best.spectral
        return IdentificationLevel("2a", f"reference spectrum match, entropy similarity {ev.similarity:.2f} with "
                                         f"{ev.matched_peaks} matched peaks ({ev.accession}, {ev.library})")
    if any(r.candidates for r in results):
        return IdentificationLevel("3", "tentative candidates ranked by the predicted fingerprint")
    if any(r.spectrum.formula for r in results):
        return IdentificationLevel("4", "molecular formula, no structure")
    return IdentificationLevel("5", "exact mass only")


def _feature_key(c) -> tuple[int, float]:
    group = c.rank_group
    if group == 0:
        return (0, -c.spectral.similarity)
    return (group, -c.score if c.score == c.score else float("inf"))  # nan (no posterior): last


def feature_ranks(results: Sequence[SpectrumResult], top: int | None = None) -> list[list[int]]:
    """For each result of one feature (its formula runs, in formula order), the feature rank of each of its first
    ``top`` candidates in the groups of :func:`engine.elucidation.ranking.rank_group`: identifications ranked
    first outright (most similar reference first), then the structures of suspect lists (with the identifications
    the analog term scored), then every other candidate; within the last two, by the ranking's score whatever their
    formula (ties: formula order, then rank). 1 is the feature's best answer.

    Scores of different formulas are compared as they are (each under its own formula's posterior): on 35 FOLD=val
    spectra without a given formula (benchmarks/known_compounds.py, docs/known_compounds.md) that put the truth
    first for 7 and in the top 10 for 14, against 4 and 10 in formula order."""
    shown = [list(r.candidates[:top]) for r in results]
    order = [(i, j) for i, cands in enumerate(shown) for j in range(len(cands))]
    order.sort(key=lambda ij: _feature_key(shown[ij[0]][ij[1]]))  # stable: ties keep formula and rank order
    ranks = [[0] * len(cands) for cands in shown]
    for k, (i, j) in enumerate(order, start=1):
        ranks[i][j] = k
    return ranks
