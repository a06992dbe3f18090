"""Posterior-aligned adaptation (training/decoder/adapt.py): placement, QKV split, objective, adapter round trip."""

from __future__ import annotations

import json
import shutil
import threading
from contextlib import nullcontext

import numpy as np
import pytest
import torch

from engine.errors import ConfigError
from engine.model.bundle import load_bundle, save_adapter
from engine.model.decoder import PAD_ID, ConditionalDecoder, DecoderConfig
from engine.model.querying import threshold_query
from training.decoder.adapt import (
    GROUPS,
    AdaptConfig,
    Example,
    Prepared,
    Started,
    StepDone,
    adapt,
    adaptation_loss,
    batch_indices,
    collate_examples,
    draw_thresholds,
    forward_logits,
    lora_targets,
    main,
    make_trainer,
    predicted_lora_parameters,
    recoverability_group,
    train_step,
    trainable_parameters,
)


def tiny_config(**overrides) -> DecoderConfig:
    return DecoderConfig.preset("tiny", **overrides)


def adapt_config(tmp_path, **overrides) -> AdaptConfig:
    base = {"bundle": "unused", "mgf": "unused", "out": str(tmp_path / "run"), "steps": 4, "batch_size": 4,
            "micro_batch": 2, "warmup_steps": 1, "eval_every": 2, "precision": "fp32", "checkpoint_minutes": 0.0}
    return AdaptConfig(**{**base, **overrides})


def synthetic_examples(cfg: DecoderConfig, n: int, groups=("residual",), seed: int = 0) -> list[Example]:
    """Random SAFE token sequences, posteriors and formulas (only their shapes matter to the objective)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        tokens = np.concatenate([[1], rng.integers(4, cfg.vocab_size, rng.integers(4, 10)), [2]]).astype(np.int64)
        idx = np.unique(rng.integers(0, cfg.fp_bits, 40))
        out.append(Example(f"ex{i}", "train", groups[i % len(groups)], 0.5, None, rng.integers(0, 6, 14),
                           tokens, idx[:20], idx, rng.uniform(0.05, 1.0, len(idx)).astype(np.float32)))
    return out


# -- placement -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_trainable_parameters_equal_the_placement(preset, tmp_path):
    cfg = DecoderConfig.preset(preset)
    model = ConditionalDecoder(cfg)
    targets = lora_targets(model)
    assert len(targets) == 2 * cfg.fp_layers + 1 + 6 * cfg.n_cross
    modules = dict(model.named_modules())
    expected = sum(4 * (modules[t].weight.shape[0] + modules[t].weight.shape[1]) for t in targets)  # r (out + in)
    peft_model, _ = make_trainer(model, adapt_config(tmp_path))
    named = trainable_parameters(peft_model)
    assert sum(p.numel() for _, p in named) == expected == predicted_lora_parameters(model, targets, 4)
    assert all(".lora_A." in n or ".lora_B." in n for n, _ in named)
    wrapped = {n.split(".lora_")[0].removeprefix("base_model.model.") for n, _ in named}
    assert wrapped == set(targets)  # exactly the placement: backbone, LM head, formula encoder frozen
    assert not any(n.startswith(("transformer.", "lm_head", "formula_encoder")) for n in wrapped)


def test_paper_preset_count_beside_the_paper():
    with torch.device("meta"):  # 150M parameters without memory
        model = ConditionalDecoder(DecoderConfig.preset("paper"))
    targets = lora_targets(model)
    assert len(targets) == 41  # 2 fp-encoder layers x (v, out) + ctx_proj + 6 blocks x 6
    ours = predicted_lora_parameters(model, targets, 4)
    assert ours == 362_496
    # the paper: 39 layers, 350,212; its fingerprint encoder's two targets are a bit-value projection
    # Linear(1, 768) and a combine projection Linear(1536, 768): 4 (1 + 768) + 4 (1536 + 768) = 12,292
    shared = ours - 4 * 4 * (768 + 768)  # without our four fingerprint-encoder targets (rank 4, 768 -> 768)
    assert shared + 4 * (1 + 768) + 4 * (1536 + 768) == 350_212


def test_fp_targets_are_configurable_and_checked():
    model = ConditionalDecoder(tiny_config())
    assert lora_targets(model, ()) == lora_targets(model)[2:]
    with pytest.raises(ConfigError, match="`fp_targets`"):
        AdaptConfig(bundle="b", mgf="m", out="o", fp_targets=("c_attn",))


# -- objective ---------------------------------------------------------------------------------------------


def test_recoverability_groups_and_weights(tmp_path):
    assert recoverability_group(True, 0.1) == "frozen-hit"
    assert recoverability_group(False, 0.40) == "residual"
    assert recoverability_group(False, 0.39) == "low-coverage"
    cfg = adapt_config(tmp_path)
    assert [cfg.group_weights(g) for g in GROUPS] == [(0.05, 2.0), (1.0, 1.0), (0.0, 0.5)]


def test_group_weighting_of_the_loss():
    torch.manual_seed(0)
    B, T, V = 3, 5, 11
    student, teacher = torch.randn(B, T, V), torch.randn(B, T, V)
    targets = torch.randint(4, V, (B, T))
    targets[1, 3:] = PAD_ID
    mask = targets != PAD_ID
    logp, logq = student.log_softmax(-1), teacher.log_softmax(-1)
    ce = -logp.gather(-1, targets[..., None])[..., 0]
    kl = (logq.exp() * (logq - logp)).sum(-1)
    alpha, lam = torch.tensor([0.05, 1.0, 0.0]), torch.tensor([2.0, 1.0, 0.5])  # hit, residual, low-coverage
    loss, parts = adaptation_loss(student, teacher, targets, alpha, lam)
    want = ((alpha[:, None] * ce + lam[:, None] * kl) * mask).sum() / mask.sum()
    torch.testing.assert_close(loss, want)
    assert parts["tokens"] == int(mask.sum())

    # a low-coverage example alone: no CE at all, only 0.5 x its KL, averaged over its non-padding positions
    low = slice(2, 3)
    loss_low, _ = adaptation_loss(student[low], teacher[low], targets[low], alpha[low], lam[low])
    torch.testing.assert_close(loss_low, 0.5 * kl[2].mean())
    other = targets[low].clone()
    other[0, 0] = 4 if other[0, 0] != 4 else 5
    assert torch.equal(adaptation_loss(student[low], teacher[low], other, alpha[low], lam[low])[0], loss_low)
    s = student[low].clone().requires_grad_()
    adaptation_loss(s, teacher[low], targets[low], alpha[low], lam[low])[0].backward()
    s2 = student[low].clone().requires_grad_()
    (0.5 * (logq[low].exp() * (logq[low] - s2.log_softmax(-1))).sum(-1).mean()).backward()
    torch.testing.assert_close(s.grad, s2.grad)
    # the same teacher and student: the KL anchor is zero
    assert adaptation_loss(teacher, teacher, targets, 0 * alpha, lam)[0].abs() < 1e-6


def test_thresholds_are_drawn_within_the_band_and_threshold_the_posterior():
    t_lo, t_hi = 0.062, 0.292
    t = draw_thresholds(0, 5, 1000, t_lo, t_hi)
    assert t.min() >= t_lo and t.max() <= t_hi and t.std() > 0.05  # uniform over the band
    assert np.array_equal(t, draw_thresholds(0, 5, 1000, t_lo, t_hi))  # a function of (seed, step)
    assert not np.array_equal(t, draw_thresholds(0, 6, 1000, t_lo, t_hi))
    rng = np.random.default_rng(1)
    posterior = rng.random(4096).astype(np.float32) ** 4
    posterior[[7, 70, 700]] = (0.125, 0.25, 0.25)  # exactly at thresholds below: pi > t leaves them out
    keep = np.flatnonzero(posterior > t_lo)
    ex = Example("k", "train", "residual", 0.5, None, np.zeros(14, np.int64), np.array([1, 5, 2]),
                 np.array([1]), keep, posterior[keep])
    for ti in [*t[:50], 0.125, 0.25]:  # z_t = 1[pi > t], written out here: the bits strictly above t, in order
        want = np.array([i for i, p in enumerate(posterior.tolist()) if p > float(ti)], dtype=np.int64)
        assert np.array_equal(ex.query(ti), want)
        assert np.array_equal(threshold_query(posterior, float(ti)), want)  # the engine's own query, the same
    assert 70 not in ex.query(0.25) and 700 not in ex.query(0.25) and 70 in ex.query(0.2499)


def test_batches_cover_every_example_once_per_epoch():
    n, bs = 10, 4
    seen = np.concatenate([batch_indices(3, s, bs, n) for s in range(5)])  # 20 positions = 2 epochs
    assert sorted(seen[:10]) == list(range(n)) and sorted(seen[10:]) == list(range(n))
    assert np.array_equal(batch_indices(3, 2, bs, n), batch_indices(3, 2, bs, n))


# -- training ----------------------------------------------------------------------------------------------


def test_frozen_weights_stay_bit_identical_and_the_loss_falls(tmp_path):
    torch.manual_seed(0)
    cfg = tiny_config()
    decoder = ConditionalDecoder(cfg)
    with torch.no_grad():  # a trained LM head's scale: at init (std 0.02) every logit is ~0 whatever the adapter does
        decoder.lm_head.weight.mul_(10)
    frozen = {k: v.clone() for k, v in decoder.state_dict().items()}
    config = adapt_config(tmp_path, steps=30, batch_size=8, micro_batch=4, lr=1e-2, min_lr=1e-2, warmup_steps=0)
    model, optimizer = make_trainer(decoder, config)
    train = synthetic_examples(cfg, 8)  # a tiny set to overfit; all residual: CE weight 1
    losses = [train_step(model, optimizer, train, s, 0.1, 0.5, config)["loss"] for s in range(config.steps)]
    assert np.mean(losses[-3:]) < 0.8 * np.mean(losses[:3]), losses
    state = model.get_base_model().state_dict()
    for key, value in frozen.items():  # LoRA wraps a Linear as <name>.base_layer
        name = key if key in state else key.replace(".weight", ".base_layer.weight").replace(".bias", ".base_layer.bias")
        assert torch.equal(state[name], value), key
    assert any(p.abs().sum() > 0 for n, p in trainable_parameters(model) if "lora_B" in n)  # the adapter moved


@pytest.fixture(scope="module")
def prepared(tiny_bundle_dir, tmp_path_factory):
    """Examples of the fixture spectra with the tiny bundle (small pools: M=2, N=2)."""
    from tiny_bundle import fixture_spectra

    from engine.model.querying import band_thresholds
    from training.decoder.adapt import prepare_example

    bundle = load_bundle(tiny_bundle_dir, device="cpu", use_adapter=False)
    config = AdaptConfig(bundle=str(tiny_bundle_dir), mgf="unused", out="unused", groups=2, samples_per_group=2)
    thresholds = band_thresholds(bundle.calibration, config.kappa_min, config.kappa_max, config.groups)
    examples = [prepare_example(bundle, s, "train" if i >= 2 else "val", config, thresholds)
                for i, s in enumerate(fixture_spectra())]
    examples = [e for e in examples if isinstance(e, Example)]
    return Prepared([e for e in examples if e.split == "train"], [e for e in examples if e.split == "val"],
                    float(thresholds[0]), float(thresholds[-1]), {}, 0.0)


def test_prepared_examples(prepared):
    assert len(prepared.train) >= 4 and prepared.val
    for e in prepared.train:
        assert e.group in GROUPS and 0 <= e.coverage <= 1
        assert e.tokens[0] == 1 and e.tokens[-1] == 2
        assert np.all(e.post_val > prepared.t_lo) and np.all(np.diff(e.post_idx) > 0)
    assert all(e.group is None for e in prepared.val)
    assert Example.from_json(json.loads(json.dumps(prepared.train[0].to_json()))).to_json() == prepared.train[0].to_json()


def test_out_of_fold_examples_keep_their_band_and_expected_groups(tiny_bundle_dir, monkeypatch):
    """With a given posterior and band (an out-of-fold run's), the example is queried within *its* band,
    and the expected grouping calls it frozen-hit exactly when P(reference in the pool) >= 0.5."""
    from tiny_bundle import fixture_spectra

    import training.decoder.adapt as adapt_module
    from training.decoder.adapt import pool_hit_probability, prepare_example

    bundle = load_bundle(tiny_bundle_dir, device="cpu", use_adapter=False)
    config = AdaptConfig(bundle=str(tiny_bundle_dir), mgf="unused", out="unused", oof="runs/oof", groups=4,
                         samples_per_group=5, group_thresholds=2)
    assert config.grouping == "expected"  # the default with --oof
    with pytest.raises(ConfigError, match="--grouping expected"):
        AdaptConfig(bundle="b", mgf="m", out="o", oof="runs/oof", grouping="pool")
    spectrum = next(s for s in fixture_spectra() if s.smiles)
    rng = np.random.default_rng(0)
    posterior = (rng.random(bundle.decoder.config.fp_bits) ** 6).astype(np.float32)
    band = np.linspace(0.2, 0.4, 4)
    ex = prepare_example(bundle, spectrum, "train", config, band, posterior)
    assert ex.band == (0.2, 0.4) and np.all(ex.post_val > 0.2) and 0 <= ex.hit_p <= 1
    # coverage: the best Tanimoto of the reference's bits with a query of the band, worked out here
    oracle = set(ex.oracle.tolist())
    queries = [set(np.flatnonzero(posterior > t).tolist()) for t in band]
    coverage = max(len(oracle & q) / len(oracle | q) for q in queries)
    assert ex.coverage == pytest.approx(coverage, abs=1e-6)
    want = "frozen-hit" if ex.hit_p >= 0.5 else ("residual" if coverage >= 0.40 else "low-coverage")
    assert ex.group == want
    assert Example.from_json(json.loads(json.dumps(ex.to_json()))).to_json() == ex.to_json()

    # P = 1 - prod_t (1 - p_t)^(B / K): with p = 0.1 at both thresholds and B/K = 10 draws each
    monkeypatch.setattr(adapt_module, "_sequence_probabilities", lambda *a, **k: {"p": np.array([0.1, 0.1])})
    assert pool_hit_probability(bundle.decoder, ex, band, config) == pytest.approx(1 - 0.9**20)
    monkeypatch.setattr(adapt_module, "_sequence_probabilities", lambda *a, **k: {"p": np.array([0.0, 0.02])})
    assert pool_hit_probability(bundle.decoder, ex, band, config) == pytest.approx(1 - 0.98**10)


def test_thresholds_are_drawn_within_each_examples_band():
    lo, hi = np.array([0.1, 0.3] * 500), np.array([0.2, 0.5] * 500)
    t = draw_thresholds(0, 3, 1000, lo, hi)
    assert np.all(t >= lo) and np.all(t <= hi) and t[1::2].mean() > t[0::2].mean() + 0.15
    same = np.full(1000, 0.062), np.full(1000, 0.292)  # one band for all: as the scalar form, bitwise
    assert np.array_equal(draw_thresholds(0, 3, 1000, *same), draw_thresholds(0, 3, 1000, 0.062, 0.292))


def test_validation_reads_each_examples_own_thresholds(prepared, tiny_bundle_dir):
    from training.decoder.adapt import validate

    decoder = load_bundle(tiny_bundle_dir, device="cpu", use_adapter=False).decoder
    ts = np.linspace(prepared.t_lo, prepared.t_hi, 3)
    shared = validate(decoder, prepared.train, ts, nullcontext)
    per_example = validate(decoder, prepared.train, np.tile(ts, (len(prepared.train), 1)), nullcontext)
    assert shared == pytest.approx(per_example) and shared["rows"] == 3 * len(prepared.train)
    lower = validate(decoder, prepared.train, np.tile(ts[:1], (len(prepared.train), 3)), nullcontext)
    assert lower["rows"] == shared["rows"] and lower["nll"] != pytest.approx(shared["nll"])


def _final_lora(run) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoint" / "lora.safetensors"))


def test_resume_continues_exactly(prepared, tiny_bundle_dir, tmp_path):
    config = adapt_config(tmp_path, bundle=str(tiny_bundle_dir), out=str(tmp_path / "straight"))
    events = list(adapt(config, prepared=prepared))
    assert isinstance(events[0], Started) and events[0].trainable == events[0].predicted
    straight = _final_lora(tmp_path / "straight")

    stop = threading.Event()
    config = adapt_config(tmp_path, bundle=str(tiny_bundle_dir), out=str(tmp_path / "resumed"))
    for event in adapt(config, stop, prepared=prepared):
        if isinstance(event, StepDone) and event.step == 1:
            stop.set()
    assert json.loads((tmp_path / "resumed" / "checkpoint" / "state.json").read_text())["step"] == 1
    with pytest.raises(ConfigError, match="pass --resume"):
        list(adapt(config, prepared=prepared))
    config.resume = True
    with pytest.raises(ConfigError, match="changed settings .*`lr`"):
        list(adapt(adapt_config(tmp_path, bundle=str(tiny_bundle_dir), out=config.out, resume=True, lr=1.0),
                   prepared=prepared))
    resumed_events = list(adapt(config, prepared=prepared))
    assert resumed_events[0].resumed and resumed_events[0].step == 1
    resumed = _final_lora(tmp_path / "resumed")
    assert resumed.keys() == straight.keys()
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)


def test_adapter_round_trip_through_a_bundle(tiny_bundle_dir, tmp_path):
    bundle_dir = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, bundle_dir)
    base = load_bundle(bundle_dir, device="cpu", precision="fp32")
    base_state = {k: v.clone() for k, v in base.decoder.state_dict().items()}
    cfg = base.decoder.config
    model, _ = make_trainer(base.decoder, adapt_config(tmp_path))
    with torch.no_grad():
        for name, p in trainable_parameters(model):
            if "lora_B" in name:
                p.normal_(0, 0.2)  # a trained adapter: B != 0
    model.eval()
    b = collate_examples(synthetic_examples(cfg, 3), [0.2, 0.3, 0.4], cfg)
    with torch.no_grad():
        unmerged = forward_logits(model.get_base_model(), b)
    folder = save_adapter(model, bundle_dir)
    assert sorted(p.name for p in folder.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]

    adapted = load_bundle(bundle_dir, device="cpu", precision="fp32")
    assert adapted.has_adapter and adapted.adapter_active
    with torch.no_grad():
        merged = forward_logits(adapted.decoder, b)
    torch.testing.assert_close(merged, unmerged, rtol=1e-4, atol=1e-4)
    assert (merged - forward_logits(load_bundle(tiny_bundle_dir, device="cpu", precision="fp32").decoder, b)
            ).abs().max() > 1e-3  # the adapter changes the model
    adapted.set_adapter(False)
    assert all(torch.equal(v, base_state[k]) for k, v in adapted.decoder.state_dict().items())  # bit-identical
    adapted.set_adapter(True)
    with torch.no_grad():
        torch.testing.assert_close(forward_logits(adapted.decoder, b), merged, rtol=0, atol=0)


def test_cli_end_to_end(tiny_bundle_dir, fixture_mgf_path, tmp_path, capsys):
    out, dest = tmp_path / "run", tmp_path / "adapted"
    args = ["--bundle", str(tiny_bundle_dir), "--mgf", str(fixture_mgf_path), "--out", str(out), "--folds",
            "--val-spectra", "2", "--groups", "2", "--samples-per-group", "2", "--steps", "2", "--batch-size", "4",
            "--eval-every", "1", "--precision", "fp32"]
    assert main([*args, "--prepare-only"]) == 0
    lines = (out / "examples.jsonl").read_text().splitlines()
    assert len(lines) == 10 and json.loads((out / "examples_meta.json").read_text())["complete"]
    assert main(["--out", str(out), "--resume", "--write-bundle", str(dest)]) == 0  # trains from the cache
    assert (out / "examples.jsonl").read_text().splitlines() == lines  # nothing computed again
    text = capsys.readouterr().out
    assert "trainable parameters (placement predicts" in text and f"wrote {dest}" in text
    adapted = load_bundle(dest, device="cpu")
    assert adapted.has_adapter and adapted.name == "tiny-test-bundle-pa"
    assert adapted.config["adapter"]["steps"] == 2
    assert main(["--out", str(out), "--write-bundle", str(dest)]) == 2  # never overwrites
    assert "not empty" in capsys.readouterr().err

    # the last step's adapter (whatever the selection kept): the checkpoint's LoRA weights, loadable
    last = tmp_path / "adapted_last"
    assert main(["--out", str(out), "--write-bundle", str(last), "--adapter-step", "last"]) == 0
    from safetensors.torch import load_file

    saved = load_file(str(out / "checkpoint" / "lora.safetensors"))
    exported = load_file(str(last / "adapter" / "adapter_model.safetensors"))
    assert sorted(k.replace(".default.", ".") for k in saved) == sorted(exported)

    # a run stopped before its last step (as if it had been asked for 5): --out alone writes it as it stands
    config_path = out / "adapt_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "steps": 5}))
    capsys.readouterr()
    stopped = tmp_path / "adapted_stopped"
    assert main(["--out", str(out), "--write-bundle", str(stopped)]) == 0
    assert "stopped at step 2 of 5" in capsys.readouterr().out and load_bundle(stopped, device="cpu").has_adapter
    assert all(torch.equal(v, exported[k.replace(".default.", ".")]) for k, v in saved.items())
    bundle = load_bundle(last, device="cpu")
    assert bundle.has_adapter and bundle.config["adapter"]["adapter_step"] == 2


@pytest.fixture
def fixture_mgf_path(data_dir):
    return data_dir / "fixture.mgf"
