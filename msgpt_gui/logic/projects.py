"""The app's document as a project, without Qt: entries to :class:`engine.files.project.Project` and back, and the
jobs that save and open project files in the background (generators of progress, like
:mod:`msgpt_gui.logic.jobs`).

What a project keeps of an entry: the spectrum as read and as the user set it, the last complete result
(candidates with their scores; a ranking still being drawn is not saved, its earlier result is), the
samples it was ranked from, the status and the user's notes. A precursor feature of an LC-MS run is kept whole:
its scans, RT range and MS1 evidence (the survey peaks around its precursor), and its scans that have a state of
their own (run, notes, a formula set). The formula runs of an entry that ran for its best formula candidates are
kept inside it (each with its formula candidate, spectrum and candidates), so a reopened project lists the entry
once, done, with the Level, Confidence and combined candidates it had. A feature's compound group is kept with it,
and a group that ran is linked again on opening (:func:`relink_groups`): its other members show its lead's answer.
The m/z recalibration measured for each
LC-MS run is kept too (the Formulas tab shows it again without measuring). The project records the libraries the
results were ranked with (name, kind, checksum); a reopened result counts as ranked with all of them. Sessions are
not saved: the next run of a reopened entry gets one back with its samples
(:meth:`~msgpt_gui.logic.entries.SpectrumEntry.new_session`) when the same model is loaded, so re-tuning draws only
what is missing.

Opening a spectra file that the document's entries came from (a reopened project's) *attaches* it
(:func:`attach_job`, :func:`attach_records`): its records are matched to the entries by ID and index, what only the
file has is filled in (the features and MS1 evidence of a project saved before they were kept), and records the
project lacks are listed; nothing is listed twice.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from engine.elucidation.pipeline import QueryParams
from engine.files.project import (
    SOURCE_CHANGED,
    SOURCE_MISSING,
    SOURCE_SAME,
    ModelRef,
    Project,
    ProjectEntry,
    ProjectProgress,
    RunRecalibration,
    Selection,
    check_source,
    describe_source,
    write_project,
)
from engine.files.project_read import read_project
from engine.model.bundle import bundle_checksum
from engine.paths import default_model_dir
from engine.progress import CancelFn, check_cancel
from engine.spectra.features import Feature

from . import formulas
from .entries import SpectrumEntry, Status


def worth_saving(entries: Sequence[SpectrumEntry]) -> bool:
    """Whether losing the document loses work: candidates, notes, or formulas / ion types / m/z set by hand
    (opened files alone can be opened again)."""
    return any(e.has_results or e.user_notes.strip() or e.overridden for e in entries)


def _saved_status(e: SpectrumEntry) -> tuple[str, str]:
    """A run in progress is saved as it was before the run (its earlier result, if any)."""
    if e.status in (Status.RUNNING, Status.QUEUED):
        return (Status.DONE, "") if e.result is not None else (Status.NOT_RUN, "")
    return e.status, e.reason


def _samples(e: SpectrumEntry) -> tuple:
    """The samples the entry's result was ranked from: from its session (not while a run uses it), or those
    a project gave it that no session has taken yet."""
    if e.result is None:
        return ()
    if e.session is not None and e.status not in (Status.RUNNING, Status.QUEUED) \
            and e.session.spectrum is e.result.spectrum:
        return tuple(e.session.drawn_samples(e.result.params))
    return tuple(e.drawn_samples)


def _project_entry(e: SpectrumEntry) -> ProjectEntry:
    """An entry as the project keeps it, with its formula runs and the scans of its feature that have a state."""
    status, reason = _saved_status(e)
    runs = [_project_entry(r) for r in e.formula_runs]
    if any(r.has_results for r in runs):  # its candidates are its formula runs' (a run going on: the earlier ones)
        status, reason = Status.DONE, ""
    scans = {}
    if e.feature is not None and e.children:
        position = {id(s): i for i, s in enumerate(e.feature.scans)}
        for child in e.children:
            i = position.get(id(child.original))
            if i is not None and not child.untouched:
                scans[i] = _project_entry(child)
    return ProjectEntry(e.spectrum, e.original, e.skipped, status=status, reason=reason, notes=e.user_notes,
                        result=e.result, model_checksum=e.model_checksum if e.result is not None else None,
                        samples=_samples(e), feature=e.feature, formula_runs=runs, candidate=e.candidate,
                        scan_entries=scans)


def snapshot(entries: Sequence[SpectrumEntry], params: QueryParams, bundle=None,
             selection: Selection = Selection(), app: dict | None = None) -> Project:
    """The document as a :class:`Project` (main thread: it reads the entries; what it holds is immutable, so
    a worker thread may write it while the app goes on). ``bundle``: the loaded model (its name and checksum
    are recorded); the source files are filled in by :func:`save_job`."""
    out = [_project_entry(e) for e in entries]
    return Project(entries=out, params=params, model=ModelRef.of(bundle) if bundle is not None else None,
                   selection=selection, app=dict(app or {}), libraries=used_libraries(entries),
                   recalibrations=measured_recalibrations(entries))


# -- the m/z recalibrations of the runs (msgpt_gui.logic.formulas keeps them, measured once per run and settings) --
def measured_recalibrations(entries: Sequence[SpectrumEntry]) -> list[RunRecalibration]:
    """The recalibrations measured (auto) for the LC-MS runs the entries' features came from."""
    sources = {e.feature.spectrum.source for e in entries if e.feature is not None and e.feature.spectrum.source}
    out = []
    for (source, key), recal in list(formulas._recalibrations.items()):
        if source in sources and recal is not None:
            ppm, elements, ions = key
            out.append(RunRecalibration(source, recal, {"ppm": ppm, "elements": elements,
                                                        "ion_types": list(ions) if ions is not None else None}))
    return out


def restore_recalibrations(recalibrations: Sequence[RunRecalibration]) -> int:
    """Keep a project's recalibrations as if measured here (those of other formula settings too: they count when the
    settings are those again); returns how many."""
    n = 0
    for r in recalibrations:
        s = r.settings
        try:
            ions = s.get("ion_types")
            key = (float(s["ppm"]), str(s["elements"]), tuple(ions) if ions is not None else None)
        except (KeyError, TypeError, ValueError):
            continue
        formulas._recalibrations[(r.file, key)] = r.recalibration
        n += 1
    return n


def used_libraries(entries: Sequence[SpectrumEntry]) -> list:
    """The libraries (:class:`~engine.files.project.LibraryRef`) the entries' results were ranked with, each once."""
    seen: dict = {}
    for e in entries:
        for x in [e, *e.formula_runs]:
            if x.result is not None:
                for ref in x.library_refs:
                    seen.setdefault((ref.kind, ref.checksum), ref)
    return list(seen.values())


def source_paths(project: Project) -> list[str]:
    """The files the project's records came from, in the order they were listed."""
    seen: dict[str, None] = {}
    for e in (x for top in project.entries for x in top.walk()):
        for s in (e.original, e.spectrum):
            if s is not None and s.source:
                seen.setdefault(s.source, None)
        if e.skipped is not None and e.skipped.source:
            seen.setdefault(e.skipped.source, None)
    return list(seen)


@dataclass(frozen=True)
class ProjectSaved:
    path: str
    size: int  # bytes
    n_entries: int
    n_results: int


def save_job(path: str, project: Project, hashes: dict | None = None,
             cancel: CancelFn | None = None) -> Generator[ProjectProgress, None, ProjectSaved]:
    """Record the source files (path, size, SHA-256; ``hashes`` caches checksums between saves), then write
    the project atomically."""
    sources = source_paths(project)
    files = []
    for k, p in enumerate(sources):
        check_cancel(cancel)
        yield ProjectProgress(k, len(sources), f"Checking {Path(p).name}")
        files.append(describe_source(p, hashes, cancel))
    project = replace(project, files=files)
    size = yield from write_project(path, project, cancel)
    return ProjectSaved(str(path), size, len(project.entries), sum(e.has_results for e in project.entries))


@dataclass(frozen=True)
class ProjectOpened:
    path: str
    project: Project
    sources: tuple[tuple[str, str], ...]  # (path, SOURCE_SAME / SOURCE_CHANGED / SOURCE_MISSING / ...)


def open_job(path: str, cancel: CancelFn | None = None) -> Generator[ProjectProgress, None, ProjectOpened]:
    """Read a project and check whether its source files are on this machine, unchanged."""
    project = yield from read_project(path, cancel)
    states = []
    for k, f in enumerate(project.files):
        check_cancel(cancel)
        yield ProjectProgress(k, len(project.files), f"Checking {f.name}")
        states.append((f.path, check_source(f, cancel=cancel)))
    return ProjectOpened(str(path), project, tuple(states))


def _app_entry(p: ProjectEntry, key: int, new_key: Callable[[], int], libraries: tuple,
               ms1=None, parent_key: int | None = None, owner_key: int | None = None) -> SpectrumEntry:
    feature: Feature | None = p.feature
    ms1 = feature.ms1 if feature is not None else ms1
    e = SpectrumEntry(key, p.spectrum, skipped=p.skipped, original=p.original, status=p.status, reason=p.reason,
                      result=p.result, model_checksum=p.model_checksum if p.result is not None else None,
                      user_notes=p.notes, drawn_samples=p.samples,
                      library_refs=libraries if p.result is not None else (), feature=feature, ms1=ms1,
                      parent_key=parent_key, owner_key=owner_key, candidate=p.candidate)
    if e.status in (Status.RUNNING, Status.QUEUED):  # not written by this app; said for safety
        e.status = Status.DONE if e.result is not None else Status.NOT_RUN
    if e.spectrum is None and e.status != Status.SKIPPED:
        e.status = Status.SKIPPED
        e.reason = e.reason or (e.skipped.reason if e.skipped is not None else "")
    if feature is not None and feature.n_scans > 1:  # its scans, as listed when the run was read
        e.children = []
        for i, scan in enumerate(feature.scans):
            saved = p.scan_entries.get(i)
            if saved is None:
                e.children.append(SpectrumEntry(new_key(), scan, original=scan, parent_key=key, ms1=ms1))
            else:
                child = _app_entry(saved, new_key(), new_key, libraries, ms1, parent_key=key)
                if child.original == scan:  # the scan itself (saving again finds it among the feature's scans)
                    child.original = scan
                e.children.append(child)
    e.formula_runs = [_app_entry(r, new_key(), new_key, libraries, ms1, owner_key=key) for r in p.formula_runs]
    if e.formula_runs:
        e.sync_status()
    return e


def entries_from_project(project: Project, keys: Sequence[int],
                         new_key: Callable[[], int] | None = None) -> list[SpectrumEntry]:
    """The project's entries as the app's (``keys``: one per listed entry; ``new_key`` gives the keys of their scans
    and formula runs, by default the numbers after ``keys``)."""
    if new_key is None:
        new_key = itertools.count(max(keys, default=-1) + 1).__next__
    libraries = tuple(project.libraries)
    entries = [_app_entry(p, key, new_key, libraries) for key, p in zip(keys, project.entries, strict=True)]
    relink_groups(entries)
    return entries


def relink_groups(entries: Sequence[SpectrumEntry]) -> None:
    """A reopened project's compound groups that ran: each member's ``group_decision``, and each member without
    results of its own showing its lead's answer (``group_lead``).

    The lead is the member whose formula runs' spectra say ``group_lead`` (its own feature id) in their metadata
    (:func:`engine.formulas.groups.lead_metadata`). The decision is rebuilt from what the project holds (the group,
    its members' features, the lead, the joint ranking's candidates the lead ran for) rather than ranked again with
    :func:`~engine.formulas.groups.decide_group`: that would take seconds per group on opening and could decide
    otherwise under other settings; what a member shows (:func:`~engine.formulas.groups.as_member_result`) needs
    no more. Each member's own table (``tables``) is not kept."""
    from engine.formulas.candidates import FormulaTable
    from engine.formulas.groups import GroupDecision

    groups: dict[tuple[str, str], list[SpectrumEntry]] = {}
    for e in entries:
        if e.feature is not None and e.feature.group is not None:
            groups.setdefault((e.source, e.feature.group.id), []).append(e)
    for (_, gid), members in groups.items():
        lead = next((m for m in members if any(r.spectrum is not None and r.spectrum.metadata.get("group_lead") ==
                                               m.feature.id and r.spectrum.metadata.get("compound_group") == gid
                                               for r in m.formula_runs)), None)
        if lead is None:
            continue
        f = lead.feature
        note = "the formulas the group's lead ran for, as its project kept them (the rest of the joint ranking is not)"
        joint = FormulaTable(lead.id, f.precursor_mz, (f.ion_type_in_group,),
                             tuple(r.candidate for r in lead.formula_runs if r.candidate is not None), 0,
                             lead.ms1 is not None, 0, (note,))
        decision = GroupDecision(gid, f.id, joint, {}, {m.feature.id: m.feature for m in members})
        shown = [m for m in members if m is not lead and not m.has_results and not m.formula_runs]
        for m in [lead, *shown]:
            m.group_decision, m._group_view = decision, None
        for m in shown:
            m.group_lead = lead
            m.sync_status()


def group_followers(entries: Sequence[SpectrumEntry]) -> dict[int, tuple[int, ...]]:
    """Lead key -> the keys of the members showing its answer (the run controller keeps their rows in step)."""
    out: dict[int, tuple[int, ...]] = {}
    for e in entries:
        if e.group_lead is not None:
            out[e.group_lead.key] = (*out.get(e.group_lead.key, ()), e.key)
    return out


def nested_entries(entries: Sequence[SpectrumEntry]) -> list[SpectrumEntry]:
    """The formula runs of ``entries`` and of their scans (the spectra model finds them by key)."""
    out = []
    for e in entries:
        for x in (e, *e.children):
            out += x.formula_runs
    return out


# -- attaching a spectra file to the entries it holds ---------------------------------------------------------
def _record_key(x) -> tuple[str, int] | None:
    """What matches a record of a file to an entry: its ID and index in the file."""
    from engine.spectra.spectrum import SkippedRecord

    if isinstance(x, Feature):
        return x.spectrum.id, int(x.spectrum.index)
    if isinstance(x, SkippedRecord):
        return x.spectrum_id, int(x.index)
    if isinstance(x, SpectrumEntry):
        s = x.original or x.spectrum
        if s is not None:
            return s.id, int(s.index)
        return (x.skipped.spectrum_id, int(x.skipped.index)) if x.skipped is not None else None
    return x.id, int(x.index)


def holds_file(entries: Sequence[SpectrumEntry], path: str | Path) -> bool:
    """Whether some entry came from the file ``path``."""
    target = str(Path(path).resolve())
    return any(str(Path(source).resolve()) == target for source in {e.source for e in entries} if source)


@dataclass(frozen=True)
class FileAttached:
    """A spectra file read to attach it to the entries it holds (:func:`attach_job`)."""

    path: str
    items: tuple  # Spectrum, SkippedRecord or Feature, as the file lists them
    summary: object  # the load job's FileSummary


def attach_job(path: str, cancel: CancelFn | None = None) -> Generator[ProjectProgress, None, FileAttached]:
    """Read a spectra file (as opening it would) to attach it: every record, nothing listed."""
    from .jobs import load_file

    items: list = []
    gen = load_file(path, cancel)
    while True:
        try:
            batch = next(gen)
        except StopIteration as stop:
            summary = stop.value
            break
        items += batch.items
        yield ProjectProgress(len(items), 0, f"Reading {Path(path).name} to attach it: {len(items):,} records")
    return FileAttached(str(path), tuple(items), summary)


@dataclass
class Attached:
    """What attaching a file did (:func:`attach_records`)."""

    matched: int = 0  # records of the file that an entry holds
    features: int = 0  # entries that became the file's precursor features again (with their scans)
    ms1: int = 0  # entries given the MS1 evidence of their precursor
    added: list = dataclasses.field(default_factory=list)  # new entries of the records the entries lack

    def describe(self, name: str) -> str:
        parts = [f"{self.matched:,} of its records are the project's"]
        filled = []
        if self.features:
            filled.append(f"{self.features:,} precursor feature{'s' if self.features != 1 else ''} with their scans")
        if self.ms1:
            filled.append(f"the MS1 survey evidence of {self.ms1:,}")
        parts.append(f"filled in {' and '.join(filled)}" if filled else "the project already holds all it has")
        if self.added:
            parts.append(f"{len(self.added):,} record{'s' if len(self.added) != 1 else ''} the project lacked "
                         f"{'were' if len(self.added) != 1 else 'was'} listed")
        return f"Attached {name} to the project: " + "; ".join(parts) + "."


def attach_records(entries: Sequence[SpectrumEntry], path: str, items: Sequence,
                   new_key: Callable[[], int]) -> Attached:
    """Attach the records a file holds (``items``, as :func:`attach_job` read them) to the entries that came from it:
    an entry the file lists as a precursor feature gets it back (its scans as children: the entry's ``children`` are
    set) and its MS1 evidence when it has none (its scans and formula runs too; their formula tables, and the run's
    recalibration, are made again with it); records no entry holds become new entries (``Attached.added``, to be
    listed)."""
    target = str(Path(path).resolve())
    same = {source for source in {e.source for e in entries} if source and str(Path(source).resolve()) == target}
    mine = {}
    for e in entries:
        if e.source in same:
            k = _record_key(e)
            if k is not None:
                mine.setdefault(k, e)
    out = Attached()
    for item in items:
        e = mine.get(_record_key(item))
        if e is None:
            key = new_key()
            out.added.append(SpectrumEntry.from_feature(key, item, new_key) if isinstance(item, Feature)
                             else SpectrumEntry.from_item(key, item))
            continue
        out.matched += 1
        if not isinstance(item, Feature):
            continue
        if e.feature is None:
            e.feature = replace(item, spectrum=e.original) if e.original is not None else item
            if item.n_scans > 1 and not e.children:
                e.children = [SpectrumEntry(new_key(), scan, original=scan, parent_key=e.key, ms1=item.ms1)
                              for scan in item.scans]
            out.features += 1
        if e.ms1 is None and item.ms1 is not None:
            if e.feature.ms1 is None:
                e.feature = replace(e.feature, ms1=item.ms1)
            for x in (e, *e.children, *e.formula_runs, *(r for c in e.children for r in c.formula_runs)):
                x.ms1 = item.ms1
                x.formula_table = x.formula_table_key = None  # ranked without isotopes and adducts: ranked again
            out.ms1 += 1
    if out.ms1:  # the run's recalibration was measured without MS1 evidence: measured again
        for key in [k for k in formulas._recalibrations if k[0] and str(Path(k[0]).resolve()) == target]:
            del formulas._recalibrations[key]
    return out


def find_model(model: ModelRef | None) -> Path | None:
    """The folder of the project's model on this machine: where it was, or the bundled model, when the checksum
    there is the recorded one (None when it is not here)."""
    if model is None:
        return None
    folders = ([Path(model.path)] if model.path else []) + [default_model_dir()]
    for folder in folders:
        try:
            if (folder / "config.json").is_file() and bundle_checksum(folder) == model.checksum:
                return folder
        except OSError:
            continue
    return None


def model_note(project: Project, bundle) -> str:
    """What to tell the user when the project's candidates come from another model than the loaded one
    ('' when they do not)."""
    models = {e.model_checksum for top in project.entries for e in _walk(top) if e.result is not None}
    if not models or (bundle is not None and models == {bundle.checksum}):
        return ""
    made = project.model.describe() if project.model is not None and project.model.checksum in models else \
        ", ".join(sorted(m[:8] for m in models))
    where = f" (it was at {project.model.path})" if project.model is not None and project.model.path else ""
    if bundle is None:
        return (f"This project's candidates were drawn with the model {made}{where}, and no model is loaded. They "
                "are shown as they were saved; load a model to run spectra again.")
    return (f"This project's candidates were drawn with the model {made}{where}; the loaded model is "
            f"{bundle.name} [{bundle.checksum[:8]}]. They are shown as they were saved; running a spectrum again "
            f"draws new ones with {bundle.name}. To go on with the project's model, choose it with "
            "Model ▸ Open Model Folder… and open the project again.")


def _walk(e):
    """An entry of a project and those nested in it (project entries; also plain objects with ``result``)."""
    walk = getattr(e, "walk", None)
    return walk() if walk is not None else (e,)


def sources_note(sources: Sequence[tuple[str, str]]) -> str:
    """One sentence about the source files that are not here as they were (the project holds their spectra)."""
    missing = [Path(p).name for p, state in sources if state == SOURCE_MISSING]
    changed = [Path(p).name for p, state in sources if state == SOURCE_CHANGED]
    parts = []
    if missing:
        parts.append(f"{_names(missing)} {'is' if len(missing) == 1 else 'are'} not at {'its' if len(missing) == 1 else 'their'} "
                     "saved place on this machine")
    if changed:
        parts.append(f"{_names(changed)} changed since the project was saved")
    if not parts:
        return ""
    return "; ".join(parts) + ". The project holds its own copy of the spectra, which is what is shown."


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def same_sources(sources: Sequence[tuple[str, str]]) -> list[str]:
    """The source files that are here unchanged (opening them again would list their records twice)."""
    return [p for p, state in sources if state == SOURCE_SAME]
