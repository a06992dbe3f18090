"""The app's long work as plain generators (no Qt): loading files, elucidating spectra, exporting.

Each job takes a ``cancel`` callable, yields progress events and returns its result, like
``engine.pipeline``; :class:`msgpt_gui.workers.GeneratorWorker` runs one in a QThread and turns the
events into signals. Cancelling raises :class:`engine.errors.Cancelled` at the next check, so a
cancelled spectrum gets no result and a cancelled export leaves the earlier file (the engine's
writers are atomic).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import Cancelled, MsgptError
from engine.export import CandidateWriter
from engine.io import iter_spectra
from engine.pipeline import QueryParams, RankingUpdated, SamplesDrawn, SpectrumResult, SpectrumSession
from engine.spectrum import SkippedRecord, Spectrum

CancelFn = Callable[[], bool]


def _never() -> bool:
    return False


def check_cancel(cancel: CancelFn | None) -> None:
    if cancel is not None and cancel():
        raise Cancelled("Cancelled by the user.")


# -- the document: one entry per record of the opened files ------------------------------------------
class Status:
    NOT_RUN = "not run"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass(eq=False)
class SpectrumEntry:
    """One record of an opened file and what the app knows about it (main thread only)."""

    key: int
    spectrum: Spectrum | None  # None for a record the reader skipped
    skipped: SkippedRecord | None = None
    original: Spectrum | None = None  # as read, before the user set a formula/adduct
    status: str = Status.NOT_RUN
    reason: str = ""  # why it was skipped / failed
    result: SpectrumResult | None = None  # the last complete result
    live: SpectrumResult | None = None  # a partial ranking while it runs
    previous: SpectrumResult | None = None  # the complete result before the current one (rank moves)
    session: SpectrumSession | None = None  # its posterior and sample pool, kept across runs
    model_checksum: str | None = None  # the model the session belongs to

    @classmethod
    def from_item(cls, key: int, item: Spectrum | SkippedRecord) -> SpectrumEntry:
        if isinstance(item, SkippedRecord):
            return cls(key, None, skipped=item, status=Status.SKIPPED, reason=item.reason)
        return cls(key, item, original=item)

    @property
    def id(self) -> str:
        return self.spectrum.id if self.spectrum is not None else self.skipped.spectrum_id

    @property
    def source(self) -> str:
        return self.spectrum.source if self.spectrum is not None else self.skipped.source

    @property
    def shown(self) -> SpectrumResult | None:
        """What the candidate table shows: the live ranking while running, else the last result."""
        return self.live if self.live is not None else self.result

    @property
    def overridden(self) -> bool:
        return self.spectrum is not None and self.original is not None and (
            self.spectrum.formula != self.original.formula or self.spectrum.adduct != self.original.adduct
        )

    def status_text(self) -> str:
        if self.status in (Status.SKIPPED, Status.FAILED) and self.reason:
            return f"{self.status}: {self.reason}"
        return self.status

    def reset_results(self) -> None:
        """Forget results and samples (new formula/adduct, another model)."""
        self.result = self.live = self.previous = None
        self.session = None
        self.model_checksum = None
        if self.spectrum is not None:
            self.status, self.reason = Status.NOT_RUN, ""


# -- loading ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordsRead:
    path: str
    items: tuple  # Spectrum | SkippedRecord


def load_file(
    path: str | Path, cancel: CancelFn | None = None, batch: int = 500, interval_s: float = 0.15
) -> Generator[RecordsRead, None, int]:
    """Stream a spectra file in batches (at most ``batch`` records or ``interval_s`` apart)."""
    path = str(path)
    items: list = []
    n = 0
    last = time.perf_counter()
    try:
        for item in iter_spectra(path):
            check_cancel(cancel)
            items.append(item)
            n += 1
            now = time.perf_counter()
            if len(items) >= batch or now - last >= interval_s:
                yield RecordsRead(path, tuple(items))
                items, last = [], now
    except Cancelled:
        raise
    except MsgptError:  # a problem mid-file: the records read before it are kept
        if items:
            yield RecordsRead(path, tuple(items))
        raise
    check_cancel(cancel)
    if items:
        yield RecordsRead(path, tuple(items))
    return n


# -- elucidation --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EntryStarted:
    key: int
    position: int  # 0-based place in this run
    count: int  # spectra in this run


@dataclass(frozen=True)
class EntryProgress:
    key: int
    position: int
    count: int
    done: int
    total: int


@dataclass(frozen=True)
class EntryRanking:
    key: int
    result: SpectrumResult  # partial


@dataclass(frozen=True)
class EntryFinished:
    key: int
    result: SpectrumResult


@dataclass(frozen=True)
class EntryFailed:
    key: int
    message: str


@dataclass
class RunOutcome:
    finished: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    seconds: float = 0.0


def elucidate_sessions(
    jobs: Sequence[tuple[int, SpectrumSession]],
    params: QueryParams,
    cancel: CancelFn | None = None,
    preview: bool = True,
) -> Generator[object, None, RunOutcome]:
    """Run ``params`` on each ``(key, session)``; yields Entry* events, returns a :class:`RunOutcome`.

    ``preview``: when a spectrum has no samples yet at these settings, first draw one sample per
    query group (N=1, B=M) and show that ranking, then grow to the requested N. Because samples are
    identified by (query, index), growing draws only the missing ones and the final pool is the
    one a single run would draw; the first structures are on screen after about 1/N of the work.

    A spectrum that fails with an engine error is reported (``EntryFailed``) and the run goes on;
    cancelling raises :class:`Cancelled` (the spectrum in progress gets no result).
    """
    cancel = cancel or _never
    outcome = RunOutcome()
    t_run = time.perf_counter()
    count = len(jobs)
    for position, (key, session) in enumerate(jobs):
        check_cancel(cancel)
        yield EntryStarted(key, position, count)
        t0 = time.perf_counter()
        try:
            stages = [params]
            if preview and params.samples_per_group > 1:
                stages.insert(0, dataclasses.replace(params, samples_per_group=1))
            new = 0
            result = None
            for n_stage, stage in enumerate(stages):
                final = n_stage == len(stages) - 1
                gen = session.run(stage, cancel)
                offset = new
                while True:
                    try:
                        event = next(gen)
                    except StopIteration as stop:
                        result = stop.value
                        break
                    if isinstance(event, SamplesDrawn):
                        # a fresh pool: the preview draws M of the B samples; report against B
                        total = event.total if final else max(params.pool_size, event.total)
                        yield EntryProgress(key, position, count, offset + event.done, offset + total)
                    elif isinstance(event, RankingUpdated):
                        yield EntryRanking(key, dataclasses.replace(event.result, partial=True))
                new += result.new_samples
                if not final and result.new_samples:
                    yield EntryRanking(key, dataclasses.replace(result, partial=True))
            result = dataclasses.replace(result, new_samples=new, seconds=time.perf_counter() - t0, partial=False)
        except Cancelled:
            raise
        except MsgptError as e:
            outcome.failed.append(key)
            yield EntryFailed(key, str(e))
            continue
        outcome.finished.append(key)
        yield EntryFinished(key, result)
    outcome.seconds = time.perf_counter() - t_run
    return outcome


# -- export -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExportProgress:
    done: int
    total: int


def export_candidates(
    path: str | Path, results: Sequence[SpectrumResult], info: dict[str, str], cancel: CancelFn | None = None
) -> Generator[ExportProgress, None, int]:
    """Write ``results`` to a CSV/SDF file atomically; returns the number of candidate rows."""
    with CandidateWriter(path, info) as writer:
        for i, result in enumerate(results):
            check_cancel(cancel)
            writer.write(result)
            yield ExportProgress(i + 1, len(results))
        check_cancel(cancel)
    return writer.n_rows


def export_info(bundle, results: Sequence[SpectrumResult]) -> dict[str, str]:
    """Provenance for an export: model, checksum, parameters and seed (per spectrum when they differ)."""
    from engine.export import provenance

    params = [r.params for r in results]
    distinct = list(dict.fromkeys(params))
    info = provenance(bundle, distinct[0] if distinct else QueryParams())
    if len(distinct) > 1:
        by_params: dict[QueryParams, list[str]] = {}
        for r in results:
            by_params.setdefault(r.params, []).append(r.spectrum.id)
        info["parameters"] = " | ".join(
            f"{p.describe()} for {', '.join(ids)}" for p, ids in by_params.items()
        )
        info["seed"] = ", ".join(sorted({str(p.seed) for p in distinct}))
    return info


def load_model(path: str | Path, device: str, cancel: CancelFn | None = None):
    """Load a bundle (a job, so a large model loads without freezing the window)."""
    from engine.bundle import load_bundle

    check_cancel(cancel)
    bundle = load_bundle(path, device=device)
    check_cancel(cancel)
    from engine.ranking import decode_safe

    decode_safe("C")  # imports safe-mol (about 2 s) here, not on the way to the first candidates
    return bundle
    yield  # a generator with no progress events: GeneratorWorker runs it like every other job
