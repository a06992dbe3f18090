"""A library structure's net charge, read from its SMILES: what decides whether it is matched as ``[M]+``
(a permanent cation) or as an adduct of a neutral molecule (issue #56)."""

from __future__ import annotations

import pytest

from engine.library.index import smiles_charge


@pytest.mark.parametrize(("smiles", "charge"), [
    ("C[N+](C)(C)CCO", 1),  # choline
    ("C[N+](C)(C)CC(=O)[O-]", 0),  # betaine, a zwitterion
    ("C[P+](c1ccccc1)(c1ccccc1)c1ccccc1", 1),  # a phosphonium
    ("[O-]S(=O)(=O)[O-]", -2),
    ("[Fe+2]", 2), ("[Fe++]", 2), ("[Fe+3]", 3),
    ("[NH4+]", 1), ("[13CH3+]", 1), ("[N+:1](C)(C)(C)C", 1),  # hydrogens, isotopes and atom classes
    ("C[C@@H](N)C(=O)O", 0), ("[2H]OC", 0), ("CC", 0),
])
def test_smiles_charge(smiles, charge):
    assert smiles_charge(smiles) == charge
