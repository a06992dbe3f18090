"""The configuration of posterior-aligned adaptation (:class:`AdaptConfig`, its flags), the LoRA adapter it attaches
to the decoder's fingerprint cross-attention, and the progress events :func:`training.decoder.adapt.adapt` yields."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from torch import nn

from engine.errors import ConfigError
from engine.model.decoder import ConditionalDecoder
from training.core.loop import DEVICES, PRECISIONS, TrainingConfig, int_at_least, one_of
from training.data.spectra import SHIPPABLE_LICENSES

GROUPS = ("frozen-hit", "residual", "low-coverage")
FP_TARGET_CHOICES = ("q_proj", "k_proj", "v_proj", "out_proj")
GROUPINGS = ("pool", "expected")
SELECT_METRICS = {"expected_share": "max", "token_accuracy": "max", "nll": "min"}


# Settings that may change when resuming; every other field must equal the saved run's.
RESUMABLE_CHANGES = frozenset({"out", "resume", "threads", "device", "checkpoint_minutes", "max_minutes"})


@dataclass
class AdaptConfig(TrainingConfig):
    bundle: str = field(default="", metadata={"help": "base model bundle folder (its adapter, if any, is ignored)"})
    mgf: str = field(default="", metadata={"help": "labelled MGF (FOLD, LICENSE, SMILES, FORMULA per record)"})
    out: str = field(default="", metadata={"help": "run directory: examples cache, checkpoints, adapter/"})
    folds: tuple[str, ...] = field(default=("train",), metadata={"help": "FOLD values to adapt on (none: all)"})
    licenses: tuple[str, ...] | None = field(default=SHIPPABLE_LICENSES, metadata={"help": "LICENSE values; None = all"})
    exclude_unit_resolution: bool = field(default=True, metadata={"help": "drop QQ / ion-trap spectra"})
    max_spectra: int | None = field(default=2000, metadata={"help": "seeded subsample of training spectra"})
    val_spectra: int = field(default=200, metadata={"help": "held-out structures (one spectrum each) for selection"})
    oof: str | None = field(default=None, metadata={
        "help": "out-of-fold run folder (training.calibration.oof_posteriors): each spectrum's posterior and band come from "
                "the fold encoder that never saw its structure, instead of the bundle's encoder"})
    grouping: str | None = field(default=None, metadata={
        "help": "how frozen-hit is decided: pool (draw the app's pool) or expected (P(reference in the pool) "
                ">= 0.5 from the sampler's probabilities, forward passes only); default pool, expected with --oof"})
    group_thresholds: int = field(default=5, metadata={
        "help": "band thresholds the expected grouping scores (each stands for B / this samples)"})
    rank: int = field(default=4, metadata={"help": "LoRA rank r"})
    alpha: float = field(default=8.0, metadata={"help": "LoRA alpha (scaling alpha / r)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on the LoRA input"})
    fp_targets: tuple[str, ...] = field(default=("v_proj", "out_proj"), metadata={
        "help": "projections of every fingerprint-encoder attention that get LoRA (empty: none)"})
    kappa_min: float = field(default=0.95, metadata={"help": "sparse end of the density band"})
    kappa_max: float = field(default=1.50, metadata={"help": "dense end of the density band"})
    groups: int = field(default=20, metadata={"help": "M: thresholds of the pool that decides the groups"})
    samples_per_group: int = field(default=5, metadata={"help": "N: samples per threshold (B = M x N)"})
    coverage_threshold: float = field(default=0.40, metadata={"help": "c >= this: residual, else low-coverage"})
    ce_weights: tuple[float, float, float] = field(default=(0.05, 1.0, 0.0), metadata={
        "help": "CE weight alpha_g of frozen-hit, residual, low-coverage"})
    kl_weights: tuple[float, float, float] = field(default=(2.0, 1.0, 0.5), metadata={
        "help": "KL weight lambda_g of frozen-hit, residual, low-coverage"})
    steps: int = field(default=3000, metadata={"help": "optimizer steps (paper: 3000 / 4000)"})
    batch_size: int = field(default=64, metadata={"help": "examples per optimizer step (paper: 64)"})
    micro_batch: int = field(default=16, metadata={"help": "examples per forward pass (same gradient)"})
    lr: float = field(default=1e-4, metadata={"help": "peak learning rate"})
    min_lr: float = field(default=1e-5, metadata={"help": "floor of the cosine decay"})
    warmup_steps: int = field(default=150, metadata={"help": "linear warm-up steps"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW decoupled weight decay"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.95, metadata={"help": "AdamW beta2"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm (0: no clipping)"})
    eval_every: int = field(default=100, metadata={"help": "validate every N steps (and at the end)"})
    val_thresholds: int = field(default=5, metadata={"help": "band thresholds per held-out spectrum"})
    select_metric: str = field(default="expected_share", metadata={"help": f"one of {', '.join(SELECT_METRICS)}"})
    precision: str = field(default="auto", metadata={"help": "auto (bf16 where native), bf16 or fp32"})
    device: str = field(default="cpu", metadata={"help": "cpu, cuda or auto"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads"})
    seed: int = field(default=0, metadata={"help": "seed of the subsample, the pools, batches and thresholds"})
    checkpoint_minutes: float = field(default=5.0, metadata={"help": "save the training state every M minutes"})
    max_minutes: float | None = field(default=None, metadata={"help": "stop training after this many minutes"})
    resume: bool = field(default=False, metadata={"help": "continue the run in --out"})

    def __post_init__(self):
        for name in ("bundle", "mgf", "out"):
            if not getattr(self, name):
                raise ConfigError(f"`{name}` is required (--{name}).")
        self.folds = tuple(self.folds)
        self.licenses = None if self.licenses is None else tuple(self.licenses)
        self.fp_targets = tuple(self.fp_targets)
        self.ce_weights, self.kl_weights = tuple(self.ce_weights), tuple(self.kl_weights)
        if self.grouping is None:
            self.grouping = "expected" if self.oof else "pool"
        self.require(("grouping",), *one_of(GROUPINGS))
        if self.oof and self.grouping == "pool":
            raise ConfigError("`grouping` pool draws the pool from the bundle's own encoder, not from --oof posteriors; "
                              "use --grouping expected with --oof.")
        self.require(("val_spectra", "rank", "groups", "group_thresholds", "samples_per_group", "steps", "batch_size", "micro_batch",
                      "eval_every", "val_thresholds", "threads"), int_at_least(1), "a positive integer")
        self.require(("max_spectra",), int_at_least(1, optional=True), "a positive integer or None (all)")
        self.require(("warmup_steps",), int_at_least(0), "an integer >= 0")
        unknown = [t for t in self.fp_targets if t not in FP_TARGET_CHOICES]
        if unknown:
            raise ConfigError(f"`fp_targets` {unknown} unknown; choose from {', '.join(FP_TARGET_CHOICES)}.")
        if not (self.alpha > 0 and 0 <= self.lora_dropout < 1):
            raise ConfigError(f"`alpha` must be > 0 and `lora_dropout` in [0, 1); got {self.alpha}, {self.lora_dropout}.")
        if not 0 < self.kappa_min <= self.kappa_max:
            raise ConfigError(f"`kappa_min` ({self.kappa_min}) must be > 0 and <= `kappa_max` ({self.kappa_max}).")
        if self.groups < 2:
            raise ConfigError(f"`groups` must be >= 2: the thresholds are drawn from the band, got {self.groups}.")
        if not 0 <= self.coverage_threshold <= 1:
            raise ConfigError(f"`coverage_threshold` is a Tanimoto in [0, 1], got {self.coverage_threshold!r}.")
        for name in ("ce_weights", "kl_weights"):
            w = getattr(self, name)
            if len(w) != 3 or any(not (isinstance(x, (int, float)) and x >= 0) for x in w):
                raise ConfigError(f"`{name}` needs three weights >= 0 ({', '.join(GROUPS)}), got {w!r}.")
        if not 0 < self.lr or not 0 <= self.min_lr <= self.lr:
            raise ConfigError(f"`lr` must be > 0 and `min_lr` in [0, lr]; got {self.lr}, {self.min_lr}.")
        self.require(("beta1", "beta2"), lambda v: 0 <= v < 1, "in [0, 1)")
        self.require(("weight_decay", "grad_clip", "checkpoint_minutes"), lambda v: v >= 0, ">= 0")
        self.require(("max_minutes",), lambda v: v is None or v > 0, "> 0 or unset")
        if self.select_metric not in SELECT_METRICS:
            raise ConfigError(f"`select_metric` {self.select_metric!r} unknown; choose one of {', '.join(SELECT_METRICS)}.")
        self.require(("precision",), *one_of(PRECISIONS))
        self.require(("device",), *one_of(DEVICES))

    def group_weights(self, group: str) -> tuple[float, float]:
        """(alpha_g, lambda_g) of a recoverability group."""
        i = GROUPS.index(group)
        return float(self.ce_weights[i]), float(self.kl_weights[i])


def lora_targets(model: ConditionalDecoder, fp_targets: Sequence[str] = ("v_proj", "out_proj")) -> list[str]:
    """Full names of the linear layers that get LoRA: the query-reading pathway (module docstring)."""
    names = [f"fp_encoder.layers.{i}.attn.{t}" for i in range(len(model.fp_encoder.layers)) for t in fp_targets]
    names.append("ctx_proj")
    for i in range(len(model.cross)):
        names += [f"cross.{i}.attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "out_proj")]
        names += [f"cross.{i}.mlp.c_fc", f"cross.{i}.mlp.c_proj"]
    modules = dict(model.named_modules())
    for name in names:
        if not isinstance(modules.get(name), nn.Linear):
            raise ConfigError(f"LoRA target `{name}` is not a Linear layer of this decoder; adapt a decoder built by "
                              "engine.model.decoder (its attention has separate q/k/v projections).")
    return names


def predicted_lora_parameters(model: nn.Module, targets: Sequence[str], rank: int) -> int:
    """r * (in + out) per targeted Linear: A is (r, in), B is (out, r)."""
    modules = dict(model.named_modules())
    return sum(rank * (modules[t].in_features + modules[t].out_features) for t in targets)


def attach_lora(decoder: ConditionalDecoder, config: AdaptConfig):
    """Freeze ``decoder`` and wrap it with peft LoRA on :func:`lora_targets` (modifies it in place)."""
    from peft import LoraConfig, get_peft_model

    for p in decoder.parameters():
        p.requires_grad_(False)
    names = lora_targets(decoder, config.fp_targets)
    pattern = "(?:" + "|".join(re.escape(n) for n in names) + ")"  # peft full-matches a string: exactly these
    lora = LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.lora_dropout,
                      target_modules=pattern, bias="none")
    return get_peft_model(decoder, lora)


def trainable_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


@dataclass(frozen=True)
class Started:
    step: int
    steps: int
    n_train: int
    n_val: int
    group_counts: dict
    targets: int  # LoRA-wrapped linear layers
    trainable: int
    predicted: int
    frozen: int
    device: str
    precision: str
    resumed: bool


@dataclass(frozen=True)
class StepDone:
    step: int
    loss: float
    ce: float  # unweighted token-mean CE
    kl: float  # unweighted token-mean KL
    lr: float
    grad_norm: float
    examples_per_s: float


@dataclass(frozen=True)
class Validated:
    step: int
    metrics: dict
    improved: bool


@dataclass(frozen=True)
class CheckpointSaved:
    step: int
    path: str


@dataclass(frozen=True)
class Finished:
    step: int
    reason: str  # completed, stopped, time_limit
    best_step: int | None
    best: dict
    adapter: str
