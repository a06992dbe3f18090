"""The checks of training.studies.encoder_headroom on arrays small enough to work out by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.errors import ConfigError
from training.studies.encoder_headroom import (
    IsomerIndex,
    base_rates,
    combine,
    dense_rows,
    density_fidelity,
    fit_bit_count,
    format_table,
    headroom,
    predict_bit_count,
    retrieval_mean,
    smoothed_mean,
    tanimoto_rows,
    top_n,
)


def _formula(c, h, n=0, o=0):
    f = np.zeros(14, np.int64)
    f[:4] = (c, h, n, o)
    return f


def _flat(fingerprints):
    bits = np.concatenate([np.asarray(b, np.uint16) for b in fingerprints])
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in fingerprints])]).astype(np.int64)
    return bits, offsets


def test_isomer_index_finds_exact_formulas_only():
    forms = np.stack([_formula(2, 6, 0, 1), _formula(3, 8), _formula(2, 6, 0, 1), _formula(2, 6)])
    index = IsomerIndex(forms)
    assert sorted(index.rows(_formula(2, 6, 0, 1)).tolist()) == [0, 2]
    assert index.rows(_formula(2, 6)).tolist() == [3]
    assert index.rows(_formula(9, 9)).tolist() == []


def test_dense_rows_base_rates_and_the_smoothed_mean_by_hand():
    bits, offsets = _flat([[0, 2], [2], [1, 2, 3]])
    fps = dense_rows(bits, offsets, np.array([2, 0]), 4)
    assert fps.tolist() == [[0, 1, 1, 1], [1, 0, 1, 0]]
    base = base_rates(bits, 3, 4)
    assert base.tolist() == pytest.approx([1 / 3, 1 / 3, 1.0, 1 / 3])
    # two isomers with bit 0 on in one: (2 * 0.5 + 2 * 1/3) / (2 + 2)
    assert smoothed_mean(fps.mean(0), 2, base, 2.0)[0] == pytest.approx((1 + 2 / 3) / 4)
    assert smoothed_mean(np.zeros(4), 0, base, 2.0).tolist() == pytest.approx(base.tolist())
    with pytest.raises(ConfigError, match="alpha"):
        smoothed_mean(fps.mean(0), 2, base, 0.0)
    with pytest.raises(ConfigError, match="no records"):
        base_rates(bits, 0, 4)


def test_combine_is_the_posterior_at_weight_zero_and_adds_the_prior_evidence_in_logits():
    post = np.array([[0.2, 0.7, 0.5]])
    base = np.array([0.1, 0.1, 0.5])
    prior = np.array([[0.1, 0.5, 0.9]])
    assert combine(post, prior, base, 0.0) == pytest.approx(post)
    out = combine(post, prior, base, 1.0)
    assert out[0, 0] == pytest.approx(0.2)  # the prior says no more than the base rate
    odds = (0.7 / 0.3) * (0.5 / 0.5) / (0.1 / 0.9)
    assert out[0, 1] == pytest.approx(odds / (1 + odds))
    assert out[0, 2] == pytest.approx(0.9)  # posterior even odds, prior 9:1 against a base of 1:1


def test_retrieval_weights_follow_the_likelihood_under_the_posterior():
    fps = np.array([[1, 0, 1, 0], [0, 1, 0, 1]], np.float32)
    post = np.array([0.9, 0.1, 0.9, 0.1])
    assert retrieval_mean(post, fps, 1e-3) == pytest.approx(fps[0], abs=1e-6)
    assert retrieval_mean(post, fps, 1e9) == pytest.approx(fps.mean(0), abs=1e-6)
    with pytest.raises(ConfigError, match="temperature"):
        retrieval_mean(post, fps, 0.0)


def test_tanimoto_top_n_and_density_fidelity_by_hand():
    q = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]], bool)
    t = np.array([[1, 0, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0]], bool)
    assert tanimoto_rows(q, t).tolist() == pytest.approx([1 / 3, 0.0, 1.0])
    post = np.array([[0.1, 0.9, 0.5, 0.3], [0.4, 0.2, 0.6, 0.8]])
    assert top_n(post, np.array([2, 1])).tolist() == [[False, True, True, False], [False, False, False, True]]
    assert top_n(post, np.array([0, 0])).sum(1).tolist() == [1, 1]  # never an empty query
    targets = np.array([[0, 1, 1, 0], [0, 0, 1, 1]], bool)
    assert density_fidelity(post, targets) == pytest.approx(1.0)


def _spectra(roots, truths, n_bits):
    formulas = np.stack(roots)  # one token (the root) per spectrum
    dense = np.zeros((len(truths), n_bits), bool)
    for i, b in enumerate(truths):
        dense[i, b] = True
    return SimpleNamespace(
        formulas=formulas,
        token_offsets=np.arange(len(roots) + 1),
        inchikey14=np.array([f"K{i}" for i in range(len(roots))]),
        targets=lambda rows: dense[rows],
    )


def test_headroom_rows_on_a_corpus_that_holds_the_answer_among_isomers():
    n_bits = 8
    truths = [[0, 1, 2], [4, 5]]
    data = _spectra([_formula(6, 6), _formula(2, 6, 0, 1)], truths, n_bits)
    # the first formula has two isomers, one of them the answer; the second formula has none
    bits, offsets = _flat([[0, 1, 2], [0, 6, 7], [3, 4]])
    corpus = {"bits": bits, "offsets": offsets, "formula": np.stack([_formula(6, 6), _formula(6, 6), _formula(3, 3)])}
    post = np.full((2, n_bits), 0.05)
    post[0, [0, 1, 2]] = 0.8
    post[1, [4, 5, 6]] = (0.9, 0.6, 0.7)
    out = headroom(post, data, np.array([0.5, 0.5]), corpus, weights=(0.5,), mixes=(0.25,))
    rows = out["rows"]
    assert rows["encoder, calibrated t(κ=1)"] == pytest.approx((1.0 + 2 / 3) / 2, abs=1e-4)
    assert rows["encoder, top-n with the true n"] == pytest.approx((1.0 + 1 / 3) / 2, abs=1e-4)
    assert out["query_bits"] == 3.0 and out["true_bits"] == 2.5
    assert out["with_isomer"] == 0.5 and out["median_isomers"] == 1.0
    assert out["closest_isomer_tanimoto"] == 1.0
    assert set(rows) == {"encoder, calibrated t(κ=1)", "encoder, density-matched t", "encoder, top-n with the true n",
                         "encoder, top-n with n predicted from the formula", "formula prior alone", "encoder + prior, w=0.5", "isomer retrieval alone, T=30",
                         "(1-a)·encoder + a·retrieval, a=0.25"}  # fmt: skip
    table = format_table({"modes": {"positive": out}})
    assert "| formula prior alone |" in table and "50.0% have an isomer" in table


def test_cli_names_a_missing_calibration(tmp_path, capsys):
    from training.studies.encoder_headroom import main

    rc = main(["--mgf", "x.mgf", "--encoder", str(tmp_path), "--corpus", "c", "--out", str(tmp_path / "o.json")])
    assert rc == 2 and "has no calibration.json" in capsys.readouterr().err


def test_bit_count_fit_recovers_a_size_law_and_never_predicts_an_empty_query():
    forms = np.stack([_formula(c, 2 * c, n, o) for c in range(2, 30, 3) for n in (0, 1, 2) for o in (0, 3)])
    heavy = forms.sum(1) - forms[:, 1]
    counts = 3 + 2 * heavy + forms[:, 2]
    w = fit_bit_count(forms, counts)
    assert predict_bit_count(w, forms).tolist() == counts.tolist()
    assert predict_bit_count(np.zeros_like(w), forms[:2]).tolist() == [1, 1]
