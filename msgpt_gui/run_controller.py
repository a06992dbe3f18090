"""Run orchestration: the file-loading queue and one task at a time (model load, run, export).

:class:`RunController` owns every :class:`~msgpt_gui.workers.GeneratorWorker` of the app and the
state of the work in progress; it keeps the entries of the spectra list up to date while a run goes
on. It knows nothing about the window's layout: the window calls its methods and reacts to its
signals (messages, status-bar texts, progress, entries that changed). Files load one after the other,
beside the task; a second task is refused while one runs (the window says why).

Signals that end a task (``model_changed``, ``run_finished``, ``export_finished``) are emitted once
the task slot is free again, so a listener may start the next task from them.

By role: the file-loading queue is :class:`~msgpt_gui.load_queue.LoadQueueMixin`'s, a run's compound groups (adduct
partners deciding together) :class:`~msgpt_gui.group_runs.GroupRunsMixin`'s; the signals and the state are here.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import dataclasses
import logging
import time
from collections import deque
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.elucidation.formula_runs import MIN_SAMPLED_PROBABILITY
from engine.elucidation.pipeline import QueryParams
from engine.errors import MsgptError

from .group_runs import GroupRunsMixin
from .load_queue import LoadQueueMixin
from .logic.entries import SpectrumEntry, Status
from .logic.formulas import DEFAULT_TOP_K, formula_spectra, readiness, unsupported_ion_note
from .logic.jobs import (
    LIBRARY_RUNS,
    EntryFailed,
    EntryFinished,
    EntryProgress,
    EntryRanking,
    EntryStarted,
    ExportProgress,
    FormulaJob,
    FormulasRanked,
    GroupDecided,
    elucidate_sessions,
    export_candidates,
    load_model,
    run_items_of,
)
from .logic.libraries import libraries_rerun_text, library_key, library_refs, refs_key
from .logic.live import LiveFocus
from .models import SpectraModel
from .workers import GeneratorWorker

log = logging.getLogger(__name__)


def plural(n: int, one: str = "spectrum", many: str = "spectra") -> str:
    return f"{n} {one if n == 1 else many}"


class RunController(LoadQueueMixin, GroupRunsMixin, QObject):
    """The app's long work; see the module notes."""

    worker_started = Signal(object)  # a GeneratorWorker about to start (tests hook into its signals)
    task_started = Signal(str)  # "model", "run" or "export"
    task_ended = Signal()  # the task slot is free again (before the task's own end signal)
    loader_changed = Signal()  # a file started or finished loading
    progress = Signal(int, str)  # 0..1000 and the text of the progress bar
    message = Signal(str, str)  # level ("info" / "warning" / "error"), text: the window shows it
    status = Signal(str, int)  # status-bar text, for this many ms (0: until replaced)
    # files
    records_added = Signal(str, object, bool)  # path, [SpectrumEntry] just listed, first batch of that file
    file_read = Signal(str, object, float)  # path, the load job's FileSummary, seconds (a file read to its end)
    file_loaded = Signal(str)  # a file finished loading (or failed, or was cancelled)
    # model
    model_loaded = Signal(object, object)  # ModelBundle, folder
    model_failed = Signal(str, object)  # message, folder
    model_changed = Signal(object)  # the ModelBundle in use (None: none)
    # runs
    entry_updated = Signal(int, str)  # key, what changed: "status", "ranking" (live), "result" or "formulas"
    run_finished = Signal(str)  # "done", "cancelled" or "failed"
    retune_wanted = Signal()  # a re-tune was asked for while busy: the task slot is free now
    export_finished = Signal(str, int)  # path and number of rows; ("", 0) when it failed or was cancelled

    def __init__(self, spectra: SpectraModel, parent=None):
        super().__init__(parent)
        self.spectra = spectra
        self.bundle = None  # the loaded ModelBundle
        self.libraries: tuple = ()  # the enabled structure and spectral libraries (LibraryController)
        self.task: GeneratorWorker | None = None
        self.task_kind = ""
        self.loader: GeneratorWorker | None = None
        self.load_queue: deque[Path] = deque()
        self.open_paths: set[str] = set()
        self.run_t0: float | None = None  # when the current (or last) run started (perf_counter)
        self.retune_pending = False
        self._next_key = 0
        self._loading: dict = {}
        self._run: dict = {}
        self._followers: dict[int, tuple[int, ...]] = {}  # a compound group's lead -> the members showing its answer
        self._announcements: list = []
        self.live = LiveFocus()  # the entries on screen: only they get live rankings while a run goes on (#58)

    @property
    def busy(self) -> bool:
        """A task (model load, run, export) holds the slot; files may load beside it."""
        return self.task is not None

    @property
    def running_retune(self) -> bool:
        return self.task_kind == "run" and bool(self._run.get("retune"))

    # ------------------------------------------------------------------------------------------
    # model
    # ------------------------------------------------------------------------------------------
    def load_model(self, path: Path, device: str) -> bool:
        """Load the bundle in ``path`` in the background (``model_loaded`` / ``model_failed``, then
        ``model_changed``)."""
        if self.busy:
            self.message.emit("warning", "Wait for the running work to finish (or cancel it with Esc) before "
                                         "changing the model.")
            return False
        self._start_task("model", GeneratorWorker(load_model, str(path), device, name="loading the model"),
                         on_returned=lambda bundle: self._model_loaded(bundle, path),
                         on_errored=lambda msg: self._model_failed(msg, path))
        return True

    def unload_model(self) -> None:
        self.bundle = None
        self.model_changed.emit(None)

    def _model_loaded(self, bundle, path: Path) -> None:
        self.bundle = bundle
        self.model_loaded.emit(bundle, path)
        self._announce(self.model_changed, bundle)

    def _model_failed(self, message: str, path: Path) -> None:
        self.model_failed.emit(message, path)
        self._announce(self.model_changed, self.bundle)

    # ------------------------------------------------------------------------------------------
    # running
    # ------------------------------------------------------------------------------------------
    def run(self, entries: list[SpectrumEntry], params: QueryParams, retune: bool = False,
            top_k: int = DEFAULT_TOP_K, formulas: bool = False, libraries_changed: bool = False) -> bool:
        """Elucidate ``entries`` with ``params`` (the window checked that a model is loaded).

        A spectrum without a formula or ion type runs for its best ``top_k`` formula candidates (its formula
        runs); with ``formulas``, every spectrum does ("Run best k" of the Formulas tab). Formula runs that
        ran for these formulas already keep their samples (only what is missing is drawn).
        ``libraries_changed``: a re-run because other libraries are on (the status bar says what it re-ran).
        """
        if self.busy:
            self.status.emit("Busy: wait for the running work to finish, or cancel it with Esc.", 8000)
            return False
        entries = [e for e in entries if e.spectrum is not None]
        if not entries:
            self.status.emit("Select spectra to run (skipped records cannot run).", 8000)
            return False
        jobs = []
        skipped = 0
        supported = self.bundle.runnable_adducts
        groups_queued = set()
        for e in entries:
            if e.owner_key is None and (formulas or e.needs_formulas):
                members = self._group_members(e)
                if members:  # a compound group decides together: one job for all its members
                    if (e.spectrum.source, e.feature.group.id) not in groups_queued:
                        groups_queued.add((e.spectrum.source, e.feature.group.id))
                        jobs.append(self._group_job(e, members, top_k))
                    continue
                job = self._formula_job(e, top_k, force=formulas)
                if job is None:
                    skipped += 1
                    continue
                if isinstance(job, FormulaJob):
                    jobs.append(job)
                else:
                    jobs.extend(job)
                continue
            blocked = e.blocker(supported)
            if blocked is not None:  # needs a formula, an adduct the model supports...: said in the app's words
                e.session, e.status, e.reason = None, Status.SKIPPED, blocked[1]
                self.spectra.entry_changed(e.key)
                self.entry_updated.emit(e.key, "status")
                skipped += 1
                continue
            if e.session is None or e.model_checksum != self.bundle.checksum or not self.libraries_current(e):
                try:
                    e.session = e.new_session(self.bundle, self.libraries)  # with the samples drawn so far
                    e.model_checksum = self.bundle.checksum
                except MsgptError as err:
                    e.session, e.status, e.reason = None, Status.SKIPPED, str(err)
                    self.spectra.entry_changed(e.key)
                    self.entry_updated.emit(e.key, "status")
                    skipped += 1
                    continue
            e.status, e.reason = Status.QUEUED, ""
            self.spectra.entry_changed(e.key)
            jobs.append((e.key, e.session))
        if not jobs:
            reason = entries[0].reason if len(entries) == 1 else "see the Status column"
            self.message.emit("warning", f"None of the selected spectra can run: {reason}.")
            return False
        keys = [j.key if isinstance(j, FormulaJob) else j[0] for j in jobs]
        keys += [k for j in jobs if isinstance(j, FormulaJob) for k, _, _ in j.group if k != j.key]
        self._run = {"keys": keys, "retune": retune, "skipped": skipped, "libraries": libraries_changed}
        self.run_t0 = time.perf_counter()
        worker = GeneratorWorker(elucidate_sessions, jobs, params, bundle=self.bundle, live=self.live,
                                 name="elucidation")
        worker.yielded.connect(self._run_event)
        self._start_task("run", worker, on_returned=self._run_done, on_errored=self._run_failed,
                         on_aborted=self._run_cancelled)
        self.progress.emit(0, f"Starting {plural(len(jobs))}…")
        return True

    def _formula_job(self, e: SpectrumEntry, top_k: int, force: bool):
        """What runs ``e`` for its best ``top_k`` formulas: its formula runs again when they are those formulas
        for this model (a list of session jobs), else a :class:`FormulaJob`; None when it cannot (said)."""
        supported = self.bundle.runnable_adducts
        base = e.formula_base()
        why_not = readiness(base, supported)
        if why_not is not None:
            e.session, e.status = None, Status.SKIPPED
            e.reason = (f"no formula candidates: {why_not}" if force else e.blocker(supported)[1])
            self.spectra.entry_changed(e.key)
            self.entry_updated.emit(e.key, "status")
            return None
        table = e.cached_formulas()
        runs = e.formula_runs
        for r in runs:  # a reopened project's runs: sessions again from the samples it kept (nothing redrawn)
            if r.session is None and r.result is not None and r.model_checksum == self.bundle.checksum:
                try:
                    r.session = r.new_session(self.bundle, self.libraries)
                except MsgptError:
                    pass
        if table is not None and runs and all(r.session is not None and r.model_checksum == self.bundle.checksum
                                              for r in runs):
            wanted = [(s.formula, s.adduct) for _, s in formula_spectra(base, table, supported, top_k, self.libraries,
                                                                         0.0 if force else MIN_SAMPLED_PROBABILITY)]
            if wanted == [(r.spectrum.formula, r.spectrum.adduct) for r in runs if r.candidate is not None]:
                stale = not all(self.libraries_current(r) for r in runs)
                for r in runs:
                    if not self.libraries_current(r):  # other libraries: a new session, the samples stay
                        r.session = r.new_session(self.bundle, self.libraries)
                    r.status, r.reason = Status.QUEUED, ""
                e.sync_status()
                e.status = Status.QUEUED
                self.spectra.entry_changed(e.key)
                if stale:  # what the libraries add (mass track, identification formula) is worked out again
                    return FormulaJob(e.key, base, e.ms1, table, tuple(self.new_keys(top_k)), self.libraries,
                                      tuple(self.new_keys(LIBRARY_RUNS)) if self.libraries else (),
                                      reuse=tuple((r.key, r.spectrum.formula, r.spectrum.adduct, r.session)
                                                  for r in runs if r.session is not None),
                                      min_probability=0.0 if force else MIN_SAMPLED_PROBABILITY)
                return [(r.key, r.session) for r in runs]
        e.reset_results()
        if e.spectrum.formula and e.spectrum.adduct:  # "Run best k" over a formula set by hand
            e.spectrum = base
        e.status, e.reason = Status.QUEUED, ""
        self.spectra.entry_changed(e.key)
        return FormulaJob(e.key, base, e.ms1, table, tuple(self.new_keys(top_k)), self.libraries,
                          tuple(self.new_keys(LIBRARY_RUNS)) if self.libraries else (),
                          run_items=run_items_of(self.spectra.entries, e),
                          min_probability=0.0 if force else MIN_SAMPLED_PROBABILITY)

    def show_live(self, e: SpectrumEntry | None) -> None:
        """The window shows ``e``: its spectrum (its formula runs, a compound group's lead) gets live rankings while
        it runs, the others are ranked once at their end (:mod:`msgpt_gui.logic.live`)."""
        keys = set() if e is None else {e.key, *(r.key for r in e.formula_runs)}
        if e is not None and e.group_lead is not None:
            keys |= {e.group_lead.key, *(r.key for r in e.group_lead.formula_runs)}
        self.live.set(keys)

    def libraries_current(self, e: SpectrumEntry) -> bool:
        """Whether ``e``'s session (and result) searched the libraries enabled now."""
        return refs_key(e.library_refs) == library_key(self.libraries)

    def defer_retune(self) -> None:
        """A re-tune asked for while busy: ``retune_wanted`` once the slot is free; a re-tune still
        running is superseded by the newer settings and cancelled."""
        self.retune_pending = True
        if self.running_retune:
            self.task.cancel()

    def _run_event(self, ev) -> None:
        e = self.spectra.entry(ev.key)
        if e is None:
            return
        self._entry_event(e, ev)
        listed = e
        if e.owner_key is not None:  # a formula run: the listed entry shows them together
            owner = self.spectra.entry(e.owner_key)
            if owner is not None:
                owner.sync_status()
                self.spectra.entry_changed(owner.key)
            listed = owner
        if listed is not None and listed.key in self._followers and not isinstance(ev, (EntryProgress, EntryRanking)):
            self._sync_followers(listed)

    def _entry_event(self, e: SpectrumEntry, ev) -> None:
        if isinstance(ev, GroupDecided):  # the lead runs; every other member shows its answer
            self._group_decided(ev)
            return
        if isinstance(ev, FormulasRanked):
            e.keep_formulas(ev.base, ev.table)
            e.ion_note = unsupported_ion_note(ev.table, self.bundle.runnable_adducts, len(ev.runs))
            before = {r.key: r for r in e.formula_runs}
            runs = []
            for run in ev.runs:
                kept = before.get(run.key)
                if kept is not None and run.session is not None:  # the same formula again: its results stay
                    kept.session, kept.status, kept.reason = run.session, Status.QUEUED, ""
                    kept.library_refs = library_refs(run.session.libraries)
                    runs.append(kept)
                    continue
                status = Status.QUEUED if run.session is not None else Status.FAILED
                runs.append(SpectrumEntry(run.key, run.spectrum, original=run.spectrum, session=run.session,
                                          model_checksum=self.bundle.checksum if run.session is not None else None,
                                          status=status, reason=run.problem, owner_key=e.key,
                                          candidate=run.candidate, ms1=e.ms1,
                                          library_refs=library_refs(run.session.libraries)
                                          if run.session is not None else ()))
            if before:  # the libraries changed: which formula runs they added or dropped (said when the run ends)
                changes = self._run.setdefault("formula_changes", [])
                changes += [("ran", r) for r in runs if r.key not in before]
                changes += [("dropped", r) for r in before.values() if not any(r is x for x in runs)]
            e.formula_runs = runs
            self.spectra.add_runs(runs)
            e.sync_status()
            self.spectra.entry_changed(e.key)
            self.entry_updated.emit(e.key, "formulas")
        elif isinstance(ev, EntryStarted):
            e.status = Status.RUNNING
            self.spectra.entry_changed(e.key)
            self.progress.emit(int(1000 * ev.position / ev.count), f"Spectrum {ev.position + 1} of {ev.count}")
            self.entry_updated.emit(e.key, "status")
        elif isinstance(ev, EntryProgress):  # samples drawn; a deep search's phase
            self.progress.emit(int(1000 * ev.fraction), ev.text())
        elif isinstance(ev, EntryRanking):
            e.live = ev.result
            self.entry_updated.emit(e.key, "ranking")
        elif isinstance(ev, EntryFinished):
            e.previous = e.result
            e.result, e.live = ev.result, None
            e.status, e.reason = Status.DONE, ""
            self.spectra.entry_changed(e.key)
            self.entry_updated.emit(e.key, "result")
        elif isinstance(ev, EntryFailed):
            e.live = None
            e.status, e.reason = Status.FAILED, ev.message
            self.spectra.entry_changed(e.key)
            self.entry_updated.emit(e.key, "status")

    def _end_run(self, running_status: str, reason: str = "") -> None:
        """After a cancelled/failed run: no partial result stays; unfinished spectra go back."""
        followers = []
        for key in self._run.get("keys", []):
            e = self.spectra.entry(key)
            if e is None:
                continue
            if e.group_lead is not None:  # a compound group's member: it follows its lead (below)
                followers.append(e)
                continue
            for run in e.formula_runs:
                if run.status == Status.RUNNING and running_status == Status.CANCELLED and self._keep_partial(run):
                    continue
                if run.status in (Status.RUNNING, Status.QUEUED):
                    run.live = None
                    run.status = Status.DONE if run.result is not None else (
                        running_status if run.status == Status.RUNNING else Status.NOT_RUN)
            if e.formula_runs:
                e.sync_status()
                if e.status == Status.NOT_RUN and running_status == Status.CANCELLED:
                    e.status = Status.CANCELLED
                self.spectra.entry_changed(e.key)
                self.entry_updated.emit(e.key, "status")
                continue
            if e.status == Status.RUNNING and running_status == Status.CANCELLED and self._keep_partial(e):
                self.spectra.entry_changed(key)
                self.entry_updated.emit(key, "result")
            elif e.status in (Status.RUNNING, Status.QUEUED):
                e.live = None
                if e.status == Status.RUNNING:
                    e.status = Status.DONE if e.result is not None else running_status
                    e.reason = "" if e.result is not None else reason
                else:
                    e.status = Status.DONE if e.result is not None else Status.NOT_RUN
                self.spectra.entry_changed(key)
                self.entry_updated.emit(key, "status")
            owner = self.spectra.entry(e.owner_key) if e.owner_key is not None else None
            if owner is not None:
                owner.sync_status()
                self.spectra.entry_changed(owner.key)
        for e in followers:
            e.sync_status()
            self.spectra.entry_changed(e.key)
            self.entry_updated.emit(e.key, "status")

    @staticmethod
    def _keep_partial(e: SpectrumEntry) -> bool:
        """A deep search cancelled: ``e`` keeps the ranking it had found so far (partial, status "cancelled
        (partial)") instead of its earlier result; False for any other run (it keeps its earlier candidates)."""
        live = e.live
        if live is None or live.params.effort != "deep" or not live.candidates:
            return False
        e.previous, e.result, e.live = e.result, dataclasses.replace(live, partial=True), None
        e.status, e.reason = Status.PARTIAL, ""
        return True

    def _run_done(self, outcome) -> None:
        n, failed = len(outcome.finished), len(outcome.failed)
        skipped = self._run.get("skipped", 0)
        extra = "".join([f", {failed} failed" if failed else "", f", {skipped} skipped" if skipped else ""])
        if self._run.get("libraries"):
            self.status.emit(libraries_rerun_text(n, outcome.seconds, self._run.get("formula_changes", [])), 15000)
        elif not self._run.get("retune"):
            self.status.emit(f"Done: {plural(n)} in {outcome.seconds:.1f} s{extra}.", 8000)
        else:
            e = self.spectra.entry(outcome.finished[0]) if outcome.finished else None
            if e is not None and e.result is not None:
                self.status.emit(f"Re-ranked {e.id}: {e.result.new_samples} new structures drawn, "
                                 f"{len(e.result.candidates)} candidates.", 8000)
        self._end_run(Status.CANCELLED)
        self._announce(self.run_finished, "done")

    def _run_cancelled(self) -> None:
        self._end_run(Status.CANCELLED)
        partial = any(e is not None and e.status == Status.PARTIAL
                      for e in map(self.spectra.entry, self._run.get("keys", [])))
        if partial and not self.retune_pending:
            self.status.emit("Cancelled (partial): the deep search keeps the candidates it had found; spectra not "
                             "started keep their earlier candidates (if any).", 8000)
        elif not self.retune_pending:
            self.status.emit("Cancelled. Spectra that were not finished keep their earlier candidates (if any).", 8000)
        self._announce(self.run_finished, "cancelled")

    def _run_failed(self, message: str) -> None:
        self._end_run(Status.FAILED, message)
        self.message.emit("error", f"The run stopped: {message}")
        self._announce(self.run_finished, "failed")

    def cancel(self) -> None:
        """Stop the task at its next check, and the file being read (queued files are dropped)."""
        if self.task is not None:
            self.task.cancel()
            self.status.emit("Cancelling…", 0)
        if self.loader is not None:
            self.load_queue.clear()
            self.loader.cancel()
        self.retune_pending = False

    # ------------------------------------------------------------------------------------------
    # export
    # ------------------------------------------------------------------------------------------
    def export(self, path: Path, results: list, info: dict[str, str], novelty=None) -> bool:
        """Write ``results`` to ``path`` (CSV or SDF by its suffix) atomically, in the background; ``novelty``
        (a NoveltyMarker) fills the novelty column."""
        if self.busy:
            self.message.emit("warning", "Wait for the running work to finish (or cancel it with Esc) before "
                                         "exporting.")
            return False
        worker = GeneratorWorker(export_candidates, str(path), results, info, novelty=novelty,
                                 name=f"exporting {path.name}")
        worker.yielded.connect(self._export_progress)

        def done(n_rows: int) -> None:
            self.status.emit(f"Exported {n_rows} candidates of {plural(len(results))} to {path}.", 15000)
            self._announce(self.export_finished, str(path), n_rows)

        def failed(message: str) -> None:
            self.message.emit("error", f"Export failed: {message}\nAn earlier {path.name}, if any, was left "
                                       "unchanged.")
            self._announce(self.export_finished, "", 0)

        def aborted() -> None:
            self.status.emit(f"Export cancelled; {path.name} was not changed.", 8000)
            self._announce(self.export_finished, "", 0)

        self._start_task("export", worker, on_returned=done, on_errored=failed, on_aborted=aborted)
        self.progress.emit(0, f"Exporting to {path.name}…")
        return True

    def start_job(self, kind: str, worker: GeneratorWorker, on_returned=None, on_errored=None, on_aborted=None) -> bool:
        """Run another long job in the task slot (e.g. a posterior export); refused while a task runs."""
        if self.busy:
            self.message.emit("warning", "Wait for the running work to finish (or cancel it with Esc) first.")
            return False
        self._start_task(kind, worker, on_returned=on_returned, on_errored=on_errored, on_aborted=on_aborted)
        return True

    def _export_progress(self, ev: ExportProgress) -> None:
        self.progress.emit(int(1000 * ev.done / max(ev.total, 1)), f"Exporting: {ev.done}/{ev.total} spectra")

    # ------------------------------------------------------------------------------------------
    # the task slot
    # ------------------------------------------------------------------------------------------
    def _announce(self, signal, *args) -> None:
        """Emit ``signal`` once the task slot is free again (listeners may start the next task)."""
        self._announcements.append((signal, args))

    def _start_task(self, kind, worker: GeneratorWorker, on_returned=None, on_errored=None, on_aborted=None) -> None:
        self.task, self.task_kind = worker, kind
        if on_returned:
            worker.returned.connect(on_returned)
        worker.errored.connect(on_errored or (lambda msg: self.message.emit("error", msg)))
        if on_aborted:
            worker.aborted.connect(on_aborted)
        worker.finished.connect(lambda: self._task_finished(worker))
        self.task_started.emit(kind)
        self.worker_started.emit(worker)
        worker.start()

    def _task_finished(self, worker: GeneratorWorker) -> None:
        if self.task is worker:
            self.task, self.task_kind = None, ""
        worker.deleteLater()
        self.task_ended.emit()
        announcements, self._announcements = self._announcements, []
        for signal, args in announcements:
            signal.emit(*args)
        if self.retune_pending:
            self.retune_pending = False
            self.retune_wanted.emit()

    def shutdown(self, timeout_ms: int = 10000) -> None:
        """Cancel and wait for every worker (the engine stops at its next decoding step)."""
        self.retune_pending = False
        self.load_queue.clear()
        for worker in (self.task, self.loader):
            if worker is not None:
                worker.cancel()
        for worker in (self.task, self.loader):
            if worker is not None:
                worker.wait(timeout_ms)
