"""Encoder training on a tiny synthetic labelled MGF: data selection, loss going down, exact resume."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch

from engine.errors import ConfigError
from engine.model.encoder import EncoderConfig, SpectrumEncoder
from labelled_spectra import mgf, tiny_config, write_labelled_mgf  # noqa: F401  (the mgf fixture)
from training.data.spectra import (
    CacheHit,
    FeatureSettings,
    is_unit_resolution,
    iter_load_labelled_spectra,
    load_labelled_spectra,
    target_bits,
)
from training.encoder.train_encoder import (
    DataReady,
    EncoderTrainConfig,
    Resumed,
    StepDone,
    TrainingFinished,
    TrainingStopped,
    augment_batch,
    encoder_loss,
    length_grouped_batches,
    make_optimizer,
    train_encoder,
)


# ----------------------------------------------------------------------------------------------
# Data


def test_labelled_spectra_selection_and_cache(mgf, tmp_path):
    settings = FeatureSettings.for_encoder(EncoderConfig.from_preset("tiny"))
    data = load_labelled_spectra(mgf, settings, cache_dir=tmp_path / "cache")
    assert len(data) == 24 + 4 + 2  # negative mode and unparseable SMILES dropped
    assert sum(data.report["dropped"].values()) == 2
    train = data.select(["train"])
    assert len(train) == 24 and "unit-res" not in train.ids and "nc-licence" not in train.ids
    assert len(data.select(["train"], licenses=None, exclude_unit_resolution=False)) == 26
    assert len(data.select(["val"])) == 4
    # Targets: 128-bit Morgan of the stereo-free structure; features: root + annotated peaks.
    i = int(np.flatnonzero(data.ids == "tyrosine-0")[0])
    np.testing.assert_array_equal(data.target_bits(i), target_bits("NC(Cc1ccc(O)cc1)C(=O)O", 128, 2))
    assert data.n_tokens[i] == 1 + 8 and data.n_unannotated[i] == 0
    batch, targets = train.batch([0, 1, 2])
    assert batch["formulas"].shape[0] == 3 and targets.shape == (3, 128)
    # A second load reads the .npz cache (no pickle) and gives the same arrays.
    events = []
    gen = iter_load_labelled_spectra(mgf, settings, cache_dir=tmp_path / "cache")
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            again = stop.value
            break
    assert isinstance(events[0], CacheHit)
    np.testing.assert_array_equal(again.formulas, data.formulas)
    np.testing.assert_array_equal(again.ids, data.ids)
    with np.load(events[0].path, allow_pickle=False) as z:
        assert "bits" in z.files


@pytest.mark.parametrize(
    "instrument, unit",
    [("LC-ESI-QQ", True), ("LC-ESI-IT", True), ("LC-APPI-QQ", True), ("LC-ESI-QTOF", False),
     ("LC-ESI-ITFT", False), ("ESI-ITTOF", False), ("", False), (None, False)],
)  # fmt: skip
def test_is_unit_resolution(instrument, unit):
    assert is_unit_resolution(instrument) is unit


def test_length_grouped_batches_cover_every_record_once():
    n_tokens = np.random.default_rng(0).integers(1, 61, 1000)
    batches = length_grouped_batches(n_tokens, 32, seed=1, epoch=0, bucket_batches=8)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))
    padded = sum(len(b) * n_tokens[b].max() for b in batches)
    assert padded < 1.2 * n_tokens.sum()  # random batches of 32 would pad to ~1.9x
    again = length_grouped_batches(n_tokens, 32, seed=1, epoch=0, bucket_batches=8)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))
    other = length_grouped_batches(n_tokens, 32, seed=1, epoch=1, bucket_batches=8)
    assert not all(np.array_equal(a, b) for a, b in zip(batches, other))


# ----------------------------------------------------------------------------------------------
# Training


def test_a_few_steps_lower_the_loss(mgf, tmp_path):
    torch.manual_seed(0)
    settings = FeatureSettings.for_encoder(EncoderConfig.from_preset("tiny"))
    train = load_labelled_spectra(mgf, settings, cache_dir=tmp_path / "cache").select(["train"])
    model = SpectrumEncoder(EncoderConfig.from_preset("tiny"))
    optimizer = make_optimizer(model, tiny_config(mgf, tmp_path / "run", lr=3e-3))
    batch, targets = train.batch(np.arange(len(train)))
    losses = []
    for _ in range(20):
        loss = encoder_loss(model(batch), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def _run(config, stop_after=None, stop_event=None):
    """Losses by step (and the events); closes the generator after step ``stop_after``."""
    losses, events = {}, []
    gen = train_encoder(config, stop_event)
    for event in gen:
        events.append(event)
        if isinstance(event, StepDone):
            losses[event.step] = event.loss
            if stop_after is not None and event.step == stop_after:
                gen.close()
                break
            if stop_event is not None and event.step == 2:
                stop_event.set()
    return losses, events


def test_training_writes_outputs(mgf, tmp_path):
    out = tmp_path / "run"
    losses, events = _run(tiny_config(mgf, out, max_steps=9))
    assert isinstance(events[-1], TrainingFinished) and events[-1].reason == "max_steps"
    assert len(losses) == 9  # 24 spectra in batches of 8: 3 steps an epoch
    for name in ("encoder.safetensors", "encoder_config.json", "metrics.json", "train_config.json"):
        assert (out / name).is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["val"]["n_spectra"] == 4 and metrics["data"]["train"]["spectra"] == 24
    assert len(metrics["history"]) == 3  # one evaluation an epoch
    model = SpectrumEncoder(EncoderConfig.from_dict(json.loads((out / "encoder_config.json").read_text())))
    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(out / "encoder.safetensors")))
    assert not any(p.suffix in {".pt", ".pth", ".pkl"} for p in out.rglob("*"))


RECIPES = {
    "plain": {},
    # every option of the recipe ablation at once: EMA, augmentation, growing head, BCE + cosine
    "ablation": dict(ema_decay=0.9, peak_dropout=0.3, intensity_noise=0.4, cosine_weight=1.0,
                     encoder={"dropout": 0.1, "grow_levels": 2}),
    # MIST's substructure task with augmentation (hidden peaks are not asked about)
    "substructure": dict(substructure_weight=0.5, peak_dropout=0.3, encoder={"dropout": 0.1, "fragment_bits": 32}),
}  # fmt: skip


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_resume_continues_exactly(mgf, tmp_path, recipe):
    extra = RECIPES[recipe]
    full, _ = _run(tiny_config(mgf, tmp_path / "full", max_steps=8, **extra))
    part, _ = _run(tiny_config(mgf, tmp_path / "part", max_steps=8, **extra), stop_after=4)  # closing saves
    assert list(part) == [1, 2, 3, 4]
    rest, events = _run(tiny_config(mgf, tmp_path / "part", max_steps=8, resume=True, **extra))
    assert any(isinstance(e, Resumed) and e.step == 4 for e in events)
    assert list(rest) == [5, 6, 7, 8]
    for step in range(1, 9):
        assert (part | rest)[step] == full[step], step  # bit-identical, dropout and augmentation included
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / run / "encoder.safetensors")) for run in ("full", "part"))
    assert all(torch.equal(a[k], b[k]) for k in a)  # the kept (EMA) weights too


def test_ema_weights_are_what_is_kept(mgf, tmp_path):
    out = tmp_path / "run"
    _run(tiny_config(mgf, out, max_steps=6, ema_decay=0.5, val_folds=()))
    from safetensors.torch import load_file

    kept = load_file(str(out / "encoder.safetensors"))
    raw = load_file(str(out / "checkpoint" / "model.safetensors"))
    ema = load_file(str(out / "checkpoint" / "ema.safetensors"))
    assert ema.pop("n_averaged").item() == 6
    assert all(torch.equal(kept[k], ema[k]) for k in kept)
    assert any(not torch.equal(kept[k], raw[k]) for k in kept if kept[k].is_floating_point())


def test_augment_batch_hides_and_rescales_peaks_but_never_the_root():
    torch.manual_seed(0)
    b, p = 64, 12
    mask = torch.ones(b, p, dtype=torch.bool)
    mask[:, 9:] = False  # padding
    intens = torch.rand(b, p)
    intens[:, 0] = 1.0
    intens[:, 1] = 1.0  # the base peak
    batch = {"mask": mask, "intensities": intens * mask, "formulas": torch.zeros(b, p, 14)}
    out = augment_batch(batch, torch.Generator().manual_seed(1), peak_dropout=0.25)
    assert out["mask"][:, 0].all() and not out["mask"][:, 9:].any()
    share = 1 - out["mask"][:, 1:9].float().mean().item()
    assert 0.18 < share < 0.32  # 512 peaks, each hidden with p = 0.25
    assert torch.equal(out["intensities"], batch["intensities"]) and batch["mask"][:, :9].all()  # input untouched
    noisy = augment_batch(batch, torch.Generator().manual_seed(1), intensity_noise=0.5)
    peaks = noisy["intensities"][:, 1:9]
    assert torch.allclose(peaks.amax(dim=1), torch.ones(b)) and (peaks > 0).all()
    assert torch.equal(noisy["intensities"][:, 0], torch.ones(b)) and (noisy["intensities"][:, 9:] == 0).all()
    assert not torch.allclose(peaks, batch["intensities"][:, 1:9])
    again = augment_batch(batch, torch.Generator().manual_seed(1), intensity_noise=0.5)
    assert torch.equal(again["intensities"], noisy["intensities"])  # a function of the generator's seed


def test_loss_terms():
    targets = torch.zeros(2, 8)
    targets[:, :2] = 1
    good = torch.where(targets > 0, 6.0, -6.0)
    assert encoder_loss(good, targets, cosine_weight=1.0, bce_weight=0.0) < 0.01
    assert encoder_loss(-good, targets, cosine_weight=1.0, bce_weight=0.0) > 0.9
    bce = encoder_loss(good, targets)
    assert torch.isclose(encoder_loss(good, targets, bce_weight=2.0), 2 * bce)
    with pytest.raises(ConfigError, match="`bce_weight` and `cosine_weight`"):
        EncoderTrainConfig(mgf="x.mgf", out_dir="x", bce_weight=0.0)
    with pytest.raises(ConfigError, match="`ema_decay`"):
        EncoderTrainConfig(mgf="x.mgf", out_dir="x", ema_decay=1.0)
    with pytest.raises(ConfigError, match="`peak_dropout`"):
        EncoderTrainConfig(mgf="x.mgf", out_dir="x", peak_dropout=1.0)


def test_stop_event_saves_a_checkpoint(mgf, tmp_path):
    out = tmp_path / "run"
    losses, events = _run(tiny_config(mgf, out), stop_event=threading.Event())
    assert isinstance(events[-1], TrainingStopped) and events[-1].step == 2
    assert (out / "checkpoint" / "state.json").is_file()
    assert not (out / "encoder.safetensors").exists()  # nothing partial
    with pytest.raises(ConfigError, match="--resume"):
        _run(tiny_config(mgf, out))
    with pytest.raises(ConfigError, match="`lr`"):
        _run(tiny_config(mgf, out, lr=1e-4, resume=True))


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="`select_metric`"):
        EncoderTrainConfig(mgf="x.mgf", out_dir=str(tmp_path), select_metric="accuracy")
    with pytest.raises(ConfigError, match="`batch_size`"):
        EncoderTrainConfig(mgf="x.mgf", out_dir=str(tmp_path), batch_size=0)


def test_negative_mode_trains_and_calibrates_per_ion_mode(mgf, tmp_path):
    from training.calibration.calibrate import calibrate

    out = tmp_path / "both"
    _, events = _run(tiny_config(mgf, out, max_steps=3, adducts=["[M+H]+", "[M+Na]+", "M-H"]))
    ready = next(e for e in events if isinstance(e, DataReady))
    assert ready.n_train == 25 and ready.train["adducts"] == {"[M+H]+": 24, "[M-H]-": 1}  # the "negative" record
    cal, summary = calibrate(out)
    assert cal.negative is not None and (cal.n_spectra, cal.negative.n_spectra) == (24, 1)
    assert "negative-mode" in cal.negative.source and summary["negative"]["n_spectra"] == 1
    with pytest.raises(ConfigError, match="`adducts`"):
        tiny_config(mgf, out, adducts=["[M+Xy]+"])


def test_command_line_sets_the_encoder_fields(tmp_path):
    from training.encoder.train_encoder import _parser, config_from_args

    argv = ["--mgf", "x.mgf", "--out", str(tmp_path), "--dropout", "0.3", "--grow-levels", "4", "--fragment-bits", "64",
            "--substructure-weight", "0.5"]  # fmt: skip
    config = config_from_args(_parser().parse_args(argv))
    assert config.encoder == {"dropout": 0.3, "grow_levels": 4, "fragment_bits": 64}
    assert config.substructure_weight == 0.5 and config.encoder_config().fragment_bits == 64
    with pytest.raises(ConfigError, match="--fragment-bits"):
        config_from_args(_parser().parse_args(argv[:-6] + ["--substructure-weight", "0.5"]))
