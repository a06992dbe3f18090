"""The pieces of a pretraining step: parameter groups, the validation split, teacher forcing, length-sorted pieces
of a batch, the batches of a step (prepared in a thread or in worker processes), the wall-clock budget and the
data-parallel environment. :mod:`training.decoder.pretrain` composes them into the run."""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn import functional as F

from engine.errors import ConfigError
from engine.model.decoder import ConditionalDecoder, DecoderConfig
from training.core.checkpoint import latest_checkpoint, load_decoder
from training.data.batching import FormulaGroupedBatchSampler
from training.data.dataset import IGNORE_INDEX, CorpusDataset
from training.decoder.pretrain_config import PretrainConfig
from training.encoder.noise import FingerprintNoise

NOISE_STREAM = 0x6E6F6973  # tags the noise generator's seed sequence apart from reseed()'s


def param_groups(model: nn.Module, weight_decay: float) -> tuple[list[dict], list[str]]:
    """AdamW groups: decay on Linear weight matrices; none on biases, LayerNorms and embeddings.

    Returns the groups and the parameter names in optimizer order (for the checkpoint).
    """
    no_decay = set()
    for module in model.modules():
        if isinstance(module, (nn.Embedding, nn.LayerNorm)):
            no_decay.update(id(p) for p in module.parameters(recurse=False))
    decay, other = [], []
    for name, p in model.named_parameters():  # the tied lm_head.weight is transformer.wte.weight
        (other if id(p) in no_decay or p.ndim < 2 else decay).append((name, p))
    groups = [
        {"params": [p for _, p in decay], "weight_decay": weight_decay},
        {"params": [p for _, p in other], "weight_decay": 0.0},
    ]
    return groups, [n for n, _ in decay] + [n for n, _ in other]


def structure_hash(blocks: np.ndarray) -> np.ndarray:
    """(n, 14) uint8 ASCII InChIKey first blocks -> uint64: FNV-1a 64, then the splitmix64 finalizer."""
    h = np.full(len(blocks), 0xCBF29CE484222325, np.uint64)
    with np.errstate(over="ignore"):
        for j in range(blocks.shape[1]):
            h ^= blocks[:, j].astype(np.uint64)
            h *= np.uint64(0x100000001B3)
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            h ^= h >> np.uint64(shift)
            h *= np.uint64(mult)
        h ^= h >> np.uint64(31)
    return h


def validation_mask(ds: CorpusDataset, fraction: float) -> np.ndarray:
    """True for the records held out for validation: ``structure_hash(InChIKey-14) < fraction * 2**64``.

    The split depends only on each structure's key, so it is structure-disjoint and stable when
    records are added to the corpus.
    """
    blocks = ds.inchikey_blocks()
    if not len(blocks):
        return np.zeros(0, bool)
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    return structure_hash(blocks) < threshold


def init_from_decoder(model: ConditionalDecoder, src: str | Path, tokenizer) -> Path:
    """Copy the weights of an earlier run's decoder into ``model`` (same configuration and tokenizer)."""
    src = Path(src)
    is_bundle = (src / "config.json").is_file() and (src / "decoder.safetensors").is_file()
    found = src if (src / "decoder_config.json").is_file() or is_bundle else latest_checkpoint(src)
    if found is None:
        raise ConfigError(
            f"`init_decoder` {src} is neither a decoder directory, a model bundle nor a run with checkpoints."
        )
    earlier, earlier_tokenizer = load_decoder(found)
    if earlier.config != model.config:
        raise ConfigError(
            f"`init_decoder` {found} has another configuration ({earlier.config}) than this run ({model.config}); "
            "use the same --preset/--dropout/--block-size."
        )
    if earlier_tokenizer.fingerprint() != tokenizer.fingerprint():
        raise ConfigError(f"`init_decoder` {found} was trained with another tokenizer than this corpus's.")
    model.load_state_dict(earlier.state_dict())
    return found


class TeacherForcing(nn.Module):
    """The decoder as one forward (what DistributedDataParallel wraps): context encoding + decoding."""

    def __init__(self, decoder: ConditionalDecoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, idx, fp_bits, fp_mask, formula):
        ctx, ctx_mask = self.decoder.encode_context(fp_bits, fp_mask, formula)  # (B, L, C), (B, L)
        logits, _ = self.decoder(idx, ctx, ctx_mask)  # (B, T, V)
        return logits


def to_device(batch: dict[str, torch.Tensor], config: DecoderConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """Cut a collated batch to what the model reads and move it to ``device``.

    Sequences are cut to the longest one (at most ``block_size`` positions), the fingerprint to the
    longest query (at most ``max_fp_tokens``): the rest is padding, which the model masks or the loss
    ignores, so only time is saved.
    """
    T = min(max(1, int((batch["targets"] != IGNORE_INDEX).sum(1).max())), config.block_size)
    n_fp = min(max(1, int(batch["fp_mask"].sum(1).max())), config.max_fp_tokens)
    cut = {
        "idx": batch["idx"][:, :T],
        "targets": batch["targets"][:, :T],
        "fp_bits": batch["fp_bits"][:, :n_fp],
        "fp_mask": batch["fp_mask"][:, :n_fp],
        "formula": batch["formula"],
    }
    return {k: v.to(device, non_blocking=True) for k, v in cut.items()}


def split_by_length(batch: dict[str, torch.Tensor], max_tokens: int) -> list[dict[str, torch.Tensor]]:
    """The rows of a collated batch, longest first, in pieces of at most ``max_tokens`` padded positions
    (a longer row is a piece of its own); ``max_tokens`` 0 keeps the batch whole.

    Every row still enters the same optimizer step, so the gradient is the batch's; the formula-grouped
    batch composition is untouched, only the padding of mixed-length batches is saved.
    """
    if not max_tokens:
        return [batch]
    lengths = (batch["targets"] != IGNORE_INDEX).sum(1)
    order = torch.sort(lengths, descending=True, stable=True).indices.tolist()
    pieces, current = [], []
    for row in order:
        if current and (len(current) + 1) * int(lengths[current[0]]) > max_tokens:
            pieces.append(current)
            current = []
        current.append(row)
    pieces.append(current)
    return [{k: v[rows] for k, v in batch.items()} for rows in pieces]


def forward_backward(net: nn.Module, pieces: list[dict], n_tokens: float, world_size: int, amp) -> float:
    """Accumulate the gradient of (summed token loss / ``n_tokens``) over ``pieces`` into ``.grad``.

    ``n_tokens`` counts the target tokens of the whole global batch; DDP averages gradients over the
    ranks, hence the factor ``world_size``. Under DDP only the last piece's backward all-reduces.
    Returns the summed loss of the pieces.
    """
    loss_sum = 0.0
    for i, b in enumerate(pieces):
        sync = i == len(pieces) - 1 or not isinstance(net, nn.parallel.DistributedDataParallel)
        with nullcontext() if sync else net.no_sync():
            with amp():
                logits = net(b["idx"], b["fp_bits"], b["fp_mask"], b["formula"])  # (B, T, V)
            loss = F.cross_entropy(
                logits.flatten(0, 1).float(), b["targets"].flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
            )
            (loss * (world_size / n_tokens)).backward()
        loss_sum += loss.item()
    return loss_sum


class BatchStream:
    """This rank's batches, epoch after epoch, resumable at (epoch, batches consumed in it)."""

    def __init__(self, sampler: FormulaGroupedBatchSampler, epoch: int = 0, position: int = 0):
        self.sampler, self.epoch, self.position = sampler, epoch, position
        self._it: Iterator[list[int]] | None = None

    def next(self) -> list[int]:
        while True:
            if self._it is None:
                self.sampler.set_epoch(self.epoch)
                self.sampler.skip(self.position)
                self._it = iter(self.sampler)
            batch = next(self._it, None)
            if batch is not None:
                self.position += 1
                return batch
            self.epoch, self.position, self._it = self.epoch + 1, 0, None

    def state(self) -> dict:
        return {**self.sampler.state_dict(), "epoch": self.epoch, "batches_done": self.position}


class BudgetClock:
    """The learning-rate schedule of a wall-clock budget: linear warm-up over ``warmup_steps`` steps, then
    cosine decay over the share of the budget left when warm-up ended (see ``budget_minutes``)."""

    def __init__(self, budget_s: float, used_s: float, warmup_steps: int):
        self.budget_s, self.warmup_steps = budget_s, warmup_steps
        self.start = time.monotonic() - used_s
        self.warm_at: float | None = None if warmup_steps else 0.0

    def used(self) -> float:
        return time.monotonic() - self.start

    def spent(self) -> bool:
        return self.used() >= self.budget_s

    def lr(self, step: int, *, lr: float, min_lr: float) -> float:
        if step < self.warmup_steps:
            return lr * (step + 1) / self.warmup_steps
        if self.warm_at is None:  # the first decaying step (or the first after a resume past warm-up)
            self.warm_at = self.used()
        progress = min(1.0, (self.used() - self.warm_at) / max(self.budget_s - self.warm_at, 1e-9))
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


class StepBatches:
    """The collated (and, in noise-aware runs, corrupted) batches of each optimizer step, in step order.

    A step's batches are a pure function of the sampler's next index lists and the step number (the noise
    generator is keyed by ``(seed, rank, step)``), so preparing them ahead in a thread (``prefetch`` > 0)
    changes nothing but the time: while the device computes step s, the thread collates step s+1 (CUDA
    waits release the GIL). Each item carries the sampler state after its draw, which is what a checkpoint
    taken after that step must record.
    """

    def __init__(self, stream: BatchStream, ds: CorpusDataset, train_ids: np.ndarray, config: PretrainConfig,
                 noise: FingerprintNoise | None, rank: int, first_step: int):
        self.stream, self.ds, self.train_ids, self.config, self.noise, self.rank = stream, ds, train_ids, config, noise, rank
        self.step = first_step
        self._queue: queue.Queue | None = None
        self._halt = threading.Event()
        self._pool = None
        self._thread: threading.Thread | None = None
        if config.data_workers:
            import multiprocessing
            from collections import deque
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(
                config.data_workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_open,
                initargs=(str(ds.corpus_dir), config.noise_model if noise is not None else None),
            )  # fmt: skip
            self._pending: deque = deque()
            self._next_submit = first_step
            for _ in range(max(config.prefetch, 2 * config.data_workers)):
                self._submit()
        elif config.prefetch:
            self._queue = queue.Queue(maxsize=config.prefetch)
            self._thread = threading.Thread(target=self._fill, name="pretrain-prefetch", daemon=True)
            self._thread.start()

    def _submit(self) -> None:
        ids, state = self._draw()
        c = self.config
        future = self._pool.submit(_worker_step, ids, self._next_submit, c.seed, self.rank, c.noise_fraction)
        self._pending.append((future, state))
        self._next_submit += 1

    def _draw(self) -> tuple[list[np.ndarray], dict]:
        """The next step's record indices (one array per micro-batch) and the sampler state after them."""
        ids = [self.train_ids[self.stream.next()] for _ in range(self.config.grad_accum)]
        return ids, self.stream.state()

    def _make(self, step: int) -> tuple[list[dict], dict]:
        ids, state = self._draw()
        c = self.config
        return prepare_step(self.ds, self.noise, ids, step, c.seed, self.rank, c.noise_fraction), state

    def _fill(self) -> None:
        step = self.step
        while not self._halt.is_set():
            try:
                item = self._make(step)
            except BaseException as e:  # handed to the trainer, which raises it
                item = e
            step += 1
            while not self._halt.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:  # the trainer is behind
                    continue
            if isinstance(item, BaseException):
                return

    def next(self) -> tuple[list[dict], dict]:
        """``(batches, sampler state after them)`` of the next step."""
        if self._pool is not None:
            future, state = self._pending.popleft()
            self._submit()
            item = ([{k: torch.from_numpy(v) for k, v in b.items()} for b in future.result()], state)
        elif self._queue is None:
            item = self._make(self.step)
        else:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise item
        self.step += 1
        return item

    def close(self) -> None:
        """Stop preparing steps; the prefetch thread is joined (it ends after the step it is making), so no
        thread is left inside torch or numpy when the interpreter exits."""
        self._halt.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._thread is not None:
            self._thread.join()


def prepare_step(ds: CorpusDataset, noise: FingerprintNoise | None, ids: list[np.ndarray], step: int, seed: int,
                 rank: int, noise_fraction: float) -> list[dict]:
    """The collated batches of one step; in noise-aware runs a share of their rows condition on simulated
    queries drawn from a generator of ``(seed, rank, step)``, so a resumed run draws the same queries."""
    batches = [ds.collate(i) for i in ids]
    if noise is not None:
        noise_rng = np.random.default_rng([seed, rank, step, NOISE_STREAM])
        batches = [noise.corrupt_batch(b, noise_fraction, noise_rng) for b in batches]
    return batches


_WORKER: dict = {}  # a data worker's corpus and noise model (see StepBatches, data_workers)


def _worker_open(corpus_dir: str, noise_path: str | None) -> None:
    torch.set_num_threads(1)
    _WORKER["ds"] = CorpusDataset(corpus_dir)
    _WORKER["noise"] = FingerprintNoise.load(noise_path) if noise_path else None


def _worker_step(ids: list[np.ndarray], step: int, seed: int, rank: int, noise_fraction: float) -> list[dict]:
    batches = prepare_step(_WORKER["ds"], _WORKER["noise"], ids, step, seed, rank, noise_fraction)
    return [{k: v.numpy() for k, v in b.items()} for b in batches]


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Sum over ranks (float64 on the wire: token counts stay exact)."""
        if self.world_size == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()


def init_distributed(device: str) -> DistEnv:
    """Rank, world size and device from the environment torchrun / accelerate set; starts the group."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise ConfigError("`device` cuda was asked for, but CUDA is not available here; use --device cpu.")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    env = DistEnv(rank, world_size, local_rank, dev)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", init_method="env://")
        env.owns_group = True
    return env
