"""The record readers of two tools' feature exports, for :func:`engine.spectra.io.iter_spectra`: MS-DIAL's MSP/MAT
export (and NIST/MoNA-style MSP) and SIRIUS ``.ms`` files, record by record, as :mod:`engine.spectra.mgf` reads MGF:
each MS2 block a :class:`~engine.spectra.spectrum.Spectrum` (or a :class:`~engine.spectra.spectrum.SkippedRecord`
naming the line and the bad value), each MS1 block a :class:`~engine.spectra.spectrum.SurveyScan` whose id is the
record's feature ID (with ``survey_scans``). The keys each reads are listed in :mod:`engine.spectra.handoff`, which
makes features of them. May import :mod:`engine.spectra.reading` and :mod:`engine.spectra.mgf`; never Qt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from engine.errors import SpectrumError
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

MISSING = frozenset({"", "n/a", "na", "null", "none", "nan", "-1"})  # MS-DIAL writes -1 for "none"


def first(values: Mapping[str, str], keys: Iterable[str]) -> str | None:
    """The first of ``keys`` with a value that is not missing, stripped."""
    for key in keys:
        value = values.get(key)
        if value is not None and value.strip().lower() not in MISSING:
            return value.strip()
    return None


def _peak(line: str) -> tuple[float, float] | None:
    """``m/z intensity`` (space, tab or ``;``/``,`` separated, an MS-DIAL comment after them allowed)."""
    parts = re.split(r"[\s;,]+", line.strip().strip(";"))
    try:
        return float(parts[0]), float(parts[1])
    except (ValueError, IndexError):
        return None


# ----------------------------------------------------------------------------------------------
# MS-DIAL MSP / MAT records
# ----------------------------------------------------------------------------------------------

_MSP_ID_KEYS = ("alignmentid", "alignment id", "scannumber", "peakid", "feature_id", "db#", "accession")
_MSP_POLARITY = {"positive": "positive", "p": "positive", "pos": "positive",
                 "negative": "negative", "n": "negative", "neg": "negative"}


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
    feature = first(fields, _MSP_ID_KEYS) or str(index + 1)
    metadata = {**fields, "feature_id": feature, "record_line": str(start)}
    rt = _msp_rt(fields, metadata)
    polarity = _MSP_POLARITY.get((first(fields, ("ionmode", "ion_mode", "polarity")) or "").lower())
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
    precursor = first(fields, ("precursormz", "precursor_mz", "precursor mz"))
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
    rec.adduct = first(fields, ("precursortype", "precursor_type", "adduct", "ion"))
    rec.formula = first(fields, ("formula",))
    rec.smiles = first(fields, ("smiles",))
    rec.inchikey = first(fields, ("inchikey",))
    rec.retention_time = rt
    yield build_spectrum(options, rec)


def _msp_rt(fields: Mapping[str, str], metadata: dict[str, str]) -> float | None:
    """MS-DIAL writes RETENTIONTIME in minutes (``-1``: none)."""
    from engine.spectra.mgf import _rt_from_text

    text = first(fields, ("retentiontime", "retention_time", "rt"))
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
    feature = first(fields, ("feature_id", "featureid", "compound")) or str(index + 1)  # JenaMsWriter: >feature_id
    metadata = {**fields, "feature_id": feature}
    rt = _sirius_rt(fields.get("rt") or fields.get("retention"), metadata)
    charge = first(fields, ("charge",)) or ""
    ionization = first(fields, ("ionization",))
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
        parent = first(fields, ("parentmass",))
        if parent is not None:
            try:
                rec.precursor_mz = float(parent)
            except ValueError:
                yield skipped_record(options, index + k, feature, f">parentmass {parent!r} is not a number")
                continue
        rec.polarity, rec.adduct, rec.retention_time = polarity, ionization, rt
        rec.charge, rec.charge_signed = _sirius_charge(charge, polarity), False  # SIRIUS: singly charged ions
        rec.formula = first(fields, ("formula",))
        rec.smiles = first(fields, ("smiles",))
        rec.inchikey = first(fields, ("inchikey",))
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
    if text is None or text.strip().lower() in MISSING:
        return None
    m = re.match(r"\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)", text)
    factor = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}.get(m.group(2).lower()) if m else None
    if m is None or factor is None or float(m.group(1)) < 0:
        add_warning(metadata, f">rt {text!r} not understood; retention time left empty")
        return None
    return float(m.group(1)) * factor
