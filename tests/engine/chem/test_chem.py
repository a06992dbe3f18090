"""RDKit helpers: parsing, stereo, fingerprints, InChIKeys, formulas, similarity."""

import numpy as np
import pytest
from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator

from engine.chem import molecules as chem

MELLEIN = "CC1Cc2cccc(O)c2C(=O)O1"
ALANINE = "C[C@H](N)C(=O)O"


@pytest.mark.parametrize("smiles", ["C1CC", "not a smiles", "", "   ", None, 42, "C(C)(C)(C)(C)C"])
def test_mol_from_smiles_gives_none_silently(smiles, capfd):
    assert chem.mol_from_smiles(smiles) is None
    assert capfd.readouterr().err == ""


def test_mol_from_smiles_parses():
    assert chem.mol_from_smiles(MELLEIN).GetNumAtoms() == 13


def test_remove_stereo_works_in_place_and_returns_the_mol():
    mol = chem.mol_from_smiles(ALANINE)
    assert chem.remove_stereo(mol) is mol
    assert Chem.MolToSmiles(mol) == "CC(N)C(=O)O"


@pytest.mark.parametrize(
    "given, keep_stereo, expected",
    [
        (ALANINE, False, "CC(N)C(=O)O"),
        (ALANINE, True, "C[C@H](N)C(=O)O"),
        ("OCC", False, "CCO"),
        ("C/C=C/C", False, "CC=CC"),
        ("nope", False, None),
    ],
)
def test_canonical_smiles(given, keep_stereo, expected):
    assert chem.canonical_smiles(given, remove_stereo=not keep_stereo) == expected


def test_canonical_smiles_does_not_modify_a_mol():
    mol = chem.mol_from_smiles(ALANINE)
    chem.canonical_smiles(mol)
    assert Chem.MolToSmiles(mol) == ALANINE


def test_morgan_bits_match_rdkit():
    mol = chem.mol_from_smiles(MELLEIN)
    bits = chem.morgan_bits(mol)
    assert bits.dtype == np.int64
    assert np.all(np.diff(bits) > 0) and bits.min() >= 0 and bits.max() < 4096
    reference = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=4096).GetFingerprint(mol)
    assert list(bits) == list(reference.GetOnBits())


def test_morgan_bits_from_smiles():
    assert chem.morgan_bits_from_smiles("bad(") is None
    assert np.array_equal(chem.morgan_bits_from_smiles(MELLEIN), chem.morgan_bits(chem.mol_from_smiles(MELLEIN)))
    assert chem.morgan_bits_from_smiles(MELLEIN, n_bits=64).max() < 64


def test_inchikeys():
    mol = chem.mol_from_smiles(MELLEIN)
    assert chem.inchikey(mol) == "KWILGNNWGSNMPA-UHFFFAOYSA-N"
    assert chem.inchikey14(mol) == "KWILGNNWGSNMPA"
    assert chem.inchikey14(MELLEIN) == "KWILGNNWGSNMPA"
    assert chem.inchikey14("bad(") is None
    assert chem.inchi(mol).startswith("InChI=1S/C10H10O3/")


@pytest.mark.parametrize(
    "smiles, formula",
    [
        (MELLEIN, "C10H10O3"),
        ("C[N+](C)(C)CCO", "C5H14NO"),  # cation: atoms as drawn, charge dropped
        ("CC(=O)[O-]", "C2H3O2"),
        ("[NH4+].[NH4+]", "H8N2"),
        ("ClC(Cl)Cl", "CHCl3"),
    ],
)
def test_mol_formula(smiles, formula):
    assert chem.mol_formula(chem.mol_from_smiles(smiles)) == formula


def test_formula_matches():
    mol = chem.mol_from_smiles(MELLEIN)
    assert chem.formula_matches(mol, {"C": 10, "H": 10, "O": 3})
    assert chem.formula_matches(mol, {"C": 10, "H": 10, "O": 3, "N": 0})
    assert not chem.formula_matches(mol, {"C": 10, "H": 12, "O": 3})
    assert not chem.formula_matches(mol, {"C": 10, "H": 10, "O": 3, "N": 1})


def _rdkit_tanimoto(a: str, b: str) -> float:
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=4096)
    return DataStructs.TanimotoSimilarity(gen.GetFingerprint(Chem.MolFromSmiles(a)), gen.GetFingerprint(Chem.MolFromSmiles(b)))


@pytest.mark.parametrize("a, b", [(MELLEIN, "CC1Cc2cccc(OC)c2C(=O)O1"), (MELLEIN, MELLEIN), ("CCO", "c1ccccc1")])
def test_tanimoto_matches_rdkit(a, b):
    bits_a, bits_b = chem.morgan_bits_from_smiles(a), chem.morgan_bits_from_smiles(b)
    assert chem.tanimoto(bits_a, bits_b) == pytest.approx(_rdkit_tanimoto(a, b))


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([], [], 0.0),
        ([1, 2], [], 0.0),
        ([1, 2, 3], [1, 2, 3], 1.0),
        ([1, 2, 3], [3, 4], 0.25),
        ([0, 4095], [4095], 0.5),
        ([5], [1, 2, 3], 0.0),
    ],
)
def test_tanimoto_edge_cases(a, b, expected):
    a, b = np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)
    assert chem.tanimoto(a, b) == expected
    assert chem.tanimoto(b, a) == expected


def test_max_tanimoto_and_many():
    q = np.array([1, 2, 3, 4], dtype=np.int64)
    others = [np.array([1, 2], dtype=np.int64), np.array([], dtype=np.int64), np.array([1, 2, 3, 4, 5], dtype=np.int64)]
    assert chem.tanimoto_many(q, others) == pytest.approx([0.5, 0.0, 0.8])
    assert chem.max_tanimoto(q, others) == pytest.approx(0.8)
    assert chem.max_tanimoto(q, []) == 0.0
    assert chem.max_tanimoto(np.array([], dtype=np.int64), [np.array([], dtype=np.int64)]) == 0.0


def test_topological_tanimoto_uses_rdkit_fingerprint():
    a, b = chem.mol_from_smiles(MELLEIN), chem.mol_from_smiles("CC1Cc2cccc(OC)c2C(=O)O1")
    expected = DataStructs.TanimotoSimilarity(Chem.RDKFingerprint(a), Chem.RDKFingerprint(b))
    assert chem.topological_tanimoto(a, b) == pytest.approx(expected)
    assert chem.topological_tanimoto(a, a) == 1.0


def test_molblock_has_2d_coordinates_and_leaves_the_mol_alone():
    mol = chem.mol_from_smiles(MELLEIN)
    block = chem.mol_to_molblock_2d(mol)
    assert "V2000" in block and " 2D" in block
    assert mol.GetNumConformers() == 0
    coords = chem.mol_with_2d_coords(MELLEIN).GetConformer().GetPositions()
    assert np.ptp(coords[:, 0]) > 0 and np.all(coords[:, 2] == 0)
    assert chem.mol_with_2d_coords("bad(") is None
