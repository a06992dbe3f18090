"""Projects: a whole session of work in one versioned file (``.msgpt``) that later versions still read.

A project holds the spectra themselves, with the formula, ion type and precursor m/z set by hand, the
query parameters, each spectrum's candidates with their scores (and the samples they were ranked from),
the selection and the user's notes; for an LC-MS run, each precursor feature whole (its scans, RT range and MS1
evidence), the formula runs of a spectrum run for its best formula candidates (inside it, with those candidates) and
the run's m/z recalibration. The app saves and opens projects (File ▸ Save Project) and autosaves
one into :func:`autosave_dir` for recovery after a crash; nothing here imports Qt.

This module holds the document (the classes below), the source files' checks, writing and the autosave folder;
reading a project file, and upgrading an older one, is :mod:`engine.files.project_read`; the numeric side tables
(below) are gathered by :mod:`engine.files.project_arrays`.

**Spectra are embedded.** A project opens on a colleague's machine, or after its spectra files moved:
every listed record (peaks, precursor, metadata; a skipped record with its reason and the peaks it kept)
is in the file. The files they came from are recorded too (path, size, SHA-256), to say where the
spectra came from and whether a file on this machine is still the same one (:func:`check_source`).

**Layout** (a ZIP archive; ``unzip -p work.msgpt project.json | python -m json.tool`` shows the document)::

    project.json          the document, UTF-8 JSON (below)
    samples.json          the drawn samples of each result: {"<entry>": [[i, j, "SAFE string"], ...]}
    arrays/<name>.npy     numbers as numpy .npy files (no pickles: np.load(..., allow_pickle=False))

``project.json`` (:data:`FORMAT` ``"msgpt-project"``, :data:`FORMAT_VERSION` 2)::

    format, format_version   "msgpt-project", 2
    saved_at, saved_by       ISO 8601 time (UTC); "msgpt <version>"
    model                    {"name", "checksum", "path"} of the model bundle in use, or null
    params                   the query parameters (engine.elucidation.pipeline.QueryParams fields)
    files                    [{"path", "size", "sha256"}]: the files the spectra were read from
    selection                {"current": entry or null, "selected": [entry, ...], "candidate": InChIKey-14 or null}
    app                      what the app that wrote it keeps besides (an autosave's project path, ...)
    libraries                [{"name", "kind", "checksum"}]: the structure / spectral libraries the candidates
                             were ranked with (absent in older files: none)
    recalibrations           [{"file", "settings", "recalibration": RECALIBRATION}]: the m/z recalibration measured
                             for each LC-MS run (file), with the formula settings it was measured under (version 2)
    entries                  one per listed record (a precursor feature of an LC-MS run is one):
      status, reason           "done", "not run", "skipped", "failed", "cancelled"; why (skipped, failed)
      notes                    the user's notes on this spectrum
      spectrum                 SPECTRUM as it runs (with what the user set), or null (a skipped record)
      original                 SPECTRUM as read from its file; "spectrum" when the same; null when none
      skipped                  {"source", "index", "spectrum_id", "reason", "peaks", "retention_time",
                               "polarity"}: the reader skipped this record; else null
      model_checksum           the model the result was drawn with
      result                   RESULT or null
      feature                  FEATURE: the entry is a precursor feature of an LC-MS run (version 2; absent else)
      formula_runs             [ENTRY, ...]: the formulas Run took for a spectrum without one, best first, each an
                               entry with its spectrum (that formula) and result, and "candidate" (version 2;
                               version 1 listed them as entries after their own, which reading nests again)
      candidate                FORMULA (a formula run: the formula candidate it ran for), or absent
      scan_entries             {"<i>": ENTRY}: scans of the feature (position in FEATURE.scans) that have a state of
                               their own (run, notes, a formula set); absent when none

    SPECTRUM  {"id", "precursor_mz", "adduct", "charge", "polarity", "formula", "smiles", "inchikey",
               "retention_time" (s), "metadata", "source", "index", "peaks" (row of the peak arrays)}
    FEATURE   {"id", "index", "precursor_mz", "rt_min", "rt_max", "scans" ([SPECTRUM, ...], by retention time),
               "ms1" (MS1 or null), "group" (GROUP; absent outside a compound group and in older files)}; its
               consensus spectrum is the entry's "original"
    GROUP     the feature's compound group (engine.spectra.adduct_groups.CompoundGroup): {"id", "neutral_mass",
               "members": [{"feature_id", "ion_type", "precursor_mz", "apex_rt"}, ...], "evidence": [PairEvidence's
               fields, ...]}; reading links each member's partners (the other entries' features of its run and
               group). What the group decided is not a key: its lead is the member whose formula runs' spectra say
               "group_lead" (their own feature id) in their metadata, and the app shows its answer on the others
    MS1       {"scan_id", "retention_time", "precursor_mz", "precursor_intensity", "n_scans", "peaks" (row of the peak
               arrays: the survey peaks around the precursor)}
    FORMULA   engine.formulas.candidates.FormulaCandidate's fields ("terms" an object)
    RECALIBRATION  engine.formulas.recalibration.Recalibration's fields, its points a row of the recal_points arrays
    RESULT    {"spectrum" ("spectrum": the entry's; else a SPECTRUM), "params", "n_samples", "n_valid",
               "n_formula_consistent", "n_distinct_queries", "mean_query_bits", "fidelity",
               "reference_inchikey14", "reference_rank", "new_samples", "seconds", "confidence" (or null;
               absent in older files), "level_2b" (true, only when set: a suspect rank 1 at level 2b),
               "thresholds" (row),
               "posterior" (row or null), "candidate_bits" (row of the first candidate),
               "candidates": [{"rank", "smiles", "inchikey", "inchikey14", "formula", "count", "frequency",
                               "posterior_similarity", "fingerprint_score", "score", "origin", "library",
                               "library_id", "compound_name", "suspect", "spectral", "fragment_score",
                               "analog_score", "analog_reference", "edited_from"},
                               ...]}  ("origin" to "spectral" since libraries; older projects read as de
                               novo. "suspect" only when true; "spectral": the reference match's fields,
                               engine.elucidation.ranking.SpectralEvidence, only when there is one;
                               "fragment_score" only when the forward model scored the candidate;
                               "analog_score" and "analog_reference" only when analogs scored it;
                               "edited_from" only for a structure an isomer edit made)

Numbers that are not finite are written ``"nan"``, ``"inf"``, ``"-inf"``. The arrays are rows of
ragged tables (row r is ``values[offsets[r]:offsets[r + 1]]``): ``peaks_offsets``, ``peaks_mz``,
``peaks_intensity`` (float64; records with the same peaks share a row); ``thresholds_offsets``,
``thresholds`` (float64, the band t_1..t_M of each result); ``candidate_bits_offsets``,
``candidate_bits`` (int32, each candidate's Morgan active bits); ``recal_points_offsets``, ``recal_points_mz``,
``recal_points_ppm`` (float64), ``recal_points_precursor`` (bool: the points of each recalibration); and
``posteriors`` (float32, one row of F bit probabilities per result).

``samples.json`` keys an entry by its position: ``"3"`` for the fourth listed entry, ``"3.f0"`` for its first formula
run, ``"3.s1"`` for its second scan (and ``"3.s1.f0"`` for that scan's first formula run).

**Versions.** A reader reads every version up to its own, upgrading older documents step by step
(:data:`engine.files.project_read._UPGRADES`), and refuses a newer one, saying which version wrote it. A
change that an older reader would misread raises :data:`FORMAT_VERSION`; keys an older reader does not know
are ignored.
Files are written atomically: a failed or cancelled save leaves an earlier file as it was.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import zipfile
from collections.abc import Generator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from engine import __version__
from engine.elucidation.pipeline import QueryParams, SpectrumResult
from engine.errors import ConfigError, OutputError
from engine.files.project_arrays import Arrays as _Arrays
from engine.files.project_arrays import number as _num
from engine.files.project_groups import group_json
from engine.formulas.candidates import FormulaCandidate
from engine.formulas.recalibration import Recalibration
from engine.paths import data_dir
from engine.progress import CancelFn, check_cancel, run_to_end
from engine.spectra.features import Feature
from engine.spectra.spectrum import SkippedRecord, Spectrum

FORMAT = "msgpt-project"
FORMAT_VERSION = 2  # 2: features (scans, MS1 evidence), formula runs nested in their entry, recalibrations
PROJECT_SUFFIX = ".msgpt"
DOCUMENT = "project.json"
SAMPLES = "samples.json"
ARRAYS = "arrays/"
SAME = "spectrum"  # "original" / a result's "spectrum": the entry's own spectrum
COMPRESS_LEVEL = 1  # zlib: posteriors hardly compress at any level; 1 writes several times faster than 6


SPECTRUM_KEYS = ("id", "precursor_mz", "adduct", "charge", "polarity", "formula", "smiles", "inchikey",
                 "retention_time", "metadata", "source", "index")
CANDIDATE_KEYS = ("rank", "smiles", "inchikey", "inchikey14", "formula", "count", "frequency",
                  "posterior_similarity", "fingerprint_score", "score", "origin", "library", "library_id",
                  "compound_name")
RESULT_KEYS = ("n_samples", "n_valid", "n_formula_consistent", "n_distinct_queries", "mean_query_bits",
               "fidelity", "reference_inchikey14", "reference_rank", "new_samples", "seconds")
FEATURE_KEYS = ("id", "index", "precursor_mz", "rt_min", "rt_max")
MS1_KEYS = ("scan_id", "retention_time", "precursor_mz", "precursor_intensity", "n_scans")
RECALIBRATION_KEYS = ("offset_ppm", "slope_ppm", "scatter_ppm", "n_features", "applied", "source", "note", "min_ppm",
                      "min_scatter_ppm")


# -- what a project holds --------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelRef:
    """The model bundle a project's candidates were drawn with."""

    name: str
    checksum: str
    path: str = ""

    @classmethod
    def of(cls, bundle) -> ModelRef:
        return cls(bundle.name, bundle.checksum, str(bundle.path))

    def describe(self) -> str:
        return f"{self.name} [{self.checksum[:8]}]"


@dataclass(frozen=True)
class LibraryRef:
    """A library of known compounds the project's candidates were ranked with (``kind``: "structure" or
    "spectral"; ``checksum``: the SHA-256 of its source file)."""

    name: str
    kind: str
    checksum: str

    def describe(self) -> str:
        return f"{self.name} ({self.kind} library) [{self.checksum[:8]}]"


@dataclass(frozen=True)
class SourceFile:
    """A spectra file the project's records were read from (the records themselves are in the project)."""

    path: str
    size: int | None = None
    sha256: str | None = None

    @property
    def name(self) -> str:
        return Path(self.path).name


SOURCE_SAME, SOURCE_CHANGED, SOURCE_MISSING, SOURCE_UNCHECKED = "same", "changed", "missing", "unchecked"


@dataclass(frozen=True)
class Selection:
    """Which entries were selected (their positions in the project), the current one, and the candidate
    selected in it (first InChIKey block)."""

    current: int | None = None
    selected: tuple[int, ...] = ()
    candidate: str | None = None


@dataclass(eq=False)
class ProjectEntry:
    """One listed record: as read, as the user set it, its result and notes."""

    spectrum: Spectrum | None  # as it runs (None: a record the reader skipped and nobody completed)
    original: Spectrum | None = None  # as read from the file (None: the reader skipped it)
    skipped: SkippedRecord | None = None
    status: str = "not run"
    reason: str = ""
    notes: str = ""
    result: SpectrumResult | None = None
    model_checksum: str | None = None  # the model the result was drawn with
    samples: tuple[tuple[int, int, str], ...] = ()  # the result's drawn samples (i, j, SAFE string)
    feature: Feature | None = None  # a precursor feature of an LC-MS run (its consensus spectrum is `original`)
    formula_runs: list[ProjectEntry] = field(default_factory=list)  # the formulas Run took for it, best first
    candidate: FormulaCandidate | None = None  # a formula run: the formula candidate it ran for
    scan_entries: dict[int, ProjectEntry] = field(default_factory=dict)  # the feature's scans that have a state

    def walk(self):
        """This entry, its scans' and its formula runs (every entry that may hold a result)."""
        yield self
        for e in self.scan_entries.values():
            yield from e.walk()
        for e in self.formula_runs:
            yield from e.walk()

    @property
    def has_results(self) -> bool:
        return any(e.result is not None for e in self.walk())

    def __post_init__(self):
        if self.spectrum is None and self.skipped is None:
            raise ConfigError("A project entry needs a `spectrum` or a `skipped` record; it has neither.")
        if not isinstance(self.notes, str):
            raise ConfigError(f"`notes` must be text, got {type(self.notes).__name__}.")


@dataclass(frozen=True, eq=False)
class RunRecalibration:
    """The m/z recalibration measured for one LC-MS run (``file``), under the formula settings ``settings`` (what
    the app keys it by: JSON values)."""

    file: str
    recalibration: Recalibration
    settings: dict = field(default_factory=dict)


@dataclass(eq=False)
class Project:
    """A project's content (see the module notes); :func:`save_project` /
    :func:`~engine.files.project_read.load_project`."""

    entries: list[ProjectEntry] = field(default_factory=list)
    params: QueryParams = field(default_factory=QueryParams)
    model: ModelRef | None = None
    files: list[SourceFile] = field(default_factory=list)
    selection: Selection = field(default_factory=Selection)
    app: dict = field(default_factory=dict)
    libraries: list[LibraryRef] = field(default_factory=list)  # the libraries the candidates were ranked with
    recalibrations: list[RunRecalibration] = field(default_factory=list)  # of the LC-MS runs, as measured
    saved_at: str = ""
    saved_by: str = ""
    format_version: int = FORMAT_VERSION  # of the file it was read from

    def summary(self) -> str:
        n = len(self.entries)
        done = sum(e.has_results for e in self.entries)
        notes = sum(bool(e.notes.strip()) for e in self.entries)
        text = f"{n} record{'s' if n != 1 else ''}, {done} with candidates"
        return text + (f", {notes} with notes" if notes else "")


@dataclass(frozen=True)
class ProjectProgress:
    done: int
    total: int
    text: str


# -- files the spectra came from ------------------------------------------------------------------
def file_sha256(path: str | os.PathLike, cancel: CancelFn | None = None, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            check_cancel(cancel)
            h.update(block)
    return h.hexdigest()


def describe_source(path: str | os.PathLike, cache: dict | None = None, cancel: CancelFn | None = None) -> SourceFile:
    """Path, size and SHA-256 of a spectra file (a file that is gone is recorded by its path alone).

    ``cache`` (a dict kept by the caller) remembers checksums by path, size and modification time, so
    that saving again (an autosave every few minutes) does not read large files again.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return SourceFile(str(path))
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if cache is not None and key in cache:
        return SourceFile(str(path), st.st_size, cache[key])
    try:
        digest = file_sha256(p, cancel)
    except OSError:
        return SourceFile(str(path), st.st_size)
    if cache is not None:
        cache[key] = digest
    return SourceFile(str(path), st.st_size, digest)


def check_source(source: SourceFile, cache: dict | None = None, cancel: CancelFn | None = None) -> str:
    """Whether the file at the recorded path is the one the project recorded: :data:`SOURCE_SAME`,
    :data:`SOURCE_CHANGED`, :data:`SOURCE_MISSING`, or :data:`SOURCE_UNCHECKED` (no checksum recorded)."""
    if not Path(source.path).is_file():
        return SOURCE_MISSING
    if not source.sha256:
        return SOURCE_UNCHECKED
    here = describe_source(source.path, cache, cancel)
    return SOURCE_SAME if here.sha256 == source.sha256 else SOURCE_CHANGED


# -- writing ----------------------------------------------------------------------------------------
def _spectrum_json(s: Spectrum, arrays: _Arrays) -> dict:
    d = {k: getattr(s, k) for k in SPECTRUM_KEYS}
    d["precursor_mz"] = _num(s.precursor_mz)
    d["metadata"] = dict(s.metadata)
    d["peaks"] = arrays.peaks(s.mz, s.intensity)
    return d


def _skipped_json(r: SkippedRecord, arrays: _Arrays) -> dict:
    return {"source": r.source, "index": int(r.index), "spectrum_id": r.spectrum_id, "reason": r.reason,
            "peaks": arrays.peaks(r.mz, r.intensity) if r.has_peaks else None,
            "retention_time": r.retention_time, "polarity": r.polarity}


def _params_json(p: QueryParams) -> dict:
    return asdict(p)


def _result_json(r: SpectrumResult, entry_spectrum: Spectrum | None, arrays: _Arrays) -> dict:
    if r.plan is not None:
        raise ConfigError(f"The result of {r.spectrum.id!r} was drawn from a query plan, not a band: a project "
                          "stores band results only (those the app makes).")
    same = entry_spectrum is not None and (r.spectrum is entry_spectrum or r.spectrum == entry_spectrum)
    d = {"spectrum": SAME if same else _spectrum_json(r.spectrum, arrays), "params": _params_json(r.params)}
    for k in RESULT_KEYS:
        v = getattr(r, k)
        d[k] = _num(v) if isinstance(v, float) else v
    d["confidence"] = None if r.confidence is None else _num(r.confidence)
    if r.level_2b:
        d["level_2b"] = True
    d["thresholds"] = arrays.thresholds(r.thresholds)
    d["posterior"] = arrays.posterior(r.posterior) if r.posterior is not None else None
    d["candidate_bits"] = len(arrays.rows["candidate_bits"][0])
    rows = []
    for c in r.candidates:
        arrays.candidate_bits(c.bits)
        row = {k: getattr(c, k) for k in CANDIDATE_KEYS}
        for k in ("frequency", "posterior_similarity", "fingerprint_score", "score"):
            row[k] = _num(row[k])
        if c.suspect:
            row["suspect"] = True
        if math.isfinite(c.fragment_score):
            row["fragment_score"] = c.fragment_score
        if math.isfinite(c.analog_score):
            row["analog_score"] = c.analog_score
            row["analog_reference"] = c.analog_reference
        if c.edited_from:
            row["edited_from"] = c.edited_from
        if c.spectral is not None:  # the reference match that found it (level 2a when identified)
            row["spectral"] = {**asdict(c.spectral), "similarity": _num(c.spectral.similarity)}
        rows.append(row)
    d["candidates"] = rows
    return d


def _ms1_json(m, arrays: _Arrays) -> dict:
    d = {k: getattr(m, k) for k in MS1_KEYS}
    d["precursor_mz"], d["precursor_intensity"] = _num(m.precursor_mz), _num(m.precursor_intensity)
    d["retention_time"] = _num(m.retention_time)
    d["n_scans"] = int(m.n_scans)
    d["peaks"] = arrays.peaks(m.mz, m.intensity)
    return d


def _feature_json(f: Feature, arrays: _Arrays) -> dict:
    d = {k: getattr(f, k) for k in FEATURE_KEYS}
    d["index"] = int(f.index)
    for k in ("precursor_mz", "rt_min", "rt_max"):
        d[k] = _num(d[k])
    d["scans"] = [_spectrum_json(s, arrays) for s in f.scans]
    d["ms1"] = _ms1_json(f.ms1, arrays) if f.ms1 is not None else None
    if f.group is not None:
        d["group"] = group_json(f.group)
    return d


def _candidate_json(c: FormulaCandidate) -> dict:
    d = asdict(c)
    for k, v in d.items():
        if isinstance(v, float):
            d[k] = _num(v)
    d["terms"] = {k: _num(v) for k, v in c.terms.items()}
    return d


def _recalibration_json(r: RunRecalibration, arrays: _Arrays) -> dict:
    rc = r.recalibration
    d = {k: getattr(rc, k) for k in RECALIBRATION_KEYS}
    for k in ("offset_ppm", "slope_ppm", "scatter_ppm", "min_ppm", "min_scatter_ppm"):
        d[k] = _num(d[k])
    d["n_features"] = int(rc.n_features)
    d["applied"] = bool(rc.applied)
    d["mz_range"] = [_num(x) for x in rc.mz_range]
    d["points"] = arrays.recal_points(rc.points_mz, rc.points_ppm, rc.points_precursor)
    return {"file": r.file, "settings": r.settings, "recalibration": d}


def _entry_json(e: ProjectEntry, arrays: _Arrays, key: str, samples: dict) -> dict:
    """An entry (and those nested in it); its samples go into ``samples`` under ``key`` (see the module notes)."""
    spectrum = _spectrum_json(e.spectrum, arrays) if e.spectrum is not None else None
    if e.original is None:
        original = None
    elif e.spectrum is not None and (e.original is e.spectrum or e.original == e.spectrum):
        original = SAME
    else:
        original = _spectrum_json(e.original, arrays)
    d = {
        "status": e.status, "reason": e.reason, "notes": e.notes,
        "spectrum": spectrum, "original": original,
        "skipped": _skipped_json(e.skipped, arrays) if e.skipped is not None else None,
        "model_checksum": e.model_checksum,
        "result": _result_json(e.result, e.spectrum, arrays) if e.result is not None else None,
    }
    if e.samples and e.result is not None:
        samples[key] = e.samples  # (i, j, SAFE) tuples: JSON arrays
    if e.feature is not None:
        d["feature"] = _feature_json(e.feature, arrays)
    if e.candidate is not None:
        d["candidate"] = _candidate_json(e.candidate)
    if e.scan_entries:
        d["scan_entries"] = {str(i): _entry_json(s, arrays, f"{key}.s{i}", samples)
                             for i, s in sorted(e.scan_entries.items())}
    if e.formula_runs:
        d["formula_runs"] = [_entry_json(r, arrays, f"{key}.f{j}", samples) for j, r in enumerate(e.formula_runs)]
    return d


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _hidden_temp(path: Path) -> tuple[int, Path]:
    from engine.files.export import _create_hidden_temp

    return _create_hidden_temp(path.parent if str(path.parent) else Path("."), path.name)


def write_project(path: str | os.PathLike, project: Project,
                  cancel: CancelFn | None = None) -> Generator[ProjectProgress, None, int]:
    """Write ``project`` to ``path`` (a ``.msgpt`` file) atomically, yielding progress; returns its size in
    bytes. Cancelling (or an error) leaves an earlier file at ``path`` as it was."""
    path = Path(path)
    if path.suffix.lower() != PROJECT_SUFFIX:
        raise ConfigError(f"Cannot save a project as {str(path)!r}: use a file name ending in {PROJECT_SUFFIX}.")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ConfigError(f"Cannot save {path}: folder {directory} does not exist.")
    n = len(project.entries)
    arrays = _Arrays()
    entries, samples = [], {}
    for k, e in enumerate(project.entries):
        if k % 200 == 0:
            check_cancel(cancel)
            yield ProjectProgress(k, n, f"Saving {path.name}: {k}/{n} records")
        entries.append(_entry_json(e, arrays, str(k), samples))
    sel = project.selection
    doc = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "saved_at": project.saved_at or _now(), "saved_by": project.saved_by or f"msgpt {__version__}",
        "model": asdict(project.model) if project.model is not None else None,
        "params": _params_json(project.params),
        "files": [asdict(f) for f in project.files],
        "selection": {"current": sel.current, "selected": list(sel.selected), "candidate": sel.candidate},
        "app": project.app,
        "libraries": [asdict(ref) for ref in project.libraries],
        "recalibrations": [_recalibration_json(r, arrays) for r in project.recalibrations],
        "entries": entries,
    }
    tables = arrays.finish()
    check_cancel(cancel)
    yield ProjectProgress(n, n, f"Saving {path.name}: writing")
    kept = "An earlier file of that name, if any, is unchanged."
    try:
        fd, tmp = _hidden_temp(path)
    except OSError as e:
        raise OutputError.from_os_error(path, e, kept) from e
    try:
        with os.fdopen(fd, "wb") as fh:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL) as zf:
                zf.writestr(DOCUMENT, json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
                if samples:
                    zf.writestr(SAMPLES, json.dumps(samples, ensure_ascii=False, separators=(",", ":")))
                for name, arr in tables.items():
                    check_cancel(cancel)
                    with zf.open(f"{ARRAYS}{name}.npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
        size = tmp.stat().st_size
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OutputError.from_os_error(path, e, kept) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    from engine.files.export import fsync_directory

    fsync_directory(directory)
    return size


def save_project(path: str | os.PathLike, project: Project) -> int:
    """:func:`write_project` without progress; returns the file's size in bytes."""
    return run_to_end(write_project(path, project))


# -- autosave ---------------------------------------------------------------------------------------
def autosave_dir() -> Path:
    """Where the app autosaves its document (in the user data folder; ``MSGPT_HOME`` moves it)."""
    return data_dir() / "autosave"


def autosave_files(folder: Path | None = None) -> list[Path]:
    """The autosaved projects in ``folder`` (default :func:`autosave_dir`), newest first."""
    folder = folder or autosave_dir()
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_file() and p.suffix == PROJECT_SUFFIX]
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)
