"""Known or new: marks each candidate as in the model's training corpus, in a user's list, or new.

Structures are compared by the first block of their InChIKey (the 2D skeleton), stored as
:class:`~engine.model.known.KnownStructures` (a bundle's ``known_structures.npz``).

A user's list (:func:`read_structure_list`) is a text table (``.txt``/``.smi``/``.csv``/``.tsv``,
``.gz`` allowed) or an SDF: InChIKeys (full or first block) or SMILES, one a row, from a column named
``inchikey``, ``inchikey14``, ``InChIkey2D`` or ``smiles`` when the first row names one, else the first
column; SDF records give their structure (or an ``InChIKey`` property when the molecule block is empty).
"""

from __future__ import annotations

import csv
import gzip
import os
import re
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.chem import molecules as chem
from engine.errors import InputFileError
from engine.model.known import KnownStructures
from engine.progress import run_to_end

NEW = "new"
CORPUS = "training corpus"
USER = "user list"
LABELS = (NEW, CORPUS, USER)  # the categories a label is made of (a structure in both lists carries both)
SEPARATOR = "; "

_INCHIKEY = re.compile(r"^([A-Z]{14})(?:-[A-Z]{10}(?:-[A-Z])?)?$")
_KEY_COLUMNS = ("inchikey", "inchikey14", "inchikey2d", "inchikey1")
_SMILES_COLUMNS = ("smiles", "canonical_smiles", "isomeric_smiles")


# -- a user's list ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StructureList:
    """What :func:`read_structure_list` found in a file."""

    path: str
    keys: tuple[str, ...]  # InChIKey first blocks, distinct, in file order
    n_rows: int  # rows (or SDF records) read
    problems: tuple[str, ...]  # "line 7: 'xyz' is neither an InChIKey nor a SMILES RDKit can read" (first 20)
    n_problems: int

    def known(self) -> KnownStructures:
        return KnownStructures.from_keys(self.keys, f"{Path(self.path).name} ({len(self.keys):,} structures)")


def key_of(value: str) -> str | None:
    """InChIKey first block of an InChIKey (full or first block) or of a SMILES; None when neither."""
    value = value.strip()
    m = _INCHIKEY.match(value)
    if m:
        return m.group(1)
    return chem.inchikey14(value) if value else None


def _open_text(path: Path):
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return open(path, encoding="utf-8", errors="replace", newline="")


def table_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    name = path.name.lower().removesuffix(".gz")
    with _open_text(path) as fh:
        if name.endswith(".csv"):
            rows = ((i, row) for i, row in enumerate(csv.reader(fh), 1))
        elif name.endswith(".tsv"):
            rows = ((i, line.rstrip("\r\n").split("\t")) for i, line in enumerate(fh, 1))
        else:
            rows = ((i, line.split()) for i, line in enumerate(fh, 1))
        for i, row in rows:
            if row and row[0].strip() and not row[0].lstrip().startswith("#"):
                yield i, row


def _sdf_records(path: Path) -> Iterator[tuple[int, str]]:
    from rdkit import Chem, rdBase

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as fh, rdBase.BlockLogs():
        for n, mol in enumerate(Chem.ForwardSDMolSupplier(fh), 1):
            if mol is None:
                yield n, ""
                continue
            key = chem.inchikey14(mol) if mol.GetNumAtoms() else None
            if key is None:
                for prop in ("InChIKey", "INCHIKEY", "inchikey", "InChIKey1", "INCHIKEY2D"):
                    if mol.HasProp(prop):
                        key = mol.GetProp(prop)
                        break
            yield n, key or ""


def iter_structure_list(path: str | os.PathLike) -> Iterator[tuple[str, str, str | None]]:
    """``(where, value, InChIKey first block or None)`` for every row (record) of a user's list."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "no such file; give a list of SMILES or InChIKeys (one per row) or an SDF.")
    name = path.name.lower().removesuffix(".gz")
    try:
        if name.endswith((".sdf", ".sd", ".mol")):
            for n, value in _sdf_records(path):
                yield f"record {n}", value or "(unreadable record)", key_of(value) if value else None
            return
        rows = table_rows(path)
        first = next(rows, None)
        if first is None:
            return
        names = [c.strip().lower() for c in first[1]]
        col = next((names.index(c) for c in (*_KEY_COLUMNS, *_SMILES_COLUMNS) if c in names), None)
        if col is None:
            col = 0
            rows = _chain(first, rows)
        for line, row in rows:
            value = row[col].strip() if len(row) > col else ""
            yield f"line {line}", value, key_of(value) if value else None
    except (OSError, EOFError, UnicodeError, csv.Error) as e:
        raise InputFileError(path, f"cannot be read ({type(e).__name__}: {e}).") from e


def _chain(first, rest):
    yield first
    yield from rest


def scan_structure_list(
    path: str | os.PathLike, max_problems: int = 20, every: int = 500
) -> Generator[int, None, StructureList]:
    """:func:`read_structure_list` as a generator that yields the rows read so far every ``every`` rows (for
    a progress bar and cancelling) and returns the :class:`StructureList`."""
    keys: dict[str, None] = {}
    problems: list[str] = []
    n_rows = n_problems = 0
    for where, value, key in iter_structure_list(path):
        n_rows += 1
        if key is None:
            n_problems += 1
            if len(problems) < max_problems:
                problems.append(f"{where}: {value[:60]!r} is neither an InChIKey nor a SMILES RDKit can read")
        else:
            keys.setdefault(key, None)
        if n_rows % every == 0:
            yield n_rows
    if not keys:
        detail = f" ({problems[0]})" if problems else ""
        raise InputFileError(path, f"no structure found in {n_rows} rows{detail}; give SMILES or InChIKeys, one per "
                             "row (a header naming a 'smiles' or 'inchikey' column is allowed), or an SDF.")
    return StructureList(str(path), tuple(keys), n_rows, tuple(problems), n_problems)


def read_structure_list(path: str | os.PathLike, max_problems: int = 20) -> StructureList:
    """Every structure of a user's list (see the module docstring); rows that are neither an InChIKey nor a
    readable SMILES are counted and the first ``max_problems`` named. A list without any structure raises
    InputFileError."""

    return run_to_end(scan_structure_list(path, max_problems))


# -- marking ---------------------------------------------------------------------------------------
class NoveltyMarker:
    """Labels structures ``training corpus``, ``user list`` (both, joined by ``; ``) or ``new``.

    Without any set to compare with, every label is empty: nothing can be called new.
    """

    def __init__(self, corpus: KnownStructures | None = None, user: KnownStructures | None = None):
        self.corpus = corpus
        self.user = user

    @property
    def active(self) -> bool:
        return self.corpus is not None or self.user is not None

    def labels(self, keys: Sequence[str | None]) -> list[str]:
        if not self.active:
            return [""] * len(keys)
        hits = [(CORPUS, s.contains(keys)) for s in (self.corpus,) if s is not None]
        hits += [(USER, s.contains(keys)) for s in (self.user,) if s is not None]
        return [SEPARATOR.join(name for name, found in hits if found[i]) or NEW for i in range(len(keys))]

    def label(self, key: str | None) -> str:
        return self.labels([key])[0]

    def describe(self) -> str:
        """What the labels were checked against, for an export's header."""
        parts = []
        if self.corpus is not None:
            parts.append(f"{CORPUS}: {self.corpus.source or f'{len(self.corpus):,} structures'}")
        if self.user is not None:
            parts.append(f"{USER}: {self.user.source or f'{len(self.user):,} structures'}")
        return "; ".join(parts) if parts else "not checked (no known structures given)"


def categories(label: str) -> set[str]:
    """The categories of a label (``"training corpus; user list"`` → both; ``""`` → none)."""
    return {part for part in label.split(SEPARATOR) if part}
