"""Formula-constrained decoding: token classes, masks on hand-built sequences, and a property test."""

from __future__ import annotations

import re

import numpy as np
import pytest
import safe as sf
import torch

from engine.chem import molecules as chem
from engine.chem.formula import ELEMENT_INDEX, ELEMENTS, formula_vector, parse_formula
from engine.model.constraints import DEAD_END, FormulaConstraint, rdbe
from engine.model.safe_grammar import ATOM, BOND, DIGIT, EOS, NEVER, SafeGrammar, classify_token
from engine.model.tokenizer import SPECIAL_TOKENS, SafeTokenizer

VOCAB = [*SPECIAL_TOKENS, "C", "c", "N", "n", "O", "o", "S", "s", "Cl", "Br", "F", "I", "P", "[nH]", "[N+]", "[O-]",
         "[13C]", "[Na]", "(", ")", ".", "=", "#", "-", "1", "2", "3", "4", "%10"]
TOK = SafeTokenizer(VOCAB)
G = SafeGrammar(TOK)
ID = {t: i for i, t in enumerate(VOCAB)}


def walk(formula: str, tokens: list[str], left: int = 100) -> FormulaConstraint:
    """Feed ``tokens`` to a one-row constraint, asserting each was allowed; returns the constraint."""
    c = FormulaConstraint(G, formula_vector(parse_formula(formula)), 1)
    for i, t in enumerate(tokens):
        allowed = c.allowed(left - i)[0]
        assert allowed[ID[t]], f"{t!r} masked after {''.join(tokens[:i])!r} ({formula})"
        c.advance([ID[t]])
    return c


def allowed_after(formula: str, tokens: list[str], left: int = 100) -> set[str]:
    c = walk(formula, tokens, left)
    mask = c.allowed(left - len(tokens))[0]
    return {VOCAB[i] for i in np.flatnonzero(mask.numpy())}


def split(text: str) -> list[str]:
    return TOK.tokenize(text)


# -- token classes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("token, kind, element, charge, digit", [
    ("C", ATOM, "C", 0, -1), ("c", ATOM, "C", 0, -1), ("Cl", ATOM, "Cl", 0, -1), ("Br", ATOM, "Br", 0, -1),
    ("[nH]", ATOM, "N", 0, -1), ("[N+]", ATOM, "N", 1, -1), ("[O-]", ATOM, "O", -1, -1), ("[Se]", ATOM, "Se", 0, -1),
    ("%12", DIGIT, None, 0, 12), ("3", DIGIT, None, 0, 3), ("=", BOND, None, 0, -1), ("<eos>", EOS, None, 0, -1),
    ("[13C]", NEVER, None, 0, -1), ("[Na]", NEVER, None, 0, -1), ("<pad>", NEVER, None, 0, -1), ("<unk>", NEVER, None, 0, -1),
])
def test_token_classes(token, kind, element, charge, digit):
    info = classify_token(token)
    assert info.kind == kind and info.charge == charge and info.digit == digit
    assert info.element == (ELEMENT_INDEX[element] if element else -1)


def test_bracket_hydrogens_and_charges_change_the_bond_capacity():
    assert classify_token("N").capacity == 3 and classify_token("[nH]").capacity == 2
    assert classify_token("[N+]").capacity == 4 and classify_token("[O-]").capacity == 1
    assert classify_token("Cl").capacity == 1 and classify_token("S").capacity == 6 and classify_token("s").capacity == 2


def test_rdbe_of_formulas():
    assert rdbe(formula_vector(parse_formula("C6H6"))) == 4
    assert rdbe(formula_vector(parse_formula("C6H5NO2"))) == 5  # nitrobenzene: ring + 3 + N=O
    assert rdbe(formula_vector(parse_formula("C2H6O2S"))) == 0  # dimethyl sulfone: S=O are not counted


# -- masks on hand-built sequences ---------------------------------------------------------------------------
def test_heavy_atom_budget_counts_two_letter_and_aromatic_tokens():
    assert "Cl" in allowed_after("CH3Cl", ["C"]) and "C" not in allowed_after("CH3Cl", ["C"])
    assert allowed_after("CH3Cl", ["C", "Cl"]) == {"<eos>"}
    assert "c" not in allowed_after("C2H6O", ["C", "C"])  # aromatic c is a carbon too
    assert "[nH]" in allowed_after("C4H5N", split("c1cc")) and "N" not in allowed_after("C4H5N", split("c1cc[nH]"))


def test_eos_only_when_complete():
    assert "<eos>" not in allowed_after("C2H6O", ["C", "C"])  # atoms left
    assert "<eos>" not in allowed_after("C3H6", split("C1CC"))  # ring digit open
    assert "<eos>" not in allowed_after("C3H8", split("C(CC"))  # branch open
    assert "<eos>" in allowed_after("C3H6", split("C1CC1")) and "<eos>" in allowed_after("C3H8", split("C(C)C"))
    last = allowed_after("CH3NO2", split("C[N+](=O)"))  # net charge +1 and one atom left
    assert "[O-]" in last and "O" not in last  # a neutral O would leave a charged molecule
    assert "<eos>" in allowed_after("CH3NO2", split("C[N+](=O)[O-]"))


def test_ring_closures_pair_on_other_atoms_only():
    assert "1" not in allowed_after("C3H6", split("C1"))  # not on the atom that opened it
    assert "1" not in allowed_after("C3H6", split("C1C"))  # not twice between two atoms
    assert "1" in allowed_after("C3H6", split("C1CC"))
    assert not {"1", "2"} & allowed_after("C5H10", split("C1CC(C)"))  # no digit after ")"
    assert ")" not in allowed_after("C4H8", split("C1CC(C"))  # past ")" nothing could close ring 1
    assert ")" not in allowed_after("C3H8", split("C(")) and "(" in allowed_after("C3H8", split("C"))


def test_safe_attachment_digits_join_fragments():
    assert "." not in allowed_after("C2H6O", ["C"])  # nothing left open: a new fragment could never attach
    assert "." in allowed_after("C2H6O", split("C1"))
    # paracetamol in SAFE: attachment points reuse the ring digits across fragments
    c = walk("C8H9NO2", split("c13ccc(O)cc1.CC2=O.N23"))
    assert c.allowed(10)[0, ID["<eos>"]]


def test_dot_needs_atoms_left_and_no_branch_open():
    assert "." not in allowed_after("C3H6", split("C1CC1"))  # all atoms placed
    assert "C" not in allowed_after("C2H6", split("C1"))  # the last atom would neighbour the ring opener
    assert "." not in allowed_after("C4H10", split("C1(C"))  # inside a branch


def test_valences_are_respected():
    after_cl = allowed_after("C3H7Cl", split("CC(Cl"))
    assert not {"=", "(", "C", "1"} & after_cl and ")" in after_cl  # chlorine takes one bond
    assert "Cl" not in allowed_after("C2H5Cl", split("C"))  # nothing could attach the last carbon after it
    after_triple = allowed_after("C4H2", split("C#C"))
    assert "-" in after_triple and not {"=", "#"} & after_triple  # the carbon has one bond left
    assert "=" not in allowed_after("C2H4O", split("C=C"))  # rings + double bonds: C2H4O has one
    assert "=" not in allowed_after("CH2Cl2", split("C(Cl)(Cl)"))


def test_no_token_leads_into_a_dead_end_one_step_later():
    """Cases measured as dead ends of the shipped model's band samples (benchmarks/studies/yield_breakdown.py)."""
    # ``=`` would be legal, but after ``CC(O)(=O`` the branch point is saturated and an O is still to place
    assert "=" not in allowed_after("C2H4O3", split("CC(O)(")) and "O" in allowed_after("C2H4O3", split("CC(O)("))
    # ``(`` on an atom whose branch could only hold an atom that seals the molecule
    assert "(" not in allowed_after("C2H7NO", split("C1.C2.N"))


def test_a_double_closure_needs_room_on_the_atom_that_opened_the_digit():
    # O1 reserved one bond of the oxygen, CC took the other: O1CC=1 would give the oxygen three
    assert "1" not in allowed_after("C4H4O", split("O1CC=")) and "C" in allowed_after("C4H4O", split("O1CC="))
    assert "1" in allowed_after("C4H4", split("C1CC="))  # a carbon has room for it: cyclopropene


def test_a_closure_may_not_seal_a_component_off_from_the_rest():
    # Cl closing 1 joins it to the first fragment, which then has no open digit and no free valence: the
    # fragment holding digit 2 and the C and O still to place could never attach to it
    after = allowed_after("C3H7ClO", split("C1.C2.Cl"))
    assert not {"1", "2"} & after


def test_the_formula_rings_and_double_bonds_must_still_be_reachable_when_the_atoms_run_out():
    # C4H7N has two rings + double bonds; C=CC(C...N with no digit open could only make one
    assert not {"N", "n", "[nH]"} & allowed_after("C4H7N", split("C=CC(C"))
    assert "=" in allowed_after("C4H7N", split("C=CC(C"))  # C=CC(C=N): the second double bond
    assert "C" not in allowed_after("C4H6O", split("C=CC(O"))


def test_length_budget_masks_what_cannot_be_closed():
    # 3 tokens left (this one, one more, <eos>): C3H6 needs two atoms and the closing digit
    assert allowed_after("C2H6", ["C"], left=3) <= {"C", "c"}
    assert "1" not in allowed_after("C3H6", ["C"], left=4)  # a ring would need C, C, 1, <eos>: 4 after this


def test_elements_outside_the_formula_encoder_and_isotopes_are_never_drawn():
    first = allowed_after("C2H6O", [])
    assert "[Na]" not in first and "[13C]" not in first and "<unk>" not in first and "C" in first and "O" in first


def test_rows_that_share_a_prefix_share_a_mask_and_select_keeps_rows_and_prefixes_together():
    """A batch's masks (computed once per distinct prefix) equal each row's own one-row masks, also after
    rows are dropped and reordered."""
    formula = "C7H7NO2"
    nitro = "[N+](=O)[O-]"
    rows = [split(f"c1ccc({nitro})cc1C"), split(f"c1ccc({nitro})cc1C"), split(f"Cc1ccc({nitro})cc1"),
            split(f"c1ccc(C)cc1{nitro}"), split(f"Cc1ccc({nitro})cc1")]
    batch = FormulaConstraint(G, formula_vector(parse_formula(formula)), len(rows))
    alive = list(range(len(rows)))
    for step in range(len(rows[0])):
        if step == 6:  # drop row 1, reorder the rest
            keep = [3, 0, 2, 4]
            batch.select(keep)
            alive = [alive[k] for k in keep]
        masks = batch.allowed(100 - step)
        for i, r in enumerate(alive):
            own = walk(formula, rows[r][:step]).allowed(100 - step)[0]
            assert torch.equal(masks[i], own), (r, step)
        batch.advance([ID[rows[r][step]] for r in alive])
    assert bool(batch.allowed(100 - len(rows[0]))[:, TOK.eos_id].all())


def test_every_valid_safe_string_is_allowed_all_the_way():
    """The masks never forbid a real molecule: each token of these SAFE strings stays legal, and <eos>
    is legal at the end (nitro, sulfone, phosphate, pyridone, indole, halogens, charges, fused rings)."""
    smiles = ["CC(=O)Nc1ccc(O)cc1", "O=[N+]([O-])c1ccccc1", "CS(C)(=O)=O", "COP(=O)(OC)OC", "O=c1cccc[nH]1",
              "c1ccc2[nH]ccc2c1", "Clc1ccc(Br)cc1I", "C#CC(F)(F)F", "OC1CCN(CC1)C(=O)c1ccco1",
              "CC1(C)CC(=O)C2=C(C1)NC1=C(C2c2ccc(Cl)cc2)C(=O)CC(C)(C)C1", "Cc1onc(-c2ccccc2Cl)c1C(=O)NC1C(=O)N2C1SC(C)(C)C2C(=O)O",
              # C=S counts in the formula's rings + double bonds (an S=O does not)
              "C=C(C)C1CC=C(C)C(=NNC(N)=S)C1", "S=C(NC1=CC=CC=C1)N", "O=C1NC(=S)SC1=Cc1ccccc1"]
    safes = [sf.encode(s, canonical=True, allow_empty=True) for s in smiles]
    tok = SafeTokenizer.build(safes)
    grammar = SafeGrammar(tok)
    for smi, s in zip(smiles, safes):
        formula = chem.mol_formula(chem.mol_from_smiles(smi))
        c = FormulaConstraint(grammar, formula_vector(parse_formula(formula)), 1)
        ids = tok.encode(s, add_special=False)
        for i, t in enumerate(ids):
            assert c.allowed(200 - i)[0, t], f"{tok.vocab[t]!r} masked at {i} of {s!r} ({smi})"
            c.advance([t])
        assert c.allowed(200 - len(ids))[0, tok.eos_id], f"<eos> masked after {s!r}"


# -- property: every finished constrained sample has the exact heavy atoms ----------------------------------
_ATOM = re.compile(r"\[\d*([A-Z][a-z]?|[a-z]{1,2})[^\]]*\]|(Cl|Br|[BCNOPSFI])|([bcnops])")


def heavy_atoms(safe_str: str) -> dict[str, int]:
    """Heavy atoms of a SAFE string, read independently of engine.model.constraints."""
    counts: dict[str, int] = {}
    for tok in TOK.tokenize(safe_str):
        m = _ATOM.fullmatch(tok)
        if m:
            sym = next(g for g in m.groups() if g)
            sym = sym[0].upper() + sym[1:]
            counts[sym] = counts.get(sym, 0) + 1
    return counts


@pytest.mark.parametrize("formula", ["C8H9NO2", "C6H5Cl", "C10H10O3", "C7H7NO3S", "C5H5N"])
def test_constrained_samples_of_a_random_decoder_have_the_exact_heavy_atoms(formula):
    from engine.model.decoder import ConditionalDecoder, DecoderConfig
    from engine.model.sampling import QueryRequest, sample_queries

    torch.manual_seed(0)
    cfg = DecoderConfig.preset("tiny", vocab_size=TOK.vocab_size, n_embd=32, cross_ffn=64, fp_ffn=64, block_size=64)
    model = ConditionalDecoder(cfg).eval()
    vec = formula_vector(parse_formula(formula))
    want = {e: int(n) for e, n in zip(ELEMENTS, vec) if n and e != "H"}
    req = QueryRequest(fp_bits=np.array([1, 5, 80]), sample_ids=tuple((0, j) for j in range(60)))
    (_, strings), = list(sample_queries(model, TOK, vec, [req], seed=1, decoding="formula"))
    finished = [s for s in strings if not s.endswith(DEAD_END)]
    assert len(strings) == 60 and len(finished) >= 3  # even a random decoder finishes some under the masks
    for s in finished:
        assert heavy_atoms(s) == want, s
        assert s.count("(") == s.count(")")
    for s in strings:  # dead ends are counted failures, never exceptions
        assert isinstance(s, str)
