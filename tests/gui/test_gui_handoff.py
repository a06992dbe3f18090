"""The app takes the hand-off files (#60): a GNPS-FBMN MGF dropped on the window lists one row per feature with the
IDs MZmine wrote, its abundance from the _quant.csv beside it (column shown, sortable, filterable), an MZmine SIRIUS
export opened with File ▸ Open keeps its MS1 isotope pattern, and File ▸ Export Feature Table writes one row per
listed feature. Runs nothing: what is checked is what the files say, not what the tiny model would generate."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from synthetic_run import write_shifted_run

from msgpt_gui.models import SpectraModel

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("write_handoff_files", ROOT / "scripts" / "write_handoff_files.py")
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)


@pytest.fixture
def handoff(tmp_path):
    run = write_shifted_run(tmp_path / "run.mzML", 0.0)
    return writer.write_all(run, tmp_path / "out")


def drop(window, *paths):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    window.dragEnterEvent(enter)
    assert enter.isAccepted()
    event = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    return event


def test_a_dropped_gnps_mgf_lists_features_with_their_abundance(qtbot, make_window, handoff, tmp_path):
    window = make_window()
    with qtbot.waitSignal(window.file_loaded, timeout=30_000):
        assert drop(window, handoff["feature_mgf"]).isAccepted()
    model, view = window.spectra, window.spectra_view
    assert model.rowCount() == 6
    assert [e.id for e in model.entries] == [str(k) for k in range(1, 7)]  # the row IDs MZmine wrote
    assert all(e.feature is not None for e in model.entries)
    with open(handoff["quant"], encoding="utf-8") as fh:
        areas = {row["row ID"]: float(row["run.mzML Peak area"]) for row in csv.DictReader(fh)}
    assert [e.abundance for e in model.entries] == [areas[e.id] for e in model.entries]
    assert not view.isColumnHidden(SpectraModel.ABUNDANCE)
    assert model.index(0, SpectraModel.ABUNDANCE).data() == f"{areas['1']:.4g}"
    assert "run.mzML" in model.index(0, SpectraModel.ABUNDANCE).data(Qt.ItemDataRole.ToolTipRole)
    window.spectra_list.filter.setText(f"abundance:{areas['1'] + 1:.0f}-")  # every area is 1e6: none above
    assert window.spectra_list.proxy.rowCount() == 0
    window.spectra_list.filter.setText("abundance:1-")
    assert window.spectra_list.proxy.rowCount() == 6

    out = tmp_path / "features.tsv"
    assert window.files.export_feature_table(out) == 6
    with open(out, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert [r["feature_id"] for r in rows] == [str(k) for k in range(1, 7)]
    assert all(r["status"] == "not run" and float(r["abundance"]) == areas[r["feature_id"]] for r in rows)


def test_an_opened_mzmine_sirius_export_keeps_its_isotope_pattern(qtbot, make_window, handoff):
    window = make_window()
    with qtbot.waitSignal(window.file_loaded, timeout=30_000):
        window.files.open_files([handoff["mzmine_sirius"]])
    entries = window.spectra.entries
    assert [e.id for e in entries] == [str(k) for k in range(1, 7)]
    assert [e.display_id for e in entries] == [str(k) for k in range(1, 7)]  # the tool's ID as written, not "1 · 1"
    assert all(e.ms1 is not None and e.ms1.mz.size >= 2 for e in entries)
    assert window.spectra_view.isColumnHidden(SpectraModel.ABUNDANCE)  # no quant table, no intensity: no column


def test_a_quant_table_added_to_an_open_mzml_run_fills_the_abundance_column(qtbot, make_window, handoff, tmp_path):
    run = handoff["quant"].parent.parent / "run.mzML"
    window = make_window()
    with qtbot.waitSignal(window.file_loaded, timeout=30_000):
        window.files.open_files([run])
    assert window.spectra_view.isColumnHidden(SpectraModel.ABUNDANCE)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    assert window.files.add_quant_table(bad) == 0
    assert "no feature ID column" in window.messages[-1][1]
    assert window.files.add_quant_table(handoff["quant"]) == 6  # MS-GPT's own IDs: joined by m/z and RT
    assert not window.spectra_view.isColumnHidden(SpectraModel.ABUNDANCE)
    assert all(e.abundance == 1e6 for e in window.spectra.entries)
