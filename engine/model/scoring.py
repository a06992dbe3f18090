"""Scores that read the posterior: how well a candidate's own fingerprint agrees with π.

The **fingerprint score** of a candidate is the log-likelihood of its Morgan fingerprint ``y`` under
independent per-bit probabilities ``q``::

    score(y) = Σ_b  y_b · log q_b + (1 − y_b) · log(1 − q_b)

(CSI:FingerID / MSNovelist rank candidates this way). ``q`` is the posterior π recalibrated bit by
bit: ``q_b = σ(a_b · logit(π_b) + c_b)``, a Platt scaling whose slope and intercept are fitted on
out-of-fold posteriors of training spectra (:meth:`BitCalibration.fit`, shrunk towards one shared
scaling so that rare bits borrow strength), and stored in the bundle's ``calibration.json``. A
bundle without it uses π clipped to [1e-3, 1 − 1e-3].

Rankings (``QueryParams.ranking``):

=================  ==================================================================================
``fingerprint``    fingerprint score, ties by count (the default)
``frequency``      the paper's: generation count, ties by posterior similarity
``combined``       fingerprint score + log(count): the decoder's frequency as a prior over candidates
                   and the fingerprint as the likelihood of the spectrum's evidence
=================  ==================================================================================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import BundleError, ConfigError

RANKINGS = ("fingerprint", "combined", "frequency")
DEFAULT_RANKING = "fingerprint"  # the best of the three on val (docs/how_it_works.md, "Formula-constrained decoding")
EPS = 1e-3  # clip of uncalibrated probabilities (a bit the encoder is sure of can still be wrong)
_Q_CLIP = 1e-4  # clip of calibrated probabilities


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|


def _logit(p: np.ndarray, eps: float = EPS) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps)
    return np.log(p) - np.log1p(-p)


@dataclass(frozen=True)
class BitCalibration:
    """Per-bit Platt scaling of the posterior: q_b = σ(slope_b · logit(π_b) + intercept_b)."""

    slope: np.ndarray
    intercept: np.ndarray
    n_spectra: int = 0
    source: str = ""

    def __post_init__(self):
        a = np.asarray(self.slope, dtype=np.float64)
        c = np.asarray(self.intercept, dtype=np.float64)
        object.__setattr__(self, "slope", a)
        object.__setattr__(self, "intercept", c)
        if a.ndim != 1 or a.shape != c.shape or a.size == 0:
            raise ConfigError(f"`slope` and `intercept` must be 1-D arrays of one length, got {a.shape} and {c.shape}.")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(c))):
            raise ConfigError("`slope` and `intercept` must be finite numbers.")

    @property
    def n_bits(self) -> int:
        return int(self.slope.size)

    def probabilities(self, posterior: np.ndarray) -> np.ndarray:
        return np.clip(_sigmoid(self.slope * _logit(posterior) + self.intercept), _Q_CLIP, 1 - _Q_CLIP)

    def to_dict(self) -> dict:
        return {"slope": [round(float(x), 5) for x in self.slope],
                "intercept": [round(float(x), 5) for x in self.intercept],
                "n_spectra": int(self.n_spectra), "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> BitCalibration:
        try:
            return cls(np.asarray(d["slope"], dtype=np.float64), np.asarray(d["intercept"], dtype=np.float64),
                       int(d.get("n_spectra", 0)), str(d.get("source", "")))
        except (KeyError, TypeError, ValueError, ConfigError) as e:
            raise BundleError(f"calibration.json: invalid bit_calibration ({e}); re-run training.calibration.calibrate_bits.") from e

    @classmethod
    def fit(cls, posteriors: np.ndarray, targets: Sequence[np.ndarray], *, prior_strength: float = 50.0,
            iterations: int = 25, source: str = "") -> BitCalibration:
        """Fit every bit's slope and intercept by Newton's method on the log-loss.

        ``posteriors`` (n, n_bits) and ``targets`` (the true active bits of each spectrum). Each bit's
        parameters are pulled towards one shared scaling (fitted first on all bits) by a Gaussian prior
        of weight ``prior_strength`` (as many pseudo-observations), so that a bit seen active twice
        keeps the shared scaling and a frequent bit gets its own.
        """
        p = np.asarray(posteriors)
        if p.ndim != 2 or p.shape[0] != len(targets) or p.shape[0] == 0:
            raise ConfigError(f"`posteriors` {p.shape} and `targets` ({len(targets)}) must describe the same spectra.")
        n, n_bits = p.shape
        rows = np.repeat(np.arange(n), [len(t) for t in targets])
        cols = np.concatenate([np.asarray(t, dtype=np.int64) for t in targets]) if n else np.zeros(0, np.int64)

        def block(lo: int, hi: int, row_idx: np.ndarray | None = None):
            sub = p[:, lo:hi] if row_idx is None else p[row_idx, lo:hi]
            x = _logit(sub).astype(np.float32)
            y = np.zeros(x.shape, dtype=np.float32)
            keep = (cols >= lo) & (cols < hi)
            r, c = rows[keep], cols[keep] - lo
            if row_idx is not None:
                where = np.full(n, -1)
                where[row_idx] = np.arange(len(row_idx))
                r = where[r]
                c, r = c[r >= 0], r[r >= 0]
            y[r, c] = 1.0
            return x, y

        # shared scaling: one (a, c) over all bits, on up to 2,000 spectra
        sample = np.random.default_rng(0).choice(n, size=min(n, 2000), replace=False)
        a0, c0 = _newton_shared(*block(0, n_bits, np.sort(sample)), iterations)
        a = np.full(n_bits, a0)
        c = np.full(n_bits, c0)
        lam = float(prior_strength)
        for lo in range(0, n_bits, 256):  # bits in blocks: memory stays at n × 256 values
            hi = min(lo + 256, n_bits)
            x, y = block(lo, hi)
            a[lo:hi], c[lo:hi] = _newton_per_bit(x, y, a[lo:hi], c[lo:hi], a0, c0, lam, iterations)
        return cls(a, c, n_spectra=n, source=source)


def _newton_per_bit(x, y, a, c, a0, c0, lam, iterations):
    """Per-column Newton steps on the penalised log-loss of σ(a·x + c) (2×2 system per column)."""
    for _ in range(iterations):
        q = _sigmoid(a[None, :] * x + c[None, :])
        r = q - y  # gradient of the log-loss w.r.t. z
        w = q * (1 - q)
        ga = (r * x).sum(0) + lam * (a - a0)
        gc = r.sum(0) + lam * (c - c0)
        haa = (w * x * x).sum(0) + lam
        hac = (w * x).sum(0)
        hcc = w.sum(0) + lam
        det = haa * hcc - hac * hac
        da = np.clip((hcc * ga - hac * gc) / det, -2.0, 2.0)
        dc = np.clip((haa * gc - hac * ga) / det, -2.0, 2.0)
        a, c = a - da, c - dc
        if max(np.abs(da).max(), np.abs(dc).max()) < 1e-6:
            break
    return a, c


def _newton_shared(x: np.ndarray, y: np.ndarray, iterations: int) -> tuple[float, float]:
    a, c = 1.0, 0.0
    xf, yf = x.ravel().astype(np.float64), y.ravel().astype(np.float64)
    for _ in range(iterations):
        q = _sigmoid(a * xf + c)
        r, w = q - yf, q * (1 - q)
        g = np.array([(r * xf).sum(), r.sum()])
        h = np.array([[(w * xf * xf).sum(), (w * xf).sum()], [(w * xf).sum(), w.sum()]]) + 1e-9 * np.eye(2)
        step = np.clip(np.linalg.solve(h, g), -2.0, 2.0)  # damped: separable data would run away
        a, c = a - step[0], c - step[1]
        if np.abs(step).max() < 1e-8:
            break
    return float(a), float(c)


class FingerprintScorer:
    """Fingerprint scores of candidates against one spectrum's posterior (cheap per candidate)."""

    def __init__(self, posterior: np.ndarray, bit_calibration: BitCalibration | None = None):
        posterior = np.asarray(posterior, dtype=np.float64)
        if bit_calibration is not None and bit_calibration.n_bits == posterior.size:
            q = bit_calibration.probabilities(posterior)
        else:
            q = np.clip(posterior, EPS, 1 - EPS)
        log1, log0 = np.log(q), np.log1p(-q)
        self.base = float(log0.sum())  # score of the empty fingerprint
        self.gain = log1 - log0  # what each active bit adds

    def score(self, bits: np.ndarray) -> float:
        """Log-likelihood (nats) of the fingerprint with active ``bits``; higher is better."""
        bits = np.asarray(bits, dtype=np.int64)
        return self.base + float(self.gain[bits[bits < self.gain.size]].sum())


def check_ranking(name: str) -> str:
    if name not in RANKINGS:
        raise ConfigError(f"`ranking` must be one of {', '.join(RANKINGS)}, got {name!r}.")
    return name


def ranking_score(ranking: str, count: int, fingerprint_score: float, prior: float = 0.0) -> float:
    """The value candidates are sorted by (descending) under ``ranking``.

    ``prior`` is a log-odds bonus of the candidate (a structure a library holds,
    :data:`engine.elucidation.ranking.LIBRARY_PRIOR`), added to the fingerprint rankings; a structure no
    sample produced (``count`` 0, from a library) counts as generated once in ``combined`` and ranks by its
    count, last, in ``frequency``.
    """
    if ranking == "frequency":
        return float(count)
    if ranking == "fingerprint":
        return fingerprint_score + prior
    return fingerprint_score + math.log(max(count, 1)) + prior


def sort_key(ranking: str, count: int, fingerprint_score: float, similarity: float, inchikey14: str,
             prior: float = 0.0) -> tuple:
    """Sort key (ascending) of one candidate; ties end on the InChIKey for a stable order."""
    score = ranking_score(ranking, count, fingerprint_score, prior)
    if ranking == "frequency":
        return (-score, -similarity, inchikey14)
    return (-score, -count, -similarity, inchikey14)
