"""Attaching a spectra file to the entries it holds (:class:`AttachMixin` of
:class:`~msgpt_gui.project_view.ProjectController`): opening a file that a reopened project's entries came from reads
it in the background and fills in what only the file has (:func:`msgpt_gui.logic.projects.attach_records`) instead of
listing its records twice; the status bar says what was attached."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from pathlib import Path

from .logic.projects import FileAttached, attach_job, attach_records, holds_file, nested_entries
from .workers import GeneratorWorker


class AttachMixin:
    """The attaching part of the project controller (its ``window``, ``io`` slot, ``attached`` signal, ``_attachable``
    files and ``_attach_queue``)."""

    def may_attach(self, path: str | Path) -> bool:
        """Whether opening ``path`` attaches it: a file of the opened project that the list still holds and that was
        not attached (or read) since."""
        path = Path(path)
        try:
            key = str(path.resolve())
        except OSError:
            return False
        return key in self._attachable and path.is_file() and holds_file(self.window.spectra.entries, path)

    def attach_file(self, path: str | Path) -> None:
        """Read ``path`` (a spectra file the opened project's entries came from) in the background and attach it to
        those entries (:func:`~msgpt_gui.logic.projects.attach_records`) instead of listing its records again;
        ``attached`` says when. Files wait for each other and for a project being saved."""
        path = Path(path)
        w = self.window
        if w.busy and w.runs.task_kind == "run":  # its entries may gain scans and MS1 evidence: not mid-run
            w.show_message(f"Wait for the run to finish (or cancel it with Esc) before opening {path.name}: it is "
                           "attached to the project's spectra.")
            return
        self._attachable.discard(str(path.resolve()))
        self._attach_queue.append(path)
        self._next_attach()

    def _next_attach(self) -> None:
        if self.io is not None or not self._attach_queue:
            return
        path = self._attach_queue.pop(0)
        w = self.window
        worker = GeneratorWorker(attach_job, str(path), name=f"attaching {path.name}")
        worker.yielded.connect(lambda ev: w.status(ev.text, 0))
        worker.returned.connect(self._attach)
        worker.errored.connect(lambda msg: (w.show_message(f"Cannot attach {path.name}: {msg}", "error"),
                                            self.attached.emit("")))
        worker.aborted.connect(lambda: (w.status(f"Stopped reading {path.name}; nothing was attached (open it again "
                                                 "to attach it)."),
                                        self._attachable.add(str(path.resolve())), self.attached.emit("")))
        self._start_io(worker)

    def _attach(self, out: FileAttached) -> None:
        w = self.window
        path = Path(out.path)
        current = w.current_entry()
        done = attach_records(w.spectra.entries, out.path, out.items, lambda: w.runs.new_keys(1)[0])
        w.runs.open_paths.add(str(path.resolve()))
        if done.features or done.ms1 or done.added:
            self._applying = True
            try:
                if done.features:  # rows gained scans: listed again, the selection kept
                    entries = list(w.spectra.entries)
                    w.spectra.clear()
                    w.spectra.append(entries)
                    w.spectra.add_runs(nested_entries(entries))
                w.spectra.append(done.added)
                w.spectra.add_runs(nested_entries(done.added))
                w.spectra.all_changed()
                w.document_replaced()
                if current is not None:
                    w.select_entry(current.key)
            finally:
                self._applying = False
            self._changed()
        w.show_message(done.describe(path.name), "info")
        self.attached.emit(out.path)
