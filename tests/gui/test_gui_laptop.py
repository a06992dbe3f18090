"""The window on a laptop and what a run says (issue #54): the window fits 1280×800 with every pane usable, the
spectra list shows Confidence and Level at 1600 px, Effort starts no run by itself, a deep search says its phase
and a cancelled one keeps what it found, the m/z recalibration shows after Run, and a run that could not take the
best formula's ion type says so."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QScrollArea

from engine.elucidation import deep
from engine.elucidation.deep import DeepConfig, DeepProgress
from engine.progress import check_cancel
from msgpt_gui.logic.entries import Status
from msgpt_gui.logic.jobs import EntryProgress
from msgpt_gui.models import SpectraModel
from msgpt_gui.spectrum_view import SpectrumCanvas

ROOT = Path(__file__).resolve().parents[2]
SMALL_RUN = ROOT / "tests" / "data" / "small.mzML"
SITAGLIPTIN = "MSBNK-Eawag-EA290310"
SODIUM = "MSBNK-Antwerp_Univ-METOX_N103916_CC60"  # an [M+Na]+ record; its best formula candidate is [M+H]+


def settle(qtbot, window, w: int, h: int) -> None:
    window.resize(w, h)
    qtbot.wait(50)  # the layouts follow the new size
    assert (window.width(), window.height()) == (w, h)


def inside(window, widget) -> QRect:
    """``widget``'s rectangle in the window, checked to be shown, not empty and within the window."""
    rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
    assert widget.isVisible() and rect.width() > 0 and rect.height() > 0, widget
    assert window.rect().contains(rect), (widget, rect, window.rect())
    return rect


def wait_table(qtbot, window, entry) -> None:
    window.insights.tabs.setCurrentWidget(window.formulas.panel)
    window.select_entry(entry.key)
    qtbot.waitUntil(lambda: window.formulas.panel.model.rowCount() > 0, timeout=60_000)
    qtbot.wait(100)  # the plots shown take their room


def test_the_window_fits_a_laptop(qtbot, make_window):
    window = make_window()
    with qtbot.waitSignal(window.file_loaded, timeout=30_000):
        window.files.open_files([SMALL_RUN])
    window.select_entry(window.spectra.entries[0].key)
    settle(qtbot, window, 1200, 720)
    hint = window.minimumSizeHint()
    assert hint.width() <= 1200 and hint.height() <= 720, hint
    assert window.spectrum_panel.canvas.canvas.height() >= SpectrumCanvas.MIN_HEIGHT  # readable at the smallest

    settle(qtbot, window, 1280, 800)
    assert inside(window, window.spectrum_panel.canvas.canvas).height() >= 150
    inside(window, window.params_panel.effort)
    inside(window, window.candidates.detail)
    scroll = window.findChild(QScrollArea, "detail_scroll")  # a library hit's mirror plot scrolls into view
    assert scroll.widget() is window.candidates.detail and inside(window, scroll.viewport()).height() >= 250
    wait_table(qtbot, window, window.spectra.entries[0])  # a feature of a run: isotopes and recalibration
    panel = window.formulas.panel
    for plot in (panel.isotopes.canvas, panel.recalibration.canvas):
        assert inside(window, plot).height() >= 120 and plot.width() >= 220
    assert inside(window, window.spectrum_panel.canvas.canvas).height() >= 150
    assert window.minimumSizeHint().height() <= 720  # the recalibration plot shown asks for no taller window

    settle(qtbot, window, 1600, 1000)
    view = window.spectra_view
    for column in (SpectraModel.CONFIDENCE, SpectraModel.LEVEL):
        assert not view.isColumnHidden(column)
        assert 0 <= view.columnViewportPosition(column)
        assert view.columnViewportPosition(column) + view.columnWidth(column) <= view.viewport().width()


def test_effort_starts_no_run_and_applies_to_the_next(qtbot, make_window, write_mgf):
    window = make_window()
    panel = window.params_panel
    assert "next Run" in panel.effort.toolTip()
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("one.mgf", titles={SITAGLIPTIN})])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    assert entry.result.params.effort == "standard"
    started = []
    window.worker_started.connect(started.append)
    panel.effort.setCurrentText("deep")
    assert window.query_params.effort == "deep"
    qtbot.wait(800)  # longer than the re-rank's rest (RETUNE_DELAY_MS)
    assert not window.busy and not started and entry.result.params.effort == "standard"
    assert "applies to the next Run" in window.statusBar().currentMessage()
    # another parameter re-ranks the spectrum as before, at the effort it ran at
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        panel.seed.setValue(panel.seed.value() + 1)
    assert entry.result.params.effort == "standard" and entry.result.params.seed == window.query_params.seed


def test_deep_progress_says_its_phase_and_a_cancel_keeps_what_it_found(qtbot, make_window, write_mgf,
                                                                        monkeypatch):
    import msgpt_gui.logic.jobs as jobs

    def analogs(session, cancel=None):  # as the first opening of a library's analogs would say it
        for done in (0, 5000, 10000):
            yield DeepProgress(session.index, "deep search: opening the analogs of the bundled library", done, 10000)

    def stall(self, params, cancel):  # the edits wait for the cancel: the rounds are done, their ranking shown
        while not cancel():
            time.sleep(0.02)
        check_cancel(cancel)

    monkeypatch.setattr(jobs, "open_analog_sources", analogs)
    monkeypatch.setattr(deep, "bundled_analogs", lambda: None)
    monkeypatch.setattr(deep, "analog_sources", lambda libraries: [])  # no library's bits computed here
    monkeypatch.setattr(deep, "DeepConfig", lambda: DeepConfig(extra_queries=2, extra_per_query=2, rounds=1,
                                                               parents=2, prefixes_per_parent=2,
                                                               samples_per_prefix=2, max_new_samples=20))
    monkeypatch.setattr(deep.DeepSearch, "_edit_round", stall)
    window = make_window()
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("one.mgf", titles={SITAGLIPTIN})])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    standard = entry.result
    texts = []
    window.runs.progress.connect(lambda value, text: texts.append(text))
    window.params_panel.effort.setCurrentText("deep")
    assert window.run_selected() is None and window.busy
    # the edits stall until the cancel: once they begin, the rounds are done and their ranking is on its way
    qtbot.waitUntil(lambda: any("deep search: edits 1 of" in t for t in texts), timeout=120_000)
    qtbot.waitUntil(lambda: entry.live is not None and entry.live.params.effort == "deep", timeout=60_000)
    with qtbot.waitSignal(window.run_finished, timeout=60_000) as blocker:
        window.run_menu.cancel()
    assert blocker.args == ["cancelled"]
    phases = [t for t in texts if "deep search" in t]
    assert "deep search: opening the analogs of the bundled library (5000/10000)" in phases
    assert [t for t in phases if "round 1 of 1" in t] and any("deep search: edits 1 of 3" in t for t in phases)
    assert phases.index("deep search: opening the analogs of the bundled library (5000/10000)") < \
        min(phases.index(t) for t in phases if "round 1 of 1" in t)
    assert entry.status == Status.PARTIAL == "cancelled (partial)"
    assert entry.result.partial and entry.result.params.effort == "deep" and entry.result.candidates
    assert entry.previous is standard
    assert window.spectra.index_of(entry.key).siblingAtColumn(SpectraModel.STATUS).data() == "cancelled (partial)"
    assert "cancelled (partial)" in window.candidates.summary.text()
    assert "Cancelled (partial)" in window.statusBar().currentMessage()


def test_the_progress_bar_counts_the_seconds_of_a_quiet_step(qtbot, make_window):
    window = make_window()
    tasks = window.tasks
    tasks.task_started("run")
    tasks.show_progress(100, "Spectrum 1 of 7: deep search: choosing analogs")
    assert tasks.progress.format() == "Spectrum 1 of 7: deep search: choosing analogs"
    qtbot.waitUntil(lambda: tasks.progress.format().endswith(" s"), timeout=4_000)
    assert tasks.progress.format().startswith("Spectrum 1 of 7: deep search: choosing analogs · ")
    tasks.task_ended(False)


def test_entry_progress_text():
    assert EntryProgress(1, 0, 7, 50, 100).text() == "Spectrum 1 of 7: 50/100 structures"
    deep_round = EntryProgress(1, 2, 7, 300, 900, "deep search: round 2 of 4")
    assert deep_round.text() == "Spectrum 3 of 7: deep search: round 2 of 4 (300/900)"
    assert deep_round.fraction == pytest.approx((2 + 300 / 900) / 7)
    assert EntryProgress(1, 0, 1, 0, 0, "deep search: final ranking").text() == "deep search: final ranking"


def test_recalibration_shows_after_run(qtbot, make_window):
    window = make_window()
    with qtbot.waitSignal(window.file_loaded, timeout=30_000):
        window.files.open_files([SMALL_RUN])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    assert window.insights.tabs.currentWidget() is window.candidates  # the Formulas tab never shown before Run
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    assert entry.formula_runs and entry.cached_formulas() is not None
    for size in ((1600, 1000), (1280, 800)):  # the summary of several formulas leaves the plot its room
        settle(qtbot, window, *size)
        assert inside(window, window.spectrum_panel.canvas.canvas).height() >= 150
        inside(window, window.candidates.summary)
    panel = window.formulas.panel
    window.insights.tabs.setCurrentWidget(panel)
    qtbot.waitUntil(lambda: panel.model.rowCount() > 0, timeout=30_000)
    recal = panel.recalibration
    assert recal.isVisible() and recal.recalibration is not None and len(recal.recalibration.points_mz) > 0
    assert recal.caption.text().startswith("m/z recalibration: ") and "precursors" in recal.caption.text()
    assert recal.ax.get_title(loc="left") == ""  # nothing over the data
    assert "m/z recalibration" in panel.summary.text()  # the table's note: ranked with it
    assert recal.canvas.height() >= 120


def test_a_run_that_could_not_take_the_best_ion_type_says_so(qtbot, make_window, write_mgf):
    window = make_window()
    window.bundle.config["supported_adducts"] = ["[M+Na]+"]  # as a model without [M+H]+
    window.spectra.set_supported_adducts(window.bundle.supported_adducts)
    bare = write_mgf("bare.mgf", titles={SODIUM}, drop_keys=("FORMULA", "ADDUCT", "SMILES", "INCHIKEY"))
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([bare])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    assert entry.formula_runs and all(r.spectrum.adduct == "[M+Na]+" for r in entry.formula_runs)
    assert entry.ion_note == "best ion type [M+H]+ is not supported by this model: ran [M+Na]+"
    status = window.spectra.index_of(entry.key).siblingAtColumn(SpectraModel.STATUS)
    assert status.data() == "done ⚠"
    assert entry.ion_note in status.data(Qt.ItemDataRole.ToolTipRole)
    window.show_current()
    assert entry.ion_note in window.candidates.summary.text()  # said in the candidates' summary too
    wait_table(qtbot, window, entry)
    assert entry.ion_note in window.formulas.panel.summary.text()
