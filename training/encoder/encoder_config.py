"""The configuration of encoder training (:class:`EncoderTrainConfig`, its flags and presets) and the progress events
:func:`training.encoder.train_encoder.train_encoder` yields."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import ConfigError, MsgptError
from engine.model.encoder import ENCODER_PRESETS, EncoderConfig
from engine.spectra.annotate import get_ion_type
from training.core.loop import TrainingConfig, int_at_least
from training.data.spectra import DEFAULT_ADDUCTS, SHIPPABLE_LICENSES, CacheHit, FeatureSettings, ReadProgress

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
