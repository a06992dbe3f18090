"""RDKit helpers for candidates and reference structures (called for 100s of molecules a spectrum).

Fingerprints are sorted ``int64`` arrays of active bit indices (see docs/architecture.md).
RDKit's own logging is silenced for parsing, so a bad SMILES gives ``None``, not console noise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np
from rdkit import Chem, DataStructs, rdBase
from rdkit.Chem import rdDepictor, rdFingerprintGenerator, rdMolDescriptors

Mol = Chem.Mol

N_BITS = 4096
RADIUS = 2

_CHARGE_SUFFIX = re.compile(r"[+-]\d*$")


def mol_from_smiles(smiles: str | None) -> Mol | None:
    """RDKit molecule for ``smiles``; ``None`` for empty, invalid or non-string input (no log output)."""
    if not isinstance(smiles, str) or not smiles.strip():
        return None
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles.strip())
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    return mol


def _as_mol(mol_or_smiles: Mol | str | None) -> Mol | None:
    if isinstance(mol_or_smiles, Chem.Mol):
        return mol_or_smiles
    return mol_from_smiles(mol_or_smiles)


def remove_stereo(mol: Mol) -> Mol:
    """Remove stereochemistry from ``mol`` **in place** (RDKit's way) and return it for chaining."""
    Chem.RemoveStereochemistry(mol)
    return mol


def canonical_smiles(smiles_or_mol: Mol | str | None, remove_stereo: bool = True) -> str | None:
    """RDKit canonical SMILES (without stereo by default); ``None`` if it cannot be parsed.

    A molecule passed in is not modified.
    """
    mol = _as_mol(smiles_or_mol)
    if mol is None:
        return None
    if remove_stereo:
        mol = Chem.Mol(mol)
        Chem.RemoveStereochemistry(mol)
    return Chem.MolToSmiles(mol)


@lru_cache(maxsize=8)
def _morgan_generator(radius: int, n_bits: int):
    return rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)


@lru_cache(maxsize=1)
def _topological_generator():
    # Same bits as Chem.RDKFingerprint(mol) with its defaults (paths up to 7 bonds, 2048 bits).
    return rdFingerprintGenerator.GetRDKitFPGenerator()


def morgan_bits(mol: Mol, n_bits: int = N_BITS, radius: int = RADIUS) -> np.ndarray:
    """Sorted active bit indices (``int64``) of the Morgan fingerprint (no chirality)."""
    fp = _morgan_generator(radius, n_bits).GetFingerprint(mol)
    return np.array(fp.GetOnBits(), dtype=np.int64)


def morgan_generator(radius: int = RADIUS, n_bits: int = N_BITS):
    """The RDKit generator of :func:`morgan_bits` (shared, cached): for bit information (engine.model.bitlegend)."""
    return _morgan_generator(radius, n_bits)


def morgan_bits_from_smiles(smiles: str, n_bits: int = N_BITS, radius: int = RADIUS) -> np.ndarray | None:
    """:func:`morgan_bits` of a SMILES; ``None`` if it cannot be parsed."""
    mol = mol_from_smiles(smiles)
    return None if mol is None else morgan_bits(mol, n_bits, radius)


def inchi(mol: Mol) -> str | None:
    """Standard InChI, or ``None`` when RDKit cannot make one."""
    with rdBase.BlockLogs():
        value = Chem.MolToInchi(mol)
    return value or None


def inchikey(mol: Mol) -> str | None:
    """Standard InChIKey (27 characters), or ``None`` when RDKit cannot make one."""
    with rdBase.BlockLogs():
        key = Chem.MolToInchiKey(mol)
    return key or None


def inchikey14(mol_or_smiles: Mol | str) -> str | None:
    """First block of the InChIKey (the 2D skeleton, 14 characters), or ``None``."""
    mol = _as_mol(mol_or_smiles)
    key = inchikey(mol) if mol is not None else None
    return key[:14] if key else None


def mol_formula(mol: Mol) -> str:
    """Hill formula of the atoms as drawn (``rdMolDescriptors.CalcMolFormula``) without the charge.

    For a charged molecule this is the formula of the drawn species with its charge sign dropped:
    choline ``C[N+](C)(C)CCO`` gives ``C5H14NO`` (RDKit: ``C5H14NO+``), acetate ``CC(=O)[O-]``
    gives ``C2H3O2``. No hydrogens are added or removed to neutralise it.
    """
    return _CHARGE_SUFFIX.sub("", rdMolDescriptors.CalcMolFormula(mol))


def mol_formula_counts(mol: Mol) -> dict[str, int]:
    """Element counts of the molecule, hydrogens included (isotopes count as their element)."""
    counts: dict[str, int] = {}
    n_h = 0
    for atom in mol.GetAtoms():
        symbol = atom.GetSymbol()
        counts[symbol] = counts.get(symbol, 0) + 1
        n_h += atom.GetTotalNumHs()
    if n_h:
        counts["H"] = counts.get("H", 0) + n_h
    return counts


def formula_matches(mol: Mol, formula_counts: Mapping[str, int]) -> bool:
    """True when the molecule has exactly the element counts ``formula_counts`` (zeros ignored)."""
    wanted = {e: int(n) for e, n in formula_counts.items() if int(n) != 0}
    return mol_formula_counts(mol) == wanted


def tanimoto(a_bits: np.ndarray, b_bits: np.ndarray) -> float:
    """Tanimoto similarity of two sorted, duplicate-free arrays of active bits (both empty: 0.0)."""
    n_a, n_b = len(a_bits), len(b_bits)
    if n_a == 0 or n_b == 0:
        return 0.0
    pos = np.searchsorted(b_bits, a_bits)
    pos[pos == n_b] = n_b - 1
    common = int(np.count_nonzero(b_bits[pos] == a_bits))
    return common / (n_a + n_b - common)


def tanimoto_many(bits: np.ndarray, others: Sequence[np.ndarray]) -> np.ndarray:
    """Tanimoto similarity of ``bits`` to each array in ``others`` (``float64``, one per entry)."""
    if len(others) == 0:
        return np.zeros(0, dtype=np.float64)
    bits = np.asarray(bits, dtype=np.int64)
    lengths = np.fromiter((len(o) for o in others), dtype=np.int64, count=len(others))
    flat = np.concatenate([np.asarray(o, dtype=np.int64) for o in others])
    size = int(max(bits.max(initial=-1), flat.max(initial=-1))) + 1
    mask = np.zeros(size, dtype=bool)
    mask[bits] = True
    owner = np.repeat(np.arange(len(others)), lengths)
    common = np.bincount(owner, weights=mask[flat], minlength=len(others))
    union = len(bits) + lengths - common
    return np.divide(common, union, out=np.zeros(len(others)), where=union > 0)


def max_tanimoto(bits: np.ndarray, list_of_bits: Sequence[np.ndarray]) -> float:
    """Highest Tanimoto similarity of ``bits`` to any entry of ``list_of_bits`` (empty list: 0.0)."""
    sims = tanimoto_many(bits, list_of_bits)
    return float(sims.max()) if len(sims) else 0.0


def topological_tanimoto(mol_a: Mol, mol_b: Mol) -> float:
    """Tanimoto similarity of RDKit topological (path) fingerprints, as used for "close match"."""
    gen = _topological_generator()
    return float(DataStructs.TanimotoSimilarity(gen.GetFingerprint(mol_a), gen.GetFingerprint(mol_b)))


def mol_with_2d_coords(mol_or_smiles: Mol | str | None) -> Mol | None:
    """A copy of the molecule with computed 2D coordinates; ``None`` if it cannot be parsed."""
    mol = _as_mol(mol_or_smiles)
    if mol is None:
        return None
    mol = Chem.Mol(mol)
    rdDepictor.Compute2DCoords(mol)
    return mol


def mol_to_molblock_2d(mol: Mol) -> str:
    """MDL molblock with freshly computed 2D coordinates (the molecule is not modified)."""
    return Chem.MolToMolBlock(mol_with_2d_coords(mol))
