"""What a corpus is prepared from: SMILES tables (TSV/CSV/plain, optionally gzipped), the structures of MGF files
(licence-filtered), and exclusion lists; read as streams of rows."""

from __future__ import annotations

import csv
import gzip
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from engine.chem import molecules as chem
from engine.errors import InputFileError

DEFAULT_MGF_LICENSES: tuple[str, ...] = ("CC0", "CC BY", "CC BY-SA", "dl-de/by-2-0")
_INCHIKEY14 = re.compile(r"[A-Z]{14}")


def open_text(path: str | Path) -> IO[str]:
    path = Path(path)
    try:
        if path.suffix == ".gz":
            return gzip.open(path, "rt", encoding="utf-8", newline="")
        return open(path, encoding="utf-8", newline="")
    except OSError as e:
        raise InputFileError(path, f"cannot open ({e.strerror or e}).") from e


def _rows(fh: IO[str], kind: str) -> Iterator[list[str]]:
    """Non-blank rows split into columns: ``csv`` with the csv module, ``tsv`` on tabs, else whitespace."""
    if kind == "csv":
        yield from (row for row in csv.reader(fh) if row)
        return
    for line in fh:
        line = line.rstrip("\r\n")
        if line.strip():
            yield line.split("\t") if kind == "tsv" else line.split()


def _table_kind(path: Path) -> str:
    suffixes = [s for s in path.suffixes if s != ".gz"]
    ext = suffixes[-1].lower() if suffixes else ""
    return {".csv": "csv", ".tsv": "tsv"}.get(ext, "smi")


def iter_smiles_file(path: str | Path) -> Iterator[str]:
    """SMILES of every non-blank row: the column named ``smiles`` (any case) if the first row names one,
    else the first column (and the first row is data)."""
    path = Path(path)
    with open_text(path) as fh:
        rows = _rows(fh, _table_kind(path))
        first = next(rows, None)
        if first is None:
            return
        names = [c.strip().lower() for c in first]
        col = names.index("smiles") if "smiles" in names else 0
        if "smiles" not in names:
            yield first[0]
        for row in rows:
            yield row[col] if len(row) > col else ""


def read_mgf_headers(path: str | Path) -> Iterator[dict[str, str]]:
    """``KEY=value`` header fields (keys upper-cased) of each ``BEGIN IONS``/``END IONS`` block; peaks are skipped."""
    fields: dict[str, str] | None = None
    with open_text(path) as fh:
        for line in fh:
            c = line[:1]
            if c.isdigit() or not c:
                continue
            line = line.strip()
            if line == "BEGIN IONS":
                fields = {}
            elif line == "END IONS":
                if fields is not None:
                    yield fields
                fields = None
            elif fields is not None and "=" in line:
                key, value = line.split("=", 1)
                fields[key.strip().upper()] = value.strip()


@dataclass
class MgfSelection:
    smiles: list[str]  # unique, in order of first appearance
    exclude_keys: set[str]
    stats: dict[str, dict[str, int]]  # per file


def select_mgf_structures(
    include: Sequence[str | Path],
    folds: Sequence[str],
    licenses: Sequence[str],
    exclude_from: Sequence[str | Path] = (),
    exclude_folds: Sequence[str] = (),
) -> MgfSelection:
    """SMILES of the ``include`` records whose FOLD and LICENSE match, and the InChIKey first blocks of
    every record of ``exclude_from`` whose FOLD is in ``exclude_folds``."""
    smiles: dict[str, None] = {}
    exclude: set[str] = set()
    stats: dict[str, dict[str, int]] = {}
    fold_set, license_set, exclude_set = set(folds), set(licenses), set(exclude_folds)
    include_set = set(map(str, include))
    for path in dict.fromkeys([*map(str, include), *map(str, exclude_from)]):
        take = path in include_set
        st: Counter[str] = Counter()
        for rec in read_mgf_headers(path):
            st["spectra"] += 1
            fold = rec.get("FOLD", "")
            if fold in exclude_set:
                st["excluded_spectra"] += 1
                key = rec.get("INCHIKEY", "")[:14] or (chem.inchikey14(rec.get("SMILES", "")) or "")
                if key:
                    exclude.add(key)
                else:
                    st["excluded_spectra_without_key"] += 1
            elif take and fold in fold_set and rec.get("LICENSE", "") in license_set:
                st["selected_spectra"] += 1
                if rec.get("SMILES"):
                    smiles.setdefault(rec["SMILES"], None)
                else:
                    st["selected_without_smiles"] += 1
        stats[path] = dict(st)
    stats["all"] = {"unique_selected_smiles": len(smiles), "exclusion_keys": len(exclude)}
    return MgfSelection(list(smiles), exclude, stats)


def read_exclusion_file(path: str | Path) -> set[str]:
    """InChIKey first blocks, one per line (full InChIKeys are cut to 14 characters; ``#`` starts a comment)."""
    keys: set[str] = set()
    with open_text(path) as fh:
        for n, line in enumerate(fh, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            if not _INCHIKEY14.fullmatch(text[:14]):
                raise InputFileError(
                    path, f"line {n}: {text!r} is not an InChIKey or its 14-letter first block (e.g. 'KWILGNNWGSNMPA')."
                )
            keys.add(text[:14])
    return keys
