"""The fragment-level forward model and the simulated spectra it gives the encoder (training.encoder.forward)."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from labelled_spectra import VAL_MOLECULES, tiny_config, write_labelled_mgf

from engine.chem import molecules as chem
from engine.chem.formula import ELEMENT_INDEX, ELEMENTS, element_masses
from engine.errors import ConfigError
from engine.model.forward import (
    MAX_SHIFT,
    N_SCALARS,
    Candidates,
    CandidateSettings,
    ForwardConfig,
    ForwardModel,
    candidates,
)
from engine.spectra.fragments import fragment_pieces, piece_fingerprint
from training.encoder import forward
from training.encoder.forward import (
    FitConfig,
    SimulateConfig,
    auroc,
    load_simulated,
    simulate_tokens,
)
from training.data.spectra import FeatureSettings, LabelledSpectra, load_labelled_spectra
from training.encoder.substructures import FragmentLabels, concatenate_labels
from training.encoder.train_encoder import add_simulated

H = ELEMENT_INDEX["H"]


def _mol(smiles: str):
    return chem.remove_stereo(chem.mol_from_smiles(smiles))


def _formula(**counts) -> np.ndarray:
    vec = np.zeros(len(ELEMENTS), dtype=np.int64)
    for element, n in counts.items():
        vec[ELEMENT_INDEX[element]] = n
    return vec


# ----------------------------------------------------------------------------------------------
# Candidates


def test_candidates_of_ethanol_are_its_pieces_with_shifted_hydrogens():
    cand = candidates(_mol("CCO"), 1, CandidateSettings(max_breaks=1, h_shift=1))
    rows = {tuple(f) for f in cand.formulas.tolist()}
    assert len(rows) == len(cand)  # one candidate per formula
    # the whole molecule C2H6O, CH3 + CH2OH pieces (C-C cut), C2H5 + OH pieces (C-O cut), each H +-1
    for piece in (_formula(C=2, H=6, O=1), _formula(C=1, H=3), _formula(C=1, H=3, O=1), _formula(C=2, H=5),
                  _formula(O=1, H=1)):  # fmt: skip
        for shift in (-1, 0, 1):
            g = piece.copy()
            g[H] += shift
            assert tuple(g) in rows
    # CH4O is CH3O+1H and nothing else; CH2 comes from CH3 -1H
    heavy = {tuple(np.delete(f, H)) for f in cand.formulas}
    assert len(heavy) == 5
    assert cand.scalars.shape == (len(cand), N_SCALARS) and cand.scalars.dtype == np.float32
    assert cand.complete


def test_a_candidate_is_explained_by_the_smallest_shift_then_the_fewest_cuts():
    mol = _mol("CCO")
    cand = candidates(mol, -1, CandidateSettings(max_breaks=2, h_shift=2))
    pieces, _ = fragment_pieces(mol, 2)
    for f, scalars, fp in zip(cand.formulas, cand.scalars, cand.fingerprints):
        shift = int(np.argmax(scalars[: 2 * MAX_SHIFT + 1])) - MAX_SHIFT
        cuts = int(np.argmax(scalars[2 * MAX_SHIFT + 1: 2 * MAX_SHIFT + 5]))
        same_heavy = [i for i, p in enumerate(pieces.formulas) if (np.delete(p, H) == np.delete(f, H)).all()]
        best = min((abs(int(f[H]) - int(pieces.formulas[i, H])), int(pieces.breaks[i]), i) for i in same_heavy)
        assert abs(shift) == best[0] and cuts == best[1]
        np.testing.assert_array_equal(fp, piece_fingerprint(mol, pieces.atom_indices(best[2]), 512, 2))
    assert (cand.scalars[:, -2] == -1.0).all()  # the ion mode


def test_candidates_refuse_a_bad_polarity_and_settings_name_bad_values():
    with pytest.raises(ConfigError, match="polarity"):
        candidates(_mol("CCO"), 0)
    with pytest.raises(ConfigError, match="h_shift"):
        CandidateSettings(h_shift=9)
    with pytest.raises(ConfigError, match="max_breaks"):
        CandidateSettings(max_breaks=0)


# ----------------------------------------------------------------------------------------------
# Scores and simulation


def test_auroc_by_hand():
    assert auroc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    assert auroc(np.array([0.5, 0.5]), np.array([0, 1])) == pytest.approx(0.5)  # a tie counts half
    assert np.isnan(auroc(np.array([0.1, 0.2]), np.array([1, 1])))


def _toy_candidates() -> Candidates:
    formulas = np.array([_formula(C=3, H=4), _formula(C=1, H=2), _formula(C=2, H=3, O=1)])
    fps = [np.array([1, 5]), np.array([2]), np.array([3, 4])]
    return Candidates(formulas, np.zeros((3, N_SCALARS), np.float32), fps, True)


def test_simulated_tokens_follow_the_probabilities_in_mass_order():
    cand = _toy_candidates()
    whole = _formula(C=6, H=9, O=1)
    rng = np.random.default_rng(0)
    tokens = simulate_tokens(cand, np.array([1.0, 0.0, 1.0]), np.array([0.5, 0.9, 0.25]), whole, rng, noise=0.0)
    np.testing.assert_array_equal(tokens.formulas[0], whole)  # the root
    np.testing.assert_array_equal(tokens.formulas[1:], cand.formulas[[0, 2]])  # C3H4 (40 Da) before C2H3O (43)
    masses = tokens.formulas[1:] @ element_masses()
    assert (np.diff(masses) > 0).all()
    np.testing.assert_allclose(tokens.intensities, [1.0, 1.0, 0.5])  # rescaled: the largest peak is 1
    assert [fp.tolist() for fp in tokens.fingerprints] == [[1, 5], [3, 4]]


def test_a_simulated_spectrum_keeps_at_least_one_peak_and_at_most_max_peaks():
    cand = _toy_candidates()
    whole = _formula(C=6, H=9, O=1)
    none = simulate_tokens(cand, np.array([0.0, 0.2, 0.0]), np.ones(3), whole, np.random.default_rng(1))
    if len(none.formulas) == 2:  # nothing drawn: the most probable candidate
        np.testing.assert_array_equal(none.formulas[1], cand.formulas[1])
    top = simulate_tokens(cand, np.ones(3), np.array([0.1, 0.9, 0.5]), whole, np.random.default_rng(0),
                          noise=0.0, max_peaks=2)  # fmt: skip
    assert len(top.formulas) == 3
    np.testing.assert_array_equal(top.formulas[1:], cand.formulas[[1, 2]])  # the two most intense


def test_the_model_reloads_from_config_and_safetensors(tmp_path):
    torch.manual_seed(0)
    model = ForwardModel(ForwardConfig(hidden=16))
    model.save(tmp_path / "fwd", {"note": 1})
    again = ForwardModel.load(tmp_path / "fwd")
    cand = candidates(_mol("CC(=O)Oc1ccccc1C(=O)O"), 1)
    p1, i1 = model.predict(cand)
    p2, i2 = again.predict(cand)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(i1, i2)
    assert ((p1 > 0) & (p1 < 1)).all() and ((i1 > 0) & (i1 < 1)).all()
    with pytest.raises(ConfigError, match="no forward model"):
        ForwardModel.load(tmp_path)
    cfg = json.loads((tmp_path / "fwd" / "config.json").read_text())
    (tmp_path / "fwd" / "config.json").write_text(json.dumps({**cfg, "format_version": 99}))
    with pytest.raises(ConfigError, match="retrain"):
        ForwardModel.load(tmp_path / "fwd")


# ----------------------------------------------------------------------------------------------
# Concatenation, files and the encoder's training set


def test_concatenated_spectra_and_labels_equal_one_subset(tmp_path):
    mgf = write_labelled_mgf(tmp_path / "labelled.mgf")
    data = load_labelled_spectra(mgf, FeatureSettings(), cache_dir=tmp_path / "cache")
    a, b = np.array([3, 0, 5]), np.array([7, 1])
    joined = LabelledSpectra.concatenate([data.subset(a), data.subset(b)])
    whole = data.subset(np.concatenate([a, b]))
    for name in ("ids", "token_offsets", "formulas", "intensities", "bit_offsets", "bits", "polarity", "n_peaks"):
        np.testing.assert_array_equal(getattr(joined, name), getattr(whole, name))
    la = FragmentLabels(np.array([-1, 0, 1, -1]), np.array([0, 2, 3]), np.array([1, 2, 7], np.uint16), 8, {})
    lb = FragmentLabels(np.array([0, -1, 0]), np.array([0, 1]), np.array([4], np.uint16), 8, {})
    both = concatenate_labels([la, lb])
    np.testing.assert_array_equal(both.token_label, [-1, 0, 1, -1, 2, -1, 2])
    np.testing.assert_array_equal(both.table_offsets, [0, 2, 3, 4])
    np.testing.assert_array_equal(both.table_bits, [1, 2, 7, 4])
    with pytest.raises(ConfigError, match="16"):
        concatenate_labels([la, FragmentLabels(lb.token_label, lb.table_offsets, lb.table_bits, 16, {})])


def _corpus(path, rows):
    with gzip.open(path, "wt") as fh:
        fh.write("smiles\tinchikey14\tsource\n")
        for smiles, source in rows:
            fh.write(f"{smiles}\t{chem.inchikey14(smiles)}\t{source}\n")
    return path


def test_fit_then_simulate_then_train_an_encoder_on_both(tmp_path):
    mgf = write_labelled_mgf(tmp_path / "labelled.mgf", inchikeys=True)
    cache = str(tmp_path / "cache")
    events = list(forward.fit(FitConfig(mgf=str(mgf), out=str(tmp_path / "fwd"), epochs=1, hidden=16,
                                        held_out_share=2, cache_dir=cache)))  # fmt: skip
    done = events[-1]
    assert isinstance(done, forward.FitDone)
    for part in ("held_out", "val"):
        assert 0 <= done.metrics[part]["model"]["auroc"] <= 1
        assert done.metrics[part]["baseline"]["groups"] == done.metrics[part]["model"]["groups"] > 0
    novel = [("CC(C)Cc1ccc(cc1)C(C)C(=O)O", "src_a"), ("OC(=O)c1ccccc1O", "src_a"), ("CCN(CC)CC", "src_b")]
    known = [(VAL_MOLECULES[next(iter(VAL_MOLECULES))], "src_a")]  # a val structure of the MGF: never simulated
    corpus = _corpus(tmp_path / "molecules.tsv.gz", novel + known)
    config = SimulateConfig(model=str(tmp_path / "fwd"), molecules=str(corpus), mgf=str(mgf),
                            out=str(tmp_path / "sim.npz"), n=10, sources=("src_a",), negative_share=0.5)  # fmt: skip
    gen = forward.simulate(config)
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        spectra, labels = stop.value
    keys = {chem.inchikey14(s) for s, _ in novel[:2]}
    assert set(spectra.inchikey14.tolist()) == keys  # src_b and the MGF's structure left out
    again, again_labels = load_simulated(tmp_path / "sim.npz")
    np.testing.assert_array_equal(again.formulas, spectra.formulas)
    np.testing.assert_array_equal(again_labels.token_label, labels.token_label)
    roots = again.token_offsets[:-1]
    assert (again_labels.token_label[roots] == -1).all() and (np.delete(again_labels.token_label, roots) >= 0).all()
    for i in range(len(again)):  # the target is the molecule's own fingerprint
        smiles = next(s for s, _ in novel if chem.inchikey14(s) == again.inchikey14[i])
        np.testing.assert_array_equal(again.target_bits(i), chem.morgan_bits(_mol(smiles), n_bits=4096, radius=2))

    enc = tiny_config(mgf, tmp_path / "enc", adducts=("[M+H]+", "[M+Na]+", "[M-H]-"),
                      simulated=str(tmp_path / "sim.npz"),
                      encoder={"dropout": 0.1, "fp_bits": 4096, "max_peaks": 60, "fragment_bits": 512},
                      substructure_weight=0.5)
    from training.encoder.train_encoder import training_split
    data = load_labelled_spectra(mgf, enc.feature_settings(), cache_dir=cache)
    split = training_split(enc, data)
    base = FragmentLabels(np.full(len(split.train.formulas), -1), np.zeros(1, np.int64), np.zeros(0, np.uint16),
                          512, {})  # fmt: skip
    train, merged = add_simulated(enc, split.train, split.val, base)
    assert len(train) == len(split.train) + len(again)
    assert len(merged.token_label) == len(train.formulas)
    np.testing.assert_array_equal(merged.token_label[len(split.train.formulas):], again_labels.token_label)
    only_positive = tiny_config(mgf, tmp_path / "enc2", simulated=str(tmp_path / "sim.npz"),
                                encoder={"dropout": 0.1, "fp_bits": 4096, "max_peaks": 60})  # fmt: skip
    train2, _ = add_simulated(only_positive, split.train, split.val, None)
    assert set(train2.adduct[len(split.train):].tolist()) <= {"[M+H]+"}
    with pytest.raises(ConfigError, match="no spectrum of the run's adducts"):
        add_simulated(replace(only_positive, adducts=("[M+Na]+",)), split.train, split.val, None)
    leaky = LabelledSpectra.concatenate([split.val.subset(np.array([0]))])
    with pytest.raises(ConfigError, match="validation structures"):
        add_simulated(enc, split.train, LabelledSpectra.concatenate([leaky, again.subset(np.array([0]))]), base)

    # A few steps of a real run: the simulated spectra and their fragment labels go through the training loop.
    from training.encoder.train_encoder import TrainingFinished, train_encoder

    events = list(train_encoder(tiny_config(mgf, tmp_path / "run", adducts=("[M+H]+", "[M+Na]+", "[M-H]-"),
                                            simulated=str(tmp_path / "sim.npz"), max_steps=4, batch_size=4,
                                            encoder={"dropout": 0.1, "fp_bits": 4096, "max_peaks": 60,
                                                     "fragment_bits": 512}, substructure_weight=0.5)))  # fmt: skip
    assert isinstance(events[-1], TrainingFinished)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # metrics.json (and so the model card) counts the measured and the simulated spectra apart
    assert metrics["data"]["train"]["spectra"] == len(split.train)
    simulated = metrics["data"]["simulated"]
    assert simulated["spectra"] == len(again) and simulated["structures"] == 2
    assert simulated["measured_structures"] == 0  # the corpus molecules are not the MGF's structures
    from training.encoder.train_encoder import simulated_summary

    assert simulated_summary("sim.npz", again, np.array([again.inchikey14[0], "NOTSIMULATED00"]))[
        "measured_structures"] == 1  # fmt: skip
    assert simulated["file"] == str(tmp_path / "sim.npz") and simulated["sources"] == ["src_a"]
    assert simulated["model"] == str(tmp_path / "fwd") and simulated["control"] is False


def test_the_structures_of_an_mgf_are_known_by_inchikey_or_smiles(tmp_path):
    plain = write_labelled_mgf(tmp_path / "plain.mgf")  # no INCHIKEY lines: keys come from the SMILES
    keyed = write_labelled_mgf(tmp_path / "keyed.mgf", inchikeys=True)
    assert set(forward._mgf_keys(plain)) == set(forward._mgf_keys(keyed))
    assert chem.inchikey14(VAL_MOLECULES["serotonin"]) in set(forward._mgf_keys(plain))


@pytest.mark.parametrize("command", ["fit", "simulate"])
def test_the_command_line_explains_itself(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        forward.main([command, "--help"])
    assert exit_.value.code == 0 and "--out" in capsys.readouterr().out


def test_a_bad_setting_is_an_error_message_not_a_traceback(capsys):
    assert forward.main(["fit", "--mgf", "x.mgf", "--out", "o", "--dropout", "1.5"]) == 2
    assert "dropout" in capsys.readouterr().err
    assert forward.main(["simulate", "--model", "m", "--out", "o.npz"]) == 2
    assert "--molecules, --mgf are required" in capsys.readouterr().err


def test_a_fit_config_carries_the_model_settings_it_saves():
    config = FitConfig(mgf="x.mgf", out="o", hidden=32, dropout=0.2, max_breaks=1, h_shift=0, n_bits=256)
    assert config.model_config() == ForwardConfig(hidden=32, dropout=0.2, max_breaks=1, h_shift=0, n_bits=256)
    with pytest.raises(ConfigError, match="n_bits"):
        FitConfig(mgf="x.mgf", out="o", n_bits=4)
    with pytest.raises(ConfigError, match="hidden"):
        FitConfig(mgf="x.mgf", out="o", hidden=0)


def test_a_held_out_fold_is_one_of_the_split_and_is_checked():
    assert FitConfig(mgf="x.mgf", out="o", held_out_share=4, held_out_fold=3).held_out_fold == 3
    for bad in (4, -1, 1.5):
        with pytest.raises(ConfigError, match="held_out_fold.*0 to held_out_share - 1 = 3"):
            FitConfig(mgf="x.mgf", out="o", held_out_share=4, held_out_fold=bad)


def test_held_out_folds_partition_the_structures_between_fits(tmp_path):
    mgf = write_labelled_mgf(tmp_path / "labelled.mgf", inchikeys=True)
    held = []
    for fold in (0, 1):
        events = list(forward.fit(FitConfig(mgf=str(mgf), out=str(tmp_path / f"f{fold}"), epochs=1, hidden=8,
                                            held_out_share=2, held_out_fold=fold, cache_dir=str(tmp_path / "c"))))
        held.append(events[-1].metrics["held_out"]["model"]["groups"])
    train = load_labelled_spectra(mgf, forward.encoder_features(), cache_dir=str(tmp_path / "c")).select(
        ("train",), licenses=forward.SHIPPABLE_LICENSES)
    train = train.subset(np.flatnonzero(np.isin(train.adduct, ["[M+H]+", "[M-H]-"])))
    groups = {(k, p) for k, p in zip(train.inchikey14.tolist(), train.polarity.tolist())}
    assert held[0] > 0 and held[1] > 0 and held[0] + held[1] == len(groups)  # each structure held out once


def test_fitted_models_join_into_an_ensemble_that_keeps_their_records(tmp_path, capsys):
    from engine.model.forward import ForwardEnsemble, load_forward

    for i in range(2):
        torch.manual_seed(i)
        ForwardModel(ForwardConfig(hidden=8, n_bits=32)).save(tmp_path / f"m{i}", {"metrics": {"fold": i}})
    members = [str(tmp_path / "m0"), str(tmp_path / "m1")]
    assert forward.main(["ensemble", "--members", *members, "--out", str(tmp_path / "ens")]) == 0
    assert "ensemble of 2 forward models" in capsys.readouterr().out
    ens = load_forward(tmp_path / "ens")
    assert isinstance(ens, ForwardEnsemble) and len(ens.members) == 2
    saved = json.loads((tmp_path / "ens" / "config.json").read_text())["training"]["members"]
    assert saved == [{"folder": members[0], "metrics": {"fold": 0}}, {"folder": members[1], "metrics": {"fold": 1}}]
    assert forward.main(["ensemble", "--members", members[0], "--out", str(tmp_path / "one")]) == 2
    assert "at least 2 member folders" in capsys.readouterr().err
