"""Conditional pretraining of the decoder (paper, Appendix "Conditional Pretraining").

    python -m training.decoder.pretrain --corpus runs/corpus_v1 --out runs/pt_small --preset small
    torchrun --nproc_per_node 8 -m training.decoder.pretrain --corpus ... --out ... --preset paper --init-from safe-gpt/
    python -m training.decoder.pretrain --out runs/pt_small --resume     # continues exactly, with the run's settings
    python -m training.decoder.pretrain --out runs/pt_small --export-decoder models/pt_small_decoder

The molecule-only objective: teacher-forced next-token loss of the SAFE tokens given the oracle
fingerprint and the formula. One optimizer step:

1. takes the next ``grad_accum`` formula-grouped batches of this rank (training.data.batching; rank r
   of W takes batches r, r+W, ... of the shuffled epoch list, so W ranks with accumulation A see
   exactly the batches one process with accumulation W*A would see in the same step);
   each batch runs through the model sorted by length, in pieces of at most ``forward_tokens``
   padded positions: the batch (and so the gradient) is unchanged, but mixed-formula batches,
   padded to their longest molecule, waste less (on a 40k-record slice of the corpus, 61% of the
   positions of a 64-record batch were padding; with 2048-position pieces 28%);
2. sums the cross-entropy over every target token and divides by the number of target tokens of
   the whole global batch (all micro-batches of all ranks), so the gradient is the token mean
   of the global batch whatever its split into ranks and micro-batches;
3. clips the gradient norm to ``grad_clip``, sets the learning rate of the step (linear warm-up,
   then cosine decay to ``min_lr``) and takes an AdamW step (betas 0.9/0.95, decoupled weight
   decay 0.01 on the Linear weight matrices only: biases, LayerNorms and embeddings, including the
   tied token embedding / LM head, are not decayed, since AdamW's decay would shrink the rows of
   rare tokens and bits at every step while they rarely get a gradient).

Forward passes run under bfloat16 autocast where the device supports it (``--precision auto``);
weights, gradients and optimizer moments stay float32.

Exact resume: a checkpoint holds the weights, the AdamW moments, the step and the data position
(sampler epoch + batches consumed). The learning rate is a function of the step, and every step
re-seeds torch (CPU and CUDA), numpy and python ``random`` from ``(seed, rank, step)``, so dropout
masks depend on nothing else; a resumed run therefore computes the same losses as one that was
never interrupted (bitwise in float32 on the same machine).

Validation: the records whose InChIKey first block hashes below ``val_fraction`` (see
:func:`validation_mask`) are held out of training, so the split is structure-disjoint and does not
move when the corpus grows; at most ``val_max_records`` of them are evaluated (loss per token and
token accuracy) every ``eval_every`` steps and at the end.

Distributed: under ``torchrun`` / ``accelerate launch`` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT in the environment) the model is wrapped in DistributedDataParallel (gloo on CPU,
nccl on CUDA); only rank 0 writes checkpoints and metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn import functional as F

from engine.errors import BundleError, ConfigError
from engine.model.bundle import sha256_file
from engine.model.decoder import ConditionalDecoder, DecoderConfig, parameter_counts

from training.data.batching import FormulaGroupedBatchSampler
from training.core.checkpoint import (
    export_decoder,
    latest_checkpoint,
    load_checkpoint,
    log_metrics,
    save_checkpoint,
    truncate_metrics,
    write_json_atomic,
)
from training.data.dataset import IGNORE_INDEX, CorpusDataset
from training.core.loop import autocast, lr_at, reseed, stop_on_signals, torch_threads
from training.encoder.noise import FingerprintNoise
from training.decoder.pretrain_config import (
    CheckpointSaved,
    Event,
    Finished,
    PretrainConfig,
    RESUMABLE_CHANGES,
    Started,
    StepDone,
    Validated,
)
from training.decoder.pretrain_steps import (
    BatchStream,
    BudgetClock,
    DistEnv,
    NOISE_STREAM,
    StepBatches,
    TeacherForcing,
    forward_backward,
    init_distributed,
    init_from_decoder,
    param_groups,
    split_by_length,
    to_device,
    validation_mask,
)
from training.decoder.pretrain_steps import (  # noqa: F401  (re-exported)
    _WORKER,
    _worker_open,
    _worker_step,
    prepare_step,
    structure_hash,
)


# -----------------------------------------------------------------------------------------------
# Training


def pretrain(config: PretrainConfig, stop: threading.Event | None = None) -> Iterator[Event]:
    """Train; yields progress events. Set ``stop`` to end at the next step boundary with a checkpoint
    (``Finished(reason="stopped")``); closing the generator abandons the run without saving."""
    env = init_distributed(config.device)
    finished = False
    try:
        with torch_threads(config.threads):
            yield from _train(config, env, stop or threading.Event())
        finished = True
    finally:
        if env.owns_group:
            # All ranks leave together: a rank that tears gloo down while another is still writing
            # the final checkpoint can abort in gloo's threads at exit ("terminate called without
            # an active exception"). After a failure there is no barrier (the others may be gone).
            if finished:
                dist.barrier()
            dist.destroy_process_group()


@dataclass
class _Run:
    """One process's run, as :func:`_setup` builds it: the data, the model and its optimizer, and where the run
    stands (the step, the data position, the budget clock)."""

    config: PretrainConfig
    env: DistEnv
    ds: CorpusDataset
    noise: FingerprintNoise | None
    noise_sha: str | None  # the noise model's checksum: a run resumes with the same file only
    train_ids: np.ndarray
    val_ids: np.ndarray
    sampler: FormulaGroupedBatchSampler
    steps_per_epoch: float
    max_steps: int
    model_config: DecoderConfig
    model: ConditionalDecoder
    optimizer: torch.optim.Optimizer
    param_names: list[str]
    amp: Callable[[], AbstractContextManager]  # opens the forward passes' autocast (see training.core.loop.autocast)
    amp_dtype: torch.dtype | None
    net: nn.Module | None = None  # the model under teacher forcing, in DistributedDataParallel across ranks
    step: int = 0
    epoch: int = 0  # the data position: the sampler's epoch and the batches done in it
    position: int = 0
    budget_used: float = 0.0  # seconds of the budget spent before this process (a resumed budget run)
    resumed_from: str | None = None
    warm: Any = None  # what a warm start from SAFE-GPT weights did (training.decoder.warmstart)
    sampler_state: dict = field(default_factory=dict)  # of the steps done; the prefetch thread draws ahead of it
    clock: BudgetClock | None = None

    @property
    def out(self) -> Path:
        """The run directory."""
        return Path(self.config.out)

    @property
    def metrics_path(self) -> Path:
        """The run's metrics log (rank 0 writes it)."""
        return self.out / "metrics.jsonl"


def _train(config: PretrainConfig, env: DistEnv, stop: threading.Event) -> Iterator[Event]:
    """The training loop of one process: optimizer steps, with validations and checkpoints between them, until
    ``max_steps``, the end of the budget or ``stop``."""
    run = _setup(config, env)
    stream = BatchStream(run.sampler, run.epoch, run.position)
    run.net = _teacher_forcing(run.model, env)
    val_batches = [run.val_ids[i : i + config.batch_size] for i in range(0, len(run.val_ids), config.batch_size)]
    yield _started(run)

    run.sampler_state = stream.state()  # of the steps done; the prefetch thread draws ahead of it
    steps = StepBatches(stream, run.ds, run.train_ids, config, run.noise, env.rank, run.step)
    budget_s = 60 * config.budget_minutes if config.budget_minutes else None
    run.clock = BudgetClock(budget_s, run.budget_used, config.warmup_steps) if budget_s else None
    run.model.train()
    last_save, saved_step, last = time.monotonic(), run.step, {}
    log_tokens, log_seconds = 0, 0.0
    try:
        while run.step < run.max_steps:
            if env.all_reduce_sum([float(stop.is_set())])[0] > 0:  # any rank asked to stop: all stop here
                if saved_step != run.step:
                    yield from _checkpoint(run, "stop", last)
                yield Finished(run.step, "stopped")
                return
            t0 = time.perf_counter()
            total_loss, n_tokens, grad_norm, lr = _optimizer_step(run, steps)
            final = _is_last_step(run)
            seconds = time.perf_counter() - t0

            log_tokens, log_seconds = log_tokens + int(n_tokens), log_seconds + seconds
            epochs_done = run.sampler_state["epoch"] + run.sampler_state["batches_done"] / len(run.sampler)
            last = {"loss": total_loss / n_tokens, "lr": lr, "grad_norm": float(grad_norm), "epoch": epochs_done}
            yield StepDone(run.step, last["loss"], lr, last["grad_norm"], int(n_tokens), n_tokens / seconds,
                           epochs_done)
            if env.is_main and (run.step % config.log_every == 0 or final):
                log_metrics(run.metrics_path, {"kind": "train", "step": run.step, **last,
                                               "tokens_per_s": log_tokens / log_seconds})
                log_tokens, log_seconds = 0, 0.0

            if val_batches and ((config.eval_every and run.step % config.eval_every == 0) or final):
                yield _validate_and_log(run, val_batches, last)

            due = _checkpoint_due(config, run.step, last_save)
            if due or final:
                yield from _checkpoint(run, "final" if final else due, last)
                last_save, saved_step = time.monotonic(), run.step
            if final:
                break
        yield Finished(run.step, "completed")
    finally:
        steps.close()


def _setup(config: PretrainConfig, env: DistEnv) -> _Run:
    """Load the data (structure-disjoint validation split, formula-grouped batches of the rest), build the model
    and its optimizer, resume or start from the weights asked for, and write the run's files (rank 0)."""
    amp, amp_dtype = autocast(config.precision, env.device)

    # data: structure-disjoint validation split, formula-grouped batches of the rest
    ds = CorpusDataset(config.corpus)
    noise = FingerprintNoise.load(config.noise_model) if config.noise_model else None
    noise_sha = sha256_file(config.noise_model) if config.noise_model else None
    is_val = validation_mask(ds, config.val_fraction)
    train_ids = np.flatnonzero(~is_val)
    val_ids = np.flatnonzero(is_val)[: config.val_max_records]
    sampler = FormulaGroupedBatchSampler(
        ds.formula_keys()[train_ids], config.batch_size, seed=config.seed, rank=env.rank, world_size=env.world_size
    )
    if len(sampler) < config.grad_accum:
        raise ConfigError(
            f"{len(train_ids)} training records give {len(sampler)} batches per rank and epoch, fewer than "
            f"`grad_accum` ({config.grad_accum}); lower `batch_size` or use more data."
        )
    steps_per_epoch = len(sampler) / config.grad_accum
    max_steps = config.max_steps or (10**9 if config.budget_minutes else max(1, int(config.epochs * steps_per_epoch)))

    # model and optimizer (identical initialisation on every rank; DDP also broadcasts rank 0's)
    model_config = config.decoder_config(ds.tokenizer.vocab_size)
    torch.manual_seed(config.seed)
    model = ConditionalDecoder(model_config).to(env.device)
    groups, param_names = param_groups(model, config.weight_decay)
    fused = env.device.type in ("cpu", "cuda")
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), eps=1e-8, fused=fused)

    run = _Run(config, env, ds, noise, noise_sha, train_ids, val_ids, sampler, steps_per_epoch, max_steps,
               model_config, model, optimizer, param_names, amp, amp_dtype)
    _start_or_resume(run)
    _write_run_files(run)
    return run


def _start_or_resume(run: _Run) -> None:
    """Resume from the newest checkpoint in ``out`` (weights, optimizer moments, step, data position, budget
    spent), which needs ``resume``; without one, start from ``init_decoder`` or ``init_from`` when given."""
    config = run.config
    ckpt = latest_checkpoint(run.out)
    if ckpt is not None and not config.resume:
        raise ConfigError(f"{run.out} already holds checkpoints (newest {ckpt.name}); pass `resume` or use a new "
                          "`out`.")
    if ckpt is not None:
        state = load_checkpoint(ckpt, model=run.model, optimizer=run.optimizer, param_names=run.param_names)
        _check_resumable(state, config, run.ds, run.env)
        if state.get("noise_model") != run.noise_sha:
            raise ConfigError(
                f"cannot resume exactly: the noise model {config.noise_model} is not the file the run was trained "
                "with (its checksum differs); restore that file or start a new `out`."
            )
        run.step, run.epoch, run.position = state["step"], state["sampler"]["epoch"], state["sampler"]["batches_done"]
        run.budget_used = float(state.get("budget_used_s") or 0.0)
        run.resumed_from = str(ckpt)
    elif config.init_decoder:
        init_from_decoder(run.model, config.init_decoder, run.ds.tokenizer)
    elif config.init_from:
        from training.decoder.warmstart import warm_start_from_safe_gpt

        run.warm = warm_start_from_safe_gpt(run.model, config.init_from, run.ds.tokenizer)


def _write_run_files(run: _Run) -> None:
    """Rank 0 writes the run's config (and a warm start's report) and drops the metrics records a crashed run
    wrote after its last checkpoint."""
    if not run.env.is_main:
        return
    run.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run.out / "pretrain_config.json", run.config.to_dict())
    truncate_metrics(run.metrics_path, run.step)  # drop records a crashed run wrote after its last checkpoint
    if run.warm is not None:
        write_json_atomic(run.out / "warm_start.json", run.warm.to_dict())


def _teacher_forcing(model: ConditionalDecoder, env: DistEnv) -> nn.Module:
    """The model under teacher forcing, wrapped in DistributedDataParallel when several ranks train."""
    net = TeacherForcing(model)
    if env.world_size > 1:
        device_ids = [env.local_rank] if env.device.type == "cuda" else None
        net = nn.parallel.DistributedDataParallel(net, device_ids=device_ids)
    return net


def _started(run: _Run) -> Started:
    """The event that opens the run: its size, device, precision, data and where it starts."""
    config, env = run.config, run.env
    global_batch = config.batch_size * config.grad_accum * env.world_size
    return Started(
        run.step, run.max_steps, run.steps_per_epoch, env.world_size, global_batch, str(env.device),
        "bf16 autocast" if run.amp_dtype else "fp32", parameter_counts(run.model)["total"], len(run.train_ids),
        len(run.val_ids), run.resumed_from, run.warm.summary() if run.warm else None,
    )  # fmt: skip


def _optimizer_step(run: _Run, steps: StepBatches) -> tuple[float, float, torch.Tensor, float]:
    """One optimizer update on the next step's batches; ``run.step`` moves on by one. Returns the summed loss and
    the target tokens of the step over all ranks, the gradient norm (before clipping) and the learning rate."""
    config, env = run.config, run.env
    reseed(config.seed, env.rank, run.step)
    batches, run.sampler_state = steps.next()
    pieces = [to_device(p, run.model_config, env.device)
              for b in batches for p in split_by_length(b, config.forward_tokens)]  # fmt: skip
    n_local = sum(int((p["targets"] != IGNORE_INDEX).sum()) for p in pieces)
    (n_tokens,) = env.all_reduce_sum([n_local])
    loss_sum = forward_backward(run.net, pieces, n_tokens, env.world_size, run.amp)
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.grad_clip or float("inf"))
    if run.clock is None:
        lr = lr_at(run.step, lr=config.lr, min_lr=config.min_lr, warmup_steps=config.warmup_steps,
                   max_steps=run.max_steps)
    else:
        lr = run.clock.lr(run.step, lr=config.lr, min_lr=config.min_lr)
    for g in run.optimizer.param_groups:
        g["lr"] = lr
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.step += 1
    (total_loss,) = env.all_reduce_sum([loss_sum])
    return total_loss, n_tokens, grad_norm, lr


def _is_last_step(run: _Run) -> bool:
    """Was the step just taken the last: ``max_steps`` reached or the budget spent (rank 0's clock decides for all
    ranks)?"""
    spent = float(run.clock is not None and run.env.is_main and run.clock.spent())
    return run.step == run.max_steps or run.env.all_reduce_sum([spent])[0] > 0


def _validate_and_log(run: _Run, val_batches: list[np.ndarray], last: dict) -> Validated:
    """Validate the model at this step; the losses go into ``last`` (the next checkpoint's metrics) and, on rank 0,
    into metrics.jsonl."""
    val = evaluate(run.net, run.model, run.ds, val_batches, run.model_config, run.env, run.amp, run.step,
                   run.config.forward_tokens, run.noise)
    last["val_loss"], last["val_accuracy"] = val.loss, val.accuracy
    if val.noisy_loss is not None:
        last["val_noisy_loss"], last["val_noisy_accuracy"] = val.noisy_loss, val.noisy_accuracy
    if run.env.is_main:
        log_metrics(run.metrics_path, {"kind": "val", **asdict(val)})
    return val


def _checkpoint_due(config: PretrainConfig, step: int, last_save: float) -> str | None:
    """Why a checkpoint is due after ``step`` (``"interval"`` or ``"timer"``), or None."""
    due = "interval" if config.checkpoint_every and step % config.checkpoint_every == 0 else None
    if due is None and config.checkpoint_minutes and time.monotonic() - last_save >= 60 * config.checkpoint_minutes:
        due = "timer"  # rank 0's clock decides: only rank 0 writes, so the ranks need not agree
    return due


def _checkpoint(run: _Run, reason: str, last: dict) -> Iterator[Event]:
    """Save a checkpoint of the steps done (rank 0 writes it and logs it in metrics.jsonl); ``last`` holds the
    latest step's metrics."""
    path = None
    if run.env.is_main:
        config = run.config
        state = {
            "step": run.step,
            "sampler": run.sampler_state,
            "seed": config.seed,
            "world_size": run.env.world_size,
            "config": config.to_dict(),
            "corpus": {"n_records": len(run.ds), "tokenizer": run.ds.tokenizer.fingerprint()},
            "noise_model": run.noise_sha,
            "budget_used_s": run.clock.used() if run.clock else None,
            "decoder_config": run.model_config.to_dict(),
            "metrics": last,
            "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        path = str(save_checkpoint(
            run.out, model=run.model, optimizer=run.optimizer, param_names=run.param_names, tokenizer=run.ds.tokenizer,
            state=state, keep=config.keep_checkpoints,
        ))  # fmt: skip
        log_metrics(run.metrics_path, {"kind": "checkpoint", "step": run.step, "path": path, "reason": reason})
    yield CheckpointSaved(run.step, path, reason)


@torch.no_grad()
def evaluate(
    net, model, ds, val_batches, model_config, env: DistEnv, amp, step: int, forward_tokens: int,
    noise: FingerprintNoise | None = None,
) -> Validated:
    """Token-mean loss and accuracy over the validation batches (split over ranks); with a noise model
    also over the same records conditioned on simulated queries (fixed draws, the same at every step)."""
    loss, accuracy, count = _validate(net, model, ds, val_batches, model_config, env, amp, forward_tokens, None)
    if noise is None:
        return Validated(step, loss, accuracy, count)
    noisy_loss, noisy_accuracy, _ = _validate(net, model, ds, val_batches, model_config, env, amp, forward_tokens, noise)
    return Validated(step, loss, accuracy, count, noisy_loss, noisy_accuracy)


def _validate(net, model, ds, val_batches, model_config, env, amp, forward_tokens, noise) -> tuple[float, float, int]:
    module = net.module if isinstance(net, nn.parallel.DistributedDataParallel) else net
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    mine = val_batches[env.rank :: env.world_size]
    batches = (ds.collate(ids) for ids in mine)
    if noise is not None:
        batches = (noise.corrupt_batch(b, 1.0, np.random.default_rng([i, NOISE_STREAM])) for i, b in enumerate(batches))
    pieces = (p for b in batches for p in split_by_length(b, forward_tokens))
    for piece in pieces:
        b = to_device(piece, model_config, env.device)
        with amp():
            logits = module(b["idx"], b["fp_bits"], b["fp_mask"], b["formula"])  # (B, T, V)
        targets, valid = b["targets"], b["targets"] != IGNORE_INDEX
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        loss_sum += loss.item()
        correct += int(((logits.argmax(-1) == targets) & valid).sum())
        count += int(valid.sum())
    model.train()
    loss_sum, correct, count = env.all_reduce_sum([loss_sum, correct, count])
    return loss_sum / max(count, 1), correct / max(count, 1), int(count)


def _check_resumable(state: dict, config: PretrainConfig, ds: CorpusDataset, env: DistEnv) -> None:
    saved = state["config"]
    names = [f.name for f in fields(config) if f.name not in RESUMABLE_CHANGES]
    changed = sorted(k for k in names if saved.get(k) != getattr(config, k))
    if changed:
        shown = ", ".join(f"`{k}` {saved.get(k)!r} -> {getattr(config, k)!r}" for k in changed)
        raise ConfigError(f"cannot resume exactly with changed settings ({shown}); use the saved ones or a new `out`.")
    corpus = {"n_records": len(ds), "tokenizer": ds.tokenizer.fingerprint()}
    if state["corpus"] != corpus:
        raise ConfigError(
            f"cannot resume: the corpus differs from the run's ({state['corpus']['n_records']} records, tokenizer "
            f"{state['corpus']['tokenizer'][:12]}; now {corpus['n_records']}, {corpus['tokenizer'][:12]})."
        )
    if state["world_size"] != env.world_size:
        raise ConfigError(
            f"cannot resume exactly: the run was saved with {state['world_size']} processes, this one has "
            f"{env.world_size}; the data order depends on it. Launch with --nproc_per_node {state['world_size']}."
        )


# -----------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.decoder.pretrain",
        description="Conditional pretraining of the MS-GPT decoder (runs unchanged under torchrun).",
    )
    PretrainConfig.add_arguments(p, given_only=True)
    p.add_argument("--export-decoder", metavar="DIR", help="write decoder.safetensors + decoder_config.json + "
                   "tokenizer.json of the newest checkpoint in --out (or of --checkpoint) to DIR, then exit")
    p.add_argument("--checkpoint", metavar="DIR", help="with --export-decoder: this checkpoint directory")
    p.add_argument("--export-dtype", choices=("fp32", "bf16"), default="fp32", help="with --export-decoder")
    return p


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    args = vars(_parser().parse_args(argv))
    export_to, checkpoint, export_dtype = args.pop("export_decoder"), args.pop("checkpoint"), args.pop("export_dtype")
    try:
        if export_to:
            src = checkpoint or args["out"]
            if not src:
                raise ConfigError("--export-decoder needs --out (a run directory) or --checkpoint.")
            dtype = torch.bfloat16 if export_dtype == "bf16" else torch.float32
            print(f"exported {export_decoder(src, export_to, dtype)}")
            return 0
        given = {k: v for k, v in args.items() if v is not None}
        saved = Path(args["out"] or "") / "pretrain_config.json"
        base = json.loads(saved.read_text()) if args["resume"] and saved.is_file() else {}
        config = PretrainConfig.from_dict({**base, **given})  # --resume: flags not given keep the run's values
    except (ConfigError, BundleError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    main_rank = int(os.environ.get("RANK", "0")) == 0
    bar = None
    try:
        with stop_on_signals(threading.Event()) as stop:
            for event in pretrain(config, stop):
                if not main_rank:
                    continue
                if isinstance(event, Started):
                    print(_describe_start(event), flush=True)
                    total = None if config.budget_minutes and not config.max_steps else event.max_steps
                    bar = tqdm(total=total, initial=event.step, unit="step", dynamic_ncols=True)
                elif isinstance(event, StepDone):
                    bar.update(1)
                    bar.set_postfix(loss=f"{event.loss:.4f}", lr=f"{event.lr:.2e}", tok_s=f"{event.tokens_per_s:,.0f}")
                elif isinstance(event, Validated):
                    noisy = "" if event.noisy_loss is None else (
                        f"; simulated queries: loss {event.noisy_loss:.4f}, accuracy {event.noisy_accuracy:.4f}")
                    bar.write(f"step {event.step}: val loss {event.loss:.4f}, token accuracy {event.accuracy:.4f}{noisy}")
                elif isinstance(event, CheckpointSaved):
                    bar.write(f"step {event.step}: checkpoint ({event.reason}) {event.path}")
                elif isinstance(event, Finished):
                    bar.close()
                    if event.reason == "stopped":
                        print(f"stopped at step {event.step}; continue with the same command and --resume")
                    else:
                        print(f"finished: {event.step} steps")
    except (ConfigError, BundleError) as e:
        if bar is not None:
            bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _describe_start(e: Started) -> str:
    lines = [
        f"{e.n_params / 1e6:.1f}M parameters on {e.device} ({e.precision}), {e.world_size} process(es), "
        f"{e.global_batch} records per step",
        f"{e.n_train:,} training / {e.n_val:,} validation records; {e.max_steps:,} steps "
        f"({e.steps_per_epoch:,.1f} per epoch)",
    ]
    if e.resumed_from:
        lines.append(f"resumed from {e.resumed_from} at step {e.step}")
    if e.warm_start:
        lines.append(e.warm_start)
    return "\n".join(lines)


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A worker of torch.distributed.run: its files are closed (metrics are appended line by line, checkpoints
        # written whole) and the process group destroyed after a barrier. It leaves without the interpreter's
        # teardown, where gloo's threads can still abort a finished run on a loaded machine ("terminate called
        # without an active exception", SIGABRT: tests/training/decoder/test_ddp.py failed so once in CI).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
