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
from functools import lru_cache

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import rdmolops

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
    breadth first (so each comes with its fewest cuts), and whether the enumeration was complete.

    A state is a piece and the cut bonds inside it; from each state of the frontier, every bond inside it
    not yet cut is cut in turn (in bond order), and each piece that leaves (in the order of its lowest atom)
    is a state of the next depth unless seen before. Past ``max_states`` states the enumeration stops after
    the state being expanded, so which pieces a capped molecule returns depends on this order: keep it.
    The splitting itself is :class:`_BondGraph`'s (integer bit sets, precomputed bridges and ring systems).
    """
    n = mol.GetNumAtoms()
    vec = np.zeros((n, len(ELEMENTS)), dtype=np.int64)
    for atom in mol.GetAtoms():
        symbol = atom.GetSymbol()
        if symbol not in ELEMENT_INDEX:
            raise ConfigError(f"Element {symbol} is not supported for fragments; supported are {', '.join(ELEMENTS)}.")
        vec[atom.GetIdx(), ELEMENT_INDEX[symbol]] += 1
        vec[atom.GetIdx(), ELEMENT_INDEX["H"]] += atom.GetTotalNumHs()
    graph = _BondGraph(n, [(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()])
    full = (1 << n) - 1
    seen = {(full, 0)}
    frontier = [(full, 0)]
    atom_sets = {full: 0}  # piece -> fewest cuts (dicts keep the order pieces were reached in)
    complete = True
    for depth in range(1, max_breaks + 1):
        new = []
        for atoms, removed in frontier:
            todo = graph.within(atoms) & ~removed
            while todo:
                low = todo & -todo
                todo ^= low
                for state in graph.cut(atoms, removed, low.bit_length() - 1):
                    if state not in seen:
                        seen.add(state)
                        new.append(state)
                        atom_sets.setdefault(state[0], depth)
            if len(seen) > max_states:
                complete = False
                break
        frontier = new
        if not complete:
            break
    atoms = tuple(atom_sets)
    width = max(1, (n + 7) // 8)
    packed = np.frombuffer(b"".join(s.to_bytes(width, "little") for s in atoms), dtype=np.uint8)
    members = np.unpackbits(packed.reshape(len(atoms), width), axis=1, bitorder="little")[:, :n]
    formulas = members.astype(np.int64) @ vec
    breaks = np.array(list(atom_sets.values()), dtype=np.int64)
    return Pieces(atoms, breaks, formulas.reshape(-1, len(ELEMENTS))), complete


class _BondGraph:
    """A molecule's bonds as integer bit sets, for splitting pieces fast (:func:`fragment_pieces`).

    Atom sets are bit sets of atom indices, bond sets bit sets of bond indices. A piece of a state is
    connected once its cut bonds are left out (it is a connected component of a cut), so cutting one more
    bond leaves it whole or splits it in two. Which, and the two halves, come from the whole molecule's
    structure, computed once:

    * a bridge (a bond on no ring) always splits; its halves are the piece's atoms on either side of it
      in the whole molecule;
    * a ring bond can only be reconnected inside its ring system (the atoms joined by ring bonds: a
      path between two of them that leaves the system has to come back over the same bridge), so a
      search from one end over the system's atoms in the piece tells whether the other end is still
      reached; if not, that end's half is the atoms reached plus everything hanging off them over bridges.

    The whole molecule, when it is in several parts (a salt), is the one state that is not connected; it
    is split by a plain search (:meth:`components`).
    """

    def __init__(self, n: int, bonds: list[tuple[int, int]]):
        self.full = (1 << n) - 1
        self.ends = bonds
        self.bond_atoms = [(1 << a) | (1 << b) for a, b in bonds]
        self.neighbours = [0] * n  # atom -> bit set of its neighbours
        self.incident = [0] * n  # atom -> bit set of its bonds
        for k, (a, b) in enumerate(bonds):
            self.neighbours[a] |= 1 << b
            self.neighbours[b] |= 1 << a
            self.incident[a] |= 1 << k
            self.incident[b] |= 1 << k
        self.all_bonds = (1 << len(bonds)) - 1
        self._within: dict[int, int] = {}
        self.connected = n == 0 or self._reach(self.full, 1, 0) == self.full
        # Bridges: the two sides of each; the other bonds lie on rings.
        self.sides: list[tuple[int, int] | None] = []
        hanging = [0] * n  # atom -> the atoms on the far side of its bridges
        for k, (a, b) in enumerate(bonds):
            side_a = self._reach(self.full, 1 << a, 1 << k)
            if (side_a >> b) & 1:
                self.sides.append(None)
            else:
                side_b = self._reach(self.full, 1 << b, 1 << k)
                self.sides.append((side_a, side_b))
                hanging[a] |= side_b
                hanging[b] |= side_a
        self.hanging = hanging
        ring_bonds = 0
        for k, sides in enumerate(self.sides):
            if sides is None:
                ring_bonds |= 1 << k
        # Ring systems: atoms joined by ring bonds; each ring bond -> the atoms and the bonds of its system.
        self.system = [0] * len(bonds)
        self.system_bonds = [0] * len(bonds)
        for k, sides in enumerate(self.sides):
            if sides is None and not self.system[k]:
                system = self._reach(self.full, self.bond_atoms[k], self.all_bonds & ~ring_bonds)
                members = [j for j in range(len(bonds)) if (ring_bonds >> j) & 1 and self.bond_atoms[j] & system]
                system_bonds = sum(1 << j for j in members)
                for j in members:
                    self.system[j], self.system_bonds[j] = system, system_bonds

    def _reach(self, atoms: int, start: int, removed: int) -> int:
        """The atoms of ``atoms`` reached from the atom set ``start`` over bonds not in ``removed``."""
        blocked = self._blocked(removed)
        reach = todo = start
        while todo:
            low = todo & -todo
            todo ^= low
            x = low.bit_length() - 1
            step = self.neighbours[x] & atoms & ~reach & ~blocked.get(x, 0)
            reach |= step
            todo |= step
        return reach

    def _blocked(self, removed: int) -> dict[int, int]:
        """Atom -> the neighbours it is no longer bonded to once the bonds ``removed`` are cut."""
        blocked: dict[int, int] = {}
        while removed:
            low = removed & -removed
            removed ^= low
            a, b = self.ends[low.bit_length() - 1]
            blocked[a] = blocked.get(a, 0) | (1 << b)
            blocked[b] = blocked.get(b, 0) | (1 << a)
        return blocked

    def within(self, atoms: int) -> int:
        """The bonds with both ends in ``atoms`` (cached: states share pieces)."""
        mask = self._within.get(atoms)
        if mask is None:
            outside, touching = self.full & ~atoms, 0
            while outside:
                low = outside & -outside
                outside ^= low
                touching |= self.incident[low.bit_length() - 1]
            mask = self._within[atoms] = self.all_bonds & ~touching
        return mask

    def inside(self, atoms: int, cut: int) -> int:
        """The bonds of ``cut`` with both ends in ``atoms``."""
        out, todo = 0, cut
        while todo:
            low = todo & -todo
            todo ^= low
            ends = self.bond_atoms[low.bit_length() - 1]
            if atoms & ends == ends:
                out |= low
        return out

    def components(self, atoms: int, cut: int) -> list[int]:
        """The connected parts of ``atoms`` once the bonds ``cut`` are cut, in the order of their lowest atom."""
        out, left = [], atoms
        while left:
            comp = self._reach(atoms, left & -left, cut)
            out.append(comp)
            left &= ~comp
        return out

    def cut(self, atoms: int, removed: int, k: int) -> list[tuple[int, int]]:
        """The states (piece, cut bonds inside it) left by cutting bond ``k`` of the state ``(atoms, removed)``,
        in the order of each piece's lowest atom."""
        cut = removed | (1 << k)
        if atoms == self.full and not self.connected:
            return [(comp, self.inside(comp, cut)) for comp in self.components(atoms, cut)]
        sides = self.sides[k]
        if sides is not None:
            first, second = atoms & sides[0], atoms & sides[1]
        else:
            system = self.system[k]
            if not system & ~atoms and not removed & self.system_bonds[k]:
                return [(atoms, cut)]  # a whole ring system, uncut, stays whole after one cut
            a, b = self.ends[k]
            system &= atoms
            blocked = self._blocked(cut)
            neighbours = self.neighbours
            reach = todo = 1 << a
            while todo:
                low = todo & -todo
                todo ^= low
                x = low.bit_length() - 1
                step = neighbours[x] & system & ~reach & ~blocked.get(x, 0)
                if (step >> b) & 1:
                    return [(atoms, cut)]  # the ring is still closed elsewhere: one piece
                reach |= step
                todo |= step
            first = reach
            while reach:
                low = reach & -reach
                reach ^= low
                first |= self.hanging[low.bit_length() - 1] & atoms
            second = atoms & ~first
        if (second & -second) < (first & -first):
            first, second = second, first
        return [(first, self.inside(first, removed)), (second, self.inside(second, removed))]


def piece_fingerprint(mol: chem.Mol, atoms: list[int], n_bits: int, radius: int = 2) -> np.ndarray:
    """Sorted Morgan bits (``int64``) of the piece ``atoms`` of ``mol`` taken as a molecule of its own.

    The piece is not sanitised (a ring cut open keeps its aromatic flags); its atoms' hydrogen counts are
    recomputed, so a cut bond becomes a hydrogen on the atom that kept it. The bits are read as a dense
    array: the same bits as :func:`engine.chem.molecules.morgan_bits`, faster (this is the hot path of the
    forward model's candidates, hundreds of pieces per structure).
    """
    keep = set(atoms)
    if not keep or not keep <= _atom_range(mol.GetNumAtoms()):
        raise ConfigError(f"piece atoms {sorted(keep)} are not a non-empty subset of the molecule's "
                          f"{mol.GetNumAtoms()} atoms")  # fmt: skip
    piece = _piece_mol(mol, sorted(map(int, keep)))
    with rdBase.BlockLogs():
        piece.UpdatePropertyCache(strict=False)
        Chem.FastFindRings(piece)
    dense = chem.morgan_generator(radius, n_bits).GetFingerprintAsNumPy(piece)
    return np.flatnonzero(dense).astype(np.int64, copy=False)


def _piece_mol(mol: chem.Mol, keep: list[int]) -> chem.Mol:
    """The atoms ``keep`` (sorted indices) of ``mol`` and the bonds between them, as a molecule.

    Atoms and bonds keep their order and are copied with their flags (aromaticity, charges, explicit
    hydrogens); nothing is sanitised or recomputed. RDKit's ``CopyMolSubset`` (2025 on) copies the subset in
    one call; without it, every other atom is removed from a copy, last first: the same molecule, but the
    rest are renumbered after each removal (most of the old cost of this function).
    tests/engine/spectra/test_fragments_equivalence.py checks both against the removal.
    """
    if _PIECE_SUBSET is not None:
        return rdmolops.CopyMolSubset(mol, keep, _PIECE_SUBSET)
    inside = set(keep)
    rw = Chem.RWMol(mol)
    for i in range(mol.GetNumAtoms() - 1, -1, -1):
        if i not in inside:
            rw.RemoveAtom(i)
    return rw.GetMol()


def _subset_options():
    if not hasattr(rdmolops, "CopyMolSubset"):
        return None
    options = rdmolops.SubsetOptions()
    options.method = rdmolops.SubsetMethod.BONDS_BETWEEN_ATOMS  # the atoms given and every bond between them
    options.sanitize = False
    options.clearComputedProps = False
    options.copyAsQuery = False
    options.copyCoordinates = False  # a fingerprint needs no coordinates
    return options


_PIECE_SUBSET = _subset_options()


@lru_cache(maxsize=64)
def _atom_range(n: int) -> frozenset[int]:
    return frozenset(range(n))


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
