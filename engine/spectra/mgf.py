"""Read the records of an MGF file (see :mod:`engine.spectra.io` for the rules): split the file into
``BEGIN IONS`` ... ``END IONS`` blocks, streaming, and read each block's ``KEY=value`` lines and peaks on its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping

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
from engine.spectra.spectrum import PRECURSOR_DECIMALS_KEY, SkippedRecord, Spectrum, SurveyScan, written_decimals

MISSING = frozenset({"", "n/a", "na", "null", "none", "nan"})

# MGF keys (lower case) by meaning, in order of preference.
_ID_KEYS = ("title", "feature_id", "scans")
_PRECURSOR_KEYS = ("precursor_mz", "precursormz")  # after PEPMASS
_ADDUCT_KEYS = ("adduct", "ion", "iontype", "precursor_type", "precursortype", "adductionname")  # last: MS-DIAL
_IONMODE_KEYS = ("ionmode", "ion_mode", "polarity")
_FORMULA_KEYS = ("formula",)
_SMILES_KEYS = ("smiles",)
_INCHIKEY_KEYS = ("inchikey", "inchiaux")
_RT_MINUTES_KEYS = ("retention_time", "retentiontime", "rtinminutes")  # RTINMINUTES: MS-DIAL's MGF export

_POLARITY_WORDS = {
    "positive": "positive", "pos": "positive", "p": "positive", "+": "positive",
    "negative": "negative", "neg": "negative", "n": "negative", "-": "negative",
}  # fmt: skip

_RT = re.compile(r"\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)")
_RT_UNITS = {
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 0.001, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
}  # fmt: skip


def iter_mgf(options: ReadOptions) -> Iterator[Spectrum | SkippedRecord | SurveyScan]:
    """Split the file into records, streaming, and read each on its own.

    With ``options.survey_scans``, an ``MSLEVEL=1`` record (the isotope pattern MZmine's SIRIUS export writes
    beside each feature's MS2) is a :class:`~engine.spectra.spectrum.SurveyScan` whose id is the record's
    ``FEATURE_ID`` (else its id); without, it is skipped ("only MS2 spectra are used").

    PEPMASS and CHARGE go through pyteomics.mgf's own parsers, so they mean what they mean to
    pyteomics. Records are not handed to a pyteomics reader: a reader over the whole file stops
    at the first malformed record, and one reader per record stays alive in reference cycles
    (memory grows by ~3 KB a record until a full garbage collection).
    """
    header: list[tuple[int, str]] = []  # (line number, "KEY=value") before the first record
    block: list[tuple[int, str]] | None = None
    index = 0
    with open_binary(options.path) as fh:
        encoding = text_encoding(fh.read(2))
    with open_text(options.path, encoding) as fh:
        for lineno, line in enumerate(fh, 1):
            stripped = line.strip()
            marker = stripped.upper()
            if block is None:
                if marker == "BEGIN IONS":
                    block = []
                    start = lineno
                elif index == 0 and "=" in stripped and stripped[0] not in "#;!/":
                    header.append((lineno, stripped))
                continue
            if marker == "BEGIN IONS":
                yield skipped_record(options, index, _block_id(block, index),
                                     f"the record starting at line {start} has no END IONS before line {lineno}")
                index += 1
                block, start = [], lineno
            elif marker == "END IONS":
                yield _mgf_record(options, index, start, header, block)
                index += 1
                block = None
            else:
                block.append((lineno, stripped))
    if block is not None:
        yield skipped_record(options, index, _block_id(block, index),
                             f"the file ends inside the record starting at line {start} (no END IONS); "
                             "it may be truncated")


def _split_kv(line: str) -> tuple[str, str] | None:
    if "=" not in line or line[0] in "#;!/":
        return None
    key, value = line.split("=", 1)
    return key.strip().lower(), value.strip()


def _block_id(block: list[tuple[int, str]], index: int) -> str:
    kv = dict(filter(None, (_split_kv(line) for _, line in block)))
    return _first(kv, _ID_KEYS) or str(index)


def _mgf_record(
    options: ReadOptions, index: int, start: int, header: list[tuple[int, str]], block: list[tuple[int, str]]
) -> Spectrum | SkippedRecord:
    """One record: ``KEY=value`` lines (header first, so the record's own values win) and peaks."""
    raw: dict[str, str] = {}
    line_of: dict[str, int] = {}
    mz: list[float] = []
    intensity: list[float] = []
    bad_peak: tuple[int, str] | None = None
    for lineno, line in header + block:
        kv = _split_kv(line)
        if kv is not None:
            raw[kv[0]], line_of[kv[0]] = kv[1], lineno
        elif line and line[0] not in "#;!/":
            parts = line.split()
            try:
                mz.append(float(parts[0]))
                intensity.append(float(parts[1]))
            except (ValueError, IndexError):
                del mz[len(intensity):]
                bad_peak = bad_peak or (lineno, line)
    spectrum_id = _first(raw, _ID_KEYS) or str(index)
    if options.survey_scans and _ms_level(_first(raw, ("mslevel",)) or "") == "1" and bad_peak is None:
        return _survey_record(options, index, _first(raw, ("feature_id",)) or spectrum_id, raw, mz, intensity)
    garbled = [key.upper() for key, value in raw.items() if "\ufffd" in value]
    if garbled:
        add_warning(raw, f"{', '.join(garbled)} held bytes that are not UTF-8 (Latin-1?), shown as '\ufffd'; "
                         "save the file as UTF-8 to keep them")
    try:
        if bad_peak is not None:
            raise SpectrumError(f"line {bad_peak[0]}: peak {bad_peak[1]!r} is not 'm/z intensity' (two numbers)")
        rec = RawRecord(
            index=index,
            spectrum_id=spectrum_id,
            precursor_mz=None,
            mz=np.array(mz, dtype=np.float64),
            intensity=np.array(intensity, dtype=np.float64),
            metadata=dict(raw),
        )
        _mgf_fill(rec, raw, line_of)
    except SpectrumError as e:
        return skipped_record(options, index, spectrum_id, str(e))
    return build_spectrum(options, rec)


def _survey_record(options: ReadOptions, index: int, record_id: str, raw: Mapping[str, str], mz: list[float],
                   intensity: list[float]) -> SurveyScan | SkippedRecord:
    """An ``MSLEVEL=1`` record as a survey scan (its usable peaks, its RTINSECONDS, the polarity of its CHARGE)."""
    mz_a, int_a = np.array(mz, dtype=np.float64), np.array(intensity, dtype=np.float64)
    keep = np.isfinite(mz_a) & np.isfinite(int_a) & (mz_a > 0) & (int_a > 0)
    if not keep.any():
        return skipped_record(options, index, record_id, "the MSLEVEL=1 record has no usable peaks")
    rt = None
    try:
        rt = float(raw["rtinseconds"]) if _first(raw, ("rtinseconds",)) is not None else None
    except ValueError:
        rt = None
    charge = _first(raw, ("charge",)) or ""
    mode = _POLARITY_WORDS.get((_first(raw, _IONMODE_KEYS) or "").lower())
    polarity = mode or ("negative" if charge.endswith("-") or charge.startswith("-") else
                        "positive" if charge else None)
    return SurveyScan(id=record_id, index=index, retention_time=rt if rt is None or rt >= 0 else None,
                      polarity=polarity, mz=mz_a[keep], intensity=int_a[keep], source=options.source)


def _mgf_fill(rec: RawRecord, raw: Mapping[str, str], line_of: Mapping[str, int]) -> None:
    """Precursor, charge, polarity, annotations and retention time of an MGF record."""
    from pyteomics.auxiliary import PyteomicsError
    from pyteomics.mgf import MGFBase

    level = _first(raw, ("mslevel",))
    if level is not None and _ms_level(level) != "2":
        raise SpectrumError(f"MSLEVEL is {level!r}; only MS2 spectra are used")
    charge_text, charge_key = _first(raw, ("charge",)), "charge"
    pepmass = _first(raw, ("pepmass",))
    if pepmass is not None:
        try:
            (rec.precursor_mz, _), pepmass_charge = MGFBase.parse_pepmass_charge(pepmass)
        except (PyteomicsError, ValueError):
            raise SpectrumError(
                f"line {line_of['pepmass']}: PEPMASS {pepmass!r} is not a number "
                f"(m/z, optionally intensity and charge)"
            ) from None
        if pepmass_charge:  # as in pyteomics, a charge written in PEPMASS wins
            charge_text, charge_key = pepmass_charge, "pepmass"
        precursor_text = pepmass
    else:
        precursor_text = _first(raw, _PRECURSOR_KEYS)
        if precursor_text is not None:
            try:
                rec.precursor_mz = float(precursor_text)
            except ValueError:
                raise SpectrumError(f"precursor m/z {precursor_text!r} is not a number") from None
    if precursor_text is not None and written_decimals(precursor_text) is not None:
        rec.metadata[PRECURSOR_DECIMALS_KEY] = str(written_decimals(precursor_text))
    if charge_text is not None:
        try:
            charges = [int(c) for c in MGFBase.parse_precursor_charge(charge_text, list_only=True)]
        except PyteomicsError:
            raise SpectrumError(
                f"line {line_of[charge_key]}: charge {charge_text!r} is not a charge such as 1+ or 1-"
            ) from None
        if len(charges) > 1:
            raise SpectrumError(f"CHARGE lists several charges ({charge_text}); give one, e.g. 1+")
        rec.charge = charges[0]
        rec.charge_signed = "+" in charge_text or "-" in charge_text
    mode = _first(raw, _IONMODE_KEYS)
    if mode is not None:
        rec.polarity = _POLARITY_WORDS.get(mode.lower())
        if rec.polarity is None:
            raise SpectrumError(f"IONMODE {mode!r} is neither positive nor negative")
    rec.adduct = _first(raw, _ADDUCT_KEYS)
    rec.formula = _first(raw, _FORMULA_KEYS)
    rec.smiles = _first(raw, _SMILES_KEYS)
    rec.inchikey = _first(raw, _INCHIKEY_KEYS)
    seconds = _first(raw, ("rtinseconds",))
    if seconds is not None:
        try:
            rec.retention_time = float(seconds)
        except ValueError:  # the retention time is not needed to elucidate the spectrum
            add_warning(rec.metadata, f"line {line_of['rtinseconds']}: RTINSECONDS {seconds!r} is not a number "
                                      "of seconds; retention time left empty")
    else:
        text = _first(raw, _RT_MINUTES_KEYS)
        if text is not None:
            rec.retention_time = _rt_from_text(text, rec.metadata)
    if rec.retention_time is not None and not (0 <= rec.retention_time < math.inf):
        add_warning(rec.metadata, f"retention time {rec.retention_time:g} s is not a time >= 0; left empty")
        rec.retention_time = None


def _ms_level(text: str) -> str:
    """``2`` for ``2``, ``MS2`` or ``ms2`` (MZmine's library export writes ``MSLEVEL=MS2``)."""
    text = text.strip()
    return text[2:].strip() if text[:2].upper() == "MS" else text


def _first(values: Mapping[str, str], keys: Iterable[str]) -> str | None:
    for key in keys:
        value = values.get(key)
        if value is not None and value.strip().lower() not in MISSING:
            return value.strip()
    return None


def _rt_from_text(text: str, metadata: dict[str, str]) -> float | None:
    """Seconds from free text such as ``3.44``, ``3.44 min``, ``90 s``; no unit means minutes."""
    m = _RT.match(text)
    if m is not None:
        unit = m.group(2).lower()
        factor = _RT_UNITS.get(unit) if unit else 60.0
        if factor is not None:
            return float(m.group(1)) * factor
    add_warning(metadata, f"retention time {text!r} not understood; left empty")
    return None
