"""Projects in the window: save and reopen the same table, notes, another model, a newer file, closing with
unsaved work, and autosave with recovery after a (simulated) crash. Timers are driven directly."""

from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile

from PySide6.QtCore import QItemSelectionModel, Qt

from engine.files.project import save_project
from engine.files.project_read import load_project
from msgpt_gui.logic.entries import Status
from msgpt_gui.project_view import ProjectController

SITAGLIPTIN = "MSBNK-Eawag-EA290310"
ACETYLPHE = "MSBNK-Antwerp_Univ-METOX_P102203_EF88"
NICOTINE = "MSBNK-NaToxAq-NA003084"
DAPHNORETIN = "MSBNK-Washington_State_Univ-BML00201"


def load(qtbot, window, *paths):
    for path in paths:
        with qtbot.waitSignal(window.file_loaded, timeout=20_000):
            window.files.open_files([path])


def entry_titled(window, title):
    return next(e for e in window.spectra.entries if e.id == title)


def prepare(qtbot, window, write_mgf):
    """Three files: two ready spectra, one without a formula (set here by hand), one record without a precursor
    m/z; parameters changed; everything run; notes and two spectra selected."""
    load(qtbot, window, write_mgf("two.mgf", titles={SITAGLIPTIN, NICOTINE}),
         write_mgf("noformula.mgf", titles={ACETYLPHE}, drop_keys=("FORMULA",)),
         write_mgf("nomz.mgf", titles={NICOTINE}, drop_keys=("PEPMASS",)))
    window.params_panel.seed.setValue(3)
    window.params_panel.ranking.setCurrentText("combined")
    acetylphe = entry_titled(window, ACETYLPHE)
    window.select_entry(acetylphe.key)
    assert window.edits.apply_to_selected("C11H13NO3", "[M+H]+") == 1
    with qtbot.waitSignal(window.run_finished, timeout=120_000) as blocker:
        window.run_menu.run_all()
    assert blocker.args == ["done"]
    sitagliptin = entry_titled(window, SITAGLIPTIN)
    window.select_entry(sitagliptin.key)
    window.projects.notes.setPlainText("Fluorines fit; compare with the standard — ✓")
    other = window.spectra_proxy.mapFromSource(window.spectra.index(window.spectra.row_of(acetylphe.key), 0))
    window.spectra_view.selectionModel().select(
        other, QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows)
    assert window.candidates.proxy.rowCount() >= 1  # the tiny model draws its one memorised structure


def the_table(window):
    """What the user sees and what a run would use, entry by entry."""
    m = window.spectra
    rows = [[m.index(r, c).data() for c in range(m.columnCount())] + [m.index(r, 0).data(Qt.ItemDataRole.ToolTipRole)]
            for r in range(m.rowCount())]
    entries = [(e.id, e.spectrum, e.original, e.status, e.reason, e.user_notes, e.overridden, e.model_checksum,
                None if e.result is None else [(c.rank, c.smiles, c.inchikey14, c.count, c.frequency, c.score,
                                                c.fingerprint_score, c.posterior_similarity)
                                               for c in e.result.candidates],
                None if e.result is None else (e.result.params, e.result.n_samples, e.result.reference_rank))
               for e in m.entries]
    cm = window.candidates.model
    shown = [[cm.index(r, c).data() for c in range(cm.columnCount())] for r in range(cm.rowCount())]
    return {
        "rows": rows, "entries": entries, "shown": shown, "params": window.params_panel.params(),
        "current": window.current_entry().id, "selected": sorted(e.id for e in window.selected_entries()),
        "candidate": window.candidates.selected_key(), "notes": window.projects.notes.toPlainText(),
        "summary": window.candidates.summary.text(),
    }


def save(qtbot, window, path):
    window.projects.ask_project_path = lambda save: path
    with qtbot.waitSignal(window.projects.saved, timeout=30_000) as blocker:
        assert window.projects.save()
    assert blocker.args == [str(path)]


def open_project(qtbot, window, path, expect=True):
    with qtbot.waitSignal(window.projects.opened, timeout=60_000) as blocker:
        assert window.projects.open_project(path)
    assert (blocker.args[0] == str(path)) is expect
    return blocker.args[0]


def test_a_saved_project_reopens_with_the_same_table(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    prepare(qtbot, window, write_mgf)
    assert window.isWindowModified()
    before = the_table(window)
    assert before["notes"] and before["candidate"] and len(before["selected"]) == 2
    assert before["rows"][0][0].endswith("✎") is (window.spectra.entries[0].id == SITAGLIPTIN)
    path = tmp_path / "work.msgpt"
    save(qtbot, window, path)
    assert not window.isWindowModified() and window.windowTitle().startswith("work.msgpt")
    assert str(path.resolve()) in window.projects.recent_projects()

    other = make_window()
    open_project(qtbot, other, path)
    after = the_table(other)
    assert after == before
    assert not other.isWindowModified() and other.windowTitle().startswith("work.msgpt")
    # the filter finds notes; the nomz record is still waiting for its m/z
    other.spectra_filter.setText("standard")
    assert other.spectra_proxy.rowCount() == 1
    other.spectra_filter.clear()
    assert sum(e.spectrum is None for e in other.spectra.entries) == 1
    # the files on this machine count as open: opening one again does not list its records twice
    assert other.runs.is_open(tmp_path / "two.mgf")

    # the samples came along: raising B draws only the new ones
    e = other.current_entry()
    assert e.id == SITAGLIPTIN and e.session is None and e.drawn_samples
    with qtbot.waitSignal(other.run_finished, timeout=60_000):
        other.params_panel.pool.setValue(200)
    assert e.result.n_samples == 200 and e.result.new_samples == 100
    assert other.isWindowModified()


def test_a_project_opens_without_its_spectra_files(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    mgf = write_mgf("moved.mgf", titles={NICOTINE})
    load(qtbot, window, mgf)
    window.select_entry(window.spectra.entries[0].key)
    window.projects.notes.setPlainText("kept")
    path = tmp_path / "work.msgpt"
    save(qtbot, window, path)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(mgf, moved / mgf.name)

    other = make_window()
    open_project(qtbot, other, path)
    assert [e.id for e in other.spectra.entries] == [NICOTINE]
    assert other.spectra.entries[0].spectrum == window.spectra.entries[0].spectrum
    assert other.spectra.entries[0].user_notes == "kept"
    level, text = other.messages[-1]
    assert level == "info" and "moved.mgf is not at its saved place" in text and "holds its own copy" in text


def test_a_project_of_another_model_warns_and_keeps_its_candidates(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    load(qtbot, window, write_mgf("one.mgf", titles={SITAGLIPTIN}))
    window.select_entry(window.spectra.entries[0].key)
    with qtbot.waitSignal(window.run_finished, timeout=60_000):
        window.run_selected()
    path = tmp_path / "work.msgpt"
    save(qtbot, window, path)
    project = load_project(path)  # as if made elsewhere with a model that is not here
    other_model = "f" * 64
    project.model = dataclasses.replace(project.model, name="big-model", checksum=other_model, path="/gone/big-model")
    for e in project.entries:
        e.model_checksum = other_model
    save_project(path, project)

    other = make_window()
    open_project(qtbot, other, path)
    level, text = other.messages[-1]
    assert level == "warning" and "big-model [ffffffff]" in text and "shown as they were saved" in text
    e = other.spectra.entries[0]
    stored = [c.smiles for c in e.result.candidates]
    assert stored and e.model_checksum == other_model and other.candidates.model.rowCount() == len(stored)
    with qtbot.waitSignal(other.run_finished, timeout=60_000):  # running again draws with the loaded model
        other.run_selected()
    assert e.model_checksum == other.bundle.checksum and e.result.new_samples == e.result.n_samples


def test_the_projects_model_is_loaded_when_it_is_on_this_machine(qtbot, make_window, gui_bundle_dir, write_mgf,
                                                                  tmp_path):
    renamed = tmp_path / "renamed_model"
    shutil.copytree(gui_bundle_dir, renamed)
    config = json.loads((renamed / "config.json").read_text())
    config["name"] = "renamed-tiny"
    (renamed / "config.json").write_text(json.dumps(config))
    window = make_window(model=renamed)
    load(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    window.select_entry(window.spectra.entries[0].key)
    with qtbot.waitSignal(window.run_finished, timeout=60_000):
        window.run_selected()
    path = tmp_path / "work.msgpt"
    save(qtbot, window, path)

    other = make_window()  # the original tiny bundle: another checksum
    assert other.bundle.checksum != window.bundle.checksum
    open_project(qtbot, other, path)
    assert other.bundle.name == "renamed-tiny" and other.bundle.checksum == window.bundle.checksum
    assert other.spectra.entries[0].result is not None
    assert not any(level == "warning" for level, _ in other.messages)


def test_the_version_1_file_opens_with_its_selected_candidate(qtbot, make_window, data_dir, tmp_path):
    """The committed format-1 project (made-up candidates of a model that is not here) opens in the app, with the
    candidate that was selected (the second one here)."""
    project = load_project(data_dir / "project_v1.msgpt")
    project.selection = dataclasses.replace(project.selection, candidate="AFDXODALSZRGIH")
    path = tmp_path / "v1.msgpt"
    save_project(path, project)
    window = make_window()
    open_project(qtbot, window, path)
    assert window.current_entry().id == "mellein" and window.current_entry().user_notes.startswith("Lactone")
    assert window.projects.notes.toPlainText() == "Lactone; compare with the standard."
    assert window.candidates.model.rowCount() == 2 and window.candidates.selected_key() == "AFDXODALSZRGIH"
    assert sorted(e.id for e in window.selected_entries()) == ["mellein", "no-formula"]
    assert window.params_panel.params().decoding == "free" and window.params_panel.params().seed == 11
    assert "fixture-model [01234567]" in window.messages[-1][1]


def test_a_newer_project_is_refused_and_the_document_kept(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    load(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    path = tmp_path / "future.msgpt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("project.json", json.dumps({"format": "msgpt-project", "format_version": 99,
                                                "saved_by": "msgpt 7.0", "entries": []}))
    open_project(qtbot, window, path, expect=False)
    level, text = window.messages[-1]
    assert level == "error" and "project format 99" in text and "Update MS-GPT Desktop" in text
    assert [e.id for e in window.spectra.entries] == [NICOTINE]


def test_dropping_a_project_file_opens_it(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    load(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    path = tmp_path / "work.msgpt"
    save(qtbot, window, path)
    other = make_window()
    with qtbot.waitSignal(other.projects.opened, timeout=60_000):
        other.files.open_files([path])
    assert [e.id for e in other.spectra.entries] == [NICOTINE]


def test_closing_with_unsaved_work_asks(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    load(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    window.select_entry(window.spectra.entries[0].key)
    window.projects.notes.setPlainText("worth keeping")
    window.projects.ask_save_changes = lambda: "cancel"
    window.close()
    assert window.isVisible()
    path = tmp_path / "closing.msgpt"
    window.projects.ask_save_changes = lambda: "save"
    window.projects.ask_project_path = lambda save: path
    window.close()
    assert not window.isVisible()
    assert load_project(path).entries[0].notes == "worth keeping"
    assert not window.projects.autosave.path.exists()  # a clean exit leaves no autosave


def test_autosave_is_offered_after_a_crash_and_not_after_a_clean_exit(qtbot, make_window, write_mgf, monkeypatch):
    offers = []

    def answer(self, summary):
        offers.append(summary)
        return True

    monkeypatch.setattr(ProjectController, "ask_restore", answer)
    crashed = make_window()
    assert crashed.projects.autosave.enabled
    load(qtbot, crashed, write_mgf("two.mgf", titles={SITAGLIPTIN, NICOTINE}))
    crashed.select_entry(entry_titled(crashed, SITAGLIPTIN).key)
    with qtbot.waitSignal(crashed.projects.autosaved, timeout=60_000):  # after each finished run
        with qtbot.waitSignal(crashed.run_finished, timeout=60_000):
            crashed.run_selected()
    crashed.projects.notes.setPlainText("typed after the run")
    # the first write's thread may still be ending after it reported (a loaded machine): a tick then skips
    qtbot.waitUntil(lambda: crashed.projects.io is None, timeout=30_000)
    with qtbot.waitSignal(crashed.projects.autosaved, timeout=30_000):  # and every few minutes
        crashed.projects.autosave_timer.timeout.emit()
    assert crashed.projects.autosave_now() is False  # nothing changed since
    before = the_table(crashed)

    alive = make_window()  # a second window while the first still runs: its autosave is not offered
    assert offers == [] and alive.spectra.entries == []

    crashed.projects.autosave.lock.unlock()  # the process dies: its lock is gone (or stale)
    crashed.shutdown()
    autosave = crashed.projects.autosave.path
    assert autosave.exists()

    restored = make_window()
    qtbot.waitUntil(lambda: len(restored.spectra.entries) == 2, timeout=60_000)
    assert len(offers) == 1 and offers[0].n_entries == 2 and offers[0].n_results == 1
    after = the_table(restored)
    assert after == before
    assert entry_titled(restored, SITAGLIPTIN).status == Status.DONE
    assert restored.isWindowModified()  # restored work is not saved anywhere yet
    assert not autosave.exists() and restored.projects.autosave.path.exists()  # it is this session's now

    restored.close()  # a clean exit (no popups: unsaved work is discarded)
    assert not restored.projects.autosave.path.exists()
    make_window()
    assert len(offers) == 1
