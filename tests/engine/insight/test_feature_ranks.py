"""A feature's ranking over its formula runs: the formula's probability weighs in (FORMULA_WEIGHT)."""

import math
from types import SimpleNamespace

import numpy as np

from engine.elucidation.ranking import Candidate
from engine.insight.identification import (
    FORMULA_FLOOR,
    FORMULA_WEIGHT,
    feature_ranks,
    formula_log_probability,
)


def cand(key: str, formula: str, score: float, suspect: bool = False) -> Candidate:
    return Candidate(rank=1, smiles="C", inchikey="", inchikey14=key, formula=formula, count=1, frequency=0.01,
                     posterior_similarity=0.0, bits=np.zeros(0, dtype=np.int64), score=score, suspect=suspect)


def run(formula: str, probability: str | None, *cands: Candidate, source: str = "ranked candidates"):
    """A formula run as feature_ranks reads it: its spectrum's metadata and its candidates."""
    md = {} if probability is None and not source else {"formula_score": probability or "", "formula_source": source}
    return SimpleNamespace(spectrum=SimpleNamespace(formula=formula, metadata=md), candidates=tuple(cands))


def test_a_candidate_of_an_improbable_formula_ranks_below_a_slightly_worse_one_of_a_probable_formula():
    improbable = run("C20H16F2", "0.0010", cand("IMPROBABLE", "C20H16F2", -100.0))
    probable = run("C14H18N2O5", "0.9900", cand("PROBABLE", "C14H18N2O5", -100.5))
    assert feature_ranks([improbable, probable]) == [[2], [1]]
    assert feature_ranks([probable, improbable]) == [[1], [2]]
    # a term, not formula order: a structure that scores far better still comes first
    far = run("C20H16F2", "0.0010", cand("FAR", "C20H16F2", -100.5 + FORMULA_WEIGHT * math.log(990) + 1.0))
    assert feature_ranks([probable, far]) == [[2], [1]]


def test_the_formula_term_of_ranked_library_added_and_given_formula_runs():
    assert formula_log_probability(run("C6H6", "0.5000")) == math.log(0.5)
    assert formula_log_probability(run("C6H6", "0.0000")) == math.log(FORMULA_FLOOR)  # written with 4 decimals
    assert formula_log_probability(run("C6H6", None, source="structure library (mass)")) == math.log(FORMULA_FLOOR)
    assert formula_log_probability(run("C6H6", None, source="")) == 0.0  # a given formula: no term


def test_suspects_keep_their_score_alone_and_rank_before_the_rest():
    improbable = run("C20H16F2", "0.0010", cand("SUSPECT", "C20H16F2", -100.0, suspect=True),
                     cand("REST1", "C20H16F2", -90.0))
    probable = run("C14H18N2O5", "0.9900", cand("SUSPECT2", "C14H18N2O5", -100.5, suspect=True),
                   cand("REST2", "C14H18N2O5", -95.0))
    assert feature_ranks([improbable, probable]) == [[1, 4], [2, 3]]
