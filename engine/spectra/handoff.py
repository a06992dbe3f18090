"""The feature exports of the chemist's pipeline, read as features (issue #60): one readable place for

* **MZmine 3's SIRIUS export MGF**: per feature row an ``MSLEVEL=1`` record (``SPECTYPE=CORRELATED MS``: the
  isotope pattern and correlated ions) and one or more ``MSLEVEL=2`` records, all sharing ``FEATURE_ID``;
* **feature MGF** (GNPS feature-based molecular networking, as MZmine's ``GnpsFbmnMgfExportTask`` writes it):
  ``FEATURE_ID`` = ``SCANS`` = the row ID, one merged MS2 record per feature, beside a quantification table
  ``<name>_quant.csv`` (``row ID``, ``row m/z``, ``row retention time``, ``<sample> Peak area``);
* **MS-DIAL's MSP/MAT export**: ``NAME:``/``SCANNUMBER:`` (the alignment ID)/``ALIGNMENTID:``/``RETENTIONTIME:``
  (minutes)/``PRECURSORMZ:``/``PRECURSORTYPE:`` (MS-DIAL's adduct spelling, e.g. ``[M+Hac-H]-``)/``IONMODE:``/
  ``INTENSITY:``, optionally ``MSTYPE: MS1`` peaks (M, M+1, M+2) before ``MSTYPE: MS2``, each ``Num Peaks: n``;
* **SIRIUS .ms** (as SIRIUS' ``JenaMsWriter`` writes it): ``>compound``, ``>formula``, ``>parentmass``,
  ``>ionization``, ``>feature_id`` (the feature's ID; else the compound name), ``>smiles``, ``>InChIKey``,
  ``>rt`` (seconds, ``s`` suffix; ``min`` understood), ``>charge``; ``>ms1merged``/``>ms1peaks``/``>ms1`` and
  ``>ms2peaks``/``>collision E``/``>ms2`` peak blocks (``m/z intensity``, an ``# comment`` after them allowed);
  ``#key value`` lines kept in the metadata.

Which of them a file is comes from its content (:func:`handoff_kind`; :func:`engine.spectra.io.detect_format`
tells MSP and ``.ms`` from MGF and mzML, a ``FEATURE_ID`` key tells a feature MGF from a library MGF, an
``MSLEVEL=1``/``SPECTYPE`` record MZmine's SIRIUS export). MGF records are read by :mod:`engine.spectra.mgf`, MSP
and ``.ms`` records by :mod:`engine.spectra.feature_exports`. :func:`iter_input_features` is the entry point of
``msgpt predict``: a tool's export through this module, any other input through
:func:`engine.spectra.run_features.iter_features` (which does not import this module: no import circle).
:func:`iter_handoff_features` makes one
:class:`~engine.spectra.features.Feature` per feature ID **as the source tool wrote it**: its MS2 records merged as
:func:`engine.spectra.features.consensus_spectrum` merges a run's scans, its MS1 record as the feature's
:class:`~engine.spectra.features.MS1Evidence` (the isotope pattern the formula ranking scores, as for an mzML
run's survey scans), its adduct normalised by :func:`engine.chem.adducts.parse_adduct`. An MS1 record without
MS2 is a skipped record naming the feature.

Quantities (:func:`read_quant_table`, :func:`attach_quant`): a quantification table (MZmine/GNPS ``_quant.csv``,
an MS-DIAL alignment table, or any CSV/TSV with an ID column and numeric sample columns) gives each feature its
abundance, joined by ID, else (a run read from mzML, with our own IDs) by m/z and retention time. The abundance is
kept in the feature spectrum's metadata (``abundance``: the largest sample's, ``abundance_samples``: JSON of
``{sample: value}``, ``abundance_source``), read back by :func:`feature_abundance`; without a table the file's own
intensity (MS-DIAL's ``INTENSITY``) is used.

May import numpy, :mod:`engine.spectra` and :mod:`engine.chem`; never Qt.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import InputFileError
from engine.spectra.feature_exports import first as _first
from engine.spectra.reading import add_warning, open_binary, text_encoding
from engine.spectra.spectrum import SkippedRecord, Spectrum, SurveyScan

HANDOFF_KINDS = {
    "mzmine_sirius": "MZmine SIRIUS export (MGF)",
    "feature_mgf": "feature MGF (GNPS FBMN / MZmine)",
    "msp": "MS-DIAL MSP",
    "sirius_ms": "SIRIUS .ms",
}
QUANT_SUFFIX = "_quant.csv"  # MZmine's GNPS-FBMN export: <name>.mgf beside <name>_quant.csv
ABUNDANCE_KEY, SAMPLES_KEY, ABUNDANCE_SOURCE_KEY = "abundance", "abundance_samples", "abundance_source"
_SNIFF = 64 * 1024


# ----------------------------------------------------------------------------------------------
# Which export a file is
# ----------------------------------------------------------------------------------------------


def handoff_kind(path: str | os.PathLike) -> str | None:
    """The export a file is (a key of :data:`HANDOFF_KINDS`), by content; None for mzML runs and library MGF.

    File-level problems raise :class:`~engine.errors.InputFileError` (via ``detect_format``).
    """
    from engine.spectra.io import detect_format

    fmt = detect_format(path)
    if fmt in ("msp", "sirius_ms"):
        return fmt
    if fmt != "mgf":
        return None
    with open_binary(Path(path)) as fh:
        head = fh.read(_SNIFF)
    text = head.decode(text_encoding(head), errors="replace")
    if re.search(r"^\s*FEATURE_ID\s*=", text, re.MULTILINE | re.IGNORECASE) is None:
        return None
    if re.search(r"^\s*(MSLEVEL\s*=\s*(MS)?1|SPECTYPE\s*=)\s*", text, re.MULTILINE | re.IGNORECASE):
        return "mzmine_sirius"
    return "feature_mgf"


# ----------------------------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------------------------


def iter_input_features(path: str | os.PathLike, config=None, counts=None, **io_kwargs) -> Iterator:
    """The features of any input: a tool's feature export (:func:`handoff_kind`) through
    :func:`iter_handoff_features`, an mzML run or a library MGF through
    :func:`engine.spectra.run_features.iter_features` (same arguments)."""
    from engine.spectra.features import FeatureConfig
    from engine.spectra.run_features import iter_features

    config = config if config is not None else FeatureConfig()
    kind = handoff_kind(path)
    if kind is not None:
        return iter_handoff_features(path, kind, config, counts, **io_kwargs)
    return iter_features(path, config, counts=counts, **io_kwargs)


def iter_handoff_features(path: str | os.PathLike, kind: str, config=None, counts=None, quant=None,
                          **io_kwargs) -> Iterator:
    """The features of one hand-off file (``kind`` from :func:`handoff_kind`), in file order; skipped records first.

    ``quant``: a :class:`QuantTable` (or a path) whose abundances the features get; without one, a table
    ``<name>_quant.csv`` beside a feature MGF is used (MZmine's GNPS export writes the pair). A file that breaks off
    mid-way gives the features read before, then raises its ``InputFileError``.
    """
    from engine.spectra.features import FeatureConfig
    from engine.spectra.io import iter_spectra
    from engine.spectra.run_features import RunCounts

    config = config if config is not None else FeatureConfig()
    counts = counts if counts is not None else RunCounts()
    counts.source = str(path)
    groups: dict[str, tuple[list[Spectrum], list[SurveyScan]]] = {}
    error: InputFileError | None = None
    try:
        for item in iter_spectra(path, survey_scans=True, **io_kwargs):
            if isinstance(item, SurveyScan):
                counts.n_survey += 1
                groups.setdefault(item.id, ([], []))[1].append(item)
            elif isinstance(item, SkippedRecord):
                counts.n_skipped += 1
                yield item
            else:
                counts.n_ms2 += 1
                groups.setdefault(item.metadata.get("feature_id") or item.id, ([], []))[0].append(item)
    except InputFileError as e:
        error = e
    if quant is None and kind in ("feature_mgf", "mzmine_sirius"):
        sibling = sibling_quant_table(path)
        quant = sibling if sibling is not None else None
    table = read_quant_table(quant) if isinstance(quant, (str, os.PathLike)) else quant
    for fid, (ms2, ms1) in groups.items():
        if not ms2:
            counts.n_skipped += 1
            yield SkippedRecord(str(path), ms1[0].index, fid, f"feature {fid} has an MS1 record but no usable MS2 "
                                                            "record; MS-GPT needs its MS/MS spectrum")
            continue
        feature = handoff_feature(fid, ms2, ms1, kind, config)
        counts.n_features += 1
        yield _with_table(feature, table, config) if table is not None else feature
    if error is not None:
        raise error


def handoff_feature(fid: str, ms2: list[Spectrum], ms1: list[SurveyScan], kind: str, config) -> object:
    """One feature as its tool wrote it: ID, m/z (the records' precursor), RT, merged MS2, MS1 pattern, adduct."""
    from engine.spectra.features import (
        Feature,
        MS1Evidence,
        _common,
        consensus_spectrum,
    )

    scans = sorted(ms2, key=lambda s: (math.inf if s.retention_time is None else s.retention_time, s.index))
    times = [s.retention_time for s in scans if s.retention_time is not None]
    precursor = float(np.median([s.precursor_mz for s in scans]))
    rt = float(np.median(times)) if times else None
    polarity = _common(s.polarity for s in scans)
    metadata = {**scans[0].metadata, "feature_id": fid, "source_format": HANDOFF_KINDS.get(kind, kind),
                "n_scans": str(len(scans)), "precursor_source": f"the precursor m/z {HANDOFF_KINDS.get(kind, kind)} wrote"}
    if len(scans) > 1:
        metadata["merged"] = f"consensus of {len(scans)} MS2 records of feature {fid}"
    evidence = None
    for survey in ms1:
        tol = float(config.mz_tolerance(precursor))
        near = np.flatnonzero(np.abs(survey.mz - precursor) <= tol)
        if near.size == 0:
            continue
        k = int(near[np.argmin(np.abs(survey.mz[near] - precursor))])
        lo, hi = np.searchsorted(survey.mz, [precursor - config.ms1_window_da, precursor + config.ms1_window_da])
        candidate = MS1Evidence(scan_id=f"{fid} (MS1 record)", retention_time=survey.retention_time,
                                precursor_mz=float(survey.mz[k]), precursor_intensity=float(survey.intensity[k]),
                                mz=survey.mz[lo:hi].copy(), intensity=survey.intensity[lo:hi].copy(), n_scans=1)
        if evidence is None or candidate.precursor_intensity > evidence.precursor_intensity:
            evidence = candidate
    if ms1 and evidence is None:
        add_warning(metadata, f"the MS1 record of feature {fid} has no peak at its precursor m/z {precursor:.4f}; "
                              "no isotope evidence")
    if evidence is not None:
        metadata["ms1_source"] = f"MS1 record of feature {fid} ({evidence.mz.size} peaks)"
    if ABUNDANCE_KEY not in metadata:
        height = _first(scans[0].metadata, ("intensity",))  # MS-DIAL's INTENSITY
        try:
            if height is not None and float(height) > 0:
                metadata[ABUNDANCE_KEY] = repr(float(height))
                metadata[ABUNDANCE_SOURCE_KEY] = "the file's INTENSITY"
        except ValueError:
            pass
    charge = _common(s.charge or None for s in scans) or 0
    spectrum = consensus_spectrum(scans, config, id=fid, index=min(s.index for s in scans), precursor_mz=precursor,
                                  retention_time=rt, metadata=metadata, adduct=_common(s.adduct for s in scans),
                                  formula=_common(s.formula for s in scans), charge=charge, polarity=polarity)
    return Feature(id=fid, index=spectrum.index, precursor_mz=precursor, rt_min=min(times) if times else None,
                   rt_max=max(times) if times else None, scans=tuple(scans), spectrum=spectrum, ms1=evidence)


# ----------------------------------------------------------------------------------------------
# Quantification tables
# ----------------------------------------------------------------------------------------------

_ID_COLUMNS = ("row ID", "Alignment ID", "feature_id", "Feature ID", "FEATURE_ID", "shared name", "id", "ID")
_MZ_COLUMNS = ("row m/z", "Average Mz", "mz", "m/z", "precursor_mz", "row mz")
_RT_MINUTE_COLUMNS = ("row retention time", "Average Rt(min)", "rt", "rt_min", "retention_time_min", "RT")  # minutes
_RT_SECOND_COLUMNS = ("rt_s", "retention_time_s", "RTINSECONDS")
_PEAK_AREA = re.compile(r"^(.*?)\s*Peak (area|height)\s*$", re.IGNORECASE)  # MZmine legacy / GNPS
_DATAFILE = re.compile(r"^datafile:(.+):(area|height)$", re.IGNORECASE)  # MZmine 3 full CSV export


@dataclass(frozen=True)
class QuantRow:
    """One feature of a quantification table: ID as written, m/z, RT (s), one abundance per sample."""

    id: str
    mz: float | None
    rt_s: float | None
    values: tuple[float, ...]
    line: int


@dataclass(frozen=True)
class QuantTable:
    """A quantification table: its samples (column order) and rows by feature ID."""

    path: str
    samples: tuple[str, ...]
    rows: dict[str, QuantRow]
    id_column: str

    def row_for(self, feature, mz_tol_ppm: float = 10.0, mz_tol_da: float = 0.005,
                rt_tol_s: float = 30.0) -> tuple[QuantRow | None, str]:
        """The feature's row by ID, else the nearest in RT within the m/z and RT tolerances: ``(row, how)``."""
        row = self.rows.get(_norm_id(feature.id))
        if row is not None:
            return row, "id"
        rt = feature.retention_time
        best, best_dt = None, math.inf
        tol = max(mz_tol_ppm * 1e-6 * feature.precursor_mz, mz_tol_da)
        for r in self.rows.values():
            if r.mz is None or abs(r.mz - feature.precursor_mz) > tol:
                continue
            dt = abs(r.rt_s - rt) if (r.rt_s is not None and rt is not None) else math.inf
            if dt <= rt_tol_s and dt < best_dt:
                best, best_dt = r, dt
        return best, "m/z+RT" if best is not None else ""


def _norm_id(text: str) -> str:
    """``"12"`` for ``12``, ``12.0`` or `` 12 ``: IDs compare as the tool meant them."""
    text = str(text).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else text


def sibling_quant_table(path: str | os.PathLike) -> Path | None:
    """``<name>_quant.csv`` beside ``<name>.mgf`` (MZmine's GNPS-FBMN export) or beside ``<name>_sirius.mgf`` (its
    SIRIUS export of the same feature list), if it exists."""
    p = Path(path)
    stem = p.name
    for suffix in (".gz", ".mgf"):
        stem = stem[: -len(suffix)] if stem.lower().endswith(suffix) else stem
    for name in dict.fromkeys([stem, stem.removesuffix("_sirius")]):
        candidate = p.with_name(name + QUANT_SUFFIX)
        if candidate.is_file():
            return candidate
    return None


def read_quant_table(path: str | os.PathLike) -> QuantTable:
    """Read a quantification table (CSV or TSV; see the module notes); errors name the file, line and fix."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p, "no such quantification table; check the path (a CSV/TSV with a feature ID column).")
    with open_binary(p) as fh:
        raw = fh.read()
    text = raw.decode(text_encoding(raw[:2]), errors="replace")
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise InputFileError(p, "the quantification table is empty.")
    delimiter = "\t" if sum(line.count("\t") for line in lines[:10]) > sum(line.count(",") for line in lines[:10]) else ","
    table = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter))
    header_at = next((k for k, row in enumerate(table[:20]) if any(c.strip() in _ID_COLUMNS for c in row)), None)
    if header_at is None:
        raise InputFileError(p, f"no feature ID column in the first 20 lines; name it one of {', '.join(_ID_COLUMNS)} "
                                "(MZmine: 'row ID', MS-DIAL: 'Alignment ID').")
    header = [c.strip() for c in table[header_at]]
    id_col = next(header.index(c) for c in _ID_COLUMNS if c in header)
    mz_col = next((header.index(c) for c in _MZ_COLUMNS if c in header), None)
    rt_col, rt_factor = next(((header.index(c), 60.0) for c in _RT_MINUTE_COLUMNS if c in header),
                             next(((header.index(c), 1.0) for c in _RT_SECOND_COLUMNS if c in header), (None, 1.0)))
    samples = _sample_columns(header, table[header_at + 1:], {id_col, mz_col, rt_col})
    if not samples:
        raise InputFileError(p, "no sample abundance columns: name them '<sample> Peak area' (MZmine/GNPS), "
                                "'datafile:<sample>:area' (MZmine 3), or give numeric columns beside the ID, m/z "
                                "and RT columns.")
    rows: dict[str, QuantRow] = {}
    for k, row in enumerate(table[header_at + 1:], header_at + 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) <= id_col or not row[id_col].strip():
            raise InputFileError(p, f"line {k}: no feature ID in column {header[id_col]!r}; fill it in or delete the line.")
        fid = _norm_id(row[id_col])
        if fid in rows:
            raise InputFileError(p, f"line {k}: feature ID {row[id_col].strip()!r} is also on line {rows[fid].line}; "
                                    "IDs must be unique.")
        values = tuple(_number(p, k, header[c], row[c] if c < len(row) else "", 0.0) for c, _ in samples)
        mz = _number(p, k, header[mz_col], row[mz_col], None) if mz_col is not None and mz_col < len(row) else None
        rt = _number(p, k, header[rt_col], row[rt_col], None) if rt_col is not None and rt_col < len(row) else None
        rows[fid] = QuantRow(row[id_col].strip(), mz, None if rt is None else rt * rt_factor, values, k)
    return QuantTable(str(p), tuple(name for _, name in samples), rows, header[id_col])


def _sample_columns(header: list[str], body: list[list[str]], taken: set) -> list[tuple[int, str]]:
    """``(column, sample name)`` of the abundance columns (module notes)."""
    named = []
    for c, name in enumerate(header):
        m = _PEAK_AREA.match(name) or _DATAFILE.match(name)
        if m and c not in taken:
            named.append((c, m.group(1).strip() or name))
    if named:
        return named
    if "MS/MS spectrum" in header:  # MS-DIAL alignment table: the sample columns follow its spectra
        start = header.index("MS/MS spectrum") + 1
        return [(c, header[c]) for c in range(start, len(header)) if header[c]]

    def numeric(c: int) -> bool:
        cells = [row[c].strip() for row in body if c < len(row) and row[c].strip()]
        return bool(cells) and all(_is_number(x) for x in cells)

    return [(c, name) for c, name in enumerate(header) if c not in taken and name and numeric(c)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _number(path: Path, line: int, column: str, text: str, empty):
    text = text.strip()
    if text.lower() in ("", "nan", "na", "n/a", "null", "none"):
        return empty
    try:
        value = float(text)
    except ValueError:
        raise InputFileError(path, f"line {line}: {text!r} in column {column!r} is not a number; fix the cell "
                                   "(empty means not detected).") from None
    if not math.isfinite(value):
        return empty
    return value


def attach_quant(items: Iterable, table: QuantTable | str | os.PathLike | None, config=None) -> Iterator:
    """The features of ``items`` with their abundance from ``table`` (skipped records pass unchanged)."""
    if table is None:
        yield from items
        return
    from engine.spectra.features import Feature, FeatureConfig

    table = read_quant_table(table) if isinstance(table, (str, os.PathLike)) else table
    config = config if config is not None else FeatureConfig()
    for item in items:
        yield _with_table(item, table, config) if isinstance(item, Feature) else item


def _with_table(feature, table: QuantTable, config):
    row, how = table.row_for(feature, config.mz_tol_ppm, config.mz_tol_da, config.rt_gap_s)
    if row is None:
        metadata = {k: v for k, v in feature.spectrum.metadata.items()
                    if k not in (ABUNDANCE_KEY, SAMPLES_KEY, ABUNDANCE_SOURCE_KEY)}
        add_warning(metadata, f"not in the quantification table {Path(table.path).name} (by {table.id_column} "
                              "or m/z and RT)")
        return with_metadata(feature, metadata)
    return with_metadata(feature, {**feature.spectrum.metadata, **quant_metadata(table, row, how)})


def quant_metadata(table: QuantTable, row: QuantRow, how: str) -> dict[str, str]:
    """The metadata keys a feature's abundance is kept in (module notes), from its row of ``table``."""
    return {ABUNDANCE_KEY: repr(max(row.values, default=0.0)), SAMPLES_KEY: json.dumps(dict(zip(table.samples, row.values))),
            ABUNDANCE_SOURCE_KEY: f"{Path(table.path).name} row {row.id} (by {how})", "quant_row_id": row.id}


def with_metadata(feature, metadata: dict[str, str]):
    """The feature with its spectrum's metadata replaced (features and spectra are frozen)."""
    spectrum = dataclasses.replace(feature.spectrum, metadata=metadata)
    return dataclasses.replace(feature, spectrum=spectrum)


def feature_abundance(metadata: Mapping[str, str]) -> tuple[float | None, dict[str, float]]:
    """``(largest abundance or None, {sample: abundance})`` of a feature spectrum's metadata."""
    text = metadata.get(ABUNDANCE_KEY)
    try:
        top = float(text) if text is not None else None
    except ValueError:
        top = None
    try:
        samples = {str(k): float(v) for k, v in json.loads(metadata.get(SAMPLES_KEY) or "{}").items()}
    except (ValueError, TypeError, AttributeError):
        samples = {}
    return top, samples
