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
