"""What a chemist saw on a real SCIEX TripleTOF DDA run (issue #38): data that looks like markup ("<1%") shows as
written, a missing confidence says why, the ID and SMILES columns keep a readable width, the bundled examples make
way for the user's files, the file dialogs start where the user last was, implausible candidates are flagged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument

from engine.elucidation.pipeline import QueryParams
from engine.model.confidence import FEATURES, ConfidenceModel
from msgpt_gui.models import SpectraModel

NICOTINE = "MSBNK-NaToxAq-NA003084"
SITAGLIPTIN = "MSBNK-Eawag-EA290310"


def shown_text(label) -> str:
    """What a QLabel shows on screen: its text, read as rich text where Qt reads it so."""
    fmt = label.textFormat()
    if fmt == Qt.TextFormat.PlainText or (fmt == Qt.TextFormat.AutoText and not Qt.mightBeRichText(label.text())):
        return label.text()
    doc = QTextDocument()
    doc.setHtml(label.text())
    return doc.toPlainText()


def bundle_with_confidence(tiny_bundle_dir, folder, unsure: bool = False):
    """The tiny bundle with a confidence model fitted for the default settings (``unsure``: always below 1%)."""
    from training.calibration.confidence import _settings, save_model

    shutil.copytree(tiny_bundle_dir, folder)
    weights = (0.0,) * 6 if unsure else (2.0, 0.5, 0.3, 0.2, -0.4, 0.1)
    model = ConfidenceModel(weights, -14.0 if unsure else -1.0, (0.05, 0.08, 0.6, 2.0, 3.0, 0.5),
                            (0.05, 0.08, 0.5, 2.0, 0.8, 0.2), FEATURES, {**_settings(QueryParams()), "adapter": False})
    save_model(model, folder)
    return folder


def run_one(qtbot, window, path):
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([path])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000) as blocker:
        window.run_selected()
    assert blocker.args == ["done"]
    return entry


def test_a_confidence_below_one_percent_and_ids_with_angle_brackets_show_as_written(qtbot, make_window, write_mgf,
                                                                                    tiny_bundle_dir, tmp_path):
    window = make_window(model=bundle_with_confidence(tiny_bundle_dir, tmp_path / "unsure", unsure=True))
    path = write_mgf("one.mgf", titles={NICOTINE})
    path.write_text(path.read_text().replace(f"TITLE={NICOTINE}", "TITLE=<blank> NA003084"))
    entry = run_one(qtbot, window, path)
    assert entry.result.confidence < 0.01
    assert window.spectra.index(0, SpectraModel.CONFIDENCE).data() == "<1%"
    summary = shown_text(window.candidates.summary)
    assert "· confidence <1%" in summary, summary
    assert "No confidence" not in summary
    # every label that shows the spectrum's ID shows it whole
    assert "<blank> NA003084" in shown_text(window.spectrum_panel.header)
    score = window.insights.score
    score.set_entry(entry)
    assert "Against <blank> NA003084 (" in shown_text(score.summary)
    detail = window.candidates.detail
    assert shown_text(detail.title).startswith(f"Rank 1 · {entry.result.candidates[0].formula}")


def test_a_confidence_left_out_after_changing_b_says_why(qtbot, make_window, write_mgf, tiny_bundle_dir, tmp_path):
    window = make_window(model=bundle_with_confidence(tiny_bundle_dir, tmp_path / "sure"))
    entry = run_one(qtbot, window, write_mgf("one.mgf", titles={SITAGLIPTIN}))
    cell = window.spectra.index(0, SpectraModel.CONFIDENCE)
    assert entry.result.confidence is not None and cell.data().endswith("%")
    assert cell.data(Qt.ItemDataRole.ToolTipRole) is None
    assert "No confidence" not in shown_text(window.candidates.summary)

    with qtbot.waitSignal(window.run_finished, timeout=60_000):  # raise B: re-ranked, the confidence does not apply
        window.params_panel.pool.setValue(140)
    assert entry.result.params.pool_size == 140 and entry.result.confidence is None
    assert cell.data() == ""
    why = ("No confidence: it holds only for the settings it was fitted with, B = 100; these candidates were ranked "
           "with B = 140 (set it back to see it)")
    assert why in shown_text(window.candidates.summary)
    assert cell.data(Qt.ItemDataRole.ToolTipRole) == why

    with qtbot.waitSignal(window.run_finished, timeout=60_000):  # another band too: both are named
        window.params_panel.kappa_max.setValue(1.2)
    assert "fitted with, κ 0.95–1.5, B = 100; these candidates were ranked with κ 0.95–1.2, B = 140 (set them" \
        in cell.data(Qt.ItemDataRole.ToolTipRole)

    with qtbot.waitSignal(window.run_finished, timeout=60_000):
        window.params_panel.kappa_max.setValue(1.5)
    with qtbot.waitSignal(window.run_finished, timeout=60_000):  # back to the fit's settings: back again
        window.params_panel.pool.setValue(100)
    assert entry.result.confidence is not None and cell.data().endswith("%")
    assert "No confidence" not in shown_text(window.candidates.summary)
    assert "· confidence " in shown_text(window.candidates.summary)


def test_without_a_confidence_model_the_summary_says_so(qtbot, make_window, write_mgf):
    window = make_window()
    run_one(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    assert "No confidence: this model ships no confidence model (confidence.json)." in \
        shown_text(window.candidates.summary)


# -- 3. the ID and SMILES columns --------------------------------------------------------------------------------
def test_id_and_smiles_columns_keep_a_readable_width_in_a_narrow_window(qtbot, make_window, write_mgf, tmp_path):
    from msgpt_gui.candidates_model import CandidatesModel

    window = make_window()
    path = write_mgf("run.mgf", titles={NICOTINE, SITAGLIPTIN})
    # a SCIEX TripleTOF-like ID: the end (cycle, experiment) tells the scans apart
    path.write_text(path.read_text().replace(f"TITLE={NICOTINE}",
                                             "TITLE=TripleTOF_DDA_sample_2024-05-17_pos.wiff cycle=812 experiment=3"))
    entry = run_one(qtbot, window, path)
    view, model = window.spectra_view, window.spectra
    window.top_splitter.setSizes([270, 1100])  # a narrow list pane (as in a small window)
    qtbot.waitUntil(lambda: view.viewport().width() < 300)
    text = next(t for t in (model.index(r, SpectraModel.ID).data() for r in range(2)) if "cycle" in t)
    fm = view.fontMetrics()
    width = view.columnWidth(SpectraModel.ID)
    assert width >= 28 * fm.averageCharWidth(), width  # not squeezed to "…": the list scrolls sideways instead
    assert view.horizontalScrollBar().maximum() > 0
    assert view.textElideMode() == Qt.TextElideMode.ElideMiddle
    shown = fm.elidedText(text, Qt.TextElideMode.ElideMiddle, width - 12)
    assert shown.endswith("experiment=3") and "…" in shown  # what tells it apart stays
    fill = window.spectra_list.id_column
    assert width >= fill.floor >= min(fm.horizontalAdvance(text), fill.cap_px)

    window.top_splitter.setSizes([1100, 300])  # room: the ID column takes what the others leave (no gap at the right)
    h = view.header()

    def filled():
        visible = sum(h.sectionSize(c) for c in range(h.count()) if not h.isSectionHidden(c))
        return abs(visible - view.viewport().width()) <= 1 and h.sectionSize(0) > fill.floor

    qtbot.waitUntil(filled)
    h.resizeSection(SpectraModel.ID, 150)  # the user drags its edge: it keeps that width
    window.top_splitter.setSizes([1000, 400])
    qtbot.wait(50)
    assert view.columnWidth(SpectraModel.ID) == 150

    # the SMILES column of the candidates: never squeezed below its contents (up to the cap)
    window.select_entry(entry.key)
    table, smiles = window.candidates.table, window.candidates.smiles_column
    window.candidates.splitter.setSizes([300, 300])
    qtbot.wait(50)
    longest = max(fm.horizontalAdvance(c.smiles) for c in entry.result.candidates)
    assert table.columnWidth(CandidatesModel.SMILES) >= smiles.floor >= min(longest, smiles.cap_px)
    assert smiles.floor >= 16 * table.fontMetrics().averageCharWidth()


# -- 4. the bundled examples -------------------------------------------------------------------------------------
def test_the_users_files_replace_untouched_examples_but_not_ones_they_worked_on(qtbot, make_window, no_examples,
                                                                               fixture_mgf, write_mgf):
    shutil.copy(fixture_mgf, no_examples / "example.mgf")
    window = make_window()  # first start: the examples are opened
    qtbot.waitUntil(lambda: window.spectra.rowCount() == 12 and window.loader is None, timeout=20_000)

    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("mine.mgf", titles={NICOTINE})])
    assert [e.id for e in window.spectra.entries] == [NICOTINE]  # the examples made way
    assert any("example spectra were closed" in text for _, text in window.messages)
    assert "example spectra were closed" in window.statusBar().currentMessage()

    # examples opened beside the user's file stay when more of the user's files come
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_examples()
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("second.mgf", titles={SITAGLIPTIN})])
    assert window.spectra.rowCount() == 14

    # examples alone, but one of them was run: they stay
    window.files.close_all_spectra()
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_examples()
    example = window.spectra.entries[0]
    window.select_entry(example.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("third.mgf", titles={NICOTINE})])
    assert window.spectra.rowCount() == 13 and example.result is not None


def test_an_example_with_notes_or_a_formula_set_is_not_untouched(make_spectrum):
    from msgpt_gui.logic.entries import SpectrumEntry

    s = make_spectrum()
    assert SpectrumEntry.from_item(0, s).untouched
    noted = SpectrumEntry.from_item(1, s)
    noted.user_notes = "looks like a glucuronide"
    edited = SpectrumEntry.from_item(2, s)
    edited.spectrum = make_spectrum(formula="C6H6")
    queued = SpectrumEntry.from_item(3, s)
    queued.status = "queued"
    assert not noted.untouched and not edited.untouched and not queued.untouched


# -- 5. where the file dialogs start -----------------------------------------------------------------------------
def test_file_dialogs_start_in_the_folders_used_last(qtbot, make_window, write_mgf, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    from msgpt_gui.settings import Settings

    asked = []

    def fake_open(parent, caption, start, *filters):
        asked.append(("open", start))
        return [], ""

    def fake_save(parent, caption, suggested, *filters):
        asked.append(("save", suggested))
        return str(tmp_path / "exports" / Path(suggested).name), "CSV table (*.csv)"

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(fake_open))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(fake_save))
    window = make_window()
    data = tmp_path / "data" / "2024-05"
    data.mkdir(parents=True)
    mgf = write_mgf("one.mgf", titles={NICOTINE}).rename(data / "one.mgf")
    run_one(qtbot, window, mgf)  # dropped (or a recent file): not through the dialog

    window.files.open_dialog()
    assert asked[-1] == ("open", str(data))  # Open starts where the spectra came from
    (tmp_path / "exports").mkdir()
    with qtbot.waitSignal(window.export_finished, timeout=30_000):
        window.files.export_dialog("all")
    assert asked[-1] == ("save", str(data / "candidates.csv"))  # no export yet: beside the spectra
    assert (tmp_path / "exports" / "candidates.csv").is_file()

    window.files.export_dialog("all")
    assert asked[-1] == ("save", str(tmp_path / "exports" / "candidates.csv"))  # the last export's folder
    qtbot.waitUntil(lambda: not window.busy, timeout=30_000)
    window.insights.export_posteriors_dialog()
    assert asked[-1] == ("save", str(tmp_path / "exports" / "posteriors.npz"))
    qtbot.waitUntil(lambda: not window.busy, timeout=30_000)
    window.insights.score.export_dialog()
    assert asked[-1] == ("save", str(tmp_path / "exports" / "scores.csv"))

    window.save_layout()  # the next start remembers both
    again = Settings(window.settings.path)
    assert (again.open_dir(), again.export_dir()) == (str(data), str(tmp_path / "exports"))
    shutil.rmtree(tmp_path / "exports")  # a folder that is gone: its nearest parent that is there
    assert again.export_dir() == str(tmp_path)


# -- 6. implausible candidates -----------------------------------------------------------------------------------
def test_implausible_candidates_are_marked_without_changing_the_ranking(qtbot, make_window, write_mgf):
    from dataclasses import replace

    from msgpt_gui.candidates_model import CandidatesModel

    window = make_window()
    entry = run_one(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    result = entry.result
    top = result.candidates[0]
    azirine = replace(top, rank=2, smiles="CC1(C)N=C1C(F)(F)Cl", inchikey14="AZIRINEAZIRINE")  # as the chemist saw
    shown = replace(result, candidates=(top, azirine))
    panel = window.candidates
    panel.show_result(shown)
    model = panel.model
    decorations = [model.index(r, CandidatesModel.SMILES).data(Qt.ItemDataRole.DecorationRole)
                   for r in range(model.rowCount())]
    assert decorations[1] is not None and decorations[0] is None
    tip = model.index(1, CandidatesModel.SMILES).data(Qt.ItemDataRole.ToolTipRole)
    assert "⚠ Unlikely structure: 2H-azirine" in tip
    assert "2H-azirine" in model.index(1, CandidatesModel.STRUCTURE).data(Qt.ItemDataRole.ToolTipRole)
    assert [model.index(r, CandidatesModel.RANK).data() for r in range(model.rowCount())] == \
        [c.rank for c in shown.candidates]  # ranks as they were
    assert model.index(1, CandidatesModel.SMILES).data() == azirine.smiles
    panel.select_candidate(azirine.inchikey14)
    assert "⚠ Unlikely structure: 2H-azirine" in panel.detail.scores.text()
