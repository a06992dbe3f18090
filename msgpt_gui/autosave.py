"""This session's autosave file and its lock, and offering the autosave of a session that ended without a clean exit
(:class:`RecoveryMixin` of :class:`~msgpt_gui.project_view.ProjectController`, which writes the autosaves; see its
module notes). The lock is a QLockFile: stale only once its process is gone."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import logging
import os
import secrets
import time
from pathlib import Path

from PySide6.QtCore import QLockFile
from PySide6.QtWidgets import QMessageBox

from engine.errors import MsgptError
from engine.files.project import PROJECT_SUFFIX, autosave_dir, autosave_files
from engine.files.project_read import ProjectSummary, read_summary

log = logging.getLogger(__name__)


class Autosave:
    """This session's autosave file and its lock; the files of sessions that ended without a clean exit."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder or autosave_dir()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = self.folder / f"session-{stamp}-{os.getpid()}-{secrets.token_hex(2)}{PROJECT_SUFFIX}"
        self.lock: QLockFile | None = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.warning("autosave is off: cannot create %s (%s)", self.folder, e)
            return
        lock = self._lock(self.path)
        if lock.tryLock(0):
            self.lock = lock
        else:
            log.warning("autosave is off: cannot lock %s (%s)", self.path, lock.error())

    @staticmethod
    def _lock(path: Path) -> QLockFile:
        lock = QLockFile(str(path.with_suffix(".lock")))
        lock.setStaleLockTime(0)  # stale only when its process is gone, however long a session lasts
        return lock

    @property
    def enabled(self) -> bool:
        return self.lock is not None

    def stale(self) -> list[tuple[Path, QLockFile]]:
        """Autosaves of sessions that are gone (newest first), each with its lock now held by this session."""
        out = []
        for path in autosave_files(self.folder):
            if path == self.path:
                continue
            lock = self._lock(path)
            if lock.tryLock(0):
                out.append((path, lock))
        return out

    def remove(self) -> None:
        """This session's autosave is not needed (saved, emptied)."""
        self.path.unlink(missing_ok=True)

    def finish(self) -> None:
        """A clean exit: no autosave, no lock left behind."""
        self.remove()
        if self.lock is not None:
            self.lock.unlock()
            self.lock = None


class RecoveryMixin:
    """Offering and restoring a crashed session's autosave (the project controller's ``window``, ``autosave``,
    ``open_project`` and ``_recovering``)."""

    def _startup(self) -> None:
        """After the window is built: offer a crashed session's autosave once the model has loaded."""
        if self.window.busy:
            self._after_model.append(self.check_recovery)
        else:
            self.check_recovery()

    def check_recovery(self) -> bool:
        """Offer the newest autosave of a session that ended without a clean exit; returns whether one is
        being restored."""
        w = self.window
        if self._open_requested or w.loader is not None or w.spectra.entries:
            return False  # files or a project were asked for: the autosave waits for the next start
        stale = self.autosave.stale()
        if not stale:
            return False
        newest = stale[0][0]
        try:
            summary = read_summary(newest)
        except MsgptError as e:  # damaged, or from a newer version: kept, not offered
            log.warning("an autosave cannot be read: %s", e)
            summary = None
        answer = None if summary is None else self.ask_restore(summary) if summary.n_entries else False
        if answer is None:  # later (or unreadable): kept for the next start
            for _, lock in stale:
                lock.unlock()
            return False
        if not answer:
            self._discard(stale)
            return False
        self._recovering = stale
        if self.open_project(newest, recovered=True):
            return True
        for _, lock in stale:  # not now: kept for the next start
            lock.unlock()
        self._recovering = []
        return False

    def ask_restore(self, summary: ProjectSummary) -> bool | None:
        """Restore the autosave (True), discard it (False) or decide at the next start (None); a method, so tests
        can answer."""
        if not self.window.popups:
            return None
        project = summary.app.get("project_path")
        what = f" of {Path(project).name}" if project else ""
        box = QMessageBox(QMessageBox.Icon.Question, "Restore your work?",
                          f"MS-GPT Desktop did not close properly last time. It had autosaved your work{what}: "
                          f"{summary.describe()}.\n\nRestore it?", parent=self.window)
        restore = box.addButton("Restore", QMessageBox.ButtonRole.AcceptRole)
        discard = box.addButton("Discard", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton("Ask Next Time", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(restore)
        box.exec()
        return True if box.clickedButton() is restore else False if box.clickedButton() is discard else None

    @staticmethod
    def _discard(stale) -> None:
        for path, lock in stale:
            path.unlink(missing_ok=True)
            lock.unlock()

    def _adopt_recovered(self, path: Path) -> None:
        """The restored autosave becomes this session's (a second crash loses nothing); older ones go."""
        stale, self._recovering = self._recovering, []
        if self.autosave.enabled:
            try:
                os.replace(path, self.autosave.path)
                self._autosaved_generation = self._generation
            except OSError as e:
                log.warning("cannot keep the restored autosave %s: %s", path, e)
        self._discard(stale)
