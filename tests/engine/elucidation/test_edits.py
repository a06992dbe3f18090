"""Formula-preserving structure edits (standard effort's edit rounds, deep search's last phase): every edit is a
connected isomer of the input, the moves a chemist would try are there, they can be undone, nothing unstable is
proposed, and the best-scoring ones are kept."""

import numpy as np
import pytest

from engine.chem import molecules as chem
from engine.chem.plausibility import implausible
from engine.elucidation.edits import (
    MAX_ATOMS,
    best_edits,
    editable_formula,
    isomer_edit_mols,
    isomer_edits,
)

CYPROCONAZOLE = "CC(C1CC1)C(O)(Cn1cncn1)c1ccc(Cl)cc1"
DISULFIRAM = "CCN(CC)C(=S)SSC(=S)N(CC)CC"


@pytest.mark.parametrize("smiles", [CYPROCONAZOLE, DISULFIRAM, "OCCc1ccccc1", "CC(=O)Nc1ccc(O)cc1",
                                    "O=[N+]([O-])c1ccc(O)cc1", "Cn1cnc2c1c(=O)n(C)c(=O)n2C"])
def test_every_edit_is_a_connected_isomer_in_canonical_form(smiles):
    formula = chem.mol_formula(chem.mol_from_smiles(smiles))
    edits = isomer_edits(smiles)
    assert edits and len(edits) == len(set(edits))
    for e in edits:
        mol = chem.mol_from_smiles(e)
        assert mol is not None and "." not in e
        assert chem.mol_formula(mol) == formula
        assert chem.canonical_smiles(e) == e  # the form a decoded sample has
        assert e != chem.canonical_smiles(smiles)
        assert not implausible(mol)


def test_the_moves_a_chemist_would_try():
    edits = set(isomer_edits("OCCc1ccccc1"))
    assert "CC(O)c1ccccc1" in edits  # the OH moved one carbon over (migrate)
    assert {"Cc1ccccc1CO", "Cc1cccc(CO)c1", "Cc1ccc(CO)cc1"} <= edits  # the CH2OH moved round the ring
    assert "OCCc1ccccn1" not in edits  # no nitrogen to swap in: the formula is kept
    pyridines = set(isomer_edits("Cc1ccccn1"))
    assert {"Cc1cccnc1", "Cc1ccncc1"} <= pyridines  # the ring nitrogen walks round the ring (swap)


def test_moves_can_be_undone():
    for e in isomer_edits(CYPROCONAZOLE):
        assert chem.canonical_smiles(CYPROCONAZOLE) in isomer_edits(e), e


def test_two_moves_reach_what_one_cannot():
    near_miss = "CCCN(CCC)C(=S)SSC(=S)NCC"  # a deep-search candidate for disulfiram's spectrum
    one = set(isomer_edits(near_miss))
    assert DISULFIRAM not in one
    assert any(DISULFIRAM in isomer_edits(e) for e in one)


@pytest.mark.parametrize("smiles", ["", "not a molecule", "CCO.CC", "C" * (MAX_ATOMS + 1)])
def test_what_cannot_be_edited_gives_nothing(smiles):
    assert isomer_edits(smiles) == []


@pytest.mark.parametrize("smiles", [CYPROCONAZOLE, DISULFIRAM, "Cn1cnc2c1c(=O)n(C)c(=O)n2C"])
def test_edit_mols_are_the_edits_as_a_fresh_parse_reads_them(smiles):
    """Deep search fingerprints the returned molecules instead of parsing each edit again: the same edits, in the same
    order, with the bits a parse of the SMILES gives."""
    mols = isomer_edit_mols(smiles)
    assert list(mols) == isomer_edits(smiles)
    for e, mol in mols.items():
        assert chem.morgan_bits(mol).tolist() == chem.morgan_bits(chem.mol_from_smiles(e)).tolist()


def test_best_edits_are_the_best_scoring_new_edits_with_their_parent():
    """best_edits scores the sanitised edit and parses only the best again: the same edits, order and parents as
    scoring every edit of every parent after a fresh parse."""
    weights = np.random.default_rng(0).normal(size=chem.N_BITS)  # a score with no ties

    def score(bits):
        return float(weights[bits].sum())

    parents = [CYPROCONAZOLE, DISULFIRAM]
    have = set(isomer_edits(CYPROCONAZOLE)[:3])
    every = {e: p for p in parents for e in isomer_edits(p)}
    ranked = sorted((e for e in every if e not in have),
                    key=lambda e: -score(chem.morgan_bits(chem.mol_from_smiles(e))))
    got = best_edits(parents, score, have, keep=12)
    assert list(got) == ranked[:12] and all(got[e] == every[e] for e in got)
    assert not set(got) & have
    assert best_edits(parents, score, have, keep=0) == {} and best_edits([], score, have, keep=5) == {}


def test_editable_formula_caps_heavy_atoms():
    assert editable_formula("C17H18ClN3O", max_atoms=22) and not editable_formula("C17H18ClN3O", max_atoms=21)
