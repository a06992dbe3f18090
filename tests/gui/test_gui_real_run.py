"""The app on a real LC-MS/MS run (issue #16): what was read is reported once per file, new rows come
into view, the filter finds m/z and RT, formulas go to many spectra at once, Run takes what was typed,
skipped scans are plotted and can be given a precursor m/z, spectra without fragments are flagged,
and only the model's ion types are offered. (Precursor features and formula candidates:
test_gui_features.py.)"""

from __future__ import annotations

import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication, QMessageBox

from engine.spectra.spectrum import NO_FRAGMENTS_NOTE, SkippedRecord
from msgpt_gui.logic.entries import Status
from msgpt_gui.models import SpectraModel

NICOTINE = "MSBNK-NaToxAq-NA003084"
SITAGLIPTIN = "MSBNK-Eawag-EA290310"
DAPHNORETIN = "MSBNK-Washington_State_Univ-BML00201"  # [M-H]-: the tiny bundle knows only positive adducts
GREEN = "#1b7f3b"


def loaded(qtbot, window, *paths):
    with qtbot.waitSignals([window.file_loaded] * len(paths), timeout=20_000):
        window.files.open_files(list(paths))
    return window.spectra.entries


def run_and_wait(qtbot, window, start, expect="done"):
    with qtbot.waitSignal(window.run_finished, timeout=60_000) as blocker:
        assert start() is not False
    assert blocker.args == [expect]


def mzml_without_precursors(data_dir, tmp_path, n: int | None = None):
    """small.mzML with the precursor of its first ``n`` MS2 scans (all: None) removed."""
    text = (data_dir / "small.mzML").read_text()
    text = re.sub(r"<precursorList.*?</precursorList>", "", text, count=n or 0, flags=re.S)
    path = tmp_path / ("no_precursor.mzML" if n is None else f"no_precursor_{n}.mzML")
    path.write_text(text)
    return path


def mgf(tmp_path, name, records):
    """An MGF from (title, pepmass, peaks, extra lines) tuples."""
    blocks = []
    for title, pepmass, peaks, extra in records:
        lines = ["BEGIN IONS", f"TITLE={title}", f"PEPMASS={pepmass}", *extra]
        lines += [f"{mz} {i}" for mz, i in peaks] + ["END IONS", ""]
        blocks.append("\n".join(lines))
    path = tmp_path / name
    path.write_text("\n".join(blocks))
    return path


NICOTINE_PEAKS = [(80.0495, 4.0), (106.0651, 22.0), (117.0573, 5.0), (130.0651, 62.0), (132.0808, 100.0),
                  (163.1230, 12.0)]


def status_cells_fit(window) -> bool:
    view, model = window.spectra_view, window.spectra
    fm = QFontMetrics(view.font())
    width = view.columnWidth(SpectraModel.STATUS)
    return all(fm.horizontalAdvance(model.index(r, SpectraModel.STATUS).data()) + 8 <= width
               for r in range(model.rowCount()))


def test_one_report_per_file_with_ms1_scans_skip_reasons_and_the_ion_types(qtbot, make_window, data_dir, tmp_path,
                                                                            fixture_mgf):
    window = make_window()
    window.popups = True  # the real dialogs, counted below
    reported = []
    window.file_reported.connect(lambda path, text: reported.append((path, text)))
    run = mzml_without_precursors(data_dir, tmp_path, n=3)
    loaded(qtbot, window, run)
    assert len(reported) == 1
    path, text = reported[0]
    assert path == str(run)
    assert "2 MS1 survey scans" in text  # no longer dropped without a word
    assert "3 × no precursor m/z" in text and "type the precursor m/z above the plot" in text
    assert "5 precursor features from 5 MS/MS scans" in text
    assert "Without a molecular formula: 5" in text and "best 3 of each" in text
    assert ("The model tiny-test-bundle supports the ion types [M+H]+, [M+Na]+, [M+NH4]+, [M-H2O+H]+, [M+K]+, [M]+."
            in text)  # natively, then by mapping
    boxes = [b for b in window.findChildren(QMessageBox) if b.objectName() == "file_report"]
    assert len(boxes) == 1 and boxes[0].text() == text and boxes[0].isVisible()
    assert window.spectra.rowCount() == 8  # the skipped scans are listed

    # the examples' kind of file, all runnable except two negative ones: one more report, one more dialog
    loaded(qtbot, window, fixture_mgf)
    assert len(reported) == 2 and "2 with an ion type this model cannot use: [M-H]- (2)" in reported[1][1]
    assert len([b for b in window.findChildren(QMessageBox) if b.objectName() == "file_report"]) == 2
    # the Status column says it in a few words that fit; the reason is in the tooltip
    labels = {window.spectra.index(r, SpectraModel.STATUS).data() for r in range(window.spectra.rowCount())}
    assert labels == {"needs m/z", "ion not supported", "not run"}  # no formula: Run takes formula candidates
    assert status_cells_fit(window)
    row = next(r for r in range(8) if window.spectra.entries[r].spectrum is None)
    tip = window.spectra.index(row, SpectraModel.STATUS).data(Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith("needs m/z: no precursor m/z")


def test_a_file_without_surprises_gets_no_dialog(qtbot, make_window, write_mgf):
    window = make_window()
    reported = []
    window.file_reported.connect(lambda path, text: reported.append(text))
    path = write_mgf("clean.mgf", titles={NICOTINE, SITAGLIPTIN})
    loaded(qtbot, window, path)
    assert reported == [] and "2 MS/MS records listed, 2 ready to run" in window.statusBar().currentMessage()
    assert "2 ready to run" in window.files.file_reports[str(path)]


def test_new_rows_are_selected_and_scrolled_into_view_with_ids_that_tell_scans_apart(
    qtbot, make_window, fixture_mgf, data_dir
):
    window = make_window()
    window.resize(900, 500)
    loaded(qtbot, window, fixture_mgf)
    assert window.current_entry() is window.spectra.entries[0]
    window.spectra_view.setFocus()
    loaded(qtbot, window, data_dir / "small.mzML")
    first_new = window.spectra.entries[12]
    assert window.current_entry() is first_new  # the new file's first row is selected...
    view = window.spectra_view
    assert view.viewport().rect().contains(view.visualRect(view.currentIndex()).center())  # ...and in view
    ids = [window.spectra.index(r, 0).data() for r in range(12, 20)]
    assert ids[0] == "F0001 · scan=621" and len(set(ids)) == 8  # one precursor feature per scan here
    assert view.textElideMode() == Qt.TextElideMode.ElideMiddle  # the end that tells scans apart stays (issue #38)
    tip = window.spectra.index(12, 0).data(Qt.ItemDataRole.ToolTipRole)
    # the m/z: the precursor peak averaged over the survey scans around the apex (issue #38)
    assert tip.startswith("F0001_mz313.1798") and "controllerType=0 controllerNumber=1 scan=621" in tip

    # a filter that would hide the new file is cleared, so the new rows are seen
    window.spectra_filter.setText("MSBNK")
    loaded(qtbot, window, mzml_without_precursors(data_dir, window.settings.path.parent, n=1))
    assert window.spectra_filter.text() == "" and window.current_entry() is window.spectra.entries[20]


def test_the_filter_searches_mz_and_rt(qtbot, make_window, fixture_mgf, data_dir):
    window = make_window()
    loaded(qtbot, window, fixture_mgf, data_dir / "small.mzML")
    proxy = window.spectra_proxy
    placeholder = window.spectra_filter.placeholderText()
    assert "163.1" in placeholder and "rt:4-5" in placeholder and "m/z" in placeholder
    assert "rt:" in window.spectra_filter.toolTip()

    def ids(text):
        window.spectra_filter.setText(text)
        return [proxy.index(r, 0).data() for r in range(proxy.rowCount())]

    assert ids("163.1") == [NICOTINE]  # precursor m/z 163.1230
    assert ids("mz:408-409") == [SITAGLIPTIN]  # 408.1254
    assert len(ids("rt:3.3-3.4")) == 8  # the mzML scans at 200-203 s
    assert ids("rt:0.4-0.5") == [NICOTINE]  # 0.47 min
    assert ids("scan=62") == ["F0001 · scan=621", "F0002 · scan=622", "F0003 · scan=624", "F0004 · scan=625",
                              "F0005 · scan=626", "F0006 · scan=628", "F0007 · scan=629"]
    assert ids("F0008") == ["F0008 · scan=630"]
    assert ids("mz:462-463") == ["F0003 · scan=624"]
    assert ids("") and proxy.rowCount() == 20


def test_apply_to_selected_sets_one_formula_where_it_fits(qtbot, make_window, tmp_path):
    window = make_window()
    records = [(f"nicotine scan {i}", "163.1230", NICOTINE_PEAKS, []) for i in range(3)]
    records.append(("other", "250.1000", NICOTINE_PEAKS[:-1], []))
    loaded(qtbot, window, mgf(tmp_path, "scans.mgf", records))
    entries = window.spectra.entries
    window.spectra_view.selectAll()
    editor = window.spectrum_panel.editor
    editor.formula.setText("C10H14N2")
    editor.adduct.setEditText("[M+H]+")
    assert editor.apply_selected.isEnabled()
    editor.apply_selected.click()
    assert [e.spectrum.formula for e in entries] == ["C10H14N2"] * 3 + [None]
    assert [e.spectrum.adduct for e in entries] == ["[M+H]+"] * 3 + [None]
    level, text = window.messages[-1]
    assert "applied to 3 spectra" in text and "other" in text and "too far" in text
    assert [window.spectra.index(r, SpectraModel.STATUS).data() for r in range(4)] == ["not run"] * 4
    run_and_wait(qtbot, window, window.run_menu.run_all)
    assert [e.status for e in entries] == [Status.DONE] * 4
    assert [e.formula_runs for e in entries[:3]] == [[]] * 3  # the formula given
    assert entries[3].formula_runs and entries[3].spectrum.formula is None  # its best formula candidates


def test_run_applies_a_valid_typed_formula_and_keeps_a_wrong_one(qtbot, make_window, write_mgf):
    window = make_window()
    loaded(qtbot, window, write_mgf("bare.mgf", titles={NICOTINE}, drop_keys=("FORMULA", "ADDUCT", "SMILES", "INCHIKEY")))
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    editor = window.spectrum_panel.editor
    hint = editor.message
    assert "No formula: Run takes the best candidates (Formulas tab)" in hint.text()
    assert "Enter the formula and adduct" in hint.toolTip()
    plain = re.sub(r"<[^>]+>", "", hint.text())
    assert hint.wordWrap() and hint.heightForWidth(hint.width()) <= hint.height() + 1  # not cut
    assert QFontMetrics(hint.font()).horizontalAdvance(plain) <= hint.width()  # and on one line here

    editor.formula.setText("C10H14N")  # wrong for this precursor, not applied: Run says so and keeps it
    editor.adduct.setEditText("[M+H]+")
    assert window.run_menu.run_entries([entry]) is False
    level, text = window.messages[-1]
    assert "cannot be applied" in text and "too far" in text and "Set formula" not in text
    assert editor.formula.text() == "C10H14N" and entry.spectrum.formula is None

    editor.formula.setText("C10H14N2")  # valid, typed, not applied: Run applies it
    assert not editor.apply.isHidden() and editor.apply.isEnabled()
    run_and_wait(qtbot, window, window.run_selected)
    assert entry.spectrum.formula == "C10H14N2" and entry.result.spectrum.formula == "C10H14N2"
    assert editor.formula.text() == "C10H14N2"
    assert all("Set formula" not in t for _, t in window.messages)


def test_a_spectrum_without_formula_or_candidates_says_how_to_give_one(qtbot, make_window, tmp_path):
    window = make_window()
    # a nominal precursor (MassBank style) allows no formula candidates
    loaded(qtbot, window, mgf(tmp_path, "nominal.mgf", [("nicotine", "163", NICOTINE_PEAKS, ["CHARGE=1+",
                                                                                           "ADDUCT=[M+H]+"])]))
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    assert window.run_menu.run_entries([entry]) is False
    level, text = window.messages[-1]
    assert "no molecular formula" in text and "below the spectrum" in text and "Set formula" not in text
    assert "needs formula" in window.candidates.summary.text()


def test_a_scan_without_precursor_is_plotted_and_runs_once_one_is_typed(qtbot, make_window, data_dir, tmp_path):
    window = make_window()
    loaded(qtbot, window, mzml_without_precursors(data_dir, tmp_path))
    entry = window.spectra.entries[0]
    assert entry.spectrum is None and entry.status == Status.SKIPPED and entry.n_peaks == 202
    assert window.current_entry() is entry
    canvas = window.spectrum_panel.canvas
    assert isinstance(canvas.spectrum, SkippedRecord) and canvas.ax.collections  # the peaks are drawn
    header = window.spectrum_panel.header
    assert "no precursor m/z (PEPMASS, or the selected ion in mzML)" in header.text()
    QApplication.processEvents()  # the layout request the new text posted (the app's event loop runs it)
    assert header.wordWrap() and header.heightForWidth(header.width()) <= header.height() + 1  # not cut
    row = [window.spectra.index(0, c).data() for c in range(SpectraModel.STATUS + 1)]
    assert row == ["scan=621", "", "", "", "3.34", "", 202, "needs m/z"]

    editor = window.spectrum_panel.editor
    assert editor.precursor.isEnabled() and editor.precursor.text() == ""
    assert not editor.apply.isEnabled() and "Enter the precursor m/z" in editor.message.text()
    editor.precursor.setText("313.1798")
    editor.formula.setText("C20H24O3")
    editor.adduct.setEditText("[M+H]+")
    assert GREEN in editor.message.text() and editor.apply.isEnabled()
    editor.apply.click()
    assert entry.spectrum is not None and entry.spectrum.precursor_mz == 313.1798 and entry.status == Status.NOT_RUN
    assert window.spectra.index(0, SpectraModel.MZ).data() == "313.1798 *"
    assert "Typed by you" in window.spectra.index(0, SpectraModel.MZ).data(Qt.ItemDataRole.ToolTipRole)
    assert canvas.spectrum is entry.spectrum and canvas.annotation is not None
    run_and_wait(qtbot, window, window.run_selected)
    assert entry.result is not None and entry.result.spectrum.precursor_mz == 313.1798

    editor.reset.click()  # back to the record as read
    assert entry.spectrum is None and entry.status == Status.SKIPPED and entry.result is None
    assert window.spectra.index(0, SpectraModel.STATUS).data() == "needs m/z"


def test_a_spectrum_of_the_precursor_only_is_flagged_in_the_list_and_the_result(qtbot, make_window, tmp_path):
    window = make_window()
    extra = ["CHARGE=1+", "ADDUCT=[M+H]+", "FORMULA=C10H14N2"]
    path = mgf(tmp_path, "flags.mgf", [("precursor only", "163.1230", [(162.12, 3.0), (163.1230, 100.0),
                                                                        (164.1263, 11.0)], extra),
                                       ("fragments", "163.1230", NICOTINE_PEAKS, extra)])
    entries = loaded(qtbot, window, path)
    model = window.spectra
    assert model.index(0, SpectraModel.PEAKS).data() == "3 ⚠" and model.index(1, SpectraModel.PEAKS).data() == 6
    assert "candidates reflect the formula only" in model.index(0, SpectraModel.PEAKS).data(Qt.ItemDataRole.ToolTipRole)
    window.spectra_filter.setText('"no fragments"')
    assert window.spectra_proxy.rowCount() == 1
    window.spectra_filter.clear()
    window.select_entry(entries[0].key)
    flag = window.spectrum_panel.flag
    assert not flag.isHidden() and "candidates reflect the formula only" in flag.text()
    run_and_wait(qtbot, window, window.run_selected)
    assert NO_FRAGMENTS_NOTE.split(":")[1].strip() in window.candidates.summary.text()
    window.select_entry(entries[1].key)
    assert flag.isHidden() and "formula only" not in window.candidates.summary.text()


def test_only_the_models_ion_types_are_offered_and_others_are_refused_before_run(qtbot, make_window, write_mgf):
    window = make_window()
    loaded(qtbot, window, write_mgf("two.mgf", titles={NICOTINE, DAPHNORETIN}))
    editor = window.spectrum_panel.editor
    offered = [editor.adduct.itemText(i) for i in range(editor.adduct.count())]
    assert offered == list(window.bundle.runnable_adducts)  # natively, then by mapping (engine.model.ion_mapping)
    assert offered == ["[M+H]+", "[M+Na]+", "[M+NH4]+", "[M-H2O+H]+", "[M+K]+", "[M]+"]
    assert "[M+H]+, [M+Na]+" in editor.adduct.toolTip()

    negative = next(e for e in window.spectra.entries if e.id == DAPHNORETIN)
    row = window.spectra.row_of(negative.key)
    assert window.spectra.index(row, SpectraModel.STATUS).data() == "ion not supported"  # before any run
    assert "not supported" in window.spectra.index(row, SpectraModel.ADDUCT).data(Qt.ItemDataRole.ToolTipRole)
    window.select_entry(negative.key)
    assert GREEN not in editor.message.text() and "not supported by this model" in editor.message.text()
    assert not editor.apply.isEnabled()

    window.select_entry(window.spectra.entries[0].key)  # nicotine, [M+H]+
    editor.adduct.setEditText("[M+Li]+")  # neither native nor mapped ([M+K]+ is mapped onto [M+H]+)
    assert GREEN not in editor.message.text() and "[M+Li]+ is not supported by this model" in editor.message.text()
    assert not editor.apply.isEnabled()
