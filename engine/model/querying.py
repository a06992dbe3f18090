"""Posterior query construction: active-bit density band calibration and fixed-size group querying.

Paper, Method "Posterior Query Construction":

- ``D_enc`` is the mean number of active Morgan bits of the true structures in the encoder's
  training split; ``A(t)`` is the mean number of posterior bits above threshold ``t`` on the same
  split. A density ratio ``κ`` maps to the threshold ``t_κ = A⁻¹(κ·D_enc)``.
- A band ``[κ_min, κ_max]`` maps to the threshold interval ``[t_κmax, t_κmin]``; ``M`` thresholds are
  interpolated linearly, ``t_i = t_κmax + (i-1)/(M-1)·(t_κmin - t_κmax)``, and each gives one query
  ``z_i = 1[π > t_i]``. ``M = 1`` with ``κ_min = κ_max = 1.0`` is the point-query baseline.

Neighbouring thresholds often give the same fingerprint; :func:`build_queries` merges those so each
distinct query is encoded once, keeping the identity ``(i, j)`` of every sample drawn from it.

A :class:`QueryPlan` replaces the band where something else should be queried (the paper's
ablations and the oracle run of ``msgpt-eval``): explicit thresholds (a point query at one ``t``, such
as the F1- or cosine-optimal one), density ratios drawn outside the band (outer-band querying), or one
given fingerprint (the true one: the decoder alone).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from engine.errors import BundleError, ConfigError
from engine.model.scoring import BitCalibration

CALIBRATION_FORMAT_VERSION = 1
KAPPA_LIMITS = (0.05, 10.0)
OUTER_KAPPA_RANGE = (0.5, 2.0)  # the κ range of the paper's density-ratio diagnostics


def _curve_dict(cal: Calibration) -> dict:
    """The D_enc / A(t) part of a calibration (what a per-polarity entry holds)."""
    d = cal.to_dict()
    return {k: d[k] for k in ("d_enc", "n_spectra", "source", "thresholds", "active_counts", "bit_calibration")
            if k in d}


@dataclass(frozen=True)
class Calibration:
    """``D_enc`` and the ``A(t)`` curve of one spectrum encoder (stored as ``calibration.json``)."""

    d_enc: float = field(metadata={"help": "mean active Morgan bits of the training structures"})
    thresholds: np.ndarray = field(metadata={"help": "increasing threshold grid t in [0, 1]"})
    active_counts: np.ndarray = field(metadata={"help": "A(t): mean posterior bits > t, non-increasing"})
    n_spectra: int = 0
    source: str = ""
    bits: BitCalibration | None = field(default=None, metadata={
        "help": "per-bit recalibration of π for the fingerprint score (engine.model.scoring); optional"})
    negative: Calibration | None = field(default=None, metadata={
        "help": "D_enc and A(t) of negative-mode spectra, for an encoder trained on both polarities (the fields "
                "above are then those of positive mode); None: one curve for every spectrum"})

    def __post_init__(self):
        t = np.asarray(self.thresholds, dtype=np.float64)
        a = np.asarray(self.active_counts, dtype=np.float64)
        object.__setattr__(self, "thresholds", t)
        object.__setattr__(self, "active_counts", a)
        if not (math.isfinite(self.d_enc) and self.d_enc > 0):
            raise ConfigError(f"`d_enc` must be a positive number of bits, got {self.d_enc!r}.")
        if t.ndim != 1 or t.shape != a.shape or t.size < 2:
            raise ConfigError(
                f"`thresholds` and `active_counts` must be 1-D arrays of equal length ≥ 2, got shapes "
                f"{t.shape} and {a.shape}."
            )
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(a))):
            raise ConfigError("`thresholds` and `active_counts` must be finite numbers.")
        if np.any(np.diff(t) <= 0) or t[0] < 0 or t[-1] > 1:
            raise ConfigError("`thresholds` must increase strictly within [0, 1].")
        if np.any(np.diff(a) > 1e-9) or np.any(a < 0):
            raise ConfigError("`active_counts` A(t) must be non-negative and non-increasing in t.")

    def for_polarity(self, polarity: str | None) -> Calibration:
        """The calibration of spectra of ``polarity`` ("positive", "negative" or None = unknown).

        Posteriors of the two ion modes differ in how many bits pass a threshold, so an encoder trained on
        both carries one ``D_enc``/``A(t)`` per mode; the per-bit recalibration (``bits``) is the negative
        mode's own when one was fitted (``training.calibration.calibrate_bits --per-polarity``), else shared.
        """
        if polarity == "negative" and self.negative is not None:
            bits = self.negative.bits if self.negative.bits is not None else self.bits
            return replace(self.negative, bits=bits, negative=None)
        return self

    # -- A(t) and its inverse -------------------------------------------------------------------
    def active_bits_at(self, t: float) -> float:
        """A(t) by linear interpolation on the stored grid."""
        return float(np.interp(t, self.thresholds, self.active_counts))

    def threshold_for_bits(self, target: float) -> float:
        """A⁻¹(target): the threshold whose expected active-bit count is ``target``.

        Linear interpolation between the two grid points that bracket ``target``; a target above
        A(t_0) gives t_0 and one below A(t_last) gives t_last (the curve cannot say more).
        """
        t, a = self.thresholds, self.active_counts
        below = np.flatnonzero(a <= target)  # a is non-increasing, so this is a suffix of the grid
        if below.size == 0:
            return float(t[-1])
        k = int(below[0])
        if k == 0:
            return float(t[0])
        a0, a1 = a[k - 1], a[k]  # a0 > target >= a1
        return float(t[k - 1] + (a0 - target) / (a0 - a1) * (t[k] - t[k - 1]))

    def threshold_for_kappa(self, kappa: float) -> float:
        """t_κ = A⁻¹(κ · D_enc)."""
        check_kappa(kappa, "kappa")
        return self.threshold_for_bits(kappa * self.d_enc)

    # -- (de)serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format_version": CALIBRATION_FORMAT_VERSION,
            "d_enc": float(self.d_enc),
            "n_spectra": int(self.n_spectra),
            "source": self.source,
            "thresholds": [round(float(x), 6) for x in self.thresholds],
            "active_counts": [round(float(x), 4) for x in self.active_counts],
            **({"bit_calibration": self.bits.to_dict()} if self.bits is not None else {}),
            **({"negative": _curve_dict(self.negative)} if self.negative is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        version = d.get("format_version", 1)
        if not isinstance(version, int) or version > CALIBRATION_FORMAT_VERSION:
            raise BundleError(
                f"calibration.json has format_version {version!r}, newer than this version of msgpt "
                f"understands ({CALIBRATION_FORMAT_VERSION}); upgrade msgpt."
            )
        missing = [k for k in ("d_enc", "thresholds", "active_counts") if k not in d]
        if missing:
            raise BundleError(f"calibration.json lacks {', '.join(missing)}; re-run calibration.")
        return cls(
            d_enc=float(d["d_enc"]),
            thresholds=np.asarray(d["thresholds"], dtype=np.float64),
            active_counts=np.asarray(d["active_counts"], dtype=np.float64),
            n_spectra=int(d.get("n_spectra", 0)),
            source=str(d.get("source", "")),
            bits=BitCalibration.from_dict(d["bit_calibration"]) if d.get("bit_calibration") else None,
            negative=cls.from_dict({"format_version": version, **d["negative"]}) if d.get("negative") else None,
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BundleError(f"Cannot read {path}: {e}. Re-export the bundle or re-run calibration.") from e
        try:
            return cls.from_dict(d)
        except ConfigError as e:
            raise BundleError(f"{path} is invalid: {e}") from e

    @classmethod
    def from_posteriors(
        cls,
        posteriors: np.ndarray,
        true_bit_counts: Sequence[int] | np.ndarray,
        grid: np.ndarray | None = None,
        source: str = "",
    ) -> Calibration:
        """Compute D_enc and A(t) from encoder posteriors (n, n_bits) and true active-bit counts."""
        p = np.asarray(posteriors, dtype=np.float32)
        if p.ndim != 2 or p.shape[0] == 0:
            raise ConfigError(f"`posteriors` must be a non-empty (n, n_bits) array, got shape {p.shape}.")
        if len(true_bit_counts) != p.shape[0]:
            raise ConfigError(
                f"`true_bit_counts` has {len(true_bit_counts)} entries for {p.shape[0]} posteriors."
            )
        grid = default_threshold_grid() if grid is None else np.asarray(grid, dtype=np.float64)
        # A(t) = mean_x |{b : π_b > t}|, via sorted posterior values: count above t = n - searchsorted(right)
        flat = np.sort(p.ravel())
        counts = (flat.size - np.searchsorted(flat, grid.astype(np.float32), side="right")) / p.shape[0]
        return cls(
            d_enc=float(np.mean(true_bit_counts)),
            thresholds=grid,
            active_counts=counts.astype(np.float64),
            n_spectra=int(p.shape[0]),
            source=source,
        )


def default_threshold_grid() -> np.ndarray:
    """Fine near 0 (where A(t) is steep) and uniform above: 0, 1e-4 … 0.01 (log), 0.01 … 1 step 0.0025."""
    low = np.geomspace(1e-4, 0.01, 41, endpoint=False)
    high = np.arange(0.01, 1.0 + 1e-9, 0.0025)
    return np.unique(np.concatenate([[0.0], low, high]).round(7))


def check_kappa(value: float, name: str) -> float:
    lo, hi = KAPPA_LIMITS
    if not (isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi):
        raise ConfigError(f"`{name}` must be a density ratio between {lo} and {hi}, got {value!r}.")
    return float(value)


def band_thresholds(cal: Calibration, kappa_min: float, kappa_max: float, groups: int) -> np.ndarray:
    """The M thresholds t_1..t_M of a density band, from t_κmax (dense) to t_κmin (sparse).

    ``groups = 1`` is the point query and needs ``kappa_min == kappa_max``.
    """
    check_kappa(kappa_min, "kappa_min")
    check_kappa(kappa_max, "kappa_max")
    if kappa_min > kappa_max:
        raise ConfigError(f"`kappa_min` ({kappa_min}) must not exceed `kappa_max` ({kappa_max}).")
    if not isinstance(groups, int) or groups < 1:
        raise ConfigError(f"`groups` (M) must be a positive integer, got {groups!r}.")
    t_dense = cal.threshold_for_kappa(kappa_max)
    t_sparse = cal.threshold_for_kappa(kappa_min)
    if groups == 1:
        if kappa_min != kappa_max:
            raise ConfigError(
                f"One query group (M=1) is a point query at a single κ, but the band is "
                f"[{kappa_min}, {kappa_max}]; set both ends to the same κ (e.g. 1.0) or use M ≥ 2."
            )
        return np.array([t_dense])
    i = np.arange(groups)
    return t_dense + i / (groups - 1) * (t_sparse - t_dense)


def threshold_query(posterior: np.ndarray, t: float) -> np.ndarray:
    """z = 1[π > t] as sorted active-bit indices."""
    return np.flatnonzero(np.asarray(posterior) > t).astype(np.int64)


@dataclass(frozen=True)
class Query:
    """One distinct fingerprint query and the threshold indices (0-based) that produced it."""

    bits: np.ndarray
    threshold_indices: tuple[int, ...]


def build_queries(posterior: np.ndarray, thresholds: Sequence[float]) -> list[Query]:
    """Threshold the posterior at every t_i and merge identical fingerprints (order of first appearance)."""
    merged: dict[bytes, tuple[np.ndarray, list[int]]] = {}
    for i, t in enumerate(thresholds):
        bits = threshold_query(posterior, float(t))
        merged.setdefault(bits.tobytes(), (bits, []))[1].append(i)
    return [Query(bits, tuple(idx)) for bits, idx in merged.values()]


def outer_band_kappas(
    rng: np.random.Generator,
    groups: int,
    kappa_min: float,
    kappa_max: float,
    kappa_range: tuple[float, float] = OUTER_KAPPA_RANGE,
) -> np.ndarray:
    """M density ratios drawn uniformly from ``[lo, κ_min) ∪ (κ_max, hi]``, the outside of the band
    within ``kappa_range = (lo, hi)``; sorted from sparse to dense."""
    lo, hi = (check_kappa(k, "kappa_range") for k in kappa_range)
    if not isinstance(groups, int) or groups < 1:
        raise ConfigError(f"`groups` (M) must be a positive integer, got {groups!r}.")
    below, above = max(kappa_min - lo, 0.0), max(hi - kappa_max, 0.0)
    if below + above <= 0:
        raise ConfigError(
            f"The band [{kappa_min}, {kappa_max}] covers the whole κ range [{lo}, {hi}], so nothing lies "
            f"outside it; widen the range (e.g. 0.5 2.0) or narrow the band."
        )
    u = rng.random(groups) * (below + above)
    return np.sort(np.where(u < below, lo + u, kappa_max + (u - below)))


@dataclass(frozen=True)
class QueryPlan:
    """The queries a spectrum's samples come from when they are not the density band of the parameters.

    Exactly one of ``thresholds`` (query ``i`` is ``1[π > t_i]``; one threshold is a point query) and
    ``fingerprint`` (one fixed query, whatever the posterior; e.g. the true fingerprint) is given. N
    samples are drawn per threshold (per fingerprint), so B = M × N with M = :attr:`groups`.
    """

    name: str = field(metadata={"help": "what the plan is, for reports (e.g. 'point', 'oracle')"})
    thresholds: tuple[float, ...] = field(default=(), metadata={"help": "posterior thresholds t_i in [0, 1]"})
    fingerprint: tuple[int, ...] | None = field(default=None, metadata={"help": "active bits of a fixed query"})
    kappas: tuple[float, ...] = field(default=(), metadata={"help": "density ratios the thresholds came from"})

    def __post_init__(self):
        ts = tuple(float(t) for t in self.thresholds)
        object.__setattr__(self, "thresholds", ts)
        object.__setattr__(self, "kappas", tuple(float(k) for k in self.kappas))
        if (self.fingerprint is None) == (not ts):
            raise ConfigError(
                f"A query plan takes either `thresholds` or a `fingerprint`, not both or neither "
                f"(plan {self.name!r})."
            )
        if any(not (math.isfinite(t) and 0.0 <= t <= 1.0) for t in ts):
            raise ConfigError(f"Thresholds must be numbers in [0, 1], got {list(ts)} (plan {self.name!r}).")
        if self.fingerprint is not None:
            bits = tuple(sorted({int(b) for b in self.fingerprint}))
            if bits and bits[0] < 0:
                raise ConfigError(f"Fingerprint bit indices must be ≥ 0, got {bits[0]} (plan {self.name!r}).")
            object.__setattr__(self, "fingerprint", bits)

    # -- constructors -----------------------------------------------------------------------------
    @classmethod
    def point(cls, threshold: float, name: str = "point") -> QueryPlan:
        """One query ``1[π > t]`` (the point-query approximation of earlier pipelines)."""
        return cls(name, thresholds=(threshold,))

    @classmethod
    def at_kappas(cls, cal: Calibration, kappas: Sequence[float], name: str) -> QueryPlan:
        """One query per density ratio, at ``t_κ = A⁻¹(κ·D_enc)``."""
        return cls(name, thresholds=tuple(cal.threshold_for_kappa(float(k)) for k in kappas),
                   kappas=tuple(float(k) for k in kappas))

    @classmethod
    def outer_band(
        cls, cal: Calibration, rng: np.random.Generator, groups: int, kappa_min: float, kappa_max: float,
        kappa_range: tuple[float, float] = OUTER_KAPPA_RANGE,
    ) -> QueryPlan:
        """Outer-band querying: M queries at κ drawn uniformly outside ``[κ_min, κ_max]`` (see
        :func:`outer_band_kappas`)."""
        return cls.at_kappas(cal, outer_band_kappas(rng, groups, kappa_min, kappa_max, kappa_range), "outer")

    @classmethod
    def oracle(cls, bits: Sequence[int] | np.ndarray, name: str = "oracle") -> QueryPlan:
        """One fixed query: the given active bits (for the true fingerprint, the decoder alone)."""
        return cls(name, fingerprint=tuple(int(b) for b in np.asarray(bits).ravel()))

    # -- use --------------------------------------------------------------------------------------
    @property
    def groups(self) -> int:
        """M: the number of threshold indices the samples are spread over."""
        return 1 if self.fingerprint is not None else len(self.thresholds)

    def queries(self, posterior: np.ndarray) -> list[Query]:
        """The distinct queries of this plan for one posterior (identical thresholded ones merged)."""
        if self.fingerprint is not None:
            return [Query(np.asarray(self.fingerprint, dtype=np.int64), (0,))]
        return build_queries(posterior, self.thresholds)

    def key(self) -> tuple:
        """Equal keys give the same queries from the same posterior (and so share samples)."""
        return (self.thresholds, self.fingerprint)

    def describe(self) -> str:
        if self.fingerprint is not None:
            return f"{self.name}: one fixed fingerprint ({len(self.fingerprint)} bits)"
        if len(self.thresholds) == 1:
            return f"{self.name}: point query at t={self.thresholds[0]:.4f}"
        return f"{self.name}: {len(self.thresholds)} thresholds {min(self.thresholds):.4f}…{max(self.thresholds):.4f}"
