"""DistributedDataParallel: 2 gloo processes under torchrun train like 1 process with the same global batch.

Rank r of W takes batches r, r+W, r+2W, ... of the epoch's shuffled batch list (training.data.batching),
so with accumulation A, step s of rank r uses batches (s*A + a)*W + r, a < A; over both ranks of
W=2 that is batches 2sA ... 2sA + 2A - 1, exactly what one process with accumulation 2A uses in
step s. The loss is normalised by the global batch's token count in both cases, so the gradients
are the same.

With A=1 and whole batches per forward pass the two sides even add the same float numbers in the
same order, and the weights come out bitwise equal. Otherwise (A=2, length-sorted pieces, DDP's
no_sync path) the gradients agree to the last bits only; AdamW then magnifies those last-bit
differences in parameters whose true gradient is zero (the attention key biases: softmax ignores a
shift of all keys), so that case compares losses and gradient norms, which do not depend on them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tiny_corpus import tiny_config, write_synthetic_corpus

from engine.model.decoder import ConditionalDecoder
from training.data.batching import FormulaGroupedBatchSampler
from training.core.checkpoint import latest_checkpoint
from training.data.dataset import CorpusDataset
from training.decoder.pretrain import pretrain

ROOT = Path(__file__).resolve().parents[3]
STEPS = 4
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
needs_gloo = pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs the gloo backend")


def test_rank_split_covers_the_single_process_batches_step_by_step():
    keys = np.random.default_rng(0).integers(0, 5, 200)
    single = FormulaGroupedBatchSampler(keys, 8, seed=3).batches()
    ranks = [FormulaGroupedBatchSampler(keys, 8, seed=3, rank=r, world_size=2).batches() for r in range(2)]
    for s in range(len(ranks[0])):
        assert np.array_equal(ranks[0][s], single[2 * s]) and np.array_equal(ranks[1][s], single[2 * s + 1])


@needs_gloo
def test_two_gloo_ranks_give_the_weights_of_one_process_with_twice_the_accumulation(tmp_path):
    corpus = write_synthetic_corpus(tmp_path / "corpus")
    settings = dict(max_steps=STEPS, eval_every=2, lr=1e-2, min_lr=1e-3, forward_tokens=0)  # tiny: dropout 0
    # Both runs start fresh processes with the same thread settings: a process whose thread pool was
    # set up otherwise (like this one) can round differently in the last bit.
    _run([*TORCHRUN, *_args(tiny_config(corpus, tmp_path / "ddp", grad_accum=1, **settings))])
    _run([sys.executable, *_args(tiny_config(corpus, tmp_path / "one", grad_accum=2, **settings))])

    a = load_file(latest_checkpoint(tmp_path / "ddp") / "model.safetensors")
    b = load_file(latest_checkpoint(tmp_path / "one") / "model.safetensors")
    torch.manual_seed(0)  # the run's seed: pretrain initialises the decoder right after seeding
    start = ConditionalDecoder(tiny_config(corpus, tmp_path).decoder_config(CorpusDataset(corpus).tokenizer.vocab_size))
    assert a.keys() == b.keys() == start.state_dict().keys()
    assert max((b[k] - v).abs().max().item() for k, v in start.state_dict().items()) > 1e-3  # it trained
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    assert diff <= 1e-6, f"largest difference {diff:.2e}"  # 0.0 on the machines we ran it on
    assert _train_log(tmp_path / "ddp") == _train_log(tmp_path / "one")


@needs_gloo
def test_accumulation_and_length_pieces_under_ddp_give_the_losses_of_one_process(tmp_path):
    corpus = write_synthetic_corpus(tmp_path / "corpus")
    settings = dict(max_steps=STEPS, eval_every=0, lr=1e-2, min_lr=1e-3, batch_size=6, forward_tokens=20)
    _run([*TORCHRUN, *_args(tiny_config(corpus, tmp_path / "ddp", grad_accum=2, **settings))])
    list(pretrain(tiny_config(corpus, tmp_path / "one", grad_accum=4, **settings)))

    ddp, one = _train_log(tmp_path / "ddp"), _train_log(tmp_path / "one")
    assert len(ddp) == STEPS
    np.testing.assert_allclose(ddp, one, rtol=1e-5)  # loss and gradient norm (a scaling error shows here)


def _train_log(run: Path) -> list[tuple[float, float]]:
    records = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return [(r["loss"], r["grad_norm"]) for r in records if r["kind"] == "train"]


def _args(config) -> list[str]:
    """``-m training.decoder.pretrain`` and the flags of ``config``."""
    flags = (f"--{k.replace('_', '-')}={v}" for k, v in vars(config).items() if v not in (None, False))
    return ["-m", "training.decoder.pretrain", *flags]


def _run(cmd: list[str]) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for _ in range(2):  # a free port taken by another process between torchrun's pick and bind: once more
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        if done.returncode == 0 or not re.search(r"EADDRINUSE|[Aa]ddress already in use", done.stderr):
            break
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"finished: {STEPS} steps" in done.stdout
