"""Substructure labels of peaks (MIST's MAGMa task): pieces, their assignment and fingerprints, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from labelled_spectra import write_labelled_mgf

from engine.chem.formula import ELEMENT_INDEX, ELEMENTS, parse_formula
from engine.chem.molecules import mol_from_smiles, morgan_bits
from engine.errors import ConfigError
from engine.model.encoder import EncoderConfig, SpectrumEncoder
from engine.spectra.fragments import fragment_pieces, piece_fingerprint
from training.data.spectra import FeatureSettings, load_labelled_spectra
from training.encoder.substructures import (
    SubstructureSettings,
    assign_pieces,
    fragment_labels,
    labels_cache_path,
    structure_labels,
)
from training.encoder.train_encoder import substructure_loss


def vec(formula: str) -> np.ndarray:
    out = np.zeros(len(ELEMENTS), dtype=np.int64)
    for element, n in parse_formula(formula).items():
        out[ELEMENT_INDEX[element]] = n
    return out


def test_pieces_of_ethanol_with_their_fewest_cuts():
    # C0-C1-O2: no cut gives the molecule; one cut gives CH3 + CH2OH and CH3CH2 + OH
    pieces, complete = fragment_pieces(mol_from_smiles("CCO"), max_breaks=2)
    assert complete
    found = {tuple(pieces.atom_indices(i)): int(pieces.breaks[i]) for i in range(len(pieces.atoms))}
    assert found == {(0, 1, 2): 0, (0,): 1, (1, 2): 1, (0, 1): 1, (2,): 1, (1,): 2}
    by_atoms = {tuple(pieces.atom_indices(i)): pieces.formulas[i] for i in range(len(pieces.atoms))}
    assert (by_atoms[(1, 2)] == vec("CH3O")).all() and (by_atoms[(1,)] == vec("CH2")).all()


def test_a_ring_needs_two_cuts_to_give_a_piece():
    pieces, _ = fragment_pieces(mol_from_smiles("C1CC1O"), max_breaks=1)  # cyclopropanol
    assert {tuple(pieces.atom_indices(i)) for i in range(len(pieces.atoms))} == {(0, 1, 2, 3), (0, 1, 2), (3,)}


def test_assignment_prefers_the_closest_hydrogens_then_the_fewest_cuts():
    pieces, _ = fragment_pieces(mol_from_smiles("CCO"), max_breaks=2)
    queries = np.array([vec("CH4O"), vec("CH3O"), vec("C2H6"), vec("CH4"), vec("N"), vec("CH8O")])
    got = assign_pieces(pieces, queries, h_shift=2)
    atoms = [tuple(pieces.atom_indices(int(i))) if i >= 0 else None for i in got]
    # CH4O and CH3O: the CH2OH piece (dH 1, 0); C2H6: ethyl C2H5 (dH 1); CH4: CH3 (dH 1, one cut)
    # beats the middle CH2 (dH 2, two cuts); no N piece; CH8O is 5 hydrogens away from CH3O
    assert atoms == [(1, 2), (1, 2), (0, 1), (0,), None, None]
    assert assign_pieces(pieces, np.array([vec("CH4O")]), h_shift=0).tolist() == [-1]


def test_a_piece_fingerprint_is_the_fingerprint_of_that_piece_as_a_molecule():
    mol = mol_from_smiles("CCO")
    # the CH2OH piece, its cut capped by a hydrogen, is methanol
    assert piece_fingerprint(mol, [1, 2], 512).tolist() == morgan_bits(mol_from_smiles("CO"), 512).tolist()
    # a ring opened by the cuts keeps its aromatic flags (not sanitised) and still gets bits
    phenol = mol_from_smiles("Oc1ccccc1")
    assert len(piece_fingerprint(phenol, [1, 2, 3], 512)) > 0
    with pytest.raises(ConfigError, match="not a non-empty subset"):
        piece_fingerprint(mol, [5], 512)


def test_structure_labels_fold_to_the_asked_length():
    fps, complete = structure_labels(mol_from_smiles("CCO"), np.array([vec("CH4O"), vec("N")]),
                                     SubstructureSettings(n_bits=64, max_breaks=2))  # fmt: skip
    assert complete and fps[1] is None
    assert fps[0].tolist() == morgan_bits(mol_from_smiles("CO"), 64).tolist()
    with pytest.raises(ConfigError, match="max_breaks"):
        SubstructureSettings(max_breaks=4)


def test_fragment_labels_of_a_labelled_file_are_cached_and_align_with_batches(tmp_path):
    mgf = write_labelled_mgf(tmp_path / "labelled.mgf")
    data = load_labelled_spectra(mgf, FeatureSettings(), cache_dir=tmp_path / "cache")
    settings = SubstructureSettings(n_bits=64, max_breaks=2)
    gen = fragment_labels(data, mgf, settings, cache_dir=tmp_path / "cache")
    with pytest.raises(StopIteration) as stop:
        while True:
            next(gen)
    labels = stop.value.value
    assert labels_cache_path(mgf, settings, tmp_path / "cache").is_file()
    roots = data.token_offsets[:-1]
    assert (labels.token_label[roots] == -1).all()  # the root is never a fragment
    assert 0 < labels.summary["labelled_peak_tokens"] <= labels.summary["peak_tokens"]
    # a subset loads from the cache (nothing to label) and gives the same tokens the same fingerprints
    sub = data.subset(np.array([3, 0]))
    gen = fragment_labels(sub, mgf, settings, cache_dir=tmp_path / "cache")
    with pytest.raises(StopIteration) as stop:
        next(gen)  # no progress event: every pair is in the cache
    again = stop.value.value
    assert again.summary["structures_labelled_now"] == 0
    batch, _ = data.batch([3, 0])
    targets, labelled = labels.targets(data, [3, 0], batch["mask"].shape[1])
    sub_targets, sub_labelled = again.targets(sub, [0, 1], batch["mask"].shape[1])
    assert torch.equal(targets, sub_targets) and torch.equal(labelled, sub_labelled)
    assert not (labelled & ~batch["mask"]).any() and not labelled[:, 0].any()
    # each labelled token's target is its own piece's fingerprint
    i, t = (int(x) for x in torch.nonzero(labelled)[0])
    row = labels.token_label[data.token_offsets[[3, 0][i]] + t]
    expect = labels.table_bits[labels.table_offsets[row]:labels.table_offsets[row + 1]]
    assert torch.nonzero(targets[i, t]).flatten().tolist() == sorted(expect.tolist())


def test_substructure_loss_reads_only_labelled_tokens():
    logits = torch.zeros(1, 3, 4)
    targets = torch.tensor([[[1.0, 0, 0, 0], [9.0, 9, 9, 9], [0, 0, 0, 0]]])  # the middle token is unlabelled
    labelled = torch.tensor([[True, False, True]])
    assert substructure_loss(logits, targets, labelled).item() == pytest.approx(np.log(2))
    assert substructure_loss(logits, targets, torch.zeros(1, 3, dtype=torch.bool)).item() == 0.0


def test_the_fragment_head_is_a_training_aid_only():
    config = EncoderConfig(d_model=32, n_layers=1, n_heads=4, d_ff=32, head_hidden=32, fragment_bits=16)
    model = SpectrumEncoder(config).eval()
    plain = SpectrumEncoder(EncoderConfig(d_model=32, n_layers=1, n_heads=4, d_ff=32, head_hidden=32)).eval()
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    assert not missing and unexpected == ["fragment_head.weight", "fragment_head.bias"]
    batch = {"formulas": torch.tensor(np.array([[vec("C8H8O3"), vec("C7H6O2"), vec("C6H6O")]]), dtype=torch.float32),
             "intensities": torch.tensor([[1.0, 0.5, 1.0]]), "adduct_retained": torch.zeros(1, 3),
             "mask": torch.tensor([[True, True, True]]), "polarity": torch.tensor([1.0])}  # fmt: skip
    logits, fragments = model(batch, return_fragments=True)
    assert fragments.shape == (1, 3, 16) and torch.allclose(logits, model(batch))  # same fingerprint either way
    assert torch.allclose(plain(batch), model(batch))  # the head changes nothing of the posterior
    with pytest.raises(ConfigError, match="no fragment head"):
        plain(batch, return_fragments=True)
    shipped = model.for_inference()  # what a bundle keeps: the same posterior, no head, no fragment_bits
    assert shipped.config.fragment_bits == 0 and shipped.fragment_head is None and not shipped.training
    assert torch.equal(shipped(batch), model(batch)) and plain.for_inference() is plain
    with pytest.raises(ConfigError, match="fragment_bits"):
        EncoderConfig(fragment_bits=4)
