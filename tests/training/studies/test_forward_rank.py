"""training.studies.forward_rank: the score it trains is the app's forward score, and its ranking loss reads it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("rdkit")

from engine.chem import molecules as chem
from engine.model.forward import ForwardConfig, ForwardModel, candidates, forward_score
from training.studies import forward_rank as fr

SMILES = ("CCOC(=O)c1ccccc1N", "CCOC(=O)c1ccc(N)cc1", "COC(=O)Cc1ccccc1N")  # three C9H11NO2 isomers


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ForwardModel(ForwardConfig(hidden=16, n_bits=64)).eval()


@pytest.fixture(scope="module")
def structures(model):
    return [fr._structure((s, 1, model.config.candidate_settings())) for s in SMILES]


def observed_of(structure, n: int = 4) -> frozenset[bytes]:
    return frozenset(structure.keys[:n]) | {np.full(14, 9, dtype=np.int64).tobytes()}  # one peak none explains


def test_a_structure_holds_its_candidates(model, structures):
    cand = candidates(chem.remove_stereo(chem.mol_from_smiles(SMILES[0])), 1, model.config.candidate_settings())
    s = structures[0]
    assert s.keys == [f.tobytes() for f in cand.formulas]
    assert s.features(64).shape == (len(cand), 64 + cand.scalars.shape[1])
    assert torch.equal(s.features(64)[:, 64:], torch.from_numpy(cand.scalars))
    assert fr._structure(("not a smiles", 1, model.config.candidate_settings())) is None


def test_the_trained_score_is_the_apps_forward_score(model, structures):
    observed = observed_of(structures[0])
    with torch.no_grad():
        scores, _, _ = fr.forward_scores(model, structures, observed, 64)
    for smiles, got in zip(SMILES, scores.tolist()):
        cand = candidates(chem.remove_stereo(chem.mol_from_smiles(smiles)), 1, model.config.candidate_settings())
        q, _ = model.predict(cand)
        hit = np.array([f.tobytes() in observed for f in cand.formulas], dtype=np.float64)
        assert got == pytest.approx(forward_score(q, hit, len(observed)), rel=1e-4, abs=1e-3)


def test_the_ranking_loss_is_the_truths_softmax_cross_entropy(model, structures):
    ex = fr.Example(observed_of(structures[1]), (0, 1, 2))
    with torch.no_grad():
        rank, peak, first = fr.example_loss(model, structures, ex, 64, positive_weight=3.0)
        scores, _, _ = fr.forward_scores(model, structures, ex.observed, 64)
    expected = -(scores[0] - torch.logsumexp(scores, 0))
    assert rank.item() == pytest.approx(expected.item(), rel=1e-5)
    assert first == bool(scores[0] >= scores[1:].max())
    assert math.isfinite(peak.item()) and peak.item() > 0


def test_the_ranking_loss_has_gradients_for_the_model(model, structures):
    ex = fr.Example(observed_of(structures[0]), (0, 1, 2))
    rank, peak, _ = fr.example_loss(model, structures, ex, 64, positive_weight=3.0)
    (rank + peak).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("bad", [["--decoys", "0"], ["--epochs", "0"], ["--lr", "0"], ["--peak-weight", "-1"],
                                 ["--spectra-per-structure", "0"], ["--part", "val"]])
def test_bad_settings_are_refused_before_any_work(bad, capsys):
    with pytest.raises(SystemExit) as e:
        fr.main(["--init", "nowhere", "--out", "nowhere", "--mgf", "x.mgf", "--corpus", "x.tsv", *bad])
    assert e.value.code == 2
    assert bad[0] in capsys.readouterr().err


def test_a_missing_starting_model_is_named(tmp_path, capsys):
    code = fr.main(["--init", str(tmp_path / "none"), "--out", str(tmp_path / "out"), "--mgf", "x.mgf",
                    "--corpus", "x.tsv"])
    assert code == 1
    err = capsys.readouterr().err
    assert "none" in err and "training.encoder.forward fit" in err
