"""A reopened project is the work that was saved (issue #54): an LC-MS run's features reopen as one row each, done,
with their Level and Confidence, their formula runs (and formula candidates) inside, RT range, scans, MS1 evidence and
the run's m/z recalibration; opening the run's file again attaches it (a version 1 project gets its features and MS1
back that way); the file dialogs start beside the spectra or in the documents folder, never in the app's folders; an
export's header names its parameters once.

The run is the synthetic caffeine run of tests/gui/test_gui_features.py; the model is the tiny test bundle.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from test_gui_features import CAFFEINE, loaded, run, show_formulas  # noqa: F401  (run: the fixture)

from engine.files.project import FORMAT_VERSION, SAME
from engine.files.project_read import load_project
from msgpt_gui.logic import formulas
from msgpt_gui.logic.entries import Status
from msgpt_gui.models import SpectraModel

SHOWN = (SpectraModel.ID, SpectraModel.MZ, SpectraModel.RT, SpectraModel.SCANS, SpectraModel.STATUS,
         SpectraModel.CONFIDENCE, SpectraModel.LEVEL)


def rows(window):
    m = window.spectra
    return [[m.index(r, c).data() for c in SHOWN] for r in range(m.rowCount())]


def candidates(window, entry):
    window.select_entry(entry.key)
    cm = window.candidates.model
    return [[cm.index(r, c).data() for c in range(cm.columnCount())] for r in range(cm.rowCount())]


def runs_of(entry):
    return [(r.spectrum.formula, r.spectrum.adduct, r.status, r.candidate.formula if r.candidate else None,
             r.candidate.score if r.candidate else None,
             None if r.result is None else [c.inchikey14 for c in r.result.candidates]) for r in entry.formula_runs]


def save(qtbot, window, path):
    with qtbot.waitSignal(window.projects.saved, timeout=30_000) as blocker:
        assert window.projects.save_to(path)
    assert blocker.args == [str(path)]


def open_project(qtbot, window, path):
    with qtbot.waitSignal(window.projects.opened, timeout=60_000) as blocker:
        assert window.projects.open_project(path)
    assert blocker.args == [str(path)]


def attach(qtbot, window, path):
    with qtbot.waitSignal(window.projects.attached, timeout=60_000) as blocker:
        window.files.open_files([path])
    assert blocker.args == [str(path)]
    return window.messages[-1][1]


@pytest.fixture
def ran(qtbot, make_window, run):  # noqa: F811
    """The run read, its formula tables ranked in the Formulas tab (the run's m/z recalibration measured), every
    feature run for its best formulas."""
    window = make_window()
    caffeine, _ = loaded(qtbot, window, run)
    show_formulas(qtbot, window, caffeine)
    recal = formulas.run_recalibration(str(run))
    assert recal is not None and window.formulas.panel.recalibration.recalibration is recal
    with qtbot.waitSignal(window.run_finished, timeout=120_000) as blocker:  # every one of the best k formulas
        # samples (the Formulas tab's Run best k; Run All's formula-run budget would sample only the likely ones)
        window.run_menu.run_entries([e for e in window.spectra.entries if e.spectrum is not None], formulas=True)
    assert blocker.args == ["done"]
    assert caffeine.status == Status.DONE and len(caffeine.formula_runs) >= 2 and caffeine.ms1 is not None
    return window, caffeine, recal


def test_a_saved_lcms_run_reopens_as_it_was(qtbot, make_window, ran, run, tmp_path, monkeypatch):  # noqa: F811
    window, caffeine, recal = ran
    before_rows, before_runs = rows(window), runs_of(caffeine)
    before_candidates = candidates(window, caffeine)
    table = window.candidates.table
    table.selectionModel().setCurrentIndex(window.candidates.proxy.index(len(before_candidates) - 1, 0),
                                           table.selectionModel().SelectionFlag.ClearAndSelect)
    picked = window.candidates.selected_key()
    assert before_rows[0][-1] and before_rows[0][-3] == Status.DONE  # a Level, done
    assert before_candidates and all(r[-1] is not None for r in before_runs)
    path = tmp_path / "run.msgpt"
    save(qtbot, window, path)

    with zipfile.ZipFile(path) as zf:  # one entry per feature, its formula runs inside
        doc = json.loads(zf.read("project.json"))
    assert doc["format_version"] == FORMAT_VERSION == 2 and len(doc["entries"]) == 2
    assert len(doc["entries"][0]["formula_runs"]) == len(before_runs) and doc["recalibrations"]

    # a new session: the recalibration is not measured again (the project's is shown)
    monkeypatch.setattr(formulas, "_recalibrations", {})
    monkeypatch.setattr(formulas, "recalibrate_run", lambda *a, **k: pytest.fail("measured again"))
    other = make_window()
    open_project(qtbot, other, path)
    assert rows(other) == before_rows
    again = other.spectra.entries[0]
    assert other.current_entry() is again and picked and other.candidates.selected_key() == picked
    assert again.status == Status.DONE and runs_of(again) == before_runs
    assert all(r.owner_key == again.key and r.ms1 is again.ms1 for r in again.formula_runs)
    assert candidates(other, again) == before_candidates
    assert again.rt_range == caffeine.rt_range and again.n_scans == 3 and len(again.children) == 3
    assert [c.spectrum.id for c in again.children] == [c.spectrum.id for c in caffeine.children]
    assert np.array_equal(again.ms1.mz, caffeine.ms1.mz) and np.array_equal(again.ms1.intensity, caffeine.ms1.intensity)
    assert again.ms1.scan_id == caffeine.ms1.scan_id
    panel = show_formulas(qtbot, other, again)
    shown = panel.recalibration.recalibration
    assert shown is not None and shown.describe() == recal.describe() and recal.describe() in panel.summary.text()
    assert "MS1: survey scan" in panel.summary.text()

    # saved again, unchanged: the same document
    save(qtbot, other, tmp_path / "again.msgpt")
    with zipfile.ZipFile(tmp_path / "again.msgpt") as zf:
        doc2 = json.loads(zf.read("project.json"))
    assert doc2["entries"] == doc["entries"]

    # opening the run's file again attaches it: nothing listed twice
    text = attach(qtbot, other, run)
    assert text.startswith("Attached run.mzML to the project: 2 of its records are the project's")
    assert rows(other) == before_rows and not other.isWindowModified()
    other.files.open_files([run])  # attached once: now it is open
    assert "run.mzML is already open" in other.statusBar().currentMessage()
    assert other.spectra.rowCount() == 2

    # the project and its file dropped together (or given on the command line): the file attaches once it is open
    third = make_window()
    with qtbot.waitSignals([third.projects.opened, third.projects.attached], timeout=60_000):
        third.files.open_files([run, path])
    assert rows(third) == before_rows and third.runs.is_open(run)

    # Run again on the reopened feature: its formula runs take the samples the project kept, nothing is redrawn
    other.select_entry(again.key)
    with qtbot.waitSignal(other.run_finished, timeout=120_000):
        other.run_menu.run_entries([again], formulas=True)  # its best k again, as the fixture ran them
    assert [r.spectrum.formula for r in again.formula_runs] == [r[0] for r in before_runs]
    assert all(r.result is not None and r.result.new_samples == 0 for r in again.formula_runs)


def v1_document(doc: dict, samples: dict) -> tuple[dict, dict]:
    """``doc`` as version 1 wrote it: no features or recalibrations, formula runs as entries after theirs."""
    entries, keys = [], {}
    for k, d in enumerate(doc["entries"]):
        runs = d.pop("formula_runs", [])
        for key in ("feature", "scan_entries", "candidate"):
            d.pop(key, None)
        keys[str(k)] = str(len(entries))
        original = d["spectrum"] if d["original"] == SAME else d["original"]
        if runs:
            d["status"] = "not run"
        entries.append(d)
        for j, r in enumerate(runs):
            r.pop("candidate", None)
            if r["result"] is None:
                continue
            keys[f"{k}.f{j}"] = str(len(entries))
            entries.append({**r, "original": original})
    doc = {**doc, "format_version": 1, "entries": entries}
    doc.pop("recalibrations")
    return doc, {keys[k]: v for k, v in samples.items()}


def test_a_version_1_project_nests_its_formula_runs_and_attaching_the_run_brings_features_back(
        qtbot, make_window, ran, run, tmp_path):  # noqa: F811
    window, caffeine, _ = ran
    before_rows, before_runs = rows(window), runs_of(caffeine)
    before_candidates = candidates(window, caffeine)
    path = tmp_path / "run.msgpt"
    save(qtbot, window, path)
    old = tmp_path / "old.msgpt"
    with zipfile.ZipFile(path) as zf, zipfile.ZipFile(old, "w") as out:
        doc, samples = v1_document(json.loads(zf.read("project.json")), json.loads(zf.read("samples.json")))
        for name in zf.namelist():
            if name not in ("project.json", "samples.json"):
                out.writestr(name, zf.read(name))
        out.writestr("project.json", json.dumps(doc))
        out.writestr("samples.json", json.dumps(samples))
    assert len(doc["entries"]) >= 2 + sum(r[-1] is not None for r in before_runs)  # one row per formula run
    assert load_project(old).format_version == 1

    other = make_window()
    open_project(qtbot, other, old)
    assert other.spectra.rowCount() == 2  # one row per feature, not one per formula run
    again = other.spectra.entries[0]
    assert again.status == Status.DONE and again.feature is None and again.ms1 is None
    assert [r[:3] + r[5:] for r in runs_of(again)] == [r[:3] + r[5:] for r in before_runs if r[-1] is not None]
    assert candidates(other, again) == before_candidates
    assert [r[SHOWN.index(SpectraModel.LEVEL)] for r in rows(other)] == \
        [r[SHOWN.index(SpectraModel.LEVEL)] for r in before_rows]
    assert all(d.drawn_samples for d in again.formula_runs)  # the samples followed their runs

    text = attach(qtbot, other, run)  # the file fills in what version 1 did not keep
    assert "filled in 2 precursor features with their scans and the MS1 survey evidence of 2" in text
    assert rows(other) == before_rows
    again = other.spectra.entries[0]
    assert again.n_scans == 3 and len(again.children) == 3 and again.ms1 is not None
    assert all(r.ms1 is again.ms1 for r in again.formula_runs)
    assert other.spectra.rowCount(other.spectra.index(0, 0)) == 3
    assert other.isWindowModified()
    panel = show_formulas(qtbot, other, again)  # ranked again, with the survey scan's isotopes
    assert "MS1: survey scan" in panel.summary.text()


def test_the_version_2_file_opens_with_its_feature_as_one_row(qtbot, make_window, data_dir):
    """The committed format-2 project (made up; its model is not here): the feature is one row, done, its formula runs
    inside (their candidates one list), its scans as children (the one with notes keeps them), its MS1 evidence."""
    window = make_window()
    open_project(qtbot, window, data_dir / "project_v2.msgpt")
    m = window.spectra
    assert m.rowCount() == 4
    e = m.entries[3]
    assert m.index(3, SpectraModel.ID).data().startswith("F0001") and m.index(3, SpectraModel.SCANS).data() == 2
    assert m.index(3, SpectraModel.STATUS).data() == Status.DONE and m.index(3, SpectraModel.LEVEL).data()
    assert m.index(3, SpectraModel.RT).data() == f"{64 / 60:.2f}–{67 / 60:.2f}"
    assert [(r.spectrum.formula, r.status, r.candidate.rank) for r in e.formula_runs] == [
        ("C10H10O3", Status.DONE, 1), ("C6H14O6", Status.FAILED, 2)]
    assert m.rowCount(m.index(3, 0)) == 2 and [c.user_notes for c in e.children] == ["", "the later scan is cleaner"]
    assert e.ms1 is not None and e.ms1.scan_id == "scan=6" and all(r.ms1 is e.ms1 for r in e.formula_runs)
    assert len(candidates(window, e)) == 2
    assert all(m.entry(r.key) is r for r in e.formula_runs)


def test_file_dialogs_start_beside_the_spectra_or_in_the_documents_folder(qtbot, make_window, write_mgf, tmp_path,
                                                                       monkeypatch, no_examples):
    import shutil

    from PySide6.QtWidgets import QFileDialog

    from engine.paths import data_dir
    from msgpt_gui import settings

    docs = tmp_path / "Documents"
    docs.mkdir()
    monkeypatch.setattr(settings, "documents_folder", lambda: str(docs))
    asked = []

    def fake_open(parent, caption, start, *filters):
        asked.append(("open", start))
        return ([], "") if caption == "Open spectra" else ("", "")

    def fake_save(parent, caption, suggested, *filters):
        asked.append(("save", suggested))
        return "", ""

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(fake_open))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(fake_open))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(fake_save))
    window = make_window()
    window.files.open_dialog()  # the first Open: the documents folder, not the home folder
    assert asked[-1] == ("open", str(docs))

    shutil.copy(write_mgf("examples.mgf"), no_examples / "examples.mgf")  # the bundled examples (read-only)
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_examples()
    autosaves = data_dir() / "autosave"
    autosaves.mkdir(parents=True, exist_ok=True)
    window.settings.set("projects/last_dir", str(autosaves))  # the app's data folder is never offered
    window.settings.set("files/export_dir", str(autosaves))
    window.projects.save_as()
    assert asked[-1] == ("save", str(docs / "project.msgpt"))
    window.projects.open_dialog()
    assert asked[-1] == ("open", str(docs))
    window.files.open_dialog()
    assert asked[-1] == ("open", str(docs))
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    window.files.export_dialog("selected")
    assert asked[-1] == ("save", str(docs / "candidates.csv"))

    # the user's own spectra: the dialogs start beside them
    data = tmp_path / "data"
    data.mkdir()
    mgf = write_mgf("mine.mgf").rename(data / "mine.mgf")
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([mgf])
    window.files.open_dialog()
    assert asked[-1] == ("open", str(data))
    window.projects.save_as()
    assert asked[-1] == ("save", str(data / "project.msgpt"))
    window.files.export_dialog("all")
    assert asked[-1] == ("save", str(data / "candidates.csv"))


def header(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(": ")
        out[key] = value
    return out


def test_the_exports_header_names_its_parameters_once(qtbot, ran, tmp_path):
    window, caffeine, _ = ran
    path = tmp_path / "features.csv"
    with qtbot.waitSignal(window.export_finished, timeout=30_000):
        assert window.files.export(path, "all")
    info = header(path)
    assert info["parameters"] == window.query_params.describe()  # one set: once, no spectrum IDs
    assert caffeine.id not in info["parameters"]

    # two parameter sets (a spectrum re-run with another seed): each once, with how many spectra drew it
    window.params_panel.seed.setValue(window.query_params.seed + 1)
    window.select_entry(caffeine.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    with qtbot.waitSignal(window.export_finished, timeout=30_000):
        assert window.files.export(path, "all")
    info = header(path)
    sets = info["parameters"].split(" | ")
    assert len(sets) == len({r.params for e in window.spectra.entries for r in e.results()}) == 2
    assert sum(line.startswith("# parameters") for line in path.read_text().splitlines()) == 1
    for e in window.spectra.entries:
        assert info["parameters"].count(e.id) <= 1
