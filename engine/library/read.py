"""Reading a structure library's source file: rows of text, no chemistry yet.

A library file is one of

- a **table**: ``.csv`` (commas) or ``.tsv``/``.tab`` (tabs), ``.gz`` allowed, whose first row names the
  columns. The structure comes from a SMILES column (``SMILES``, ``canonical_smiles``, ``isomeric_smiles``,
  ...) or, where that cell is empty or absent, an InChI column (``InChI``, ``StdInChI``, ...). Names,
  identifiers, CAS numbers, given InChIKeys and sources come from the columns listed in :data:`COLUMNS`
  (matched ignoring case, spaces, ``_`` and ``-``), which covers PubChemLite exports (``Identifier``,
  ``CompoundName``, ``SMILES``, ``InChI``, ``InChIKey``) and NORMAN SusDat / suspect lists (``Name``,
  ``Norman_SusDat_ID``, ``SMILES``, ``StdInChI``, ``CAS_RN``). A table without a header naming a
  structure column is read as SMILES (or InChI) in its first column and a name in its second;
- an **SDF** (``.sdf``/``.sd``/``.mol``, ``.gz`` allowed): each record's molfile, its title line as the
  name unless a ``NAME``-like property is given, and ``ID``/``CAS``/``SOURCE``-like properties;
- **one structure a line** (``.smi``/``.smiles``/``.txt``/``.ism``/``.can``, ``.gz`` allowed): SMILES or
  InChI, optionally followed by whitespace and a name. A ``.txt`` whose first line names a SMILES or InChI
  column (tab- or comma-separated) is read as a table.

Lines starting with ``#`` and blank lines are skipped. Each row becomes a :class:`RawStructure` that
says where it was (``line 7``, ``record 3 (line 57)``); whether its structure can be read is decided when
the library is built (:mod:`engine.library.build`). A file that cannot be read at all raises
:class:`LibraryError` (an :class:`~engine.errors.InputFileError`) naming the file and the fix.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.chem import molecules as chem
from engine.errors import InputFileError
from engine.progress import CancelFn, run_to_end
from engine.stamps import sha256_chunks

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
SDF_SUFFIXES = (".sdf", ".sd", ".mol")
LINE_SUFFIXES = (".smi", ".smiles", ".txt", ".ism", ".can")
FORMATS_HINT = ("give a CSV/TSV table with a SMILES or InChI column (e.g. a PubChemLite or NORMAN SusDat export), "
                "an SDF, or a .smi/.txt file with one SMILES a line (.gz allowed)")

# What each field is read from, most specific name first; names are compared by :func:`column_key`.
COLUMNS: dict[str, tuple[str, ...]] = {
    "smiles": ("smiles", "canonicalsmiles", "isomericsmiles", "smilesstd", "qsarreadysmiles", "smi"),
    "inchi": ("inchi", "stdinchi", "standardinchi"),
    "name": ("compoundname", "name", "preferredname", "commonname", "chemicalname", "title", "compound",
             "label", "pubchemname"),
    "identifier": ("identifier", "id", "normansusdatid", "susdatid", "cid", "pubchemcid", "dtxsid",
                   "accession", "chemspiderid", "chebi", "hmdbid", "molid"),
    "cas": ("cas", "casrn", "casnumber", "casno", "casregistrynumber"),
    "inchikey": ("inchikey", "stdinchikey", "inchikey14", "inchikey1", "inchikey2d", "standardinchikey"),
    "source": ("source", "sources", "database", "origin"),
    "formula": ("formula", "molecularformula", "molformula"),
}
_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def column_key(name: str) -> str:
    """How column names are compared: lower case, letters and digits only (``Norman_SusDat_ID`` ->
    ``normansusdatid``)."""
    return _NOT_ALNUM.sub("", name.strip().lower())


class LibraryError(InputFileError):
    """A structure library cannot be read or built (missing, unknown format, no structures, corrupt index).

    The caller decides what it means: a run that was given several libraries reports the one that failed
    and goes on with the others (:func:`engine.library.cache.open_libraries`)."""


@dataclass(frozen=True, slots=True)
class RawStructure:
    """One row (or SDF record) as written in the file."""

    where: str  # "line 7", "record 3 (line 57)": for messages
    text: str  # SMILES, InChI ("InChI=..."), or a molfile; "" when the row has none
    name: str = ""
    identifier: str = ""
    cas: str = ""
    inchikey: str = ""  # as given in the file (full or first block), "" if none
    source: str = ""
    formula: str = ""  # as given in the file; trusted only by a ``trust_keys`` build (engine.library.build)

    @property
    def kind(self) -> str:
        """``molfile``, ``inchi``, ``smiles`` or ``""`` (no structure)."""
        if not self.text:
            return ""
        if "\n" in self.text:
            return "molfile"
        return "inchi" if self.text.startswith("InChI=") else "smiles"


def library_format(path: str | os.PathLike) -> str:
    """``table``, ``sdf`` or ``lines`` by the file's name; raises :class:`LibraryError` for anything else."""
    path = Path(path)
    name = path.name.lower().removesuffix(".gz")
    suffix = Path(name).suffix
    if suffix in TABLE_SUFFIXES:
        return "table"
    if suffix in SDF_SUFFIXES:
        return "sdf"
    if suffix in LINE_SUFFIXES:
        return "lines"
    hint = " Save it as CSV (File > Save As > CSV) and give that." if suffix in (".xlsx", ".xls", ".ods") else ""
    raise LibraryError(path, f"unknown structure library format {suffix or '(no extension)'!r}; {FORMATS_HINT}.{hint}")


class LibraryFile:
    """An open library source file: iterate it for :class:`RawStructure` rows; :attr:`position` and :attr:`size`
    (bytes of the file as stored, compressed if ``.gz``) tell how far reading has got, for a progress bar.

    ::

        with LibraryFile(path) as f:
            for raw in f:
                ...
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.format = library_format(self.path)
        if not self.path.is_file():
            raise LibraryError(self.path, f"no such file; {FORMATS_HINT}.")
        self.size = self.path.stat().st_size
        self._raw = None

    def __enter__(self) -> LibraryFile:
        try:
            self._raw = open(self.path, "rb")
        except OSError as e:
            raise LibraryError(self.path, f"cannot be opened ({e.strerror or e}); check the file's permissions.") from e
        return self

    def __exit__(self, *exc) -> None:
        if self._raw is not None:
            self._raw.close()
            self._raw = None

    @property
    def position(self) -> int:
        """Bytes of the file read so far (read ahead in blocks, so approximate)."""
        try:
            return self._raw.tell() if self._raw is not None and not self._raw.closed else self.size
        except (OSError, ValueError):
            return 0

    def _text(self) -> io.TextIOBase:
        binary = self._raw
        if self.path.name.lower().endswith(".gz"):
            binary = gzip.GzipFile(fileobj=self._raw, mode="rb")
        return io.TextIOWrapper(binary, encoding="utf-8-sig", errors="replace", newline="")

    def __iter__(self) -> Iterator[RawStructure]:
        if self._raw is None:
            raise RuntimeError("use LibraryFile in a `with` block")
        readers = {"table": self._table, "sdf": self._sdf, "lines": self._lines}
        try:
            yield from readers[self.format](self._text())
        except (OSError, EOFError, csv.Error) as e:
            reason = ("is not a gzip file" if isinstance(e, gzip.BadGzipFile)
                      else f"cannot be read ({type(e).__name__}: {e})")
            raise LibraryError(self.path, f"{reason}; {FORMATS_HINT}.") from e

    # -- tables ----------------------------------------------------------------------------------
    def _table(self, fh, delimiter: str | None = None, first_line: int = 1) -> Iterator[RawStructure]:
        if delimiter is None:
            delimiter = TABLE_SUFFIXES[Path(self.path.name.lower().removesuffix(".gz")).suffix]
        reader = csv.reader(fh, delimiter=delimiter)
        header = None
        for header in reader:
            if header and any(c.strip() for c in header) and not header[0].lstrip().startswith("#"):
                break
        else:
            return
        columns = pick_columns(header)
        if "smiles" not in columns and "inchi" not in columns:
            first = header[0].strip()
            if not (first and (first.startswith("InChI=") or chem.mol_from_smiles(first) is not None)):
                named = ", ".join(repr(c) for c in header[:8]) + (", ..." if len(header) > 8 else "")
                raise LibraryError(self.path, f"no SMILES or InChI column (the first row names {named}); name the "
                                   "structure column 'SMILES' or 'InChI' in the first row.")
            columns = {"smiles": 0, "name": 1}  # no header: structure, name
            yield _table_row(f"line {reader.line_num + first_line - 1}", header, columns)
        for row in reader:
            if not row or not any(c.strip() for c in row) or row[0].lstrip().startswith("#"):
                continue
            yield _table_row(f"line {reader.line_num + first_line - 1}", row, columns)

    # -- one structure a line --------------------------------------------------------------------
    def _lines(self, fh) -> Iterator[RawStructure]:
        first = True
        for n, line in enumerate(fh, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if first:
                first = False
                for delimiter in ("\t", ","):
                    if delimiter in text and {"smiles", "inchi"} & pick_columns(text.split(delimiter)).keys():
                        yield from self._table(_chain([line], fh), delimiter, first_line=n)
                        return
                if text.split(None, 1)[0].lower() in ("smiles", "inchi", "structure"):
                    continue  # a header such as "SMILES Name"
            parts = text.split(None, 1)
            yield RawStructure(f"line {n}", parts[0], name=parts[1].strip() if len(parts) > 1 else "")

    # -- SDF -------------------------------------------------------------------------------------
    def _sdf(self, fh) -> Iterator[RawStructure]:
        record: list[str] = []
        start = 1
        n_record = 0
        for n, line in enumerate(fh, 1):
            if line.strip() == "$$$$":
                n_record += 1
                yield _sdf_record(record, f"record {n_record} (line {start})")
                record, start = [], n + 1
            else:
                record.append(line.rstrip("\r\n"))
        if any(line.strip() for line in record):  # the last record without its $$$$
            yield _sdf_record(record, f"record {n_record + 1} (line {start})")


def pick_columns(header: list[str]) -> dict[str, int]:
    """For each field of :data:`COLUMNS`, the index of the first column of the header that names it."""
    keys = [column_key(c) for c in header]
    found = {}
    for field, names in COLUMNS.items():
        col = next((keys.index(n) for n in names if n in keys), None)
        if col is not None:
            found[field] = col
    return found


def _cell(row: list[str], col: int | None) -> str:
    return row[col].strip() if col is not None and col < len(row) else ""


def _table_row(where: str, row: list[str], columns: dict[str, int]) -> RawStructure:
    text = _cell(row, columns.get("smiles")) or _cell(row, columns.get("inchi"))
    if text.upper() in ("NA", "N/A", "NAN", "NONE", "NULL", "-"):
        text = ""
    return RawStructure(where, text, name=_cell(row, columns.get("name")),
                        identifier=_cell(row, columns.get("identifier")), cas=_cell(row, columns.get("cas")),
                        inchikey=_cell(row, columns.get("inchikey")), source=_cell(row, columns.get("source")),
                        formula=_cell(row, columns.get("formula")))


_SDF_PROPERTY = re.compile(r"^>.*<([^>]+)>")


def _sdf_record(lines: list[str], where: str) -> RawStructure:
    """A record's molfile (up to ``M  END``) and its data items (``> <NAME>`` and the lines below)."""
    end = next((i for i, line in enumerate(lines) if line.startswith("M  END")), None)
    if end is None:
        return RawStructure(where, "")
    props: dict[str, str] = {}
    i = end + 1
    while i < len(lines):
        m = _SDF_PROPERTY.match(lines[i])
        i += 1
        if not m:
            continue
        value = []
        while i < len(lines) and lines[i].strip():
            value.append(lines[i].strip())
            i += 1
        props.setdefault(column_key(m.group(1)), " ".join(value))

    def prop(field: str) -> str:
        return next((props[n] for n in COLUMNS[field] if props.get(n)), "")

    title = lines[0].strip() if lines else ""
    return RawStructure(where, "\n".join(lines[: end + 1]) + "\n", name=prop("name") or title,
                        identifier=prop("identifier"), cas=prop("cas"), inchikey=prop("inchikey"),
                        source=prop("source"))


def _chain(first: list[str], rest) -> Iterator[str]:
    yield from first
    yield from rest


def hash_file(path: str | os.PathLike, cancel: CancelFn | None = None,
              chunk: int = 1 << 22) -> Generator[int, None, str]:
    """SHA-256 (hex) of a file's bytes, as a generator that yields the bytes read so far every ``chunk`` (and
    checks ``cancel`` there)."""
    try:
        return (yield from sha256_chunks(path, cancel, chunk))
    except OSError as e:
        raise LibraryError(path, f"cannot be read ({e.strerror or e}); check that it exists and may be read.") from e


def file_sha256(path: str | os.PathLike, cancel: CancelFn | None = None) -> str:
    """:func:`hash_file` run to its end."""
    return run_to_end(hash_file(path, cancel))
