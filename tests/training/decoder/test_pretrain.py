"""Conditional pretraining (training.decoder.pretrain): loss goes down, exact resume, stop on a signal."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
from contextlib import nullcontext

import numpy as np
import pytest
import torch

from engine.errors import ConfigError
from training.core.checkpoint import checkpoint_dirs, export_decoder, latest_checkpoint, load_decoder
from training.core.loop import stop_on_signals
from tiny_corpus import corpus, losses, tiny_config, write_synthetic_corpus  # noqa: F401  (the corpus fixture)
from training.decoder.pretrain import (
    CheckpointSaved,
    Finished,
    Started,
    StepDone,
    TeacherForcing,
    Validated,
    forward_backward,
    param_groups,
    pretrain,
    split_by_length,
    structure_hash,
    to_device,
)


def test_a_few_steps_lower_the_loss(corpus, tmp_path):
    events = list(pretrain(tiny_config(corpus, tmp_path / "run", max_steps=30, eval_every=30, lr=1e-2, min_lr=1e-3)))
    assert isinstance(events[0], Started) and events[0].n_val > 0
    train = losses(events)
    assert len(train) == 30 and all(math.isfinite(x) for x in train)
    assert np.mean(train[-5:]) < 0.6 * np.mean(train[:5])
    val = [e for e in events if isinstance(e, Validated)]
    assert len(val) == 1 and val[0].step == 30 and 0 < val[0].accuracy <= 1
    assert isinstance(events[-1], Finished) and events[-1].reason == "completed"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} == {"train", "val", "checkpoint"}
    assert latest_checkpoint(tmp_path / "run").name == "step_00000030"


def test_resume_gives_the_losses_of_an_uninterrupted_run(corpus, tmp_path):
    # dropout on, so the random streams matter; 9 steps of 2 batches cross the epoch boundary (10 batches/epoch)
    cfg = dict(dropout=0.1, max_steps=9)
    full = losses(pretrain(tiny_config(corpus, tmp_path / "full", **cfg)))

    stop = threading.Event()
    first = []
    for event in pretrain(tiny_config(corpus, tmp_path / "cut", **cfg), stop):
        if isinstance(event, StepDone):
            first.append(event.loss)
            if event.step == 4:
                stop.set()  # seen at the end of step 4: a checkpoint at step 4, then the run ends
    assert latest_checkpoint(tmp_path / "cut").name == "step_00000004"
    rest = losses(pretrain(tiny_config(corpus, tmp_path / "cut", resume=True, **cfg)))
    assert first + rest == full  # bitwise, float32

    a, _ = load_decoder(latest_checkpoint(tmp_path / "full"))
    b, _ = load_decoder(latest_checkpoint(tmp_path / "cut"))
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_a_new_stage_starts_from_an_earlier_decoder(corpus, tmp_path):
    list(pretrain(tiny_config(corpus, tmp_path / "stage1", max_steps=3)))
    first, _ = load_decoder(latest_checkpoint(tmp_path / "stage1"))
    events = list(pretrain(tiny_config(corpus, tmp_path / "stage2", max_steps=1, lr=1e-12, min_lr=0.0, seed=1,
                                       init_decoder=str(tmp_path / "stage1"))))
    assert events[0].step == 0  # a fresh schedule and optimizer
    second, _ = load_decoder(latest_checkpoint(tmp_path / "stage2"))
    for (name, x), y in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.allclose(x, y, atol=1e-9), name  # one step at lr 1e-12: the weights are stage 1's
    with pytest.raises(ConfigError, match="another configuration"):
        list(pretrain(tiny_config(corpus, tmp_path / "stage3", max_steps=1, dropout=0.2,
                                  init_decoder=str(tmp_path / "stage1"))))
    with pytest.raises(ConfigError, match="not both"):
        tiny_config(corpus, tmp_path / "x", init_decoder="a", init_from="b")


def test_a_new_stage_starts_from_the_decoder_of_a_model_bundle(corpus, tmp_path):
    list(pretrain(tiny_config(corpus, tmp_path / "stage1", max_steps=2)))
    bundle = tmp_path / "bundle"  # the decoder part of a bundle: config.json["decoder"] + weights + tokenizer
    export_decoder(tmp_path / "stage1", bundle, torch.bfloat16)
    decoder_config = json.loads((bundle / "decoder_config.json").read_text())
    (bundle / "decoder_config.json").unlink()
    (bundle / "config.json").write_text(json.dumps({"format": "msgpt-bundle", "decoder": decoder_config}))
    first, _ = load_decoder(bundle)
    assert all(p.dtype == torch.float32 for p in first.parameters())  # bf16 storage read back in fp32
    list(pretrain(tiny_config(corpus, tmp_path / "stage2", max_steps=1, lr=1e-12, min_lr=0.0,
                              init_decoder=str(bundle))))
    second, _ = load_decoder(latest_checkpoint(tmp_path / "stage2"))
    for (name, x), y in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.allclose(x, y, atol=1e-9), name
    with pytest.raises(ConfigError, match="neither a decoder directory, a model bundle nor a run"):
        list(pretrain(tiny_config(corpus, tmp_path / "stage3", max_steps=1, init_decoder=str(tmp_path))))


def test_refuses_to_overwrite_or_resume_with_other_settings(corpus, tmp_path):
    list(pretrain(tiny_config(corpus, tmp_path / "run", max_steps=1)))
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        list(pretrain(tiny_config(corpus, tmp_path / "run", max_steps=2)))
    with pytest.raises(ConfigError, match="`batch_size` 8 -> 4"):
        list(pretrain(tiny_config(corpus, tmp_path / "run", max_steps=2, batch_size=4, resume=True)))


def test_sigterm_saves_a_checkpoint_at_the_next_step_boundary(corpus, tmp_path):
    cfg = tiny_config(corpus, tmp_path / "run", max_steps=50, keep_checkpoints=2, checkpoint_every=2)
    events = []
    with stop_on_signals(threading.Event()) as stop:
        for event in pretrain(cfg, stop):
            events.append(event)
            if isinstance(event, StepDone) and event.step == 3:
                os.kill(os.getpid(), signal.SIGTERM)
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    assert [(e.step, e.reason) for e in saved] == [(2, "interval"), (3, "stop")]
    assert events[-1] == Finished(3, "stopped")
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["step_00000002", "step_00000003"]
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_00000003" / "trainer_state.json").read_text())
    assert state["step"] == 3 and (state["sampler"]["epoch"], state["sampler"]["batches_done"]) == (0, 6)


def test_length_sorted_pieces_give_the_gradient_of_the_whole_batch(corpus):
    from engine.model.decoder import ConditionalDecoder, DecoderConfig
    from training.data.dataset import CorpusDataset

    ds = CorpusDataset(corpus)
    batch = ds.collate(np.arange(0, 96, 3))  # 32 records of lengths 4..8
    pieces = split_by_length(batch, 40)
    assert len(pieces) > 2 and sum(len(p["idx"]) for p in pieces) == 32
    assert all(len(p["idx"]) * int((p["targets"] != -1).sum(1).max()) <= 40 for p in pieces)
    cfg = DecoderConfig.preset("tiny", vocab_size=ds.tokenizer.vocab_size)
    grads = []
    for parts in ([batch], pieces):
        torch.manual_seed(0)
        net = TeacherForcing(ConditionalDecoder(cfg))
        n = int((batch["targets"] != -1).sum())
        loss = forward_backward(net, [to_device(p, cfg, torch.device("cpu")) for p in parts], n, 1, nullcontext)
        grads.append((loss, [p.grad.clone() for p in net.parameters()]))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-6)
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_weight_decay_only_on_linear_weights():
    from engine.model.decoder import ConditionalDecoder, DecoderConfig

    model = ConditionalDecoder(DecoderConfig.preset("tiny"))
    groups, names = param_groups(model, 0.01)
    decayed = names[: len(groups[0]["params"])]
    assert "transformer.h.0.attn.c_attn.weight" in decayed and "cross.0.attn.q_proj.weight" in decayed
    for name in ("transformer.wte.weight", "transformer.wpe.weight", "fp_encoder.bit_emb.weight",
                 "transformer.ln_f.weight", "transformer.h.0.attn.c_attn.bias"):  # fmt: skip
        assert name not in decayed
    assert len(names) == len(set(names)) == len(list(model.parameters()))


def test_validation_split_is_a_function_of_the_structure_key():
    keys = np.frombuffer(b"KWILGNNWGSNMPAAAAAAAAAAAAAAA", np.uint8).reshape(2, 14)
    h = structure_hash(keys)
    assert h.dtype == np.uint64 and h[0] != h[1]
    assert np.array_equal(structure_hash(keys[::-1]), h[::-1])  # no dependence on other records
    many = np.random.default_rng(0).integers(65, 91, size=(20000, 14)).astype(np.uint8)
    frac = (structure_hash(many) < np.uint64(int(0.1 * 2**64))).mean()
    assert 0.09 < frac < 0.11


def test_export_decoder_writes_what_bundles_need(corpus, tmp_path):
    list(pretrain(tiny_config(corpus, tmp_path / "run", max_steps=1)))
    dest = export_decoder(tmp_path / "run", tmp_path / "exported")
    assert {p.name for p in dest.iterdir()} == {"decoder.safetensors", "decoder_config.json", "tokenizer.json"}
    model, tok = load_decoder(dest)
    ref, _ = load_decoder(latest_checkpoint(tmp_path / "run"))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))


def test_config_errors_name_the_field(corpus, tmp_path):
    with pytest.raises(ConfigError, match="`grad_accum`"):
        tiny_config(corpus, tmp_path, grad_accum=0)
    with pytest.raises(ConfigError, match="`min_lr`"):
        tiny_config(corpus, tmp_path, min_lr=1.0)
    with pytest.raises(ConfigError, match="`precision`"):
        tiny_config(corpus, tmp_path, precision="fp16")


def test_prefetching_batches_in_a_thread_changes_no_loss_and_resumes_exactly(corpus, tmp_path):
    cfg = dict(max_steps=8, dropout=0.1, eval_every=4)
    inline = losses(pretrain(tiny_config(corpus, tmp_path / "inline", **cfg)))
    ahead = losses(pretrain(tiny_config(corpus, tmp_path / "ahead", prefetch=3, **cfg)))
    assert ahead == inline
    stop = threading.Event()
    cut = []
    for event in pretrain(tiny_config(corpus, tmp_path / "cut", prefetch=3, **cfg), stop):
        if isinstance(event, StepDone):
            cut.append(event.loss)
            if event.step == 3:
                stop.set()
    rest = losses(pretrain(tiny_config(corpus, tmp_path / "cut", prefetch=3, resume=True, **cfg)))
    assert cut + rest == inline


def test_a_budget_schedule_warms_up_by_steps_then_decays_with_the_clock(monkeypatch):
    from training.decoder import pretrain as pt

    now = [100.0]
    monkeypatch.setattr(pt.time, "monotonic", lambda: now[0])
    clock = pt.BudgetClock(budget_s=60.0, used_s=0.0, warmup_steps=4)
    assert [clock.lr(s, lr=1.0, min_lr=0.1) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    now[0] += 10  # warm-up ended 10 s in: the decay spans the 50 s left
    assert clock.lr(4, lr=1.0, min_lr=0.1) == pytest.approx(1.0)
    now[0] += 25
    assert clock.lr(5, lr=1.0, min_lr=0.1) == pytest.approx(0.55)
    assert not clock.spent()
    now[0] += 25
    assert clock.lr(6, lr=1.0, min_lr=0.1) == pytest.approx(0.1) and clock.spent()
    resumed = pt.BudgetClock(budget_s=60.0, used_s=59.0, warmup_steps=4)  # 59 s used before a resume
    assert resumed.used() == pytest.approx(59.0) and not resumed.spent()


def test_a_budget_run_ends_with_a_final_checkpoint_when_its_budget_is_spent(corpus, tmp_path, monkeypatch):
    from training.decoder import pretrain as pt

    calls = []
    monkeypatch.setattr(pt.BudgetClock, "spent", lambda self: calls.append(1) or len(calls) >= 3)
    events = list(pretrain(tiny_config(corpus, tmp_path / "run", max_steps=None, budget_minutes=5.0, eval_every=0)))
    done = [e for e in events if isinstance(e, StepDone)]
    assert [e.step for e in done] == [1, 2, 3]
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    assert saved[-1].reason == "final" and saved[-1].step == 3
    assert any(isinstance(e, Validated) and e.step == 3 for e in events)
    assert isinstance(events[-1], Finished) and events[-1].reason == "completed"
    assert json.loads((latest_checkpoint(tmp_path / "run") / "trainer_state.json").read_text())["budget_used_s"] >= 0

