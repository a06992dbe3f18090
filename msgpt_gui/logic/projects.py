"""The app's document as a project, without Qt: entries to :class:`engine.files.project.Project` and back, and the
jobs that save and open project files in the background (generators of progress, like
:mod:`msgpt_gui.logic.jobs`).

What a project keeps of an entry: the spectrum as read and as the user set it, the last complete result
(candidates with their scores; a ranking still being drawn is not saved, its earlier result is), the
samples it was ranked from, the status and the user's notes. A precursor feature of an LC-MS run is kept as
its consensus spectrum (not its scans or its MS1 evidence); the formula runs of an entry that ran for its
best formula candidates are kept as entries of their own after it (the spectrum with that formula, its
candidates), so a reopened project lists them one by one. The project records the libraries the results were
ranked with (name, kind, checksum); a reopened result counts as ranked with all of them. Sessions are not saved: the next run of a
reopened entry gets one back with its samples (:meth:`~msgpt_gui.logic.entries.SpectrumEntry.new_session`)
when the same model is loaded, so re-tuning draws only what is missing.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
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
    Selection,
    check_source,
    describe_source,
    write_project,
)
from engine.files.project_read import read_project
from engine.model.bundle import bundle_checksum
from engine.paths import default_model_dir
from engine.progress import CancelFn, check_cancel

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


def snapshot(entries: Sequence[SpectrumEntry], params: QueryParams, bundle=None,
             selection: Selection = Selection(), app: dict | None = None) -> Project:
    """The document as a :class:`Project` (main thread: it reads the entries; what it holds is immutable, so
    a worker thread may write it while the app goes on). ``bundle``: the loaded model (its name and checksum
    are recorded); the source files are filled in by :func:`save_job`."""
    out = []
    position = {}  # index in ``entries`` -> index in the project (formula runs come after their entry)
    for i, e in enumerate(entries):
        status, reason = _saved_status(e)
        if e.formula_runs and status == Status.DONE:
            status = Status.NOT_RUN  # its candidates are those of its formula runs, which follow it
        position[i] = len(out)
        out.append(ProjectEntry(e.spectrum, e.original, e.skipped, status=status, reason=reason, notes=e.user_notes,
                                result=e.result, model_checksum=e.model_checksum if e.result is not None else None,
                                samples=_samples(e)))
        for run in e.formula_runs:
            if run.result is not None:
                out.append(ProjectEntry(run.spectrum, e.original, None, status=Status.DONE, result=run.result,
                                        model_checksum=run.model_checksum, samples=_samples(run)))
    if len(out) != len(entries):
        selection = replace(selection, current=None if selection.current is None else position[selection.current],
                            selected=tuple(position[i] for i in selection.selected))
    return Project(entries=out, params=params, model=ModelRef.of(bundle) if bundle is not None else None,
                   selection=selection, app=dict(app or {}), libraries=used_libraries(entries))


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
    for e in project.entries:
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
    return ProjectSaved(str(path), size, len(project.entries), sum(e.result is not None for e in project.entries))


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


def entries_from_project(project: Project, keys: Sequence[int]) -> list[SpectrumEntry]:
    """The project's entries as the app's (one key each)."""
    out = []
    for key, p in zip(keys, project.entries, strict=True):
        e = SpectrumEntry(key, p.spectrum, skipped=p.skipped, original=p.original, status=p.status, reason=p.reason,
                          result=p.result, model_checksum=p.model_checksum if p.result is not None else None,
                          user_notes=p.notes, drawn_samples=p.samples,
                          library_refs=tuple(project.libraries) if p.result is not None else ())
        if e.status in (Status.RUNNING, Status.QUEUED):  # not written by this app; said for safety
            e.status = Status.DONE if e.result is not None else Status.NOT_RUN
        if e.spectrum is None and e.status != Status.SKIPPED:
            e.status = Status.SKIPPED
            e.reason = e.reason or (e.skipped.reason if e.skipped is not None else "")
        out.append(e)
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
    models = {e.model_checksum for e in project.entries if e.result is not None}
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
