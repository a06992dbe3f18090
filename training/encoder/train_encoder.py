"""Train the spectrum encoder: annotated peaks -> posterior over 4096 Morgan bits.

Run ``python -m training.encoder.train_encoder --mgf spectra.mgf.gz --out DIR [--preset small]``; or call
:func:`train_encoder`, a generator of progress events (stop iterating, or set ``stop``, to cancel; a
checkpoint is saved and ``--resume`` continues from it).

Data (:mod:`training.data.spectra`): ``FOLD=train`` records for training, ``FOLD=val`` for early stopping
and the reported metrics; positive-mode ``[M+H]+`` / ``[M+Na]+`` with a formula and a parseable
SMILES, licences ``CC0, CC BY, CC BY-SA, dl-de/by-2-0`` by default (what the shipped model may use),
unit-resolution instruments excluded; precursor tolerance 10 ppm / 0.01 Da when reading, peak
annotation with the encoder config's ``tol_ppm`` / ``tol_da`` (10 ppm, 2 mDa floor). Targets: Morgan
radius-2 bits of the stereo-free reference structure.

Training: ``bce_weight`` * BCE over bits (mean) + ``cosine_weight`` * (1 - cos(sigmoid(logits), target));
with the growing head (encoder ``grow_levels``) plus ``level_loss_weight`` times the mean loss of the
folded levels; optional augmentation of the training batches (``peak_dropout``, ``intensity_noise``,
seeded by step); optional EMA of the weights (``ema_decay``), which is then what is evaluated and kept;
AdamW (weight decay on matrices only, as nanoGPT); linear warm-up then cosine decay to
``min_lr_ratio * lr`` over ``epochs``; batches of ``batch_size`` spectra grouped by token count
(:func:`length_grouped_batches`); gradients clipped at ``grad_clip``. After every epoch the model is
evaluated on the validation fold; the best weights by ``select_metric`` (default micro AP: the quality
of a single global threshold on the posterior, which is how density-band querying uses it) are kept,
and training stops after ``patience`` evaluations without improvement, after ``epochs``, or when
``max_minutes`` of training time have been spent.

Without a validation fold (``val_folds=()``, ``--no-val``) nothing is evaluated or selected: the last
weights are kept, and ``stop_after_epochs`` stops at a fixed epoch of the ``epochs``-long cosine (to
repeat a run whose selection on val kept an earlier epoch). Cross-fitting: ``cv_folds=K, cv_fold=k``
splits the selected training spectra into K folds by structure (:func:`training.data.spectra.structure_folds`,
seeded by ``cv_seed``) and trains on the other K-1 (``python -m training.calibration.oof_posteriors`` runs all K).

Output directory::

    encoder.safetensors, encoder_config.json   best weights (what engine.model.bundle.save_bundle takes)
    metrics.json                               validation metrics of those weights, history, throughput
    train_config.json                          this run's EncoderTrainConfig
    best.safetensors                           best weights so far (during training)
    checkpoint/                                the latest training state, for --resume:
        model.safetensors  optimizer.safetensors  rng.safetensors  state.json  [ema.safetensors]

Checkpoints hold no pickle: the AdamW state tensors go to ``optimizer.safetensors`` under
``state.<param index>.<name>``, its hyper-parameters to ``state.json``, the torch RNG state (dropout)
to ``rng.safetensors``; the data order of every epoch is a function of ``(seed, epoch)``. Resuming
therefore reproduces the uninterrupted run exactly (on the same machine and thread count).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from engine.errors import ConfigError, InputFileError, MsgptError
from engine.model.encoder import ENCODER_PRESETS, EncoderConfig, SpectrumEncoder, fold_bits
from engine.spectra.annotate import get_ion_type

from training.core.checkpoint import atomic_folder, complete_folder, module_weights, write_json_atomic
from training.encoder.forward import load_simulated
from training.core.loop import TrainingConfig, int_at_least, lr_at, stop_on_signals, torch_threads
from training.core.metrics import bit_metrics, density_matched_threshold, mean_tanimoto
from training.data.spectra import (
    DEFAULT_ADDUCTS,
    SHIPPABLE_LICENSES,
    CacheHit,
    FeatureSettings,
    LabelledSpectra,
    ReadProgress,
    describe_selection,
    iter_load_labelled_spectra,
    structure_folds,
)
from training.encoder.substructures import FragmentLabels, LabelProgress, SubstructureSettings, concatenate_labels, fragment_labels

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT_VERSION = 1
SELECT_METRICS = {"ap_micro": "max", "auroc_micro": "max", "tanimoto": "max", "tanimoto_density": "max", "bce": "min"}
# Fields that may differ between a run and its resumption (they do not change what is computed).
_RESUMABLE_CHANGES = frozenset(
    {"resume", "max_minutes", "max_steps", "checkpoint_minutes", "checkpoint_every_steps", "cache_dir", "threads"}
)


@dataclass
class EncoderTrainConfig(TrainingConfig):
    mgf: str = field(metadata={"help": "Labelled MGF (FOLD, LICENSE, SMILES, FORMULA per record)."})
    out_dir: str = field(metadata={"help": "Output directory (created; holds checkpoints too)."})
    preset: str = field(default="small", metadata={"help": "Encoder preset of engine.model.encoder.ENCODER_PRESETS."})
    encoder: dict = field(default_factory=dict, metadata={"help": "EncoderConfig fields overriding the preset."})
    licenses: tuple[str, ...] | None = field(
        default=SHIPPABLE_LICENSES, metadata={"help": "LICENSE values to train on; None = all."}
    )
    exclude_unit_resolution: bool = field(default=True, metadata={"help": "Drop QQ / ion-trap spectra."})
    adducts: tuple[str, ...] = field(
        default=DEFAULT_ADDUCTS, metadata={"help": "Precursor ion types to train on, e.g. [M+H]+ [M+Na]+ [M-H]-."}
    )
    precursor_tol_ppm: float = field(default=10.0, metadata={"help": "Precursor check when reading (ppm)."})
    precursor_tol_da: float = field(default=0.01, metadata={"help": "Precursor check floor (Da)."})
    min_annotated_peaks: int = field(default=0, metadata={"help": "Drop spectra with fewer annotated peaks."})
    train_folds: tuple[str, ...] = field(default=("train",), metadata={"help": "FOLD values to train on."})
    val_folds: tuple[str, ...] = field(default=("val",), metadata={"help": "FOLD values for early stopping."})
    max_train_spectra: int | None = field(default=None, metadata={"help": "Random subset for quick runs."})
    cv_folds: int | None = field(
        default=None, metadata={"help": "Split the training structures into this many folds (cross-fitting)."}
    )
    cv_fold: int | None = field(
        default=None, metadata={"help": "With cv_folds: the fold (0-based) whose structures are left out of training."}
    )
    cv_seed: int = field(default=0, metadata={"help": "Seed of the structure-to-fold assignment (cv_folds)."})
    batch_size: int = field(default=64, metadata={"help": "Spectra per batch."})
    bucket_batches: int = field(default=50, metadata={"help": "Batches per length bucket (sorted by tokens)."})
    lr: float = field(default=5e-4, metadata={"help": "Peak learning rate of AdamW."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (matrices only)."})
    warmup_steps: int = field(default=300, metadata={"help": "Linear warm-up steps."})
    min_lr_ratio: float = field(default=0.05, metadata={"help": "Final learning rate of the cosine, relative to lr."})
    epochs: int = field(default=30, metadata={"help": "Epochs: the cosine horizon and the maximum."})
    stop_after_epochs: int | None = field(
        default=None, metadata={"help": "Stop after this many epochs (the cosine still spans `epochs`); None = epochs."}
    )
    grad_clip: float = field(default=1.0, metadata={"help": "Gradient norm clip; 0 = off."})
    bce_weight: float = field(default=1.0, metadata={"help": "Weight of the per-bit BCE loss term."})
    cosine_weight: float = field(default=0.0, metadata={"help": "Weight of the cosine-similarity loss term."})
    level_loss_weight: float = field(
        default=0.5, metadata={"help": "Growing head (encoder grow_levels): weight of the mean loss of the folded levels."}
    )
    ema_decay: float | None = field(
        default=None, metadata={"help": "Keep an exponential moving average of the weights (e.g. 0.995); it is what is "
                                        "evaluated, selected and saved. None = off."}
    )
    peak_dropout: float = field(
        default=0.0, metadata={"help": "Augmentation: probability of hiding each peak token of a training spectrum."}
    )
    intensity_noise: float = field(
        default=0.0, metadata={"help": "Augmentation: sigma of log-normal noise on peak intensities (renormalised)."}
    )
    substructure_weight: float = field(
        default=0.0,
        metadata={"help": "Weight of MIST's substructure task: each labelled peak token predicts its fragment's "
                          "fingerprint (training.encoder.substructures; needs encoder fragment_bits > 0). 0 = off."},
    )
    substructure_max_breaks: int = field(
        default=3, metadata={"help": "Substructure task: bond cuts of the fragments peaks are matched to (1-3)."}
    )
    simulated: str | None = field(
        default=None,
        metadata={"help": "Simulated spectra (.npz of `python -m training.encoder.forward simulate`) added to the training "
                          "spectra, with their substructure labels; their structures must not be in the val folds."},
    )
    select_metric: str = field(
        default="ap_micro", metadata={"help": f"Validation metric for early stopping: {', '.join(SELECT_METRICS)}."}
    )
    patience: int = field(default=4, metadata={"help": "Evaluations without improvement before stopping."})
    max_minutes: float | None = field(default=None, metadata={"help": "Training time budget (all sessions)."})
    max_steps: int | None = field(default=None, metadata={"help": "Stop after this many steps (tests, probes)."})
    checkpoint_minutes: float = field(default=5.0, metadata={"help": "Minutes between checkpoints."})
    checkpoint_every_steps: int | None = field(default=None, metadata={"help": "Also checkpoint every N steps."})
    eval_batch_size: int = field(default=256, metadata={"help": "Spectra per batch when predicting."})
    seed: int = field(default=0, metadata={"help": "Seed of initialisation, data order and dropout."})
    threads: int = field(default=1, metadata={"help": "torch CPU threads (one is fastest for this model)."})
    cache_dir: str | None = field(default=None, metadata={"help": "Labelled-spectra cache folder."})
    resume: bool = field(default=False, metadata={"help": "Continue from out_dir/checkpoint."})

    def __post_init__(self) -> None:
        if self.preset not in ENCODER_PRESETS:
            raise ConfigError(f"`preset` {self.preset!r} is unknown; choose one of {', '.join(ENCODER_PRESETS)}.")
        self.licenses = None if self.licenses is None else tuple(self.licenses)
        self.train_folds, self.val_folds = tuple(self.train_folds), tuple(self.val_folds)
        try:
            self.adducts = tuple(dict.fromkeys(get_ion_type(a).name for a in self.adducts))
        except MsgptError as e:
            raise ConfigError(f"`adducts` {list(self.adducts)!r}: {e}") from e
        if not self.adducts:
            raise ConfigError("`adducts` is empty; give at least one ion type, e.g. [M+H]+.")
        self.encoder = dict(self.encoder)
        self.require(("batch_size", "bucket_batches", "epochs", "patience", "eval_batch_size", "threads"),
                     int_at_least(1), "a positive integer")
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1 and self.weight_decay >= 0 and self.grad_clip >= 0):
            raise ConfigError(
                f"`lr` must be > 0, `min_lr_ratio` in [0, 1], `weight_decay` and `grad_clip` >= 0; got {self.lr}, "
                f"{self.min_lr_ratio}, {self.weight_decay}, {self.grad_clip}."
            )
        if min(self.warmup_steps, self.bce_weight, self.cosine_weight, self.level_loss_weight,
               self.intensity_noise, self.min_annotated_peaks) < 0:  # fmt: skip
            raise ConfigError(
                "`warmup_steps`, `bce_weight`, `cosine_weight`, `level_loss_weight`, `intensity_noise` and "
                "`min_annotated_peaks` must be >= 0."
            )
        if not (self.substructure_weight >= 0 and self.substructure_max_breaks in (1, 2, 3)):
            raise ConfigError(f"`substructure_weight` must be >= 0 and `substructure_max_breaks` 1, 2 or 3; got "
                              f"{self.substructure_weight!r} and {self.substructure_max_breaks!r}.")
        if self.substructure_weight and not self.encoder_config().fragment_bits:
            raise ConfigError("`substructure_weight` > 0 needs a fragment head: set encoder fragment_bits (e.g. 512; "
                              "--fragment-bits on the command line).")
        if self.bce_weight == 0 and self.cosine_weight == 0:
            raise ConfigError("`bce_weight` and `cosine_weight` are both 0: there is nothing to train; set one > 0.")
        if not 0 <= self.peak_dropout < 1:
            raise ConfigError(f"`peak_dropout` must be in [0, 1), got {self.peak_dropout!r}.")
        if self.ema_decay is not None and not 0 < self.ema_decay < 1:
            raise ConfigError(f"`ema_decay` must be in (0, 1) (typically 0.99-0.999) or None, got {self.ema_decay!r}.")
        if self.select_metric not in SELECT_METRICS:
            raise ConfigError(
                f"`select_metric` {self.select_metric!r} is unknown; choose one of {', '.join(SELECT_METRICS)}."
            )
        self.require(("max_minutes", "max_steps", "checkpoint_every_steps", "max_train_spectra", "stop_after_epochs"),
                     lambda v: v is None or v > 0, "positive or None")
        if self.stop_after_epochs is not None and self.stop_after_epochs > self.epochs:
            raise ConfigError(
                f"`stop_after_epochs` ({self.stop_after_epochs}) must not exceed `epochs` ({self.epochs})."
            )
        if (self.cv_folds is None) != (self.cv_fold is None):
            raise ConfigError("`cv_folds` and `cv_fold` go together: give both (cross-fitting) or neither.")
        if self.cv_folds is not None and not (
            isinstance(self.cv_folds, int) and self.cv_folds >= 2 and isinstance(self.cv_fold, int)
            and 0 <= self.cv_fold < self.cv_folds
        ):  # fmt: skip
            raise ConfigError(
                f"`cv_folds` must be an integer >= 2 and `cv_fold` one of 0..cv_folds-1, got {self.cv_folds!r} "
                f"and {self.cv_fold!r}."
            )
        self.encoder_config()  # fail now on bad encoder overrides

    def encoder_config(self) -> EncoderConfig:
        return EncoderConfig.from_preset(self.preset, **self.encoder)

    def feature_settings(self) -> FeatureSettings:
        return FeatureSettings.for_encoder(
            self.encoder_config(), precursor_tol_ppm=self.precursor_tol_ppm, precursor_tol_da=self.precursor_tol_da,
            adducts=self.adducts,
        )


# ----------------------------------------------------------------------------------------------
# Progress events


@dataclass(frozen=True)
class DataReady:
    n_train: int
    n_val: int
    steps_per_epoch: int
    train: dict
    val: dict


@dataclass(frozen=True)
class Resumed:
    step: int
    epoch: int
    batch: int


@dataclass(frozen=True)
class StepDone:
    step: int  # steps done in all, this one included
    epoch: int  # 0-based
    batch: int  # batches done in this epoch
    n_batches: int
    loss: float
    lr: float
    spectra_per_s: float  # training throughput of this session so far


@dataclass(frozen=True)
class Evaluated:
    step: int
    epoch: int
    metrics: dict
    improved: bool
    best: float


@dataclass(frozen=True)
class CheckpointSaved:
    step: int
    path: str


@dataclass(frozen=True)
class TrainingStopped:
    """Stopped on request; the checkpoint lets ``resume`` continue."""

    step: int
    checkpoint: str


@dataclass(frozen=True)
class TrainingFinished:
    reason: str  # "early_stopping", "epochs", "time_limit", "max_steps"
    out_dir: str
    metrics: dict  # validation metrics of the kept weights


Event = (
    ReadProgress | CacheHit | DataReady | Resumed | StepDone | Evaluated | CheckpointSaved | TrainingStopped
    | TrainingFinished
)


# ----------------------------------------------------------------------------------------------
# Pieces


def length_grouped_batches(
    n_tokens: np.ndarray, batch_size: int, *, seed: int, epoch: int, bucket_batches: int = 50
) -> list[np.ndarray]:
    """One epoch of batches of similar token counts (indices into ``n_tokens``).

    The records are shuffled (``default_rng([seed, epoch])``), cut into buckets of
    ``bucket_batches * batch_size``, each bucket is sorted by token count and cut into batches, and the
    batch order is shuffled. Random batches would be padded to the longest of 64 spectra, nearly always
    the 61-token maximum (the median spectrum has ~16); sorted buckets pad little and the pairwise
    attention bias costs ``P^2``. Every record is in exactly one batch (the last of a bucket may be short).
    """
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(len(n_tokens))
    size = batch_size * bucket_batches
    batches: list[np.ndarray] = []
    for start in range(0, len(perm), size):
        bucket = perm[start : start + size]
        bucket = bucket[np.argsort(n_tokens[bucket], kind="stable")]
        batches.extend(bucket[i : i + batch_size] for i in range(0, len(bucket), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def encoder_loss(
    logits: torch.Tensor, targets: torch.Tensor, cosine_weight: float = 0.0, bce_weight: float = 1.0
) -> torch.Tensor:
    """``bce_weight`` * mean BCE over bits + ``cosine_weight`` * mean ``1 - cos(sigmoid(logits), targets)``.

    The cosine term (used by the structure-disjoint re-tuning of MIST) rewards getting a spectrum's set
    of bits right as a whole rather than each bit's marginal.
    """
    loss = logits.new_zeros(())
    if bce_weight:
        loss = loss + bce_weight * F.binary_cross_entropy_with_logits(logits, targets)  # (B, bits) -> scalar
    if cosine_weight:
        cos = F.cosine_similarity(torch.sigmoid(logits), targets, dim=-1)  # (B,)
        loss = loss + cosine_weight * (1.0 - cos).mean()
    return loss


def levels_loss(levels: Sequence[torch.Tensor], targets: torch.Tensor, config: EncoderTrainConfig) -> torch.Tensor:
    """:func:`encoder_loss` of the full fingerprint (the last level) plus ``level_loss_weight`` times the mean
    loss of the folded levels of the growing head, each against the targets folded to its length."""
    loss = encoder_loss(levels[-1], targets, config.cosine_weight, config.bce_weight)
    if len(levels) > 1 and config.level_loss_weight:
        coarse = [encoder_loss(lv, fold_bits(targets, lv.shape[-1]), config.cosine_weight, config.bce_weight)
                  for lv in levels[:-1]]  # fmt: skip
        loss = loss + config.level_loss_weight * torch.stack(coarse).mean()
    return loss


def augment_batch(
    batch: dict[str, torch.Tensor], generator: torch.Generator, *, peak_dropout: float = 0.0,
    intensity_noise: float = 0.0,
) -> dict[str, torch.Tensor]:
    """A perturbed copy of a training batch (the root token is never touched).

    ``peak_dropout``: each peak token is hidden (masked) with this probability, as if the peak had been
    below the noise level. ``intensity_noise``: peak intensities (``sqrt`` of relative intensity) are
    multiplied by ``exp(sigma * N(0, 1))`` and divided again by the spectrum's largest peak.
    """
    out = dict(batch)
    mask = batch["mask"]  # (B, P)
    peaks = mask.clone()
    peaks[:, 0] = False  # (B, P) real peak tokens
    if peak_dropout:
        keep = torch.rand(mask.shape, generator=generator) >= peak_dropout  # (B, P)
        out["mask"] = mask & (keep | ~peaks)
    if intensity_noise:
        noisy = batch["intensities"] * torch.exp(intensity_noise * torch.randn(mask.shape, generator=generator))
        noisy = torch.where(peaks, noisy, torch.zeros_like(noisy))  # (B, P)
        top = noisy.amax(dim=1, keepdim=True).clamp_min(1e-12)  # (B, 1)
        out["intensities"] = torch.where(peaks, noisy / top, batch["intensities"])
    return out


def make_optimizer(model: torch.nn.Module, config: EncoderTrainConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.999))


@torch.no_grad()
def predict_posteriors(model: SpectrumEncoder, data: LabelledSpectra, batch_size: int = 256) -> np.ndarray:
    """Posteriors ``float32 (len(data), fp_bits)`` in eval mode (batches sorted by length, rows in data order)."""
    was_training = model.training
    model.eval()
    out = np.zeros((len(data), model.config.fp_bits), dtype=np.float32)
    order = np.argsort(data.n_tokens, kind="stable")
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch, _ = data.batch(idx)
        out[idx] = model.predict_proba(batch).numpy()
    model.train(was_training)
    return out


def evaluate(posteriors: np.ndarray, data: LabelledSpectra, *, macro: bool = False) -> dict[str, float]:
    """Validation metrics: :func:`training.core.metrics.bit_metrics` at 0.5, ``bce``, and ``tanimoto_density``,
    the mean Tanimoto at the global threshold that gives as many bits as the truth has (κ = 1 measured on
    these spectra: comparable between losses that shift the posterior, such as the cosine term)."""
    targets = data.targets(np.arange(len(data)))
    p = np.clip(posteriors.astype(np.float64), 1e-7, 1 - 1e-7)
    bce = float(-(targets * np.log(p) + (1 - targets) * np.log1p(-p)).mean())
    t_density = density_matched_threshold(posteriors, float(data.n_true_bits.mean()))
    return {
        "bce": bce,
        **bit_metrics(posteriors, targets, 0.5, macro=macro),
        "tanimoto_density": mean_tanimoto(posteriors, targets, t_density),
        "threshold_density": t_density,
    }


def _better(value: float, best: float | None, mode: str) -> bool:
    if best is None or math.isnan(best):
        return not math.isnan(value)
    return value > best if mode == "max" else value < best


# ----------------------------------------------------------------------------------------------
# Checkpoints (safetensors + JSON, no pickle)


def save_weights(model: torch.nn.Module, path: Path) -> None:
    from safetensors.torch import save_file

    tmp = path.with_name(path.name + ".tmp")
    save_file(module_weights(model), str(tmp))
    os.replace(tmp, path)


def load_weights(model: torch.nn.Module, path: Path) -> None:
    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(path)))


def _optimizer_to_files(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = optimizer.state_dict()
    tensors = {
        f"state.{index}.{name}": value.detach().cpu().contiguous().clone()
        for index, entry in sd["state"].items()
        for name, value in entry.items()
    }
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, {"param_groups": groups}


def _optimizer_from_files(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in meta["param_groups"]]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def make_ema(model: torch.nn.Module, decay: float | None) -> AveragedModel | None:
    """An exponential moving average of ``model``'s weights (torch's ``AveragedModel``), or None."""
    if decay is None:
        return None
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)


def save_checkpoint(out_dir: Path, model, optimizer, state: dict, ema: AveragedModel | None = None) -> Path:
    """Write ``out_dir/checkpoint`` atomically (a new folder renamed into place)."""
    from safetensors.torch import save_file

    with atomic_folder(out_dir / "checkpoint") as tmp:
        save_file(module_weights(model), str(tmp / "model.safetensors"))
        if ema is not None:
            save_file({**module_weights(ema.module), "n_averaged": ema.n_averaged.detach().clone()},
                      str(tmp / "ema.safetensors"))  # fmt: skip
        opt_tensors, opt_meta = _optimizer_to_files(optimizer)
        save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
        save_file({"torch_cpu": torch.get_rng_state()}, str(tmp / "rng.safetensors"))
        doc = {"format_version": CHECKPOINT_FORMAT_VERSION, **state, "optimizer": opt_meta}
        (tmp / "state.json").write_text(json.dumps(doc, indent=1) + "\n")
    return out_dir / "checkpoint"


def load_checkpoint(out_dir: Path, model, optimizer, ema: AveragedModel | None = None) -> dict:
    from safetensors.torch import load_file

    folder = complete_folder(out_dir / "checkpoint", "state.json")  # or checkpoint.old after a crash in the swap
    if folder is None:
        raise ConfigError(f"Cannot resume: {out_dir} has no checkpoint/state.json; start without --resume.")
    doc = json.loads((folder / "state.json").read_text())
    if doc.get("format_version") != CHECKPOINT_FORMAT_VERSION:
        raise ConfigError(f"Cannot resume: checkpoint format {doc.get('format_version')!r} is not supported.")
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    if ema is not None:
        averaged = load_file(str(folder / "ema.safetensors"))
        ema.n_averaged.copy_(averaged.pop("n_averaged"))
        ema.module.load_state_dict(averaged)
    _optimizer_from_files(optimizer, load_file(str(folder / "optimizer.safetensors")), doc.pop("optimizer"))
    torch.set_rng_state(load_file(str(folder / "rng.safetensors"))["torch_cpu"])
    return doc


def _check_resumable(saved: dict, config: EncoderTrainConfig) -> None:
    now = config.to_dict()
    # a field added since the run started counts as its default (e.g. cv_seed in an older train_config.json)
    defaults = {f.name: f.default for f in fields(EncoderTrainConfig) if f.default is not MISSING}
    saved = {**{k: (list(v) if isinstance(v, tuple) else v) for k, v in defaults.items()}, **saved}
    changed = sorted(k for k in set(saved) | set(now) if k not in _RESUMABLE_CHANGES and saved.get(k) != now.get(k))
    if changed:
        raise ConfigError(
            f"Cannot resume: the settings {', '.join(f'`{k}`' for k in changed)} differ from the checkpoint's "
            f"train_config.json; use the same settings (only {', '.join(sorted(_RESUMABLE_CHANGES))} may change) "
            f"or start a new output directory."
        )


# ----------------------------------------------------------------------------------------------
# Training


@dataclass(frozen=True, eq=False)
class TrainingSplit:
    """What a run trains and validates on (:func:`training_split`)."""

    train: LabelledSpectra
    val: LabelledSpectra
    held_out: LabelledSpectra | None  # cross-fitting: the left-out fold's spectra (None without cv_folds)


def training_split(config: EncoderTrainConfig, data: LabelledSpectra) -> TrainingSplit:
    """The training and validation spectra of ``config`` in ``data`` (all usable records of the file).

    Training: ``train_folds`` with the licence and instrument rules; with ``cv_folds`` the spectra of
    fold ``cv_fold``'s structures are removed (``held_out``), the folds being assigned over that whole
    selection; then ``max_train_spectra`` draws a seeded subset. Validation: ``val_folds``, same rules.
    """
    pick = dict(licenses=config.licenses, exclude_unit_resolution=config.exclude_unit_resolution)
    train = data.select(config.train_folds, **pick)
    val = data.select(config.val_folds, **pick) if config.val_folds else data.subset(np.zeros(0, dtype=np.int64))
    held_out = None
    if config.cv_folds is not None and len(train):
        folds = structure_folds(train.inchikey14, config.cv_folds, config.cv_seed)
        held_out = train.subset(np.flatnonzero(folds == config.cv_fold))
        train = train.subset(np.flatnonzero(folds != config.cv_fold))
    if config.max_train_spectra is not None and config.max_train_spectra < len(train):
        rng = np.random.default_rng([config.seed, 2**31 - 1])
        train = train.subset(np.sort(rng.choice(len(train), config.max_train_spectra, replace=False)))
    if len(train) == 0:
        raise ConfigError(
            f"No training spectra in {config.mgf} with FOLD in {list(config.train_folds)} and LICENSE in "
            f"{config.licenses}; check `train_folds` / `licenses` (records kept: {data.report.get('kept')})."
        )
    return TrainingSplit(train, val, held_out)


def _load_data(config: EncoderTrainConfig) -> Iterator[Event]:
    data = yield from iter_load_labelled_spectra(
        config.mgf, config.feature_settings(), cache_dir=config.cache_dir,
        min_annotated_peaks=config.min_annotated_peaks,
    )  # fmt: skip
    split = training_split(config, data)
    labels = None
    if config.substructure_weight:
        settings = SubstructureSettings(n_bits=config.encoder_config().fragment_bits,
                                        max_breaks=config.substructure_max_breaks)  # fmt: skip
        labels = yield from fragment_labels(split.train, config.mgf, settings, cache_dir=config.cache_dir)
    train = split.train
    if config.simulated:
        train, labels = add_simulated(config, train, split.val, labels)
    return data, train, split.val, split.held_out, labels


def add_simulated(config: EncoderTrainConfig, train: LabelledSpectra, val: LabelledSpectra,
                  labels: FragmentLabels | None) -> tuple[LabelledSpectra, FragmentLabels | None]:  # fmt: skip
    """``train`` followed by the simulated spectra of ``config.simulated`` in the run's adducts (and ``labels``
    followed by theirs). Refuses simulated structures that are validation structures."""
    sim, sim_labels = load_simulated(config.simulated)
    leaked = sorted(set(sim.inchikey14.tolist()) & set(val.inchikey14.tolist()))
    if leaked:
        raise ConfigError(f"{config.simulated} simulates {len(leaked)} validation structures (e.g. {leaked[0]}); "
                          f"simulate again with --mgf naming this run's file, which excludes them.")  # fmt: skip
    keep = np.flatnonzero(np.isin(sim.adduct, list(config.adducts)))
    if len(keep) == 0:
        raise ConfigError(f"{config.simulated} holds no spectrum of the run's adducts {list(config.adducts)} (it has "
                          f"{sorted(set(sim.adduct.tolist()))}); add one of those to `adducts`.")  # fmt: skip
    if labels is not None:
        if sim_labels.n_bits != labels.n_bits:
            raise ConfigError(f"{config.simulated} labels fragments with {sim_labels.n_bits} bits, the encoder's "
                              f"fragment head has {labels.n_bits}; simulate with a forward model of n_bits "
                              f"{labels.n_bits}.")  # fmt: skip
        tokens = np.concatenate([np.arange(sim.token_offsets[i], sim.token_offsets[i + 1]) for i in keep])
        sim_labels = FragmentLabels(sim_labels.token_label[tokens], sim_labels.table_offsets, sim_labels.table_bits,
                                    sim_labels.n_bits, sim_labels.summary)  # fmt: skip
        labels = concatenate_labels([labels, sim_labels])
    sim = sim.subset(keep)
    report = {**train.report, "simulated": simulated_summary(config.simulated, sim, train.inchikey14)}
    return LabelledSpectra.concatenate([train, sim], report=report), labels


def simulated_summary(path: str | Path, sim: LabelledSpectra, train_keys: np.ndarray) -> dict:
    """What metrics.json (and so the model card) says of the simulated spectra a run trained on: the file, the
    counts of the part used, how many of their structures also have measured training spectra (``train_keys``,
    first InChIKey blocks), and the forward model and molecule sources they were simulated with."""
    settings = sim.report.get("simulated", {})
    keys = set(sim.inchikey14.tolist())
    return {"file": str(path), **describe_selection(sim), "measured_structures": len(keys & set(train_keys.tolist())),
            **{k: settings[k] for k in ("model", "molecules", "sources", "noise", "seed", "control") if k in settings}}


def split_simulated(train: LabelledSpectra) -> tuple[LabelledSpectra, dict | None]:
    """The measured spectra of a training set built by :func:`add_simulated` (which appends the simulated ones)
    and the summary of those simulated spectra (None without any)."""
    sim = train.report.get("simulated")
    if not sim:
        return train, None
    return train.subset(np.arange(len(train) - sim["spectra"])), sim


def substructure_loss(fragment_logits: torch.Tensor, targets: torch.Tensor, labelled: torch.Tensor) -> torch.Tensor:
    """Mean BCE of the labelled tokens' fragment logits (B, P, bits) against their fragments' fingerprints;
    0 when no token of the batch is labelled."""
    if not bool(labelled.any()):
        return fragment_logits.sum() * 0.0  # keeps the graph (and DDP-style hooks) intact
    return F.binary_cross_entropy_with_logits(fragment_logits[labelled], targets[labelled])


def train_encoder(config: EncoderTrainConfig, stop: threading.Event | None = None) -> Iterator[Event]:
    """Train (or resume) an encoder; yields progress events, ends with :class:`TrainingFinished`.

    Setting ``stop`` or closing the generator saves a checkpoint first; ``resume=True`` continues it.
    torch runs on ``config.threads`` threads meanwhile (the caller's setting is restored afterwards).
    """
    with torch_threads(config.threads):
        yield from _train(config, stop)


def _train(config: EncoderTrainConfig, stop: threading.Event | None) -> Iterator[Event]:
    """Train in this process: prepare the run folder, load the data, then epochs of steps, each epoch ending with
    an evaluation and a checkpoint, until a limit, early stopping or ``stop``."""
    out_dir = Path(config.out_dir)
    _prepare_out_dir(config, out_dir)
    all_data, train, val, held_out, labels = yield from _load_data(config)
    enc_config = config.encoder_config()
    mode = SELECT_METRICS[config.select_metric]
    n_batches = len(length_grouped_batches(train.n_tokens, config.batch_size, seed=0, epoch=0,
                                           bucket_batches=config.bucket_batches))  # fmt: skip
    total_steps = n_batches * config.epochs
    yield DataReady(len(train), len(val), n_batches, describe_selection(train), describe_selection(val))

    session = yield from _start_session(config, out_dir, enc_config, mode)
    state = session.state
    reason = None
    try:
        while reason is None:
            batches = length_grouped_batches(train.n_tokens, config.batch_size, seed=config.seed,
                                             epoch=state["epoch"], bucket_batches=config.bucket_batches)  # fmt: skip
            while state["batch"] < len(batches):
                yield session.step(train, labels, batches[state["batch"]], len(batches), total_steps)
                if stop is not None and stop.is_set():
                    path = session.checkpoint()
                    yield TrainingStopped(state["step"], str(path))
                    return
                reason = _limit_reached(config, session)
                if reason is not None:
                    break
                if session.checkpoint_due():
                    yield CheckpointSaved(state["step"], str(session.checkpoint()))
            evaluated = session.evaluate(val)
            if state["batch"] >= len(batches):  # before the yield, so a checkpoint taken there is consistent
                state["epoch"] += 1
                state["batch"] = 0
            yield evaluated
            if reason is None:
                reason = _end_of_epoch_reason(config, state, len(val))
            yield CheckpointSaved(state["step"], str(session.checkpoint()))
    except GeneratorExit:  # the caller stopped iterating: keep what was done for --resume
        if state["step"]:
            session.checkpoint()
        raise

    state["train_seconds"] = session.elapsed()
    metrics = _finish(out_dir, config, session.scored, train, val, held_out, all_data, state, reason,
                      session.throughput(), n_batches)
    yield TrainingFinished(reason, str(out_dir), metrics)


def _prepare_out_dir(config: EncoderTrainConfig, out_dir: Path) -> None:
    """Create the run folder and write train_config.json there: a new run needs a folder without a run, ``resume``
    one whose saved settings it may continue."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / "train_config.json"
    if config.resume:
        if not config_path.is_file():
            raise ConfigError(f"Cannot resume: {config_path} does not exist; start without --resume.")
        _check_resumable(json.loads(config_path.read_text()), config)
    elif (out_dir / "checkpoint").exists():
        raise ConfigError(f"{out_dir} already holds a training run; pass --resume to continue it or use a new --out.")
    config_path.write_text(json.dumps(config.to_dict(), indent=1) + "\n")


def _start_session(config: EncoderTrainConfig, out_dir: Path, enc_config: EncoderConfig,
                   mode: str) -> Generator[Event, None, _Session]:
    """Build the model, its optimizer and EMA, loading them and the run's state from the checkpoint when
    resuming (which yields :class:`Resumed`)."""
    torch.manual_seed(config.seed)
    model = SpectrumEncoder(enc_config)
    optimizer = make_optimizer(model, config)
    ema = make_ema(model, config.ema_decay)
    state: dict[str, Any] = {
        "step": 0, "epoch": 0, "batch": 0, "train_seconds": 0.0, "spectra_seen": 0,
        "best": None, "best_step": None, "best_epoch": None, "bad_evals": 0, "history": [],
    }  # fmt: skip
    if config.resume:
        state.update(load_checkpoint(out_dir, model, optimizer, ema))
        yield Resumed(state["step"], state["epoch"], state["batch"])
    model.train()
    return _Session(config, out_dir, model, optimizer, ema, state, mode)


class _Session:
    """This process's part of a training run: the model, its optimizer and EMA, the run's state (what a checkpoint
    saves), and this session's clock and throughput (the training time adds up over resumed sessions)."""

    def __init__(self, config: EncoderTrainConfig, out_dir: Path, model: SpectrumEncoder,
                 optimizer: torch.optim.Optimizer, ema: AveragedModel | None, state: dict[str, Any], mode: str):
        self.config, self.out_dir, self.mode = config, out_dir, mode
        self.model, self.optimizer, self.ema = model, optimizer, ema
        self.scored = ema.module if ema is not None else model  # what is evaluated, selected and saved
        self.state = state
        self.start = time.monotonic()
        self.steps_time, self.spectra = 0.0, 0  # this session's seconds in steps, and the spectra they took
        self.last_checkpoint = time.monotonic()

    def elapsed(self) -> float:
        """Training seconds of the run: those of the sessions before this one, plus this one's so far."""
        return self.state["train_seconds"] + (time.monotonic() - self.start)

    def throughput(self) -> float:
        """Spectra per second of this session's steps."""
        return self.spectra / max(self.steps_time, 1e-9)

    def step(self, train: LabelledSpectra, labels: FragmentLabels | None, idx: np.ndarray, n_batches: int,
             total_steps: int) -> StepDone:
        """One optimizer step on the batch ``idx`` of ``train`` (the EMA follows); the state moves on by one."""
        config, state = self.config, self.state
        t0 = time.monotonic()
        lr = config.lr * lr_at(state["step"], lr=1.0, min_lr=config.min_lr_ratio,
                               warmup_steps=config.warmup_steps, max_steps=total_steps)  # fmt: skip
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch, targets = train.batch(idx)
        if config.peak_dropout or config.intensity_noise:  # seeded by (seed, step): resumes exactly
            gen = torch.Generator().manual_seed(config.seed * 1_000_003 + state["step"])
            batch = augment_batch(batch, gen, peak_dropout=config.peak_dropout,
                                  intensity_noise=config.intensity_noise)  # fmt: skip
        loss = _step_loss(self.model, config, train, labels, idx, batch, targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        state["step"] += 1
        state["batch"] += 1
        state["spectra_seen"] += len(idx)
        self.steps_time += time.monotonic() - t0
        self.spectra += len(idx)
        return StepDone(state["step"], state["epoch"], state["batch"], n_batches, loss.item(), lr, self.throughput())

    def checkpoint(self) -> Path:
        """Save a checkpoint of the run (``resume`` continues from it); returns its folder."""
        saved = {**self.state, "train_seconds": self.elapsed()}
        path = save_checkpoint(self.out_dir, self.model, self.optimizer, saved, self.ema)
        self.last_checkpoint = time.monotonic()
        return path

    def checkpoint_due(self) -> bool:
        """Is a checkpoint due: ``checkpoint_minutes`` since the last, or a multiple of ``checkpoint_every_steps``?"""
        config = self.config
        due = time.monotonic() - self.last_checkpoint >= config.checkpoint_minutes * 60
        return bool(due or (config.checkpoint_every_steps and self.state["step"] % config.checkpoint_every_steps == 0))

    def evaluate(self, val: LabelledSpectra) -> Evaluated:
        """Evaluate the scored weights on ``val``; keep them as best.safetensors when they improve the selection
        metric (always without validation spectra), and add the evaluation to the run's history."""
        state, config = self.state, self.config
        t0 = time.monotonic()
        metrics = evaluate(predict_posteriors(self.scored, val, config.eval_batch_size), val) if len(val) else {}
        value = metrics.get(config.select_metric, float("nan"))
        improved = bool(len(val)) and _better(value, state["best"], self.mode)
        if improved or not len(val):
            state.update(best=value if len(val) else None, best_step=state["step"], best_epoch=state["epoch"])
            state["bad_evals"] = 0
            save_weights(self.scored, self.out_dir / "best.safetensors")
        else:
            state["bad_evals"] += 1
        entry = {"step": state["step"], "epoch": state["epoch"], "batch": state["batch"],
                 "train_minutes": round(self.elapsed() / 60, 2), "eval_seconds": round(time.monotonic() - t0, 1),
                 **{k: (round(v, 5) if isinstance(v, float) else v) for k, v in metrics.items()}}  # fmt: skip
        state["history"].append(entry)
        return Evaluated(state["step"], state["epoch"], entry, improved, state["best"])


def _step_loss(model: SpectrumEncoder, config: EncoderTrainConfig, train: LabelledSpectra,
               labels: FragmentLabels | None, idx: np.ndarray, batch: dict, targets: torch.Tensor) -> torch.Tensor:
    """The loss of one batch: the fingerprint levels' loss, plus the weighted substructure loss when the run
    labels fragments."""
    if labels is None:
        return levels_loss(model(batch, return_levels=True), targets, config)  # scalar
    levels, fragments = model(batch, return_levels=True, return_fragments=True)
    frag_targets, labelled = labels.targets(train, idx, batch["mask"].shape[1])
    labelled &= batch["mask"]  # a peak hidden by augmentation is not asked about
    return levels_loss(levels, targets, config) + config.substructure_weight * substructure_loss(
        fragments, frag_targets, labelled)


def _limit_reached(config: EncoderTrainConfig, session: _Session) -> str | None:
    """``"time_limit"`` or ``"max_steps"`` when the run has reached that limit, else None."""
    if config.max_minutes is not None and session.elapsed() >= config.max_minutes * 60:
        return "time_limit"
    if config.max_steps is not None and session.state["step"] >= config.max_steps:
        return "max_steps"
    return None


def _end_of_epoch_reason(config: EncoderTrainConfig, state: dict, n_val: int) -> str | None:
    """Why the run ends after this epoch's evaluation (``"early_stopping"``, ``"epochs"``), or None."""
    if n_val and state["bad_evals"] >= config.patience:
        return "early_stopping"
    if state["epoch"] >= (config.stop_after_epochs or config.epochs):
        return "epochs"
    return None


def _finish(out_dir, config, model, train, val, held_out, all_data, state, reason, throughput, n_batches) -> dict:
    """Write encoder.safetensors (best weights), encoder_config.json and metrics.json."""
    measured, simulated = split_simulated(train)
    load_weights(model, out_dir / "best.safetensors")
    final = evaluate(predict_posteriors(model, val, config.eval_batch_size), val, macro=True) if len(val) else {}
    save_weights(model, out_dir / "encoder.safetensors")
    (out_dir / "encoder_config.json").write_text(json.dumps(model.config.to_dict(), indent=1) + "\n")
    doc = {
        "val": final,
        "selected_by": config.select_metric,
        "best_step": state["best_step"],
        "best_epoch": state["best_epoch"],
        "stop_reason": reason,
        "steps": state["step"],
        "epochs_done": round(state["epoch"] + state["batch"] / n_batches, 3),
        "train_minutes": round(state["train_seconds"] / 60, 2),
        "train_spectra_per_s": round(throughput, 1),  # training steps only, this session
        "threads": config.threads,
        "parameters": model.num_parameters(),
        "annotation": {"tol_ppm": model.config.tol_ppm, "tol_da": model.config.tol_da,
                       "min_rdbe": model.config.min_rdbe, "max_peaks": model.config.max_peaks},
        "data": {"train": describe_selection(measured), "val": describe_selection(val), "file": all_data.report,
                 **({"simulated": simulated} if simulated else {}),
                 **({"held_out": {**describe_selection(held_out), "cv_folds": config.cv_folds,
                                  "cv_fold": config.cv_fold, "cv_seed": config.cv_seed}}
                    if held_out is not None else {})},
        "history": state["history"],
    }  # fmt: skip
    write_json_atomic(out_dir / "metrics.json", doc)
    return final


# ----------------------------------------------------------------------------------------------
# Command line


STOP_NOTICE = "saving a checkpoint after this step..."  # printed after the signal's name (SIGINT, SIGTERM)


def epoch_bar(bar, event: StepDone, desc: str, mininterval: float):
    """The tqdm bar of ``event``'s epoch, advanced to its batch: ``bar`` or, at a new epoch, a new one."""
    from tqdm import tqdm

    if bar is None or bar.total != event.n_batches or event.batch == 1 or bar.n > event.batch:
        if bar is not None:
            bar.close()
        bar = tqdm(total=event.n_batches, initial=event.batch - 1, desc=desc, file=sys.stdout,
                   mininterval=mininterval, dynamic_ncols=False, ncols=110)  # fmt: skip
    bar.update(event.batch - bar.n)
    return bar


def _csv_list(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.encoder.train_encoder",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--mgf", required=True, help="labelled MGF (.mgf / .mgf.gz)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--preset", default="small", choices=sorted(ENCODER_PRESETS))
    p.add_argument(
        "--licenses", type=_csv_list, default=SHIPPABLE_LICENSES,
        help=f"LICENSE values to train on, comma-separated, or 'all' (default: {','.join(SHIPPABLE_LICENSES)})",
    )  # fmt: skip
    p.add_argument("--keep-unit-resolution", action="store_true", help="keep QQ / ion-trap spectra")
    p.add_argument("--max-peaks", type=int, help="encoder max_peaks (default: the preset's)")
    p.add_argument("--dropout", type=float, help="encoder dropout (default: the preset's)")
    p.add_argument("--grow-levels", type=int, help="encoder grow_levels: MIST's growing head (the shipped encoder: 4)")
    p.add_argument("--fragment-bits", type=int,
                   help="encoder fragment_bits: the per-peak fragment head of --substructure-weight (e.g. 512)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--no-val", action="store_true",
                   help="no validation fold: nothing is evaluated or selected, the last weights are kept")
    EncoderTrainConfig.add_arguments(p, skip={"mgf", "out_dir", "preset", "encoder", "licenses",
                                              "exclude_unit_resolution", "resume", "train_folds", "val_folds"})
    return p


def config_from_args(args: argparse.Namespace) -> EncoderTrainConfig:
    encoder_args = ("max_peaks", "dropout", "grow_levels", "fragment_bits")
    skip = {"mgf", "out", "licenses", "keep_unit_resolution", "resume", "preset", "no_val", *encoder_args}
    kwargs = {k: v for k, v in vars(args).items() if k not in skip}
    licenses = None if [s.lower() for s in args.licenses] == ["all"] else args.licenses
    encoder = {k: getattr(args, k) for k in encoder_args if getattr(args, k) is not None}
    return EncoderTrainConfig(
        mgf=args.mgf, out_dir=args.out, preset=args.preset, encoder=encoder, licenses=licenses,
        exclude_unit_resolution=not args.keep_unit_resolution, resume=args.resume,
        **({"val_folds": ()} if args.no_val else {}), **kwargs,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    try:
        config = config_from_args(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bar = None
    try:
        with stop_on_signals(notice=STOP_NOTICE) as stop:
            for event in train_encoder(config, stop):
                if isinstance(event, ReadProgress):
                    print(f"read {event.records} records, kept {event.kept} ({event.elapsed_s:.0f} s)",
                          flush=True)
                elif isinstance(event, CacheHit):
                    print(f"labelled spectra from cache {event.path}", flush=True)
                elif isinstance(event, LabelProgress):
                    print(f"substructure labels: {event.structures_done}/{event.structures} structures "
                          f"({event.elapsed_s:.0f} s)", flush=True)
                elif isinstance(event, DataReady):
                    print(f"train {json.dumps(event.train)}\nval   {json.dumps(event.val)}\n"
                          f"{event.steps_per_epoch} steps per epoch", flush=True)  # fmt: skip
                elif isinstance(event, Resumed):
                    print(f"resumed at step {event.step} (epoch {event.epoch}, batch {event.batch})",
                          flush=True)
                elif isinstance(event, StepDone):
                    bar = epoch_bar(bar, event, f"epoch {event.epoch}", mininterval=10)
                    bar.set_postfix(loss=f"{event.loss:.4f}", lr=f"{event.lr:.2e}",
                                    sps=f"{event.spectra_per_s:.0f}", refresh=False)  # fmt: skip
                elif isinstance(event, Evaluated):
                    m = {k: v for k, v in event.metrics.items() if isinstance(v, float)}
                    keys = ("bce", "tanimoto", "tanimoto_density", "ap_micro", "auroc_micro",
                            "active_bits_pred")
                    shown = " ".join(f"{k} {m[k]:.4f}" for k in keys if k in m)
                    minutes, mark = event.metrics["train_minutes"], " *" if event.improved else ""
                    msg = f"eval step {event.step} epoch {event.epoch}: {shown} ({minutes} min){mark}"
                    (bar.write if bar is not None else print)(msg)
                    sys.stdout.flush()
                elif isinstance(event, CheckpointSaved):
                    log.debug("checkpoint at step %d", event.step)
                elif isinstance(event, TrainingStopped):
                    print(f"stopped at step {event.step}; resume with --resume "
                          f"(checkpoint {event.checkpoint})")
                    return 130
                elif isinstance(event, TrainingFinished):
                    if bar is not None:
                        bar.close()
                    print(f"finished ({event.reason}); val metrics of the kept weights:\n"
                          f"{json.dumps(event.metrics, indent=1)}\nwritten to {event.out_dir}")  # fmt: skip
    except (ConfigError, InputFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
