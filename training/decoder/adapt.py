"""Posterior-aligned adaptation: a LoRA adapter that aligns the decoder with spectrum-derived queries.

Paper, Method "Posterior-Aligned Adaptation" and Appendix "Posterior-Aligned Adaptation"::

    python -m training.decoder.adapt --bundle resources/default_model --mgf massbank_dev.mgf.gz --out runs/adapt \\
        --max-spectra 1000 --steps 500 --warmup-steps 25 --eval-every 50 --write-bundle runs/bundle_pa
    python -m training.decoder.adapt --out runs/adapt --resume                   # continues exactly
    python -m training.decoder.adapt --out runs/adapt --write-bundle runs/bundle_pa  # base bundle + the adapter/
    python -m training.decoder.adapt ... --prepare-only                          # stage 1 alone

**Placement** (:func:`lora_targets`): rank-4 LoRA (α 8, dropout 0.05) on the query-reading pathway
only: the fingerprint encoder's value and output ("combine") projections of every encoder layer, the
shared context projection, and in every cross-attention block the query, key, value and output
projections and both feed-forward projections. Everything else (GPT-2 backbone, LM head, formula
encoder, the rest of the fingerprint encoder) stays frozen. Our attention layers already have
separate q/k/v projections, so nothing needs splitting (the paper splits its fused ones). For the ``paper`` preset that is 41 linear layers and 362,496
trainable parameters, against the paper's 39 layers and 350,212: the paper's fingerprint encoder
has two projections ours lacks (see benchmarks/studies/param_counts.py for the arithmetic).

**Data** (stage 1, cached): FOLD=train spectra (shippable licences, high-resolution, an adduct the
bundle supports, formula and reference SMILES), a seeded subsample of ``max_spectra``. Per spectrum:
the frozen encoder's posterior π (kept above the band's lowest threshold, all that any band query
reads), the oracle fingerprint, the formula and the canonical SAFE target. Its recoverability group
comes from the frozen model's default pool (κ band, M=20, N=5, B=100, adapter off, as the app draws
it): **frozen-hit** if the reference's InChIKey-14 is among the valid, formula-consistent candidates;
else **residual** if the posterior-oracle agreement c = max over the 20 band thresholds of
Tanimoto(1[π>t], z*) is >= 0.40; else **low-coverage**. Every finished spectrum is appended to
``examples.jsonl`` at once, so an interrupted stage continues where it stopped.

**Out-of-fold posteriors** (``--oof runs/oof``, the paper's scale: all train-fold spectra): the shipped
encoder was trained on these spectra, so its in-sample posteriors are far better than what it gives on a
new compound (fidelity at κ=1 0.60 in sample against 0.31 on FOLD=val), and an adapter aligned to them
learns the wrong noise. With ``--oof`` each spectrum's posterior comes from the fold encoder of
:mod:`training.calibration.oof_posteriors` that never saw its structure, and is queried at *that* encoder's band
(``Example.band``; training draws t ~ U over each example's own band). Drawing a pool per spectrum
takes ~1 s, too slow for 31k spectra, and would use the bundle's encoder; ``--grouping expected``
(the default with ``--oof``) decides frozen-hit from forward passes instead: P(reference in the pool)
= 1 - prod_t (1 - p_t)^(B/K) over K = ``group_thresholds`` thresholds spread over the band, p_t the
probability that the sampler writes exactly the reference's SAFE (:func:`pool_hit_probability`);
frozen-hit when P >= 0.5 (about 30 spectra/s on one thread).

    python -m training.decoder.adapt --bundle resources/default_model --mgf massbank_dev.mgf.gz --out runs/adapt_oof \
        --oof runs/oof --all-spectra --steps 3000 --eval-every 250

**Checkpoint selection** uses ``val_spectra`` spectra (one per structure) of FOLD=train structures
held out of adaptation, so FOLD=val stays untouched for the reported numbers (the encoder was trained
on these spectra, as on the adaptation examples, so their posteriors are better than on FOLD=val:
the selection ranks checkpoints, its values are no estimate of accuracy). The metric is
``expected_share``: for each held-out spectrum and 5 thresholds spread over the band, the
probability that the app's sampler (T=1, top-k 50, top-p 0.95) writes exactly the reference's SAFE
token sequence, i.e. the expected share of the pool that is the reference (a lower bound: other
SAFE spellings of the molecule count too). It needs forward passes only (no sampling, no RDKit),
has no sampling noise, and tracks what Top-k measures, since candidates are ranked by how often they
are drawn; teacher-forced token accuracy and NLL are logged beside it. Step 0 (the adapter's
initial B=0, i.e. the frozen model) is evaluated too, so the selected adapter is never worse than
no adapter on this metric.

**Objective** (stage 2), per example: draw t ~ U[t_κmax, t_κmin], z_t = 1[π > t]; loss =
α_g CE(student; y, z_t, C) + λ_g KL(teacher || student) on the same z_t, per token, summed over the
batch's non-padding positions and divided by their number. (α, λ) = (0.05, 2.0) frozen-hit,
(1.0, 1.0) residual, (0.0, 0.5) low-coverage. The teacher is the same model with the adapter
disabled, in eval mode. AdamW (0.9, 0.95), weight decay 0.01, lr 1e-4, linear warm-up then cosine
decay, gradient clipping at 1.0, bf16 autocast where the CPU/GPU computes it natively.

**Resume**: the batch of step s and its thresholds are functions of (seed, s), dropout is re-seeded
from (seed, s), so LoRA weights + AdamW moments + step are the whole state: ``--resume`` continues
bitwise as if never interrupted (tests/test_adapt.py checks it). A checkpoint is written every
``checkpoint_minutes`` and at every evaluation.

Run directory::

    adapt_config.json     the AdaptConfig
    examples_meta.json    what decides the examples (bundle checksum, data selection, band, M, N)
    examples.jsonl        one prepared spectrum per line (or why it was dropped)
    metrics.jsonl         train / val / checkpoint records
    checkpoint/           lora.safetensors, optimizer.safetensors, state.json (for --resume)
    adapter/              the selected adapter (adapter_config.json + adapter_model.safetensors)
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from engine.chem import molecules as chem
from engine.chem.formula import formula_vector, parse_formula
from engine.elucidation.pipeline import QueryParams, SpectrumSession, require_usable
from engine.errors import BundleError, ConfigError, MsgptError
from engine.model.bundle import ModelBundle, load_bundle, save_adapter, sha256_file, weights_checksum
from engine.model.decoder import PAD_ID, ConditionalDecoder, collate_queries
from engine.model.querying import band_thresholds, build_queries
from engine.model.sampling import filter_probs
from engine.progress import run_to_end
from engine.spectra.spectrum import Spectrum

from training.core.checkpoint import (
    atomic_folder,
    load_optimizer_state,
    log_metrics,
    optimizer_tensors,
    truncate_metrics,
    write_json_atomic,
)
from training.core.loop import (
    DEVICES,
    PRECISIONS,
    TrainingConfig,
    autocast,
    int_at_least,
    lr_at,
    one_of,
    reseed,
    stop_on_signals,
    torch_threads,
)
from training.data.oof_data import load_oof
from training.data.spectra import SHIPPABLE_LICENSES, is_unit_resolution

GROUPS = ("frozen-hit", "residual", "low-coverage")
FP_TARGET_CHOICES = ("q_proj", "k_proj", "v_proj", "out_proj")
GROUPINGS = ("pool", "expected")
SELECT_METRICS = {"expected_share": "max", "token_accuracy": "max", "nll": "min"}
# Settings that may change when resuming; every other field must equal the saved run's.
RESUMABLE_CHANGES = frozenset({"out", "resume", "threads", "device", "checkpoint_minutes", "max_minutes"})


# -----------------------------------------------------------------------------------------------
# Configuration


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


# -----------------------------------------------------------------------------------------------
# Placement


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


# -----------------------------------------------------------------------------------------------
# Examples


@dataclass(frozen=True)
class Example:
    """One annotated training spectrum, prepared (see the module docstring)."""

    key: str
    split: str  # "train" or "val"
    group: str | None  # recoverability group (train only)
    coverage: float  # max Tanimoto(1[pi > t_i], oracle) over the band's M thresholds
    rank: int | None  # reference rank in the frozen pool (train only; None = absent)
    formula: np.ndarray  # (14,) int64
    tokens: np.ndarray  # <bos> ... <eos>, int64
    oracle: np.ndarray  # sorted active bits of the reference
    post_idx: np.ndarray  # sorted bits with pi > the band's lowest threshold
    post_val: np.ndarray  # their posteriors, float32
    band: tuple[float, float] | None = None  # its own (t_kappa_max, t_kappa_min); None: the bundle's band
    hit_p: float | None = None  # expected grouping: P(reference in the frozen pool), train only

    def query(self, t: float) -> np.ndarray:
        """z_t = 1[pi > t] as sorted bits (exact for t >= the band's lowest threshold)."""
        return self.post_idx[self.post_val > float(t)]

    def to_json(self) -> dict:
        return {"key": self.key, "split": self.split, "group": self.group, "coverage": self.coverage,
                "rank": self.rank, "formula": self.formula.tolist(), "tokens": self.tokens.tolist(),
                "oracle": self.oracle.tolist(), "post_idx": self.post_idx.tolist(),
                "post_val": [float(v) for v in self.post_val],
                **({"band": list(self.band)} if self.band is not None else {}),
                **({"hit_p": self.hit_p} if self.hit_p is not None else {})}

    @classmethod
    def from_json(cls, d: dict) -> Example:
        return cls(d["key"], d["split"], d["group"], float(d["coverage"]), d["rank"],
                   np.asarray(d["formula"], np.int64), np.asarray(d["tokens"], np.int64),
                   np.asarray(d["oracle"], np.int64), np.asarray(d["post_idx"], np.int64),
                   np.asarray(d["post_val"], np.float32),
                   tuple(float(t) for t in d["band"]) if d.get("band") is not None else None, d.get("hit_p"))

    def band_or(self, t_lo: float, t_hi: float) -> tuple[float, float]:
        """Its own band, or (t_lo, t_hi) (the bundle's) when it has none."""
        return self.band if self.band is not None else (t_lo, t_hi)


def recoverability_group(hit: bool, coverage: float, threshold: float = 0.40) -> str:
    """frozen-hit (reference in the frozen pool), else residual (coverage >= threshold) or low-coverage."""
    if hit:
        return "frozen-hit"
    return "residual" if coverage >= threshold else "low-coverage"


def draw_thresholds(seed: int, step: int, n: int, t_lo, t_hi) -> np.ndarray:
    """n thresholds t ~ U[t_lo, t_hi] for the examples of optimizer step ``step`` (a function of seed, step).

    ``t_lo`` and ``t_hi`` are numbers or (n,) arrays (each example's own band)."""
    return np.random.default_rng([seed, step, 7]).uniform(t_lo, t_hi, size=n)


def batch_indices(seed: int, step: int, batch_size: int, n: int) -> np.ndarray:
    """The examples of step ``step``: consecutive slices of per-epoch permutations (seeded by (seed, epoch))."""
    positions = np.arange(step * batch_size, (step + 1) * batch_size)
    out = np.empty(batch_size, np.int64)
    for epoch in np.unique(positions // n):
        sel = positions // n == epoch
        out[sel] = np.random.default_rng([seed, int(epoch)]).permutation(n)[positions[sel] % n]
    return out


@dataclass(frozen=True)
class Prepared:
    """What stage 1 produced."""

    train: list[Example]
    val: list[Example]
    t_lo: float  # t_kappa_max (dense end, lowest threshold)
    t_hi: float  # t_kappa_min
    dropped: dict
    seconds: float  # group computation time (all sessions)


# -- stage 1 events
@dataclass(frozen=True)
class Reading:
    records: int
    eligible: int


@dataclass(frozen=True)
class Selected:
    n_train: int
    n_val: int
    n_done: int  # already in the cache


@dataclass(frozen=True)
class ExampleDone:
    done: int
    total: int
    group: str | None  # None: a held-out (val) spectrum, or dropped
    spectra_per_s: float  # of this session's train spectra (grouped)


def _examples_key(config: AdaptConfig, bundle: ModelBundle) -> dict:
    keep = ("folds", "licenses", "exclude_unit_resolution", "max_spectra", "val_spectra", "kappa_min", "kappa_max",
            "groups", "samples_per_group", "coverage_threshold", "seed", "precision", "grouping", "group_thresholds")
    oof = {"oof": sha256_file(Path(config.oof) / "oof_posteriors.npz")} if config.oof else {}
    return {"model": weights_checksum(bundle), "mgf": sha256_file(Path(config.mgf)), **oof,
            **{k: v for k, v in config.to_dict().items() if k in keep}}


def select_spectra(config: AdaptConfig, bundle: ModelBundle) -> Iterator[Reading]:
    """Eligible spectra of the MGF, split by structure into (train subsample, held-out val); *returns* both."""
    from engine.spectra.io import iter_spectra

    eligible: list[Spectrum] = []
    n = 0
    for item in iter_spectra(config.mgf):
        n += 1
        if n % 5000 == 0:
            yield Reading(n, len(eligible))
        if not isinstance(item, Spectrum) or not item.smiles:
            continue
        md = item.metadata
        if config.folds and md.get("fold", "") not in config.folds:
            continue
        if config.licenses is not None and md.get("license", "") not in config.licenses:
            continue
        if config.exclude_unit_resolution and is_unit_resolution(md.get("instrument_type")):
            continue
        try:
            require_usable(bundle, item)
        except MsgptError:
            continue
        eligible.append(item)
    yield Reading(n, len(eligible))
    if not eligible:
        raise ConfigError(
            f"No usable spectrum in {config.mgf} with FOLD in {list(config.folds)} and LICENSE in {config.licenses} "
            f"(adducts {', '.join(bundle.supported_adducts)}, formula and SMILES needed); check --folds/--licenses."
        )
    by_structure: dict[str, list[Spectrum]] = {}
    for s in eligible:
        by_structure.setdefault((s.inchikey or s.smiles)[:14], []).append(s)
    rng = np.random.default_rng(config.seed)
    structures = sorted(by_structure)
    order = rng.permutation(len(structures))
    n_val = min(config.val_spectra, max(len(structures) - 1, 0))
    val = [by_structure[structures[i]][rng.integers(len(by_structure[structures[i]]))] for i in order[:n_val]]
    pool = [s for i in order[n_val:] for s in by_structure[structures[i]]]
    take = len(pool) if config.max_spectra is None else min(config.max_spectra, len(pool))
    train = [pool[i] for i in rng.choice(len(pool), take, replace=False)]  # random order: a partial run is a sample
    return train, val


@lru_cache(maxsize=16384)
def _canonical_target(smiles: str, n_bits: int) -> tuple[str | None, np.ndarray] | str:
    """(SAFE string of the stereo-free canonical SMILES or None, its Morgan bits), or why the SMILES is unusable;
    cached: the spectra of one structure share it."""
    from training.data.corpus import Dropped, encode_safe

    mol = chem.mol_from_smiles(smiles)
    if mol is None:
        return "reference SMILES unparseable"
    chem.remove_stereo(mol)
    encoded = encode_safe(chem.canonical_smiles(mol))
    return None if isinstance(encoded, Dropped) else encoded, chem.morgan_bits(mol, n_bits=n_bits)


def prepare_example(bundle: ModelBundle, spectrum: Spectrum, split: str, config: AdaptConfig,
                    thresholds: np.ndarray, posterior: np.ndarray | None = None, amp=nullcontext) -> Example | str:
    """The :class:`Example` of one spectrum, or why it is dropped.

    ``posterior`` (an out-of-fold posterior, queried at ``thresholds``, its encoder's band) replaces
    the bundle encoder's. A train example's group comes from its frozen pool (``grouping`` pool) or
    from :func:`pool_hit_probability` (``expected``).
    """
    target = _canonical_target(spectrum.smiles, bundle.decoder.config.fp_bits)
    if isinstance(target, str):
        return target
    encoded, oracle = target
    if encoded is None:
        return "SAFE encoding failed"
    tokens = np.asarray(bundle.tokenizer.encode(encoded), np.int64)
    if np.any(tokens == bundle.tokenizer.unk_id):
        return "SAFE tokens outside the decoder's vocabulary"
    if len(tokens) > bundle.decoder.config.block_size:
        return "SAFE longer than the decoder's block_size"
    if posterior is None:
        session = SpectrumSession(bundle, spectrum)
        post = session.posterior
    else:
        post = np.asarray(posterior, np.float32)
    keep = np.flatnonzero(post > float(thresholds[0]))
    band = None if posterior is None else (float(thresholds[0]), float(thresholds[-1]))
    group = rank = hit_p = None
    if split == "train" and config.grouping == "pool":
        params = QueryParams(kappa_min=config.kappa_min, kappa_max=config.kappa_max, groups=config.groups,
                             samples_per_group=config.samples_per_group, seed=config.seed, use_adapter=False)
        result = run_to_end(session.run(params))
        coverage, rank = float(result.fidelity), result.reference_rank
        group = recoverability_group(rank is not None, coverage, config.coverage_threshold)
    else:
        coverage = chem.max_tanimoto(oracle, [q.bits for q in build_queries(post, thresholds)])
    example = Example(f"{Path(spectrum.source).name}#{spectrum.index}:{spectrum.id}", split, group, float(coverage),
                      rank, formula_vector(parse_formula(spectrum.formula)).astype(np.int64), tokens, oracle,
                      keep.astype(np.int64), post[keep].astype(np.float32), band)
    if split == "train" and config.grouping == "expected":
        hit_p = pool_hit_probability(bundle.decoder, example, thresholds, config, amp)
        group = recoverability_group(hit_p >= 0.5, coverage, config.coverage_threshold)
        example = replace(example, group=group, hit_p=hit_p)
    return example


def pool_hit_probability(decoder: nn.Module, example: Example, thresholds: np.ndarray, config: AdaptConfig,
                         amp=nullcontext) -> float:
    """P(the reference's SAFE is drawn at least once in the app's B = M x N pool), from forward passes.

    ``group_thresholds`` thresholds spread over the band each stand for B / group_thresholds draws;
    p_t is the probability that the sampler (T=1, top-k 50, top-p 0.95) writes exactly the reference's
    token sequence from query t. P = 1 - prod_t (1 - p_t)^(B / K). A lower bound: other SAFE spellings
    of the molecule count in the app too, and formula-constrained decoding only raises p_t.
    """
    ts = np.linspace(float(thresholds[0]), float(thresholds[-1]), config.group_thresholds)
    p = _sequence_probabilities(decoder, [(example, t) for t in ts], amp)["p"]
    draws = config.groups * config.samples_per_group / config.group_thresholds
    return float(1.0 - np.prod((1.0 - np.clip(p, 0.0, 1.0)) ** draws))


def prepare_examples(config: AdaptConfig, stop: threading.Event | None = None) -> Iterator:
    """Stage 1: select, compute posteriors and groups, append to ``examples.jsonl``; *returns* :class:`Prepared`.

    Resumes from the cache: spectra already in ``examples.jsonl`` are not computed again.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    bundle = load_bundle(config.bundle, device=config.device, use_adapter=False, precision=config.precision)
    thresholds = band_thresholds(bundle.calibration, config.kappa_min, config.kappa_max, config.groups)
    amp, _ = autocast(config.precision, bundle.device)
    oof = oof_rows = None
    if config.oof:
        oof = load_oof(config.oof, kappa_min=config.kappa_min, kappa_max=config.kappa_max, groups=config.groups)
        oof_rows = oof.row_of()
        if oof.posteriors.shape[1] != bundle.decoder.config.fp_bits:
            raise ConfigError(f"{config.oof}: posteriors over {oof.posteriors.shape[1]} bits, the decoder reads "
                              f"{bundle.decoder.config.fp_bits}; use the out-of-fold run of this model's encoder.")
    key = _examples_key(config, bundle)
    meta_path, cache = out / "examples_meta.json", out / "examples.jsonl"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    if meta and meta.get("key") != key:
        changed = sorted(k for k in key if meta.get("key", {}).get(k) != key[k])
        raise ConfigError(f"{out} holds examples made with other settings ({', '.join(changed)}); use a new --out.")
    done: dict[str, dict] = {}
    if cache.is_file():
        for line in cache.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                done[d["key"]] = d
            except (json.JSONDecodeError, KeyError):  # a line cut by a crash: computed again
                continue
    seconds = float(meta.get("seconds", 0.0))
    if not meta.get("complete"):
        train, val = yield from select_spectra(config, bundle)
        todo = [(s, "val") for s in val] + [(s, "train") for s in train]
        keys = [f"{Path(s.source).name}#{s.index}:{s.id}" for s, _ in todo]
        yield Selected(len(train), len(val), sum(k in done for k in keys))
        write_json_atomic(meta_path, {"key": key, "complete": False, "seconds": seconds})
        t0, n_pooled, pooled_s = time.perf_counter(), 0, 0.0
        with open(cache, "a", encoding="utf-8") as sink:
            for i, ((spectrum, split), k) in enumerate(zip(todo, keys)):
                if k in done:
                    continue
                if stop is not None and stop.is_set():
                    write_json_atomic(meta_path, {"key": key, "complete": False,
                                                  "seconds": seconds + time.perf_counter() - t0})
                    return None
                t1 = time.perf_counter()
                if oof is None:
                    ex = prepare_example(bundle, spectrum, split, config, thresholds, amp=amp)
                elif (row := oof_rows.get(spectrum.id)) is None:
                    ex = "no out-of-fold posterior"
                else:
                    ex = prepare_example(bundle, spectrum, split, config, oof.thresholds(row),
                                         oof.posteriors[row].astype(np.float32), amp)
                d = ex.to_json() if isinstance(ex, Example) else {"key": k, "split": split, "dropped": ex}
                sink.write(json.dumps(d) + "\n")
                sink.flush()
                done[k] = d
                if split == "train":
                    n_pooled, pooled_s = n_pooled + 1, pooled_s + time.perf_counter() - t1
                yield ExampleDone(i + 1, len(todo), d.get("group"), n_pooled / max(pooled_s, 1e-9))
        seconds += time.perf_counter() - t0
        write_json_atomic(meta_path, {"key": key, "complete": True, "seconds": seconds, "keys": keys})
        meta = json.loads(meta_path.read_text())
    keys = set(meta.get("keys", done))
    rows = [d for k, d in done.items() if k in keys]
    dropped = Counter(d["dropped"] for d in rows if "dropped" in d)
    examples = [Example.from_json(d) for d in rows if "dropped" not in d]
    return Prepared([e for e in examples if e.split == "train"], [e for e in examples if e.split == "val"],
                    float(thresholds[0]), float(thresholds[-1]), dict(dropped), seconds)


# -----------------------------------------------------------------------------------------------
# Objective


def collate_examples(examples: Sequence[Example], thresholds: Sequence[float], config) -> dict[str, torch.Tensor]:
    """Teacher-forcing tensors of ``examples``, each queried at its threshold: z_t = 1[pi > t]."""
    fp_bits, fp_mask, formula = collate_queries([e.query(t) for e, t in zip(examples, thresholds)],
                                                np.stack([e.formula for e in examples]), config.max_fp_tokens,
                                                config.fp_bits)
    T = max(len(e.tokens) for e in examples)
    seq = torch.full((len(examples), T), PAD_ID, dtype=torch.long)
    for r, e in enumerate(examples):
        seq[r, : len(e.tokens)] = torch.from_numpy(e.tokens)
    return {"idx": seq[:, :-1], "targets": seq[:, 1:], "fp_bits": fp_bits, "fp_mask": fp_mask, "formula": formula}


def forward_logits(decoder: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    """Teacher-forced logits (B, T, V) of a collated batch (LoRA layers of a peft model included)."""
    ctx, ctx_mask = decoder.encode_context(b["fp_bits"], b["fp_mask"], b["formula"])  # (B, L, C), (B, L)
    logits, _ = decoder(b["idx"], ctx, ctx_mask)
    return logits


def adaptation_loss(student: torch.Tensor, teacher: torch.Tensor, targets: torch.Tensor, ce_weight: torch.Tensor,
                    kl_weight: torch.Tensor, n_tokens: int | None = None) -> tuple[torch.Tensor, dict]:
    """sum over non-padding positions of (alpha_g CE + lambda_g KL(teacher || student)) / n_tokens.

    student, teacher (B, T, V) logits; targets (B, T) with PAD_ID as padding; ce_weight, kl_weight (B,)
    per example. ``n_tokens`` defaults to this batch's non-padding positions (give the whole
    optimizer batch's count when the batch runs in pieces). Also returns the unweighted CE and KL
    sums and the token count, for logging.
    """
    mask = targets != PAD_ID  # (B, T)
    logp = F.log_softmax(student.float(), dim=-1)  # (B, T, V)
    logq = F.log_softmax(teacher.float(), dim=-1)
    ce = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    kl = (logq.exp() * (logq - logp)).sum(-1)  # (B, T) forward KL, teacher to student
    per_token = ce_weight[:, None] * ce + kl_weight[:, None] * kl
    n = int(mask.sum()) if n_tokens is None else n_tokens
    loss = (per_token * mask).sum() / max(n, 1)
    parts = {"ce": float((ce.detach() * mask).sum()), "kl": float((kl.detach() * mask).sum()), "tokens": int(mask.sum())}
    return loss, parts


@torch.no_grad()
def _sequence_probabilities(decoder: nn.Module, rows: Sequence[tuple[Example, float]], amp=nullcontext,
                            micro_batch: int = 32, top_k: int = 50, top_p: float = 0.95) -> dict:
    """Teacher-forced pass over (example, threshold) rows: per row ``p``, the probability that the
    sampler (T=1, ``top_k``, ``top_p``) writes exactly the example's tokens; summed ``nll``, ``correct``
    (argmax = target) and ``count`` over all target tokens."""
    was_training = decoder.training
    decoder.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0].tokens))
    seq_p = np.zeros(len(rows))
    correct = count = 0
    nll = 0.0
    device = next(decoder.parameters()).device
    with torch.no_grad():
        for start in range(0, len(order), micro_batch):
            chunk = order[start : start + micro_batch]
            b = collate_examples([rows[i][0] for i in chunk], [rows[i][1] for i in chunk], decoder.config)
            b = {k: v.to(device) for k, v in b.items()}
            with amp():
                logits = forward_logits(decoder, b)
            logits = logits.float()
            targets, mask = b["targets"], b["targets"] != PAD_ID  # (B, T)
            logp = F.log_softmax(logits, dim=-1)
            nll -= float(logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)[mask].sum())
            correct += int(((logits.argmax(-1) == targets) & mask).sum())
            count += int(mask.sum())
            probs, ids = filter_probs(logits[mask], 1.0, top_k, top_p)  # (n, K): what the sampler draws from
            p = (probs * (ids == targets[mask][:, None])).sum(-1) / probs.sum(-1)  # (n,) 0 when filtered out
            row = torch.arange(len(chunk), device=device)[:, None].expand_as(mask)[mask]
            seq_logp = torch.zeros(len(chunk), dtype=torch.float64, device=device).index_add_(0, row, p.double().log())
            seq_p[chunk] = seq_logp.exp().cpu().numpy()
    decoder.train(was_training)
    return {"p": seq_p, "nll": nll, "correct": correct, "count": count}


def validate(decoder: nn.Module, examples: Sequence[Example], thresholds, amp,
             micro_batch: int = 32, top_k: int = 50, top_p: float = 0.95) -> dict:
    """Token accuracy, NLL per token and ``expected_share`` (module docstring) of ``examples`` x ``thresholds``.

    ``thresholds``: (K,) for every example, or (len(examples), K), each example's own."""
    thresholds = np.asarray(thresholds, np.float64)
    if thresholds.ndim == 1:
        thresholds = np.broadcast_to(thresholds, (len(examples), len(thresholds)))
    rows = [(e, float(t)) for e, ts in zip(examples, thresholds) for t in ts]
    r = _sequence_probabilities(decoder, rows, amp, micro_batch, top_k, top_p)
    n = max(len(rows), 1)
    return {"expected_share": float(r["p"].sum()) / n, "token_accuracy": r["correct"] / max(r["count"], 1),
            "nll": r["nll"] / max(r["count"], 1), "rows": len(rows)}


def make_trainer(decoder: ConditionalDecoder, config: AdaptConfig):
    """LoRA on ``decoder`` (frozen, modified in place; LoRA A initialised from ``config.seed``) and its AdamW."""
    torch.manual_seed(config.seed)
    model = attach_lora(decoder, config)
    optimizer = torch.optim.AdamW([p for _, p in trainable_parameters(model)], lr=config.lr,
                                  betas=(config.beta1, config.beta2), weight_decay=config.weight_decay)
    return model, optimizer


def train_step(model, optimizer, train: Sequence[Example], step: int, t_lo: float, t_hi: float,
               config: AdaptConfig, amp=nullcontext) -> dict:
    """Optimizer update ``step`` (0-based): its batch, thresholds and dropout are functions of (seed, step).

    The batch runs in pieces of ``micro_batch`` examples of similar length; each piece's loss is
    divided by the token count of the whole batch, so the gradient is the batch's. Returns the
    batch loss, the unweighted token-mean CE and KL, the learning rate and the gradient norm.
    """
    decoder = model.get_base_model()
    device = next(decoder.parameters()).device
    reseed(config.seed, 0, step)
    idx = batch_indices(config.seed, step, config.batch_size, len(train))
    bands = np.array([train[i].band_or(t_lo, t_hi) for i in idx])  # (B, 2): each example's own band
    ts = draw_thresholds(config.seed, step, len(idx), bands[:, 0], bands[:, 1])
    weights = torch.tensor([config.group_weights(train[i].group) for i in idx])  # (B, 2): alpha_g, lambda_g
    order = sorted(range(len(idx)), key=lambda j: len(train[idx[j]].tokens))
    n_tokens = sum(len(train[i].tokens) - 1 for i in idx)
    loss_sum = ce_sum = kl_sum = 0.0
    for start in range(0, len(order), config.micro_batch):
        rows = order[start : start + config.micro_batch]
        b = collate_examples([train[i] for i in idx[rows]], ts[rows], decoder.config)
        b = {k: v.to(device) for k, v in b.items()}
        decoder.eval()
        with torch.no_grad(), model.disable_adapter(), amp():
            teacher = forward_logits(decoder, b)  # the frozen model, without dropout
        decoder.train()
        with amp():
            student = forward_logits(decoder, b)
        w = weights[rows].to(device)
        loss, parts = adaptation_loss(student, teacher, b["targets"], w[:, 0], w[:, 1], n_tokens)
        loss.backward()
        loss_sum, ce_sum, kl_sum = loss_sum + loss.item(), ce_sum + parts["ce"], kl_sum + parts["kl"]
    params = [p for _, p in trainable_parameters(model)]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip or float("inf"))
    lr = lr_at(step, lr=config.lr, min_lr=config.min_lr, warmup_steps=config.warmup_steps, max_steps=config.steps)
    for g in optimizer.param_groups:
        g["lr"] = lr
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss": loss_sum, "ce": ce_sum / n_tokens, "kl": kl_sum / n_tokens, "lr": lr,
            "grad_norm": float(grad_norm)}


# -----------------------------------------------------------------------------------------------
# Training events


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


# -----------------------------------------------------------------------------------------------
# Training


def adapt(config: AdaptConfig, stop: threading.Event | None = None, prepared: Prepared | None = None,
          prepare_only: bool = False) -> Iterator:
    """Both stages; yields progress events (set ``stop`` to save and end at the next step or spectrum).

    Stage 1 ends with the :class:`Prepared` examples as an event; ``prepare_only`` stops there (train
    later with ``resume``). ``prepared`` skips stage 1 (tests). torch runs on ``config.threads``
    threads meanwhile.
    """
    with torch_threads(config.threads):
        out = Path(config.out)
        out.mkdir(parents=True, exist_ok=True)
        saved = out / "adapt_config.json"
        if saved.is_file():
            if not config.resume:
                raise ConfigError(f"{out} already holds an adaptation run; pass --resume to continue it or use a new --out.")
            _check_resumable(json.loads(saved.read_text()), config)
        write_json_atomic(saved, config.to_dict())
        if prepared is None:
            prepared = yield from prepare_examples(config, stop)
            if prepared is None:  # stopped
                yield Finished(0, "stopped", None, {}, "")
                return
            yield prepared
        if not prepare_only:
            yield from _train(config, prepared, stop or threading.Event())


def _check_resumable(saved: dict, config: AdaptConfig) -> None:
    now = config.to_dict()
    changed = sorted(k for k in now if k not in RESUMABLE_CHANGES and saved.get(k) != now[k])
    if changed:
        shown = ", ".join(f"`{k}` {saved.get(k)!r} -> {now[k]!r}" for k in changed)
        raise ConfigError(f"cannot resume exactly with changed settings ({shown}); use the saved ones or a new --out.")


def _train(config: AdaptConfig, prepared: Prepared, stop: threading.Event) -> Iterator:
    out = Path(config.out)
    if not prepared.train:
        raise ConfigError(f"No training example survived preparation (dropped: {prepared.dropped}); use more spectra.")
    bundle = load_bundle(config.bundle, device=config.device, use_adapter=False, precision="fp32")
    device = bundle.device
    amp, amp_dtype = autocast(config.precision, device)
    base = bundle.decoder
    targets = lora_targets(base, config.fp_targets)
    predicted = predicted_lora_parameters(base, targets, config.rank)
    model, optimizer = make_trainer(base, config)
    decoder = model.get_base_model()  # the ConditionalDecoder with LoRA layers inside
    named = trainable_parameters(model)
    names = [n for n, _ in named]
    train, val = prepared.train, prepared.val
    val_t = np.array([np.linspace(*e.band_or(prepared.t_lo, prepared.t_hi), config.val_thresholds) for e in val])
    mode = SELECT_METRICS[config.select_metric]

    state = {"step": 0, "best": None, "best_step": None, "best_metrics": {}, "train_seconds": 0.0,
             "data": {"train": len(train), "val": len(val), "groups": dict(Counter(e.group for e in train)),
                      "band_thresholds": [prepared.t_lo, prepared.t_hi], "dropped": prepared.dropped}}
    ckpt = out / "checkpoint"
    resumed = (ckpt / "state.json").is_file()
    if resumed:
        state = _load_checkpoint(ckpt, named, optimizer, names)
    elif (out / "adapter").exists():
        shutil.rmtree(out / "adapter")  # an adapter without a checkpoint is from an abandoned start
    metrics_path = out / "metrics.jsonl"
    truncate_metrics(metrics_path, state["step"])
    n_frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    yield Started(state["step"], config.steps, len(train), len(val), dict(Counter(e.group for e in train)),
                  len(targets), sum(p.numel() for _, p in named), predicted, n_frozen, str(device),
                  "bf16 autocast" if amp_dtype else "fp32", resumed)

    session_start, last_save = time.monotonic(), time.monotonic()
    session_examples, session_seconds = 0, 0.0

    def elapsed() -> float:
        return state["train_seconds"] + time.monotonic() - session_start

    def checkpoint() -> Iterator[CheckpointSaved]:
        nonlocal last_save
        path = _save_checkpoint(ckpt, named, optimizer, names, {**state, "train_seconds": elapsed()})
        last_save = time.monotonic()
        log_metrics(metrics_path, {"kind": "checkpoint", "step": state["step"]})
        yield CheckpointSaved(state["step"], str(path))

    def evaluation() -> Iterator[Validated]:
        m = validate(decoder, val, val_t, amp, micro_batch=max(config.micro_batch, 32)) if val else {}
        value = m.get(config.select_metric)
        improved = value is not None and (state["best"] is None or (value > state["best"] if mode == "max"
                                                                      else value < state["best"]))
        if improved or (not val and state["step"] == config.steps):
            state.update(best=value, best_step=state["step"], best_metrics=m)
            save_adapter(model, out)
        log_metrics(metrics_path, {"kind": "val", "step": state["step"], **m, "improved": improved})
        yield Validated(state["step"], m, improved)

    if state["step"] == 0 and not resumed:
        yield from evaluation()  # the frozen model (the adapter starts as B = 0)
    model.train()
    reason = "completed"
    while state["step"] < config.steps:
        if stop.is_set():
            reason = "stopped"
            break
        if config.max_minutes is not None and elapsed() >= 60 * config.max_minutes:
            reason = "time_limit"
            break
        t0 = time.perf_counter()
        record = train_step(model, optimizer, train, state["step"], prepared.t_lo, prepared.t_hi, config, amp)
        state["step"] += 1
        seconds = time.perf_counter() - t0
        session_examples, session_seconds = session_examples + config.batch_size, session_seconds + seconds
        record["examples_per_s"] = session_examples / session_seconds
        log_metrics(metrics_path, {"kind": "train", "step": state["step"], **record})
        yield StepDone(state["step"], **record)
        last = state["step"] == config.steps
        if state["step"] % config.eval_every == 0 or last:
            yield from evaluation()
            yield from checkpoint()
        elif config.checkpoint_minutes and time.monotonic() - last_save >= 60 * config.checkpoint_minutes:
            yield from checkpoint()
    if reason != "completed" and (not (ckpt / "state.json").is_file() or _saved_step(ckpt) != state["step"]):
        yield from checkpoint()
    if not (out / "adapter" / "adapter_model.safetensors").is_file():
        save_adapter(model, out)  # no validation set: the last adapter
    yield Finished(state["step"], reason, state["best_step"], state["best_metrics"], str(out / "adapter"))


# -- checkpoints (safetensors + JSON, no pickle)
def _save_checkpoint(path: Path, named, optimizer, names: list[str], state: dict) -> Path:
    from safetensors.torch import save_file

    with atomic_folder(path) as tmp:
        save_file({n: p.detach().cpu().contiguous().clone() for n, p in named}, str(tmp / "lora.safetensors"))
        tensors, groups = optimizer_tensors(optimizer, names)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        write_json_atomic(tmp / "state.json", {**state, "optimizer_param_groups": groups})
    return path


def _saved_step(path: Path) -> int:
    return int(json.loads((path / "state.json").read_text())["step"])


def _load_checkpoint(path: Path, named, optimizer, names: list[str]) -> dict:
    from safetensors.torch import load_file

    state = json.loads((path / "state.json").read_text())
    weights = load_file(str(path / "lora.safetensors"))
    if set(weights) != set(names):
        raise BundleError(f"{path}: the saved LoRA weights are not this adapter's (other placement or rank?).")
    with torch.no_grad():
        for n, p in named:
            p.copy_(weights[n])
    load_optimizer_state(optimizer, load_file(str(path / "optimizer.safetensors")), state.pop("optimizer_param_groups"),
                         names)
    return state


# -----------------------------------------------------------------------------------------------
# The adapted bundle


def write_adapted_bundle(base: str | Path, adapter: str | Path, dest: str | Path, name: str | None = None,
                         info: dict | None = None) -> Path:
    """Copy the base bundle to ``dest`` with ``adapter`` as its ``adapter/``; checks that it loads, merged."""
    base, adapter, dest = Path(base), Path(adapter), Path(dest)
    if not (adapter / "adapter_model.safetensors").is_file():
        raise ConfigError(f"{adapter} holds no adapter_model.safetensors; finish the adaptation run first.")
    if dest.exists() and any(dest.iterdir()):
        raise ConfigError(f"{dest} exists and is not empty; give a new folder for the adapted bundle.")
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(base, tmp, ignore=shutil.ignore_patterns("adapter", ".adapter.tmp"))
    shutil.copytree(adapter, tmp / "adapter")
    config = json.loads((tmp / "config.json").read_text())
    config["name"] = name or f"{config.get('name') or base.name}-pa"
    config["adapter"] = {"method": "posterior-aligned adaptation (LoRA)", "base_bundle": config.get("name"),
                         **(info or {})}
    config["adapter"]["base_bundle"] = json.loads((base / "config.json").read_text()).get("name", base.name)
    (tmp / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    bundle = load_bundle(tmp, device="cpu", precision="fp32")
    if not bundle.has_adapter:
        raise BundleError(f"{tmp}: the adapted bundle does not load its adapter.")
    if dest.exists():
        dest.rmdir()
    tmp.rename(dest)
    return dest


# -----------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.decoder.adapt", description=__doc__.split("\n\n")[0])
    AdaptConfig.add_arguments(p, skip={"exclude_unit_resolution"}, given_only=True)
    p.add_argument("--keep-unit-resolution", dest="exclude_unit_resolution", action="store_false", default=None,
                   help="keep QQ / ion-trap spectra")
    p.add_argument("--all-spectra", action="store_true", help="no subsample (same as --max-spectra unset)")
    p.add_argument("--prepare-only", action="store_true", help="stop after stage 1 (examples and groups)")
    p.add_argument("--write-bundle", metavar="DIR", help="write base bundle + the run's adapter to DIR (after training)")
    p.add_argument("--bundle-name", help="name of the written bundle (default: base name + '-pa')")
    p.add_argument("--adapter-step", choices=("selected", "last"), default="selected",
                   help="with --write-bundle: the selected checkpoint's adapter (default) or the last step's, "
                        "to measure what training did when selection kept an earlier step")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    args = vars(_parser().parse_args(argv))
    all_spectra, prepare_only = args.pop("all_spectra"), args.pop("prepare_only")
    write_to, bundle_name, adapter_step = args.pop("write_bundle"), args.pop("bundle_name"), args.pop("adapter_step")
    try:
        given = {k: v for k, v in args.items() if v is not None}
        if "licenses" in given and [s.lower() for s in given["licenses"]] == ["all"]:
            given["licenses"] = None
        if all_spectra:
            given["max_spectra"] = None
        saved = Path(args["out"] or "") / "adapt_config.json"
        base = json.loads(saved.read_text()) if saved.is_file() and (args["resume"] or set(given) <= {"out"}) else {}
        config = AdaptConfig.from_dict({**base, **given})
        state = Path(config.out) / "checkpoint" / "state.json"
        saved_step = _saved_step(state.parent) if state.is_file() else 0
        # a finished run, or a stopped one named by --out alone (no --resume): write its bundle as it stands
        as_it_stands = state.is_file() and not args["resume"] and set(given) <= {"out"}
        if write_to and (saved_step >= config.steps or as_it_stands) and not prepare_only:
            if saved_step < config.steps:
                print(f"note: the run stopped at step {saved_step} of {config.steps}; writing its selected adapter "
                      f"(continue it with --resume)")
            print(f"wrote {_write_bundle(config, write_to, bundle_name, adapter_step)}")
            return 0
    except (ConfigError, BundleError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    bar = None
    try:
        with stop_on_signals(threading.Event()) as stop:
            for event in adapt(config, stop, prepare_only=prepare_only):
                if isinstance(event, Reading):
                    print(f"read {event.records:,} records, {event.eligible:,} eligible", flush=True)
                elif isinstance(event, Selected):
                    print(f"{event.n_train} training spectra (to group) + {event.n_val} held-out; "
                          f"{event.n_done} already cached", flush=True)
                    bar = tqdm(total=event.n_train + event.n_val, initial=event.n_done, unit="spectrum")
                elif isinstance(event, ExampleDone):
                    bar.update(1)
                    bar.set_postfix(spectra_s=f"{event.spectra_per_s:.2f}", refresh=False)
                elif isinstance(event, Prepared):
                    if bar is not None:
                        bar.close()
                    bar = None
                    print(f"examples: {len(event.train)} training {dict(Counter(e.group for e in event.train))}, "
                          f"{len(event.val)} held-out; dropped {event.dropped or 'none'}; groups took "
                          f"{event.seconds:.0f} s", flush=True)
                elif isinstance(event, Started):
                    if bar is not None:
                        bar.close()
                    print(_describe_start(event), flush=True)
                    bar = tqdm(total=event.steps, initial=event.step, unit="step")
                elif isinstance(event, StepDone):
                    bar.update(1)
                    bar.set_postfix(loss=f"{event.loss:.4f}", ce=f"{event.ce:.3f}", kl=f"{event.kl:.4f}",
                                    ex_s=f"{event.examples_per_s:.1f}", refresh=False)
                elif isinstance(event, Validated):
                    m = event.metrics
                    text = (f"step {event.step}: expected share {m.get('expected_share', float('nan')):.5f}, token "
                            f"accuracy {m.get('token_accuracy', float('nan')):.4f}, nll {m.get('nll', float('nan')):.4f}"
                            + (" *" if event.improved else ""))
                    (bar.write if bar is not None else print)(text)
                elif isinstance(event, Finished):
                    if bar is not None:
                        bar.close()
                    if event.reason == "stopped":
                        print(f"stopped at step {event.step}; continue with the same --out and --resume")
                        return 130
                    print(f"{event.reason} at step {event.step}; selected step {event.best_step} "
                          f"({json.dumps(event.best)}); adapter in {event.adapter}")
                    if write_to:
                        print(f"wrote {_write_bundle(config, write_to, bundle_name, adapter_step)}")
    except (ConfigError, BundleError) as e:
        if bar is not None:
            bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _write_bundle(config: AdaptConfig, dest: str, name: str | None, adapter_step: str = "selected") -> Path:
    out = Path(config.out)
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    info = {"run": str(out), "steps": state["step"], "selected_step": state.get("best_step"),
            "selection": {config.select_metric: state.get("best")}, "rank": config.rank, "alpha": config.alpha,
            "data": state.get("data"), "mgf": Path(config.mgf).name, "folds": list(config.folds)}
    adapter = out / "adapter"
    if adapter_step == "last":
        adapter = export_last_adapter(out)
        info["adapter_step"] = state["step"]
    return write_adapted_bundle(config.bundle, adapter, dest, name, info)


def export_last_adapter(out: Path) -> Path:
    """``out/adapter_last/``: the LoRA weights of the run's last training checkpoint as a peft adapter folder
    (the same ``adapter_config.json`` as the selected adapter's; peft's saved names lack the ``.default``
    adapter name that the live model's parameters carry)."""
    from safetensors.torch import load_file, save_file

    weights = load_file(str(out / "checkpoint" / "lora.safetensors"))
    dest = out / "adapter_last"
    dest.mkdir(exist_ok=True)
    save_file({re.sub(r"\.(lora_[AB])\.default\.", r".\1.", k): v for k, v in weights.items()},
              str(dest / "adapter_model.safetensors"))
    shutil.copy2(out / "adapter" / "adapter_config.json", dest / "adapter_config.json")
    return dest


def _describe_start(e: Started) -> str:
    lines = [
        (f"LoRA on {e.targets} linear layers: {e.trainable:,} trainable parameters (placement predicts "
         f"{e.predicted:,}), {e.frozen:,} frozen; {e.device}, {e.precision}"),
        f"{e.n_train} training examples {e.group_counts}, {e.n_val} held-out; {e.steps} steps",
    ]
    if e.resumed:
        lines.append(f"resumed at step {e.step}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
