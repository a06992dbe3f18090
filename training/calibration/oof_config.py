"""The configuration of an out-of-fold run (:class:`OOFConfig`, its flags) and the progress events
:func:`training.calibration.oof_posteriors.oof_posteriors` yields."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from training.core.loop import TrainingConfig
from training.encoder.train_encoder import EncoderTrainConfig

OOF_FORMAT_VERSION = 1
# Fields that may differ between a run and its resumption (they do not change what is computed).
_RESUMABLE_CHANGES = frozenset({"resume", "threads", "checkpoint_minutes", "cache_dir", "reference_val"})


@dataclass
class OOFConfig(TrainingConfig):
    mgf: str = field(metadata={"help": "Labelled MGF (FOLD, LICENSE, SMILES, FORMULA per record)."})
    out_dir: str = field(metadata={"help": "Output directory (one sub-folder per fold)."})
    folds: int = field(default=5, metadata={"help": "Number of folds K (structures split K ways)."})
    cv_seed: int = field(default=0, metadata={"help": "Seed of the structure-to-fold assignment."})
    # The shipped encoder's recipe (docs/training.md, step 3; MODEL_CARD.md).
    preset: str = field(default="small", metadata={"help": "Encoder preset."})
    dropout: float = field(default=0.3, metadata={"help": "Encoder dropout."})
    grow_levels: int | None = field(
        default=None, metadata={"help": "MIST growing head levels (encoder grow_levels); None = the preset's flat head."}
    )
    fragment_bits: int | None = field(
        default=None, metadata={"help": "Encoder fragment_bits: the per-peak fragment head of --substructure-weight."}
    )
    substructure_weight: float = field(
        default=0.0, metadata={"help": "Weight of MIST's substructure task (training.encoder.substructures); 0 = off."}
    )
    adducts: tuple[str, ...] | None = field(
        default=None, metadata={"help": "Precursor ion types to train and score, e.g. [M+H]+ [M+Na]+ [M-H]-; None = "
                                        "the encoder training default."},
    )
    simulated: str | None = field(
        default=None, metadata={"help": "Simulated spectra added to every fold's training spectra (python -m "
                                        "training.encoder.forward simulate; they never hold a structure of the file)."},
    )
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay (matrices only)."})
    epochs: int = field(default=7, metadata={"help": "Cosine horizon in epochs."})
    stop_after_epochs: int = field(
        default=6, metadata={"help": "Epochs trained (the shipped encoder's selected epoch; no val selection)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of initialisation, data order and dropout."})
    train: dict = field(default_factory=dict, metadata={"help": "Further EncoderTrainConfig fields."})
    max_steps: int | None = field(default=None, metadata={"help": "Stop each fold after this many steps (smoke runs)."})
    max_train_spectra: int | None = field(default=None, metadata={"help": "Random training subset (smoke runs)."})
    reference: str | None = field(
        default="default",
        metadata={"help": "Bundle or encoder folder scored for contrast ('default': the shipped model)."},
    )
    reference_val: bool = field(default=True, metadata={"help": "Also score the reference on the val folds."})
    threads: int = field(default=1, metadata={"help": "torch CPU threads."})
    checkpoint_minutes: float = field(default=5.0, metadata={"help": "Minutes between training checkpoints."})
    cache_dir: str | None = field(default=None, metadata={"help": "Labelled-spectra cache folder."})
    resume: bool = field(default=False, metadata={"help": "Continue the run in out_dir (finished folds are kept)."})

    def __post_init__(self) -> None:
        self.train = dict(self.train)
        reserved = {"mgf", "out_dir", "cv_folds", "cv_fold", "cv_seed", "val_folds", "resume", "encoder"}
        for name, value in (("adducts", self.adducts), ("substructure_weight", self.substructure_weight or None),
                            ("simulated", self.simulated)):
            if value is not None and name in self.train:
                raise ConfigError(f"`{name}` is set twice (as a field and in `train`); give it once.")
        if reserved & set(self.train):
            raise ConfigError(f"`train` may not set {sorted(reserved & set(self.train))}; they are the OOF run's.")
        if not isinstance(self.folds, int) or self.folds < 2:
            raise ConfigError(f"`folds` must be an integer >= 2, got {self.folds!r}.")
        self.fold_config(0)  # fail now on bad training settings

    def fold_dir(self, k: int) -> Path:
        return Path(self.out_dir) / f"fold_{k}"

    def fold_config(self, k: int, *, resume: bool = False) -> EncoderTrainConfig:
        """The :class:`EncoderTrainConfig` of fold ``k``: the recipe, fold ``k`` left out, no validation."""
        encoder: dict[str, Any] = {"dropout": self.dropout}
        if self.grow_levels is not None:
            encoder["grow_levels"] = self.grow_levels
        if self.fragment_bits is not None:
            encoder["fragment_bits"] = self.fragment_bits
        extra = dict(self.train)
        if self.substructure_weight:
            extra["substructure_weight"] = self.substructure_weight
        if self.adducts is not None:
            extra["adducts"] = tuple(self.adducts)
        if self.simulated:
            extra["simulated"] = self.simulated
        return EncoderTrainConfig(
            mgf=self.mgf, out_dir=str(self.fold_dir(k)), preset=self.preset, encoder=encoder,
            weight_decay=self.weight_decay, epochs=self.epochs, stop_after_epochs=self.stop_after_epochs,
            seed=self.seed, max_steps=self.max_steps, max_train_spectra=self.max_train_spectra,
            threads=self.threads, checkpoint_minutes=self.checkpoint_minutes, cache_dir=self.cache_dir,
            cv_folds=self.folds, cv_fold=k, cv_seed=self.cv_seed, val_folds=(), resume=resume,
            **extra,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": OOF_FORMAT_VERSION, **asdict(self)}


@dataclass(frozen=True)
class FoldsAssigned:
    n_spectra: int
    n_structures: int
    folds: list  # per fold: {"spectra": ..., "structures": ...}


@dataclass(frozen=True)
class FoldStarted:
    fold: int
    state: str  # "new", "resumed" (from a checkpoint), "trained" (predicting only), "done" (skipped)


@dataclass(frozen=True)
class FoldEvent:
    """An event of the fold's :func:`training.encoder.train_encoder.train_encoder` or calibration."""

    fold: int
    event: object


@dataclass(frozen=True)
class Predicting:
    what: str  # "fold 3 held-out", "reference train", ...
    n: int


@dataclass(frozen=True)
class FoldDone:
    fold: int
    summary: dict


@dataclass(frozen=True)
class ReferenceDone:
    summary: dict


@dataclass(frozen=True)
class FoldsPending:
    """``only_folds`` runs: these folds are not done yet, so the posteriors were not assembled."""

    folds: list


@dataclass(frozen=True)
class OOFStopped:
    fold: int
    checkpoint: str


@dataclass(frozen=True)
class OOFFinished:
    out_dir: str
    summary: dict
