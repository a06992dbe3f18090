"""Implausible candidates (issue #38, item 6): each rule fires on its motif, common compounds never fire."""

from __future__ import annotations

import pytest
from rdkit import Chem

from engine.chem.plausibility import RULES, implausible, plausibility_note

FIRES = {  # rule name -> structures that show its motif
    "2H-azirine": ["CC1=NC1", "OC(=O)C1N=C1C"],
    "oxirene / thiirene / 1H-azirine": ["C1=CO1", "CC1=CS1", "C1=CN1"],
    "acyclic aminal": ["NC(N)C(F)(F)Cl", "CNC(NC)C(F)(F)Cl", "CN(C)CN(C)C"],
    "halogen on an aminal carbon": ["O=C(N)NC(F)NC(N)=O", "CC(N)(N)Cl"],
    "α-haloamine": ["CN(C)CCl", "CCN(CC)C(C)Br"],
    "N-halogen": ["CN(C)Cl", "O=C1CCC(=O)N1Br", "Cc1ccc(cc1)S(=O)(=O)NCl"],
    "α-haloalcohol": ["OC(F)OCOC(O)F", "CC(O)Cl", "OC(Br)c1ccccc1"],  # the 1st: an edit on the QC-pool run
    "gem-diol": ["CC(O)(O)C", "CCCc1ccc(-c2nnc(C(N)(O)O)n2C)cc1", "OC(O)c1ccccc1"],  # the 2nd: an edit once ranked 1
}

COMMON = {  # drugs, metabolites, natural products and pesticides: none may fire
    "caffeine": "Cn1cnc2c1c(=O)n(C)c(=O)n2C",
    "aspirin": "CC(=O)Oc1ccccc1C(=O)O",
    "glucose": "OC[C@H]1OC(O)[C@H](O)[C@@H](O)[C@@H]1O",
    "tryptophan": "N[C@@H](Cc1c[nH]c2ccccc12)C(=O)O",
    "atrazine": "CCNc1nc(Cl)nc(NC(C)C)n1",
    "chlorpyrifos": "CCOP(=S)(OCC)Oc1nc(Cl)c(Cl)cc1Cl",
    "cyproconazole": "CC(C1CC1)C(O)(Cn1cncn1)c1ccc(Cl)cc1",
    "ibuprofen": "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "paracetamol": "CC(=O)Nc1ccc(O)cc1",
    "metformin": "CN(C)C(=N)NC(=N)N",
    "nicotine": "CN1CCC[C@H]1c1cccnc1",
    "diazepam": "CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21",
    "carbamazepine": "NC(=O)N1c2ccccc2C=Cc2ccccc21",
    "metolachlor (chloroacetamide)": "CCc1cccc(C)c1N(C(C)COC)C(=O)CCl",
    "alachlor (N,O-acetal)": "CCc1cccc(CC)c1N(COC)C(=O)CCl",
    "chlorambucil (nitrogen mustard)": "OC(=O)CCCc1ccc(N(CCCl)CCCl)cc1",
    "cyclophosphamide": "ClCCN(CCCl)P1(=O)NCCCO1",
    "artemisinin (endoperoxide)": "C[C@@H]1CC[C@H]2[C@@H](C)C(=O)O[C@@H]3O[C@@]4(C)CC[C@@H]1[C@]32OO4",
    "hexamine (ring aminal)": "C1N2CN3CN1CN(C2)C3",
    "imidacloprid": "O=[N+]([O-])N=C1NCCN1Cc1ccc(Cl)nc1",
    "thiamethoxam": "CN1COCN(C1=N[N+](=O)[O-])Cc1cnc(Cl)s1",
    "ciprofloxacin": "OC(=O)c1cn(C2CC2)c2cc(N3CCNCC3)c(F)cc2c1=O",
    "sulfamethoxazole": "Cc1cc(NS(=O)(=O)c2ccc(N)cc2)no1",
    "sterculic acid (cyclopropene)": "CCCCCCCCC1=C(CCCCCCCC(=O)O)C1",
    "allantoin (N-acyl aminal)": "NC(=O)NC1NC(=O)NC1=O",
    "chloramphenicol": "OC[C@@H](NC(=O)C(Cl)Cl)[C@H](O)c1ccc(cc1)[N+](=O)[O-]",
    "triclosan": "Oc1cc(Cl)ccc1Oc1ccc(Cl)cc1Cl",
    "clopidogrel": "COC(=O)[C@H](c1ccccc1Cl)N1CCc2sccc2C1",
    "ketamine": "CNC1(CCCCC1=O)c1ccccc1Cl",
    "penicillin G": "CC1(C)S[C@@H]2[C@H](NC(=O)Cc3ccccc3)C(=O)N2[C@H]1C(=O)O",
    "sitagliptin": "N[C@@H](CC(=O)N1CCn2c(C1)nnc2C(F)(F)F)Cc1cc(F)c(F)cc1F",
    "fipronil": "Nc1c(S(=O)C(F)(F)F)c(C#N)nn1-c1c(Cl)cc(C(F)(F)F)cc1Cl",
    "fluoxetine": "CNCCC(Oc1ccc(cc1)C(F)(F)F)c1ccccc1",
    "cholesterol": "CC(C)CCC[C@@H](C)[C@H]1CC[C@H]2[C@@H]3CC=C4C[C@@H](O)CC[C@]4(C)[C@H]3CC[C@]12C",
    "chlorhexidine": "Clc1ccc(NC(=N)NC(=N)NCCCCCCNC(=N)NC(=N)Nc2ccc(Cl)cc2)cc1",
    "praziquantel": "O=C(C1CCCCC1)N1CC(=O)N2CCc3ccccc3C2C1",
    "metronidazole": "Cc1ncc([N+](=O)[O-])n1CCO",
    "tadalafil": "CN1CC(=O)N2[C@@H](C1=O)Cc1c([nH]c3ccccc13)[C@H]2c1ccc2OCOc2c1",
    "glyphosate": "OC(=O)CNCP(=O)(O)O",
    "diuron": "CN(C)C(=O)Nc1ccc(Cl)c(Cl)c1",
    "midazolam": "Cc1ncc2CN=C(c3ccccc3F)c3cc(Cl)ccc3-n12",
    "lorazepam": "OC1N=C(c2ccccc2Cl)c2cc(Cl)ccc2NC1=O",
    "hydrochlorothiazide (ring N,N-acetal)": "NS(=O)(=O)c1cc2c(cc1Cl)NCNS2(=O)=O",
    "spermidine": "NCCCCNCCCN",
    "chloral hydrate (trichloro gem-diol)": "OC(O)C(Cl)(Cl)Cl",
    "a trifluoromethyl carbinol": "OC(c1ccccc1)C(F)(F)F",
    "a chlorohydrin": "OCCCl",
    "ninhydrin (gem-diol next to carbonyls)": "O=C1c2ccccc2C(=O)C1(O)O",
}


def test_every_rule_has_valid_smarts_a_reason_and_an_example():
    assert {r.name for r in RULES} == set(FIRES)
    for rule in RULES:
        assert Chem.MolFromSmarts(rule.smarts) is not None, rule.name
        assert rule.reason and len(rule.reason) < 90, rule.name


@pytest.mark.parametrize("name", sorted(FIRES))
def test_each_rule_fires_on_its_motif(name):
    reason = next(r.reason for r in RULES if r.name == name)
    for smiles in FIRES[name]:
        assert reason in implausible(smiles), (name, smiles)
        assert reason in plausibility_note(smiles)
    assert implausible(Chem.MolFromSmiles(FIRES[name][0]))  # a molecule works as well as its SMILES


@pytest.mark.parametrize("name", sorted(COMMON))
def test_common_compounds_never_fire(name):
    smiles = COMMON[name]
    assert Chem.MolFromSmiles(smiles) is not None
    assert implausible(smiles) == () and plausibility_note(smiles) == ""


def test_bad_input_is_not_flagged():
    assert implausible("not a smiles") == () and implausible("") == () and implausible(None) == ()
