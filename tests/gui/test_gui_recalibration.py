"""Auto recalibration recovering a known offset through the app (issue #61, item 3): Run All on a synthetic run whose
every m/z reads 15 ppm high (the run of tests/engine/cli/test_cli_recalibration.py) measures the offset from the run,
takes it out, and runs each feature for its true formula, out of the 10 ppm window as measured; the Formulas tab says
the correction. Nothing depends on what the tiny model generates."""

from __future__ import annotations

import re

import pytest
from synthetic_run import SHIFTED_RUN as RUN
from synthetic_run import write_shifted_run

from msgpt_gui.logic import formulas

OFFSET_PPM = 15.0


def test_the_app_recalibrates_a_run_and_runs_its_true_formulas(qtbot, make_window, tmp_path, monkeypatch):
    shifted_run = write_shifted_run(tmp_path / "run.mzML", OFFSET_PPM)
    monkeypatch.setattr(formulas, "_recalibrations", {})  # measured in this test, not taken from another
    window = make_window()
    window.params_panel.groups.setValue(2)
    window.params_panel.pool.setValue(4)
    window.formulas.panel.k.setValue(1)
    with qtbot.waitSignal(window.file_loaded, timeout=30_000):
        window.files.open_files([shifted_run])
    features = window.spectra.entries
    assert len(features) == len(RUN) and all(e.feature is not None for e in features)
    with qtbot.waitSignal(window.run_finished, timeout=180_000):
        window.run_menu.run_all()
    for e, formula in zip(features, RUN):  # in retention-time order, as written
        assert [r.spectrum.formula for r in e.formula_runs][:1] == [formula]  # the true formula, back in the window
        shift = float(e.formula_runs[0].spectrum.metadata["recalibrated_ppm"])
        assert shift == pytest.approx(OFFSET_PPM, abs=1.0)
    window.insights.tabs.setCurrentWidget(window.formulas.panel)
    window.select_entry(features[0].key)
    qtbot.waitUntil(lambda: window.formulas.panel.model.rowCount() > 0, timeout=60_000)
    said = re.search(r"m/z recalibration: ([+-][\d.]+) ppm at m/z 500", window.formulas.panel.summary.text())
    assert said and float(said.group(1)) == pytest.approx(OFFSET_PPM, abs=1.0)
