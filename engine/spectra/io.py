"""Read MS/MS spectra from MGF and mzML files (optionally gzip-compressed), one record at a time.

:func:`iter_spectra` streams a file and yields a :class:`~engine.spectra.spectrum.Spectrum` for every usable
MS2 record and a :class:`~engine.spectra.spectrum.SkippedRecord` (with the reason) for every unusable one;
the rest of the file goes on. Problems with the file as a whole (missing, a folder, unreadable,
empty, binary, neither MGF nor mzML, malformed XML, truncated gzip, an mzML without MS2 scans) raise one
:class:`~engine.errors.InputFileError`; it can also come mid-way, after earlier records.

This module holds the entry points, the format detection and the file-level errors; the readers are
:mod:`engine.spectra.mgf` and :mod:`engine.spectra.mzml`, and what they share (options, opening files, turning
a record into a Spectrum) is :mod:`engine.spectra.reading`.

Rules (docs/bad_inputs.md lists what each bad input gives, generated from tests/bad_inputs.py):

* **Format**: the extension (``.mgf``, ``.mzML``, ``.msp``/``.mat``, ``.ms``, each + ``.gz``) decides, and the first
  64 KB must confirm it; other extensions are accepted when the content is clearly MGF, mzML, MSP
  (``PRECURSORMZ:`` and ``Num Peaks:`` lines) or SIRIUS ``.ms`` (a ``>compound``/``>parentmass`` line). MSP and
  ``.ms`` records are read by :mod:`engine.spectra.feature_exports` (MS-DIAL's and SIRIUS' feature exports; the
  features are made by :mod:`engine.spectra.handoff`).
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
* **Adduct**: from ``ADDUCT``/``ION``/``IONTYPE``/``PRECURSOR_TYPE``/``PRECURSORTYPE``/``ADDUCTIONNAME``; none
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
  ``RETENTION_TIME``/``RETENTIONTIME``/``RTINMINUTES`` are free text as MassBank writes them: the first number,
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
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine.chem.adducts import Adduct
from engine.errors import InputFileError
from engine.spectra.mgf import iter_mgf
from engine.spectra.mzml import iter_mzml
from engine.spectra.reading import ReadOptions, is_gzip, open_binary, text_encoding
from engine.spectra.spectrum import DEFAULT_TOL_DA, DEFAULT_TOL_PPM, SkippedRecord, Spectrum, SurveyScan

_SNIFF_BYTES = 64 * 1024
_MSP_PRECURSOR = re.compile(r"^\s*PRECURSOR_?MZ\s*:", re.MULTILINE | re.IGNORECASE)  # MS-DIAL, MoNA, NIST MSP
_MSP_PEAKS = re.compile(r"^\s*Num\s*Peaks\s*:", re.MULTILINE | re.IGNORECASE)
_SIRIUS_MS = re.compile(r"^>(compound|parentmass)\b", re.MULTILINE)
_SUPPORTED = ("supported are .mgf and .mzML files, optionally gzip-compressed (.mgf.gz, .mzML.gz), and the feature "
              "exports of MS-DIAL (.msp) and SIRIUS (.ms)")


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
    options = ReadOptions.create(path, default_adduct, default_formula, tol_ppm, tol_da, survey_scans)
    fmt = detect_format(path)
    if fmt in ("msp", "sirius_ms"):
        from engine.spectra.feature_exports import iter_msp, iter_sirius_ms

        records = iter_msp(options) if fmt == "msp" else iter_sirius_ms(options)
    else:
        records = iter_mgf(options) if fmt == "mgf" else iter_mzml(options)
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
    """``"mgf"``, ``"mzml"``, ``"msp"`` (MS-DIAL / NIST MSP) or ``"sirius_ms"`` (SIRIUS ``.ms``) from the
    extension, confirmed by the content; else ``InputFileError``. Which tool wrote an MGF (MZmine's SIRIUS or
    GNPS export) is :func:`engine.spectra.handoff.handoff_kind`'s question."""
    p = Path(path)
    head = _read_head(p)
    encoding = text_encoding(head)
    if b"\x00" in head and encoding != "utf-16":
        raise InputFileError(p, f"the file holds binary data, not text; {_SUPPORTED}.")
    text = head.decode(encoding, errors="replace").replace("\r\n", "\n").replace("\r", "\n")  # any line ends
    is_mzml = "<mzML" in text or "<indexedmzML" in text
    is_mgf = re.search(r"^\s*BEGIN IONS\s*$", text, re.MULTILINE | re.IGNORECASE) is not None
    name = p.name.lower().removesuffix(".gz")
    is_msp = _MSP_PRECURSOR.search(text) is not None and _MSP_PEAKS.search(text) is not None
    is_sirius = _SIRIUS_MS.search(text) is not None
    if name.endswith((".msp", ".mat")) or (name.endswith(".ms") and not is_mgf and not is_mzml):
        kind, label = ("msp", "MSP") if not name.endswith(".ms") else ("sirius_ms", "SIRIUS .ms")
        if (is_msp if kind == "msp" else is_sirius):
            return kind
        raise InputFileError(p, f"not a {label} file: no "
                                f"{'PRECURSORMZ: and Num Peaks: lines' if kind == 'msp' else '>compound or >parentmass line'}"
                                " in its first 64 KB.")
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
    if is_sirius:
        return "sirius_ms"
    if is_msp:
        return "msp"
    raise InputFileError(p, "neither MGF ('BEGIN IONS'), MSP ('PRECURSORMZ:'), SIRIUS .ms ('>compound') nor mzML "
                            f"(<mzML>) content; {_SUPPORTED}.")


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def _read_head(path: Path) -> bytes:
    """First 64 KB of the (decompressed) content, with a readable error for unreadable files."""
    if not path.exists():
        raise InputFileError(path, "no such file; check the path and the file name.")
    if path.is_dir():
        raise InputFileError(path, "this is a folder, not a file; choose an .mgf or .mzML file.")
    try:
        if path.stat().st_size == 0:
            raise InputFileError(path, "the file is empty (0 bytes).")
        with open_binary(path) as fh:
            head = fh.read(_SNIFF_BYTES)
    except PermissionError:
        raise InputFileError(path, "no permission to read this file.") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputFileError(path, f"the gzip data is truncated or corrupt ({e}).") from e
    except OSError as e:
        raise InputFileError(path, f"cannot read the file ({type(e).__name__}: {e}).") from e
    if not head.strip(b" \t\r\n\x0b\x0c\xef\xbb\xbf\xff\xfe\x00"):  # white space, byte-order marks
        raise InputFileError(
            path, "the file is empty after decompression." if is_gzip(path) else "the file holds only white space."
        )
    return head


def _file_errors_wrapped(source: str, fmt: str, records: Iterable) -> Iterator:
    """Turn every error of the file as a whole into one InputFileError naming the cause."""
    from lxml import etree
    from pyteomics.auxiliary import PyteomicsError

    label = {"mgf": "MGF", "msp": "MSP", "sirius_ms": "SIRIUS .ms"}.get(fmt, "mzML")
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
