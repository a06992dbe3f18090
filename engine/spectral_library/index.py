"""The searchable index of a spectral library: cleaned peaks, ms-entropy's Flash entropy index, metadata.

Every reference spectrum is cleaned once as Flash entropy search wants it (:func:`clean_peaks`: peaks within
1.6 Da of the precursor and above it removed, peaks closer than 0.05 Da merged, peaks under 1% of the base peak
removed, intensities summing to 1). Spectra are indexed in separate groups by ion mode (``positive``,
``negative``, and ``unknown`` for records that do not say), each a ``FlashEntropySearchCore`` over its spectra
sorted by precursor m/z, so an identity search scans only the spectra within the precursor tolerance.

Kept on disk as two files (no pickle): ``<name>.npz`` holds the arrays (per record: precursor m/z, charge,
first line in the file, cleaned peaks as CSR; per group: its rows and the nine arrays of ms-entropy's index,
which that library would itself write as raw ``tofile`` dumps) and ``<name>.json`` the metadata (the text
columns of :data:`~engine.spectral_library.records.TEXT_FIELDS`, the read report, the cleaning and index
parameters). Both carry one ``build_id``; a pair that does not match, or was built with other parameters, is
not used (:class:`IndexMismatch`), and the library is indexed again.
"""

from __future__ import annotations

import json
import os
import uuid
import zipfile
from collections import Counter
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.progress import CancelFn, check_cancel

from .read import ReadReport, check_usable, iter_references
from .records import POLARITIES, TEXT_FIELDS, ReferenceSpectrum

FORMAT = "msgpt-spectral-library-index"
FORMAT_VERSION = 1
PRECURSOR_REMOVAL_DA = 1.6  # peaks above precursor m/z - this are removed (Flash entropy's default)
NOISE_THRESHOLD = 0.01  # of the base peak
MIN_PEAK_DISTANCE_DA = 0.05  # closer peaks are merged
MAX_FRAGMENT_TOL_DA = 0.024  # the index supports fragment tolerances up to this
MZ_INDEX_STEP = 0.01  # ms-entropy's lookup table step (its default 0.0001 costs 240 MB per group)
MAX_INDEXED_MZ = 1500.00005
GROUPS = ("positive", "negative", "unknown")
CORE_ARRAYS = ("all_ions_mz_idx_start", "all_ions_mz", "all_ions_intensity", "all_ions_spec_idx",
               "all_nl_mass_idx_start", "all_nl_mass", "all_nl_intensity", "all_nl_spec_idx", "all_ions_idx_for_nl")
PARAMS = {"precursor_removal_da": PRECURSOR_REMOVAL_DA, "noise_threshold": NOISE_THRESHOLD,
          "min_peak_distance_da": MIN_PEAK_DISTANCE_DA, "max_fragment_tol_da": MAX_FRAGMENT_TOL_DA,
          "mz_index_step": MZ_INDEX_STEP, "intensity_weight": "entropy"}
EVERY = 500  # records between progress events


class IndexMismatch(ValueError):
    """An index file that is missing, damaged, of another format or built with other parameters."""


@dataclass(frozen=True)
class SpectralLibraryProgress:
    """A progress event of opening or building a spectral library: ``done`` of ``total`` (bytes of its file)."""

    done: int
    total: int
    text: str


@dataclass(frozen=True)
class ReferenceRecord:
    """What a search hit reports about its reference: the library, the row, the precursor, the file line and the
    metadata texts (``""`` when the file does not give one)."""

    library: str
    row: int
    precursor_mz: float
    charge: int
    line: int
    accession: str
    name: str
    adduct: str
    polarity: str
    collision_energy: str
    instrument_type: str
    smiles: str
    inchi: str
    inchikey: str
    inchikey14: str
    formula: str
    license: str
    contributor: str
    source: str


def clean_peaks(precursor_mz: float, mz, intensity) -> np.ndarray:
    """``(n, 2)`` float32 peaks cleaned for Flash entropy search (see the module docstring); may be empty."""
    from ms_entropy import clean_spectrum

    peaks = np.column_stack([np.asarray(mz, dtype=np.float32), np.asarray(intensity, dtype=np.float32)])
    if peaks.shape[0] == 0:
        return np.zeros((0, 2), dtype=np.float32)
    return clean_spectrum(peaks, min_mz=-1.0, max_mz=float(precursor_mz) - PRECURSOR_REMOVAL_DA,
                          noise_threshold=NOISE_THRESHOLD, min_ms2_difference_in_da=MIN_PEAK_DISTANCE_DA,
                          max_peak_num=-1, normalize_intensity=True)


def new_core():
    """An empty ``FlashEntropySearchCore`` with this module's parameters."""
    from ms_entropy import FlashEntropySearchCore

    return FlashEntropySearchCore(max_ms2_tolerance_in_da=MAX_FRAGMENT_TOL_DA, mz_index_step=MZ_INDEX_STEP,
                                  intensity_weight="entropy")


class Group:
    """The spectra of one ion-mode group: library rows sorted by precursor m/z, and their Flash index."""

    def __init__(self, name: str, rows: np.ndarray, precursor_mz: np.ndarray, core):
        self.name = name
        self.rows = rows  # int64: group position -> library row
        self.precursor_mz = precursor_mz  # float64, sorted
        self.core = core

    def __len__(self) -> int:
        return int(self.rows.size)

    def range_of(self, precursor_mz: float, tol_da: float) -> tuple[int, int]:
        """Positions [lo, hi) of the spectra whose precursor is within ``tol_da`` of ``precursor_mz``."""
        lo = int(np.searchsorted(self.precursor_mz, precursor_mz - tol_da, side="left"))
        hi = int(np.searchsorted(self.precursor_mz, precursor_mz + tol_da, side="right"))
        return lo, hi

    def arrays(self) -> dict[str, np.ndarray]:
        out = {f"{self.name}__rows": self.rows}
        out.update({f"{self.name}__{key}": np.ascontiguousarray(a) for key, a in zip(CORE_ARRAYS, self.core.index)})
        return out

    @classmethod
    def from_arrays(cls, name: str, arrays: dict[str, np.ndarray], precursor_mz: np.ndarray,
                    n_peaks: int) -> Group:
        rows = arrays[f"{name}__rows"].astype(np.int64)
        core = new_core()
        core.index = [arrays[f"{name}__{key}"].astype(core.index_dtypes[key], copy=False) for key in CORE_ARRAYS]
        core.total_spectra_num = int(rows.size)
        core.total_peaks_num = int(n_peaks)
        return cls(name, rows, precursor_mz[rows], core)

    @classmethod
    def build(cls, name: str, rows: np.ndarray, precursor_mz: np.ndarray, peaks: list[np.ndarray]) -> Group:
        order = np.argsort(precursor_mz[rows], kind="stable")
        rows = rows[order]
        core = new_core()
        core.build_index([{"precursor_mz": float(precursor_mz[r]), "peaks": peaks[r]} for r in rows], MAX_INDEXED_MZ)
        return cls(name, rows, precursor_mz[rows], core)


def _group_of(polarity: str) -> str:
    return polarity if polarity in POLARITIES else "unknown"


class SpectralLibrary:
    """A spectral library ready to search (see the module docstring; :mod:`engine.spectral_library.search`
    searches it). ``name`` is what the app shows; ``checksum`` the SHA-256 of its file; ``report`` what reading
    it found."""

    def __init__(self, name: str, checksum: str, columns: dict[str, list[str]], arrays: dict[str, np.ndarray],
                 groups: dict[str, Group], report: ReadReport, info: dict | None = None):
        self.name = name
        self.checksum = checksum
        self.columns = columns
        self.precursor_mz = arrays["precursor_mz"]
        self.charge = arrays["charge"]
        self.line = arrays["line"]
        self.peak_offsets = arrays["peak_offsets"]
        self.peak_mz = arrays["peak_mz"]
        self.peak_intensity = arrays["peak_intensity"]
        self.groups = groups
        self.report = report
        self.info = dict(info or {})

    def __len__(self) -> int:
        return int(self.precursor_mz.size)

    # -- rows ---------------------------------------------------------------------------------

    def record(self, row: int) -> ReferenceRecord:
        """The metadata of library row ``row`` (0-based, in file order of the usable records)."""
        texts = {name: self.columns[name][row] for name in TEXT_FIELDS}
        return ReferenceRecord(library=self.name, row=int(row), precursor_mz=float(self.precursor_mz[row]),
                               charge=int(self.charge[row]), line=int(self.line[row]), **texts)

    def peaks(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """The cleaned peaks of row ``row`` (m/z ascending, intensities summing to 1), as searched."""
        a, b = int(self.peak_offsets[row]), int(self.peak_offsets[row + 1])
        mz, intensity = self.peak_mz[a:b], self.peak_intensity[a:b]
        mz.flags.writeable = intensity.flags.writeable = False  # views into the library's arrays
        return mz, intensity

    def rows_of_structure(self, inchikey14: str) -> list[int]:
        """Rows whose structure has this first InChIKey block."""
        return [i for i, key in enumerate(self.columns["inchikey14"]) if key == inchikey14]

    # -- what it holds ------------------------------------------------------------------------

    def polarity_counts(self) -> dict[str, int]:
        """Searchable spectra by ion-mode group (spectra left without peaks by cleaning are not searchable)."""
        return {name: len(self.groups[name]) if name in self.groups else 0 for name in GROUPS}

    def structures(self) -> int:
        return len({k for k in self.columns["inchikey14"] if k})

    def polarity_note(self, polarity: str | None) -> str:
        """A plain sentence when spectra of ``polarity`` cannot match anything here (else ``""``)."""
        counts = self.polarity_counts()
        if polarity not in POLARITIES or counts[polarity] or counts["unknown"]:
            return ""
        other = "negative" if polarity == "positive" else "positive"
        if counts[other]:
            return (f"{self.name} holds only {other}-mode spectra ({counts[other]:,}); a {polarity}-mode spectrum "
                    f"cannot match any of them. Add a library of {polarity}-mode spectra.")
        return f"{self.name} holds no searchable spectrum."

    def summary(self) -> str:
        counts = self.polarity_counts()
        modes = ", ".join(f"{n:,} {g}" for g, n in counts.items() if n)
        unsearchable = len(self) - sum(counts.values())
        extra = (f"; {unsearchable:,} have no fragment peak left after cleaning and cannot match"
                 if unsearchable else "")
        return (f"{self.name}: {sum(counts.values()):,} searchable spectra ({modes or 'none'}) of "
                f"{self.structures():,} structures{extra}. {self.report.summary()}")

    # -- files --------------------------------------------------------------------------------

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"precursor_mz": self.precursor_mz, "charge": self.charge, "line": self.line,
               "peak_offsets": self.peak_offsets, "peak_mz": self.peak_mz, "peak_intensity": self.peak_intensity}
        for group in self.groups.values():
            out.update(group.arrays())
        return out

    def save(self, npz_path: str | os.PathLike, json_path: str | os.PathLike) -> None:
        """Write both files atomically (temporary files beside them, then renamed; the JSON first)."""
        npz_path, json_path = Path(npz_path), Path(json_path)
        npz_path.parent.mkdir(parents=True, exist_ok=True)
        build_id = uuid.uuid4().hex
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "build_id": build_id, "name": self.name,
                "checksum": self.checksum, "params": PARAMS, "info": self.info, "report": self.report.to_json(),
                "groups": {g.name: int(g.core.total_peaks_num) for g in self.groups.values()},
                "columns": self.columns}
        tmp_json = json_path.with_name(f".{json_path.name}.{os.getpid()}.tmp")
        tmp_npz = npz_path.with_name(f".{npz_path.name}.{os.getpid()}.tmp")
        try:
            tmp_json.write_text(json.dumps(meta, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
            with open(tmp_npz, "wb") as fh:
                np.savez(fh, build_id=np.array(build_id), **self.arrays())
            os.replace(tmp_json, json_path)
            os.replace(tmp_npz, npz_path)
        finally:
            tmp_json.unlink(missing_ok=True)
            tmp_npz.unlink(missing_ok=True)

    @classmethod
    def load(cls, npz_path: str | os.PathLike, json_path: str | os.PathLike) -> SpectralLibrary:
        """Read both files; :class:`IndexMismatch` when either is missing, damaged, or does not fit this code."""
        try:
            meta = json.loads(Path(json_path).read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
                raise IndexMismatch(f"{json_path} is of format {meta.get('format')!r} "
                                    f"version {meta.get('format_version')!r}")
            if meta.get("params") != PARAMS:
                raise IndexMismatch(f"{json_path} was built with other parameters")
            with np.load(npz_path, allow_pickle=False) as z:
                arrays = {key: z[key] for key in z.files}
            if str(arrays.pop("build_id")) != meta["build_id"]:
                raise IndexMismatch(f"{npz_path} and {json_path} come from different builds")
            groups = {name: Group.from_arrays(name, arrays, arrays["precursor_mz"], n_peaks)
                      for name, n_peaks in meta["groups"].items()}
            return cls(meta["name"], meta["checksum"], meta["columns"], arrays, groups,
                       ReadReport.from_json(meta["report"]), meta.get("info"))
        except IndexMismatch:
            raise
        except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as e:
            raise IndexMismatch(f"cannot read the index {npz_path} ({type(e).__name__}: {e})") from e


class _Collector:
    """Columns and cleaned peaks of the references read so far."""

    def __init__(self):
        self.columns: dict[str, list[str]] = {name: [] for name in TEXT_FIELDS}
        self.precursor: list[float] = []
        self.charge: list[int] = []
        self.line: list[int] = []
        self.peaks: list[np.ndarray] = []

    def add(self, ref: ReferenceSpectrum) -> None:
        for name in TEXT_FIELDS:
            self.columns[name].append(ref.text(name))
        self.precursor.append(ref.precursor_mz)
        self.charge.append(ref.charge)
        self.line.append(ref.line)
        self.peaks.append(clean_peaks(ref.precursor_mz, ref.mz, ref.intensity))

    def add_cleaned(self, precursor_mz: float, peaks: np.ndarray, polarity: str, texts: dict[str, str]) -> None:
        for name in TEXT_FIELDS:
            self.columns[name].append(polarity if name == "polarity" else texts.get(name, ""))
        self.precursor.append(float(precursor_mz))
        self.charge.append(0)
        self.line.append(0)
        self.peaks.append(peaks)

    def arrays(self) -> dict[str, np.ndarray]:
        counts = np.array([p.shape[0] for p in self.peaks], dtype=np.int64)
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        stacked = np.concatenate(self.peaks) if self.peaks else np.zeros((0, 2), dtype=np.float32)
        return {"precursor_mz": np.array(self.precursor, dtype=np.float64),
                "charge": np.array(self.charge, dtype=np.int16), "line": np.array(self.line, dtype=np.int64),
                "peak_offsets": offsets, "peak_mz": np.ascontiguousarray(stacked[:, 0], dtype=np.float32),
                "peak_intensity": np.ascontiguousarray(stacked[:, 1], dtype=np.float32)}


def build_groups(polarities: Iterable[str], arrays: dict[str, np.ndarray], peaks: list[np.ndarray],
                 cancel: CancelFn | None = None) -> dict[str, Group]:
    """The Flash index of each ion-mode group that has spectra with peaks."""
    group_of = np.array([GROUPS.index(_group_of(p)) for p in polarities], dtype=np.int8)
    has_peaks = np.diff(arrays["peak_offsets"]) > 0
    groups = {}
    for i, name in enumerate(GROUPS):
        check_cancel(cancel)
        rows = np.flatnonzero((group_of == i) & has_peaks).astype(np.int64)
        if rows.size:
            groups[name] = Group.build(name, rows, arrays["precursor_mz"], peaks)
    return groups


def build_library(path: str | os.PathLike, name: str, checksum: str = "", cancel: CancelFn | None = None,
                  ) -> Generator[SpectralLibraryProgress, None, SpectralLibrary]:
    """Read, clean and index a library file, as a generator of progress events that returns the library.
    Raises :class:`~engine.spectral_library.read.SpectralLibraryError` for a file that cannot be used and
    :class:`~engine.errors.Cancelled` when cancelled (nothing is written here)."""
    path = Path(path)
    total = max(path.stat().st_size, 1) if path.is_file() else 1
    report = ReadReport(str(path))
    collector = _Collector()
    done = [0]

    def progress(n: int) -> None:
        check_cancel(cancel)
        done[0] = n

    for n, ref in enumerate(iter_references(path, report, progress), 1):
        collector.add(ref)
        if n % EVERY == 0:
            check_cancel(cancel)
            yield SpectralLibraryProgress(min(done[0], total), total, f"Reading {name}: {n:,} spectra")
    check_usable(report)
    yield SpectralLibraryProgress(total, total, f"Indexing {name}: {report.used:,} spectra")
    arrays = collector.arrays()
    groups = build_groups(collector.columns["polarity"], arrays, collector.peaks, cancel)
    info = {"source": str(path), "ms_entropy": _ms_entropy_version(),
            "polarities": dict(Counter(p or "unknown" for p in collector.columns["polarity"]))}
    return SpectralLibrary(name, checksum, collector.columns, arrays, groups, report, info)


def library_from_references(references: Iterable[ReferenceSpectrum], name: str,
                            report: ReadReport | None = None) -> SpectralLibrary:
    """A library of references already in memory (calibration, tests, benchmarks); not kept on disk."""
    collector = _Collector()
    for ref in references:
        collector.add(ref)
    report = report or ReadReport(name, records=len(collector.precursor), used=len(collector.precursor))
    arrays = collector.arrays()
    groups = build_groups(collector.columns["polarity"], arrays, collector.peaks)
    return SpectralLibrary(name, "", collector.columns, arrays, groups, report, {"ms_entropy": _ms_entropy_version()})


def library_from_cleaned(name: str, precursor_mz: Iterable[float], peaks: Iterable[np.ndarray],
                         polarities: Iterable[str], texts: Iterable[dict[str, str]] | None = None) -> SpectralLibrary:
    """A library of spectra already cleaned by :func:`clean_peaks` (synthetic libraries of the benchmark)."""
    collector = _Collector()
    texts = texts if texts is not None else iter(dict, None)
    for mz, p, polarity, text in zip(precursor_mz, peaks, polarities, texts):
        collector.add_cleaned(mz, p, polarity, text)
    n = len(collector.precursor)
    arrays = collector.arrays()
    groups = build_groups(collector.columns["polarity"], arrays, collector.peaks)
    return SpectralLibrary(name, "", collector.columns, arrays, groups, ReadReport(name, records=n, used=n),
                           {"ms_entropy": _ms_entropy_version()})


def _ms_entropy_version() -> str:
    try:
        from ms_entropy import __version__
    except ImportError:  # pragma: no cover - a dependency
        return "?"
    return str(__version__)

