"""Bit-level metrics against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ConfigError
from training.core.metrics import (
    auroc,
    average_precision,
    bit_metrics,
    dense_targets,
    density_matched_threshold,
    macro_auroc,
    macro_average_precision,
    mean_active_bits,
    mean_tanimoto,
    tanimoto_at,
)


@pytest.mark.parametrize(
    "scores, labels, expected",
    [
        # 4 pairs (pos, neg): 0.35 < 0.4 is the one wrong pair -> 3/4
        ([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], 0.75),
        ([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0], 1.0),
        ([0.1, 0.2, 0.9, 0.8], [1, 1, 0, 0], 0.0),
        ([0.5, 0.5], [0, 1], 0.5),  # a tie counts one half
        # pairs: (0.7 vs 0.7) tie 0.5, (0.7 vs 0.2) 1, (0.3 vs 0.7) 0, (0.3 vs 0.2) 1 -> 2.5 / 4
        ([0.7, 0.3, 0.7, 0.2], [1, 1, 0, 0], 0.625),
    ],
)
def test_auroc_hand_computed(scores, labels, expected):
    assert auroc(np.array(scores), np.array(labels)) == pytest.approx(expected)


@pytest.mark.parametrize(
    "scores, labels, expected",
    [
        # ranked 0.8(+) 0.4(-) 0.35(+) 0.1(-): precision at the positives 1/1, 2/3 -> (1 + 2/3) / 2
        ([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], (1 + 2 / 3) / 2),
        ([0.9, 0.8, 0.1], [1, 1, 0], 1.0),
        # ranked 0.9(-) 0.5(+) 0.1(+): precisions 1/2, 2/3 -> (1/2 + 2/3) / 2
        ([0.5, 0.9, 0.1], [1, 0, 1], (1 / 2 + 2 / 3) / 2),
        # a tied pair enters at once: threshold 0.5 gives precision 1/2, recall 1
        ([0.5, 0.5], [0, 1], 0.5),
    ],
)
def test_average_precision_hand_computed(scores, labels, expected):
    assert average_precision(np.array(scores), np.array(labels)) == pytest.approx(expected)


def test_single_class_is_nan():
    assert np.isnan(auroc(np.array([0.1, 0.2]), np.array([1, 1])))
    assert np.isnan(average_precision(np.array([0.1, 0.2]), np.array([0, 0])))


def test_tanimoto_and_active_bits():
    post = np.array([[0.9, 0.6, 0.2, 0.0], [0.1, 0.1, 0.1, 0.1], [0.5, 0.51, 0.0, 0.0]])
    true = dense_targets([np.array([1, 2]), np.array([], dtype=np.int64), np.array([1])], 4)
    # row 0: P = {0, 1}, T = {1, 2} -> 1/3; row 1: both empty -> 0; row 2: 0.5 is not > 0.5 -> {1} vs {1} = 1
    np.testing.assert_allclose(tanimoto_at(post, true, 0.5), [1 / 3, 0.0, 1.0])
    assert mean_tanimoto(post, true) == pytest.approx((1 / 3 + 1) / 3)
    assert mean_active_bits(post, 0.5) == pytest.approx((2 + 0 + 1) / 3)
    assert mean_active_bits(post, 0.05) == pytest.approx((3 + 4 + 2) / 3)


def test_macro_skips_bits_with_one_class():
    post = np.array([[0.9, 0.2, 0.3], [0.1, 0.8, 0.4], [0.6, 0.7, 0.5]])
    true = np.array([[1, 0, 1], [0, 1, 1], [0, 0, 1]])  # bit 2 is always on: skipped
    # bit 0: positive 0.9 vs negatives 0.1, 0.6 -> AUROC 1, AP 1
    # bit 1: positive 0.8 vs negatives 0.2, 0.7 -> AUROC 1, AP 1
    assert macro_auroc(post, true) == pytest.approx(1.0)
    assert macro_average_precision(post, true) == pytest.approx(1.0)
    true[2, 0] = 1  # bit 0: positives 0.9, 0.6 vs negative 0.1 -> still 1; AP 1
    true[0, 1] = 1  # bit 1: positives 0.2, 0.8 vs negative 0.7 -> AUROC 1/2; AP: 0.8(+) 0.7(-) 0.2(+) -> (1 + 2/3)/2
    assert macro_auroc(post, true) == pytest.approx((1.0 + 0.5) / 2)
    assert macro_average_precision(post, true) == pytest.approx((1.0 + (1 + 2 / 3) / 2) / 2)


def test_bit_metrics_micro_pools_all_pairs():
    post = np.array([[0.1, 0.4], [0.35, 0.8]])
    true = np.array([[0, 0], [1, 1]])
    m = bit_metrics(post, true)
    assert m["auroc_micro"] == pytest.approx(0.75)
    assert m["ap_micro"] == pytest.approx((1 + 2 / 3) / 2)
    assert m["active_bits_true"] == pytest.approx(1.0)
    assert m["active_bits_pred"] == pytest.approx(0.5)
    assert m["n_spectra"] == 2


def test_shape_mismatch_is_refused():
    with pytest.raises(ConfigError, match="same shape"):
        bit_metrics(np.zeros((2, 3)), np.zeros((2, 4)))


def test_density_matched_threshold():
    post = np.array([[0.9, 0.6, 0.2, 0.0], [0.8, 0.1, 0.1, 0.1]])
    t = density_matched_threshold(post, 1.5)  # 3 bits in all: 0.9, 0.8, 0.6
    assert 0.2 <= t < 0.6
    assert mean_active_bits(post, t) == pytest.approx(1.5)
    assert density_matched_threshold(post, 0.0) == 1.0
    assert density_matched_threshold(post, 4.0) == 0.0
