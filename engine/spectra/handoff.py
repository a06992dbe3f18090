"""The feature exports of the chemist's pipeline, read as features (issue #60): one readable place for

* **MZmine 3's SIRIUS export MGF**: per feature row an ``MSLEVEL=1`` record (``SPECTYPE=CORRELATED MS``: the
  isotope pattern and correlated ions) and one or more ``MSLEVEL=2`` records, all sharing ``FEATURE_ID``;
* **feature MGF** (GNPS feature-based molecular networking, as MZmine's ``GnpsFbmnMgfExportTask`` writes it):
  ``FEATURE_ID`` = ``SCANS`` = the row ID, one merged MS2 record per feature, beside a quantification table
  ``<name>_quant.csv`` (``row ID``, ``row m/z``, ``row retention time``, ``<sample> Peak area``);
* **MS-DIAL's MSP/MAT export**: ``NAME:``/``SCANNUMBER:`` (the alignment ID)/``ALIGNMENTID:``/``RETENTIONTIME:``
  (minutes)/``PRECURSORMZ:``/``PRECURSORTYPE:`` (MS-DIAL's adduct spelling, e.g. ``[M+Hac-H]-``)/``IONMODE:``/
  ``INTENSITY:``, optionally ``MSTYPE: MS1`` peaks (M, M+1, M+2) before ``MSTYPE: MS2``, each ``Num Peaks: n``;
* **SIRIUS .ms**: ``>compound``, ``>parentmass``, ``>ionization``, ``>charge``, ``>rt`` (seconds, ``s``/``min``
  suffix), ``>formula``, ``>ms1`` (also ``>ms1peaks``/``>ms1merged``) and ``>ms2`` (also ``>collision E``,
  ``>ms2peaks``/``>ms2merged``) peak blocks, ``#key value`` comments kept in the metadata.

Which of them a file is comes from its content (:func:`handoff_kind`; :func:`engine.spectra.io.detect_format`
tells MSP and ``.ms`` from MGF and mzML, a ``FEATURE_ID`` key tells a feature MGF from a library MGF, an
``MSLEVEL=1``/``SPECTYPE`` record MZmine's SIRIUS export). :func:`iter_handoff_features` makes one
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

from engine.errors import InputFileError, SpectrumError
from engine.spectra.reading import (
    RawRecord,
    ReadOptions,
    add_warning,
    build_spectrum,
    open_binary,
    open_text,
    skipped_record,
    text_encoding,
)
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
_MISSING = frozenset({"", "n/a", "na", "null", "none", "nan", "-1"})


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
# MS-DIAL MSP / MAT records
# ----------------------------------------------------------------------------------------------

_MSP_ID_KEYS = ("alignmentid", "alignment id", "scannumber", "peakid", "feature_id", "db#", "accession")
_MSP_POLARITY = {"positive": "positive", "p": "positive", "pos": "positive",
                 "negative": "negative", "n": "negative", "neg": "negative"}


def _first(values: Mapping[str, str], keys: Iterable[str]) -> str | None:
    for key in keys:
        value = values.get(key)
        if value is not None and value.strip().lower() not in _MISSING:
            return value.strip()
    return None


def _peak(line: str) -> tuple[float, float] | None:
    """``m/z intensity`` (space, tab or ``;``/``,`` separated, an MS-DIAL comment after them allowed)."""
    parts = re.split(r"[\s;,]+", line.strip().strip(";"))
    try:
        return float(parts[0]), float(parts[1])
    except (ValueError, IndexError):
        return None


def iter_msp(options: ReadOptions) -> Iterator[Spectrum | SkippedRecord | SurveyScan]:
    """The records of an MSP (MS-DIAL MSP or MAT export, or a NIST/MoNA-style MSP): per record, its ``MSTYPE: MS1``
    peaks as a survey scan (with ``options.survey_scans``) whose id is the record's feature ID, then its MS2
    spectrum (``metadata["feature_id"]``: ``ALIGNMENTID``, ``SCANNUMBER``, ``PEAKID``, ``DB#``, else the record's
    number)."""
    with open_binary(options.path) as fh:
        encoding = text_encoding(fh.read(2))
    for index, (start, lines) in enumerate(_msp_blocks(options.path, encoding)):
        yield from _msp_record(options, index, start, lines)


def _msp_blocks(path: Path, encoding: str) -> Iterator[tuple[int, list[tuple[int, str]]]]:
    """``(first line, [(line number, text)])`` per record: a record ends at a blank line after its MS2 peak count
    (MS-DIAL's MAT keeps MS1 and MS2 in one record) or where the next ``NAME:`` begins."""
    block: list[tuple[int, str]] = []
    seen_ms2_count = False
    ms_type = "MS2"
    with open_text(path, encoding) as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            key = line.split(":", 1)[0].strip().lower() if ":" in line else ""
            if not line:
                if block and seen_ms2_count:
                    yield block[0][0], block
                    block, seen_ms2_count, ms_type = [], False, "MS2"
                continue
            if key == "name" and block and any(_peak(t) for _, t in block):
                yield block[0][0], block
                block, seen_ms2_count, ms_type = [], False, "MS2"
            if key == "mstype":
                ms_type = line.split(":", 1)[1].strip().upper()
            if re.match(r"num\s*peaks", key) and ms_type != "MS1":
                seen_ms2_count = True
            block.append((lineno, line))
    if block:
        yield block[0][0], block


def _msp_record(options: ReadOptions, index: int, start: int,
                lines: list[tuple[int, str]]) -> Iterator[Spectrum | SkippedRecord | SurveyScan]:
    fields: dict[str, str] = {}
    peaks: dict[str, list[tuple[float, float]]] = {"MS1": [], "MS2": []}
    ms_type, bad_peak = "MS2", None
    for lineno, line in lines:
        point = _peak(line)
        if point is not None and (":" not in line or re.match(r"^[\d.eE+-]+\s", line)):
            peaks.setdefault(ms_type, []).append(point)
            continue
        if ":" not in line:
            bad_peak = bad_peak or (lineno, line)
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        key = key.lower()
        if key == "mstype":
            ms_type = value.upper()
        elif not re.match(r"num\s*peaks", key):
            fields.setdefault(key, value)
    feature = _first(fields, _MSP_ID_KEYS) or str(index + 1)
    metadata = {**fields, "feature_id": feature, "record_line": str(start)}
    rt = _msp_rt(fields, metadata)
    polarity = _MSP_POLARITY.get((_first(fields, ("ionmode", "ion_mode", "polarity")) or "").lower())
    if peaks.get("MS1") and options.survey_scans:
        mz, intensity = (np.array(a, dtype=np.float64) for a in zip(*peaks["MS1"]))
        keep = np.isfinite(mz) & np.isfinite(intensity) & (mz > 0) & (intensity > 0)
        if keep.any():
            yield SurveyScan(id=feature, index=index, retention_time=rt, polarity=polarity, mz=mz[keep],
                             intensity=intensity[keep], source=options.source)
    if bad_peak is not None:
        yield skipped_record(options, index, feature,
                             f"line {bad_peak[0]}: {bad_peak[1]!r} is neither 'KEY: value' nor a peak 'm/z intensity'")
        return
    ms2 = peaks.get("MS2") or []
    rec = RawRecord(index=index, spectrum_id=feature, precursor_mz=None,
                    mz=np.array([p[0] for p in ms2], dtype=np.float64),
                    intensity=np.array([p[1] for p in ms2], dtype=np.float64), metadata=metadata)
    precursor = _first(fields, ("precursormz", "precursor_mz", "precursor mz"))
    try:
        if precursor is not None:
            try:
                rec.precursor_mz = float(precursor)
            except ValueError:
                raise SpectrumError(f"record at line {start}: PRECURSORMZ {precursor!r} is not a number") from None
    except SpectrumError as e:
        yield skipped_record(options, index, feature, str(e))
        return
    rec.polarity = polarity
    rec.adduct = _first(fields, ("precursortype", "precursor_type", "adduct", "ion"))
    rec.formula = _first(fields, ("formula",))
    rec.smiles = _first(fields, ("smiles",))
    rec.inchikey = _first(fields, ("inchikey",))
    rec.retention_time = rt
    yield build_spectrum(options, rec)


def _msp_rt(fields: Mapping[str, str], metadata: dict[str, str]) -> float | None:
    """MS-DIAL writes RETENTIONTIME in minutes (``-1``: none)."""
    from engine.spectra.mgf import _rt_from_text

    text = _first(fields, ("retentiontime", "retention_time", "rt"))
    return None if text is None else _rt_from_text(text, metadata)


# ----------------------------------------------------------------------------------------------
# SIRIUS .ms
# ----------------------------------------------------------------------------------------------

_MS1_BLOCKS = ("ms1", "ms1peaks", "ms1merged")
_MS2_BLOCKS = ("ms2", "ms2peaks", "ms2merged", "collision")


def iter_sirius_ms(options: ReadOptions) -> Iterator[Spectrum | SkippedRecord | SurveyScan]:
    """The compounds of a SIRIUS ``.ms`` file: per ``>compound``, its ``>ms1`` blocks as survey scans (with
    ``options.survey_scans``) and each ``>ms2``/``>collision`` block as an MS2 spectrum, all with the compound's
    name as ``metadata["feature_id"]``."""
    with open_binary(options.path) as fh:
        encoding = text_encoding(fh.read(2))
    compound: list[tuple[int, str]] = []
    index = 0
    with open_text(options.path, encoding) as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if line.lower().startswith(">compound") and compound:
                items = list(_sirius_compound(options, index, compound))
                index += max(1, len(items))
                yield from items
                compound = []
            if line:
                compound.append((lineno, line))
    if compound:
        yield from _sirius_compound(options, index, compound)


def _sirius_compound(options: ReadOptions, index: int,
                     lines: list[tuple[int, str]]) -> Iterator[Spectrum | SkippedRecord | SurveyScan]:
    fields: dict[str, str] = {}
    blocks: list[tuple[str, str, int, list[tuple[float, float]]]] = []  # (kind, label, line, peaks)
    for lineno, line in lines:
        if line.startswith(">"):
            key, _, value = line[1:].partition(" ")
            key, value = key.strip().lower(), value.strip()
            if key in _MS1_BLOCKS or key in _MS2_BLOCKS:
                blocks.append(("MS1" if key in _MS1_BLOCKS else "MS2", line[1:].strip(), lineno, []))
            else:
                fields.setdefault(key, value)
        elif line.startswith("#"):
            key, _, value = line[1:].partition(" ")
            fields.setdefault(key.strip().lower(), value.strip())
        else:
            point = _peak(line)
            if point is None or not blocks:
                where = "before any >ms1/>ms2 block" if point is not None else "is not a peak 'm/z intensity'"
                yield skipped_record(options, index, fields.get("compound") or str(index + 1),
                                     f"line {lineno}: {line!r} {where}")
                return
            blocks[-1][3].append(point)
    feature = _first(fields, ("compound",)) or str(index + 1)
    metadata = {**fields, "feature_id": feature}
    rt = _sirius_rt(fields.get("rt") or fields.get("retention"), metadata)
    charge = _first(fields, ("charge",)) or ""
    ionization = _first(fields, ("ionization",))
    polarity = None
    if ionization is not None:
        polarity = "negative" if ionization.rstrip().endswith("-") else "positive"
        if "?" in ionization:  # "[M+?]+": the polarity only
            ionization = None
    elif charge:
        polarity = "negative" if charge.startswith("-") or charge.endswith("-") else "positive"
    n_ms2 = 0
    for k, (kind, label, lineno, peaks) in enumerate(blocks):
        if kind == "MS1":
            if options.survey_scans and peaks:
                mz, intensity = (np.array(a, dtype=np.float64) for a in zip(*peaks))
                keep = np.isfinite(mz) & np.isfinite(intensity) & (mz > 0) & (intensity > 0)
                if keep.any():
                    yield SurveyScan(id=feature, index=index + k, retention_time=rt, polarity=polarity,
                                     mz=mz[keep], intensity=intensity[keep], source=options.source)
            continue
        n_ms2 += 1
        rec = RawRecord(index=index + k, spectrum_id=feature if n_ms2 == 1 else f"{feature} ({label})",
                        precursor_mz=None, mz=np.array([p[0] for p in peaks], dtype=np.float64),
                        intensity=np.array([p[1] for p in peaks], dtype=np.float64),
                        metadata={**metadata, "ms2_block": f"{label} (line {lineno})"})
        parent = _first(fields, ("parentmass",))
        if parent is not None:
            try:
                rec.precursor_mz = float(parent)
            except ValueError:
                yield skipped_record(options, index + k, feature, f">parentmass {parent!r} is not a number")
                continue
        rec.polarity, rec.adduct, rec.retention_time = polarity, ionization, rt
        rec.charge, rec.charge_signed = _sirius_charge(charge, polarity), False  # SIRIUS: singly charged ions
        rec.formula = _first(fields, ("formula",))
        rec.smiles = _first(fields, ("smiles",))
        rec.inchikey = _first(fields, ("inchikey",))
        yield build_spectrum(options, rec)
    if n_ms2 == 0:
        yield skipped_record(options, index, feature, f"compound {feature!r} has no >ms2 (or >collision) block; "
                                                      "MS-GPT needs its MS/MS spectrum")


def _sirius_charge(text: str, polarity: str | None) -> int:
    """``>charge`` (``1``, ``+1``, ``-1``) as a number of charges; 1 when only the polarity is known."""
    digits = re.sub(r"[^0-9]", "", text)
    if digits:
        return int(digits)
    return 1 if polarity else 0


def _sirius_rt(text: str | None, metadata: dict[str, str]) -> float | None:
    """SIRIUS writes ``>rt 562.3s`` (seconds); ``min`` and ``h`` suffixes are understood, no unit means seconds."""
    if text is None or text.strip().lower() in _MISSING:
        return None
    m = re.match(r"\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)", text)
    factor = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}.get(m.group(2).lower()) if m else None
    if m is None or factor is None or float(m.group(1)) < 0:
        add_warning(metadata, f">rt {text!r} not understood; retention time left empty")
        return None
    return float(m.group(1)) * factor


# ----------------------------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------------------------


def iter_handoff_features(path: str | os.PathLike, kind: str, config=None, counts=None, quant=None,
                          **io_kwargs) -> Iterator:
    """The features of one hand-off file (``kind`` from :func:`handoff_kind`), in file order; skipped records first.

    ``quant``: a :class:`QuantTable` (or a path) whose abundances the features get; without one, a table
    ``<name>_quant.csv`` beside a feature MGF is used (MZmine's GNPS export writes the pair). A file that breaks off
    mid-way gives the features read before, then raises its ``InputFileError``.
    """
    from engine.spectra.features import FeatureConfig, RunCounts
    from engine.spectra.io import iter_spectra

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
    """``<name>_quant.csv`` beside ``<name>.mgf`` (MZmine's GNPS-FBMN export), if it exists."""
    p = Path(path)
    stem = p.name
    for suffix in (".gz", ".mgf"):
        stem = stem[: -len(suffix)] if stem.lower().endswith(suffix) else stem
    candidate = p.with_name(stem + QUANT_SUFFIX)
    return candidate if candidate.is_file() else None


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
    values = dict(zip(table.samples, row.values))
    metadata = {**feature.spectrum.metadata, ABUNDANCE_KEY: repr(max(row.values, default=0.0)),
                SAMPLES_KEY: json.dumps(values), ABUNDANCE_SOURCE_KEY: f"{Path(table.path).name} row {row.id} (by {how})",
                "quant_row_id": row.id}
    return with_metadata(feature, metadata)


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
