"""Density band calibration and query construction against hand-computed values."""

import numpy as np
import pytest

from engine.errors import BundleError, ConfigError
from engine.querying import Calibration, band_thresholds, build_queries, threshold_query

# A(t) on a coarse grid: D_enc = 50 bits
CAL = Calibration(d_enc=50.0, thresholds=np.array([0.0, 0.1, 0.2, 0.3, 0.4]),
                  active_counts=np.array([100.0, 80.0, 50.0, 40.0, 10.0]))


@pytest.mark.parametrize(
    "kappa, expected",
    [
        (1.0, 0.2),                              # A(0.2) = 50 exactly
        (1.5, 0.1 + (80 - 75) / 30 * 0.1),       # 75 bits: between 80 (t=.1) and 50 (t=.2)
        (0.5, 0.3 + (40 - 25) / 30 * 0.1),       # 25 bits: between 40 (t=.3) and 10 (t=.4)
        (3.0, 0.0),                              # 150 bits: above A(0) -> first grid point
        (0.1, 0.4),                              # 5 bits: below A(last) -> last grid point
    ],
)
def test_threshold_for_kappa_inverts_A(kappa, expected):
    assert CAL.threshold_for_kappa(kappa) == pytest.approx(expected)


def test_inverse_round_trip_on_curve():
    for kappa in (0.9, 1.0, 1.2, 1.5):
        t = CAL.threshold_for_kappa(kappa)
        assert CAL.active_bits_at(t) == pytest.approx(kappa * CAL.d_enc)


def test_band_thresholds_interpolate_linearly_from_dense_to_sparse():
    t = band_thresholds(CAL, 1.0, 1.5, 3)
    t_dense = 0.1 + 5 / 30 * 0.1
    assert t == pytest.approx([t_dense, (t_dense + 0.2) / 2, 0.2])


def test_point_query_is_one_threshold():
    assert band_thresholds(CAL, 1.0, 1.0, 1) == pytest.approx([0.2])


@pytest.mark.parametrize(
    "args, match",
    [
        ((1.5, 1.0, 5), "must not exceed"),
        ((0.95, 1.5, 1), "point query at a single κ"),
        ((0.95, 1.5, 0), "positive integer"),
        ((0.0, 1.5, 5), "`kappa_min` must be a density ratio"),
        ((0.95, float("nan"), 5), "`kappa_max` must be a density ratio"),
    ],
)
def test_band_rejects_bad_parameters(args, match):
    with pytest.raises(ConfigError, match=match):
        band_thresholds(CAL, *args)


def test_from_posteriors_hand_computed():
    post = np.array([[0.9, 0.5, 0.1], [0.6, 0.05, 0.0]])
    cal = Calibration.from_posteriors(post, [2, 1], grid=np.array([0.0, 0.3, 0.7]))
    assert cal.d_enc == 1.5
    assert cal.active_counts == pytest.approx([2.5, 1.5, 0.5])  # strict π > t
    assert cal.n_spectra == 2


def test_calibration_round_trip(tmp_path):
    CAL.save(tmp_path / "calibration.json")
    back = Calibration.load(tmp_path / "calibration.json")
    assert back.d_enc == CAL.d_enc
    assert np.allclose(back.thresholds, CAL.thresholds)
    assert np.allclose(back.active_counts, CAL.active_counts)


@pytest.mark.parametrize(
    "d, match",
    [
        ({"format_version": 99, "d_enc": 1, "thresholds": [0, 1], "active_counts": [1, 0]}, "newer"),
        ({"d_enc": 1, "thresholds": [0, 1]}, "lacks active_counts"),
        ({"d_enc": 1, "thresholds": [0, 1], "active_counts": [1, 2]}, "non-increasing"),
        ({"d_enc": -3, "thresholds": [0, 1], "active_counts": [1, 0]}, "positive"),
    ],
)
def test_bad_calibration_files(tmp_path, d, match):
    import json

    (tmp_path / "c.json").write_text(json.dumps(d))
    with pytest.raises(BundleError, match=match):
        Calibration.load(tmp_path / "c.json")


def test_threshold_query_is_strict():
    assert threshold_query(np.array([0.2, 0.5, 0.2001]), 0.2).tolist() == [1, 2]


def test_build_queries_merges_identical_fingerprints():
    post = np.array([0.9, 0.5, 0.1, 0.3])
    queries = build_queries(post, [0.2, 0.25, 0.4, 0.6])
    assert [q.bits.tolist() for q in queries] == [[0, 1, 3], [0, 1], [0]]
    assert [q.threshold_indices for q in queries] == [(0, 1), (2,), (3,)]
