"""Auto recalibration recovering a known offset, through ``msgpt predict`` (issue #61, item 3).

A synthetic run (tests/synthetic_run.py) of six compounds, each a survey scan with its [M+H]+ isotope pattern and an
MS2 scan with four fragment ions, every m/z read 15 ppm high: more than the 10 ppm precursor window, so as measured
no true formula is a candidate. ``--recalibrate auto`` (the default) measures the offset from the run itself, takes it
out, and the formulas handed to the model are the true ones; ``--recalibrate off`` leaves them out of reach. What the
CLI hands to the model is captured: nothing depends on what the tiny model generates.
"""

from __future__ import annotations

import re

import pytest

from synthetic_run import SHIFTED_RUN as RUN
from synthetic_run import protonated_mz as mz_of
from synthetic_run import write_shifted_run

import engine.cli.predict as cli

OFFSET_PPM = 15.0


@pytest.fixture
def shifted_run(tmp_path):
    return write_shifted_run(tmp_path / "run.mzML", OFFSET_PPM)


def predict(run, tmp_path, tiny_bundle_dir, *extra):
    return cli.main(["predict", str(run), "-o", str(tmp_path / "out.csv"), "--model", str(tiny_bundle_dir),
                     "--formulas", "1", "--groups", "2", "--pool-size", "4", "-q", "--no-libraries", *extra])


def test_auto_recalibration_recovers_the_runs_offset(shifted_run, tmp_path, tiny_bundle_dir, captured, capsys):
    assert predict(shifted_run, tmp_path, tiny_bundle_dir) == 0  # auto: the default
    err = capsys.readouterr().err
    said = re.search(r"run\.mzML: m/z recalibration: ([+-][\d.]+) ppm at m/z 500.* from (\d+) precursors", err)
    assert said, err
    assert float(said.group(1)) == pytest.approx(OFFSET_PPM, abs=1.0) and int(said.group(2)) >= 5
    assert len(captured) == len(RUN)
    for spectrum, formula in zip(captured, RUN):  # features in retention-time order, as written
        assert float(spectrum.metadata["recalibrated_ppm"]) == pytest.approx(OFFSET_PPM, abs=1.0)
        assert (spectrum.precursor_mz / mz_of(formula) - 1) * 1e6 == pytest.approx(0.0, abs=1.0)
        assert spectrum.formula == formula  # the true formula, back within the window


def test_without_recalibration_the_true_formulas_are_out_of_reach(shifted_run, tmp_path, tiny_bundle_dir, captured,
                                                                  capsys):
    assert predict(shifted_run, tmp_path, tiny_bundle_dir, "--recalibrate", "off") == 0
    assert "run.mzML: m/z recalibration: none (" in capsys.readouterr().err
    assert len(captured) == len(RUN)
    for spectrum, formula in zip(captured, RUN):
        assert "recalibrated_ppm" not in spectrum.metadata
        assert (spectrum.precursor_mz / mz_of(formula) - 1) * 1e6 == pytest.approx(OFFSET_PPM, abs=0.01)
        assert spectrum.formula != formula  # 15 ppm off: outside the 10 ppm window
