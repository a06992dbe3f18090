"""Building a :class:`~engine.library.index.StructureLibrary` from a library file, as a generator of progress.

Each row's structure (SMILES, InChI or molfile) is read by RDKit and put in the form candidates have
(:data:`STANDARDISATION`): the largest fragment, neutralised where RDKit's ``Uncharger`` can, stereochemistry
removed, canonical SMILES. Its key is the first block of its InChIKey; a structure seen before (same key) is
a duplicate: the first row's name, identifier and CAS number are kept, and the duplicate's source is added
to the first row's (``;``-joined). Rows without a structure RDKit can read are skipped and reported by their
line (the first :data:`MAX_PROBLEMS`, and a count).

``trust_keys=True`` is for files this program wrote itself, such as the bundled library
(:mod:`engine.library.cache`, written by ``training.bundle.structure_library``): a row with a SMILES, its InChIKey and
its formula is taken as it is, already standardised, and RDKit is not run on it at all (mass from the formula);
a row without a formula still takes its own InChIKey when the structure needed no standardisation. Such a
library computes fingerprints when they are first asked for (:meth:`StructureLibrary.bits`), so the bundled
library of 179k structures is indexed in seconds rather than minutes.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import Generator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import rdMolDescriptors
from rdkit.Chem.MolStandardize import rdMolStandardize

from engine import __version__
from engine.chem import molecules as chem
from engine.chem.formula import ELECTRON_MASS, formula_mass, normalize_formula, parse_formula
from engine.errors import FormulaError
from engine.progress import CancelFn, check_cancel

from .index import TEXT_COLUMNS, StructureLibrary
from .read import LibraryError, LibraryFile, RawStructure, file_sha256

STANDARDISATION = ("RDKit: largest fragment; neutralised where possible (Uncharger); stereochemistry removed; "
                   "canonical SMILES")
MAX_PROBLEMS = 20
EVERY = 500  # rows between progress events (and cancel checks)
_INCHIKEY = re.compile(r"^([A-Z]{14})(?:-[A-Z]{10}(?:-[A-Z])?)?$")
assert chem.N_BITS <= 1 << 16, "bits are stored as uint16"


@dataclass(frozen=True)
class LibraryProgress:
    """A progress event of building or opening a library: ``done`` of ``total`` (bytes of its file)."""

    done: int
    total: int
    text: str


@lru_cache(maxsize=1)
def _uncharger():
    return rdMolStandardize.Uncharger()


@lru_cache(maxsize=1)
def _largest_fragment():
    return rdMolStandardize.LargestFragmentChooser(preferOrganic=True)


def parse_structure(raw: RawStructure) -> Chem.Mol | None:
    """The RDKit molecule of a row's SMILES, InChI or molfile; ``None`` when RDKit cannot read it."""
    kind = raw.kind
    if kind == "smiles":
        return chem.mol_from_smiles(raw.text)
    with rdBase.BlockLogs():
        if kind == "inchi":
            mol = Chem.MolFromInchi(raw.text, sanitize=True, removeHs=True, logLevel=None)
        elif kind == "molfile":
            mol = Chem.MolFromMolBlock(raw.text)
        else:
            return None
    return mol if mol is not None and mol.GetNumAtoms() else None


def standardize(mol: Chem.Mol) -> tuple[Chem.Mol, bool]:
    """The largest fragment, neutralised where possible; and whether that changed anything."""
    changed = False
    if len(Chem.GetMolFrags(mol)) > 1:
        mol, changed = _largest_fragment().choose(mol), True
    if any(atom.GetFormalCharge() for atom in mol.GetAtoms()):
        with rdBase.BlockLogs():
            mol, changed = _uncharger().uncharge(mol), True
    return mol, changed


def neutral_mass(mol: Chem.Mol) -> float:
    """Monoisotopic mass of the atoms as drawn (a charged molecule's electrons not counted in or out), so it
    is the mass of :func:`~engine.chem.molecules.mol_formula`."""
    return rdMolDescriptors.CalcExactMolWt(mol) + Chem.GetFormalCharge(mol) * ELECTRON_MASS


def _problem(raw: RawStructure) -> str:
    text = raw.text if raw.kind != "molfile" else ""
    shown = repr(text[:60] + ("..." if len(text) > 60 else ""))
    return {"": "no structure (the SMILES/InChI cell is empty, or the record has no molfile)",
            "smiles": f"{shown} is not a SMILES RDKit can read",
            "inchi": f"{shown} is not an InChI RDKit can read",
            "molfile": "the molfile cannot be read by RDKit"}[raw.kind]


class _Rows:
    """What a build accumulates, row by row, in compact buffers (no Python object a structure but a source)."""

    def __init__(self, trust_keys: bool):
        self.trust_keys = trust_keys
        self.text = {c: (bytearray(), array("q", [0])) for c in TEXT_COLUMNS if c != "source"}
        self.sources: list[str] = []
        self.keys = bytearray()
        self.row_of_key: dict[str, int] = {}
        self.masses = array("d")
        self.formula_ids = array("i")
        self.formula_index: dict[str, int] = {}
        self.bits = array("H")
        self.bits_offsets = array("q", [0])
        self.formula_masses: dict[str, float] = {}
        self.n_duplicates = 0

    def __len__(self) -> int:
        return len(self.masses)

    def add(self, raw: RawStructure) -> str | None:
        """Add a row's structure (or merge a duplicate's source); a problem's text when it has none."""
        trusted = self._trusted(raw)
        if trusted is not None:
            if isinstance(trusted, str):
                return trusted
            self._append(raw, *trusted, mol=None)
            return None
        mol = parse_structure(raw)
        if mol is None:
            return _problem(raw)
        mol, changed = standardize(mol)
        given = _INCHIKEY.match(raw.inchikey.strip().upper()) if self.trust_keys and not changed else None
        key = given.group(1) if given else chem.inchikey14(mol)
        if key is None:
            return "RDKit cannot make an InChIKey of this structure"
        self._append(raw, key, chem.canonical_smiles(mol), chem.mol_formula(mol), neutral_mass(mol), mol=mol)
        return None

    def _trusted(self, raw: RawStructure) -> tuple[str, str, str, float] | str | None:
        """``(key, smiles, formula, mass)`` of a row taken as written (``trust_keys``, SMILES, key and formula
        given), a problem's text when its formula is not one, ``None`` when RDKit has to read the row."""
        if not (self.trust_keys and raw.formula and raw.kind == "smiles"):
            return None
        given = _INCHIKEY.match(raw.inchikey.strip().upper())
        if given is None:
            return None
        try:
            formula = normalize_formula(raw.formula)
        except FormulaError as e:
            return f"{raw.formula!r} is not a formula ({e})"
        mass = self.formula_masses.get(formula)
        if mass is None:
            mass = self.formula_masses[formula] = formula_mass(parse_formula(formula))
        return given.group(1), raw.text, formula, mass

    def _append(self, raw: RawStructure, key: str, smiles: str, formula: str, mass: float,
                mol: Chem.Mol | None) -> None:
        """Add one structure (or merge a duplicate's source into its first row)."""
        first = self.row_of_key.get(key)
        if first is not None:
            self.n_duplicates += 1
            self._merge_source(first, raw.source)
            return
        self.row_of_key[key] = len(self)
        self.keys += key.encode("ascii")
        values = {"smiles": smiles, "name": raw.name, "identifier": raw.identifier, "cas": raw.cas}
        for column, (data, offsets) in self.text.items():
            data += values[column].encode("utf-8")
            offsets.append(len(data))
        self.sources.append(raw.source)
        self.masses.append(mass)
        self.formula_ids.append(self.formula_index.setdefault(formula, len(self.formula_index)))
        if not self.trust_keys:  # a trusted library's fingerprints are computed when first asked for
            self.bits.extend(chem.morgan_bits(mol).tolist())
        self.bits_offsets.append(len(self.bits))

    def _merge_source(self, row: int, source: str) -> None:
        have = self.sources[row]
        parts = [s for s in have.split(";") if s]
        new = [s for s in source.split(";") if s and s not in parts]
        if new:
            self.sources[row] = ";".join(parts + new)

    def finish(self) -> dict[str, np.ndarray]:
        """The arrays of :class:`StructureLibrary` (see :mod:`engine.library.index`)."""
        out: dict[str, np.ndarray] = {}
        for column, (data, offsets) in self.text.items():
            out[column] = np.frombuffer(bytes(data), dtype=np.uint8)
            out[column + "_offsets"] = np.frombuffer(offsets, dtype=np.int64).copy()
        encoded = [s.encode("utf-8") for s in self.sources]
        out["source"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        out["source_offsets"] = np.concatenate([[0], np.cumsum([len(b) for b in encoded], dtype=np.int64)])
        keys = np.frombuffer(bytes(self.keys), dtype="S14")
        mass = np.frombuffer(self.masses, dtype=np.float64).copy()
        names = sorted(self.formula_index, key=lambda f: f.encode("ascii", errors="replace"))
        rank = np.empty(len(names), dtype=np.int32)
        rank[[self.formula_index[f] for f in names]] = np.arange(len(names), dtype=np.int32)
        formula_of_row = rank[np.frombuffer(self.formula_ids, dtype=np.int32)]
        starts = np.zeros(len(names) + 1, dtype=np.int64)
        np.cumsum(np.bincount(formula_of_row, minlength=len(names)), out=starts[1:])
        out.update(
            inchikey14=keys, mass=mass, mass_order=np.argsort(mass, kind="stable").astype(np.int32),
            formula_names=np.array([f.encode("ascii", errors="replace") for f in names], dtype="S"),
            formula_of_row=formula_of_row, formula_starts=starts,
            formula_rows=np.argsort(formula_of_row, kind="stable").astype(np.int32),
            key_order=np.argsort(keys, kind="stable").astype(np.int32),
            bits=np.frombuffer(self.bits, dtype=np.uint16).copy(),
            bits_offsets=np.frombuffer(self.bits_offsets, dtype=np.int64).copy())
        return out


def build_library(path: str | os.PathLike, name: str | None = None, *, trust_keys: bool = False,
                  checksum: str | None = None, cancel: CancelFn | None = None, max_problems: int = MAX_PROBLEMS,
                  ) -> Generator[LibraryProgress, None, StructureLibrary]:
    """Read every row of a library file (:mod:`engine.library.read`) and index it, yielding progress every
    :data:`EVERY` rows and checking ``cancel`` there; returns the library (in memory: :meth:`StructureLibrary.save`
    writes it). ``checksum`` is the file's SHA-256 when the caller has it (else computed). Raises
    :class:`LibraryError` when the file cannot be read or holds no structure, :class:`~engine.errors.Cancelled`
    when cancelled."""
    path = Path(path)
    label = name or path.name
    rows = _Rows(trust_keys)
    problems: list[str] = []
    n_rows = n_problems = 0
    with LibraryFile(path) as f:
        size = f.size
        if checksum is None:
            checksum = file_sha256(path, cancel)
        yield LibraryProgress(0, size, f"Indexing {label}")
        for raw in f:
            n_rows += 1
            if n_rows % EVERY == 0:
                check_cancel(cancel)
                yield LibraryProgress(min(f.position, size), size,
                                      f"Indexing {label}: {len(rows):,} structures from {n_rows:,} rows")
            problem = rows.add(raw)
            if problem is not None:
                n_problems += 1
                if len(problems) < max_problems:
                    problems.append(f"{raw.where}: {problem}")
        file_format = f.format
    if not len(rows):
        first = f" ({problems[0]})" if problems else ""
        raise LibraryError(path, f"no structure RDKit can read in {n_rows:,} rows{first}; "
                           "check that the SMILES (or InChI) column holds structures.")
    check_cancel(cancel)
    yield LibraryProgress(size, size, f"Indexing {label}: {len(rows):,} structures, sorting")
    info = {
        "name": label, "source_path": str(path.resolve()), "source_sha256": checksum, "source_size": size,
        "source_format": file_format, "n_rows": n_rows, "n_structures": len(rows),
        "n_duplicates": rows.n_duplicates, "n_problems": n_problems, "problems": problems,
        "standardisation": STANDARDISATION, "trust_keys": trust_keys,
        "fingerprint": {"kind": "morgan", "radius": chem.RADIUS, "n_bits": chem.N_BITS, "lazy": trust_keys},
        "built_by": f"msgpt {__version__}",
    }
    return StructureLibrary(rows.finish(), info)
