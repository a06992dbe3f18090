"""Reading spectral library files: MSP (NIST, MoNA, MS-DIAL exports) and MGF (GNPS, MassBank exports).

A file is split into records here, streaming, keeping each record's first line; a record's text is then read
on its own, so a bad record is skipped and reported by its line while the rest of the file goes on:

* **MGF** records (``BEGIN IONS`` ... ``END IONS``) are handed to pyteomics' MGF reader (``pyteomics.mgf.MGF``
  over the record's text: its ``KEY=value`` params, PEPMASS and CHARGE parsing and peak lines); a line
  pyteomics rejects is named by its number.
* **MSP** records (``Name:`` ... ``Num Peaks: n`` and n peaks; blank lines between records) are read by
  :func:`parse_msp_record`: no well-kept MSP reader reports where a record went wrong (matchms and ms-entropy
  read whole files and stop or skip silently, and matchms would bring numba for this alone). Peaks may be
  ``mz intensity`` a line, with an annotation after them (``"b2"``), or several ``mz intensity;`` pairs
  a line (older NIST exports).

Fields then become :class:`~engine.spectral_library.records.ReferenceSpectrum` by the rules of
:mod:`engine.spectral_library.records`. The format comes from the extension (``.msp``, ``.mgf``, either with
``.gz``), else from the content. A file that cannot be read at all raises :class:`SpectralLibraryError` (an
:class:`~engine.errors.InputFileError`) naming it and the fix; so does a file with no usable record, with the
reason in plain words (no precursors: an EI library).
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import InputFileError

from .records import (
    RawReference,
    RecordProblem,
    ReferenceSpectrum,
    SkippedReference,
    accession_of,
    normalise_key,
    to_reference,
)

FORMATS = ("msp", "mgf")
MAX_PROBLEMS = 20  # skipped records kept with their line and reason (the rest are counted)
_SNIFF = 256 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_MSP_KEY = re.compile(r"^\s*([A-Za-z][^:]{0,60}?)\s*:\s?(.*)$")
_QUOTED = re.compile(r'"[^"]*"')
_PAIR_SPLIT = re.compile(r"[\s,:]+")
_CHARGE_SIGN = re.compile(r"^\s*charge\s*=.*[+-]", re.IGNORECASE | re.MULTILINE)
FIX = "export the library as MSP or MGF (optionally .gz) and open that file"


class SpectralLibraryError(InputFileError):
    """A spectral library file that cannot be used at all (missing, unreadable, not MSP/MGF, no usable record)."""


@dataclass
class ReadReport:
    """What reading a library file found: records seen, used and skipped (the first :data:`MAX_PROBLEMS` with
    their line and reason, all counted by reason), and the format."""

    path: str
    format: str = ""
    records: int = 0
    used: int = 0
    no_precursor: int = 0
    problems: list[str] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)

    @property
    def skipped(self) -> int:
        return self.records - self.used

    def add(self, skipped: SkippedReference) -> None:
        self.no_precursor += skipped.no_precursor
        self.reasons[_reason_kind(skipped.reason)] += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(str(skipped))

    def summary(self) -> str:
        """One paragraph: ``12,345 of 12,400 records used; 55 skipped: 50 no precursor m/z, ... First: ...``."""
        text = f"{self.used:,} of {self.records:,} records of {Path(self.path).name} used"
        if not self.skipped:
            return text + "."
        kinds = ", ".join(f"{n:,} {kind}" for kind, n in self.reasons.most_common())
        more = self.skipped - len(self.problems)
        shown = "; ".join(self.problems[:5])
        return (f"{text}; {self.skipped:,} skipped ({kinds}). First: {shown}"
                + (f" (and {more:,} more)" if more > 0 else "") + ".")

    def to_json(self) -> dict:
        return {"path": self.path, "format": self.format, "records": self.records, "used": self.used,
                "no_precursor": self.no_precursor, "problems": list(self.problems), "reasons": dict(self.reasons)}

    @classmethod
    def from_json(cls, data: dict) -> ReadReport:
        return cls(path=str(data.get("path", "")), format=str(data.get("format", "")),
                   records=int(data.get("records", 0)), used=int(data.get("used", 0)),
                   no_precursor=int(data.get("no_precursor", 0)), problems=list(data.get("problems", [])),
                   reasons=Counter(data.get("reasons", {})))


def _reason_kind(reason: str) -> str:
    """A short kind of a skip reason, for the counts of the summary."""
    for words, kind in (("no precursor", "without a precursor m/z"), ("precursor m/z", "with a bad precursor"),
                        ("MS level", "not MS2"), ("polarity", "with conflicting polarity"),
                        ("ion mode", "with an unknown ion mode"), ("peak", "with bad or no peaks"),
                        ("Num Peaks", "with bad or no peaks")):
        if words in reason:
            return kind
    return "other"


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def _head(path: Path) -> str:
    try:
        with (gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")) as fh:
            raw = fh.read(_SNIFF)
    except (OSError, EOFError, zlib.error) as e:
        raise SpectralLibraryError(path, f"cannot be read ({getattr(e, 'strerror', None) or e}); "
                                         "check that it exists and is not damaged.") from e
    if b"\x00" in raw[:4096] and not raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise SpectralLibraryError(path, f"is a binary file, not a spectral library; {FIX}.")
    return raw.decode("utf-16" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig", errors="replace")


def detect_format(path: str | Path) -> str:
    """``"msp"`` or ``"mgf"``: from the extension when the content agrees, else from the content."""
    path = Path(path)
    if not path.exists():
        raise SpectralLibraryError(path, "does not exist; check the path.")
    if path.is_dir():
        raise SpectralLibraryError(path, f"is a folder, not a file; {FIX}.")
    head = _head(path)
    has_mgf = re.search(r"^\s*BEGIN IONS\s*$", head, re.MULTILINE | re.IGNORECASE) is not None
    has_msp = re.search(r"^\s*num\s*peaks\s*:", head, re.MULTILINE | re.IGNORECASE) is not None
    if not head.strip():
        raise SpectralLibraryError(path, f"is empty; {FIX}.")
    if not (has_mgf or has_msp):
        raise SpectralLibraryError(path, "is neither MSP (records with 'Name:' and 'Num Peaks:') nor MGF (records "
                                         f"between 'BEGIN IONS' and 'END IONS'); {FIX}.")
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if ".msp" in suffixes and has_msp:
        return "msp"
    if ".mgf" in suffixes and has_mgf:
        return "mgf"
    return "mgf" if has_mgf else "msp"


class _Counting(io.RawIOBase):
    """A raw file that counts the bytes read from disk (compressed ones for a .gz), for progress."""

    def __init__(self, fh):
        self.fh = fh
        self.done = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.fh.readinto(buffer)
        self.done += n or 0
        return n

    def close(self) -> None:
        self.fh.close()
        super().close()


def _lines(path: Path, counter: _Counting) -> io.TextIOWrapper:
    """The file's text (gzip-decompressed when it is), UTF-16 when it starts with its byte-order mark, else
    UTF-8 (undecodable bytes become U+FFFD)."""
    gz = _is_gzip(path)
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
        encoding = "utf-16" if fh.read(2) in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    binary = io.BufferedReader(counter, 1 << 20)
    stream = gzip.GzipFile(fileobj=binary, mode="rb") if gz else binary
    return io.TextIOWrapper(stream, encoding=encoding, errors="replace")


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------


def _mgf_records(lines: Iterator[str]) -> Iterator[tuple[int, list[str] | str]]:
    """(first line, the record's lines) per ``BEGIN IONS`` block, or (line, reason) for a broken block."""
    block: list[str] | None = None
    start = 0
    for lineno, line in enumerate(lines, 1):
        marker = line.strip().upper()
        if marker == "BEGIN IONS":
            if block is not None:
                yield start, f"no END IONS before the next BEGIN IONS at line {lineno}"
            block, start = [line], lineno
        elif block is not None:
            block.append(line)
            if marker == "END IONS":
                yield start, block
                block = None
    if block is not None:
        yield start, "the file ends inside this record (no END IONS); it may be truncated"


def parse_mgf_record(index: int, start: int, lines: list[str]) -> RawReference:
    """One MGF record through ``pyteomics.mgf.MGF``; :class:`RecordProblem` names a line it rejects."""
    from pyteomics.auxiliary import PyteomicsError
    from pyteomics.mgf import MGF

    text = "".join(lines)
    try:
        with MGF(io.StringIO(text), use_header=False, convert_arrays=1, read_charges=True, dtype=float) as reader:
            spectra = list(reader)
    except (PyteomicsError, ValueError, TypeError, IndexError) as e:
        raise RecordProblem(_mgf_problem(e, start, lines)) from None
    if not spectra:
        raise RecordProblem("no record between BEGIN IONS and END IONS")
    spectrum = spectra[0]
    params = spectrum.get("params", {})
    fields = {normalise_key(k): str(v) for k, v in params.items() if isinstance(v, str)}
    raw = RawReference(index=index, line=start, fields=fields, mz=list(spectrum["m/z array"]),
                       intensity=list(spectrum["intensity array"]))
    pepmass = params.get("pepmass")
    if pepmass is not None and pepmass[0] is not None:
        raw.precursor_mz = float(pepmass[0])
    charges = params.get("charge")
    if charges is not None and len(charges):
        if len(charges) > 1:
            raise RecordProblem(f"CHARGE lists several charges ({', '.join(map(str, charges))}); give one")
        raw.charge = int(charges[0])
        raw.charge_signed = _CHARGE_SIGN.search(text) is not None
    return raw


def _mgf_problem(error: Exception, start: int, lines: list[str]) -> str:
    message = str(getattr(error, "message", error))
    m = re.search(r"Line:\s*\n(.*)\n", message)
    if m:
        bad = m.group(1).strip()
        for offset, line in enumerate(lines):
            if line.strip() == bad:
                return f"line {start + offset}: {bad!r} is neither KEY=value nor a peak 'm/z intensity'"
    if "could not convert" in message:
        for offset, line in enumerate(lines):
            if line.strip().upper().startswith("PEPMASS"):
                return f"line {start + offset}: PEPMASS {line.split('=', 1)[-1].strip()!r} is not a number"
    return f"pyteomics cannot read it ({message})"


def _msp_records(lines: Iterator[str]) -> Iterator[tuple[int, list[tuple[int, str]]]]:
    """(first line, [(line number, text), ...]) per MSP record: records end at a blank line, or where a new
    ``Name:`` starts after the peaks."""
    block: list[tuple[int, str]] = []
    peaks_seen = False
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            if block:
                yield block[0][0], block
                block, peaks_seen = [], False
            continue
        if block and peaks_seen and text.lower().startswith("name:"):
            yield block[0][0], block
            block, peaks_seen = [], False
        if block and _MSP_KEY.match(text) is None and text[0] in "0123456789.":
            peaks_seen = True
        block.append((lineno, text))
    if block:
        yield block[0][0], block


def _msp_peaks(lineno: int, text: str) -> list[tuple[float, float]]:
    """Peaks of one MSP peak line: ``mz intensity ["annotation"]`` or ``mz intensity; mz intensity; ...``."""
    pairs = []
    for chunk in _QUOTED.sub(" ", text).split(";"):
        tokens = [t for t in _PAIR_SPLIT.split(chunk.strip()) if t]
        if not tokens:
            continue
        try:
            pairs.append((float(tokens[0]), float(tokens[1])))
        except (ValueError, IndexError):
            raise RecordProblem(f"line {lineno}: peak {text!r} is not 'm/z intensity'") from None
    return pairs


def parse_msp_record(index: int, block: list[tuple[int, str]]) -> RawReference:
    """One MSP record: ``Key: value`` lines, ``Num Peaks: n``, then n peaks."""
    fields: dict[str, str] = {}
    peaks: list[tuple[float, float]] = []
    expected: int | None = None
    for lineno, text in block:
        m = _MSP_KEY.match(text)  # keys start with a letter, peaks with a digit
        if m is not None:
            key = normalise_key(m.group(1))
            fields.setdefault(key, m.group(2).strip())
            if key == "numpeaks":
                try:
                    expected = int(m.group(2).strip())
                except ValueError:
                    raise RecordProblem(f"line {lineno}: Num Peaks {m.group(2).strip()!r} is not a number") from None
        elif text[0] in "0123456789.":
            peaks.extend(_msp_peaks(lineno, text))
        elif expected is not None:
            raise RecordProblem(f"line {lineno}: {text!r} is neither 'Key: value' nor a peak 'm/z intensity'")
        # else: a comment or continuation line of the header
    raw = RawReference(index=index, line=block[0][0], fields=fields,
                       mz=[p[0] for p in peaks], intensity=[p[1] for p in peaks])
    if expected is not None and expected != len(peaks):
        raise RecordProblem(f"Num Peaks says {expected} but {len(peaks)} peaks follow; the record may be "
                            "truncated or two records run together")
    return raw


def _records(fmt: str, lines: Iterator[str]) -> Iterator[RawReference | tuple[int, int, str, str]]:
    """Raw records, or (index, line, accession, reason) for a record that cannot be read at all."""
    index = 0
    if fmt == "mgf":
        for start, block in _mgf_records(lines):
            if isinstance(block, str):
                yield index, start, f"record {index + 1}", block
            else:
                try:
                    yield parse_mgf_record(index, start, block)
                except RecordProblem as e:
                    yield index, start, _mgf_title(block) or f"record {index + 1}", str(e)
            index += 1
    else:
        for start, block in _msp_records(lines):
            try:
                yield parse_msp_record(index, block)
            except RecordProblem as e:
                yield index, start, _msp_name(block) or f"record {index + 1}", str(e)
            index += 1


def _mgf_title(lines: list[str]) -> str:
    for line in lines:
        if line.strip().upper().startswith("TITLE="):
            return line.split("=", 1)[1].strip()
    return ""


def _msp_name(block: list[tuple[int, str]]) -> str:
    for _, text in block:
        if text.lower().startswith(("db#:", "accession:", "name:")):
            return text.split(":", 1)[1].strip()
    return ""


def iter_references(path: str | Path, report: ReadReport | None = None,
                    progress: Callable[[int], None] | None = None) -> Iterator[ReferenceSpectrum]:
    """The usable reference spectra of a library file, streaming; skipped records go into ``report`` (its
    counts too). ``progress(bytes read)`` is called every few hundred records. Raises
    :class:`SpectralLibraryError` when the file cannot be read at all (a damaged .gz mid-way included)."""
    path = Path(path)
    report = report if report is not None else ReadReport(str(path))
    report.format = detect_format(path)
    try:
        with open(path, "rb") as fh:
            counter = _Counting(fh)
            with _lines(path, counter) as lines:
                for item in _records(report.format, lines):
                    report.records += 1
                    if progress is not None and report.records % 200 == 0:
                        progress(counter.done)
                    if isinstance(item, tuple):
                        report.add(SkippedReference(*item))
                        continue
                    try:
                        reference = to_reference(item)
                    except RecordProblem as e:
                        report.add(SkippedReference(item.index, item.line, accession_of(item), str(e), e.no_precursor))
                        continue
                    report.used += 1
                    yield reference
    except (OSError, EOFError, zlib.error) as e:
        raise SpectralLibraryError(path, f"cannot be read after record {report.records:,} "
                                         f"({getattr(e, 'strerror', None) or e}); the file may be truncated or "
                                         "damaged: download or export it again.") from e


def check_usable(report: ReadReport) -> None:
    """Raise :class:`SpectralLibraryError` in plain words when a file gave no usable spectrum."""
    if report.used:
        return
    if report.records == 0:
        raise SpectralLibraryError(report.path, f"holds no {report.format.upper()} record; {FIX}.")
    if report.no_precursor == report.records:
        raise SpectralLibraryError(
            report.path, f"none of its {report.records:,} spectra has a precursor m/z (PrecursorMZ in MSP, PEPMASS "
                         "in MGF): it looks like an EI (GC-MS) library. Spectral search of MS/MS spectra needs a "
                         "library of MS/MS spectra with their precursors.")
    raise SpectralLibraryError(report.path, f"none of its {report.records:,} records can be used. "
                                            f"{report.summary()}")
