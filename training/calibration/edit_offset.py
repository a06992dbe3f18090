"""The edit offset of the per-spectrum confidence (:mod:`engine.model.confidence`): how many logits a rank 1 an isomer
edit made is right less (or more) often than the drawn rank 1 of the same pool. Fitted by
:mod:`training.calibration.confidence` (``fit`` and ``fit-edits``); imports engine and numpy only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from engine.errors import ConfigError
from engine.model.confidence import EDIT_FEATURE, ConfidenceModel, logit


def fit_edit_offset(model: ConfidenceModel, rows: Sequence[dict], intercept: bool, l2: float = 1.0,
                    boots: int = 200, seed: int = 0) -> tuple[float, dict]:
    """The logits by which a rank 1 an isomer edit made is right less (or more) often than ``model`` says of the drawn
    rank 1 of the same pool: logit P(hit) = logit p_model(drawn features) + a + offset · [edited], by penalised
    maximum likelihood over the collected ``rows`` (:func:`read_collected`). ``intercept``: fit ``a`` too, for pools
    harder or easier than those ``model`` was fitted on (``fit-edits``, a shipped model kept as it is); ``a`` is
    reported, not shipped. Returns (offset, report with a 95% bootstrap interval over pools)."""
    use = [r for r in rows if r["features"] is not None]
    made = np.array([float(r["features"][EDIT_FEATURE]) for r in use])
    y = np.array([float(bool(r["hit"])) for r in use])
    if made.sum() < 20:
        raise ConfigError(f"{int(made.sum())} pools with an edited rank 1: collect more structures (--structures), "
                          "with isomer edits on, before fitting the edits' offset.")
    drawn = replace(model, edit_offset=None)
    base = np.array([logit(drawn.probability({**r["features"], EDIT_FEATURE: 0.0})) for r in use])
    Z = np.column_stack([made] + ([np.ones_like(made)] if intercept else []))
    prior = np.array([l2] + ([0.0] if intercept else []))

    def solve(idx: np.ndarray) -> np.ndarray:
        w = np.zeros(Z.shape[1])
        for _ in range(50):
            p = 1.0 / (1.0 + np.exp(-np.clip(base[idx] + Z[idx] @ w, -40, 40)))
            grad = Z[idx].T @ (p - y[idx]) + prior * w
            hess = (Z[idx] * (p * (1 - p))[:, None]).T @ Z[idx] + np.diag(prior) + 1e-9 * np.eye(len(w))
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.max(np.abs(step)) < 1e-10:
                break
        return w

    w = solve(np.arange(len(use)))
    rng = np.random.default_rng(seed)
    spread = np.array([solve(rng.integers(0, len(use), len(use)))[0] for _ in range(boots)])
    shifted = replace(model, edit_offset=float(w[0]))
    probs = np.array([shifted.probability(r["features"]) for r in use])
    report = {"pools": len(use), "edited": int(made.sum()), "edited_hits": int(y[made > 0].sum()),
              "offset": float(w[0]), "offset_95": [float(v) for v in np.percentile(spread, [2.5, 97.5])],
              "intercept": float(w[1]) if intercept else None, "l2": l2,
              "edited_mean_predicted": float(probs[made > 0].mean()), "edited_rate": float(y[made > 0].mean())}
    return float(w[0]), report
