"""The spectra list's Confidence column and the candidate summary (issue #17, item 4)."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtCore import Qt

from engine.elucidation.pipeline import QueryParams
from engine.model.confidence import FEATURES, ConfidenceModel
from msgpt_gui.models import SORT_ROLE, SpectraModel

NICOTINE = "MSBNK-NaToxAq-NA003084"
SITAGLIPTIN = "MSBNK-Eawag-EA290310"


@pytest.fixture
def confident_bundle(tiny_bundle_dir, tmp_path):
    from training.calibration.confidence import _settings, save_model

    folder = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, folder)
    model = ConfidenceModel((2.0, 0.5, 0.3, 0.2, -0.4, 0.1), -1.0, (0.05, 0.08, 0.6, 2.0, 3.0, 0.5),
                            (0.05, 0.08, 0.5, 2.0, 0.8, 0.2), FEATURES, {**_settings(QueryParams()), "adapter": False})
    save_model(model, folder)
    return folder


def _run_all(qtbot, window, path):
    with qtbot.waitSignals([window.file_loaded], timeout=20_000):
        window.files.open_files([str(path)])
    window.spectra_view.selectAll()
    with qtbot.waitSignal(window.run_finished, timeout=120_000) as blocker:
        window.run_selected()
    assert blocker.args == ["done"]


def test_confidence_is_listed_sortable_and_summarised(qtbot, make_window, write_mgf, confident_bundle):
    window = make_window(model=confident_bundle)
    _run_all(qtbot, window, write_mgf("two.mgf", titles={NICOTINE, SITAGLIPTIN}))
    model = window.spectra
    for row, entry in enumerate(model.entries):
        p = entry.result.confidence
        assert p is not None and 0 <= p <= 1
        cell = model.index(row, SpectraModel.CONFIDENCE)
        assert cell.data() == ("<1%" if p < 0.01 else f"{p:.0%}") and cell.data(SORT_ROLE) == p
    tip = model.headerData(SpectraModel.CONFIDENCE, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    assert "rank-1 candidate is the right structure" in tip
    window.select_entry(model.entries[0].key)
    qtbot.waitUntil(lambda: "· confidence <b>" in window.candidates.summary.text(), timeout=5_000)


def test_without_a_confidence_model_the_column_stays_empty(qtbot, make_window, write_mgf):
    window = make_window()
    _run_all(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    assert window.spectra.entries[0].result is not None
    assert window.spectra.index(0, SpectraModel.CONFIDENCE).data() == ""
    assert window.spectra.index(0, SpectraModel.CONFIDENCE).data(SORT_ROLE) == -1.0
