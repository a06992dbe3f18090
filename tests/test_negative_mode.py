"""Negative-mode spectra end to end: a bundle whose encoder was trained on [M-H]- too runs them with the
negative-mode calibration curve; a bundle without [M-H]- keeps refusing them with a clear message."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from engine.bundle import load_bundle, save_calibration
from engine.errors import MsgptError
from engine.pipeline import QueryParams, SpectrumSession, run_to_end
from engine.querying import band_thresholds


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
    from engine.querying import Calibration

    cal = two_mode_bundle.calibration
    cal.save(tmp_path / "c.json")
    back = Calibration.load(tmp_path / "c.json")
    assert back.negative is not None and back.negative.d_enc == pytest.approx(cal.negative.d_enc)
    assert back.for_polarity("positive") is back and back.for_polarity(None) is back
    assert back.for_polarity("negative").threshold_for_kappa(1.0) == pytest.approx(cal.negative.threshold_for_kappa(1.0))
