"""Fingerprint scores by hand, rankings, per-bit calibration on synthetic data, bundle round trip."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from engine.elucidation.ranking import CandidatePool
from engine.model.querying import Calibration
from engine.model.scoring import BitCalibration, FingerprintScorer, ranking_score, sort_key


def test_fingerprint_score_by_hand():
    post = np.array([0.9, 0.2, 0.5, 0.0])
    s = FingerprintScorer(post)
    # bit 3 has π = 0 and is clipped to 1e-3: a candidate with it is unlikely, not impossible
    assert s.score(np.array([0])) == pytest.approx(math.log(0.9) + math.log(0.8) + math.log(0.5) + math.log(0.999))
    assert s.score(np.array([0, 3])) == pytest.approx(math.log(0.9) + math.log(0.8) + math.log(0.5) + math.log(1e-3))
    assert s.score(np.array([], dtype=np.int64)) == pytest.approx(math.log(0.1) + math.log(0.8) + math.log(0.5)
                                                                   + math.log(0.999))


def test_ranking_scores_and_ties():
    assert ranking_score("frequency", 7, -3.0) == 7.0
    assert ranking_score("fingerprint", 7, -3.0) == -3.0
    assert ranking_score("combined", 7, -3.0) == pytest.approx(-3.0 + math.log(7))
    # frequency: ties by posterior similarity, then InChIKey; others: ties by count
    assert sort_key("frequency", 3, -1.0, 0.9, "B") < sort_key("frequency", 3, -9.0, 0.1, "A")
    assert sort_key("fingerprint", 5, -2.0, 0.0, "B") < sort_key("fingerprint", 1, -2.0, 0.9, "A")


def test_a_planted_structure_with_the_better_fingerprint_wins_over_a_frequent_one():
    from engine.chem import molecules as chem

    ethanol, dme = "CCO", "COC"
    eth_bits = chem.morgan_bits(chem.mol_from_smiles(ethanol))
    post = np.full(4096, 0.01)
    post[eth_bits] = 0.95  # the spectrum says ethanol
    pool = CandidatePool("C2H6O", [eth_bits], FingerprintScorer(post))
    import safe as sf

    samples = [sf.encode(dme, allow_empty=True)] * 8 + [sf.encode(ethanol, allow_empty=True)] * 2
    pool.add([(0, j) for j in range(10)], samples)
    by_freq, _ = pool.rank(ranking="frequency")
    by_fp, _ = pool.rank(ranking="fingerprint")
    combined, _ = pool.rank(ranking="combined")
    assert by_freq[0].smiles == dme and by_fp[0].smiles == "CCO" and combined[0].smiles == "CCO"
    assert combined[0].score == pytest.approx(combined[0].fingerprint_score + math.log(2))
    assert all(c.fingerprint_score == FingerprintScorer(post).score(c.bits) for c in combined)


def test_without_a_posterior_only_frequency_ranking():
    pool = CandidatePool("C2H6O", [np.array([1])])
    pool.add([(0, 0)], ["CCO"])
    candidates, _ = pool.rank()
    assert candidates[0].rank == 1 and math.isnan(candidates[0].fingerprint_score)
    with pytest.raises(ValueError, match="posterior"):
        pool.rank(ranking="combined")


def test_bit_calibration_recovers_an_overconfident_encoder():
    """π = σ(2·logit(q)) is twice as sure as the truth q: the fit finds slope ≈ 0.5, and the
    recalibrated probabilities have a lower log-loss than π."""
    rng = np.random.default_rng(0)
    n, n_bits = 4000, 8
    q = rng.uniform(0.02, 0.98, size=(n, n_bits))
    y = rng.random((n, n_bits)) < q
    logit = np.log(q) - np.log1p(-q)
    post = 1 / (1 + np.exp(-2 * logit))
    targets = [np.flatnonzero(row) for row in y]
    cal = BitCalibration.fit(post, targets, prior_strength=10)
    assert np.allclose(cal.slope, 0.5, atol=0.06) and np.allclose(cal.intercept, 0.0, atol=0.1)

    def nll(p):
        p = np.clip(p, 1e-6, 1 - 1e-6)
        return -np.mean(np.where(y, np.log(p), np.log1p(-p)))

    assert nll(np.stack([cal.probabilities(p) for p in post])) < nll(post) - 0.02


def test_rare_bits_keep_the_shared_scaling():
    rng = np.random.default_rng(1)
    post = rng.uniform(0.0, 0.3, size=(500, 4))
    targets = [np.array([0]) if i < 2 else np.array([1]) for i in range(500)]  # bit 0 active twice
    cal = BitCalibration.fit(post, targets, prior_strength=100)
    shared = BitCalibration.fit(post, targets, prior_strength=1e9)
    assert abs(cal.slope[0] - shared.slope[0]) < abs(cal.slope[1] - shared.slope[1]) + 1e-9


def test_calibration_json_round_trip_with_and_without_bits(tmp_path):
    base = Calibration(d_enc=30.0, thresholds=np.array([0.0, 0.5, 1.0]), active_counts=np.array([100.0, 30.0, 0.0]))
    base.save(tmp_path / "a.json")
    assert Calibration.load(tmp_path / "a.json").bits is None  # bundles from before keep loading
    bits = BitCalibration(np.array([0.5, 1.0]), np.array([-0.1, 0.2]), n_spectra=9, source="test")
    replace(base, bits=bits).save(tmp_path / "b.json")
    back = Calibration.load(tmp_path / "b.json")
    assert np.allclose(back.bits.slope, [0.5, 1.0]) and np.allclose(back.bits.intercept, [-0.1, 0.2])
    assert back.bits.n_spectra == 9 and "bit_calibration" in json.loads((tmp_path / "b.json").read_text())


def test_save_calibration_updates_the_bundle_checksum(tiny_bundle_dir, tmp_path):
    import shutil

    from engine.model.bundle import load_bundle, save_calibration

    dest = shutil.copytree(tiny_bundle_dir, tmp_path / "bundle")
    bundle = load_bundle(dest, device="cpu", precision="fp32")
    n_bits = bundle.encoder.config.fp_bits
    bits = BitCalibration(np.full(n_bits, 0.7), np.full(n_bits, -0.2), source="test")
    save_calibration(dest, replace(bundle.calibration, bits=bits))
    again = load_bundle(dest, device="cpu", precision="fp32")  # checksums verified on load
    assert again.calibration.bits is not None and np.allclose(again.calibration.bits.slope, 0.7)
