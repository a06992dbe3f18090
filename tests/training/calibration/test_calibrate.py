"""Density calibration: hand-computed D_enc / A(t) / t_κ, and the end-to-end run on a tiny encoder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from labelled_spectra import tiny_config, write_labelled_mgf

from engine.errors import ConfigError
from engine.model.querying import Calibration
from training.calibration.calibrate import calibrate, calibration_summary, main
from training.data.spectra import load_labelled_spectra
from training.encoder.train_encoder import TrainingFinished, train_encoder

# Two spectra, eight bits. On the grid 0, 0.25, 0.5, 0.75, 1 the mean count of bits strictly above t is
#   A(0)    = (5 + 4) / 2 = 4.5     A(0.25) = (4 + 3) / 2 = 3.5     A(0.5) = (2 + 2) / 2 = 2
#   A(0.75) = (1 + 1) / 2 = 1       A(1)    = 0
# and with 2 and 4 true bits D_enc = 3.
POSTERIORS = np.array(
    [[0.9, 0.7, 0.5, 0.3, 0.1, 0.0, 0.0, 0.0],
     [0.8, 0.6, 0.4, 0.2, 0.0, 0.0, 0.0, 0.0]]
)  # fmt: skip
TRUE_COUNTS = [2, 4]
GRID = np.array([0.0, 0.25, 0.5, 0.75, 1.0])


def test_a_of_t_and_d_enc_by_hand():
    cal = Calibration.from_posteriors(POSTERIORS, TRUE_COUNTS, grid=GRID)
    assert cal.d_enc == pytest.approx(3.0)
    np.testing.assert_allclose(cal.active_counts, [4.5, 3.5, 2.0, 1.0, 0.0])


@pytest.mark.parametrize(
    "kappa, threshold",
    [
        (1.0, 0.25 + (3.5 - 3.0) / (3.5 - 2.0) * 0.25),  # 3 bits: between A(0.25) and A(0.5) -> 1/3
        (0.5, 0.5 + (2.0 - 1.5) / (2.0 - 1.0) * 0.25),  # 1.5 bits -> 0.625
        (1.25, 0.0 + (4.5 - 3.75) / (4.5 - 3.5) * 0.25),  # 3.75 bits -> 0.1875
        (1.5, 0.0),  # 4.5 bits = A(0): the densest query the grid knows
        (2.0, 0.0),  # more bits than any threshold gives: clipped to the first grid point
    ],
)
def test_thresholds_by_hand(kappa, threshold):
    cal = Calibration.from_posteriors(POSTERIORS, TRUE_COUNTS, grid=GRID)
    assert cal.threshold_for_kappa(kappa) == pytest.approx(threshold)


def test_summary_reports_the_three_kappas():
    s = calibration_summary(Calibration.from_posteriors(POSTERIORS, TRUE_COUNTS, grid=GRID))
    assert s["d_enc"] == 3.0 and s["n_spectra"] == 2
    assert s["thresholds"] == {"0.95": pytest.approx(0.25 + 0.65 / 1.5 * 0.25, abs=1e-4),
                               "1": pytest.approx(1 / 3, abs=1e-4), "1.5": 0.0}  # fmt: skip
    assert s["active_bits_at_threshold"]["1"] == pytest.approx(3.0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("calib")
    mgf = write_labelled_mgf(root / "labelled.mgf")
    config = tiny_config(mgf, root / "run", max_steps=6)
    events = list(train_encoder(config))
    assert isinstance(events[-1], TrainingFinished)
    return root, mgf, config


def test_calibrate_a_trained_encoder(trained):
    root, mgf, config = trained
    cal, summary = calibrate(root / "run")
    train = load_labelled_spectra(mgf, config.feature_settings(), cache_dir=root / "cache").select(["train"])
    assert cal.n_spectra == len(train) == 24  # the training split only, selected as in training
    assert cal.d_enc == pytest.approx(train.n_true_bits.mean())
    t = summary["thresholds"]
    assert t["1.5"] <= t["1"] <= t["0.95"]
    assert summary["val"]["n_spectra"] == 4


def test_calibrate_cli_writes_a_loadable_file(trained, capsys):
    root, _, _ = trained
    out = root / "calibration.json"
    assert main(["--encoder", str(root / "run"), "--out", str(out)]) == 0
    cal = Calibration.load(out)
    assert cal.n_spectra == 24
    printed = capsys.readouterr().out
    assert "D_enc" in printed and "t_0.95" in printed and "t_1.50" in printed
    assert json.loads((root / "calibration_summary.json").read_text())["d_enc"] == pytest.approx(cal.d_enc, abs=1e-3)


def test_calibrate_needs_a_training_run(tmp_path):
    with pytest.raises(ConfigError, match="train_config.json"):
        calibrate(tmp_path)
