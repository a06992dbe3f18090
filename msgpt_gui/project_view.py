"""Projects in the window: File ▸ Open Project / Save Project / Save Project As / Open Recent Project, the notes
field under each spectrum, autosave and recovery after a crash.

The window creates one :class:`ProjectController` and places its actions; everything else is connected
here to signals the window already has. The format is :mod:`engine.files.project`; the document to project and
back is :mod:`msgpt_gui.logic.projects`.

*Autosave.* Every few minutes (``projects/autosave_minutes`` in the settings, default 3) and after each
finished run, a changed document is written to this session's file in ``<user data>/autosave/``, in the
background. The session holds a lock file beside it (QLockFile; both are :mod:`msgpt_gui.autosave`'s); a clean
exit removes both. On start, an autosave whose session is gone without a clean exit (its lock is stale: the
process no longer runs) is offered for restoring; once restored it becomes this session's autosave, so a second
crash loses nothing either (offering and restoring: :class:`msgpt_gui.autosave.RecoveryMixin`). An autosave never
overwrites the user's project file; a restored document keeps the project path it had, and is saved there when the
user saves.

*Attaching.* Opening a spectra file that the opened project's entries came from attaches it to them
(:class:`msgpt_gui.project_attach.AttachMixin`) instead of listing its records twice.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import json
import logging
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QPlainTextEdit

from engine.errors import MsgptError
from engine.files.project import PROJECT_SUFFIX, Selection
from engine.progress import run_to_end

from .actions import make_action
from .autosave import Autosave, RecoveryMixin
from .logic.projects import (
    ProjectOpened,
    ProjectSaved,
    entries_from_project,
    find_model,
    group_followers,
    model_note,
    nested_entries,
    open_job,
    restore_recalibrations,
    same_sources,
    save_job,
    snapshot,
    source_paths,
    sources_note,
    worth_saving,
)
from .project_attach import AttachMixin
from .settings import is_app_folder
from .workers import GeneratorWorker

log = logging.getLogger(__name__)

PROJECT_FILTER = f"MS-GPT projects (*{PROJECT_SUFFIX});;All files (*)"
AUTOSAVE_MINUTES = 3
MAX_RECENT = 10
NOTES_PLACEHOLDER = "Notes on this spectrum (saved with the project; the filter above finds them)…"


def is_project_file(path: Path) -> bool:
    return Path(path).suffix.lower() == PROJECT_SUFFIX


class NotesEditor(QPlainTextEdit):
    """A few lines of the user's notes on the current spectrum."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setPlaceholderText(NOTES_PLACEHOLDER)
        self.setTabChangesFocus(True)
        self.setToolTip("Your notes on this spectrum: what you checked, what a candidate would need… They are saved "
                        "in the project (File ▸ Save Project) and found by the filter of the spectra list.")
        lines = 2.6
        self.setFixedHeight(int(self.fontMetrics().lineSpacing() * lines + 2 * self.frameWidth() + 8))


class ProjectController(AttachMixin, RecoveryMixin, QObject):
    """Actions, notes, autosave and their wiring (see the module notes)."""

    saved = Signal(str)  # the project file written; "" when saving failed or was cancelled
    opened = Signal(str)  # the project file opened; "" when it could not be
    autosaved = Signal(str)  # the autosave file written
    attached = Signal(str)  # a spectra file attached to the entries it holds; "" when it could not be

    def __init__(self, window, autosave_folder: Path | None = None):
        super().__init__(window)
        self.window = window
        self.path: Path | None = None  # the project file of the document (None: not saved yet)
        self.io: GeneratorWorker | None = None  # saving, autosaving or reading a project
        self._generation = 0  # bumped by every change of the document
        self._saved_generation = 0
        self._autosaved_generation = 0
        self._applying = False
        self._hashes: dict = {}  # checksums of source files, by path, size and modification time
        self._after_model: list = []
        self._notes_key: int | None = None
        self._recovering: list[tuple[Path, QLockFile]] = []
        self._open_requested = False  # a project was asked for (it wins over an autosave offered at start)
        self._attachable: set[str] = set()  # the opened project's spectra files, not attached yet (resolved paths)
        self._attach_queue: list[Path] = []

        a = make_action
        self.act_open = a(window, "Open &Project…", self.open_dialog, "Ctrl+Shift+O",
                          f"Open a project ({PROJECT_SUFFIX}): spectra, formulas, parameters, candidates, notes")
        self.act_save = a(window, "&Save Project", self.save, "Ctrl+S",
                          "Save the spectra, what you set by hand, the parameters, the candidates, the selection and "
                          "your notes in one project file")
        self.act_save_as = a(window, "Save Project &As…", self.save_as, "Ctrl+Shift+S",
                             "Save the project in another file")
        self.recent_menu = None

        self.notes = NotesEditor()
        panel = window.spectrum_panel
        panel.layout().insertWidget(panel.layout().indexOf(panel.editor) + 1, self.notes)
        self.notes.textChanged.connect(self._notes_edited)
        window.spectra_view.selectionModel().currentRowChanged.connect(lambda *_: self._show_notes())
        window.spectra.modelReset.connect(self._show_notes)
        self._show_notes()

        runs = window.runs
        runs.records_added.connect(lambda *_: self._changed())
        runs.entry_updated.connect(lambda key, what: self._changed() if what != "ranking" else None)
        editor = window.spectrum_panel.editor
        for signal in (editor.applied, editor.applied_to_selected, editor.reset_requested):
            signal.connect(lambda *_: self._changed())
        window.params_panel.changed.connect(lambda *_: self._changed())
        window.spectra.modelReset.connect(self._changed)
        window.run_finished.connect(lambda outcome: self.autosave_now() if outcome == "done" else None)
        window.model_changed.connect(self._model_changed)

        self.autosave = Autosave(autosave_folder)
        minutes = window.settings.get("projects/autosave_minutes", AUTOSAVE_MINUTES, float)
        self.autosave_timer = QTimer(self, interval=max(1, int(minutes * 60_000)))
        self.autosave_timer.timeout.connect(self.autosave_now)
        if self.autosave.enabled and minutes > 0:
            self.autosave_timer.start()
        QTimer.singleShot(0, self._startup)
        self._update_title()

    def add_file_actions(self, menu) -> None:
        menu.addAction(self.act_open)
        self.recent_menu = menu.addMenu("Open Recent Pro&ject")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        menu.addAction(self.act_save)
        menu.addAction(self.act_save_as)
        menu.addSeparator()

    # ------------------------------------------------------------------------------------------
    # the document's state
    # ------------------------------------------------------------------------------------------
    @property
    def modified(self) -> bool:
        return self._generation != self._saved_generation

    def _changed(self) -> None:
        if self._applying:
            return
        self._generation += 1
        self._update_title()

    def _update_title(self) -> None:
        w = self.window
        w.setWindowTitle(f"{self.path.name}[*] — MS-GPT Desktop" if self.path else "MS-GPT Desktop[*]")
        w.setWindowModified(self.modified and bool(w.spectra.entries))

    def _snapshot(self, app: dict | None = None):
        w = self.window
        entries = w.spectra.entries
        position = {e.key: i for i, e in enumerate(entries)}
        current = w.current_entry()
        selection = Selection(
            current=position.get(current.key) if current is not None else None,
            selected=tuple(position[e.key] for e in w.selected_entries() if e.key in position),
            candidate=w.candidates.selected_key() if current is not None and current.has_results else None,
        )
        try:
            params = w.params_panel.params()
        except MsgptError:  # invalid values typed: the parameters last valid
            params = w.query_params
        return snapshot(entries, params, w.bundle, selection, app)

    # ------------------------------------------------------------------------------------------
    # notes
    # ------------------------------------------------------------------------------------------
    def _show_notes(self) -> None:
        e = self.window.current_entry()
        self._notes_key = e.key if e is not None else None
        self.notes.blockSignals(True)
        self.notes.setPlainText(e.user_notes if e is not None else "")
        self.notes.blockSignals(False)
        self.notes.setEnabled(e is not None)

    def _notes_edited(self) -> None:
        e = self.window.spectra.entry(self._notes_key) if self._notes_key is not None else None
        if e is None:
            return
        e.user_notes = self.notes.toPlainText()
        self.window.spectra.entry_changed(e.key)
        self._changed()

    # ------------------------------------------------------------------------------------------
    # saving
    # ------------------------------------------------------------------------------------------
    def save(self) -> bool:
        """Save to the document's project file (asking for one the first time)."""
        return self.save_to(self.path) if self.path is not None else self.save_as()

    def save_as(self) -> bool:
        path = self.ask_project_path(save=True)
        return self.save_to(path) if path else False

    def ask_project_path(self, save: bool) -> Path | None:
        """Ask which project file to save to or open (a method, so tests can replace the dialog)."""
        w = self.window
        # the folder of the last project, else where the spectra came from, else the documents folder (never the
        # app's own folders: an autosave's, the bundled examples')
        start = Path(w.settings.project_dir(w.files.spectra_folder()))
        if save:
            here = self.path is not None and not is_app_folder(self.path.parent)
            name = self.path.name if self.path is not None else f"project{PROJECT_SUFFIX}"
            suggested = str(self.path if here else start / name)
            name, _ = QFileDialog.getSaveFileName(w, "Save project", suggested, PROJECT_FILTER)
        else:
            name, _ = QFileDialog.getOpenFileName(w, "Open project", str(start), PROJECT_FILTER)
        if not name:
            return None
        path = Path(name)
        if save and path.suffix.lower() != PROJECT_SUFFIX:
            path = path.with_name(path.name + PROJECT_SUFFIX)
        w.settings.set("projects/last_dir", str(path.parent))
        return path

    def _stop_io(self, timeout_ms: int = -1) -> None:
        """An autosave (or a project being read) in flight gives way: cancelled, it leaves nothing behind; a save
        the user asked for is waited for."""
        if self.io is not None:
            if not self.io.name.startswith("saving"):
                self.io.cancel()
            if timeout_ms < 0:
                self.io.wait()
            else:
                self.io.wait(timeout_ms)

    def save_to(self, path: str | Path, wait: bool = False) -> bool:
        """Write the project to ``path`` in the background (``saved`` says when); ``wait``: here and now (closing)."""
        path = Path(path)
        if self.io is not None and self.io.name.startswith("opening project"):
            self.window.show_message("Wait until the project is open before saving it.")
            return False
        self._stop_io()
        generation = self._generation
        project = self._snapshot()
        if wait:
            try:
                out = run_to_end(save_job(str(path), project, self._hashes))
            except MsgptError as e:
                self._save_failed(path, str(e))
                return False
            self._saved(out, generation)
            return True
        worker = GeneratorWorker(save_job, str(path), project, self._hashes, name=f"saving {path.name}")
        worker.yielded.connect(lambda ev: self.window.status(ev.text, 0))
        worker.returned.connect(lambda out: self._saved(out, generation))
        worker.errored.connect(lambda msg: self._save_failed(path, msg))
        worker.aborted.connect(lambda: (self.window.status(f"Saving cancelled; {path.name} was not changed."),
                                        self.saved.emit("")))
        self._start_io(worker)
        return True

    def _saved(self, out: ProjectSaved, generation: int) -> None:
        self.path = Path(out.path)
        self._saved_generation = generation
        if self._autosaved_generation <= generation:
            self._autosaved_generation = generation
            self.autosave.remove()  # the project file now holds at least as much
        self._add_recent(out.path)
        self._update_title()
        self.window.status(f"Saved {self.path.name}: {out.n_entries} records, {out.n_results} with candidates "
                           f"({out.size / 1e6:.1f} MB).", 8000)
        self.saved.emit(out.path)

    def _save_failed(self, path: Path, message: str) -> None:
        self.window.show_message(f"The project was not saved: {message}", "error")
        self.saved.emit("")

    def _start_io(self, worker: GeneratorWorker) -> None:
        self.io = worker

        def finished():
            if self.io is worker:
                self.io = None
            worker.deleteLater()
            self._next_attach()

        worker.finished.connect(finished)
        self.window.worker_started.emit(worker)
        worker.start()

    # ------------------------------------------------------------------------------------------
    # autosave
    # ------------------------------------------------------------------------------------------
    def autosave_now(self) -> bool:
        """Write the document to this session's autosave when it changed since (in the background)."""
        w = self.window
        if not self.autosave.enabled or self.io is not None or self._generation == self._autosaved_generation:
            return False
        if not w.spectra.entries:  # nothing to recover
            self.autosave.remove()
            self._autosaved_generation = self._generation
            return False
        generation = self._generation
        project = self._snapshot(app={"autosave": True, "project_path": str(self.path) if self.path else None})
        path = self.autosave.path
        worker = GeneratorWorker(save_job, str(path), project, self._hashes, name="autosaving")

        def done(out: ProjectSaved) -> None:
            self._autosaved_generation = max(self._autosaved_generation, generation)
            self.autosaved.emit(out.path)

        worker.returned.connect(done)
        worker.errored.connect(lambda msg: (log.warning("autosave failed: %s", msg),
                                            w.status(f"Autosave failed: {msg}", 8000)))
        self._start_io(worker)
        return True

    # ------------------------------------------------------------------------------------------
    # opening
    # ------------------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        if not self._may_replace():
            return
        path = self.ask_project_path(save=False)
        if path:
            self.open_project(path, ask=False)

    def take_project_files(self, paths, then=None) -> list[Path]:
        """Open the first project file among ``paths`` (dropped, given on the command line) and return the others.
        ``then(others)``: called once the project is open (or could not be), instead of returning the others, so that
        the project's own spectra files attach to it; the others are returned when no project is opened."""
        paths = [Path(p) for p in paths]
        projects = [p for p in paths if is_project_file(p)]
        others = [p for p in paths if not is_project_file(p)]
        if projects:
            if len(projects) > 1:
                self.window.show_message(f"One project at a time: opening {projects[0].name}.", "info")
            if then is not None and others:
                def once(_path: str) -> None:
                    self.opened.disconnect(once)
                    then(others)

                self.opened.connect(once)
                if self.open_project(projects[0]):
                    return []
                self.opened.disconnect(once)
            else:
                self.open_project(projects[0])
        return others

    def _model_changed(self, _bundle) -> None:
        waiting, self._after_model = self._after_model, []
        for callback in waiting:
            callback()

    def open_project(self, path: str | Path, recovered: bool = False, ask: bool = True) -> bool:
        """Read a project in the background and replace the document with it (``opened`` says when). While the
        model loads, it opens afterwards."""
        path = Path(path)
        w = self.window
        self._open_requested = self._open_requested or not recovered
        if w.busy and w.runs.task_kind == "model":
            self._after_model.append(lambda: self.open_project(path, recovered, ask))
            return True
        if w.busy or w.loader is not None:
            w.show_message(f"Wait for the running work to finish (or cancel it with Esc) before opening {path.name}.")
            return False
        if ask and not recovered and not self._may_replace():
            return False
        self._stop_io()
        worker = GeneratorWorker(open_job, str(path), name=f"opening project {path.name}")
        worker.yielded.connect(lambda ev: w.status(ev.text, 0))
        worker.returned.connect(lambda out: self._read(out, recovered))
        worker.errored.connect(lambda msg: self._open_failed(path, msg, recovered))
        worker.aborted.connect(lambda: self.opened.emit(""))
        self._start_io(worker)
        return True

    def _open_failed(self, path: Path, message: str, recovered: bool) -> None:
        if recovered:
            for _, lock in self._recovering:
                lock.unlock()  # kept: perhaps a later version reads it
            self._recovering = []
        self.window.show_message(f"Cannot open the project {message}", "error")
        self.opened.emit("")

    def _read(self, out: ProjectOpened, recovered: bool) -> None:
        """The project is read: load its model first when it is on this machine and another one is loaded."""
        w = self.window
        model = out.project.model
        folder = find_model(model) if model is not None and (w.bundle is None or w.bundle.checksum != model.checksum) \
            else None
        if folder is not None and not w.busy:
            self._after_model.append(lambda: self._apply(out, recovered))
            w.status(f"Loading the project's model {model.name}…", 0)
            if w.models.load_model(folder):
                return
            self._after_model.pop()
        self._apply(out, recovered)

    def _apply(self, out: ProjectOpened, recovered: bool) -> None:
        w = self.window
        if w.busy or w.loader is not None:
            w.show_message(f"Not opened: other work started meanwhile. Open {Path(out.path).name} again when it is "
                           "done.")
            self.opened.emit("")
            return
        project = out.project
        self._applying = True
        try:
            w.spectra_filter.clear()  # a filter could hide what was saved
            w.spectra.clear()
            w.runs.forget_files()
            w.params_panel.set_params(project.params)
            w.params_panel.changed.emit(w.params_panel.params())
            entries = entries_from_project(project, w.runs.new_keys(len(project.entries)),
                                           lambda: w.runs.new_keys(1)[0])
            restore_recalibrations(project.recalibrations)  # before the Formulas tab ranks a feature's table
            w.runs.follow_leads(group_followers(entries))  # a compound group's members follow its lead
            w.spectra.append(entries)
            w.spectra.add_runs(nested_entries(entries))
            for p in same_sources(out.sources):
                w.runs.open_paths.add(str(Path(p).resolve()))
            self._attachable = {str(Path(p).resolve()) for p in source_paths(project)}
            w.document_replaced()
            self._restore_selection(entries, project.selection)
        finally:
            self._applying = False
        self._generation += 1
        if recovered:
            saved_as = project.app.get("project_path")
            self.path = Path(saved_as) if saved_as else None
            self._adopt_recovered(Path(out.path))
        else:
            self.path = Path(out.path)
            self._saved_generation = self._autosaved_generation = self._generation
            self.autosave.remove()
            self._add_recent(out.path)
        self._update_title()
        notes = [n for n in (model_note(project, w.bundle), sources_note(out.sources)) if n]
        what = "Restored the autosaved work" if recovered else f"Opened {Path(out.path).name}"
        text = f"{what}: {project.summary()}."
        if notes:
            w.show_message(text + "\n\n" + "\n\n".join(notes), "warning" if model_note(project, w.bundle) else "info")
        else:
            w.status(text, 8000)
        self.opened.emit(out.path)

    def _restore_selection(self, entries, selection: Selection) -> None:
        w = self.window
        if not entries:
            return
        current = entries[selection.current] if selection.current is not None else entries[0]
        w.select_entry(current.key)
        for i in selection.selected:
            if entries[i] is not current:
                w.spectra_list.select_also(entries[i].key)
        if selection.candidate:
            w.candidates.select_candidate(selection.candidate)

    # ------------------------------------------------------------------------------------------
    # replacing and closing the document
    # ------------------------------------------------------------------------------------------
    def _may_replace(self) -> bool:
        """Before the document is replaced or the window closes: save, discard, or stay."""
        w = self.window
        if not self.modified or not worth_saving(w.spectra.entries):
            return True
        answer = self.ask_save_changes()
        if answer == "cancel":
            return False
        if answer == "save":
            path = self.path or self.ask_project_path(save=True)
            return bool(path) and self.save_to(path, wait=True)
        return True

    def ask_save_changes(self) -> str:
        """'save', 'discard' or 'cancel' (a method, so tests can answer; without popups: 'discard')."""
        if not self.window.popups:
            return "discard"
        name = self.path.name if self.path else "this work"
        buttons = QMessageBox.StandardButton
        answer = QMessageBox.question(
            self.window, "Save the project?",
            f"Save the changes to {name}? Candidates, formulas you set and notes are lost otherwise.",
            buttons.Save | buttons.Discard | buttons.Cancel, buttons.Save)
        return {buttons.Save: "save", buttons.Discard: "discard"}.get(answer, "cancel")

    def may_close(self) -> bool:
        return self._may_replace()

    def clean_exit(self) -> None:
        """The window closes as it should: no autosave is left to offer."""
        self.shutdown()
        self.autosave.finish()

    def shutdown(self, timeout_ms: int = 10000) -> None:
        self.autosave_timer.stop()
        self._after_model.clear()
        self._stop_io(timeout_ms)

    # ------------------------------------------------------------------------------------------
    # recent projects
    # ------------------------------------------------------------------------------------------
    def recent_projects(self) -> list[str]:
        try:
            value = json.loads(self.window.settings.get("projects/recent", "[]", str))
        except json.JSONDecodeError:
            return []
        return [str(v) for v in value if isinstance(v, str)][:MAX_RECENT]

    def _add_recent(self, path: str) -> None:
        path = str(Path(path).resolve())
        files = [path] + [f for f in self.recent_projects() if f != path]
        self.window.settings.set("projects/recent", json.dumps(files[:MAX_RECENT]))

    def _fill_recent_menu(self) -> None:
        menu = self.recent_menu
        menu.clear()
        files = self.recent_projects()
        for f in files:
            act = menu.addAction(Path(f).name)
            act.setToolTip(f)
            act.setStatusTip(f)
            act.triggered.connect(lambda _=False, f=f: self.open_project(f))
        if not files:
            menu.addAction("(none)").setEnabled(False)
        else:
            menu.addSeparator()
            menu.addAction("Clear Recent Projects", lambda: self.window.settings.set("projects/recent", "[]"))


