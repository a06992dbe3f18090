"""A structure library in memory and on disk: one record a structure, looked up by formula, mass or key.

A :class:`StructureLibrary` holds, for each distinct structure (first InChIKey block): its canonical SMILES,
the InChIKey first block, the Hill formula and monoisotopic mass of the neutral molecule, its Morgan
fingerprint (:data:`~engine.chem.molecules.N_BITS` bits, radius :data:`~engine.chem.molecules.RADIUS`),
and the name, identifier, CAS number and source the file gave. Everything is a handful of numpy arrays (no
Python object per structure), so a library of a million structures loads in well under a second and a query
is a binary search.

The index file (``.npz``, :data:`FORMAT` version :data:`FORMAT_VERSION`, plain arrays, no pickles,
written uncompressed so that it loads fast; ``n`` structures, ``f`` distinct formulas)::

    format, format_version  str, int64
    info               str     JSON: name, source file (path, sha256, size), rows read, problems, settings
    smiles, name, identifier, cas, source
                       uint8 (bytes,) + int64 (n+1,) as <column> and <column>_offsets: UTF-8 text, CSR
    inchikey14         S14  (n,)
    mass               float64 (n,)    neutral monoisotopic mass
    mass_order         int32 (n,)      rows by increasing mass
    formula_names      S    (f,)       distinct Hill formulas, sorted (bytes order)
    formula_of_row     int32 (n,)      index into formula_names
    formula_rows       int32 (n,)      rows grouped by formula (formula_names order), rows ascending within
    formula_starts     int64 (f+1,)    formula k's rows: formula_rows[formula_starts[k]:formula_starts[k+1]]
    key_order          int32 (n,)      rows by increasing inchikey14
    bits               uint16 (nnz,)   active Morgan bits of all rows, each row's sorted (none when
                                       info.fingerprint.lazy: computed from the SMILES when asked for)
    bits_offsets       int64 (n+1,)    row r's bits: bits[bits_offsets[r]:bits_offsets[r+1]]

Building one from a file is :mod:`engine.library.build`; keeping it in the user's data folder is
:mod:`engine.library.cache`.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.chem.formula import normalize_formula
from engine.chem.molecules import morgan_bits_from_smiles
from engine.errors import FormulaError

from .read import LibraryError

FORMAT = "msgpt-structure-library"
FORMAT_VERSION = 1
TEXT_COLUMNS = ("smiles", "name", "identifier", "cas", "source")
_ARRAYS = ("inchikey14", "mass", "mass_order", "formula_names", "formula_of_row", "formula_rows",
           "formula_starts", "key_order", "bits", "bits_offsets")


@dataclass(frozen=True)
class LibraryRecord:
    """One structure of a library, as :meth:`StructureLibrary.record` gives it."""

    row: int
    smiles: str  # canonical, without stereochemistry
    inchikey14: str
    formula: str  # Hill formula of the neutral molecule
    mass: float  # its monoisotopic mass
    name: str
    identifier: str
    cas: str
    source: str  # the row's source column, else the library's name
    charge: int = 0  # net formal charge of the structure as stored (+1: a permanent cation such as choline)


_BRACKET_ATOM = re.compile(r"\[([^\]]*)\]")
_CHARGE_SPEC = re.compile(r"([+-])(\d+|[+-]*)$")


def smiles_charge(smiles: str) -> int:
    """Net formal charge of a SMILES: the sum of its bracket atoms' charges (``[N+]`` +1, ``[O-]`` -1, ``[Fe+2]``
    and ``[Fe++]`` +2). A standardised library structure keeps a charge only where RDKit's Uncharger cannot take it
    off: a quaternary ammonium, phosphonium or sulfonium cation (``C[N+](C)(C)CCO``, choline: +1), or a
    zwitterion (betaine, carnitine's inner salt: 0). Its formula is that of the atoms drawn
    (:func:`engine.chem.molecules.mol_formula` drops the charge: choline is ``C5H14NO``) and its mass theirs, so
    a cation's ``M`` is the ion's atoms: it is seen as ``[M]+`` at ``M - e``."""
    total = 0
    for atom in _BRACKET_ATOM.findall(smiles):
        m = _CHARGE_SPEC.search(atom.split(":", 1)[0])
        if m is None:
            continue
        sign, rest = (1 if m.group(1) == "+" else -1), m.group(2)
        total += sign * (int(rest) if rest.isdigit() else 1 + len(rest))
    return total


class TextColumn:
    """Strings stored as one UTF-8 byte array plus offsets (CSR): no Python object per row."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        self.data = np.asarray(data, dtype=np.uint8)
        self.offsets = np.asarray(offsets, dtype=np.int64)

    @classmethod
    def from_strings(cls, values) -> TextColumn:
        encoded = [v.encode("utf-8") for v in values]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row: int) -> str:
        return self.data[self.offsets[row] : self.offsets[row + 1]].tobytes().decode("utf-8", errors="replace")


class StructureLibrary:
    """A library's structures and their indexes (see the module docstring for the arrays).

    ``name`` is what the app shows (settable); ``checksum`` is the SHA-256 of the source file it was built
    from; ``info`` the rest of what the build recorded (rows read, problems, settings).
    """

    def __init__(self, arrays: dict[str, np.ndarray], info: dict):
        self.info = dict(info)
        self.name: str = str(self.info.get("name", ""))
        #: A suspect list: its structures of a spectrum rank before every prediction (set by whoever opens it;
        #: the bundled library's join the predictions by score). Not stored in the index.
        self.suspect: bool = False
        self.text = {c: TextColumn(arrays[c], arrays[c + "_offsets"]) for c in TEXT_COLUMNS}
        for key in _ARRAYS:
            setattr(self, "_" + key, np.asarray(arrays[key]))
        self._mass_sorted = self._mass[self._mass_order]
        self._keys_sorted = self._inchikey14[self._key_order]
        self.lazy_bits = bool(self.info.get("fingerprint", {}).get("lazy"))
        self._computed_bits: dict[int, np.ndarray] = {}
        self._check()

    def _check(self) -> None:
        n = len(self._inchikey14)
        sizes = {"mass": len(self._mass), "mass_order": len(self._mass_order), "key_order": len(self._key_order),
                 "formula_of_row": len(self._formula_of_row), "formula_rows": len(self._formula_rows),
                 "bits_offsets": len(self._bits_offsets) - 1,
                 **{c: len(col) for c, col in self.text.items()}}
        wrong = {k: v for k, v in sizes.items() if v != n}
        if wrong or len(self._formula_starts) != len(self._formula_names) + 1:
            raise ValueError(f"inconsistent arrays: {n} structures but {wrong or 'formula_starts'}")

    # -- size and identity ---------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._inchikey14)

    def __repr__(self) -> str:
        return f"StructureLibrary({self.name!r}, {len(self):,} structures)"

    @property
    def checksum(self) -> str:
        """SHA-256 (hex) of the source file the library was built from."""
        return str(self.info.get("source_sha256", ""))

    @property
    def n_rows(self) -> int:
        """Rows (records) the source file had."""
        return int(self.info.get("n_rows", len(self)))

    @property
    def problems(self) -> tuple[str, ...]:
        """The first rows that could not be read, as ``"line 7: ..."`` (see :attr:`n_problems`)."""
        return tuple(self.info.get("problems", ()))

    @property
    def n_problems(self) -> int:
        return int(self.info.get("n_problems", 0))

    # -- queries -------------------------------------------------------------------------------
    def rows_of_formula(self, formula: str) -> np.ndarray:
        """Rows (``int64``, ascending) whose neutral formula is ``formula`` (any element order: it is put in
        Hill order first)."""
        try:
            formula = normalize_formula(formula)
        except FormulaError:
            formula = formula.strip()  # elements beyond the supported 14 (e.g. Na, Sn): as written
        key = np.bytes_(formula.encode("ascii", errors="replace"))
        k = int(np.searchsorted(self._formula_names, key))
        if k == len(self._formula_names) or self._formula_names[k] != key:
            return np.zeros(0, dtype=np.int64)
        return self._formula_rows[self._formula_starts[k] : self._formula_starts[k + 1]].astype(np.int64)

    def rows_near_mass(self, mass: float, ppm: float) -> np.ndarray:
        """Rows (``int64``, ascending) whose neutral monoisotopic mass is within ``ppm`` of ``mass``."""
        tol = abs(float(mass)) * float(ppm) * 1e-6
        lo = np.searchsorted(self._mass_sorted, mass - tol, side="left")
        hi = np.searchsorted(self._mass_sorted, mass + tol, side="right")
        return np.sort(self._mass_order[lo:hi]).astype(np.int64)

    def row_of_key(self, inchikey14: str) -> int | None:
        """The row of a structure by its InChIKey first block (a full InChIKey is cut); ``None`` if absent."""
        key = np.bytes_(inchikey14[:14].encode("ascii", errors="replace"))
        k = int(np.searchsorted(self._keys_sorted, key))
        if k < len(self._keys_sorted) and self._keys_sorted[k] == key:
            return int(self._key_order[k])
        return None

    def bits(self, row: int) -> np.ndarray:
        """Active Morgan bits of ``row``: sorted ``int64``, as :func:`engine.chem.molecules.morgan_bits`. A
        library built with ``trust_keys`` (``info["fingerprint"]["lazy"]``) stores none: they are computed from
        the SMILES when first asked for and kept."""
        if not self.lazy_bits:
            return self._bits[self._bits_offsets[row] : self._bits_offsets[row + 1]].astype(np.int64)
        row = int(row)
        bits = self._computed_bits.get(row)
        if bits is None:
            bits = morgan_bits_from_smiles(self.smiles(row))
            if bits is None:
                raise LibraryError(self.info.get("source_path", self.name),
                                   f"structure {self.smiles(row)!r} (row {row}) cannot be read by RDKit; rebuild "
                                   "the library's index (delete it from the data folder).")
            self._computed_bits[row] = bits = bits.astype(np.int64)
        return bits

    def formulas(self) -> np.ndarray:
        """Every distinct formula of the library (sorted, as ``str``)."""
        return self._formula_names.astype(str)

    @property
    def masses(self) -> np.ndarray:
        """Neutral monoisotopic mass of every row (read-only view)."""
        view = self._mass.view()
        view.flags.writeable = False
        return view

    def inchikey14(self, row: int) -> str:
        return self._inchikey14[row].decode("ascii")

    def smiles(self, row: int) -> str:
        return self.text["smiles"][row]

    def charge(self, row: int) -> int:
        """Net formal charge of ``row``'s structure (:func:`smiles_charge`): +1 for a permanent cation, else
        mostly 0."""
        return smiles_charge(self.smiles(int(row)))

    def record(self, row: int) -> LibraryRecord:
        """Everything stored about ``row``."""
        row = int(row)
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} is not in {self!r}")
        t = {c: col[row] for c, col in self.text.items()}
        return LibraryRecord(row=row, smiles=t["smiles"], inchikey14=self.inchikey14(row),
                             formula=self._formula_names[self._formula_of_row[row]].decode("ascii"),
                             mass=float(self._mass[row]), name=t["name"], identifier=t["identifier"],
                             cas=t["cas"], source=t["source"] or self.name, charge=smiles_charge(t["smiles"]))

    # -- files ---------------------------------------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        out = {key: getattr(self, "_" + key) for key in _ARRAYS}
        for c, col in self.text.items():
            out[c], out[c + "_offsets"] = col.data, col.offsets
        return out

    def save(self, path: str | os.PathLike) -> Path:
        """Write the index file atomically (a temporary file beside it, then renamed)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                np.savez(fh, format=np.array(FORMAT), format_version=np.array(FORMAT_VERSION, dtype=np.int64),
                         info=np.array(json.dumps({**self.info, "name": self.name})), **self.arrays())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> StructureLibrary:
        """Read an index file; :class:`LibraryError` when it is missing, of another format or version, or corrupt."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                fmt, version = str(z["format"]), int(z["format_version"])
                if fmt != FORMAT:
                    raise LibraryError(path, f"is not a structure library index (format {fmt!r}, expected {FORMAT!r}).")
                if version != FORMAT_VERSION:
                    raise LibraryError(path, f"has format_version {version}, this msgpt reads {FORMAT_VERSION}; "
                                       "delete it and open the library's source file again to rebuild it.")
                info = json.loads(str(z["info"]))
                arrays = {k: z[k] for k in z.files if k not in ("format", "format_version", "info")}
            return cls(arrays, info)
        except LibraryError:
            raise
        except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as e:
            raise LibraryError(path, f"cannot be read as a structure library index ({type(e).__name__}: {e}); "
                               "delete it and open the library's source file again to rebuild it.") from e
