"""Out-of-fold posteriors: the structure split (deterministic, disjoint, complete), training subsets that
leave fold k out, a fixed epoch count without validation, and a tiny end-to-end run with resume."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from labelled_spectra import tiny_config, write_labelled_mgf

from engine.errors import ConfigError
from engine.model.encoder import EncoderConfig
from training.calibration.oof_posteriors import FoldsPending, FoldStarted, OOFConfig, OOFFinished, oof_posteriors
from training.data.spectra import FeatureSettings, load_labelled_spectra, structure_folds
from training.encoder.train_encoder import TrainingFinished, train_encoder, training_split


def _keys(n_structures=50, seed=0):
    """Spectra of ``n_structures`` InChIKey-14-like keys, 1-9 spectra each, in shuffled order."""
    rng = np.random.default_rng(seed)
    keys = [f"K{i:05d}ABCDEFGH"[:14] for i in range(n_structures)]
    spectra = np.repeat(keys, rng.integers(1, 10, n_structures))
    return spectra[rng.permutation(len(spectra))]


# ----------------------------------------------------------------------------------------------
# The split


def test_structure_folds_are_deterministic_balanced_and_disjoint():
    keys = _keys()
    folds = structure_folds(keys, 5, seed=0)
    assert folds.shape == keys.shape and set(folds.tolist()) == set(range(5))
    np.testing.assert_array_equal(folds, structure_folds(keys, 5, seed=0))  # deterministic
    of_key = {}
    for key, fold in zip(keys.tolist(), folds.tolist()):
        assert of_key.setdefault(key, fold) == fold  # all spectra of a structure share one fold
    assert len(of_key) == 50  # every structure has exactly one fold
    sizes = np.bincount(list(of_key.values()), minlength=5)
    assert sizes.max() - sizes.min() <= 1  # balanced by structures
    # The fold of a structure depends on the set of keys and the seed, not on the spectra's order or count.
    perm = np.random.default_rng(1).permutation(len(keys))
    again = structure_folds(keys[perm], 5, seed=0)
    assert all(of_key[k] == f for k, f in zip(keys[perm].tolist(), again.tolist()))
    once = np.unique(keys)
    np.testing.assert_array_equal(structure_folds(once, 5, seed=0), [of_key[k] for k in once.tolist()])
    # Another seed gives another split.
    other = structure_folds(keys, 5, seed=1)
    assert not np.array_equal(other, folds)


def test_structure_folds_errors():
    with pytest.raises(ConfigError, match="n_folds"):
        structure_folds(_keys(), 1)
    with pytest.raises(ConfigError, match="distinct structures"):
        structure_folds(np.array(["A", "A", "B"]), 3)
    with pytest.raises(ConfigError, match="no InChIKey"):
        structure_folds(np.array(["A", "", "B", "C"]), 2)


@pytest.fixture(scope="module")
def mgf(tmp_path_factory):
    """The encoder tests' labelled MGF with an INCHIKEY line in every record (the structure key)."""
    path = write_labelled_mgf(tmp_path_factory.mktemp("oof") / "labelled.mgf", inchikeys=True)
    return path


def test_training_split_leaves_fold_k_out(mgf, tmp_path):
    data = load_labelled_spectra(mgf, FeatureSettings.for_encoder(EncoderConfig.from_preset("tiny")),
                                 cache_dir=tmp_path / "cache")  # fmt: skip
    full = training_split(tiny_config(mgf, tmp_path / "run"), data).train
    folds = structure_folds(full.inchikey14, 3, seed=7)
    seen = []
    for k in range(3):
        split = training_split(tiny_config(mgf, tmp_path / "run", cv_folds=3, cv_fold=k, cv_seed=7), data)
        fold_keys = set(full.inchikey14[folds == k].tolist())
        assert fold_keys and not fold_keys & set(split.train.inchikey14.tolist())  # fold k's structures are out
        assert set(split.held_out.inchikey14.tolist()) == fold_keys
        assert sorted(split.train.ids.tolist() + split.held_out.ids.tolist()) == sorted(full.ids.tolist())
        assert len(split.val) == 4  # validation is untouched by the split
        seen += split.held_out.ids.tolist()
        # a random training subset is drawn from what is left
        sub = training_split(tiny_config(mgf, tmp_path / "run", cv_folds=3, cv_fold=k, cv_seed=7,
                                         max_train_spectra=5), data).train  # fmt: skip
        assert len(sub) == 5 and not fold_keys & set(sub.inchikey14.tolist())
    assert sorted(seen) == sorted(full.ids.tolist())  # each spectrum is held out exactly once
    assert len(training_split(tiny_config(mgf, tmp_path / "run", val_folds=()), data).val) == 0


@pytest.mark.parametrize(
    "overrides, match",
    [({"cv_folds": 3}, "go together"), ({"cv_fold": 0}, "go together"), ({"cv_folds": 3, "cv_fold": 3}, "cv_fold"),
     ({"cv_folds": 1, "cv_fold": 0}, "cv_folds"), ({"epochs": 3, "stop_after_epochs": 4}, "stop_after_epochs")],
)  # fmt: skip
def test_cv_config_errors(mgf, tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        tiny_config(mgf, tmp_path / "run", **overrides)


def test_fixed_epochs_without_validation(mgf, tmp_path):
    config = tiny_config(mgf, tmp_path / "run", val_folds=(), epochs=5, stop_after_epochs=2, cv_folds=2, cv_fold=1)
    events = list(train_encoder(config))
    assert isinstance(events[-1], TrainingFinished) and events[-1].reason == "epochs"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs_done"] == 2 and metrics["best_epoch"] == 1 and metrics["val"] == {}
    assert metrics["data"]["val"] == {"spectra": 0}
    assert metrics["data"]["held_out"]["cv_fold"] == 1
    assert metrics["data"]["train"]["spectra"] + metrics["data"]["held_out"]["spectra"] == 24


# ----------------------------------------------------------------------------------------------
# The command


def _oof_config(mgf, out, **overrides):
    base = dict(
        mgf=str(mgf), out_dir=str(out), folds=2, preset="tiny", dropout=0.1, epochs=2, stop_after_epochs=1,
        train={"batch_size": 8, "bucket_batches": 2, "eval_batch_size": 16, "warmup_steps": 1, "lr": 3e-3},
        reference=None, cache_dir=str(out.parent / "cache"), checkpoint_minutes=60.0,
    )  # fmt: skip
    return OOFConfig(**{**base, **overrides})


def test_oof_run_writes_every_train_spectrum_once_and_resumes(mgf, tmp_path):
    events = list(oof_posteriors(_oof_config(mgf, tmp_path / "oof")))
    assert isinstance(events[-1], OOFFinished)
    data = load_labelled_spectra(mgf, FeatureSettings.for_encoder(EncoderConfig.from_preset("tiny")),
                                 cache_dir=tmp_path / "cache")  # fmt: skip
    train = data.select(["train"])
    with np.load(tmp_path / "oof" / "oof_posteriors.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["ids"], train.ids)
        np.testing.assert_array_equal(z["fold"], structure_folds(train.inchikey14, 2, seed=0))
        assert z["posteriors"].dtype == np.float16 and z["posteriors"].shape == (24, 128)
        np.testing.assert_array_equal(z["bit_offsets"], train.bit_offsets)
        np.testing.assert_array_equal(z["bits"], train.bits)
        first = z["posteriors"].copy()
    for k in range(2):
        run = json.loads((tmp_path / "oof" / f"fold_{k}" / "train_config.json").read_text())
        assert run["val_folds"] == [] and run["cv_fold"] == k and run["cv_folds"] == 2
        assert (tmp_path / "oof" / f"fold_{k}" / "calibration.json").is_file()
    summary = json.loads((tmp_path / "oof" / "summary.json").read_text())
    assert summary["overall"]["spectra"] == 24 and len(summary["folds"]) == 2
    assert sum(f["spectra"] for f in summary["folds"]) == 24
    assert set(summary["overall"]["kappa1"]["bins"]) == {"low", "mid", "high"}
    assert sum(summary["overall"]["kappa1"]["bins"].values()) == pytest.approx(1.0)
    for key in ("ap_micro", "ap_macro", "auroc_micro"):
        assert key in summary["overall"]
    # Without --resume an existing run is refused; with it, finished folds are skipped and nothing changes.
    with pytest.raises(ConfigError, match="resume"):
        list(oof_posteriors(_oof_config(mgf, tmp_path / "oof")))
    again = list(oof_posteriors(_oof_config(mgf, tmp_path / "oof", resume=True)))
    assert [e.state for e in again if isinstance(e, FoldStarted)] == ["done", "done"]
    with np.load(tmp_path / "oof" / "oof_posteriors.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["posteriors"], first)
    # A fold encoder folder serves as the reference encoder (scored on train in sample, and on val).
    ref = list(oof_posteriors(_oof_config(mgf, tmp_path / "oof2", reference=str(tmp_path / "oof" / "fold_0"),
                                          max_steps=1)))  # fmt: skip
    reference = ref[-1].summary["reference"]
    assert reference["train"]["spectra"] == 24 and reference["val"]["spectra"] == 4
    assert "kappa1_calibrated" in reference["train"]


def test_a_run_from_before_the_cv_fields_still_resumes(mgf, tmp_path):
    list(train_encoder(tiny_config(mgf, tmp_path / "run", max_steps=2)))
    path = tmp_path / "run" / "train_config.json"
    saved = json.loads(path.read_text())
    for key in ("cv_folds", "cv_fold", "cv_seed", "stop_after_epochs"):
        del saved[key]
    path.write_text(json.dumps(saved))
    events = list(train_encoder(tiny_config(mgf, tmp_path / "run", max_steps=4, resume=True)))
    assert isinstance(events[-1], TrainingFinished) and events[-1].reason == "max_steps"


def test_fold_subsets_in_two_runs_give_the_posteriors_of_one_run(mgf, tmp_path):
    """``only_folds`` shares the folds between processes: the run that finds every fold done assembles
    the posteriors, and they are those of a single run (same seeds, same folds)."""
    whole = list(oof_posteriors(_oof_config(mgf, tmp_path / "one")))
    assert isinstance(whole[-1], OOFFinished)
    first = list(oof_posteriors(_oof_config(mgf, tmp_path / "two"), only_folds=[1]))
    assert [e.fold for e in first if isinstance(e, FoldStarted)] == [1]
    assert isinstance(first[-1], FoldsPending) and first[-1].folds == [0]
    assert not (tmp_path / "two" / "oof_posteriors.npz").exists()
    second = list(oof_posteriors(_oof_config(mgf, tmp_path / "two", resume=True), only_folds=[0]))
    assert [(e.fold, e.state) for e in second if isinstance(e, FoldStarted)] == [(0, "new"), (1, "done")]
    assert isinstance(second[-1], OOFFinished)
    with np.load(tmp_path / "one" / "oof_posteriors.npz") as a, np.load(tmp_path / "two" / "oof_posteriors.npz") as b:
        np.testing.assert_array_equal(a["posteriors"], b["posteriors"])
        np.testing.assert_array_equal(a["fold"], b["fold"])
    with pytest.raises(ConfigError, match="the folds are 0 to 1"):
        list(oof_posteriors(_oof_config(mgf, tmp_path / "three"), only_folds=[2]))


def test_the_run_that_finishes_last_assembles_even_when_the_other_fold_finished_during_its_training(
        mgf, tmp_path):
    """Two processes started together: each passes the other's fold before it is done. The one finishing
    last must still find it done at the end and assemble (it once said "folds [] are not done yet")."""
    out = tmp_path / "two"
    other = list(oof_posteriors(_oof_config(mgf, tmp_path / "other"), only_folds=[0]))  # fold 0, elsewhere
    assert isinstance(other[-1], FoldsPending)
    events = []
    for e in oof_posteriors(_oof_config(mgf, out), only_folds=[1]):
        events.append(e)
        if isinstance(e, FoldStarted) and e.fold == 1:  # fold 0 is skipped by now; it finishes meanwhile
            shutil.copytree(tmp_path / "other" / "fold_0", out / "fold_0")
    assert [e.fold for e in events if isinstance(e, FoldStarted)] == [1, 0]
    assert isinstance(events[-1], OOFFinished) and (out / "oof_posteriors.npz").is_file()


def test_recipe_fields_reach_every_fold_encoder(mgf, tmp_path):
    config = _oof_config(mgf, tmp_path / "oof", grow_levels=2, adducts=("[M+H]+", "[M-H]-"))
    fold = config.fold_config(1)
    assert fold.encoder == {"dropout": 0.1, "grow_levels": 2}
    assert fold.adducts == ("[M+H]+", "[M-H]-") and fold.cv_fold == 1 and fold.val_folds == ()
    assert _oof_config(mgf, tmp_path / "oof").fold_config(0).encoder == {"dropout": 0.1}  # the preset's head
    with pytest.raises(ConfigError, match="set twice"):
        _oof_config(mgf, tmp_path / "oof", adducts=("[M+H]+",), train={"adducts": ["[M+H]+"]})
    with pytest.raises(ConfigError, match="encoder"):
        _oof_config(mgf, tmp_path / "oof", train={"encoder": {"grow_levels": 2}})
    sub = _oof_config(mgf, tmp_path / "oof", fragment_bits=32, substructure_weight=0.5).fold_config(0)
    assert sub.encoder == {"dropout": 0.1, "fragment_bits": 32} and sub.substructure_weight == 0.5
    with pytest.raises(ConfigError, match="fragment head"):  # the task without its head
        _oof_config(mgf, tmp_path / "oof", substructure_weight=0.5)
    with pytest.raises(ConfigError, match="`substructure_weight` is set twice"):
        _oof_config(mgf, tmp_path / "oof", fragment_bits=32, substructure_weight=0.5, train={"substructure_weight": 1})
    assert _oof_config(mgf, tmp_path / "oof", simulated="sim.npz").fold_config(1).simulated == "sim.npz"
    assert _oof_config(mgf, tmp_path / "oof").fold_config(1).simulated is None


def test_negative_mode_rows_are_queried_at_their_folds_negative_band(tmp_path):
    """load_oof: a fold encoder calibrated per ion mode gives [M-H]- rows its negative-mode band."""
    from dataclasses import replace

    from engine.model.querying import Calibration, band_thresholds, default_threshold_grid
    from training.data.oof_data import load_oof

    grid = default_threshold_grid()
    pos = Calibration(d_enc=30.0, thresholds=grid, active_counts=np.linspace(80, 0, len(grid)), n_spectra=3)
    neg = Calibration(d_enc=30.0, thresholds=grid, active_counts=np.linspace(50, 0, len(grid)), n_spectra=1)
    (tmp_path / "fold_0").mkdir()
    replace(pos, negative=neg).save(tmp_path / "fold_0" / "calibration.json")
    np.savez(tmp_path / "oof_posteriors.npz", ids=np.array(["a", "b"]), fold=np.array([0, 0]),
             adduct=np.array(["[M+H]+", "[M-H]-"]), posteriors=np.zeros((2, 8), np.float16),
             bit_offsets=np.array([0, 1, 2]), bits=np.array([1, 2], np.uint16))  # fmt: skip
    oof = load_oof(tmp_path, groups=4)
    np.testing.assert_allclose(oof.thresholds(0), band_thresholds(pos, 0.95, 1.5, 4), atol=1e-5)  # saved rounded
    np.testing.assert_allclose(oof.thresholds(1), band_thresholds(neg, 0.95, 1.5, 4), atol=1e-5)
    assert not np.allclose(oof.thresholds(0), oof.thresholds(1))
