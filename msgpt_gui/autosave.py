"""This session's autosave file and its lock (:class:`~msgpt_gui.project_view.ProjectController` writes and
offers the autosaves; see its module notes). The lock is a QLockFile: stale only once its process is gone."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import logging
import os
import secrets
import time
from pathlib import Path

from PySide6.QtCore import QLockFile

from engine.files.project import PROJECT_SUFFIX, autosave_dir, autosave_files

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
