"""Projects: a whole session of work in one versioned file (``.msgpt``) that later versions still read.

A project holds the spectra themselves, with the formula, ion type and precursor m/z set by hand, the
query parameters, each spectrum's candidates with their scores (and the samples they were ranked from),
the selection and the user's notes. The app saves and opens projects (File ▸ Save Project) and autosaves
one into :func:`autosave_dir` for recovery after a crash; nothing here imports Qt.

**Spectra are embedded.** A project opens on a colleague's machine, or after its spectra files moved:
every listed record (peaks, precursor, metadata; a skipped record with its reason and the peaks it kept)
is in the file. The files they came from are recorded too (path, size, SHA-256), to say where the
spectra came from and whether a file on this machine is still the same one (:func:`check_source`).

**Layout** (a ZIP archive; ``unzip -p work.msgpt project.json | python -m json.tool`` shows the document)::

    project.json          the document, UTF-8 JSON (below)
    samples.json          the drawn samples of each result: {"<entry>": [[i, j, "SAFE string"], ...]}
    arrays/<name>.npy     numbers as numpy .npy files (no pickles: np.load(..., allow_pickle=False))

``project.json`` (:data:`FORMAT` ``"msgpt-project"``, :data:`FORMAT_VERSION` 1)::

    format, format_version   "msgpt-project", 1
    saved_at, saved_by       ISO 8601 time (UTC); "msgpt <version>"
    model                    {"name", "checksum", "path"} of the model bundle in use, or null
    params                   the query parameters (engine.elucidation.pipeline.QueryParams fields)
    files                    [{"path", "size", "sha256"}]: the files the spectra were read from
    selection                {"current": entry or null, "selected": [entry, ...], "candidate": InChIKey-14 or null}
    app                      what the app that wrote it keeps besides (an autosave's project path, ...)
    entries                  one per listed record:
      status, reason           "done", "not run", "skipped", "failed", "cancelled"; why (skipped, failed)
      notes                    the user's notes on this spectrum
      spectrum                 SPECTRUM as it runs (with what the user set), or null (a skipped record)
      original                 SPECTRUM as read from its file; "spectrum" when the same; null when none
      skipped                  {"source", "index", "spectrum_id", "reason", "peaks", "retention_time",
                               "polarity"}: the reader skipped this record; else null
      model_checksum           the model the result was drawn with
      result                   RESULT or null

    SPECTRUM  {"id", "precursor_mz", "adduct", "charge", "polarity", "formula", "smiles", "inchikey",
               "retention_time" (s), "metadata", "source", "index", "peaks" (row of the peak arrays)}
    RESULT    {"spectrum" ("spectrum": the entry's; else a SPECTRUM), "params", "n_samples", "n_valid",
               "n_formula_consistent", "n_distinct_queries", "mean_query_bits", "fidelity",
               "reference_inchikey14", "reference_rank", "new_samples", "seconds", "confidence" (or null;
               absent in older files), "thresholds" (row),
               "posterior" (row or null), "candidate_bits" (row of the first candidate),
               "candidates": [{"rank", "smiles", "inchikey", "inchikey14", "formula", "count", "frequency",
                               "posterior_similarity", "fingerprint_score", "score"}, ...]}

Numbers that are not finite are written ``"nan"``, ``"inf"``, ``"-inf"``. The arrays are rows of
ragged tables (row r is ``values[offsets[r]:offsets[r + 1]]``): ``peaks_offsets``, ``peaks_mz``,
``peaks_intensity`` (float64; records with the same peaks share a row); ``thresholds_offsets``,
``thresholds`` (float64, the band t_1..t_M of each result); ``candidate_bits_offsets``,
``candidate_bits`` (int32, each candidate's Morgan active bits); and ``posteriors`` (float32, one row
of F bit probabilities per result).

**Versions.** A reader reads every version up to its own, upgrading older documents step by step
(:data:`_UPGRADES`), and refuses a newer one, saying which version wrote it. A change that an older
reader would misread raises :data:`FORMAT_VERSION`; keys an older reader does not know are ignored.
Files are written atomically: a failed or cancelled save leaves an earlier file as it was.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import math
import os
import zipfile
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from engine import __version__
from engine.elucidation.pipeline import QueryParams, SpectrumResult
from engine.elucidation.ranking import Candidate
from engine.errors import ConfigError, InputFileError, MsgptError, OutputError
from engine.paths import data_dir
from engine.progress import CancelFn, check_cancel, run_to_end
from engine.spectra.spectrum import SkippedRecord, Spectrum

log = logging.getLogger(__name__)

FORMAT = "msgpt-project"
FORMAT_VERSION = 1
PROJECT_SUFFIX = ".msgpt"
DOCUMENT = "project.json"
SAMPLES = "samples.json"
ARRAYS = "arrays/"
SAME = "spectrum"  # "original" / a result's "spectrum": the entry's own spectrum
COMPRESS_LEVEL = 1  # zlib: posteriors hardly compress at any level; 1 writes several times faster than 6


_SPECTRUM_KEYS = ("id", "precursor_mz", "adduct", "charge", "polarity", "formula", "smiles", "inchikey",
                  "retention_time", "metadata", "source", "index")
_CANDIDATE_KEYS = ("rank", "smiles", "inchikey", "inchikey14", "formula", "count", "frequency",
                   "posterior_similarity", "fingerprint_score", "score")
_RESULT_KEYS = ("n_samples", "n_valid", "n_formula_consistent", "n_distinct_queries", "mean_query_bits",
                "fidelity", "reference_inchikey14", "reference_rank", "new_samples", "seconds")
_RAGGED = {"peaks": ("peaks_mz", "peaks_intensity"), "thresholds": ("thresholds",),
           "candidate_bits": ("candidate_bits",)}


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

    def __post_init__(self):
        if self.spectrum is None and self.skipped is None:
            raise ConfigError("A project entry needs a `spectrum` or a `skipped` record; it has neither.")
        if not isinstance(self.notes, str):
            raise ConfigError(f"`notes` must be text, got {type(self.notes).__name__}.")


@dataclass(eq=False)
class Project:
    """A project's content (see the module notes); :func:`save_project` / :func:`load_project`."""

    entries: list[ProjectEntry] = field(default_factory=list)
    params: QueryParams = field(default_factory=QueryParams)
    model: ModelRef | None = None
    files: list[SourceFile] = field(default_factory=list)
    selection: Selection = field(default_factory=Selection)
    app: dict = field(default_factory=dict)
    saved_at: str = ""
    saved_by: str = ""
    format_version: int = FORMAT_VERSION  # of the file it was read from

    def summary(self) -> str:
        n = len(self.entries)
        done = sum(e.result is not None for e in self.entries)
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
def _num(x) -> float | str | None:
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _float(x, where: str) -> float:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{where} must be a number, got {x!r}")
    return float(x)


class _Arrays:
    """The numeric side tables of a project being written."""

    def __init__(self):
        self.rows: dict[str, list[list[np.ndarray]]] = {k: [[] for _ in v] for k, v in _RAGGED.items()}
        self.posteriors: list[np.ndarray] = []
        self._peak_rows: dict[bytes, int] = {}

    def _add(self, table: str, *values: np.ndarray) -> int:
        for column, v in zip(self.rows[table], values, strict=True):
            column.append(v)
        return len(self.rows[table][0]) - 1

    def peaks(self, mz: np.ndarray, intensity: np.ndarray) -> int:
        mz, intensity = np.asarray(mz, np.float64), np.asarray(intensity, np.float64)
        key = hashlib.blake2b(mz.tobytes() + b"|" + intensity.tobytes(), digest_size=16).digest()
        if key not in self._peak_rows:
            self._peak_rows[key] = self._add("peaks", mz, intensity)
        return self._peak_rows[key]

    def thresholds(self, t: np.ndarray) -> int:
        return self._add("thresholds", np.asarray(t, np.float64).ravel())

    def candidate_bits(self, bits: np.ndarray) -> int:
        return self._add("candidate_bits", np.asarray(bits, np.int32).ravel())

    def posterior(self, p: np.ndarray) -> int:
        p = np.asarray(p, np.float32).ravel()
        if self.posteriors and p.size != self.posteriors[0].size:
            raise ConfigError(f"A posterior of {p.size} bits among ones of {self.posteriors[0].size}: one project "
                              "holds the posteriors of one fingerprint size.")
        self.posteriors.append(p)
        return len(self.posteriors) - 1

    def finish(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        dtypes = {"peaks_mz": np.float64, "peaks_intensity": np.float64, "thresholds": np.float64,
                  "candidate_bits": np.int32}
        for table, names in _RAGGED.items():
            columns = self.rows[table]
            lengths = [len(v) for v in columns[0]]
            out[f"{table}_offsets"] = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
            for name, column in zip(names, columns):
                out[name] = np.concatenate(column).astype(dtypes[name]) if column else np.zeros(0, dtypes[name])
        n_bits = self.posteriors[0].size if self.posteriors else 0
        out["posteriors"] = np.stack(self.posteriors) if self.posteriors else np.zeros((0, n_bits), np.float32)
        return out


def _spectrum_json(s: Spectrum, arrays: _Arrays) -> dict:
    d = {k: getattr(s, k) for k in _SPECTRUM_KEYS}
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
    for k in _RESULT_KEYS:
        v = getattr(r, k)
        d[k] = _num(v) if isinstance(v, float) else v
    d["confidence"] = None if r.confidence is None else _num(r.confidence)
    d["thresholds"] = arrays.thresholds(r.thresholds)
    d["posterior"] = arrays.posterior(r.posterior) if r.posterior is not None else None
    d["candidate_bits"] = len(arrays.rows["candidate_bits"][0])
    rows = []
    for c in r.candidates:
        arrays.candidate_bits(c.bits)
        row = {k: getattr(c, k) for k in _CANDIDATE_KEYS}
        for k in ("frequency", "posterior_similarity", "fingerprint_score", "score"):
            row[k] = _num(row[k])
        rows.append(row)
    d["candidates"] = rows
    return d


def _entry_json(e: ProjectEntry, arrays: _Arrays) -> dict:
    spectrum = _spectrum_json(e.spectrum, arrays) if e.spectrum is not None else None
    if e.original is None:
        original = None
    elif e.spectrum is not None and (e.original is e.spectrum or e.original == e.spectrum):
        original = SAME
    else:
        original = _spectrum_json(e.original, arrays)
    return {
        "status": e.status, "reason": e.reason, "notes": e.notes,
        "spectrum": spectrum, "original": original,
        "skipped": _skipped_json(e.skipped, arrays) if e.skipped is not None else None,
        "model_checksum": e.model_checksum,
        "result": _result_json(e.result, e.spectrum, arrays) if e.result is not None else None,
    }


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
        entries.append(_entry_json(e, arrays))
        if e.samples and e.result is not None:
            samples[str(k)] = e.samples  # (i, j, SAFE) tuples: JSON arrays
    sel = project.selection
    doc = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "saved_at": project.saved_at or _now(), "saved_by": project.saved_by or f"msgpt {__version__}",
        "model": asdict(project.model) if project.model is not None else None,
        "params": _params_json(project.params),
        "files": [asdict(f) for f in project.files],
        "selection": {"current": sel.current, "selected": list(sel.selected), "candidate": sel.candidate},
        "app": project.app,
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


# -- reading ----------------------------------------------------------------------------------------
# format_version v -> a function that turns a version-v document into a version-(v + 1) one. Version 1 is
# the first; when version 2 comes, _UPGRADES[1] fills in what version 1 files lack.
_UPGRADES: dict[int, Callable[[dict], dict]] = {}


class _Damaged(ValueError):
    """Something in the document is not what its format says (the reader names the place)."""


def _open_archive(path: Path) -> zipfile.ZipFile:
    if not path.is_file():
        raise InputFileError(path, "no such project file.")
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise InputFileError(path, f"is not an MS-GPT Desktop project (a {PROJECT_SUFFIX} file is a ZIP archive "
                                   "with project.json); it may be damaged or another kind of file.") from None
    except OSError as e:
        raise InputFileError(path, f"cannot be read: {e.strerror or e}.") from e


def _read_document(path: Path, zf: zipfile.ZipFile) -> dict:
    try:
        raw = zf.read(DOCUMENT)
    except KeyError:
        raise InputFileError(path, f"is a ZIP archive without {DOCUMENT}: not an MS-GPT Desktop project.") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise InputFileError(path, f"is damaged ({DOCUMENT}: {e}); open the autosave or an earlier copy.") from e
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputFileError(path, f"is damaged: {DOCUMENT} is not valid JSON ({e}).") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InputFileError(path, f"is not an MS-GPT Desktop project (format {found!r}, expected {FORMAT!r}).")
    version = doc.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputFileError(path, f"has no valid format_version ({version!r}); the file is damaged.")
    if version > FORMAT_VERSION:
        by = doc.get("saved_by") or "a newer version"
        raise InputFileError(
            path, f"was saved by {by} in project format {version}; this version of MS-GPT Desktop "
                  f"(msgpt {__version__}) reads project formats up to {FORMAT_VERSION}. Update MS-GPT Desktop to "
                  "open it (the file is left unchanged).")
    doc["written_in"] = version  # the file's own version, kept through the upgrades below
    while doc["format_version"] < FORMAT_VERSION:
        v = doc["format_version"]
        doc = _UPGRADES[v](doc)
        doc["format_version"] = v + 1
    return doc


@dataclass(frozen=True)
class ProjectSummary:
    """What a project file holds, from its document alone (the recovery offer shows it)."""

    path: str
    saved_at: str
    saved_by: str
    n_entries: int
    n_results: int
    model: ModelRef | None
    app: dict
    format_version: int

    def describe(self) -> str:
        return (f"{self.n_entries} record{'s' if self.n_entries != 1 else ''}, {self.n_results} with candidates, "
                f"saved {self.saved_at}")


def read_summary(path: str | os.PathLike) -> ProjectSummary:
    """Read a project's document and count what it holds (checks the format and version, like
    :func:`read_project`)."""
    path = Path(path)
    with _open_archive(path) as zf:
        doc = _read_document(path, zf)
    entries = doc.get("entries") if isinstance(doc.get("entries"), list) else []
    try:
        model = _model(doc.get("model"))
    except _Damaged:
        model = None
    return ProjectSummary(str(path), str(doc.get("saved_at", "")), str(doc.get("saved_by", "")), len(entries),
                          sum(isinstance(e, dict) and e.get("result") is not None for e in entries), model,
                          doc.get("app") if isinstance(doc.get("app"), dict) else {}, int(doc["written_in"]))


def _model(d) -> ModelRef | None:
    if d is None:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("checksum"), str):
        raise _Damaged(f"`model` must be {{\"name\", \"checksum\", \"path\"}}, got {d!r}")
    return ModelRef(d["name"], d["checksum"], str(d.get("path") or ""))


def _params(d, where: str) -> QueryParams:
    if not isinstance(d, dict):
        raise _Damaged(f"{where} must be an object of query parameters, got {d!r}")
    known = {f.name for f in fields(QueryParams)}
    unknown = sorted(set(d) - known)
    if unknown:
        log.warning("%s: ignoring unknown query parameters %s", where, ", ".join(unknown))
    try:
        return QueryParams(**{k: v for k, v in d.items() if k in known})
    except (ConfigError, TypeError) as e:
        raise _Damaged(f"{where}: {e}") from None


class _Reader:
    """Turns a document and its arrays back into objects; every problem names where it is."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.a = arrays
        for table, names in _RAGGED.items():
            offsets = arrays.get(f"{table}_offsets", np.zeros(1, np.int64))
            if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
                raise _Damaged(f"arrays/{table}_offsets is not a table of row offsets")
            for name in names:
                if name not in arrays:
                    arrays[name] = np.zeros(0)
                if arrays[name].shape != (offsets[-1],):
                    raise _Damaged(f"arrays/{name} has {arrays[name].shape} values, its offsets say {offsets[-1]}")
            arrays[f"{table}_offsets"] = offsets
        post = arrays.get("posteriors", np.zeros((0, 0), np.float32))
        if post.ndim != 2:
            raise _Damaged(f"arrays/posteriors must be a table (results × bits), got shape {post.shape}")
        arrays["posteriors"] = post

    def row(self, table: str, r, name: str, where: str) -> np.ndarray:
        offsets = self.a[f"{table}_offsets"]
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < offsets.size - 1:
            raise _Damaged(f"{where}: no row {r!r} in arrays/{name}")
        return self.a[name][offsets[r]:offsets[r + 1]]

    def peaks(self, r, where: str) -> tuple[np.ndarray, np.ndarray]:
        return self.row("peaks", r, "peaks_mz", where), self.row("peaks", r, "peaks_intensity", where)

    def spectrum(self, d, where: str) -> Spectrum:
        if not isinstance(d, dict):
            raise _Damaged(f"{where} must be a spectrum, got {d!r}")
        mz, intensity = self.peaks(d.get("peaks"), where)
        kw = {k: d[k] for k in _SPECTRUM_KEYS if k in d}
        kw["precursor_mz"] = _float(d.get("precursor_mz"), f"{where}.precursor_mz")
        kw.setdefault("metadata", {})
        try:
            return Spectrum(mz=mz.copy(), intensity=intensity.copy(), **kw)
        except (MsgptError, TypeError) as e:
            raise _Damaged(f"{where}: {e}") from None

    def skipped(self, d, where: str) -> SkippedRecord:
        if not isinstance(d, dict):
            raise _Damaged(f"{where} must be a skipped record, got {d!r}")
        mz = intensity = None
        if d.get("peaks") is not None:
            mz, intensity = (a.copy() for a in self.peaks(d["peaks"], where))
        try:
            return SkippedRecord(str(d["source"]), int(d["index"]), str(d["spectrum_id"]), str(d["reason"]),
                                 mz=mz, intensity=intensity, retention_time=d.get("retention_time"),
                                 polarity=d.get("polarity"))
        except (KeyError, TypeError, ValueError) as e:
            raise _Damaged(f"{where}: {type(e).__name__} {e}") from None

    def result(self, d, entry_spectrum: Spectrum | None, where: str) -> SpectrumResult:
        if not isinstance(d, dict):
            raise _Damaged(f"{where} must be a result, got {d!r}")
        if d.get("spectrum", SAME) == SAME:
            if entry_spectrum is None:
                raise _Damaged(f"{where}: the result refers to the entry's spectrum, which it has not")
            spectrum = entry_spectrum
        else:
            spectrum = self.spectrum(d["spectrum"], f"{where}.spectrum")
        params = _params(d.get("params"), f"{where}.params")
        posterior = None
        if d.get("posterior") is not None:
            r = d["posterior"]
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.a["posteriors"].shape[0]:
                raise _Damaged(f"{where}: no row {r!r} in arrays/posteriors")
            posterior = np.array(self.a["posteriors"][r], dtype=np.float32)
        thresholds = np.array(self.row("thresholds", d.get("thresholds"), "thresholds", where), dtype=np.float64)
        first = d.get("candidate_bits", 0)
        rows = d.get("candidates", [])
        if not isinstance(rows, list):
            raise _Damaged(f"{where}.candidates must be a list")
        candidates = []
        for k, c in enumerate(rows):
            w = f"{where}.candidates[{k}]"
            if not isinstance(c, dict):
                raise _Damaged(f"{w} must be a candidate, got {c!r}")
            bits = self.row("candidate_bits", first + k if isinstance(first, int) else first, "candidate_bits", w)
            try:
                candidates.append(Candidate(
                    rank=int(c["rank"]), smiles=str(c["smiles"]), inchikey=str(c.get("inchikey") or ""),
                    inchikey14=str(c["inchikey14"]), formula=str(c.get("formula") or ""), count=int(c["count"]),
                    frequency=_float(c["frequency"], f"{w}.frequency"),
                    posterior_similarity=_float(c["posterior_similarity"], f"{w}.posterior_similarity"),
                    bits=np.array(bits, dtype=np.int64),
                    fingerprint_score=_float(c.get("fingerprint_score", "nan"), f"{w}.fingerprint_score"),
                    score=_float(c.get("score", "nan"), f"{w}.score"),
                ))
            except (KeyError, TypeError, ValueError) as e:
                raise _Damaged(f"{w}: {type(e).__name__} {e}") from None
        try:
            counts = {k: d[k] for k in _RESULT_KEYS}
            for k in ("mean_query_bits", "seconds"):
                counts[k] = _float(counts[k], f"{where}.{k}")
            if counts["fidelity"] is not None:
                counts["fidelity"] = _float(counts["fidelity"], f"{where}.fidelity")
            if d.get("confidence") is not None:  # projects before the confidence model have none
                counts["confidence"] = _float(d["confidence"], f"{where}.confidence")
        except KeyError as e:
            raise _Damaged(f"{where}: no {e}") from None
        except ValueError as e:
            raise _Damaged(str(e)) from None
        return SpectrumResult(spectrum=spectrum, params=params, candidates=tuple(candidates), thresholds=thresholds,
                              posterior=posterior, **counts)

    def entry(self, d, k: int, samples) -> ProjectEntry:
        where = f"entries[{k}]"
        if not isinstance(d, dict):
            raise _Damaged(f"{where} must be an object, got {d!r}")
        spectrum = self.spectrum(d["spectrum"], f"{where}.spectrum") if d.get("spectrum") is not None else None
        original = d.get("original")
        if original == SAME:
            if spectrum is None:
                raise _Damaged(f"{where}.original refers to the entry's spectrum, which it has not")
            original = spectrum
        elif original is not None:
            original = self.spectrum(original, f"{where}.original")
        skipped = self.skipped(d["skipped"], f"{where}.skipped") if d.get("skipped") is not None else None
        result = self.result(d["result"], spectrum, f"{where}.result") if d.get("result") is not None else None
        drawn = ()
        if samples and result is not None:
            try:
                drawn = tuple((int(i), int(j), str(s)) for i, j, s in samples)
            except (TypeError, ValueError) as e:
                raise _Damaged(f"{SAMPLES}[{k}]: {e}") from None
        notes = d.get("notes") or ""
        try:
            return ProjectEntry(spectrum, original, skipped, status=str(d.get("status") or "not run"),
                                reason=str(d.get("reason") or ""), notes=notes if isinstance(notes, str) else str(notes),
                                result=result, model_checksum=d.get("model_checksum"), samples=drawn)
        except ConfigError as e:
            raise _Damaged(f"{where}: {e}") from None


def _read_arrays(zf: zipfile.ZipFile) -> dict[str, np.ndarray]:
    out = {}
    for name in zf.namelist():
        if name.startswith(ARRAYS) and name.endswith(".npy"):
            with zf.open(name) as fh:
                out[name[len(ARRAYS):-4]] = np.lib.format.read_array(fh, allow_pickle=False)
    return out


def read_project(path: str | os.PathLike, cancel: CancelFn | None = None) -> Generator[ProjectProgress, None, Project]:
    """Read a project file, yielding progress; returns the :class:`Project`.

    Raises :class:`~engine.errors.InputFileError` for a file that is not a project, is damaged, or was
    written by a newer version (saying which, and to update).
    """
    path = Path(path)
    with _open_archive(path) as zf:
        doc = _read_document(path, zf)
        check_cancel(cancel)
        try:
            arrays = _read_arrays(zf)
            samples = json.loads(zf.read(SAMPLES).decode("utf-8")) if SAMPLES in zf.namelist() else {}
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            raise InputFileError(path, f"is damaged ({type(e).__name__}: {e}); open the autosave or an earlier "
                                       "copy.") from e
    try:
        reader = _Reader(arrays)
        raw = doc.get("entries", [])
        if not isinstance(raw, list):
            raise _Damaged("`entries` must be a list")
        if not isinstance(samples, dict):
            raise _Damaged(f"{SAMPLES} must map entries to their samples")
        entries = []
        for k, d in enumerate(raw):
            if k % 200 == 0:
                check_cancel(cancel)
                yield ProjectProgress(k, len(raw), f"Reading {path.name}: {k}/{len(raw)} records")
            entries.append(reader.entry(d, k, samples.get(str(k))))
        sel = doc.get("selection") or {}
        n = len(entries)

        def position(v):
            return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n else None

        selection = Selection(
            current=position(sel.get("current")),
            selected=tuple(p for p in map(position, sel.get("selected") or []) if p is not None),
            candidate=sel.get("candidate") if isinstance(sel.get("candidate"), str) else None,
        )
        files = [SourceFile(str(f["path"]), f.get("size"), f.get("sha256")) for f in doc.get("files") or []
                 if isinstance(f, dict) and f.get("path")]
        project = Project(
            entries=entries, params=_params(doc.get("params", {}), "params"), model=_model(doc.get("model")),
            files=files, selection=selection, app=doc.get("app") if isinstance(doc.get("app"), dict) else {},
            saved_at=str(doc.get("saved_at") or ""), saved_by=str(doc.get("saved_by") or ""),
            format_version=int(doc["written_in"]),
        )
    except _Damaged as e:
        raise InputFileError(path, f"is damaged: {e}.") from None
    yield ProjectProgress(len(entries), len(entries), f"Read {path.name}")
    return project


def load_project(path: str | os.PathLike) -> Project:
    """:func:`read_project` without progress."""
    return run_to_end(read_project(path))


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
