"""The pieces of encoder training: length-grouped batches, the loss (with the growing head's levels and the
substructure task), augmentation, the optimizer, predicting and evaluating posteriors, checkpoints (safetensors +
JSON, no pickle), the training split and the simulated spectra it adds. :mod:`training.encoder.train_encoder`
composes them into the run."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from engine.errors import ConfigError
from engine.model.encoder import SpectrumEncoder, fold_bits
from training.core.checkpoint import atomic_folder, complete_folder, module_weights
from training.core.metrics import bit_metrics, density_matched_threshold, mean_tanimoto
from training.data.spectra import LabelledSpectra, describe_selection, iter_load_labelled_spectra, structure_folds
from training.encoder.encoder_config import _RESUMABLE_CHANGES, EncoderTrainConfig, Event
from training.encoder.forward import load_simulated
from training.encoder.substructures import FragmentLabels, SubstructureSettings, concatenate_labels, fragment_labels

CHECKPOINT_FORMAT_VERSION = 1


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
