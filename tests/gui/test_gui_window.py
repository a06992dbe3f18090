"""Opening files (drop, menu, recent), messages, the model choice, settings and the entry point."""

from __future__ import annotations

import gzip
import shutil
import sys

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence

from engine.paths import config_dir
from msgpt_gui.candidates_model import CandidatesModel
from msgpt_gui.logic.entries import Status


def drop(window, *paths):
    """Deliver a drop of ``paths`` exactly as Qt does when files are dragged onto the window."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(QPoint(20, 20),  # QPoint here (Qt 6 API), QPointF for the drop
                            Qt.DropAction.CopyAction, mime,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    window.dragEnterEvent(enter)
    assert enter.isAccepted()
    event = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    return event


def test_dropped_files_load_in_the_background_and_list_every_record(qtbot, make_window, fixture_mgf, tmp_path):
    window = make_window()
    gz = tmp_path / "copy.mgf.gz"
    gz.write_bytes(gzip.compress(fixture_mgf.read_bytes()))
    with qtbot.waitSignals([window.file_loaded, window.file_loaded], timeout=20_000):
        event = drop(window, fixture_mgf, gz)
    assert event.isAccepted()
    model = window.spectra
    assert model.rowCount() == 24
    row = [model.index(0, c).data() for c in range(model.columnCount())]
    assert row == ["MSBNK-Athens_Univ-AU406406", "321.2020", "[M+H]+", "C14H28N2O6", "2.60", "", 27, Status.NOT_RUN, "",
                   "", "", ""]  # confidence and identification level: not run yet; no abundance (no quant table);
    # no compound group (adduct groups, #56: an MGF library is never grouped)
    assert model.COLUMNS[-1] == "Group" and len(row) == len(model.COLUMNS)
    # a library looks like a plain list: no Scans column, no Group column, no branches
    assert window.spectra_view.isColumnHidden(model.SCANS) and not window.spectra_view.rootIsDecorated()
    assert window.spectra_view.isColumnHidden(model.GROUP) and not model.has_groups
    assert window.current_entry() is model.entries[0]  # the first spectrum is shown
    assert window.spectrum_panel.canvas.annotation is not None
    assert "12 spectra" not in window.spectra_title.text() and "24 spectra" in window.spectra_title.text()
    assert str(fixture_mgf.resolve()) in window.settings.recent_files()

    # dropping the same file again does not list it twice
    drop(window, fixture_mgf)
    qtbot.waitUntil(lambda: window.loader is None, timeout=5_000)
    assert model.rowCount() == 24

    # sorting and filtering the list
    window.spectra_filter.setText("[M-H]-")
    assert window.spectra_proxy.rowCount() == 4
    window.spectra_filter.clear()
    window.spectra_view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
    assert window.spectra_proxy.index(0, 1).data() == "408.1254"


def test_mzml_records_load_and_ms1_scans_are_not_listed(qtbot, make_window, data_dir):
    window = make_window()
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        drop(window, data_dir / "small.mzML")
    assert window.spectra.rowCount() == 8  # MS2 scans only, one precursor feature each
    assert all(e.spectrum is None or e.spectrum.formula is None for e in window.spectra.entries)
    assert [e.n_scans for e in window.spectra.entries] == [1] * 8


def test_bad_file_shows_a_readable_message_and_the_window_stays_usable(qtbot, make_window, tmp_path, fixture_mgf):
    window = make_window()
    bad = tmp_path / "broken.mgf"
    bad.write_text("this is not a spectrum file\n")
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        drop(window, bad)
    level, text = window.messages[-1]
    assert level == "error" and "broken.mgf" in text and "BEGIN IONS" in text
    assert "Traceback" not in text
    assert window.spectra.rowCount() == 0

    missing = tmp_path / "nowhere.mgf"
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([missing])
    assert "nowhere.mgf" in window.messages[-1][1] and window.messages[-1][0] == "error"

    with qtbot.waitSignal(window.file_loaded, timeout=20_000):  # still usable
        drop(window, fixture_mgf)
    assert window.spectra.rowCount() == 12


def test_a_truncated_file_keeps_the_records_read_before_the_problem(qtbot, make_window, tmp_path, fixture_mgf):
    window = make_window()
    data = gzip.compress(fixture_mgf.read_bytes() * 40)  # 480 records
    cut = tmp_path / "cut.mgf.gz"
    cut.write_bytes(data[: len(data) * 3 // 4])
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([cut])
    assert window.messages and window.messages[-1][0] == "error"
    assert "truncated" in window.messages[-1][1]
    assert 0 < window.spectra.rowCount() < 480
    assert "kept" in window.messages[-1][1]


def test_without_a_model_the_app_starts_says_so_and_a_folder_can_be_picked(
    qtbot, make_window, gui_bundle_dir, tmp_path, fixture_mgf
):
    window = make_window(model=None, files=[fixture_mgf])
    qtbot.waitUntil(lambda: window.loader is None, timeout=20_000)
    assert window.bundle is None
    assert "No model loaded" in window.statusBar().currentMessage()
    assert "No model loaded" in window.models.model_label.text() and "Open Model Folder" in window.models.model_label.text()
    assert not window.run_menu.act_run.isEnabled()
    assert window.run_menu.run_entries(window.spectra.entries[:1]) is False
    assert "Open Model Folder" in window.messages[-1][1]

    # a folder that is not a bundle: a message, still no model
    not_bundle = tmp_path / "empty"
    not_bundle.mkdir()
    with qtbot.waitSignal(window.model_changed, timeout=20_000):
        window.models.choose_model(not_bundle)
    assert window.bundle is None and "config.json is missing" in window.messages[-1][1]

    with qtbot.waitSignal(window.model_changed, timeout=20_000):
        window.models.choose_model(gui_bundle_dir)
    assert window.bundle is not None
    qtbot.waitUntil(window.run_menu.act_run.isEnabled, timeout=5_000)
    assert window.settings.model_path == str(gui_bundle_dir)


def test_settings_and_layout_persist_between_runs(qtbot, make_window, home, fixture_mgf):
    window = make_window(wait_model=False, model=None)
    window.params_panel.kappa_min.setValue(0.8)
    window.params_panel.groups.setValue(10)
    window.params_panel.pool.setValue(300)
    window.resize(960, 680)
    size = (window.width(), window.height())
    window.main_splitter.setSizes([250, 300])
    sizes = window.main_splitter.sizes()
    window.settings.add_recent_file(str(fixture_mgf))
    window.close()
    ini = config_dir() / "msgpt-gui.ini"
    assert ini.is_file() and str(ini).startswith(str(home))

    again = make_window(wait_model=False, model=None)
    p = again.query_params
    assert (p.kappa_min, p.groups, p.pool_size) == (0.8, 10, 300)
    assert again.params_panel.pool_size == 300
    assert again.height() == size[1]  # (the offscreen screen is 800 wide: Qt clamps a wider width on restore)
    assert again.settings.bytes_value("window/geometry") is not None
    assert again.main_splitter.sizes() == sizes
    assert again.settings.recent_files() == [str(fixture_mgf.resolve())]
    again.files._fill_recent_menu()
    assert [a.text() for a in again.files.recent_menu.actions()][0] == "fixture.mgf"


def test_first_start_opens_the_example_spectra(qtbot, make_window, no_examples, fixture_mgf):
    shutil.copy(fixture_mgf, no_examples / "example.mgf")
    first = make_window(wait_model=False, model=None)
    qtbot.waitUntil(lambda: first.spectra.rowCount() == 12 and first.loader is None, timeout=20_000)
    first.close()
    second = make_window(wait_model=False, model=None)
    assert second.spectra.rowCount() == 0 and second.loader is None and not second.runs.load_queue


def test_menus_and_shortcuts_a_desktop_user_expects(make_window):
    window = make_window(wait_model=False, model=None)
    shortcuts = {a.shortcut().toString(QKeySequence.SequenceFormat.PortableText): a.text().replace("&", "")
                 for a in window.findChildren(type(window.files.act_open)) if not a.shortcut().isEmpty()}
    assert shortcuts["Ctrl+O"].startswith("Open Spectra")
    assert shortcuts["Ctrl+E"].startswith("Export")
    assert shortcuts["Ctrl+R"] == "Run Selected"
    assert shortcuts["Esc"] == "Cancel"
    assert shortcuts["Ctrl+Q"] == "Quit"
    menus = [a.text().replace("&", "") for a in window.menuBar().actions()]
    assert menus == ["File", "Run", "Model", "Help"]
    for widget in (window.params_panel.kappa_min, window.params_panel.groups, window.params_panel.pool):
        assert "κ" in widget.toolTip() or "B" in widget.toolTip()
    assert "Tanimoto" in window.candidates.model.headerData(CandidatesModel.SIMILARITY, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    assert "fidelity" in window.candidates.reference.toolTip()


def test_msgpt_gui_entry_point_takes_model_device_and_files(qtbot, home, no_examples, gui_bundle_dir, fixture_mgf,
                                                            monkeypatch):
    from PySide6.QtWidgets import QApplication

    from msgpt_gui import app as app_module

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    monkeypatch.setattr(app_module, "configure_threads", lambda: None)
    args = app_module.build_parser().parse_args(["--model", "M", "--device", "cpu", "a.mgf", "b.mzML"])
    assert (args.model, args.device, args.files) == ("M", "cpu", ["a.mgf", "b.mzML"])

    app, window = app_module.create_window(["--model", str(gui_bundle_dir), "--device", "cpu", str(fixture_mgf)],
                                           popups=False)
    qtbot.addWidget(window)
    assert app is QApplication.instance() and window.isVisible()
    qtbot.waitUntil(lambda: window.bundle is not None and window.spectra.rowCount() == 12 and window.loader is None,
                    timeout=30_000)
    assert window.device == "cpu"
    window.shutdown()
    import logging

    for handler in [h for h in logging.getLogger().handlers if getattr(h, "_msgpt_gui", False)]:
        logging.getLogger().removeHandler(handler)
        handler.close()
