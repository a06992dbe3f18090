"""The file-loading queue of the app (:class:`LoadQueueMixin` of :class:`~msgpt_gui.run_controller.RunController`):
files are read one after the other in a :class:`~msgpt_gui.workers.GeneratorWorker` beside the task slot, their
records listed in batches as they come (each a new entry key), and what went wrong said. Imports the Qt-free
:mod:`msgpt_gui.logic` and the worker; the controller holds the state and the signals."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import time
from pathlib import Path

from engine.spectra.features import Feature

from .logic.entries import SpectrumEntry
from .logic.jobs import RecordsRead, load_file
from .workers import GeneratorWorker


class LoadQueueMixin:
    """The file-loading part of the run controller (its ``spectra`` model, the signals ``status``, ``message``,
    ``worker_started``, ``loader_changed``, ``records_added``, ``file_read`` and ``file_loaded``, and the state
    ``loader``, ``load_queue``, ``open_paths``, ``_loading`` and ``_next_key``)."""

    def is_open(self, path: Path) -> bool:
        key = str(path.resolve()) if path.exists() else str(path)
        return key in self.open_paths or path in self.load_queue

    def load_files(self, paths) -> None:
        """Queue files; they are read in the background, one after the other."""
        self.load_queue.extend(Path(p) for p in paths)
        self._next_load()

    def reading(self, path: str) -> bool:
        """Whether the file ``path`` is being read or waits to be (its features are not all listed yet)."""
        target = Path(path).resolve()
        now = [self._loading["path"]] if self.loader is not None and self._loading else []
        return any(Path(p).resolve() == target for p in (*now, *self.load_queue))

    def forget_files(self) -> None:
        """The list was cleared: the same files may be opened again."""
        self.open_paths.clear()

    def _next_load(self) -> None:
        if self.loader is not None or not self.load_queue:
            self.loader_changed.emit()
            return
        path = self.load_queue.popleft()
        self._loading = {"path": path, "n": 0, "t0": time.perf_counter()}
        worker = GeneratorWorker(load_file, str(path), name=f"reading {path.name}")
        self.loader = worker
        worker.yielded.connect(self._records_read)
        worker.returned.connect(lambda value: self._load_done(path, value))
        worker.errored.connect(lambda msg: self._load_failed(path, msg))
        worker.aborted.connect(lambda: self._load_cancelled(path))
        worker.finished.connect(lambda: self._loader_finished(worker, path))
        self.status.emit(f"Reading {path.name}…", 0)
        self.worker_started.emit(worker)
        worker.start()
        self.loader_changed.emit()

    def _take_key(self) -> int:
        self._next_key += 1
        return self._next_key - 1

    def new_keys(self, n: int) -> range:
        """Keys for ``n`` entries listed from elsewhere (a project being opened); never used twice."""
        first = self._next_key
        self._next_key += n
        return range(first, first + n)

    def _records_read(self, batch: RecordsRead) -> None:
        self.open_paths.add(str(Path(batch.path).resolve()))
        entries = []
        for item in batch.items:
            key = self._take_key()
            if isinstance(item, Feature):
                entries.append(SpectrumEntry.from_feature(key, item, self._take_key))
            else:
                entries.append(SpectrumEntry.from_item(key, item))
        first_batch = self._loading["n"] == 0
        self._loading["n"] += len(entries)
        self.spectra.append(entries)
        self.status.emit(f"Reading {Path(batch.path).name}: {self._loading['n']:,} records…", 0)
        self.records_added.emit(batch.path, entries, first_batch)

    def _load_done(self, path: Path, value) -> None:
        self.open_paths.add(str(path.resolve()))
        self.file_read.emit(str(path), value, time.perf_counter() - self._loading["t0"])

    def _load_failed(self, path: Path, message: str) -> None:
        n = self._loading["n"]
        kept = f"\nThe {n} records read before the problem are kept." if n else ""
        self.message.emit("error", f"Cannot read {path.name}:\n{message}{kept}")

    def _load_cancelled(self, path: Path) -> None:
        self.status.emit(f"Stopped reading {path.name} after {self._loading['n']:,} records.", 8000)

    def _loader_finished(self, worker: GeneratorWorker, path: Path) -> None:
        if self.loader is worker:
            self.loader = None
        worker.deleteLater()
        self.file_loaded.emit(str(path))
        self._next_load()
