"""The examples of posterior-aligned adaptation: which spectra are selected, an example's query band, reference SAFE
and recoverability group, and the thresholds and batches drawn from them. :mod:`training.decoder.adapt` prepares
them with the decoder (the pool-hit probability) and trains on them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.chem import molecules as chem
from engine.elucidation.pipeline import require_usable
from engine.errors import ConfigError, MsgptError
from engine.model.bundle import ModelBundle, sha256_file, weights_checksum
from engine.spectra.spectrum import Spectrum
from training.data.spectra import is_unit_resolution
from training.decoder.adapt_config import AdaptConfig


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
            require_usable(bundle, item, mapped=False)  # the ion types it was trained on (no mapping)
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
    from training.data.corpus_convert import Dropped, encode_safe

    mol = chem.mol_from_smiles(smiles)
    if mol is None:
        return "reference SMILES unparseable"
    chem.remove_stereo(mol)
    encoded = encode_safe(chem.canonical_smiles(mol))
    return None if isinstance(encoded, Dropped) else encoded, chem.morgan_bits(mol, n_bits=n_bits)
