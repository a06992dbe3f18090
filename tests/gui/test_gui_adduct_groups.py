"""The app on a run with adduct partners (issue #56, item 2): the spectra list shows each feature's compound group,
Run decides the group together (engine.formulas.groups, as msgpt predict does), elucidates its lead once, and the
sodium adduct's row shows the group's answer.

The run is tests/synthetic_run.py's adduct run: caffeine [M+H]+ (four fragments) and [M+Na]+ (one weak fragment)
co-eluting, and three ions that are not partners. The model is the tiny test bundle; nothing depends on what it
happens to generate.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile

from PySide6.QtCore import Qt
from synthetic_run import CAFFEINE, ion_mz, write_adduct_run

from msgpt_gui.logic.entries import Status
from msgpt_gui.models import SpectraModel

TIP = Qt.ItemDataRole.ToolTipRole


def loaded(qtbot, window, path):
    with qtbot.waitSignals([window.file_loaded], timeout=30_000):
        window.files.open_files([path])
    return window.spectra.entries


def entry_at(entries, mz, rt=60.0):
    (e,) = [e for e in entries if abs(e.spectrum.precursor_mz - mz) < 0.002 and abs(e.retention_time - rt) < 5]
    return e


def test_a_sodium_adduct_shows_its_groups_answer(qtbot, make_window, tmp_path):
    window = make_window()
    entries = loaded(qtbot, window, write_adduct_run(tmp_path / "adducts.mzML"))
    model, view = window.spectra, window.spectra_view
    h = entry_at(entries, ion_mz(CAFFEINE, "[M+H]+"))
    na = entry_at(entries, ion_mz(CAFFEINE, "[M+Na]+"))
    isomer = entry_at(entries, ion_mz(CAFFEINE, "[M+Na]+"), rt=150.0)
    row = {e.key: r for r, e in enumerate(model.entries)}
    assert not view.isColumnHidden(SpectraModel.GROUP)
    assert model.index(row[na.key], SpectraModel.GROUP).data() == "G0001 [M+Na]+"
    assert model.index(row[h.key], SpectraModel.GROUP).data() == "G0001 [M+H]+"
    assert model.index(row[isomer.key], SpectraModel.GROUP).data() == ""
    assert "Compound group G0001" in model.index(row[na.key], SpectraModel.GROUP).data(TIP)

    # Run on the sodium adduct alone: the group decides, its [M+H]+ member is elucidated, the Na row shows the answer
    window.select_entry(na.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000) as blocker:
        window.run_selected()
    assert blocker.args == ["done"]
    assert h.formula_runs and not na.formula_runs  # only the lead ran
    assert h.formula_runs[0].spectrum.formula == CAFFEINE and h.formula_runs[0].spectrum.adduct == "[M+H]+"
    assert na.group_lead is h and na.status == Status.DONE and h.status == Status.DONE
    shown, lead = na.shown, h.shown
    assert shown is not None and [c.smiles for c in shown.candidates] == [c.smiles for c in lead.candidates]
    assert shown.spectrum.id == na.id and shown.spectrum.adduct == "[M+Na]+" and shown.spectrum.formula == CAFFEINE
    assert model.index(row[na.key], SpectraModel.FORMULA).data().startswith(CAFFEINE)
    assert model.index(row[na.key], SpectraModel.ADDUCT).data() == "[M+Na]+"
    assert "this member shows its answer" in model.index(row[na.key], SpectraModel.GROUP).data(TIP)
    assert isomer.status == Status.NOT_RUN  # not a member: not run
    window.select_entry(na.key)  # the summary says whose answer the sodium adduct shows
    qtbot.waitUntil(lambda: "The answer of compound group G0001" in window.candidates.summary.text(), timeout=10_000)
    assert "[M+H]+ member" in window.candidates.summary.text()

    # exported under its own id and ion type, with the group's candidates and compound_group
    path = tmp_path / "out.csv"
    with qtbot.waitSignal(window.export_finished, timeout=30_000):
        assert window.files.export(path, "all")
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    rows = list(csv.DictReader(io.StringIO(text)))
    na_rows = [r for r in rows if r["spectrum_id"] == na.id]
    h_rows = [r for r in rows if r["spectrum_id"] == h.id]
    assert na_rows and [r["smiles"] for r in na_rows] == [r["smiles"] for r in h_rows]
    assert {r["adduct"] for r in na_rows} == {"[M+Na]+"} and {r["compound_group"] for r in na_rows + h_rows} == {"G0001"}


def export_rows(qtbot, window, path):
    with qtbot.waitSignal(window.export_finished, timeout=30_000):
        assert window.files.export(path, "all")
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def group_cells(window):
    m = window.spectra
    return [(m.index(r, SpectraModel.ID).data(), m.index(r, SpectraModel.GROUP).data(),
             m.index(r, SpectraModel.GROUP).data(TIP), m.index(r, SpectraModel.FORMULA).data(),
             m.index(r, SpectraModel.ADDUCT).data(), m.index(r, SpectraModel.STATUS).data())
            for r in range(m.rowCount())]


def test_a_saved_group_reopens_as_it_was(qtbot, make_window, tmp_path):
    """A project saved after a group ran keeps its groups: the Group column, each member's answer (the lead's
    candidates under the member's own id and ion type) and the export come back as they were."""
    window = make_window()
    entries = loaded(qtbot, window, write_adduct_run(tmp_path / "adducts.mzML"))
    na = entry_at(entries, ion_mz(CAFFEINE, "[M+Na]+"))
    window.select_entry(na.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    assert na.group_lead is not None
    before_cells, before_rows = group_cells(window), export_rows(qtbot, window, tmp_path / "before.csv")
    before_shown = {e.id: (e.shown.spectrum.id, e.shown.spectrum.adduct, e.shown.spectrum.formula,
                           [c.smiles for c in e.shown.candidates]) for e in entries if e.shown is not None}
    path = tmp_path / "groups.msgpt"
    with qtbot.waitSignal(window.projects.saved, timeout=30_000):
        assert window.projects.save_to(path)

    other = make_window()
    with qtbot.waitSignal(other.projects.opened, timeout=60_000):
        assert other.projects.open_project(path)
    again = other.spectra.entries
    na2, h2 = (next(e for e in again if e.id == x.id) for x in (na, na.group_lead))
    assert not other.spectra_view.isColumnHidden(SpectraModel.GROUP)
    assert group_cells(other) == before_cells
    assert na2.group_lead is h2 and h2.group_lead is None and na2.status == Status.DONE
    assert other.runs._followers[h2.key] == (na2.key,)  # its row follows the lead's next run
    assert {m.id for m in na2.feature.partners} == {h2.id} and na2.feature.group == na.feature.group
    shown = {e.id: (e.shown.spectrum.id, e.shown.spectrum.adduct, e.shown.spectrum.formula,
                    [c.smiles for c in e.shown.candidates]) for e in again if e.shown is not None}
    assert shown == before_shown and shown[na2.id][:3] == (na.id, "[M+Na]+", CAFFEINE)
    assert export_rows(qtbot, other, tmp_path / "after.csv") == before_rows

    # saved again, unchanged: the same document
    with qtbot.waitSignal(other.projects.saved, timeout=30_000):
        assert other.projects.save_to(tmp_path / "again.msgpt")
    documents = [json.loads(zipfile.ZipFile(p).read("project.json"))["entries"] for p in (path, tmp_path / "again.msgpt")]
    assert documents[0] == documents[1]
