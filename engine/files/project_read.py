"""Reading project files (:mod:`engine.files.project` describes the format): the archive and its document, checked
for format and version and upgraded step by step from older versions, then turned back into a
:class:`~engine.files.project.Project`; every damaged place is named. A file from a newer version is refused,
saying which version wrote it.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from collections.abc import Callable, Generator
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from engine import __version__
from engine.elucidation.pipeline import QueryParams, SpectrumResult
from engine.elucidation.ranking import Candidate, SpectralEvidence
from engine.errors import ConfigError, InputFileError, MsgptError
from engine.files.project import (
    ARRAYS,
    DOCUMENT,
    FEATURE_KEYS,
    FORMAT,
    FORMAT_VERSION,
    PROJECT_SUFFIX,
    RESULT_KEYS,
    SAME,
    SAMPLES,
    SPECTRUM_KEYS,
    LibraryRef,
    ModelRef,
    Project,
    ProjectEntry,
    ProjectProgress,
    RunRecalibration,
    Selection,
    SourceFile,
)
from engine.files.project_arrays import RAGGED
from engine.files.project_groups import link_partners, read_group
from engine.formulas.candidates import FormulaCandidate
from engine.formulas.recalibration import Recalibration
from engine.progress import CancelFn, check_cancel, run_to_end
from engine.spectra.features import Feature, MS1Evidence
from engine.spectra.spectrum import SkippedRecord, Spectrum

log = logging.getLogger(__name__)

SAMPLE_KEYS = "_sample_keys"  # an upgraded document: where the samples of a moved entry are now
# a result's query parameters that files written before them lack, as those results were made (no isomer edits)
OLDER_RESULTS = {"edit_rounds": 0}


def _picked(spectrum) -> bool:
    """A version-1 spectrum that was given a formula candidate (a formula run's)."""
    metadata = spectrum.get("metadata") if isinstance(spectrum, dict) else None
    return isinstance(metadata, dict) and any(k in metadata for k in ("formula_rank", "formula_source"))


def _upgrade_1(doc: dict) -> dict:
    """Version 1 listed the formula runs of an entry as entries after it (the record as read for their original, a
    formula candidate's spectrum, a result): they are nested in their entry again, the selection and the samples
    follow. Features, their MS1 evidence and recalibrations were not kept (opening the run's file fills them in)."""
    entries = doc.get("entries")
    if not isinstance(entries, list):
        return doc
    out: list = []
    moved: dict[int, int] = {}  # old position -> new position (a formula run: its entry's)
    keys: dict[str, str] = {}
    owner = owner_original = None
    for k, d in enumerate(entries):
        if (owner is not None and isinstance(d, dict) and d.get("result") is not None and d.get("skipped") is None
                and _picked(d.get("spectrum")) and owner_original is not None and d.get("original") == owner_original):
            runs = owner.setdefault("formula_runs", [])
            keys[str(k)] = f"{len(out) - 1}.f{len(runs)}"
            runs.append({**d, "original": SAME})
            if owner.get("status") in (None, "not run"):
                owner["status"] = "done"
            moved[k] = len(out) - 1
            continue
        moved[k] = len(out)
        if str(k) != str(len(out)):
            keys[str(k)] = str(len(out))
        out.append(d)
        owner = d if isinstance(d, dict) else None
        original = owner.get("original") if owner is not None else None
        owner_original = owner.get("spectrum") if original == SAME else original
    if len(out) == len(entries):
        return doc
    doc = {**doc, "entries": out, SAMPLE_KEYS: keys}
    sel = doc.get("selection")
    if isinstance(sel, dict):
        def at(v):
            return moved.get(v) if isinstance(v, int) and not isinstance(v, bool) else None

        selected = [p for p in map(at, sel.get("selected") or []) if p is not None]
        doc["selection"] = {**sel, "current": at(sel.get("current")), "selected": list(dict.fromkeys(selected))}
    return doc


# format_version v -> a function that turns a version-v document into a version-(v + 1) one.
_UPGRADES: dict[int, Callable[[dict], dict]] = {1: _upgrade_1}


class _Damaged(ValueError):
    """Something in the document is not what its format says (the reader names the place)."""


def _float(x, where: str) -> float:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{where} must be a number, got {x!r}")
    return float(x)


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
                          sum(_has_result(e) for e in entries), model,
                          doc.get("app") if isinstance(doc.get("app"), dict) else {}, int(doc["written_in"]))


def _has_result(d) -> bool:
    """Whether an entry of a document holds a result (its own, a scan's or a formula run's)."""
    if not isinstance(d, dict):
        return False
    scans = d.get("scan_entries")
    nested = [*(d.get("formula_runs") or []), *(scans.values() if isinstance(scans, dict) else [])]
    return d.get("result") is not None or any(_has_result(x) for x in nested)


def _model(d) -> ModelRef | None:
    if d is None:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("checksum"), str):
        raise _Damaged(f"`model` must be {{\"name\", \"checksum\", \"path\"}}, got {d!r}")
    return ModelRef(d["name"], d["checksum"], str(d.get("path") or ""))


def _params(d, where: str, missing: dict | None = None) -> QueryParams:
    """The query parameters ``d``; a field the file lacks takes its value from ``missing``, else the default."""
    if not isinstance(d, dict):
        raise _Damaged(f"{where} must be an object of query parameters, got {d!r}")
    known = {f.name for f in fields(QueryParams)}
    unknown = sorted(set(d) - known)
    if unknown:
        log.warning("%s: ignoring unknown query parameters %s", where, ", ".join(unknown))
    try:
        return QueryParams(**{**(missing or {}), **{k: v for k, v in d.items() if k in known}})
    except (ConfigError, TypeError) as e:
        raise _Damaged(f"{where}: {e}") from None


class _Reader:
    """Turns a document and its arrays back into objects; every problem names where it is."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.a = arrays
        for table, names in RAGGED.items():
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
        kw = {k: d[k] for k in SPECTRUM_KEYS if k in d}
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
        params = _params(d.get("params"), f"{where}.params", OLDER_RESULTS)
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
                    fragment_score=_float(c.get("fragment_score", "nan"), f"{w}.fragment_score"),
                    analog_score=_float(c.get("analog_score", "nan"), f"{w}.analog_score"),
                    analog_reference=str(c.get("analog_reference") or ""),
                    edited_from=str(c.get("edited_from") or ""),
                    **{k: str(c[k]) for k in ("origin", "library", "library_id", "compound_name") if k in c},
                    suspect=bool(c.get("suspect", False)), spectral=_evidence(c.get("spectral"), w),
                ))
            except (KeyError, TypeError, ValueError) as e:
                raise _Damaged(f"{w}: {type(e).__name__} {e}") from None
        try:
            counts = {k: d[k] for k in RESULT_KEYS}
            for k in ("mean_query_bits", "seconds"):
                counts[k] = _float(counts[k], f"{where}.{k}")
            if counts["fidelity"] is not None:
                counts["fidelity"] = _float(counts["fidelity"], f"{where}.fidelity")
            if d.get("confidence") is not None:  # projects before the confidence model have none
                counts["confidence"] = _float(d["confidence"], f"{where}.confidence")
            counts["level_2b"] = d.get("level_2b") is True  # projects before level 2b have none
        except KeyError as e:
            raise _Damaged(f"{where}: no {e}") from None
        except ValueError as e:
            raise _Damaged(str(e)) from None
        return SpectrumResult(spectrum=spectrum, params=params, candidates=tuple(candidates), thresholds=thresholds,
                              posterior=posterior, **counts)

    def ms1(self, d, where: str) -> MS1Evidence | None:
        if d is None:
            return None
        if not isinstance(d, dict):
            raise _Damaged(f"{where} must be MS1 evidence, got {d!r}")
        mz, intensity = self.peaks(d.get("peaks"), where)
        try:
            rt = d.get("retention_time")
            return MS1Evidence(str(d["scan_id"]), None if rt is None else _float(rt, f"{where}.retention_time"),
                               _float(d["precursor_mz"], f"{where}.precursor_mz"),
                               _float(d["precursor_intensity"], f"{where}.precursor_intensity"),
                               mz.copy(), intensity.copy(), int(d.get("n_scans", 1)))
        except (KeyError, TypeError, ValueError) as e:
            raise _Damaged(f"{where}: {type(e).__name__} {e}") from None

    def feature(self, d, consensus: Spectrum | None, where: str) -> Feature:
        if not isinstance(d, dict) or not isinstance(d.get("scans"), list):
            raise _Damaged(f"{where} must be a feature, got {d!r}")
        if consensus is None:
            raise _Damaged(f"{where}: a feature needs the entry's spectrum as read")
        scans = tuple(self.spectrum(s, f"{where}.scans[{i}]") for i, s in enumerate(d["scans"]))
        if not scans:
            raise _Damaged(f"{where} has no scans")
        try:
            kw = {k: d[k] for k in FEATURE_KEYS}
            for k in ("rt_min", "rt_max"):
                kw[k] = None if kw[k] is None else _float(kw[k], f"{where}.{k}")
            kw["precursor_mz"] = _float(kw["precursor_mz"], f"{where}.precursor_mz")
            kw["id"], kw["index"] = str(kw["id"]), int(kw["index"])
        except (KeyError, TypeError, ValueError) as e:
            raise _Damaged(f"{where}: {type(e).__name__} {e}") from None
        try:
            group = None if d.get("group") is None else read_group(d["group"], _float, f"{where}.group")
        except (KeyError, TypeError, ValueError) as e:
            raise _Damaged(f"{where}.group: {type(e).__name__} {e}") from None
        return Feature(**kw, scans=scans, spectrum=consensus, ms1=self.ms1(d.get("ms1"), f"{where}.ms1"), group=group)

    def recalibration(self, d, where: str) -> RunRecalibration:
        if not isinstance(d, dict) or not isinstance(d.get("recalibration"), dict):
            raise _Damaged(f"{where} must be a run's recalibration, got {d!r}")
        r = d["recalibration"]
        try:
            points = r.get("points")
            mz = self.row("recal_points", points, "recal_points_mz", where)
            ppm = self.row("recal_points", points, "recal_points_ppm", where)
            precursor = self.row("recal_points", points, "recal_points_precursor", where)
            scatter = r.get("scatter_ppm")
            lo, hi = r.get("mz_range") or (0.0, "inf")
            rc = Recalibration(
                offset_ppm=_float(r["offset_ppm"], f"{where}.offset_ppm"),
                slope_ppm=_float(r["slope_ppm"], f"{where}.slope_ppm"),
                scatter_ppm=None if scatter is None else _float(scatter, f"{where}.scatter_ppm"),
                n_features=int(r.get("n_features", 0)), points_mz=np.array(mz, np.float64),
                points_ppm=np.array(ppm, np.float64), points_precursor=np.array(precursor, bool),
                applied=bool(r["applied"]), source=str(r.get("source", "estimated")), note=str(r.get("note", "")),
                min_ppm=_float(r.get("min_ppm", 3.0), f"{where}.min_ppm"),
                min_scatter_ppm=_float(r.get("min_scatter_ppm", 1.5), f"{where}.min_scatter_ppm"),
                mz_range=(_float(lo, f"{where}.mz_range"), _float(hi, f"{where}.mz_range")))
        except (KeyError, TypeError, ValueError) as e:
            raise _Damaged(f"{where}: {type(e).__name__} {e}") from None
        settings = d.get("settings") if isinstance(d.get("settings"), dict) else {}
        return RunRecalibration(str(d.get("file") or ""), rc, settings)

    @staticmethod
    def candidate(d, where: str) -> FormulaCandidate | None:
        if d is None:
            return None
        if not isinstance(d, dict):
            raise _Damaged(f"{where} must be a formula candidate, got {d!r}")
        names = {f.name for f in fields(FormulaCandidate)}
        try:
            kw = {k: v for k, v in d.items() if k in names}
            for k in ("neutral_mass", "theoretical_mz", "ppm_error", "rdbe", "score", "probability",
                      "explained_intensity"):
                kw[k] = _float(kw[k], f"{where}.{k}")
            kw["terms"] = {str(k): _float(v, f"{where}.terms.{k}") for k, v in (d.get("terms") or {}).items()}
            for k in ("rank", "n_explained", "isomers"):
                kw[k] = int(kw[k])
            kw["formula"], kw["ion_type"] = str(kw["formula"]), str(kw["ion_type"])
            return FormulaCandidate(**kw)
        except (KeyError, TypeError, ValueError) as e:
            raise _Damaged(f"{where}: {type(e).__name__} {e}") from None

    def entry(self, d, k: int | str, samples, where: str | None = None) -> ProjectEntry:
        """The entry ``d`` (``k``: its key in samples.json; ``samples``: that file's object, or the entry's own
        samples in an older call) with the entries nested in it."""
        where = where or f"entries[{k}]"
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
        mine = samples.get(str(k)) if isinstance(samples, dict) else samples
        if mine and result is not None:
            try:
                drawn = tuple((int(i), int(j), str(s)) for i, j, s in mine)
            except (TypeError, ValueError) as e:
                raise _Damaged(f"{SAMPLES}[{k}]: {e}") from None
        notes = d.get("notes") or ""
        feature = self.feature(d["feature"], original, f"{where}.feature") if d.get("feature") is not None else None
        nested = samples if isinstance(samples, dict) else {}
        runs = d.get("formula_runs") or []
        scans = d.get("scan_entries") or {}
        if not isinstance(runs, list) or not isinstance(scans, dict):
            raise _Damaged(f"{where}: `formula_runs` must be a list and `scan_entries` an object")
        try:
            scan_entries = {int(i): self.entry(x, f"{k}.s{int(i)}", nested, f"{where}.scan_entries[{i}]")
                            for i, x in scans.items()}
        except ValueError as e:
            raise _Damaged(f"{where}.scan_entries: {e}") from None
        try:
            return ProjectEntry(spectrum, original, skipped, status=str(d.get("status") or "not run"),
                                reason=str(d.get("reason") or ""), notes=notes if isinstance(notes, str) else str(notes),
                                result=result, model_checksum=d.get("model_checksum"), samples=drawn, feature=feature,
                                formula_runs=[self.entry(x, f"{k}.f{j}", nested, f"{where}.formula_runs[{j}]")
                                              for j, x in enumerate(runs)],
                                candidate=self.candidate(d.get("candidate"), f"{where}.candidate"),
                                scan_entries=scan_entries)
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
        moved = doc.get(SAMPLE_KEYS)
        if isinstance(moved, dict):  # an upgraded document: the samples of the entries it moved
            samples = {moved.get(key, key): v for key, v in samples.items()}
        entries = []
        for k, d in enumerate(raw):
            if k % 200 == 0:
                check_cancel(cancel)
                yield ProjectProgress(k, len(raw), f"Reading {path.name}: {k}/{len(raw)} records")
            entries.append(reader.entry(d, k, samples))
        link_partners(entries)  # a compound group's members: each other's partners again
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
            libraries=_libraries(doc.get("libraries")),
            recalibrations=[reader.recalibration(r, f"recalibrations[{i}]")
                            for i, r in enumerate(doc.get("recalibrations") or [])],
            saved_at=str(doc.get("saved_at") or ""), saved_by=str(doc.get("saved_by") or ""),
            format_version=int(doc["written_in"]),
        )
    except _Damaged as e:
        raise InputFileError(path, f"is damaged: {e}.") from None
    yield ProjectProgress(len(entries), len(entries), f"Read {path.name}")
    return project


def _libraries(raw) -> list[LibraryRef]:
    """The ``libraries`` of a document (absent before structure and spectral libraries: none); entries that are
    not ``{"name", "kind", "checksum"}`` are passed over."""
    if not isinstance(raw, list):
        return []
    return [LibraryRef(str(d.get("name", "")), str(d["kind"]), str(d["checksum"])) for d in raw
            if isinstance(d, dict) and d.get("kind") and d.get("checksum")]


def load_project(path: str | os.PathLike) -> Project:
    """:func:`read_project` without progress."""
    return run_to_end(read_project(path))


def _evidence(d, where: str) -> SpectralEvidence | None:
    """A candidate's reference-spectrum match as a project keeps it (projects before spectral libraries: none)."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise _Damaged(f"{where}.spectral must be a reference match, got {d!r}")
    names = {f.name for f in fields(SpectralEvidence)}
    return SpectralEvidence(**{k: str(v) for k, v in d.items() if k in names} | {
        "similarity": _float(d["similarity"], f"{where}.spectral.similarity"),
        "matched_peaks": int(d["matched_peaks"]), "identified": bool(d["identified"])})
