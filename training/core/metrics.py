"""Metrics of fingerprint posteriors (bit level) and of ranked candidate structures (pure numpy).

Bit level
---------

``posteriors`` is an ``(n, n_bits)`` array of probabilities, ``targets`` an ``(n, n_bits)`` array of
0/1 (bool, int or float); :func:`dense_targets` builds one from lists of active bit indices.

* **Tanimoto at a threshold**: per spectrum ``|P ∩ T| / |P ∪ T|`` with ``P = {b : π_b > t}`` (strictly
  above, as :func:`engine.model.querying.threshold_query` builds queries); ``0.0`` when the union is empty,
  like :func:`engine.chem.molecules.tanimoto`.
* **AUROC**: the Mann-Whitney statistic with average ranks for tied scores, i.e. the probability that a
  random positive scores above a random negative, ties counting one half.
* **Average precision (AP)**: ``sum_k (R_k - R_{k-1}) P_k`` over the distinct score values taken as
  thresholds from the highest down (tied scores enter together), as scikit-learn defines it; it is the
  area under the precision-recall step curve, not the trapezoidal one.
* **micro**: every (spectrum, bit) pair pooled into one ranking; this is the quality of one *global*
  threshold on the posterior, which is how density-band querying thresholds it. **macro**: the mean
  over bits that have both a positive and a negative among the spectra (other bits are undefined).
* **Query scores at many thresholds** (:func:`threshold_counts`, :func:`threshold_scores`): for every
  spectrum and threshold ``t`` the query ``Q = {b : π_b > t}`` against the true bits ``T``: F1
  ``2|Q∩T| / (|Q|+|T|)``, cosine ``|Q∩T| / sqrt(|Q||T|)`` and Tanimoto ``|Q∩T| / |Q∪T|`` (each 0 when
  undefined). :func:`optimal_threshold` picks the global ``t`` of a grid with the best *mean over
  spectra*: the F1- and cosine-optimal point queries of the paper's ablation.

Structure level (the paper's Appendix "Evaluation metrics"; used by ``msgpt-eval``)
-----------------------------------------------------------------------------------
Candidates come ranked, one per distinct first InChIKey block (2D structure), ties already broken by
the ranking (generation count, then posterior similarity, then InChIKey), so no tie is counted twice.

* **Top-k accuracy** (:func:`topk_exact`): the reference's first InChIKey block is among the first k
  distinct candidates (:func:`reference_rank`; a key repeated further down takes no rank).
* **Top-k Tanimoto** (:func:`topk_best`): the largest Morgan Tanimoto to the reference among the
  first k candidates; 0 without candidates.
* **Top-k close match** (:func:`topk_close_match`): some top-k candidate has RDKit topological-
  fingerprint Tanimoto ≥ 0.675 to the reference (the boundary counts).
* **Top-k MCES** (:func:`topk_min`): the smallest distance among the top k; a spectrum without
  candidates scores 100.
* **Yield** (:func:`sample_yield`): valid and formula-consistent samples as shares of all samples drawn.
* **Posterior fidelity bins** (:func:`fidelity_bin`): low ``T_c < 0.5``, mid ``0.5 ≤ T_c < 0.7``, high
  ``T_c ≥ 0.7``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.errors import ConfigError

__all__ = [
    "CLOSE_MATCH",
    "FIDELITY_BINS",
    "MCES_NO_CANDIDATES",
    "average_precision",
    "fidelity_bin",
    "optimal_threshold",
    "reference_rank",
    "sample_yield",
    "threshold_counts",
    "threshold_scores",
    "topk_best",
    "topk_close_match",
    "topk_exact",
    "topk_min",
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


# ----------------------------------------------------------------------------------------------
# Thresholded queries against the truth, at many thresholds at once


def _truth_lists(truths, n: int, n_bits: int) -> list[np.ndarray]:
    if isinstance(truths, np.ndarray) and truths.ndim == 2:
        if truths.shape != (n, n_bits):
            raise ConfigError(f"`truths` has shape {truths.shape}, expected ({n}, {n_bits}).")
        return [np.flatnonzero(row) for row in truths.astype(bool)]
    if len(truths) != n:
        raise ConfigError(f"`truths` has {len(truths)} entries for {n} posteriors.")
    return [np.unique(np.asarray(t, dtype=np.int64)) for t in truths]


def threshold_counts(posteriors: np.ndarray, truths, thresholds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(|Q∩T|, |Q|)`` as ``int (n, G)`` arrays and ``|T|`` as ``int (n,)``, for ``Q = {b : π_b > t}``.

    ``truths``: per spectrum the true active bit indices (or an ``(n, n_bits)`` 0/1 array). The
    comparison is made in the posterior's dtype, as :func:`engine.model.querying.threshold_query` does for a
    float32 posterior. One sort per spectrum, then a binary search per threshold.
    """
    p = np.asarray(posteriors)
    if p.ndim != 2:
        raise ConfigError(f"`posteriors` must be a 2-D array (n, n_bits), got shape {p.shape}.")
    n, d = p.shape
    truth = _truth_lists(truths, n, d)
    t = np.asarray(thresholds, dtype=np.float64).ravel().astype(p.dtype)
    inter = np.zeros((n, t.size), dtype=np.int64)
    n_pred = np.zeros((n, t.size), dtype=np.int64)
    n_true = np.array([len(x) for x in truth], dtype=np.int64)
    for i in range(n):
        order = np.argsort(p[i], kind="stable")
        values = p[i][order]
        is_true = np.zeros(d, dtype=bool)
        is_true[truth[i]] = True
        cum_true = np.r_[0, np.cumsum(is_true[order])]  # true bits among the smallest k values
        at_or_below = np.searchsorted(values, t, side="right")  # values <= t
        n_pred[i] = d - at_or_below
        inter[i] = n_true[i] - cum_true[at_or_below]
    return inter, n_pred, n_true


def threshold_scores(posteriors: np.ndarray, truths, thresholds) -> dict[str, np.ndarray]:
    """Per-spectrum ``f1``, ``cosine`` and ``tanimoto`` (``float (n, G)``) and ``active_bits`` (``int (n, G)``)
    of the query ``π > t`` at each threshold; a score is 0 where it is undefined (empty sets)."""
    inter, n_pred, n_true = threshold_counts(posteriors, truths, thresholds)
    inter_f, pred_f, true_f = inter.astype(np.float64), n_pred.astype(np.float64), n_true[:, None].astype(np.float64)
    zeros = np.zeros_like(inter_f)
    union = pred_f + true_f - inter_f
    return {
        "f1": np.divide(2 * inter_f, pred_f + true_f, out=zeros.copy(), where=(pred_f + true_f) > 0),
        "cosine": np.divide(inter_f, np.sqrt(pred_f * true_f), out=zeros.copy(), where=(pred_f * true_f) > 0),
        "tanimoto": np.divide(inter_f, union, out=zeros.copy(), where=union > 0),
        "active_bits": n_pred,
    }


def optimal_threshold(posteriors: np.ndarray, truths, grid, score: str) -> tuple[float, float]:
    """The threshold of ``grid`` whose query ``π > t`` has the best mean ``score`` ('f1', 'cosine' or
    'tanimoto') over spectra, and that mean; ties go to the first (lowest) grid value."""
    if score not in ("f1", "cosine", "tanimoto"):
        raise ConfigError(f"`score` must be 'f1', 'cosine' or 'tanimoto', got {score!r}.")
    g = np.asarray(grid, dtype=np.float64).ravel()
    if g.size == 0:
        raise ConfigError("`grid` of thresholds is empty.")
    means = threshold_scores(posteriors, truths, g)[score].mean(axis=0)
    best = int(np.argmax(means))
    return float(g[best]), float(means[best])


# ----------------------------------------------------------------------------------------------
# Structure level: ranked candidates against the reference structure

CLOSE_MATCH = 0.675  # RDKit topological-fingerprint Tanimoto of a close match (paper, after FRIGID)
FIDELITY_BINS = (("low", 0.0, 0.5), ("mid", 0.5, 0.7), ("high", 0.7, float("inf")))
MCES_NO_CANDIDATES = 100.0  # MCES of a spectrum without candidates (the DiffMS configuration)


def reference_rank(candidate_keys: Sequence[str], reference_key: str | None) -> int | None:
    """1-based rank of ``reference_key`` among the *distinct* keys in order (None when absent or no reference).

    Keys are first InChIKey blocks; a key seen before takes no new rank, so duplicates cannot push the
    reference down.
    """
    if not reference_key:
        return None
    seen: set[str] = set()
    for key in candidate_keys:
        if key in seen:
            continue
        seen.add(key)
        if key == reference_key:
            return len(seen)
    return None


def topk_exact(rank: int | None, k: int) -> bool:
    """The reference is among the top k (``rank`` 1-based; None = absent)."""
    _check_k(k)
    return rank is not None and rank <= k


def topk_best(scores: Sequence[float], k: int, empty: float = 0.0) -> float:
    """The largest of the first ``k`` scores (candidates in rank order); ``empty`` without candidates."""
    _check_k(k)
    return float(max(scores[:k], default=empty))


def topk_min(distances: Sequence[float], k: int, empty: float = MCES_NO_CANDIDATES) -> float:
    """The smallest of the first ``k`` distances; ``empty`` (100) without candidates."""
    _check_k(k)
    return float(min(distances[:k], default=empty))


def topk_close_match(topological: Sequence[float], k: int, threshold: float = CLOSE_MATCH) -> bool:
    """Some top-k candidate has topological Tanimoto ≥ ``threshold`` to the reference."""
    return topk_best(topological, k, empty=-1.0) >= threshold


def sample_yield(n_samples: Sequence[int], n_valid: Sequence[int], n_formula_consistent: Sequence[int]) -> tuple[float, float]:
    """(valid, formula-consistent) samples as shares of all samples, pooled over spectra (0 without samples)."""
    total = float(np.sum(n_samples))
    if total <= 0:
        return 0.0, 0.0
    return float(np.sum(n_valid)) / total, float(np.sum(n_formula_consistent)) / total


def fidelity_bin(fidelity: float) -> str:
    """'low' (T_c < 0.5), 'mid' (0.5 ≤ T_c < 0.7) or 'high' (T_c ≥ 0.7): the paper's posterior-fidelity bins."""
    if not (isinstance(fidelity, (int, float, np.floating)) and 0.0 <= fidelity <= 1.0):
        raise ConfigError(f"Posterior fidelity is a Tanimoto similarity in [0, 1], got {fidelity!r}.")
    for name, lo, hi in FIDELITY_BINS:
        if lo <= fidelity < hi:
            return name
    raise AssertionError("unreachable")  # pragma: no cover


def _check_k(k: int) -> None:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"`k` must be a positive integer, got {k!r}.")
