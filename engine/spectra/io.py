"""Read MS/MS spectra from MGF and mzML files (optionally gzip-compressed), one record at a time.

:func:`iter_spectra` streams a file and yields a :class:`~engine.spectra.spectrum.Spectrum` for every usable
MS2 record and a :class:`~engine.spectra.spectrum.SkippedRecord` (with the reason) for every unusable one;
the rest of the file goes on. Problems with the file as a whole (missing, a folder, unreadable,
empty, binary, neither MGF nor mzML, malformed XML, truncated gzip, an mzML without MS2 scans) raise one
:class:`~engine.errors.InputFileError`; it can also come mid-way, after earlier records.

Rules (docs/bad_inputs.md lists what each bad input gives, generated from tests/bad_inputs.py):

* **Format**: the extension (``.mgf``, ``.mzML``, either + ``.gz``) decides, and the first 64 KB
  must confirm it; other extensions are accepted when the content is clearly MGF or mzML.
  Compression is recognised by gzip's magic bytes, whatever the name says.
* **Text**: UTF-8 (a byte-order mark is dropped), or UTF-16 when the file starts with its
  byte-order mark; any line ends (LF, CR LF, CR). Bytes that are not UTF-8 (a Latin-1 name) become
  U+FFFD and the record gets a note naming the keys.
* **MGF keys** are read case-insensitively with the aliases of ``conventions.md``; values
  ``N/A``, ``NA``, ``null``, ``none``, ``nan`` and empty mean missing (``unknown`` too for adducts).
  ``metadata`` keeps every ``KEY=value`` of the record (lower-case keys, header lines included).
* **Charge**: ``CHARGE=0`` means unknown; an unsigned charge (``1``, mzML's charge state) takes
  its sign from the polarity, else positive. Only singly charged precursors are kept.
* **Polarity**: from ``IONMODE``, the charge sign and the adduct; a conflict skips the record.
* **Adduct**: from ``ADDUCT``/``ION``/``IONTYPE``/``PRECURSOR_TYPE``/``PRECURSORTYPE``; none
  given stays ``None``. ``default_adduct`` fills in records without one when polarity and charge
  agree with it (a polarity-switching file keeps its other-polarity scans without an adduct).
* **Formula**: ``FORMULA``, else ``default_formula``; it must use supported elements and, with an
  adduct, give the precursor m/z within ``max(tol_da, tol_ppm)`` (default 0.01 Da / 10 ppm), or
  within the precision the precursor is written with when that is coarser: MassBank-style nominal
  values (``PEPMASS=163`` for an ion at 163.1077) are a check to 1 Da, ``163.1`` to 0.1 Da (the
  decimals are kept in ``metadata["precursor_mz_decimals"]``).
* **Precursor m/z** must be a number > 0 (else the record is skipped).
* **Retention time** (seconds in the Spectrum): ``RTINSECONDS`` is seconds (text that is not a
  number leaves it empty, with a note: it is not needed to elucidate the spectrum);
  ``RETENTION_TIME``/``RETENTIONTIME`` are free text as MassBank writes them: the first number,
  in the unit written right after it (``s``/``sec``, ``min``, ``h``), minutes when no unit is
  written; text without a leading number gives ``None`` and a warning. mzML: scan start time in
  its stated unit.
* **Peaks**: peaks with NaN/infinite values, m/z <= 0 or intensity <= 0 are dropped (counted in
  ``metadata["warnings"]``); a record with no peak left is skipped. Peaks are sorted by m/z but
  not merged (see :func:`engine.spectra.spectrum.sort_and_merge_peaks`).
* **Reference SMILES** that RDKit cannot parse are dropped (``smiles=None``) with a note in
  ``metadata["warnings"]``; the spectrum itself stays usable.
* **mzML**: only MS2 scans (MS:1000511 = 2) are records; MS1 scans are yielded as
  :class:`~engine.spectra.spectrum.SurveyScan` with ``survey_scans=True`` (else passed over, as MSn>2
  scans always are), but a file without any MS2 scan is an ``InputFileError``. Precursor from the selected
  ion (MS:1000744), else the isolation window target (MS:1000827); charge MS:1000041; polarity
  MS:1000130/MS:1000129; ``id`` is the native scan id; ``metadata`` keeps the precursor's survey
  scan (``precursor_scan_id``, from ``spectrumRef``) and intensity (``precursor_intensity``).
  Peak arrays are decoded scan by scan, so a damaged array skips its scan only.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from engine.chem.adducts import Adduct, parse_adduct_or_none
from engine.chem.formula import normalize_formula
from engine.chem.molecules import mol_from_smiles
from engine.errors import AdductError, FormulaError, InputFileError, SpectrumError
from engine.spectra.spectrum import (
    DEFAULT_TOL_DA,
    DEFAULT_TOL_PPM,
    PRECURSOR_DECIMALS_KEY,
    SkippedRecord,
    Spectrum,
    SurveyScan,
    check_formula_matches_precursor,
    written_decimals,
)

MISSING = frozenset({"", "n/a", "na", "null", "none", "nan"})

_GZIP_MAGIC = b"\x1f\x8b"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SNIFF_BYTES = 64 * 1024
_SUPPORTED = "supported are .mgf and .mzML files, optionally gzip-compressed (.mgf.gz, .mzML.gz)"

# MGF keys (lower case) by meaning, in order of preference.
_ID_KEYS = ("title", "feature_id", "scans")
_PRECURSOR_KEYS = ("precursor_mz", "precursormz")  # after PEPMASS
_ADDUCT_KEYS = ("adduct", "ion", "iontype", "precursor_type", "precursortype")
_IONMODE_KEYS = ("ionmode", "ion_mode", "polarity")
_FORMULA_KEYS = ("formula",)
_SMILES_KEYS = ("smiles",)
_INCHIKEY_KEYS = ("inchikey", "inchiaux")
_RT_MINUTES_KEYS = ("retention_time", "retentiontime")

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


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def iter_spectra(
    path: str | os.PathLike,
    *,
    default_adduct: str | Adduct | None = None,
    default_formula: str | None = None,
    tol_ppm: float = DEFAULT_TOL_PPM,
    tol_da: float = DEFAULT_TOL_DA,
    survey_scans: bool = False,
) -> Iterator[Spectrum | SkippedRecord | SurveyScan]:
    """Stream the spectra of an MGF / mzML file (``.gz`` too): ``Spectrum`` or ``SkippedRecord`` each.

    The file is checked at once (``InputFileError`` before the first record); its records are read
    lazily. ``default_adduct`` / ``default_formula`` fill in records that give none (see the module
    notes); a bad default raises ``AdductError`` / ``FormulaError`` here. ``survey_scans=True``
    also yields the MS1 scans of an mzML run as :class:`~engine.spectra.spectrum.SurveyScan` (in file
    order, between the MS2 scans), so callers can count them and use them as precursor evidence.
    """
    options = _Options.create(path, default_adduct, default_formula, tol_ppm, tol_da, survey_scans)
    fmt = detect_format(path)
    records = _iter_mgf(options) if fmt == "mgf" else _iter_mzml(options)
    return _file_errors_wrapped(options.source, fmt, records)


def read_spectra(
    path: str | os.PathLike, **kwargs
) -> tuple[list[Spectrum], list[SkippedRecord]]:
    """Read a whole file: (usable spectra, skipped records). Takes the keywords of :func:`iter_spectra`."""
    spectra: list[Spectrum] = []
    skipped: list[SkippedRecord] = []
    for item in iter_spectra(path, **kwargs):
        (skipped if isinstance(item, SkippedRecord) else spectra).append(item)
    return spectra, skipped


def detect_format(path: str | os.PathLike) -> str:
    """``"mgf"`` or ``"mzml"`` from the extension, confirmed by the content; else ``InputFileError``."""
    p = Path(path)
    head = _read_head(p)
    encoding = _text_encoding(head)
    if b"\x00" in head and encoding != "utf-16":
        raise InputFileError(p, f"the file holds binary data, not text; {_SUPPORTED}.")
    text = head.decode(encoding, errors="replace").replace("\r\n", "\n").replace("\r", "\n")  # any line ends
    is_mzml = "<mzML" in text or "<indexedmzML" in text
    is_mgf = re.search(r"^\s*BEGIN IONS\s*$", text, re.MULTILINE | re.IGNORECASE) is not None
    name = p.name.lower().removesuffix(".gz")
    if name.endswith(".mgf"):
        if is_mgf:
            return "mgf"
        if is_mzml:
            raise InputFileError(p, "the file is named .mgf but holds mzML; rename it to .mzML.")
        raise InputFileError(p, "not an MGF file: no 'BEGIN IONS' line in its first 64 KB.")
    if name.endswith(".mzml"):
        if is_mzml:
            return "mzml"
        if is_mgf:
            raise InputFileError(p, "the file is named .mzML but holds MGF; rename it to .mgf.")
        what = "XML without an <mzML> element" if text.lstrip().startswith("<") else "no <mzML> element"
        raise InputFileError(p, f"not an mzML file: {what} in its first 64 KB.")
    if is_mzml:
        return "mzml"
    if is_mgf:
        return "mgf"
    raise InputFileError(p, f"neither MGF ('BEGIN IONS') nor mzML (<mzML>) content; {_SUPPORTED}.")


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")


def _text_encoding(head: bytes) -> str:
    """UTF-16 when the content starts with its byte-order mark, else UTF-8 (a UTF-8 BOM is dropped)."""
    return "utf-16" if head[:2] in _UTF16_BOMS else "utf-8-sig"


def _open_text(path: Path, encoding: str) -> IO[str]:
    # Undecodable bytes (Latin-1 names in a UTF-8 file) become U+FFFD, and the record gets a note.
    return io.TextIOWrapper(_open_binary(path), encoding=encoding, errors="replace")


def _read_head(path: Path) -> bytes:
    """First 64 KB of the (decompressed) content, with a readable error for unreadable files."""
    if not path.exists():
        raise InputFileError(path, "no such file; check the path and the file name.")
    if path.is_dir():
        raise InputFileError(path, "this is a folder, not a file; choose an .mgf or .mzML file.")
    try:
        if path.stat().st_size == 0:
            raise InputFileError(path, "the file is empty (0 bytes).")
        with _open_binary(path) as fh:
            head = fh.read(_SNIFF_BYTES)
    except PermissionError:
        raise InputFileError(path, "no permission to read this file.") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputFileError(path, f"the gzip data is truncated or corrupt ({e}).") from e
    except OSError as e:
        raise InputFileError(path, f"cannot read the file ({type(e).__name__}: {e}).") from e
    if not head.strip(b" \t\r\n\x0b\x0c\xef\xbb\xbf\xff\xfe\x00"):  # white space, byte-order marks
        raise InputFileError(
            path, "the file is empty after decompression." if _is_gzip(path) else "the file holds only white space."
        )
    return head


def _file_errors_wrapped(source: str, fmt: str, records: Iterable) -> Iterator:
    """Turn every error of the file as a whole into one InputFileError naming the cause."""
    from lxml import etree
    from pyteomics.auxiliary import PyteomicsError

    label = "MGF" if fmt == "mgf" else "mzML"
    try:
        yield from records
    except InputFileError:
        raise
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputFileError(
            source, f"the gzip data is truncated or corrupt ({e}); records before it were read."
        ) from e
    except etree.XMLSyntaxError as e:
        raise InputFileError(source, f"malformed XML, the file may be truncated or damaged ({_xml_problem(e)}).") from e
    except PermissionError:
        raise InputFileError(source, "no permission to read this file.") from None
    except OSError as e:
        raise InputFileError(source, f"cannot read the file ({type(e).__name__}: {e}).") from e
    except PyteomicsError as e:
        raise InputFileError(source, f"pyteomics cannot read this {label} file ({e.message}).") from e
    except Exception as e:  # the single file-level wrapper: name what went wrong, never a traceback
        raise InputFileError(source, f"cannot read this {label} file ({type(e).__name__}: {e}).") from e


def _xml_problem(e) -> str:
    """libxml2's message once, with where it happened: 'Premature end of data in tag binary at line 360'."""
    message = re.sub(r"(\s+line \d+)?, line \d+, column \d+$", "", str(e.msg or e).strip())
    line, column = e.position if e.position else (None, None)
    return f"{message} at line {line}, column {column}" if line else message


# ----------------------------------------------------------------------------------------------
# Turning one record into a Spectrum
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    path: Path
    source: str
    default_adduct: Adduct | None
    default_formula: str | None
    tol_ppm: float
    tol_da: float
    survey_scans: bool = False

    @classmethod
    def create(cls, path, default_adduct, default_formula, tol_ppm, tol_da, survey_scans=False) -> _Options:
        adduct = parse_adduct_or_none(default_adduct)
        if adduct is not None and abs(adduct.charge) != 1:
            raise AdductError(
                f"Default adduct {adduct.name} has charge {adduct.charge:+d}; only singly charged "
                f"adducts such as [M+H]+ or [M-H]- can be used."
            )
        formula = normalize_formula(default_formula) if default_formula else None
        return cls(Path(path), str(path), adduct, formula, float(tol_ppm), float(tol_da), bool(survey_scans))


@dataclass
class _Record:
    """What one record says, before validation (shared by MGF and mzML)."""

    index: int
    spectrum_id: str
    precursor_mz: float | None
    charge: int = 0
    charge_signed: bool = True
    polarity: str | None = None
    adduct: str | None = None
    formula: str | None = None
    smiles: str | None = None
    inchikey: str | None = None
    retention_time: float | None = None
    mz: np.ndarray | None = None
    intensity: np.ndarray | None = None
    metadata: dict[str, str] | None = None


def _skip(options: _Options, index: int, spectrum_id: str, reason: str, rec: _Record | None = None) -> SkippedRecord:
    """A skipped record; with ``rec``, it keeps the record's usable peaks (finite, > 0, sorted by m/z)."""
    if rec is None or rec.mz is None or rec.intensity is None or rec.mz.shape != rec.intensity.shape:
        return SkippedRecord(options.source, index, spectrum_id, reason)
    keep = np.isfinite(rec.mz) & np.isfinite(rec.intensity) & (rec.mz > 0) & (rec.intensity > 0)
    order = np.argsort(rec.mz[keep], kind="stable")
    mz, intensity = rec.mz[keep][order], rec.intensity[keep][order]
    mz.flags.writeable = intensity.flags.writeable = False
    return SkippedRecord(options.source, index, spectrum_id, reason, mz=mz, intensity=intensity,
                         retention_time=rec.retention_time, polarity=rec.polarity)


def _warn(metadata: dict[str, str], message: str) -> None:
    metadata["warnings"] = f"{metadata['warnings']}; {message}" if metadata.get("warnings") else message


def _clean_peaks(mz: np.ndarray, intensity: np.ndarray, metadata: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
    keep = np.isfinite(mz) & np.isfinite(intensity) & (mz > 0) & (intensity > 0)
    n_bad = int(keep.size - np.count_nonzero(keep))
    if n_bad == keep.size:
        if keep.size == 0:
            raise SpectrumError("no peaks: the record has no 'm/z intensity' lines")
        raise SpectrumError(f"no usable peaks: all {keep.size} peaks have zero, negative or NaN intensity or m/z")
    if n_bad:
        _warn(metadata, f"{n_bad} peak{'s' if n_bad > 1 else ''} with zero, negative or NaN intensity or m/z dropped")
        return mz[keep], intensity[keep]
    return mz, intensity


def _resolve_charge(rec: _Record, adduct: Adduct | None) -> tuple[int, str | None]:
    """Signed charge (0 = unknown) and polarity, after checking that all sources agree."""
    sources: list[tuple[str, str]] = []  # (polarity, what said so)
    if rec.polarity:
        sources.append((rec.polarity, f"IONMODE is {rec.polarity}"))
    if rec.charge and rec.charge_signed:
        sign = "+" if rec.charge > 0 else "-"
        sources.append(("positive" if rec.charge > 0 else "negative", f"CHARGE is {abs(rec.charge)}{sign}"))
    if adduct is not None:
        sources.append((adduct.polarity, f"ADDUCT {adduct.name} is {adduct.polarity}"))
    polarities = {p for p, _ in sources}
    if len(polarities) > 1:
        first = [w for p, w in sources if p == sources[0][0]]
        other = [w for p, w in sources if p != sources[0][0]]
        raise SpectrumError(
            f"conflicting polarity: {' and '.join(first)} but {' and '.join(other)}; fix the one that is wrong"
        )
    polarity = polarities.pop() if polarities else None
    charge = abs(rec.charge)
    if adduct is not None:
        if charge and charge != abs(adduct.charge):
            raise SpectrumError(
                f"CHARGE {charge} does not match ADDUCT {adduct.name} (charge {abs(adduct.charge)})"
            )
        charge = abs(adduct.charge)
    if charge > 1:
        what = f"adduct {adduct.name}" if adduct is not None else f"charge {charge}"
        raise SpectrumError(f"{what}: only singly charged precursors (charge 1+ or 1-) are supported")
    if charge and polarity is None:
        polarity = "positive"  # an unsigned charge with nothing else to go by: MGF's default
    return (charge if polarity != "negative" else -charge), polarity


def _build(options: _Options, rec: _Record) -> Spectrum | SkippedRecord:
    """Validate one record; every problem becomes a SkippedRecord naming the bad value."""
    metadata = rec.metadata if rec.metadata is not None else {}
    try:
        if rec.precursor_mz is None:
            raise SpectrumError("no precursor m/z (PEPMASS, or the selected ion in mzML)")
        if not (0 < rec.precursor_mz < math.inf):
            raise SpectrumError(f"precursor m/z {rec.precursor_mz:g} is not a positive number; fix PEPMASS "
                                "(or the selected ion m/z in mzML)")
        mz, intensity = _clean_peaks(rec.mz, rec.intensity, metadata)
        adduct = parse_adduct_or_none(rec.adduct)
        charge, polarity = _resolve_charge(rec, adduct)
        default = options.default_adduct
        if adduct is None and default is not None and (polarity in (None, default.polarity)):
            adduct = default
            charge, polarity = default.charge, default.polarity
        formula = normalize_formula(rec.formula) if rec.formula else options.default_formula
        smiles = rec.smiles
        if smiles is not None and mol_from_smiles(smiles) is None:
            _warn(metadata, f"reference SMILES {smiles!r} cannot be parsed by RDKit and was dropped")
            smiles = None
        spectrum = Spectrum(
            id=rec.spectrum_id,
            precursor_mz=rec.precursor_mz,
            mz=mz,
            intensity=intensity,
            adduct=adduct.name if adduct is not None else None,
            charge=charge,
            polarity=polarity,
            formula=formula,
            smiles=smiles,
            inchikey=rec.inchikey,
            retention_time=rec.retention_time,
            metadata=metadata,
            source=options.source,
            index=rec.index,
        )
        return check_formula_matches_precursor(spectrum, options.tol_ppm, options.tol_da)
    except (SpectrumError, FormulaError, AdductError) as e:
        return _skip(options, rec.index, rec.spectrum_id, str(e), rec)


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
    _warn(metadata, f"retention time {text!r} not understood; left empty")
    return None


# ----------------------------------------------------------------------------------------------
# MGF
# ----------------------------------------------------------------------------------------------


def _iter_mgf(options: _Options) -> Iterator[Spectrum | SkippedRecord]:
    """Split the file into records, streaming, and read each on its own.

    PEPMASS and CHARGE go through pyteomics.mgf's own parsers, so they mean what they mean to
    pyteomics. Records are not handed to a pyteomics reader: a reader over the whole file stops
    at the first malformed record, and one reader per record stays alive in reference cycles
    (memory grows by ~3 KB a record until a full garbage collection).
    """
    header: list[tuple[int, str]] = []  # (line number, "KEY=value") before the first record
    block: list[tuple[int, str]] | None = None
    index = 0
    with _open_binary(options.path) as fh:
        encoding = _text_encoding(fh.read(2))
    with _open_text(options.path, encoding) as fh:
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
                yield _skip(options, index, _block_id(block, index),
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
        yield _skip(options, index, _block_id(block, index),
                    f"the file ends inside the record starting at line {start} (no END IONS); it may be truncated")


def _split_kv(line: str) -> tuple[str, str] | None:
    if "=" not in line or line[0] in "#;!/":
        return None
    key, value = line.split("=", 1)
    return key.strip().lower(), value.strip()


def _block_id(block: list[tuple[int, str]], index: int) -> str:
    kv = dict(filter(None, (_split_kv(line) for _, line in block)))
    return _first(kv, _ID_KEYS) or str(index)


def _mgf_record(
    options: _Options, index: int, start: int, header: list[tuple[int, str]], block: list[tuple[int, str]]
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
    garbled = [key.upper() for key, value in raw.items() if "\ufffd" in value]
    if garbled:
        _warn(raw, f"{', '.join(garbled)} held bytes that are not UTF-8 (Latin-1?), shown as '\ufffd'; "
                   "save the file as UTF-8 to keep them")
    try:
        if bad_peak is not None:
            raise SpectrumError(f"line {bad_peak[0]}: peak {bad_peak[1]!r} is not 'm/z intensity' (two numbers)")
        rec = _Record(
            index=index,
            spectrum_id=spectrum_id,
            precursor_mz=None,
            mz=np.array(mz, dtype=np.float64),
            intensity=np.array(intensity, dtype=np.float64),
            metadata=dict(raw),
        )
        _mgf_fill(rec, raw, line_of)
    except SpectrumError as e:
        return _skip(options, index, spectrum_id, str(e))
    return _build(options, rec)


def _mgf_fill(rec: _Record, raw: Mapping[str, str], line_of: Mapping[str, int]) -> None:
    """Precursor, charge, polarity, annotations and retention time of an MGF record."""
    from pyteomics.auxiliary import PyteomicsError
    from pyteomics.mgf import MGFBase

    level = _first(raw, ("mslevel",))
    if level is not None and level != "2":
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
            _warn(rec.metadata, f"line {line_of['rtinseconds']}: RTINSECONDS {seconds!r} is not a number "
                                "of seconds; retention time left empty")
    else:
        text = _first(raw, _RT_MINUTES_KEYS)
        if text is not None:
            rec.retention_time = _rt_from_text(text, rec.metadata)
    if rec.retention_time is not None and not (0 <= rec.retention_time < math.inf):
        _warn(rec.metadata, f"retention time {rec.retention_time:g} s is not a time >= 0; left empty")
        rec.retention_time = None


# ----------------------------------------------------------------------------------------------
# mzML
# ----------------------------------------------------------------------------------------------


def _cv(params: Mapping, accession: str, name: str):
    """Value of a CV param by accession (pyteomics keys carry it), else by name; None if absent."""
    for key, value in params.items():
        if getattr(key, "accession", None) == accession:
            return value
    return params.get(name)


def _iter_mzml(options: _Options) -> Iterator[Spectrum | SkippedRecord]:
    from pyteomics import mzml

    n_scans = n_ms2 = 0
    levels: Counter[str] = Counter()
    # Arrays are decoded per scan (decode_binary=False), so a corrupt array skips its scan only.
    with _open_binary(options.path) as fh, mzml.MzML(fh, use_index=False, read_schema=False,
                                                      iterative=True, decode_binary=False) as reader:
        for position, spec in enumerate(reader):
            n_scans += 1
            level = _cv(spec, "MS:1000511", "ms level")
            levels[str(level)] += 1
            if _int_or(level, -1) == 1 and options.survey_scans:
                scan = _survey_scan(options, _int_or(spec.get("index"), position), spec)
                if scan is not None:
                    yield scan
            if _int_or(level, -1) != 2:
                continue
            n_ms2 += 1
            index = _int_or(spec.get("index"), position)
            try:
                item = _mzml_record(options, index, spec)
            except SpectrumError as e:  # a damaged scan: the rest of the run goes on
                item = _skip(options, index, str(spec.get("id") or index), str(e))
            except (ValueError, TypeError) as e:
                item = _skip(options, index, str(spec.get("id") or index), f"the scan cannot be read ({e})")
            yield item
    if n_ms2 == 0:
        found = ", ".join(f"{n} of MS level {lv}" for lv, n in sorted(levels.items())) if n_scans else "none"
        raise InputFileError(
            options.source,
            f"no MS2 spectra: the file holds {n_scans} spectra ({found}); MS-GPT needs MS/MS (MS2) scans.",
        )


def _int_or(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _decoded(spec: Mapping, key: str) -> np.ndarray:
    array = spec.get(key)
    if array is None:
        return np.zeros(0)
    try:
        return np.asarray(array.decode() if hasattr(array, "decode") else array, dtype=np.float64)
    except (ValueError, TypeError, zlib.error) as e:  # bad base64, zlib or numbers
        raise SpectrumError(f"its {key} cannot be decoded ({e}); the file is damaged") from None


def _mzml_record(options: _Options, index: int, spec: Mapping) -> Spectrum | SkippedRecord:
    spectrum_id = str(spec.get("id") or index)
    metadata: dict[str, str] = {"scan_id": spectrum_id, "ms_level": "2"}
    precursors = (spec.get("precursorList") or {}).get("precursor") or [{}]
    precursor = precursors[0]
    ions = (precursor.get("selectedIonList") or {}).get("selectedIon") or [{}]
    ion = ions[0]
    precursor_mz = _cv(ion, "MS:1000744", "selected ion m/z")
    if precursor_mz is not None:
        metadata["precursor_source"] = "selected ion m/z"
    else:
        precursor_mz = _cv(precursor.get("isolationWindow") or {}, "MS:1000827", "isolation window target m/z")
        if precursor_mz is not None:
            metadata["precursor_source"] = "isolation window target m/z"
    charge = _cv(ion, "MS:1000041", "charge state")
    polarity = _polarity(spec)
    if precursor.get("spectrumRef"):
        metadata["precursor_scan_id"] = str(precursor["spectrumRef"])
    precursor_intensity = _cv(ion, "MS:1000042", "peak intensity")
    if precursor_intensity is not None:
        metadata["precursor_intensity"] = f"{float(precursor_intensity):g}"
    energy = _cv(precursor.get("activation") or {}, "MS:1000045", "collision energy")
    if energy is not None:
        metadata["collision_energy"] = f"{energy:g}"
    for accession, name, key in (("MS:1000796", "spectrum title", "spectrum_title"),
                                 ("MS:1000512", "filter string", "filter_string")):
        value = _cv(spec, accession, name) or _cv(_first_scan(spec), accession, name)
        if value:
            metadata[key] = str(value)
    rec = _Record(
        index=index,
        spectrum_id=spectrum_id,
        precursor_mz=None if precursor_mz is None else float(precursor_mz),
        charge=int(charge) if charge is not None else 0,
        charge_signed=False,  # mzML charge states are unsigned; the polarity gives the sign
        polarity=polarity,
        retention_time=_mzml_rt(_first_scan(spec)),
        mz=_decoded(spec, "m/z array"),
        intensity=_decoded(spec, "intensity array"),
        metadata=metadata,
    )
    return _build(options, rec)


def _polarity(spec: Mapping) -> str | None:
    if _cv(spec, "MS:1000130", "positive scan") is not None:
        return "positive"
    if _cv(spec, "MS:1000129", "negative scan") is not None:
        return "negative"
    return None


def _survey_scan(options: _Options, index: int, spec: Mapping) -> SurveyScan | None:
    """An MS1 scan; ``None`` when its peaks cannot be decoded (it is evidence only, the run goes on)."""
    try:
        mz, intensity = _decoded(spec, "m/z array"), _decoded(spec, "intensity array")
    except SpectrumError:
        return None
    if mz.shape != intensity.shape:
        return None
    keep = np.isfinite(mz) & np.isfinite(intensity) & (mz > 0) & (intensity > 0)
    return SurveyScan(id=str(spec.get("id") or index), index=index, retention_time=_mzml_rt(_first_scan(spec)),
                      polarity=_polarity(spec), mz=mz[keep], intensity=intensity[keep], source=options.source)


def _first_scan(spec: Mapping) -> Mapping:
    scans = (spec.get("scanList") or {}).get("scan") or [{}]
    return scans[0]


def _mzml_rt(scan: Mapping) -> float | None:
    value = _cv(scan, "MS:1000016", "scan start time")
    if value is None:
        return None
    unit = str(getattr(value, "unit_info", None) or "minute").lower()
    factor = {"second": 1.0, "s": 1.0, "minute": 60.0, "min": 60.0, "hour": 3600.0}.get(unit, 60.0)
    return float(value) * factor
