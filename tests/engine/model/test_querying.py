"""Density band calibration and query construction against hand-computed values."""

import numpy as np
import pytest

from engine.errors import BundleError, ConfigError
from engine.model.querying import Calibration, band_thresholds, build_queries, threshold_query

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


# -- query plans ----------------------------------------------------------------------------------------
def test_outer_band_kappas_stay_outside_the_band():
    from engine.model.querying import outer_band_kappas

    k = outer_band_kappas(np.random.default_rng(0), 400, 0.95, 1.5)
    assert len(k) == 400 and np.all(np.diff(k) >= 0)
    assert np.all(((k >= 0.5) & (k < 0.95)) | ((k > 1.5) & (k <= 2.0)))
    # uniform over the outside: 0.45 of its 0.95 width lies below the band
    assert np.mean(k < 0.95) == pytest.approx(0.45 / 0.95, abs=0.08)
    again = outer_band_kappas(np.random.default_rng(0), 400, 0.95, 1.5)
    assert np.array_equal(k, again)
    with pytest.raises(ConfigError, match="covers the whole κ range"):
        outer_band_kappas(np.random.default_rng(0), 4, 0.5, 2.0)


def test_query_plans_build_their_queries():
    from engine.model.querying import QueryPlan

    post = np.array([0.9, 0.5, 0.2, 0.05])
    plan = QueryPlan("p", thresholds=(0.4, 0.3, 0.1))
    assert [(q.bits.tolist(), q.threshold_indices) for q in plan.queries(post)] == [([0, 1], (0, 1)), ([0, 1, 2], (2,))]
    assert plan.groups == 3
    oracle = QueryPlan.oracle(np.array([7, 3, 3]))
    assert oracle.fingerprint == (3, 7) and oracle.groups == 1
    assert [(q.bits.tolist(), q.threshold_indices) for q in oracle.queries(post)] == [([3, 7], (0,))]
    cal = Calibration(d_enc=5.0, thresholds=np.array([0.0, 1.0]), active_counts=np.array([10.0, 0.0]))
    at = QueryPlan.at_kappas(cal, [1.0, 1.6], "k")
    assert at.thresholds == pytest.approx((0.5, 0.2)) and at.kappas == (1.0, 1.6)
    outer = QueryPlan.outer_band(cal, np.random.default_rng(1), 5, 0.95, 1.5)
    assert outer.name == "outer" and len(outer.thresholds) == 5
    assert all(k < 0.95 or k > 1.5 for k in outer.kappas)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(thresholds=(0.5,), fingerprint=(1,)), "either `thresholds` or a `fingerprint`"),
        (dict(), "either `thresholds` or a `fingerprint`"),
        (dict(thresholds=(1.5,)), "Thresholds must be numbers in \\[0, 1\\], got \\[1.5\\]"),
        (dict(fingerprint=(-1, 4)), "bit indices must be ≥ 0, got -1"),
    ],
)
def test_bad_query_plans(kwargs, match):
    from engine.model.querying import QueryPlan

    with pytest.raises(ConfigError, match=match):
        QueryPlan("bad", **kwargs)
