"""Bit-level metrics of fingerprint posteriors against the true fingerprints (pure numpy).

``posteriors`` is an ``(n, n_bits)`` array of probabilities, ``targets`` an ``(n, n_bits)`` array of
0/1 (bool, int or float); :func:`dense_targets` builds one from lists of active bit indices.

* **Tanimoto at a threshold**: per spectrum ``|P ∩ T| / |P ∪ T|`` with ``P = {b : π_b > t}`` (strictly
  above, as :func:`engine.querying.threshold_query` builds queries); ``0.0`` when the union is empty,
  like :func:`engine.chem.tanimoto`.
* **AUROC**: the Mann-Whitney statistic with average ranks for tied scores, i.e. the probability that a
  random positive scores above a random negative, ties counting one half.
* **Average precision (AP)**: ``sum_k (R_k - R_{k-1}) P_k`` over the distinct score values taken as
  thresholds from the highest down (tied scores enter together), as scikit-learn defines it; it is the
  area under the precision-recall step curve, not the trapezoidal one.
* **micro**: every (spectrum, bit) pair pooled into one ranking; this is the quality of one *global*
  threshold on the posterior, which is how density-band querying thresholds it. **macro**: the mean
  over bits that have both a positive and a negative among the spectra (other bits are undefined).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.errors import ConfigError

__all__ = [
    "average_precision",
    "auroc",
    "bit_metrics",
    "dense_targets",
    "density_matched_threshold",
    "macro_average_precision",
    "macro_auroc",
    "mean_active_bits",
    "mean_tanimoto",
    "tanimoto_at",
]


def _check_pair(posteriors: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(posteriors)
    y = np.asarray(targets)
    if p.ndim != 2 or p.shape != y.shape:
        raise ConfigError(
            f"`posteriors` and `targets` must be 2-D arrays of the same shape (n, n_bits), got {p.shape} "
            f"and {y.shape}."
        )
    return p, y.astype(bool, copy=False)


def dense_targets(bit_lists: Sequence[np.ndarray], n_bits: int) -> np.ndarray:
    """``(n, n_bits)`` bool array with ``True`` at each list's active bit indices."""
    out = np.zeros((len(bit_lists), n_bits), dtype=bool)
    for i, bits in enumerate(bit_lists):
        out[i, np.asarray(bits, dtype=np.int64)] = True
    return out


# ----------------------------------------------------------------------------------------------
# Thresholded fingerprints


def tanimoto_at(posteriors: np.ndarray, targets: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """Per-spectrum Tanimoto similarity (``float64 (n,)``) of ``π > threshold`` to the true bits."""
    p, y = _check_pair(posteriors, targets)
    pred = p > threshold  # (n, n_bits)
    common = np.count_nonzero(pred & y, axis=1)
    union = np.count_nonzero(pred | y, axis=1)
    return np.divide(common, union, out=np.zeros(len(p)), where=union > 0)


def mean_tanimoto(posteriors: np.ndarray, targets: np.ndarray, threshold: float = 0.5) -> float:
    """Mean of :func:`tanimoto_at` over spectra."""
    return float(tanimoto_at(posteriors, targets, threshold).mean())


def mean_active_bits(posteriors: np.ndarray, threshold: float = 0.5) -> float:
    """Mean number of bits with ``π > threshold`` per spectrum (for targets: pass them with 0.5)."""
    p = np.asarray(posteriors)
    if p.ndim != 2:
        raise ConfigError(f"`posteriors` must be a 2-D array (n, n_bits), got shape {p.shape}.")
    return float(np.count_nonzero(p > threshold, axis=1).mean())


def density_matched_threshold(posteriors: np.ndarray, mean_active: float) -> float:
    """The global threshold ``t`` at which ``π > t`` keeps ``mean_active`` bits per spectrum on average.

    It is the ``round(n * mean_active)``-th largest posterior value, lowered by one ulp so that value is
    kept; κ = 1 of density-band calibration, measured on these spectra themselves. Ties may keep more.
    """
    p = np.asarray(posteriors, dtype=np.float64).ravel()
    k = int(round(np.asarray(posteriors).shape[0] * mean_active))
    if k <= 0:
        return 1.0
    if k >= p.size:
        return 0.0
    kth = np.partition(p, p.size - k)[p.size - k]  # k-th largest
    return float(np.nextafter(kth, -np.inf))


# ----------------------------------------------------------------------------------------------
# Ranking metrics of one binary problem


def _binary(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if s.shape != y.shape:
        raise ConfigError(f"`scores` has {s.size} values but `labels` has {y.size}.")
    if not np.all(np.isfinite(s)):
        raise ConfigError("`scores` contain NaN or infinite values.")
    return s, y


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (ties count 1/2); NaN when only one class is present."""
    s, y = _binary(scores, labels)
    n_pos = int(np.count_nonzero(y))
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="stable")
    sorted_s = s[order]
    # Average 1-based rank of each run of equal scores.
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], s.size]  # exclusive
    run_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.repeat(run_rank, ends - starts)  # rank of each sorted position
    rank_sum = float(ranks[y[order]].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """Average precision (scikit-learn's step-wise definition); NaN without positives."""
    s, y = _binary(scores, labels)
    n_pos = int(np.count_nonzero(y))
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-s, kind="stable")
    sorted_s, sorted_y = s[order], y[order]
    last_of_run = np.flatnonzero(np.r_[sorted_s[1:] != sorted_s[:-1], True])  # each distinct threshold
    tp = np.cumsum(sorted_y)[last_of_run]
    precision = tp / (last_of_run + 1.0)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _per_bit(metric, posteriors: np.ndarray, targets: np.ndarray) -> tuple[float, int]:
    p, y = _check_pair(posteriors, targets)
    n_pos = np.count_nonzero(y, axis=0)
    both = np.flatnonzero((n_pos > 0) & (n_pos < len(y)))
    if both.size == 0:
        return float("nan"), 0
    values = [metric(p[:, b], y[:, b]) for b in both]
    return float(np.mean(values)), int(both.size)


def macro_auroc(posteriors: np.ndarray, targets: np.ndarray) -> float:
    """Mean AUROC over bits that are on in some spectra and off in others (NaN if none is)."""
    return _per_bit(auroc, posteriors, targets)[0]


def macro_average_precision(posteriors: np.ndarray, targets: np.ndarray) -> float:
    """Mean AP over bits that are on in some spectra and off in others (NaN if none is)."""
    return _per_bit(average_precision, posteriors, targets)[0]


# ----------------------------------------------------------------------------------------------
# All of them


def bit_metrics(
    posteriors: np.ndarray, targets: np.ndarray, threshold: float = 0.5, *, macro: bool = True
) -> dict[str, float]:
    """The encoder's validation metrics in one dict (keys below); ``macro=False`` skips the per-bit loop.

    ``tanimoto`` (mean, at ``threshold``), ``auroc_micro``, ``ap_micro``, ``auroc_macro``, ``ap_macro``,
    ``n_bits_macro`` (bits with both classes), ``active_bits_pred`` (mean ``π > threshold`` per spectrum),
    ``active_bits_true``, ``n_spectra``.
    """
    p, y = _check_pair(posteriors, targets)
    out = {
        "tanimoto": mean_tanimoto(p, y, threshold),
        "auroc_micro": auroc(p, y),
        "ap_micro": average_precision(p, y),
        "active_bits_pred": mean_active_bits(p, threshold),
        "active_bits_true": float(np.count_nonzero(y, axis=1).mean()),
        "n_spectra": int(len(p)),
        "threshold": float(threshold),
    }
    if macro:
        out["auroc_macro"], out["n_bits_macro"] = _per_bit(auroc, p, y)
        out["ap_macro"] = _per_bit(average_precision, p, y)[0]
    return out
