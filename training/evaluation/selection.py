"""What an evaluation runs: its configuration (:class:`EvalConfig`), the variants (query plans, decoding, ranking),
the model (a bundle, or an encoder alone for oracle-free checks) and the seeded selection of labelled spectra,
one per structure when asked. :mod:`training.evaluation.evaluate` samples and scores them."""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.chem import molecules as chem
from engine.elucidation.pipeline import EDIT_ROUNDS, QueryParams, require_usable
from engine.errors import ConfigError, MsgptError
from engine.model.querying import OUTER_KAPPA_RANGE, Calibration
from engine.model.sampling import DECODING_MODES
from engine.model.scoring import RANKINGS
from engine.spectra.io import iter_spectra
from engine.spectra.spectrum import Spectrum

VARIANTS = ("oracle", "point", "f1", "cosine", "outer", "band", "band+adapter")
DEFAULT_VARIANTS = ("oracle", "point", "band", "band+adapter")
NEEDS_THRESHOLD = {"f1": "f1", "cosine": "cosine"}
KAPPA_SWEEP = tuple(round(float(k), 2) for k in np.arange(0.5, 2.0001, 0.05))
THRESHOLD_GRID = np.round(np.arange(0.001, 1.0, 0.001), 3)  # F1/cosine-optimal t, reported to 3 decimals
TOP_K = 10  # candidates kept per record (Top-10 metrics; MCES later without sampling again)
FORMAT_VERSION = 3  # 3: samples decoded without safe-mol's fixing; decoding modes; rankings
FREE_SUFFIX = "/free"  # variant name suffix of free (unconstrained) decoding


def variant_name(variant: str, decoding: str) -> str:
    """``band`` (formula-constrained decoding, the default) or ``band/free``."""
    return variant if decoding == "formula" else variant + FREE_SUFFIX


def split_variant(name: str) -> tuple[str, str]:
    """Inverse of :func:`variant_name`: (variant, decoding)."""
    return (name[: -len(FREE_SUFFIX)], "free") if name.endswith(FREE_SUFFIX) else (name, "formula")


# -- the model: a bundle, or an encoder training folder (κ sweep and thresholds only) ------------------
@dataclass
class EncoderOnly:
    """An encoder training folder (``encoder_config.json``, ``encoder.safetensors``, ``calibration.json``)
    standing in for a bundle where only posteriors are needed."""

    path: Path
    encoder: object
    calibration: Calibration
    checksum: str
    device: object
    config: dict = field(default_factory=dict)
    has_adapter: bool = False
    decoder = None
    dtype = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def supported_adducts(self) -> tuple[str, ...]:
        """The ion types the encoder trained on (its ``train_config.json``)."""
        from training.data.spectra import DEFAULT_ADDUCTS

        path = self.path / "train_config.json"
        adducts = json.loads(path.read_text()).get("adducts") if path.is_file() else None
        return tuple(adducts or DEFAULT_ADDUCTS)

    @property
    def fp_bits(self) -> int:
        return self.encoder.config.fp_bits


def load_model(path: str | Path, device: str = "auto", precision: str = "auto"):
    """A :class:`~engine.model.bundle.ModelBundle`, or an :class:`EncoderOnly` for an encoder training folder."""
    from engine.model.bundle import load_bundle, resolve_device, sha256_file

    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file() and (folder / "encoder_config.json").is_file():
        from training.calibration.calibrate import load_encoder

        if not (folder / "calibration.json").is_file():
            raise ConfigError(f"{folder} has no calibration.json; run python -m training.calibration.calibrate --encoder {folder}")
        dev, _ = resolve_device(device)
        h = hashlib.sha256()
        for name in ("encoder.safetensors", "calibration.json"):
            h.update(sha256_file(folder / name).encode())
        return EncoderOnly(folder, load_encoder(folder).to(dev), Calibration.load(folder / "calibration.json"),
                           h.hexdigest(), dev)
    return load_bundle(folder, device=device, precision=precision)


def fp_bits_of(model) -> int:
    return model.fp_bits if isinstance(model, EncoderOnly) else model.decoder.config.fp_bits


def precision_of(model) -> str:
    import torch

    if isinstance(model, EncoderOnly):
        return "encoder only"
    return "bf16" if model.dtype == torch.bfloat16 else "fp32"


# -- selection ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reference:
    """The reference structure of a labelled spectrum."""

    smiles: str  # canonical, stereo-free
    inchikey14: str
    bits: np.ndarray  # Morgan r=2, 4096 bits: the Tanimoto metric
    query_bits: np.ndarray  # the same in the model's fingerprint space (oracle query, fidelity)
    mol: object  # RDKit Mol, stereo removed

    @classmethod
    def of(cls, spectrum: Spectrum, n_bits: int = chem.N_BITS) -> Reference | None:
        mol = chem.mol_from_smiles(spectrum.smiles) if spectrum.smiles else None
        if mol is None:
            return None
        chem.remove_stereo(mol)
        key = chem.inchikey14(mol)
        if not key:
            return None
        return cls(chem.canonical_smiles(mol), key, chem.morgan_bits(mol), chem.morgan_bits(mol, n_bits), mol)


def spectrum_key(s: Spectrum) -> str:
    """A spectrum's identity in results.jsonl: file name, record number and id."""
    return f"{Path(s.source).name}#{s.index}:{s.id}"


@dataclass
class Selection:
    eligible: list[tuple[Spectrum, Reference]]  # every usable spectrum of the evaluated folds
    chosen: list[tuple[Spectrum, Reference]]  # the seeded subsample that is sampled
    sweep_only: dict[str, list[tuple[Spectrum, Reference]]]  # other folds, for the κ sweep only
    info: dict


def select_spectra(model, cfg: EvalConfig) -> Selection:
    """Eligible labelled spectra, their seeded subsample, and counts of why others were left out."""
    left_out: dict[str, int] = defaultdict(int)
    eligible: list[tuple[Spectrum, Reference]] = []
    sweep_only: dict[str, list] = defaultdict(list)
    extra_folds = [f for f in (cfg.sweep_folds or ()) if f not in cfg.folds]
    n_bits = fp_bits_of(model)
    for item in iter_spectra(cfg.mgf):
        if not isinstance(item, Spectrum):
            left_out["skipped by the reader (any fold)"] += 1
            continue
        fold = item.metadata.get("fold", "")
        in_eval = not cfg.folds or fold in cfg.folds
        if not in_eval and fold not in extra_folds:
            left_out["other fold"] += 1
            continue
        if cfg.licenses and item.metadata.get("license") not in cfg.licenses:
            left_out["license not selected"] += 1
            continue
        if cfg.adducts and item.adduct not in cfg.adducts:
            left_out["adduct not selected"] += 1
            continue
        if not item.smiles:
            left_out["no reference SMILES"] += 1
            continue
        try:
            require_usable(model, item, mapped=False)  # the ion types it was trained on (no mapping)
        except MsgptError:
            left_out["not usable by the model (formula, adduct or precursor)"] += 1
            continue
        ref = Reference.of(item, n_bits)
        if ref is None:
            left_out["reference SMILES not readable by RDKit"] += 1
            continue
        (eligible if in_eval else sweep_only[fold]).append((item, ref))
    rng = random.Random(cfg.seed)
    chosen = list(eligible)
    if cfg.one_per_structure:
        by_structure: dict[str, list] = defaultdict(list)
        for pair in eligible:
            by_structure[pair[1].inchikey14].append(pair)
        chosen = [rng.choice(group) for _, group in sorted(by_structure.items())]
    rng.shuffle(chosen)  # a larger --max-spectra later extends the same prefix
    if cfg.max_spectra is not None:
        chosen = chosen[: cfg.max_spectra]
    info = {
        "eligible": len(eligible),
        "eligible_structures": len({r.inchikey14 for _, r in eligible}),
        "selected": len(chosen),
        "selected_structures": len({r.inchikey14 for _, r in chosen}),
        "adduct_counts": dict(sorted(_count(s.adduct for s, _ in chosen).items())),
        "left_out": dict(left_out),
        "sweep_only": {f: len(v) for f, v in sweep_only.items()},
    }
    return Selection(eligible, chosen, dict(sweep_only), info)


def _count(items) -> dict:
    out: dict = defaultdict(int)
    for x in items:
        out[x] += 1
    return out


# -- configuration ---------------------------------------------------------------------------------
@dataclass
class EvalConfig:
    model: str = field(metadata={"help": "model bundle folder, or an encoder training folder (κ sweep only)"})
    mgf: str = field(metadata={"help": "labelled MGF: FORMULA, SMILES and adduct per record (.gz too)"})
    out: str = field(metadata={"help": "output folder"})
    folds: tuple[str, ...] = field(default=("val",), metadata={"help": "FOLD values evaluated (empty: all)"})
    licenses: tuple[str, ...] | None = field(default=None, metadata={"help": "LICENSE values kept (None: all)"})
    adducts: tuple[str, ...] | None = field(default=None, metadata={"help": "adducts kept (None: all the model supports)"})
    max_spectra: int | None = field(default=None, metadata={"help": "seeded random subsample size"})
    one_per_structure: bool = field(default=False, metadata={"help": "one random spectrum per structure"})
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    decodings: tuple[str, ...] = field(default=("formula",), metadata={
        "help": "decoding modes each variant runs with: formula (constrained), free (the paper's)"})
    rankings: tuple[str, ...] = field(default=RANKINGS, metadata={
        "help": "rankings scored on every pool; the first one fills rank/tanimoto (the headline numbers)"})
    kappa_min: float = 0.95
    kappa_max: float = 1.50
    groups: int = field(default=20, metadata={"help": "M"})
    pool_size: int = field(default=100, metadata={"help": "B = M × N"})
    pool_sizes: tuple[int, ...] = field(default=(), metadata={"help": "candidate-pool scaling: B values, M fixed"})
    outer_range: tuple[float, float] = OUTER_KAPPA_RANGE
    seed: int = 0
    edit_rounds: int = field(default=EDIT_ROUNDS, metadata={
        "help": "rounds of isomer edits of the band's pools (0: none, standard effort before issue #59)"})
    mces: bool = False
    mces_time_limit: float = field(default=60.0, metadata={"help": "seconds per MCES pair"})
    device: str = "auto"
    precision: str = "auto"
    threads: int | None = None
    kappa_sweep: bool = True
    sweep_folds: tuple[str, ...] | None = field(default=None, metadata={"help": "folds of the κ sweep (None: folds)"})
    command: str = ""

    def __post_init__(self):
        self.folds = tuple(self.folds or ())
        self.variants = tuple(self.variants)
        self.decodings = tuple(dict.fromkeys(self.decodings))
        self.rankings = tuple(dict.fromkeys(self.rankings))
        bad = [d for d in self.decodings if d not in DECODING_MODES] + [r for r in self.rankings if r not in RANKINGS]
        if bad or not self.decodings or not self.rankings:
            raise ConfigError(f"decodings must be among {', '.join(DECODING_MODES)} and rankings among "
                              f"{', '.join(RANKINGS)} (at least one of each), got {', '.join(bad) or 'none'}")
        self.pool_sizes = tuple(sorted(set(self.pool_sizes)))
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ConfigError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
        QueryParams(kappa_min=self.kappa_min, kappa_max=self.kappa_max, groups=self.groups)  # checks the band
        for b in (self.pool_size, *self.pool_sizes):
            if not isinstance(b, int) or b < self.groups or b % self.groups:
                raise ConfigError(f"pool size {b} must be a positive multiple of M={self.groups} (B = M × N)")
        if self.max_spectra is not None and self.max_spectra < 1:
            raise ConfigError(f"`max_spectra` must be at least 1, got {self.max_spectra}")
        if self.mces_time_limit <= 0:
            raise ConfigError(f"`mces_time_limit` must be > 0 seconds, got {self.mces_time_limit}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"`threads` must be at least 1, got {self.threads}")

    def run_key(self, model) -> dict:
        """What decides the per-spectrum results: results.jsonl written under another key is not reused."""
        keep = ("mgf", "folds", "licenses", "adducts", "one_per_structure", "kappa_min", "kappa_max", "groups",
                "pool_size", "outer_range", "seed", "rankings")
        key = {k: getattr(self, k) for k in keep}
        key.update(model_checksum=model.checksum, precision=precision_of(model), format_version=FORMAT_VERSION)
        return json.loads(json.dumps(key))  # tuples as lists, as read back


# -- events ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Progress:
    phase: str  # "posteriors", "sampling", "mces"
    done: int
    total: int
    spectrum_id: str = ""
    variant: str = ""


@dataclass
class EvalResult:
    out: Path
    metrics: dict
