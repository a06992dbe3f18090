"""The configuration of conditional pretraining (:class:`PretrainConfig`, its flags and presets) and the progress
events :func:`training.decoder.pretrain.pretrain` yields."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import ConfigError
from engine.model.decoder import DecoderConfig
from training.core.loop import DEVICES, PRECISIONS, TrainingConfig, int_at_least, one_of


@dataclass
class PretrainConfig(TrainingConfig):
    corpus: str = field(default="", metadata={"help": "corpus directory (python -m training.data.corpus prepare)"})
    out: str = field(default="", metadata={"help": "run directory: checkpoints, metrics.jsonl, config"})
    preset: str = field(default="small", metadata={"help": "decoder preset: paper, small or tiny"})
    dropout: float | None = field(default=None, metadata={"help": "override the preset's dropout"})
    block_size: int | None = field(default=None, metadata={"help": "override the preset's max sequence length"})
    batch_size: int = field(default=64, metadata={"help": "records per micro-batch and rank (paper: 64)"})
    grad_accum: int = field(default=2, metadata={"help": "micro-batches per optimizer step (paper: 2)"})
    forward_tokens: int = field(default=2048, metadata={
        "help": "run each batch, sorted by length, in forward passes of at most this many padded token positions "
        "(0: whole batches); the gradient is the same, the padding less"})
    max_steps: int | None = field(default=None, metadata={"help": "optimizer steps (default: from --epochs)"})
    epochs: float = field(default=2.0, metadata={"help": "passes over the training records without --max-steps"})
    lr: float = field(default=3e-4, metadata={"help": "peak learning rate"})
    min_lr: float = field(default=3e-5, metadata={"help": "floor of the cosine decay"})
    warmup_steps: int = field(default=2000, metadata={"help": "linear warm-up steps"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW decoupled weight decay (Linear weights only)"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.95, metadata={"help": "AdamW beta2"})
    grad_clip: float = field(default=1.0, metadata={"help": "max global gradient norm (0: no clipping)"})
    precision: str = field(default="auto", metadata={"help": "auto (bf16 where supported), bf16 or fp32"})
    device: str = field(default="auto", metadata={"help": "auto, cpu or cuda"})
    threads: int | None = field(default=None, metadata={"help": "torch CPU threads per process"})
    seed: int = field(default=0, metadata={"help": "seed of the initialisation, the batch order and dropout"})
    val_fraction: float = field(default=0.002, metadata={"help": "share of structures held out for validation"})
    val_max_records: int = field(default=2048, metadata={"help": "validation records evaluated"})
    eval_every: int = field(default=500, metadata={"help": "validate every N steps (0: only at the end)"})
    log_every: int = field(default=10, metadata={"help": "write a train record to metrics.jsonl every N steps"})
    checkpoint_every: int = field(default=1000, metadata={"help": "save every N steps (0: never by steps)"})
    checkpoint_minutes: float = field(default=30.0, metadata={"help": "save every M minutes (0: never by time)"})
    keep_checkpoints: int = field(default=3, metadata={"help": "newest checkpoints kept"})
    resume: bool = field(default=False, metadata={"help": "continue from the newest checkpoint in --out"})
    init_from: str | None = field(default=None, metadata={"help": "local SAFE-GPT checkpoint to warm-start from"})
    init_decoder: str | None = field(default=None, metadata={
        "help": "start a new stage from the decoder of an earlier run (its run directory, a checkpoint, an "
                "exported decoder or a model bundle): weights only; optimizer, schedule and data order start "
                "afresh, so give another --seed to see the corpus in a new order"})
    noise_model: str | None = field(default=None, metadata={
        "help": "fingerprint noise model (python -m training.encoder.noise fit): rows of a batch may condition on a "
                "simulated band query of their fingerprint instead of the true one"})
    noise_fraction: float = field(default=0.0, metadata={
        "help": "share of the records (each drawn independently) that condition on a simulated query"})
    budget_minutes: float | None = field(default=None, metadata={
        "help": "train for this many minutes of wall clock: the cosine decay follows the elapsed share of the budget "
                "(after the step-counted warm-up) instead of the step, and the run ends when it is spent (or at "
                "max_steps); for a lent accelerator, where the steps a budget holds are not known beforehand. "
                "Learning rates then depend on timing, so a resumed run continues the schedule, not bit for bit"})
    prefetch: int = field(default=0, metadata={
        "help": "steps whose batches a background thread prepares ahead (collate + simulated queries) while the "
                "device computes (0: inline); the batches and so the losses are the same either way"})
    data_workers: int = field(default=0, metadata={
        "help": "processes that prepare the steps' batches (0: in this process); the batches are the same. On the "
                "H200 measured so far they did not speed training up: the step itself was the limit (docs/accelerator.md)"})

    def __post_init__(self):
        if not self.corpus:
            raise ConfigError("`corpus` is required: the directory written by `python -m training.data.corpus prepare`.")
        if not self.out:
            raise ConfigError("`out` is required: the run directory for checkpoints and metrics.")
        self.require(("batch_size", "grad_accum", "val_max_records", "log_every", "keep_checkpoints"), int_at_least(1),
                     "a positive integer")
        self.require(("warmup_steps",), int_at_least(0), "an integer >= 0")
        self.require(("max_steps", "threads", "block_size"), int_at_least(1, optional=True),
                     "a positive integer or unset")
        self.require(("eval_every", "checkpoint_every", "forward_tokens", "prefetch", "data_workers"), int_at_least(0),
                     "an integer >= 0 (0 turns it off)")
        if self.max_steps is None and not self.epochs > 0:
            raise ConfigError(f"`epochs` must be > 0 when `max_steps` is not set, got {self.epochs!r}.")
        if not 0 < self.lr:
            raise ConfigError(f"`lr` must be > 0, got {self.lr!r}.")
        if not 0 <= self.min_lr <= self.lr:
            raise ConfigError(f"`min_lr` must be in [0, `lr`] = [0, {self.lr}], got {self.min_lr!r}.")
        self.require(("beta1", "beta2"), lambda v: 0 <= v < 1, "in [0, 1)")
        self.require(("weight_decay", "grad_clip", "checkpoint_minutes"), lambda v: v >= 0, ">= 0")
        self.require(("budget_minutes",), lambda v: v is None or v > 0, "> 0 or unset")
        self.require(("val_fraction",), lambda v: 0 <= v < 1, "in [0, 1)")
        self.require(("dropout",), lambda v: v is None or 0 <= v < 1, "in [0, 1)")
        self.require(("precision",), *one_of(PRECISIONS))
        self.require(("device",), *one_of(DEVICES))
        if not 0 <= self.noise_fraction <= 1:
            raise ConfigError(f"`noise_fraction` must be in [0, 1], got {self.noise_fraction!r}.")
        if self.noise_fraction > 0 and not self.noise_model:
            raise ConfigError(
                f"`noise_fraction` {self.noise_fraction} needs `noise_model`: fit one with "
                "`python -m training.encoder.noise fit --oof runs/oof --out runs/noise.npz`."
            )
        if self.init_from and self.init_decoder:
            raise ConfigError("Give `init_from` (a SAFE-GPT checkpoint) or `init_decoder` (our own decoder), not both.")

    def decoder_config(self, vocab_size: int) -> DecoderConfig:
        overrides = {k: getattr(self, k) for k in ("dropout", "block_size") if getattr(self, k) is not None}
        return DecoderConfig.preset(self.preset, vocab_size=vocab_size, **overrides)


# Settings that may change when resuming; every other field must equal the saved run's.
RESUMABLE_CHANGES = frozenset({
    "corpus", "out", "resume", "init_from", "init_decoder", "precision", "device", "threads", "forward_tokens",
    "eval_every", "log_every", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints", "val_max_records",
    "prefetch", "data_workers",
})  # fmt: skip


@dataclass(frozen=True)
class Started:
    step: int  # first step to run (> 0 when resumed)
    max_steps: int
    steps_per_epoch: float
    world_size: int
    global_batch: int  # records per optimizer step
    device: str
    precision: str
    n_params: int
    n_train: int
    n_val: int
    resumed_from: str | None
    warm_start: str | None


@dataclass(frozen=True)
class StepDone:
    step: int  # optimizer steps done
    loss: float  # token-mean loss of the step's global batch
    lr: float
    grad_norm: float  # before clipping
    tokens: int  # target tokens of the step (all ranks)
    tokens_per_s: float
    epoch: float  # fractional epochs done


@dataclass(frozen=True)
class Validated:
    step: int
    loss: float
    accuracy: float
    tokens: int
    noisy_loss: float | None = None  # the same records conditioned on simulated queries (noise-aware runs)
    noisy_accuracy: float | None = None


@dataclass(frozen=True)
class CheckpointSaved:
    step: int
    path: str | None  # None on ranks other than 0
    reason: str  # interval, timer, stop, final


@dataclass(frozen=True)
class Finished:
    step: int
    reason: str  # completed or stopped


Event = Started | StepDone | Validated | CheckpointSaved | Finished
