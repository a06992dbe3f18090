"""Fingerprint noise model (training.encoder.noise) and noise-aware pretraining (training.decoder.pretrain --noise-model)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch
from tiny_corpus import corpus, losses, tiny_config  # noqa: F401  (the corpus fixture)

from engine.errors import BundleError, ConfigError
from engine.model.querying import Calibration, default_threshold_grid
from training.core.checkpoint import latest_checkpoint
from training.encoder.noise import FingerprintNoise, fit_from_oof, main
from training.decoder.pretrain import StepDone, Validated, pretrain

N_BITS = 64


def synthetic_posteriors(n: int, keep: float, false_on: float, seed: int = 0):
    """Posteriors whose cut at 0.5 keeps each true bit with ``keep`` and switches each other bit on with
    ``false_on``: true bits get π = 0.9 or 0.1, the others 0.7 or 0.2."""
    rng = np.random.default_rng(seed)
    truth = rng.random((n, N_BITS)) < 0.2
    post = np.where(truth, np.where(rng.random((n, N_BITS)) < keep, 0.9, 0.1),
                    np.where(rng.random((n, N_BITS)) < false_on, 0.7, 0.2)).astype(np.float32)  # fmt: skip
    return post, [np.flatnonzero(row) for row in truth]


def test_fit_recovers_the_rates_it_was_given():
    post, truth = synthetic_posteriors(4000, keep=0.6, false_on=0.05)
    noise = FingerprintNoise.fit(post, truth, np.array([0.5, 0.8]), prior_strength=5)
    assert noise.keep.shape == (2, N_BITS) and noise.levels == 2
    assert np.allclose(noise.keep[0], 0.6, atol=0.06) and np.allclose(noise.false_on[0], 0.05, atol=0.02)
    assert np.allclose(noise.keep[1], 0.6, atol=0.06)  # at 0.8 the true bits at 0.9 still pass
    assert np.all(noise.false_on[1] < 1e-3)  # and the 0.7 false ones no longer do
    assert noise.meta["spectra"] == 4000 and len(noise.meta["mean_query_bits_per_level"]) == 2


def test_shrinkage_gives_a_bit_never_seen_on_the_level_rate():
    post, truth = synthetic_posteriors(500, keep=0.5, false_on=0.1)
    truth = [t[t != 7] for t in truth]  # bit 7 is never in a true fingerprint
    noise = FingerprintNoise.fit(post, truth, np.array([0.5]), prior_strength=20)
    assert noise.keep[0, 7] == pytest.approx(noise.meta["keep_per_level"][0], abs=1e-4)


def test_corrupt_draws_queries_at_the_fitted_rates():
    noise = FingerprintNoise(np.full((1, N_BITS), 0.7), np.full((1, N_BITS), 0.1))
    truth = [np.arange(0, 20)] * 3000
    queries = noise.corrupt(truth, np.random.default_rng(0))
    kept = np.mean([np.isin(np.arange(20), q).mean() for q in queries])
    extra = np.mean([(q >= 20).sum() / (N_BITS - 20) for q in queries])
    assert kept == pytest.approx(0.7, abs=0.01) and extra == pytest.approx(0.1, abs=0.01)
    assert all(np.all(np.diff(q) > 0) for q in queries)  # sorted, no duplicates


def test_corrupt_batch_replaces_only_the_chosen_rows():
    noise = FingerprintNoise(np.full((3, 4096), 0.5), np.full((3, 4096), 0.001))
    fp_bits = torch.zeros((200, 16), dtype=torch.int64)
    fp_mask = torch.zeros((200, 16), dtype=torch.bool)
    fp_bits[:, :5] = torch.tensor([3, 10, 77, 900, 4000])
    fp_mask[:, :5] = True
    batch = {"idx": torch.ones(200, 4), "fp_bits": fp_bits, "fp_mask": fp_mask}
    out = noise.corrupt_batch(batch, 0.3, np.random.default_rng(1))
    assert out["idx"] is batch["idx"] and out["fp_bits"].shape == fp_bits.shape
    changed = [(out["fp_mask"][r] != fp_mask[r]).any() or (out["fp_bits"][r] != fp_bits[r]).any() for r in range(200)]
    assert 0.15 < np.mean(changed) < 0.45
    for r in range(200):  # padding stays 0 / False, real bits ascend
        bits = out["fp_bits"][r][out["fp_mask"][r]]
        assert torch.all(bits[1:] > bits[:-1]) and torch.all(out["fp_bits"][r][~out["fp_mask"][r]] == 0)
    assert noise.corrupt_batch(batch, 0.0, np.random.default_rng(1)) is batch


def test_save_and_load_round_trip_without_pickle(tmp_path):
    post, truth = synthetic_posteriors(300, keep=0.5, false_on=0.1)
    noise = FingerprintNoise.fit(post, truth, np.array([0.3, 0.5, 0.7]), meta={"source": "test"})
    back = FingerprintNoise.load(noise.save(tmp_path / "n.npz"))
    assert np.array_equal(back.keep, noise.keep) and np.array_equal(back.false_on, noise.false_on)
    assert back.meta == json.loads(json.dumps(noise.meta))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(BundleError, match="training.encoder.noise fit"):
        FingerprintNoise.load(tmp_path / "bad.npz")


def test_rates_outside_zero_one_are_refused():
    with pytest.raises(ConfigError, match="keep"):
        FingerprintNoise(np.full((1, 4), 1.5), np.zeros((1, 4)))


def _write_oof(folder, n=60, seed=0):
    post, truth = synthetic_posteriors(n, keep=0.6, false_on=0.05, seed=seed)
    post4096 = np.zeros((n, 4096), np.float16)
    post4096[:, :N_BITS] = post
    fold = np.arange(n) % 2
    offsets = np.r_[0, np.cumsum([len(t) for t in truth])]
    np.savez(folder / "oof_posteriors.npz", ids=np.array([f"S{i}" for i in range(n)]), posteriors=post4096,
             fold=fold, bit_offsets=offsets, bits=np.concatenate(truth))  # fmt: skip
    grid = default_threshold_grid()
    for k in (0, 1):
        (folder / f"fold_{k}").mkdir()
        counts = [(post > t).sum(1).mean() for t in grid]
        Calibration(d_enc=float(np.mean([len(t) for t in truth])), thresholds=grid, active_counts=np.array(counts),
                    n_spectra=n, source="test").save(folder / f"fold_{k}" / "calibration.json")  # fmt: skip


def test_fit_from_an_oof_run_and_the_command_line(tmp_path, capsys):
    _write_oof(tmp_path)
    noise = fit_from_oof(tmp_path, groups=4)
    assert noise.levels == 4 and noise.n_bits == 4096 and set(noise.meta["fold_thresholds"]) == {"0", "1"}
    dense, sparse = noise.meta["mean_query_bits_per_level"][0], noise.meta["mean_query_bits_per_level"][-1]
    assert dense >= sparse  # level 0 is the dense end of the band
    assert main(["fit", "--oof", str(tmp_path), "--out", str(tmp_path / "n.npz"), "--groups", "4"]) == 0
    assert "4 band levels" in capsys.readouterr().out
    assert main(["fit", "--oof", str(tmp_path / "missing"), "--out", str(tmp_path / "m.npz")]) == 2
    assert "training.calibration.oof_posteriors" in capsys.readouterr().err


@pytest.fixture
def noise_file(tmp_path):
    rng = np.random.default_rng(0)
    return FingerprintNoise(rng.uniform(0.3, 0.7, (4, 4096)), rng.uniform(0, 0.01, (4, 4096))).save(tmp_path / "n.npz")


def test_noise_aware_pretraining_reports_both_validations_and_resumes_exactly(corpus, tmp_path, noise_file):  # noqa: F811
    cfg = dict(dropout=0.1, max_steps=7, noise_model=str(noise_file), noise_fraction=0.5)
    full_events = list(pretrain(tiny_config(corpus, tmp_path / "full", **cfg)))
    val = [e for e in full_events if isinstance(e, Validated)]
    assert val and all(e.noisy_loss is not None and 0 <= e.noisy_accuracy <= 1 for e in val)
    clean = losses(pretrain(tiny_config(corpus, tmp_path / "clean", dropout=0.1, max_steps=7)))
    assert losses(full_events) != clean  # the simulated queries change what is trained on

    stop, first = threading.Event(), []
    for event in pretrain(tiny_config(corpus, tmp_path / "cut", **cfg), stop):
        if isinstance(event, StepDone):
            first.append(event.loss)
            if event.step == 3:
                stop.set()
    rest = losses(pretrain(tiny_config(corpus, tmp_path / "cut", resume=True, **cfg)))
    assert first + rest == losses(full_events)


def test_resume_refuses_another_noise_file(corpus, tmp_path, noise_file):  # noqa: F811
    cfg = dict(max_steps=4, noise_model=str(noise_file), noise_fraction=0.5)
    stop = threading.Event()
    for event in pretrain(tiny_config(corpus, tmp_path / "run", **cfg), stop):
        if isinstance(event, StepDone) and event.step == 2:
            stop.set()
    assert latest_checkpoint(tmp_path / "run") is not None
    FingerprintNoise(np.full((4, 4096), 0.5), np.zeros((4, 4096))).save(noise_file)
    with pytest.raises(ConfigError, match="checksum"):
        list(pretrain(tiny_config(corpus, tmp_path / "run", resume=True, **cfg)))


def test_a_noise_fraction_needs_a_noise_model(corpus, tmp_path):  # noqa: F811
    with pytest.raises(ConfigError, match="training.encoder.noise fit"):
        tiny_config(corpus, tmp_path / "run", noise_fraction=0.5)
    with pytest.raises(ConfigError, match="noise_fraction"):
        tiny_config(corpus, tmp_path / "run", noise_model="x.npz", noise_fraction=1.5)


BLOCK_RDKIT = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("rdkit", "safe", "PySide6"):
            raise ImportError("not on this machine: " + name)
sys.meta_path.insert(0, Block())
"""


def test_pretraining_runs_where_rdkit_and_safe_mol_are_missing(corpus, tmp_path, noise_file):  # noqa: F811
    # an accelerator has torch and numpy only (docs/accelerator.md): reading a prepared corpus, the noise
    # model and training must not import RDKit, safe-mol or Qt
    import subprocess
    import sys

    script = BLOCK_RDKIT + (
        "from training.decoder.pretrain import main\n"
        f"sys.exit(main(['--corpus', {str(corpus)!r}, '--out', {str(tmp_path / 'run')!r}, '--preset', 'tiny', "
        "'--batch-size', '8', '--grad-accum', '1', '--max-steps', '2', '--warmup-steps', '1', '--precision', 'fp32', "
        "'--device', 'cpu', '--threads', '1', '--val-fraction', '0.1', "
        f"'--noise-model', {str(noise_file)!r}, '--noise-fraction', '0.5']))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert latest_checkpoint(tmp_path / "run").name == "step_00000002"


def test_unseen_training_rows_are_the_train_structures_no_training_licence_holds():
    from training.encoder.noise import unseen_training_rows

    class Data:  # the fields unseen_training_rows reads of a LabelledSpectra
        fold = np.array(["train", "train", "train", "train", "val", "train"])
        license = np.array(["CC BY", "CC BY-NC", "CC BY-NC", "CC0", "CC BY-NC", "CC BY-NC"])
        inchikey14 = np.array(["A", "A", "B", "C", "D", "E"])

        def selection_mask(self, folds=None, licenses=None, exclude_unit_resolution=True):
            return np.isin(self.fold, list(folds)) & np.array([True, True, True, True, True, False])

    # A is seen (a CC BY record holds it), B is unseen, C is seen, D is val, E is unit resolution
    assert unseen_training_rows(Data(), ["CC BY", "CC0"]).tolist() == [2]
    with pytest.raises(ConfigError, match="every licence"):
        unseen_training_rows(Data(), None)


def test_data_worker_processes_prepare_the_same_batches(corpus, tmp_path, noise_file):  # noqa: F811
    cfg = dict(max_steps=5, dropout=0.1, eval_every=5, noise_model=str(noise_file), noise_fraction=0.5)
    inline = losses(pretrain(tiny_config(corpus, tmp_path / "inline", **cfg)))
    workers = losses(pretrain(tiny_config(corpus, tmp_path / "workers", data_workers=2, prefetch=2, **cfg)))
    assert workers == inline
