"""Negative-mode spectra end to end: a bundle whose encoder was trained on [M-H]- too runs them with the
negative-mode calibration curve; a bundle without [M-H]- keeps refusing them with a clear message."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.errors import MsgptError
from engine.model.bundle import load_bundle, save_calibration
from engine.model.querying import band_thresholds
from engine.progress import run_to_end


@pytest.fixture(scope="module")
def two_mode_bundle(tiny_bundle_dir, tmp_path_factory):
    """The tiny bundle, told it supports [M-H]- and given a negative-mode curve that differs from its own."""
    path = tmp_path_factory.mktemp("neg") / "bundle"
    shutil.copytree(tiny_bundle_dir, path)
    config = json.loads((path / "config.json").read_text())
    config["supported_adducts"] = ["[M+H]+", "[M+Na]+", "[M-H]-"]
    (path / "config.json").write_text(json.dumps(config, indent=1))
    cal = load_bundle(path, device="cpu").calibration
    negative = replace(cal, d_enc=cal.d_enc * 0.6, n_spectra=2, source="negative-mode spectra")
    save_calibration(path, replace(cal, negative=negative))
    return load_bundle(path, device="cpu", precision="fp32")


def _negative_spectrum():
    from tiny_bundle import fixture_spectra

    (spectrum, *_) = fixture_spectra(adducts=("[M-H]-",))
    assert spectrum.polarity == "negative"
    return spectrum


def test_a_negative_spectrum_uses_the_negative_mode_curve(two_mode_bundle):
    spectrum = _negative_spectrum()
    params = QueryParams(samples_per_group=1)
    session = SpectrumSession(two_mode_bundle, spectrum)
    result = run_to_end(session.run(params))
    cal = two_mode_bundle.calibration
    expected = band_thresholds(cal.negative, params.kappa_min, params.kappa_max, params.groups)
    assert np.allclose(result.thresholds, expected)
    assert not np.allclose(expected, band_thresholds(cal, params.kappa_min, params.kappa_max, params.groups))
    assert cal.for_polarity("negative").bits is cal.bits  # the per-bit recalibration is shared


def test_a_bundle_without_negative_mode_names_what_it_supports(tiny_bundle):
    with pytest.raises(MsgptError, match=r"\[M-H\]-.*\[M\+H\]\+"):
        SpectrumSession(tiny_bundle, _negative_spectrum())


def test_the_calibration_round_trips_with_its_negative_curve(two_mode_bundle, tmp_path):
    from engine.model.querying import Calibration

    cal = two_mode_bundle.calibration
    cal.save(tmp_path / "c.json")
    back = Calibration.load(tmp_path / "c.json")
    assert back.negative is not None and back.negative.d_enc == pytest.approx(cal.negative.d_enc)
    assert back.for_polarity("positive") is back and back.for_polarity(None) is back
    assert back.for_polarity("negative").threshold_for_kappa(1.0) == pytest.approx(cal.negative.threshold_for_kappa(1.0))


def _two_mode_oof(path, n_bits: int, n: int = 300):
    """Out-of-fold posteriors in the layout of training.calibration.oof_posteriors: positive-mode spectra whose encoder
    is overconfident, negative-mode ones whose encoder is underconfident, so their best scalings differ."""
    rng = np.random.default_rng(0)
    negative = np.arange(n) % 3 == 0
    targets = [np.sort(rng.choice(n_bits, size=12, replace=False)) for _ in range(n)]
    post = np.full((n, n_bits), 0.02)
    for i, t in enumerate(targets):
        post[i, t] = 0.3
        post[i, rng.choice(n_bits, size=12, replace=False)] = 0.9 if not negative[i] else 0.05
        post[i, t[:8]] = 0.95 if not negative[i] else 0.3
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in targets])])
    np.savez(path, posteriors=post.astype(np.float16), bit_offsets=offsets, bits=np.concatenate(targets),
             inchikey14=np.array([f"KEY{i:011d}" for i in range(n)]),
             adduct=np.where(negative, "[M-H]-", "[M+H]+"))
    return path


def test_calibrate_bits_fits_each_ion_mode_its_own_scaling_on_request(two_mode_bundle, tmp_path, capsys,
                                                                      monkeypatch):
    from engine.elucidation import pipeline
    from engine.model.querying import Calibration
    from training.calibration.calibrate_bits import main as calibrate_bits

    bundle = tmp_path / "bundle"
    shutil.copytree(two_mode_bundle.path, bundle)
    oof = _two_mode_oof(tmp_path / "oof.npz", n_bits=two_mode_bundle.encoder.config.fp_bits)
    assert calibrate_bits(["--oof", str(oof), "--bundle", str(bundle), "--per-polarity"]) == 0
    report = json.loads(capsys.readouterr().out.split("\nwrote")[0])
    neg = report["held_out_negative"]
    assert report["held_out_all"]["held_out_spectra"] == report["held_out_positive"]["held_out_spectra"] + neg[
        "held_out_spectra"]
    assert neg["logloss_per_bit_own_mode_fit"] < neg["logloss_per_bit_shared_fit"]  # the modes differ here
    cal = Calibration.load(bundle / "calibration.json")
    assert cal.bits is not None and cal.negative.bits is not None
    assert not np.allclose(cal.bits.slope, cal.negative.bits.slope)
    assert cal.for_polarity("negative").bits is cal.negative.bits and cal.for_polarity("positive").bits is cal.bits

    used = []  # a negative-mode spectrum's candidates are scored with the negative-mode scaling
    real = pipeline.FingerprintScorer
    monkeypatch.setattr(pipeline, "FingerprintScorer", lambda post, bits: used.append(bits) or real(post, bits))
    loaded = load_bundle(bundle, device="cpu", precision="fp32")
    session = SpectrumSession(loaded, _negative_spectrum())
    run_to_end(session.run(QueryParams(samples_per_group=1)))
    assert used and np.allclose(used[-1].slope, cal.negative.bits.slope)

    # the default fits one scaling for both modes and drops a per-mode one left from before
    assert calibrate_bits(["--oof", str(oof), "--bundle", str(bundle)]) == 0
    cal = Calibration.load(bundle / "calibration.json")
    assert cal.negative.bits is None and cal.for_polarity("negative").bits is cal.bits
    assert "logloss_per_bit_own_mode_fit" not in capsys.readouterr().out


def test_calibrate_bits_keeps_no_fit_that_does_not_help_held_out_structures(two_mode_bundle, tmp_path, capsys):
    """The fitted structures' spectra are overconfident, the held-out fifth's are right: the fit learnt on the
    first makes the second worse, so none is kept (and an earlier fit is dropped)."""
    import zlib

    from engine.model.querying import Calibration
    from training.calibration.calibrate_bits import main as calibrate_bits

    bundle = tmp_path / "bundle"
    shutil.copytree(two_mode_bundle.path, bundle)
    n_bits, n = two_mode_bundle.encoder.config.fp_bits, 200
    rng = np.random.default_rng(1)
    keys = np.array([f"KEY{i:011d}" for i in range(n)])
    held = np.array([zlib.crc32(k.encode()) % 5 == 0 for k in keys])
    assert 10 < held.sum() < n - 10
    targets = [np.sort(rng.choice(n_bits, size=12, replace=False)) for _ in range(n)]
    post = np.full((n, n_bits), 1e-4)
    for i, t in enumerate(targets):
        if not held[i]:  # as many wrong bits at 0.95 as right ones: the fit learns that 0.95 means one in two
            post[i, rng.choice(n_bits, size=12, replace=False)] = 0.95
        post[i, t] = 0.95
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in targets])])
    oof = tmp_path / "oof.npz"
    np.savez(oof, posteriors=post.astype(np.float16), bit_offsets=offsets, bits=np.concatenate(targets),
             inchikey14=keys, adduct=np.full(n, "[M+H]+"))

    assert calibrate_bits(["--oof", str(oof), "--bundle", str(bundle), "--keep-fit"]) == 0
    assert json.loads(capsys.readouterr().out.split("\nwrote")[0])["fit_kept"] is True
    assert Calibration.load(bundle / "calibration.json").bits is not None
    assert calibrate_bits(["--oof", str(oof), "--bundle", str(bundle)]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.split("\nthe fit")[0])["held_out_all"]
    assert report["logloss_per_bit_shared_fit"] > report["logloss_per_bit_raw"]
    assert "none is kept" in out and Calibration.load(bundle / "calibration.json").bits is None
    load_bundle(bundle, device="cpu")  # the checksum of the rewritten calibration.json holds
