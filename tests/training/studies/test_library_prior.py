"""training.studies.library_prior: how it ranks a collected pool in each setting, and its choice."""

from __future__ import annotations

import math

import numpy as np
import pytest

from training.studies import library_prior as lp


def rec(cands, truth="T", truth_fp=-5.0, fold="train", key="x"):
    return {"key": key, "fold": fold, "truth": truth, "truth_fp": truth_fp,
            "candidates": [dict(zip(("k", "n", "fp", "lib", "id"), c)) for c in cands]}


def test_hit_puts_the_first_group_first_and_counts_ties():
    scores = np.array([1.0, 5.0, 1.0, 0.0])
    first = np.array([False, False, False, True])
    assert lp.hit(scores, first, 0, 2) == 0.0  # behind the identified row and the 5
    assert lp.hit(scores, first, 0, 3) == pytest.approx(0.5)  # tied with row 2 for place 3
    assert lp.hit(scores, first, 3, 1) == 1.0  # an identification comes first whatever its score


def test_the_three_settings_and_the_two_scopes():
    # the truth was drawn (fp -5); a drawn library structure (-4), an undrawn one (-3), a drawn new one (-6)
    r = rec([("T", 3, -5.0, 0, 0), ("D", 2, -4.0, 1, 0), ("U", 0, -3.0, 1, 0), ("N", 1, -6.0, 0, 0)])
    top1 = lambda setting, scope, b: lp.hit(*lp.setting_arrays(r, setting, scope, b), 1)  # noqa: E731
    rank3 = lambda setting, scope, b: lp.hit(*lp.setting_arrays(r, setting, scope, b), 2)  # noqa: E731
    assert top1("off", "all", 0.0) == 0.0 and rank3("off", "all", 0.0) == 1.0  # U is not drawn: gone
    assert rank3("new", "all", 0.0) == 0.0  # U and D above the truth
    assert rank3("new", "undrawn", -2.5) == 1.0 and top1("new", "undrawn", -2.5) == 0.0  # U under, D (drawn) not
    assert top1("new", "all", -2.5) == 1.0  # both library structures under the truth
    assert top1("known", "all", -2.5) == 0.0  # the truth is held too: it takes the prior like D
    assert top1("known", "undrawn", -math.inf) == 0.0 and rank3("known", "undrawn", -math.inf) == 1.0


def test_an_undrawn_truth_is_absent_unless_known_and_a_library_holding_it_is_made_not_to():
    r = rec([("T", 0, -2.0, 1, 0), ("A", 4, -3.0, 0, 0)], truth_fp=-2.0)
    assert lp.setting_arrays(r, "off", "all", 0.0) is None and lp.setting_arrays(r, "new", "all", 0.0) is None
    scores, first, truth = lp.setting_arrays(r, "known", "undrawn", -4.0)
    assert scores[truth] == pytest.approx(-6.0) and lp.hit(scores, first, truth, 1) == 0.0
    absent = rec([("A", 4, -3.0, 0, 0)], truth_fp=-1.0)  # the truth the library holds, not in the pool: added
    scores, first, truth = lp.setting_arrays(absent, "known", "all", 0.0)
    assert scores[truth] == pytest.approx(-1.0) and lp.hit(scores, first, truth, 1) == 1.0
    assert lp.setting_arrays(rec([("A", 4, -3.0, 0, 0)], truth_fp=math.nan), "known", "all", 0.0) is None


def test_identifications_come_first_except_with_the_libraries_off():
    r = rec([("T", 3, -5.0, 0, 0), ("I", 0, -50.0, 1, 1)])
    assert lp.hit(*lp.setting_arrays(r, "new", "all", 0.0), 1) == 0.0
    assert lp.hit(*lp.setting_arrays(r, "new", "undrawn", -math.inf), 1) == 0.0  # the reference keeps them
    assert lp.hit(*lp.setting_arrays(r, "off", "all", 0.0), 1) == 1.0


def test_the_choice_keeps_the_de_novo_answers_then_favours_known_truths():
    # spectrum a: an undrawn look-alike 1 nat above the drawn truth; spectrum b: the truth known, undrawn, 6 nats
    # above the best drawn candidate
    a = rec([("T", 3, -5.0, 0, 0), ("U", 0, -4.0, 1, 0)], key="a")
    b = rec([("X", 5, -10.0, 0, 0)], truth_fp=-4.0, key="b")
    priors = [0.0, -2.0, -8.0, -math.inf]
    table = lp.grid([a, b], priors)
    assert table[("all", 0.0)]["new"][0, 0] == 0.0  # a: crowded at b = 0
    chosen = lp.choose(table, priors)
    # -2 and -8 keep a's new truth first; at -2 b's known truth stays first too; a's known truth (drawn) stays
    # first only when the prior spares drawn structures
    assert chosen == ("undrawn", -2.0)
    assert table[chosen]["known"][:, 0].tolist() == [1.0, 1.0]
    assert table[("all", -2.0)]["known"][:, 0].tolist() == [0.0, 1.0]
    assert lp.choose(lp.grid([a], [0.0]), [0.0]) is None  # nothing keeps the de novo answer


def test_a_pool_record_keeps_what_the_measure_needs(make_spectrum):
    from types import SimpleNamespace

    cand = lambda k, n, fp, origin, identified=False: SimpleNamespace(  # noqa: E731
        inchikey14=k, count=n, fingerprint_score=fp, origin=origin, identified=identified)
    result = SimpleNamespace(candidates=[cand("A", 3, -1.0, "de_novo"), cand("B", 0, -2.0, "structure_library"),
                                         cand("C", 0, -3.0, "spectral_library", True),
                                         cand("D", 1, float("nan"), "de_novo")])
    spectrum = make_spectrum(id="S1", source="/data/run.mgf", index=7)
    r = lp.pool_record(result, spectrum, "val", -1.5, "A")
    assert r["key"] == "run.mgf#7:S1" and r["fold"] == "val" and r["truth"] == "A" and r["truth_fp"] == -1.5
    assert [(c["k"], c["n"], c["lib"], c["id"]) for c in r["candidates"]] == [("A", 3, 0, 0), ("B", 0, 1, 0),
                                                                             ("C", 0, 1, 1)]  # D: no score


def test_the_report_names_the_choice_and_its_intervals():
    a = rec([("T", 3, -5.0, 0, 0), ("U", 0, -4.0, 1, 0)], key="a")
    b = rec([("X", 5, -10.0, 0, 0)], truth_fp=-4.0, key="b", fold="val")
    priors = [0.0, -2.0]
    records = {"train-unseen": [a], "FOLD=val": [b]}
    tables = {label: lp.grid(recs, priors) for label, recs in records.items()}
    chosen = lp.choose(tables["train-unseen"], priors)
    metrics, text = lp.report(records, tables, chosen, priors, "cmd")
    assert chosen == ("undrawn", -2.0) and "**scope undrawn, b = -2**" in text
    assert "| train-unseen | undrawn (chosen) | -2 |" in text
    assert "- FOLD=val: new Top-1" in text and metrics["chosen"] == ["undrawn", -2.0]
    assert metrics["sets"]["train-unseen"]["off"] == [1.0, 1.0, 1.0]
