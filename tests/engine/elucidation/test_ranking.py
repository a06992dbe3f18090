"""Ranking: validity, formula consistency, InChIKey-14 grouping, count order and tie-breaking."""

import numpy as np
import pytest

from engine.chem import molecules as chem
from engine.elucidation.ranking import CandidatePool, decode_safe, reference_rank

ETHANOL_BITS = chem.morgan_bits(chem.mol_from_smiles("CCO"))
DME_BITS = chem.morgan_bits(chem.mol_from_smiles("COC"))


def pool_with(samples, formula="C2H6O", queries=(ETHANOL_BITS,)):
    pool = CandidatePool(formula, list(queries))
    pool.add([(0, j) for j in range(len(samples))], samples)
    return pool


@pytest.mark.parametrize(
    "safe_str, reason",
    [
        ("", "empty"),
        ("CC(C", "not a valid SAFE string"),        # unbalanced branch
        ("CC.OC", "disconnected fragments"),         # two molecules are not one candidate
    ],
)
def test_invalid_samples_are_rejected_with_reason(safe_str, reason):
    d = decode_safe(safe_str)
    assert d.inchikey14 is None and d.reason == reason


def test_dangling_attachment_point_is_invalid_not_silently_fixed():
    # safe-mol's fix=True would cap the open digit and return "CCC" (or add a carbon for a dummy atom):
    # a sample with an unpaired digit is counted as invalid instead
    d = decode_safe("C1CC")
    assert d.inchikey14 is None and d.reason == "not a valid SAFE string"


def test_dead_end_of_constrained_decoding_is_a_counted_failure():
    from engine.model.constraints import DEAD_END

    d = decode_safe("CCO" + DEAD_END)
    assert d.inchikey14 is None and "no legal token" in d.reason


def test_safe_with_attachment_points_decodes_to_one_molecule():
    d = decode_safe("c13ccc(O)cc1.CC2=O.N23")  # paracetamol in SAFE
    assert d.smiles == "CC(=O)Nc1ccc(O)cc1" and d.formula == "C8H9NO2"


def test_group_by_inchikey14_and_rank_by_count():
    # ethanol written three ways (one with stereo-free noise), dimethyl ether twice, one wrong formula, one invalid
    pool = pool_with(["CCO", "OCC", "C(O)C", "COC", "COC", "CCCO", "CC(C"])
    candidates, counts = pool.rank()
    assert counts == {"samples": 7, "valid": 6, "formula_consistent": 5}
    assert [(c.smiles, c.count) for c in candidates] == [("CCO", 3), ("COC", 2)]
    assert [c.rank for c in candidates] == [1, 2]
    assert candidates[0].frequency == pytest.approx(3 / 7)
    assert candidates[0].inchikey14 == "LFQSCWFLJHTTHZ"
    assert candidates[0].posterior_similarity == pytest.approx(1.0)


def test_ties_broken_by_posterior_similarity():
    # one sample each: the candidate closer to the query ranks first, whatever the input order
    for order in (["CCO", "COC"], ["COC", "CCO"]):
        candidates, _ = pool_with(order, queries=(DME_BITS,)).rank()
        assert [c.smiles for c in candidates] == ["COC", "CCO"]
        assert candidates[0].posterior_similarity > candidates[1].posterior_similarity


def test_posterior_similarity_is_max_over_queries():
    candidates, _ = pool_with(["CCO"], queries=(DME_BITS, ETHANOL_BITS)).rank()
    assert candidates[0].posterior_similarity == pytest.approx(1.0)


def test_rank_subset_by_samples_per_group():
    pool = CandidatePool("C2H6O", [ETHANOL_BITS])
    pool.add([(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)], ["COC", "COC", "CCO", "CCO", "CCO"])
    full, _ = pool.rank()
    assert [(c.smiles, c.count) for c in full] == [("CCO", 3), ("COC", 2)]
    sub, counts = pool.rank(n_per_group=1)  # samples (0,0) and (1,0) only
    assert counts["samples"] == 2
    assert sorted((c.smiles, c.count) for c in sub) == [("CCO", 1), ("COC", 1)]


def test_stereo_variants_are_one_candidate():
    candidates, _ = pool_with(["C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O", "CC(N)C(=O)O"], formula="C3H7NO2").rank()
    assert len(candidates) == 1 and candidates[0].count == 3
    assert "@" not in candidates[0].smiles


def test_reference_rank():
    candidates, _ = pool_with(["CCO", "CCO", "COC"]).rank()
    assert reference_rank(candidates, "LFQSCWFLJHTTHZ") == 1
    assert reference_rank(candidates, chem.inchikey14("COC")) == 2
    assert reference_rank(candidates, "AAAAAAAAAAAAAA") is None
    assert reference_rank(candidates, None) is None


def test_empty_pool_ranks_nothing():
    candidates, counts = CandidatePool("C2H6O", [np.array([1, 2])]).rank()
    assert candidates == [] and counts == {"samples": 0, "valid": 0, "formula_consistent": 0}


def test_edits_join_with_count_zero_and_leave_the_sample_counts():
    pool = pool_with(["CCO", "CCO"])
    # a new isomer, one drawn already, one of another formula, a repeat written another way
    pool.add_edits(["COC", "OCC", "CCCO", "C(O)C"])
    candidates, counts = pool.rank()
    assert counts == {"samples": 2, "valid": 2, "formula_consistent": 2}
    by_smiles = {c.smiles: c for c in candidates}
    assert set(by_smiles) == {"CCO", "COC"} and pool.n_edits == 4
    assert by_smiles["CCO"].count == 2
    assert by_smiles["COC"].count == 0 and by_smiles["COC"].origin == "de_novo" and by_smiles["COC"].library == ""


def test_a_molecule_without_an_inchi_is_read_back_from_its_smiles(monkeypatch):
    """RDKit can parse a SAFE string into a molecule it cannot kekulize for InChI (a QC-pool sample did): the
    decoder reads its canonical SMILES back, as the safe-mol path did, instead of stopping the run."""
    real, calls = chem.inchikey, []
    expected = chem.inchikey14("CC(=O)Nc1ccc(O)cc1")

    def flaky(mol):
        calls.append(mol)
        if len(calls) == 1:
            raise ValueError("Can't kekulize mol")
        return real(mol)

    monkeypatch.setattr(chem, "inchikey", flaky)
    decode_safe.cache_clear()
    d = decode_safe("c1ccccc1O.C")  # not a fragment pair: plain phenol plus methane, disconnected
    assert d.inchikey14 is None and len(calls) == 0
    d = decode_safe("c13ccc(O)cc1.CC2=O.N23")
    assert d.inchikey14 == expected and len(calls) == 2
    decode_safe.cache_clear()
