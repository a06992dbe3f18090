"""Encoder training on a tiny synthetic labelled MGF: data selection, loss going down, exact resume."""

from __future__ import annotations

import json
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.adducts import precursor_mz_from_neutral
from engine.annotate import enumerate_subformulas
from engine.chem import mol_formula, mol_from_smiles
from engine.encoder import EncoderConfig, SpectrumEncoder
from engine.errors import ConfigError
from engine.formula import formula_mass, parse_formula
from training.spectra import (
    CacheHit,
    FeatureSettings,
    is_unit_resolution,
    iter_load_labelled_spectra,
    load_labelled_spectra,
    target_bits,
)
from training.train_encoder import (
    EncoderTrainConfig,
    Resumed,
    StepDone,
    TrainingFinished,
    TrainingStopped,
    encoder_loss,
    length_grouped_batches,
    make_optimizer,
    train_encoder,
)

TRAIN_MOLECULES = {
    "mellein": "CC1Cc2cccc(O)c2C(=O)O1",
    "caffeine": "Cn1cnc2c1c(=O)n(C)c(=O)n2C",
    "aspirin": "CC(=O)Oc1ccccc1C(=O)O",
    "phenylalanine": "NC(Cc1ccccc1)C(=O)O",
    "nicotine": "CN1CCCC1c1cccnc1",
    "tyrosine": "N[C@@H](Cc1ccc(O)cc1)C(=O)O",
    "coumarin": "O=c1ccc2ccccc2o1",
    "vanillin": "COc1cc(C=O)ccc1O",
}
VAL_MOLECULES = {"tryptophan": "NC(Cc1c[nH]c2ccccc12)C(=O)O", "serotonin": "NCCc1c[nH]c2ccc(O)cc12"}


def _record(
    title, smiles, adduct="[M+H]+", fold="train", license="CC BY", instrument="LC-ESI-QTOF", seed=0, formula=None
):
    """One MGF block whose peaks are exact [M+H]+ ions of subformulas (the same ones per molecule)."""
    formula = formula or mol_formula(mol_from_smiles(smiles))
    _, masses = enumerate_subformulas(formula)
    masses = masses[masses > 40]
    rng = np.random.default_rng(zlib.crc32(formula.encode()))
    frag = np.sort(rng.choice(masses, size=min(8, len(masses)), replace=False))
    ion = "[M+H]+" if adduct.endswith("+") else "[M-H]-"
    mz = [precursor_mz_from_neutral(m, ion) for m in frag]
    intensity = np.random.default_rng(seed).uniform(10, 100, len(mz))
    precursor = precursor_mz_from_neutral(formula_mass(parse_formula(formula)), adduct)
    lines = [
        "BEGIN IONS", f"TITLE={title}", f"PEPMASS={precursor:.5f}", f"CHARGE=1{adduct[-1]}",
        f"IONMODE={'positive' if adduct.endswith('+') else 'negative'}", f"ADDUCT={adduct}",
        f"FORMULA={formula}", f"SMILES={smiles}", f"INSTRUMENT_TYPE={instrument}", f"LICENSE={license}",
        f"FOLD={fold}",
    ]  # fmt: skip
    lines += [f"{m:.5f} {i:.1f}" for m, i in zip(mz, intensity)]
    return "\n".join(lines + ["END IONS", ""])


def write_labelled_mgf(path: Path, per_molecule: int = 3) -> Path:
    """Train: 8 molecules x ``per_molecule``; val: 2 x 2; plus 4 records the default selection drops."""
    blocks = [
        _record(f"{name}-{k}", smi, seed=k) for name, smi in TRAIN_MOLECULES.items() for k in range(per_molecule)
    ]
    blocks += [_record(f"{name}-{k}", smi, fold="val", seed=k) for name, smi in VAL_MOLECULES.items() for k in range(2)]
    blocks += [
        _record("nc-licence", TRAIN_MOLECULES["mellein"], license="CC BY-NC"),  # cached, not selected
        _record("unit-res", TRAIN_MOLECULES["caffeine"], instrument="LC-ESI-QQ"),  # cached, not selected
        _record("negative", TRAIN_MOLECULES["aspirin"], adduct="[M-H]-"),  # dropped when reading
        _record("bad-smiles", "C1CC", formula="C10H10O3"),  # dropped when reading (unparseable)
    ]
    path.write_text("".join(blocks))
    return path


@pytest.fixture
def mgf(tmp_path) -> Path:
    return write_labelled_mgf(tmp_path / "labelled.mgf")


def tiny_config(mgf: Path, out: Path, **overrides) -> EncoderTrainConfig:
    base = dict(
        mgf=str(mgf), out_dir=str(out), preset="tiny", encoder={"dropout": 0.1}, batch_size=8, bucket_batches=2,
        lr=3e-3, warmup_steps=2, epochs=50, eval_batch_size=16, cache_dir=str(out.parent / "cache"),
        checkpoint_minutes=60.0,
    )  # fmt: skip
    return EncoderTrainConfig(**{**base, **overrides})


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


def test_resume_continues_exactly(mgf, tmp_path):
    full, _ = _run(tiny_config(mgf, tmp_path / "full", max_steps=8))
    part, _ = _run(tiny_config(mgf, tmp_path / "part", max_steps=8), stop_after=4)  # closing saves a checkpoint
    assert list(part) == [1, 2, 3, 4]
    rest, events = _run(tiny_config(mgf, tmp_path / "part", max_steps=8, resume=True))
    assert any(isinstance(e, Resumed) and e.step == 4 for e in events)
    assert list(rest) == [5, 6, 7, 8]
    for step in range(1, 9):
        assert (part | rest)[step] == full[step], step  # bit-identical, dropout included


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
