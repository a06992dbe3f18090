"""The app's long work as plain generators (no Qt): loading files, elucidating spectra, exporting.

An mzML run is loaded as precursor features (:mod:`engine.spectra.features`: the MS2 scans of one precursor merged,
with the MS1 evidence of the precursor); an MGF file record by record, as before. Elucidating a spectrum
without a formula first ranks its formula candidates, then runs the best ``k`` (:class:`FormulaJob`) and what
the enabled libraries add: the formula of a spectral identification, and the library structures of the
precursor's mass whose formula is not among those (the mass track, ranked without sampling), as ``msgpt
predict`` does (:func:`engine.elucidation.libraries.library_formula_spectra`).

(The document these jobs work on, one entry per record, is :mod:`msgpt_gui.logic.entries`.)

Each job takes a ``cancel`` callable, yields progress events and returns its result, like
``engine.elucidation.pipeline``; :class:`msgpt_gui.workers.GeneratorWorker` runs one in a QThread and turns the
events into signals. Cancelling raises :class:`engine.errors.Cancelled` at the next check, so a
cancelled spectrum gets no result and a cancelled export leaves the earlier file (the engine's
writers are atomic).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.elucidation.deep import DeepConfig, DeepProgress, open_analog_sources, run_session
from engine.elucidation.formula_runs import MIN_SAMPLED_PROBABILITY, draws_samples, run_params
from engine.elucidation.libraries import library_formula_spectra
from engine.elucidation.pipeline import QueryParams, RankingUpdated, SamplesDrawn, SpectrumResult, SpectrumSession
from engine.errors import Cancelled, MsgptError
from engine.files.export import CandidateWriter
from engine.formulas.groups import lead_metadata
from engine.progress import CancelFn, check_cancel
from engine.threads import JobShare
from engine.spectra.adduct_groups import group_features
from engine.spectra.features import FeatureConfig, build_feature, group_scans
from engine.spectra.io import detect_format, iter_spectra
from engine.spectra.spectrum import SkippedRecord, Spectrum, SurveyScan

from .formulas import (
    DEFAULT_TOP_K,
    current_config,
    formula_spectra,
    no_candidate_reason,
    rank_group_job,
    rank_job,
    run_recalibration,
)
from .live import EVERYTHING, LiveFocus

#: Keys a :class:`FormulaJob` holds for the runs its libraries add (a formula of the mass track each); more are
#: not run (logged). Within 10 ppm a mass seldom has more than a few formulas.
LIBRARY_RUNS = 8


log = logging.getLogger(__name__)


def _never() -> bool:
    return False


# -- loading ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordsRead:
    path: str
    items: tuple  # Spectrum | SkippedRecord | Feature (an mzML run)


_LINE_PREFIX = re.compile(r"^line \d+: ")
_QUOTED = re.compile(r"'[^']*'")


def reason_kind(reason: str) -> str:
    """A skip reason without what differs from record to record (line numbers, quoted values)."""
    return _QUOTED.sub("'…'", _LINE_PREFIX.sub("", reason))


@dataclass
class FileSummary:
    """What :func:`load_file` read from one file."""

    path: str
    records: int = 0  # listed: spectra (or precursor features) and skipped records
    spectra: int = 0  # usable as read (an mzML run: its precursor features)
    skipped: Counter = field(default_factory=Counter)  # reason kind -> records
    survey_scans: int = 0  # MS1 scans of an mzML run (not listed)
    ms2_scans: int = 0  # an mzML run: the usable MS2 scans merged into its features
    features: int = 0  # an mzML run: precursor features listed
    compound_groups: int = 0  # an mzML run: adduct groups of its features (engine.spectra.adduct_groups)

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    def listed(self, item) -> None:
        """Count one listed record: a spectrum (or precursor feature), or a skipped record by its reason's kind."""
        self.records += 1
        if isinstance(item, SkippedRecord):
            self.skipped[reason_kind(item.reason)] += 1
        else:
            self.spectra += 1

    def report(self, entries: Sequence, supported_adducts: Sequence[str] | None, model_name: str = "",
               top_k: int = DEFAULT_TOP_K) -> tuple[str, bool]:
        """What the user should know about the file: (text, whether it is worth a dialog).

        ``entries``: the file's entries (:class:`~msgpt_gui.logic.entries.SpectrumEntry`) as listed now, so
        that what stops a spectrum from running is judged for the loaded model (``supported_adducts``).
        A dialog is worth it when records were passed over or skipped, spectra need something first, or
        Run will take formula candidates for them (``top_k`` of each).
        """
        name = Path(self.path).name
        ready = sum(e.spectrum is not None and e.blocker(supported_adducts) is None for e in entries)
        if self.features:
            merged = self.ms2_scans - self.features
            lines = [f"{name}: {self.features:,} precursor feature{'s' if self.features != 1 else ''} from "
                     f"{self.ms2_scans:,} MS/MS scans listed, {ready:,} ready to run.", "",
                     "The MS/MS scans of one precursor (m/z within 10 ppm, no gap over 30 s) are merged into one "
                     f"consensus spectrum ({merged:,} scans merged into others); expand a feature (▸) to see its "
                     "scans."]
            if self.compound_groups:
                lines += ["", f"{self.compound_groups:,} compound group{'s' if self.compound_groups != 1 else ''}: "
                              "features that are ions of one compound ([M+H]+ and [M+Na]+, ...; same apex, m/z of "
                              "two ion types, MS1 traces that rise and fall together). Run decides each group "
                              "together and every member shows its answer (the Group column)."]
        else:
            lines = [f"{name}: {self.records:,} MS/MS record{'s' if self.records != 1 else ''} listed, "
                     f"{ready:,} ready to run."]
        if self.survey_scans:
            lines += ["", f"Not listed: {self.survey_scans:,} MS1 survey scan{'s' if self.survey_scans != 1 else ''} "
                          "(MS-GPT elucidates MS/MS spectra; the survey scans hold no fragments). They give each "
                          "precursor's isotope pattern and co-detected adducts to its formula candidates."]
        if self.skipped:
            lines += ["", "Listed but skipped by the reader (select one to see it; its Status says why):"]
            for reason, n in self.skipped.most_common(8):
                lines.append(f"  • {n:,} × {reason}")
            rest = self.skipped.most_common()[8:]
            if rest:
                lines.append(f"  • {sum(n for _, n in rest):,} × {len(rest)} other reasons")
            if any(r.startswith("no precursor m/z") for r in self.skipped):
                lines.append("  Records without a precursor m/z are plotted: type the precursor m/z above the plot "
                             "and press Apply to run one.")
        blocked = Counter()
        unsupported = Counter()
        for e in entries:
            b = e.blocker(supported_adducts) if e.spectrum is not None else None
            if b is not None:
                blocked[b[0]] += 1
                if b[0] == "ion not supported":
                    unsupported[e.spectrum.adduct] += 1
        if blocked:
            lines += ["", "Need your input before Run:"]
            if blocked["needs formula"] or blocked["needs adduct"]:
                n = blocked["needs formula"] + blocked["needs adduct"]
                lines.append(f"  • {n:,} without a molecular formula or adduct: type them below the spectrum and "
                             "press Apply, or select several rows and press Apply to selected")
            if unsupported:
                ions = ", ".join(f"{a} ({n})" for a, n in unsupported.most_common())
                lines.append(f"  • {sum(unsupported.values()):,} with an ion type this model cannot use: {ions}")
        guessed = sum(e.needs_formulas and e.blocker(supported_adducts) is None for e in entries)
        if guessed:
            lines += ["", f"Without a molecular formula: {guessed:,}. Run ranks their formula and ion type candidates "
                          f"(precursor mass, fragments{', MS1 isotopes' if self.survey_scans else ''}) and elucidates "
                          f"the best {top_k} of each; the Formulas tab lists them to pick one, or type one below the "
                          "spectrum."]
        flagged = sum(bool(e.no_fragments) for e in entries)
        if flagged:
            lines += ["", f"Flagged: {flagged:,} spectr{'um' if flagged == 1 else 'a'} with no fragments "
                          "(only the precursor): candidates reflect the formula only."]
        if supported_adducts is not None:
            model = f"The model {model_name}" if model_name else "The model"
            lines += ["", f"{model} supports the ion types {', '.join(supported_adducts)}."]
        else:
            lines += ["", "No model is loaded: Model ▸ Open Model Folder… picks one (it says which ion types it supports)."]
        worth = bool(self.survey_scans or self.skipped or blocked or guessed)
        return "\n".join(lines), worth


def load_file(
    path: str | Path, cancel: CancelFn | None = None, batch: int = 500, interval_s: float = 0.15,
    features: FeatureConfig | None = FeatureConfig(),
) -> Generator[RecordsRead, None, FileSummary]:
    """Read a spectra file in batches (at most ``batch`` records or ``interval_s`` apart); returns a
    :class:`FileSummary`. An MGF file streams record by record. An mzML run is read whole and listed by
    precursor feature (``features``: how scans are grouped; None lists every MS2 scan), skipped records first;
    MS1 survey scans are counted and give the features their MS1 evidence, not listed."""
    path = str(path)
    summary = FileSummary(path)
    from engine.spectra.handoff import handoff_kind

    if features is not None and (kind := handoff_kind(path)) is not None:  # tools' feature exports (#60)
        from .handoff_files import handoff_batches

        for listed in handoff_batches(path, kind, summary, cancel, batch, interval_s, features):
            yield RecordsRead(path, listed)
        return summary
    items: list = []
    last = time.perf_counter()
    grouped = features is not None and detect_format(path) == "mzml"
    spectra: list[Spectrum] = []
    survey: list[SurveyScan] = []

    def due() -> bool:
        return len(items) >= batch or time.perf_counter() - last >= interval_s

    try:
        for item in iter_spectra(path, survey_scans=True):
            check_cancel(cancel)
            if isinstance(item, SurveyScan):
                summary.survey_scans += 1
                if grouped:
                    survey.append(item)
                continue
            if grouped and not isinstance(item, SkippedRecord):
                spectra.append(item)
                summary.ms2_scans += 1
                continue
            items.append(item)
            summary.listed(item)
            if due():
                yield RecordsRead(path, tuple(items))
                items, last = [], time.perf_counter()
    except Cancelled:
        raise
    except MsgptError:  # a problem mid-file: the records read before it are kept
        if items:
            yield RecordsRead(path, tuple(items))
        raise
    check_cancel(cancel)
    if spectra:
        survey.sort(key=lambda s: (math.inf if s.retention_time is None else s.retention_time))
        groups = group_scans([s.precursor_mz for s in spectra], [s.retention_time for s in spectra], features, survey)
        built = []
        for k, group in enumerate(groups):
            check_cancel(cancel)
            built.append(build_feature(k, [spectra[i] for i in group], survey, features))
        built, grouping = group_features(built, survey, features)  # adduct groups (engine.spectra.adduct_groups)
        summary.compound_groups = len(grouping.groups) if grouping is not None else 0
        for feature in built:
            items.append(feature)
            summary.listed(feature)
            summary.features += 1
            if due():
                yield RecordsRead(path, tuple(items))
                items, last = [], time.perf_counter()
    if items:
        yield RecordsRead(path, tuple(items))
    return summary


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
    phase: str = ""  # deep search: what it does now ("deep search: round 2 of 4"); "" for plain sampling

    @property
    def fraction(self) -> float:
        """How far the run is, 0..1 (this spectrum counted by ``done / total``)."""
        here = min(self.done / self.total, 1.0) if self.total > 0 else 0.0
        return (self.position + here) / max(self.count, 1)

    def text(self) -> str:
        """What a progress bar says: the spectrum, the phase of a deep search, the samples drawn."""
        what = f"Spectrum {self.position + 1} of {self.count}: " if self.count > 1 else ""
        counts = f"{self.done}/{self.total}" if self.total > 0 else ""
        if self.phase:
            return f"{what}{self.phase}" + (f" ({counts})" if counts else "")
        return f"{what}{counts} structures"


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


@dataclass(frozen=True)
class FormulaJob:
    """Elucidate the best ``k`` formula candidates of a spectrum without a formula (the ion types the model
    supports); the table is ranked in the job unless given."""

    key: int  # the listed entry
    base: Spectrum  # the spectrum the table is for (msgpt_gui.logic.formulas.formula_base)
    ms1: object | None  # its MS1 evidence (engine.spectra.features.MS1Evidence), if any
    table: object | None  # its FormulaTable, when ranked already
    run_keys: tuple[int, ...]  # keys for the formula runs, one per formula (k of them)
    libraries: tuple = ()  # the enabled structure and spectral libraries each run's session searches
    library_keys: tuple[int, ...] = ()  # keys for the runs the libraries add (at most LIBRARY_RUNS)
    run_items: tuple | None = None  # a feature of an LC-MS run: the run's features (run_items_of), its m/z recalibration
    # runs to keep, as (key, formula, ion type, session): the libraries changed after a run, so what they add is
    # worked out again, and a run of the same formula and ion type keeps its key and samples (only re-ranked)
    reuse: tuple = ()
    # a compound group's member (engine.spectra.adduct_groups): every member as (key, feature, formula base); the
    # group decides one formula ranking and the member elucidated (rank_group_job), the others show its answer
    group: tuple = ()
    # formula candidates below this probability (but the best) rank their library structures alone, unsampled
    # (engine.elucidation.formula_runs); 0 when the chemist asked for the best k by name (the Formulas tab)
    min_probability: float = MIN_SAMPLED_PROBABILITY


@dataclass(frozen=True)
class GroupDecided:
    """A compound group's decision (engine.formulas.groups.GroupDecision): ``lead_key`` is the member whose formula
    runs follow (:class:`FormulasRanked` under its key); ``member_keys`` every member's entry."""

    key: int  # the entry the job was started for
    lead_key: int
    member_keys: tuple[int, ...]
    decision: object


@dataclass(frozen=True)
class FormulaRun:
    key: int
    candidate: object | None  # its FormulaCandidate; None for a run the libraries add (spectrum's formula_source)
    spectrum: Spectrum  # the base with the candidate's formula and ion type
    session: SpectrumSession | None  # None when the model cannot run it (problem says why)
    problem: str = ""


@dataclass(frozen=True)
class FormulasRanked:
    """The formula table of a :class:`FormulaJob` and the runs it starts (their events follow, keyed by run)."""

    key: int
    base: Spectrum
    table: object  # FormulaTable
    runs: tuple[FormulaRun, ...]


def run_items_of(entries: Sequence, entry) -> tuple | None:
    """The features of the LC-MS run of ``entry`` (a feature) as ``(spectrum, ms1)``, from which the run's m/z
    recalibration is measured before its formulas are ranked (:func:`~msgpt_gui.logic.formulas.rank_job`); None for
    a spectrum that is not a run's feature."""
    source = entry.spectrum.source if entry.spectrum is not None else ""
    if entry.feature is None or not source:
        return None
    return tuple((x.feature.spectrum, x.ms1) for x in entries if x.feature is not None
                 and x.feature.spectrum.source == source)


def _elucidate_one(key: int, position: int, count: int, session: SpectrumSession, params: QueryParams,
                   cancel: CancelFn, preview: bool, live: LiveFocus = EVERYTHING, owner: int | None = None
                   ) -> Generator[object, None, SpectrumResult]:
    """One session's run with its progress and live rankings (see :func:`elucidate_sessions`; ``live``: whether the
    spectrum, or its entry ``owner``, is on screen: only then the preview stage and live rankings, at most one per
    ``live.config.min_interval`` s). A mass-track run ranks its library structures unsampled; a formula below the best
    draws its share of the samples (``run_params``). A deep search says its phase (analogs, standard pool, rounds)."""
    t0 = time.perf_counter()
    if not draws_samples(session.spectrum):  # the mass track, or a formula the run budget does not sample
        check_cancel(cancel)
        return dataclasses.replace(session.rank_known(params), seconds=time.perf_counter() - t0, partial=False)
    params = run_params(session.spectrum, params)
    deep = params.effort == "deep"
    if deep:
        for event in open_analog_sources(session, cancel):
            yield EntryProgress(key, position, count, event.done, event.total, event.phase)
    stages = [params]
    shown = live.throttle(key, owner)
    if preview and params.samples_per_group > 1 and live.shows(key, owner):
        stages.insert(0, dataclasses.replace(params, samples_per_group=1, effort="standard", edit_rounds=0))
    new = 0
    result = None
    budget = DeepConfig().max_new_samples if deep else 0  # counted from the start, so the bar never runs back
    for n_stage, stage in enumerate(stages):
        final = n_stage == len(stages) - 1
        phase = "deep search: the standard pool first" if deep else ""
        gen = run_session(session, stage, cancel)  # deep effort: the standard pool, then the deep rounds
        offset = new
        counts = (offset, offset)  # samples drawn of those to draw, as last said
        while True:
            try:
                event = next(gen)
            except StopIteration as stop:
                result = stop.value
                break
            if isinstance(event, SamplesDrawn):
                # a fresh pool: the preview draws M of the B samples; report against B
                total = event.total if final else max(params.pool_size, event.total)
                counts = (offset + event.done, offset + total + (budget if phase.endswith("first") else 0))
                yield EntryProgress(key, position, count, *counts, phase)
            elif isinstance(event, DeepProgress):  # a phase begins (with its samples, or none: the counts stay)
                phase = event.phase
                if event.total:
                    counts = (offset + event.done, offset + event.total)
                yield EntryProgress(key, position, count, *counts, phase)
            elif isinstance(event, RankingUpdated) and shown.due():  # ranked only when shown (event.result)
                yield EntryRanking(key, dataclasses.replace(event.result, partial=True))
        new += result.new_samples
        if not final and result.new_samples and live.shows(key, owner):
            yield EntryRanking(key, dataclasses.replace(result, partial=True))
    return dataclasses.replace(result, new_samples=new, seconds=time.perf_counter() - t0, partial=False)


def elucidate_sessions(
    jobs: Sequence[tuple[int, SpectrumSession] | FormulaJob],
    params: QueryParams,
    cancel: CancelFn | None = None,
    preview: bool = True,
    bundle=None,
    live: LiveFocus = EVERYTHING,
) -> Generator[object, None, RunOutcome]:
    """Run ``params`` on each ``(key, session)``; yields Entry* events, returns a :class:`RunOutcome`.

    ``preview``: when a spectrum has no samples yet at these settings, first draw one sample per
    query group (N=1, B=M) and show that ranking, then grow to the requested N. Because samples are
    identified by (query, index), growing draws only the missing ones and the final pool is the
    one a single run would draw; the first structures are on screen after about 1/N of the work.

    ``live`` (:class:`~msgpt_gui.logic.live.LiveFocus`): which spectra are on screen; only those get the preview
    stage and live rankings (throttled), the others are ranked once, at their end (default: every spectrum, every
    batch). The final rankings are the same either way.

    A :class:`FormulaJob` (it needs ``bundle``) ranks the spectrum's formula candidates, says which it
    runs (:class:`FormulasRanked`), then runs each like a session, its events keyed by the run's key.

    A spectrum that fails with an engine error is reported (``EntryFailed``) and the run goes on;
    cancelling raises :class:`Cancelled` (the spectrum in progress gets no result).
    """
    cancel = cancel or _never
    outcome = RunOutcome()
    t_run = time.perf_counter()
    count = len(jobs)
    with JobShare(reserve=1) as share:  # the cores shared with other msgpt jobs (engine/threads.py)
        for position, job in enumerate(jobs):
            check_cancel(cancel)
            share.rebalance()
            if isinstance(job, FormulaJob):
                runs = yield from _formula_runs(job, position, count, bundle, cancel)
                if runs is None:
                    outcome.failed.append(job.key)
                    continue
                todo = [(run.key, run.session) for run in runs if run.session is not None]
            else:
                todo = [job]
            top = job.key if isinstance(job, FormulaJob) else job[0]
            finished = False
            for key, session in todo:
                yield EntryStarted(key, position, count)
                try:
                    result = yield from _elucidate_one(key, position, count, session, params, cancel, preview, live, top)
                except Cancelled:
                    raise
                except MsgptError as e:
                    yield EntryFailed(key, str(e))
                    continue
                finished = True
                yield EntryFinished(key, result)
            (outcome.finished if finished else outcome.failed).append(top)
    outcome.seconds = time.perf_counter() - t_run
    return outcome


def _formula_runs(job: FormulaJob, position: int, count: int, bundle, cancel: CancelFn
                  ) -> Generator[object, None, tuple[FormulaRun, ...] | None]:
    """Rank (unless given) and start the formula runs of ``job``; None when there is nothing to run (said)."""
    yield EntryStarted(job.key, position, count)
    try:
        if job.group:  # a compound group: one ranking for all members, its lead elucidated
            decision = yield from rank_group_job([f for _, f, _ in job.group], bundle.runnable_adducts, cancel,
                                                 run_items=job.run_items)
            lead_key, lead, lead_base = next(m for m in job.group if m[1].id == decision.lead_id)
            yield GroupDecided(job.key, lead_key, tuple(k for k, _, _ in job.group), decision)
            if lead_key != job.key:
                yield EntryStarted(lead_key, position, count)
            base = dataclasses.replace(lead_base, metadata={**lead_base.metadata, **lead_metadata(decision)})
            job = dataclasses.replace(job, key=lead_key, base=base, ms1=lead.ms1, table=decision.joint)
        table = job.table if job.table is not None else (
            yield from rank_job(job.base, job.ms1, cancel, run_items=job.run_items))
    except Cancelled:
        raise
    except MsgptError as e:
        yield EntryFailed(job.key, str(e))
        return None
    base = job.base  # the runs elucidate it with the run's m/z recalibration taken out, as msgpt predict does
    recal = run_recalibration(base.source) if base.source else None  # the one the table was ranked with
    if recal is not None and recal.applied:
        base = recal.apply(base)
    chosen = formula_spectra(base, table, bundle.runnable_adducts, len(job.run_keys), job.libraries,
                             job.min_probability)
    config = current_config()
    added = library_formula_spectra(job.libraries, base, [s for _, s in chosen], bundle.runnable_adducts,
                                    config.ppm, config.ion_types or ()) if job.libraries else []
    reuse = {(formula, adduct): (key, session) for key, formula, adduct, session in job.reuse}
    run_keys, library_keys = iter(job.run_keys), iter(job.library_keys)
    runs, not_run = [], 0
    for candidate, spectrum, keys in [*((c, s, run_keys) for c, s in chosen), *((None, s, library_keys) for s in added)]:
        kept = reuse.get((spectrum.formula, spectrum.adduct))
        if kept is not None:  # ran before: its session (and samples) stay, searching the libraries on now
            runs.append(FormulaRun(kept[0], candidate, kept[1].spectrum, kept[1]))
            continue
        key = next(keys, None)
        if key is None:
            not_run += 1
            continue
        try:
            runs.append(FormulaRun(key, candidate, spectrum, SpectrumSession(bundle, spectrum,
                                                                             libraries=job.libraries)))
        except MsgptError as e:
            runs.append(FormulaRun(key, candidate, spectrum, None, str(e)))
    if not_run:
        log.warning("%s: %d more formulas of library structures of this mass not run (at most %d)", job.base.id,
                    not_run, len(job.library_keys))
    yield FormulasRanked(job.key, job.base, table, tuple(runs))
    if not runs:
        yield EntryFailed(job.key, no_candidate_reason(table, bundle.runnable_adducts))
        return None
    for run in runs:
        if run.session is None:
            yield EntryFailed(run.key, run.problem)
    return tuple(runs)


# -- export -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExportProgress:
    done: int
    total: int


def export_candidates(
    path: str | Path, results: Sequence[SpectrumResult | Sequence[SpectrumResult]], info: dict[str, str],
    cancel: CancelFn | None = None, novelty=None,
) -> Generator[ExportProgress, None, int]:
    """Write ``results`` to a CSV/SDF file atomically; returns the number of candidate rows. An item that is a
    sequence holds the results of one spectrum's formulas (:meth:`CandidateWriter.write_feature`): their ranks
    run on, each candidate with its rank over the feature and the feature's identification level, as ``msgpt
    predict`` writes them. ``novelty``: the :class:`~engine.insight.novelty.NoveltyMarker` of the novelty column."""
    with CandidateWriter(path, info, novelty=novelty) as writer:
        for i, item in enumerate(results):
            check_cancel(cancel)
            if isinstance(item, SpectrumResult):
                writer.write(item)
            else:
                writer.write_feature(list(item))
            yield ExportProgress(i + 1, len(results))
        check_cancel(cancel)
    return writer.n_rows


def export_info(bundle, results: Sequence[SpectrumResult | Sequence[SpectrumResult]]) -> dict[str, str]:
    """Provenance for an export: model, checksum, parameters and seed (each parameter set once when they differ:
    :func:`engine.files.export.parameters_provenance`)."""
    from engine.files.export import parameters_provenance, provenance

    flat = [r for item in results for r in ([item] if isinstance(item, SpectrumResult) else item)]
    info = provenance(bundle, flat[0].params if flat else QueryParams())
    info.update(parameters_provenance(results))
    return info


def load_model(path: str | Path, device: str, cancel: CancelFn | None = None):
    """Load a bundle (a job, so a large model loads without freezing the window)."""
    from engine.model.bundle import load_bundle

    check_cancel(cancel)
    bundle = load_bundle(path, device=device)
    check_cancel(cancel)
    from engine.elucidation.ranking import decode_safe

    decode_safe("C")  # imports safe-mol (about 2 s) here, not on the way to the first candidates
    return bundle
    yield  # a generator with no progress events: GeneratorWorker runs it like every other job
