"""Which peaks of a spectrum a given structure explains: its bond-cleavage fragments, matched by m/z.

A structure explains a peak when one of its fragments, as an ion, lies within the tolerance of the
peak (the rule of :mod:`engine.spectra.annotate`: ``|observed - theoretical| <= max(tol_ppm·1e-6·m/z, tol_da)``).
Fragments follow MetFrag's model: every connected piece left after cutting up to ``max_breaks``
bonds (a ring needs two cuts to open; the whole molecule is a piece too), each with its atoms'
hydrogens, shifted by up to ``h_shift`` hydrogens either way (rearrangements, the neutral losses of
water and ammonia that go with a cut), and charged by each ion part of the precursor's ion type
(``[M+H]+`` fragments carry ``+H``; ``[M+Na]+`` fragments ``+Na`` or ``+H``; see
:data:`engine.spectra.annotate.ION_TYPES`).

What any structure of the formula could explain is the peak annotation by subformulas
(:func:`engine.spectra.annotate.annotate_spectrum`); the share of that which a given structure explains tells
isomers apart. Cutting more bonds explains more peaks by chance: at ``max_breaks=3`` most peaks of
a small molecule are explained by almost any isomer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.chem import molecules as chem
from engine.chem.formula import ELECTRON_MASS, ELEMENT_INDEX, ELEMENTS, element_mass, element_masses
from engine.errors import ConfigError
from engine.spectra.annotate import DEFAULT_TOL_DA, DEFAULT_TOL_PPM, get_ion_type, ion_formula

MAX_STATES = 20_000  # fragment states explored per structure (a cap for very large molecules)


@dataclass(frozen=True)
class FragmentSettings:
    max_breaks: int = 2
    h_shift: int = 2
    tol_ppm: float = DEFAULT_TOL_PPM
    tol_da: float = DEFAULT_TOL_DA

    def __post_init__(self):
        if not isinstance(self.max_breaks, int) or not 0 <= self.max_breaks <= 3:
            raise ConfigError(f"`max_breaks` must be 0, 1, 2 or 3 bond cuts, got {self.max_breaks!r}.")
        if not isinstance(self.h_shift, int) or not 0 <= self.h_shift <= 4:
            raise ConfigError(f"`h_shift` must be an integer number of hydrogens in [0, 4], got {self.h_shift!r}.")
        if self.tol_ppm < 0 or self.tol_da < 0 or (self.tol_ppm == 0 and self.tol_da == 0):
            raise ConfigError(f"`tol_ppm` and `tol_da` must be >= 0 and not both zero, got {self.tol_ppm}, {self.tol_da}.")


@dataclass(frozen=True, eq=False)
class FragmentExplanation:
    """Peaks of one spectrum explained by one structure's fragments."""

    matched: np.ndarray  # (N,) bool per peak
    ion_formula: tuple[str | None, ...]  # (N,) the closest fragment ion within tolerance, e.g. "C7H7O+"
    intensity: np.ndarray  # (N,)
    n_fragments: int  # distinct fragment formulas (before hydrogen shifts)
    complete: bool  # False when MAX_STATES cut the enumeration short

    @property
    def n_peaks(self) -> int:
        return int(self.matched.size)

    @property
    def n_explained(self) -> int:
        return int(self.matched.sum())

    @property
    def explained_intensity(self) -> float:
        total = float(self.intensity.sum())
        return float(self.intensity[self.matched].sum()) / total if total > 0 else 0.0


def fragment_formulas(mol: chem.Mol, max_breaks: int = 2, max_states: int = MAX_STATES) -> tuple[np.ndarray, bool]:
    """Distinct neutral formulas (``(k, 14)`` int64 over :data:`~engine.chem.formula.ELEMENTS`) of the connected
    pieces left by cutting up to ``max_breaks`` bonds of ``mol``, and whether the enumeration was complete."""
    pieces, complete = fragment_pieces(mol, max_breaks, max_states)
    return np.unique(pieces.formulas, axis=0), complete


@dataclass(frozen=True, eq=False)
class Pieces:
    """The connected pieces of :func:`fragment_pieces`, in the order they were first reached."""

    atoms: tuple[int, ...]  # (k,) bit set of each piece's atom indices
    breaks: np.ndarray  # (k,) int64, the fewest bond cuts that leave the piece (0: the whole molecule)
    formulas: np.ndarray  # (k, 14) int64 neutral formulas, each atom with its hydrogens

    def atom_indices(self, i: int) -> list[int]:
        a = self.atoms[i]
        return [j for j in range(a.bit_length()) if (a >> j) & 1]


def fragment_pieces(mol: chem.Mol, max_breaks: int = 2, max_states: int = MAX_STATES) -> tuple[Pieces, bool]:
    """Every distinct connected piece (atom set) left by cutting up to ``max_breaks`` bonds of ``mol``,
    breadth first (so each comes with its fewest cuts), and whether the enumeration was complete."""
    n = mol.GetNumAtoms()
    vec = np.zeros((n, len(ELEMENTS)), dtype=np.int64)
    for atom in mol.GetAtoms():
        symbol = atom.GetSymbol()
        if symbol not in ELEMENT_INDEX:
            raise ConfigError(f"Element {symbol} is not supported for fragments; supported are {', '.join(ELEMENTS)}.")
        vec[atom.GetIdx(), ELEMENT_INDEX[symbol]] += 1
        vec[atom.GetIdx(), ELEMENT_INDEX["H"]] += atom.GetTotalNumHs()
    bonds = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()]
    adjacency: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for k, (a, b) in enumerate(bonds):
        adjacency[a].append((b, k))
        adjacency[b].append((a, k))

    def pieces(atoms: int, removed: int) -> list[int]:
        out, left = [], atoms
        while left:
            start = (left & -left).bit_length() - 1
            comp, stack = 1 << start, [start]
            while stack:
                a = stack.pop()
                for b, k in adjacency[a]:
                    if not (comp >> b) & 1 and (atoms >> b) & 1 and not (removed >> k) & 1:
                        comp |= 1 << b
                        stack.append(b)
            out.append(comp)
            left &= ~comp
        return out

    full = (1 << n) - 1
    seen = {(full, 0)}
    frontier = [(full, 0)]
    atom_sets = {full: 0}  # piece -> fewest cuts (dicts keep the order pieces were reached in)
    complete = True
    for depth in range(1, max_breaks + 1):
        new = []
        for atoms, removed in frontier:
            for k, (a, b) in enumerate(bonds):
                if (removed >> k) & 1 or not ((atoms >> a) & 1 and (atoms >> b) & 1):
                    continue
                cut = removed | (1 << k)
                for comp in pieces(atoms, cut):
                    inside = cut & _bonds_within(comp, bonds)
                    state = (comp, inside)
                    if state not in seen:
                        seen.add(state)
                        new.append(state)
                        atom_sets.setdefault(comp, depth)
            if len(seen) > max_states:
                complete = False
                break
        frontier = new
        if not complete:
            break
    atoms = tuple(atom_sets)
    formulas = np.array([vec[[i for i in range(n) if (s >> i) & 1]].sum(0) for s in atoms], dtype=np.int64)
    breaks = np.array(list(atom_sets.values()), dtype=np.int64)
    return Pieces(atoms, breaks, formulas.reshape(-1, len(ELEMENTS))), complete


def _bonds_within(atoms: int, bonds: list[tuple[int, int]]) -> int:
    mask = 0
    for k, (a, b) in enumerate(bonds):
        if (atoms >> a) & 1 and (atoms >> b) & 1:
            mask |= 1 << k
    return mask


def explain_peaks(
    mol: chem.Mol, mz: np.ndarray, intensity: np.ndarray, adduct: str, settings: FragmentSettings = FragmentSettings()
) -> FragmentExplanation:
    """Match every peak to the closest fragment ion of ``mol`` (see the module docstring)."""
    mz = np.asarray(mz, dtype=np.float64)
    intensity = np.asarray(intensity, dtype=np.float64)
    ion = get_ion_type(adduct)
    formulas, complete = fragment_formulas(mol, settings.max_breaks)
    h = np.zeros(len(ELEMENTS), dtype=np.int64)
    h[ELEMENT_INDEX["H"]] = 1
    shifted = np.concatenate([formulas + k * h for k in range(-settings.h_shift, settings.h_shift + 1)])
    shifted = np.unique(shifted[(shifted >= 0).all(1) & (shifted.sum(1) > 0)], axis=0)  # (K, 14)
    masses = shifted @ element_masses()
    ion_mz, rows, parts = [], [], []
    for p, part in enumerate(ion.parts):
        delta = sum(element_mass(e) * n for e, n in part.delta)
        ok = np.ones(len(shifted), dtype=bool)
        for e, n in part.delta:  # a part that removes atoms ("-H") needs them
            if n < 0 and e in ELEMENT_INDEX:
                ok &= shifted[:, ELEMENT_INDEX[e]] >= -n
        ion_mz.append((masses[ok] + delta - ion.charge * ELECTRON_MASS) / abs(ion.charge))
        rows.append(np.flatnonzero(ok))
        parts.append(np.full(int(ok.sum()), p))
    cand_mz, cand_row, cand_part = (np.concatenate(x) for x in (ion_mz, rows, parts))
    order = np.argsort(cand_mz, kind="stable")
    cand_mz, cand_row, cand_part = cand_mz[order], cand_row[order], cand_part[order]
    if cand_mz.size == 0 or mz.size == 0:
        return FragmentExplanation(np.zeros(mz.size, bool), (None,) * mz.size, intensity, len(formulas), complete)
    right = np.clip(np.searchsorted(cand_mz, mz), 0, cand_mz.size - 1)
    left = np.clip(right - 1, 0, cand_mz.size - 1)
    best = np.where(np.abs(mz - cand_mz[left]) <= np.abs(mz - cand_mz[right]), left, right)
    matched = np.abs(mz - cand_mz[best]) <= np.maximum(settings.tol_ppm * 1e-6 * mz, settings.tol_da)
    labels = tuple(
        ion_formula(shifted[cand_row[best[i]]], ion.parts[cand_part[best[i]]], ion.charge) if matched[i] else None
        for i in range(mz.size)
    )
    return FragmentExplanation(matched, labels, intensity, len(formulas), complete)
