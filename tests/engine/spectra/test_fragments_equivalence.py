"""The fast :func:`engine.spectra.fragments.fragment_pieces` and :func:`engine.spectra.fragments.piece_fingerprint`
give exactly what their first, plain versions gave (copied below as the reference).

Same pieces in the same order (the order decides which pieces a molecule that hits ``max_states`` keeps), the
same fewest cuts and formulas, the same completeness flag, and the same fingerprint bits of a piece, on a
fixed list of structures chosen to reach every path of the fast code: chains, fused, bridged and spiro rings,
a macrocycle, a steroid, a peptide, phosphates, halogens, charges, isotopes, salts (several parts), single
atoms, and molecules large enough to hit small caps. ``benchmarks/bench_fragments.py`` times the two.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from rdkit import Chem, rdBase

from engine.chem import molecules as chem
from engine.chem.formula import ELEMENT_INDEX, ELEMENTS
from engine.errors import ConfigError
from engine.spectra import fragments
from engine.spectra.fragments import (
    MAX_STATES,
    Pieces,
    fragment_pieces,
    piece_fingerprint,
)

# ---- the reference: the first implementations, verbatim but for their names ----------------------------------


def old_fragment_pieces(mol: chem.Mol, max_breaks: int = 2, max_states: int = MAX_STATES) -> tuple[Pieces, bool]:
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


def old_piece_fingerprint(mol: chem.Mol, atoms: list[int], n_bits: int, radius: int = 2) -> np.ndarray:
    """Sorted Morgan bits (``int64``) of the piece ``atoms`` of ``mol`` taken as a molecule of its own.

    The piece is not sanitised (a ring cut open keeps its aromatic flags); its atoms' hydrogen counts are
    recomputed, so a cut bond becomes a hydrogen on the atom that kept it.
    """
    keep = set(atoms)
    if not keep or not keep <= set(range(mol.GetNumAtoms())):
        raise ConfigError(f"piece atoms {sorted(keep)} are not a non-empty subset of the molecule's "
                          f"{mol.GetNumAtoms()} atoms")  # fmt: skip
    rw = Chem.RWMol(mol)
    for i in range(mol.GetNumAtoms() - 1, -1, -1):
        if i not in keep:
            rw.RemoveAtom(i)
    piece = rw.GetMol()
    with rdBase.BlockLogs():
        piece.UpdatePropertyCache(strict=False)
        Chem.FastFindRings(piece)
    return chem.morgan_bits(piece, n_bits=n_bits, radius=radius)


# ---- the comparison -------------------------------------------------------------------------------------------

SMILES = [
    "C",  # one atom: no bond to cut
    "CCO",
    "CC(C)(C)C(=O)OC",
    "C1CCCCC1",
    "c1ccccc1",
    "Oc1ccccc1",
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol
    "c1ccc2ccccc2c1",  # naphthalene
    "c1ccc2cc3ccccc3cc2c1",  # anthracene
    "c1cc2cccccc2c1",  # azulene
    "C1CC2CCC1CC2",  # bridged bicycle
    "C12C3C4C1C5C2C3C45",  # cubane: every atom on three rings
    "C1CCC2(CC1)CCCC2",  # spiro: two ring systems sharing an atom
    "c1ccc(-c2ccccc2)cc1",  # biphenyl: a bridge between two rings
    "O=C1CCCCCCCCCCCCCO1",  # macrocyclic lactone
    "CC(C)CCCC(C)C1CCC2C1(CCC3C2CC=C4C3(CCC(C4)O)C)C",  # cholesterol
    "CC12CCC3C(C1CCC2O)CCC4=CC(=O)CCC34C",  # testosterone
    "CN1CCC23c4c5ccc(O)c4OC2C(O)C=CC3C1C5",  # morphine: fused and bridged
    "COc1ccc2nccc(C(O)C3CC4CCN3CC4C=C)c2c1",  # quinine
    "NCC(=O)NC(C)C(=O)NC(CO)C(=O)NC(Cc1ccccc1)C(=O)O",  # peptide GASF
    "NC(CCCNC(N)=N)C(=O)NC(CS)C(=O)NC(Cc1c[nH]c2ccccc12)C(=O)O",  # peptide RCW
    "O=P(O)(O)OCC1OC(O)C(O)C(O)C1O",  # glucose 6-phosphate
    "Nc1ncnc2c1ncn2C1OC(COP(=O)(O)OP(=O)(O)OP(=O)(O)O)C(O)C1O",  # ATP
    "OCC1OC(OC2(CO)OC(CO)C(O)C2O)C(O)C(O)C1O",  # sucrose
    "Clc1ccc(Br)cc1I",
    "FC(F)(F)c1ccc(Cl)cc1",
    "ClC(Cl)(Cl)C(O)O",
    "Cn1cnc2c1c(=O)n(C)c(=O)n2C",  # caffeine
    "c1ccc2[nH]ccc2c1",  # indole: an explicit hydrogen
    "Cc1cc(NS(=O)(=O)c2ccc(N)cc2)no1",  # sulfamethoxazole
    "c1ccsc1CC(=O)O",
    "O=[N+]([O-])c1ccccc1",  # charges
    "C[N+](C)(C)CCO",
    "[2H]C([2H])([2H])OC(=O)[13CH3]",  # isotopes
    "CC(=O)[O-].C[N+](C)(C)C",  # a salt: the whole molecule is in two parts
    "CCO.O.c1ccccc1",  # three parts, one of them a ring
    "[NH4+].[Cl-]",  # two parts, no bond at all
    "CCCCC=CCC=CCCCCCCCC(=O)OC(COC(=O)CCCCC=CCC=CCC=CCCCCC)COP(=O)([O-])OCC[N+](C)(C)C",  # a lipid: large
    "CC1CC=C2C3=CCC4C(CC(O)CCC24C)C3C(C)C2NCC(C)C3C(C1)C23",  # an alkaloid: many fused rings
    "CC1OC(OC2C(O)CC(OC3C(O)CC(OC4CCC5(C)C(CCC6C5CCC5(C)C(C7=CC(=O)OC7)CCC65O)C4)OC3C)OC2C)CC(O)C1O",  # digoxin
]


def mol_of(smiles: str) -> Chem.Mol:
    return chem.remove_stereo(chem.mol_from_smiles(smiles))


def assert_same_pieces(mol: Chem.Mol, max_breaks: int, max_states: int) -> Pieces:
    expected, expected_complete = old_fragment_pieces(mol, max_breaks, max_states)
    got, complete = fragment_pieces(mol, max_breaks, max_states)
    assert got.atoms == expected.atoms  # the same pieces in the same order
    assert complete == expected_complete
    for name in ("breaks", "formulas"):
        new, old = getattr(got, name), getattr(expected, name)
        assert new.dtype == old.dtype and new.shape == old.shape and np.array_equal(new, old), name
    return got


@pytest.mark.parametrize("smiles", SMILES)
def test_fragment_pieces_are_the_reference_pieces(smiles):
    mol = mol_of(smiles)
    for max_breaks in (0, 1, 2):
        assert_same_pieces(mol, max_breaks, MAX_STATES)
    assert_same_pieces(mol, 3, MAX_STATES if mol.GetNumAtoms() <= 12 else 1500)  # the old code is slow at three
    for max_states in (0, 1, 7, 200):  # caps hit at different points of the enumeration
        assert_same_pieces(mol, 3, max_states)


def test_the_list_reaches_the_caps_and_the_salts():
    big = mol_of(SMILES[-3])
    assert big.GetNumAtoms() > 50
    assert not fragment_pieces(big, 3, 200)[1] and not fragment_pieces(big, 2, 200)[1]
    assert fragment_pieces(mol_of("CCO.O.c1ccccc1"), 2)[0].breaks[0] == 0


@pytest.mark.parametrize("smiles", SMILES)
def test_piece_fingerprints_are_the_reference_bits(smiles):
    mol = mol_of(smiles)
    pieces, _ = fragment_pieces(mol, 2, 2000)
    rng = random.Random(smiles)
    n = len(pieces.atoms)
    sample = sorted(set(range(min(n, 25))) | set(rng.sample(range(n), min(n, 25))))  # the first and any 25
    for i in sample:
        atoms = pieces.atom_indices(i)
        for n_bits, radius in ((512, 2), (2048, 1)):
            expected = old_piece_fingerprint(mol, atoms, n_bits, radius)
            got = piece_fingerprint(mol, atoms, n_bits, radius)
            assert got.dtype == expected.dtype and np.array_equal(got, expected), (smiles, atoms)


def test_piece_fingerprints_without_copy_mol_subset_are_the_reference_bits(monkeypatch):
    """Older RDKit has no CopyMolSubset: the piece is cut out of a copy, as before."""
    monkeypatch.setattr(fragments, "_PIECE_SUBSET", None)
    for smiles in ("CC(=O)Nc1ccc(O)cc1", "CN1CCC23c4c5ccc(O)c4OC2C(O)C=CC3C1C5", "CC(=O)[O-].C[N+](C)(C)C"):
        mol = mol_of(smiles)
        pieces, _ = fragment_pieces(mol, 2)
        for i in range(0, len(pieces.atoms), 7):
            atoms = pieces.atom_indices(i)
            assert np.array_equal(piece_fingerprint(mol, atoms, 512), old_piece_fingerprint(mol, atoms, 512))


def test_an_unsupported_element_is_refused_as_before():
    for fragment in (old_fragment_pieces, fragment_pieces):
        with pytest.raises(ConfigError, match="Na is not supported"):
            fragment(mol_of("CC(=O)[O-].[Na+]"), 2)


def test_piece_fingerprint_takes_any_order_and_refuses_what_the_reference_refuses():
    mol = mol_of("CC(=O)Nc1ccc(O)cc1")
    expected = old_piece_fingerprint(mol, [4, 5, 6, 7], 512)
    assert np.array_equal(piece_fingerprint(mol, [6, 4, 5, np.int64(7)], 512), expected)
    for bad in ([], [11], [-1], [1.5]):
        with pytest.raises(ConfigError):
            old_piece_fingerprint(mol, bad, 512)
        with pytest.raises(ConfigError):
            piece_fingerprint(mol, bad, 512)
