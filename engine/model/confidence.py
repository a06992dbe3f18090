"""How likely the rank-1 candidate of a spectrum is the right structure: a calibrated probability.

A chemist with a few hundred spectra needs to know which answers to look at first. Each result gets
``confidence`` = P(rank-1 is the true structure, by first InChIKey block), from a logistic model over a
few numbers read off the ranked pool (:func:`confidence_features`):

``top_share``       share of the B samples that are the rank-1 candidate (the decoder keeps writing it)
``max_share``       share of the most-drawn of the ten best candidates
``agreement``       1 when the rank-1 candidate is also the most-drawn of the ten best, else 0
``score_gap``       fingerprint-score lead of rank 1 over rank 2 (log-likelihood under π; capped at 20)
``log_candidates``  log of the number of distinct formula-consistent candidates (a spread-out pool)
``yield``           formula-consistent samples / samples drawn

The six describe the pool as drawn (the isomer edits left out), and :func:`result_features` adds ``edited``: 1 when
an isomer edit (:mod:`engine.elucidation.edits`) made rank 1 and no sample drew it. An edited rank 1 is right less
often than a drawn one of the same pool; a model with an ``edit_offset`` gives it the drawn rank 1's probability
shifted by that many logits (fitted on pools with edits, :mod:`training.calibration.confidence`), a model without one
gives it none (:func:`why_no_confidence`).

The model is fitted by :mod:`training.calibration.confidence` on FOLD=train spectra whose posteriors come from
encoders that never saw their structures (out-of-fold), so it sees the misses a new compound gives; a
bundle ships it as ``confidence.json``. A spectrum without candidates gets 0. The probability belongs
to the settings it was fitted with (the κ band, B = 100, formula-constrained decoding, fingerprint
ranking); :meth:`ConfidenceModel.applies_to` says whether a result's settings match, and the app and
CLI leave the value empty when they do not.

A logistic model over these features overpredicts at its top end (its reliability curve is S-shaped), so
the fit may add a monotone **recalibration**: knots of an isotonic map from the logistic's probability to
the rate observed on cross-fitted training pools, read by linear interpolation (:func:`isotonic_knots`).

A rank 1 that a reference spectrum identifies gets the identification's confidence instead
(:func:`identification_confidence`): the same kind of model over the identity search's
:data:`engine.spectral_library.identity.IDENTITY_FEATURES`, fitted by :mod:`training.calibration.identity_confidence`
on leave-one-lab-out identity searches and shipped beside the spectral library
(``resources/spectral_library/confidence.json``, :func:`identity_model`; a user's library may carry its own,
``msgpt calibrate-library``). A rank 1 from a suspect list gets the suspect model's
(:mod:`engine.model.suspect_confidence`, ``suspect_confidence.json`` in the bundle, fitted by
:mod:`training.calibration.suspect_confidence`): how its fragments, analog and fingerprint evidence set it apart
from the list's other structures of its formula.

Plain JSON (weights, feature means and scales, knots); no pickle, no scikit-learn at run time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.errors import BundleError
from engine.model.suspect_confidence import (
    MEASURED_FEATURES,
    PRESENT_DEFAULT,
    level_2b_probability,
    suspect_features,
    suspect_probability,
    suspect_rank1,
    why_no_suspect_features,
)
from engine.spectral_library.identity import (
    IDENTITY_FEATURES,
    confidence_path,
    identity_features,
)
from engine.timing import staged

FEATURES = ("top_share", "max_share", "agreement", "score_gap", "log_candidates", "yield")
EDIT_FEATURE = "edited"  # rank 1 made by an isomer edit (module docstring)
SCORE_GAP_CAP = 20.0
FORMAT = "msgpt-confidence"


def confidence_features(counts: Sequence[int], fingerprint_scores: Sequence[float], n_samples: int,
                        n_formula_consistent: int, n_candidates: int) -> dict[str, float] | None:
    """The features of one ranked pool, from its ten best candidates' counts and fingerprint scores (in
    rank order), the samples drawn, the formula-consistent ones and the distinct candidates; None when
    the pool has no candidate."""
    counts = [int(c) for c in list(counts)[:10]]
    if not counts or n_candidates <= 0 or n_samples <= 0:
        return None
    scores = [float(s) for s in list(fingerprint_scores)[:2]]
    if len(scores) >= 2 and all(math.isfinite(s) for s in scores):
        gap = min(scores[0] - scores[1], SCORE_GAP_CAP)
    else:
        gap = SCORE_GAP_CAP if len(scores) == 1 and n_candidates == 1 else 0.0
    return {
        "top_share": counts[0] / n_samples,
        "max_share": max(counts) / n_samples,
        "agreement": float(counts[0] == max(counts)),
        "score_gap": float(gap),
        "log_candidates": math.log(n_candidates),
        "yield": n_formula_consistent / n_samples,
    }


def made_by_edit(candidate) -> bool:
    """A candidate no sample drew that an isomer edit made (:mod:`engine.elucidation.edits`)."""
    return bool(getattr(candidate, "edited_from", "")) and candidate.count == 0


def result_features(result) -> dict[str, float] | None:
    """:func:`confidence_features` of an :class:`engine.elucidation.pipeline.SpectrumResult`, read off its candidates
    as drawn (the isomer edits left out: the pool the decoder wrote), and ``edited``: whether an edit made rank 1."""
    drawn = [c for c in result.candidates if not made_by_edit(c)]
    best = drawn[:10]
    features = confidence_features([c.count for c in best], [c.fingerprint_score for c in best], result.n_samples,
                                   result.n_formula_consistent, len(drawn))
    if features is not None:
        features[EDIT_FEATURE] = float(made_by_edit(result.candidates[0]))
    return features


@dataclass(frozen=True)
class ConfidenceModel:
    """P(rank 1 is right) = sigmoid(bias + weights · (x - mean) / scale)."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    features: tuple[str, ...] = FEATURES
    settings: dict = field(default_factory=dict)  # what the fit's pools were drawn with (see applies_to)
    meta: dict = field(default_factory=dict)  # fit data and held-out numbers, for the model card
    # knots (logistic probability, calibrated probability) of a monotone map applied last; () = none
    recalibration: tuple[tuple[float, ...], tuple[float, ...]] = ()
    # logits added to the probability of a rank 1 an isomer edit made (features["edited"]); None: it gets none
    edit_offset: float | None = None

    def __post_init__(self):
        n = len(self.features)
        if not (len(self.weights) == len(self.mean) == len(self.scale) == n):
            raise BundleError(f"confidence model: {len(self.weights)} weights, {len(self.mean)} means and "
                              f"{len(self.scale)} scales for {n} features; refit it with `python -m training.calibration.confidence`.")
        known = FEATURES + IDENTITY_FEATURES + MEASURED_FEATURES
        unknown = [f for f in self.features if f not in known]
        if unknown:
            raise BundleError(f"confidence model reads unknown features {unknown}; this version knows {list(known)}.")
        if self.recalibration:
            xs, ys = (np.asarray(v, float) for v in self.recalibration)
            if (len(xs) != len(ys) or len(xs) < 2 or np.any(np.diff(xs) <= 0) or np.any(np.diff(ys) < 0)
                    or xs.min() < 0 or xs.max() > 1 or ys.min() < 0 or ys.max() > 1):
                raise BundleError("confidence model: its recalibration needs at least two knots with increasing "
                                  "probabilities in [0, 1] and non-decreasing values in [0, 1]; refit it.")

    def probability(self, features: dict[str, float] | None) -> float:
        """The calibrated probability (0 for a pool without candidates), shifted by ``edit_offset`` when an isomer
        edit made rank 1 (``features["edited"]``)."""
        if features is None:
            return 0.0
        x = (np.array([features[f] for f in self.features]) - np.array(self.mean)) / np.array(self.scale)
        p = self.recalibrate(_sigmoid(float(self.bias + np.dot(self.weights, x))))
        if features.get(EDIT_FEATURE) and self.edit_offset is not None:
            p = _sigmoid(logit(p) + self.edit_offset)
        return p

    def recalibrate(self, p: float) -> float:
        """The recalibration map at the logistic's probability ``p`` (``p`` itself without one)."""
        if not self.recalibration:
            return p
        return float(np.interp(p, self.recalibration[0], self.recalibration[1]))

    def applies_to(self, params, adapter: bool = False) -> bool:
        """Whether a result drawn with :class:`engine.elucidation.pipeline.QueryParams` ``params`` (the bundle's adapter
        ``adapter`` on or off) matches the fit's settings."""
        return not self.differing_settings(params, adapter)

    def differing_settings(self, params, adapter: bool = False) -> set[str]:
        """The settings of the fit (QueryParams field names, or ``adapter``) that ``params`` do not match."""
        differ = set()
        for name, value in self.settings.items():
            have = adapter if name == "adapter" else getattr(params, name, None)
            if isinstance(value, float) and isinstance(have, (int, float)):
                if not math.isclose(float(have), value, rel_tol=1e-9, abs_tol=1e-12):
                    differ.add(name)
            elif have != value:
                differ.add(name)
        return differ

    def to_json(self) -> dict:
        d = {"format": FORMAT, "version": 2 if self.recalibration else 1, "features": list(self.features),
             "weights": list(self.weights), "bias": self.bias, "mean": list(self.mean), "scale": list(self.scale),
             "settings": self.settings, "meta": self.meta}
        if self.recalibration:
            d["recalibration"] = {"p": list(self.recalibration[0]), "calibrated": list(self.recalibration[1])}
        if self.edit_offset is not None:  # read by versions that know it; older ones give an edited rank 1 none
            d["edit_offset"] = self.edit_offset
        return d

    @classmethod
    def from_json(cls, d: dict) -> ConfidenceModel:
        if d.get("format") != FORMAT or d.get("version") not in (1, 2):
            raise BundleError(f"not a version-1 or -2 confidence model (format {d.get('format')!r}, version "
                              f"{d.get('version')!r}); refit it with `python -m training.calibration.confidence fit`.")
        try:
            knots = d.get("recalibration") or {}
            recalibration = ((tuple(float(v) for v in knots["p"]), tuple(float(v) for v in knots["calibrated"]))
                             if knots else ())
            if d["version"] == 2 and not recalibration:
                raise ValueError("version 2 without its recalibration")
            offset = d.get("edit_offset")
            return cls(tuple(float(w) for w in d["weights"]), float(d["bias"]), tuple(float(m) for m in d["mean"]),
                       tuple(float(s) for s in d["scale"]), tuple(d["features"]), dict(d.get("settings", {})),
                       dict(d.get("meta", {})), recalibration, None if offset is None else float(offset))
        except (KeyError, TypeError, ValueError) as e:
            raise BundleError(f"confidence model: missing or bad field ({e}); refit it.") from e

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> ConfidenceModel:
        path = Path(path)
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as e:
            raise BundleError(f"{path}: cannot read the confidence model ({e}).") from e
        except BundleError as e:
            raise BundleError(f"{path}: {e}") from e


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def logit(p: float, eps: float = 1e-6) -> float:
    """log(p / (1 - p)), with ``p`` kept within [eps, 1 - eps]."""
    p = min(max(p, eps), 1.0 - eps)
    return math.log(p / (1.0 - p))


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = 1.0, iters: int = 50) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """L2-penalised logistic regression by Newton's method on standardised ``X`` (n, d) and labels ``y``
    (n,) in {0, 1}: returns (weights, bias, mean, scale). The bias is not penalised."""
    X = np.asarray(X, np.float64)
    y = np.asarray(y, np.float64)
    mean = X.mean(0)
    scale = X.std(0)
    scale[scale < 1e-9] = 1.0
    Z = np.hstack([(X - mean) / scale, np.ones((len(X), 1))])
    w = np.zeros(Z.shape[1])
    prior = np.full(Z.shape[1], l2)
    prior[-1] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(Z @ w, -40, 40)))
        grad = Z.T @ (p - y) + prior * w
        hess = (Z * (p * (1 - p))[:, None]).T @ Z + np.diag(prior) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return w[:-1], float(w[-1]), mean, scale


def isotonic_knots(probs: Sequence[float], hits: Sequence[bool], prior: float = 5.0, min_count: int = 20,
                   ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Knots of a monotone map from predicted probabilities to observed rates (pool-adjacent-violators).

    Each block of the isotonic fit becomes one knot at its mean prediction. A block of fewer than
    ``min_count`` spectra is joined to its neighbour (the lower one; the first block to the next), so
    that no knot rests on a handful of pools (the isotonic fit's extreme blocks are often one or two).
    Its value is the block's hit rate pulled towards that mean prediction by ``prior`` pseudo-spectra, so
    that a block without a hit does not say 0. Read with linear interpolation.
    """
    x = np.asarray(probs, float)
    y = np.asarray(hits, float)
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"isotonic_knots: {len(x)} probabilities for {len(y)} labels")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    # blocks: [sum of x, sum of y, count]; equal predictions start in one block
    blocks: list[list[float]] = []
    for xi, yi in zip(x, y):
        if blocks and blocks[-1][0] / blocks[-1][2] == xi:
            blocks[-1][0] += xi
            blocks[-1][1] += yi
            blocks[-1][2] += 1
        else:
            blocks.append([xi, yi, 1.0])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            last = blocks.pop()
            for k in range(3):
                blocks[-1][k] += last[k]
    i = 0
    while len(blocks) > 1 and i < len(blocks):
        if blocks[i][2] >= min_count:
            i += 1
            continue
        j = i - 1 if i > 0 else 1  # joining adjacent blocks of a monotone sequence keeps it monotone
        lo, hi = min(i, j), max(i, j)
        blocks[lo] = [a + b for a, b in zip(blocks[lo], blocks[hi])]
        del blocks[hi]
        i = lo
    knots_x = np.array([b[0] / b[2] for b in blocks])
    knots_y = np.array([(b[1] + prior * b[0] / b[2]) / (b[2] + prior) for b in blocks])
    knots_y = np.maximum.accumulate(np.clip(knots_y, 0.0, 1.0))
    knots_x, knots_y = np.round(knots_x, 6), np.round(knots_y, 6)
    keep = np.r_[True, np.diff(knots_x) > 0]  # rounding may join two knots: keep the first
    knots_x, knots_y = knots_x[keep], knots_y[keep]
    if len(knots_x) == 1:  # one block: a flat map
        knots_x = np.array([0.0, 1.0])
        knots_y = np.repeat(knots_y, 2)
    return tuple(float(v) for v in knots_x), tuple(float(v) for v in knots_y)


def reliability(probs: Sequence[float], hits: Sequence[bool], bins: Sequence[float] = (0, 0.05, 0.1, 0.2, 0.4, 1.0)) -> dict:
    """Reliability table (per probability bin: count, mean predicted, observed rate), expected calibration
    error (count-weighted |predicted - observed|), Brier score, and the Brier score of always predicting the
    base rate."""
    p = np.asarray(probs, np.float64)
    h = np.asarray(hits, np.float64)
    edges = np.asarray(bins, np.float64)
    rows = []
    ece = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (p >= lo) & ((p < hi) if hi < edges[-1] else (p <= hi))
        if sel.any():
            rows.append({"bin": [float(lo), float(hi)], "n": int(sel.sum()), "predicted": float(p[sel].mean()),
                         "observed": float(h[sel].mean())})
            ece += sel.sum() * abs(p[sel].mean() - h[sel].mean())
    n = max(len(p), 1)
    base = float(h.mean()) if len(h) else 0.0
    top = np.argsort(-p, kind="stable")[: max(1, len(p) // 10)]
    return {"n": len(p), "hits": int(h.sum()), "base_rate": base, "mean_predicted": float(p.mean()) if len(p) else 0.0,
            "ece": ece / n, "brier": float(np.mean((p - h) ** 2)) if len(p) else 0.0,
            "brier_base_rate": float(np.mean((base - h) ** 2)) if len(p) else 0.0, "auroc": auroc(p, h),
            "top_decile_rate": float(h[top].mean()) if len(p) else 0.0, "bins": rows}


def auroc(scores: Sequence[float], hits: Sequence[bool]) -> float | None:
    """Area under the ROC curve (ties count half; Mann-Whitney), None without both classes."""
    s = np.asarray(scores, np.float64)
    h = np.asarray(hits, bool)
    n1, n0 = int(h.sum()), int((~h).sum())
    if n1 == 0 or n0 == 0:
        return None
    order = np.argsort(s, kind="stable")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[h].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


@staged("confidence")
def spectrum_confidence(bundle, result, present: float | None = None) -> float | None:
    """The confidence of a finished :class:`engine.elucidation.pipeline.SpectrumResult`, or None when
    :func:`why_no_confidence` has a reason (no confidence model, other settings than the fit's, an ion mode the
    fit saw none of, ...).

    For a rank 1 a reference spectrum identifies it is the identification's confidence
    (:func:`engine.spectral_library.identity.identification_confidence`: its reference match, the isomers near it,
    fitted on leave-one-lab-out identity searches), whatever the pool. For a rank 1 from a suspect list it is the
    suspect model's (:mod:`engine.model.suspect_confidence`), whether samples were drawn or not, for the share of
    the list's formula matches that are its compounds ``present`` (default: the result's
    ``params.suspects_present``).

    For a formula taken from the ranked formula candidates (``formula_source`` "ranked candidates", an
    LC-MS feature without a given formula) it is P(formula) x P(rank 1 right | formula): the structure can
    only be right when the formula is.
    """
    if why_no_confidence(bundle, result):
        return None
    if _identified_first(result):
        return identification_confidence(result.spectral_matches)
    if suspect_rank1(result):
        if present is None:
            present = getattr(result.params, "suspects_present", PRESENT_DEFAULT)
        p = suspect_probability(bundle.suspect_confidence, suspect_features(bundle, result), present)
    else:
        p = bundle.confidence.probability(result_features(result))
    md = result.spectrum.metadata
    if md.get("formula_source") == "ranked candidates" and md.get("formula_score") not in (None, ""):
        p *= min(max(float(md["formula_score"]), 0.0), 1.0)
    return p


def with_confidence(bundle, result):
    """``result`` with its :func:`spectrum_confidence` and, for a rank 1 from a suspect list whose confidence at an
    even share of the list's matches present (:data:`engine.model.suspect_confidence.PRESENT_DEFAULT`, whatever the
    user states: the evidence decides the level) reaches the suspect model's level-2b probability
    (:func:`engine.model.suspect_confidence.level_2b_probability`), ``level_2b`` set; ``result`` itself when it gets
    no confidence."""
    p = spectrum_confidence(bundle, result)
    if p is None:
        return result
    probable = False
    if suspect_rank1(result):
        even = p if getattr(result.params, "suspects_present", PRESENT_DEFAULT) == PRESENT_DEFAULT else \
            spectrum_confidence(bundle, result, PRESENT_DEFAULT)
        probable = even >= level_2b_probability(bundle.suspect_confidence)
    return replace(result, confidence=p, level_2b=probable)


def why_no_confidence(bundle, result) -> str:
    """Why :func:`spectrum_confidence` gives ``result`` (drawn with ``bundle``) no confidence, in one sentence a
    chemist can act on; "" when it gives one. The checks, in order: a rank 1 a reference spectrum identifies (its
    confidence is the identification's: "" unless none ships beside the spectral library or the result lacks the
    search's hits); a rank 1 from a suspect list (its own checks, :func:`_why_no_suspect_confidence`); library
    structures ranked without samples; a rank 1 made by an isomer edit; an ion type run by a chemical mapping (not
    measured); a confidence model at all; a finished run
    of the κ band's queries; an ion mode the fit saw (``meta["polarities"]``, positive when absent); the fit's
    settings (κ band, M, N, decoding, ranking, sampling, adapter); a known probability of a ranked formula."""
    if _identified_first(result):
        matches = result.spectral_matches
        if identity_features(matches) is None:
            return "rank 1 is identified by a reference spectrum, but this result does not keep the search's hits"
        own = matches.calibration_file(matches.hits[0].library)
        if identity_model(own) is None:
            return (f"rank 1 is identified by a reference spectrum, and no confidence of identifications ships beside "
                    f"the spectral library ({own or confidence_path()})")
        return ""
    if suspect_rank1(result):
        return _why_no_suspect_confidence(bundle, result)
    if result.n_samples == 0 and not result.partial:
        return "no candidate was drawn: these are library structures of a formula only a library proposes"
    model = getattr(bundle, "confidence", None)
    if result.candidates and made_by_edit(result.candidates[0]) and model is not None and model.edit_offset is None:
        return ("rank 1 was made by an isomer edit of a drawn candidate, not drawn itself: this confidence model "
                "describes drawn candidates, and how often an edited rank 1 is right was not measured for it "
                "(`python -m training.calibration.confidence fit-edits` measures it)")
    if getattr(result, "ion_mapping", ""):
        return (f"its ion type {result.spectrum.adduct} runs by a chemical mapping ({result.ion_mapping}): the "
                f"confidence model was fitted on the ion types the model runs natively, and how often a mapped "
                f"rank 1 is right was not measured for it (docs/ion_types.md)")
    if model is None:
        return "this model ships no confidence model (confidence.json)"
    if result.partial:
        return "the run is not finished"
    if result.plan is not None:
        return "these candidates were drawn with a query plan of their own; it holds only for the κ band's queries"
    fitted_modes = model.meta.get("polarities", ["positive"])
    polarity = result.spectrum.polarity or "positive"
    if polarity not in fitted_modes:
        return f"it was fitted on {' and '.join(fitted_modes)}-mode spectra only, this one is {polarity}"
    adapter = bool(getattr(bundle, "has_adapter", False) and result.params.use_adapter)
    differ = model.differing_settings(result.params, adapter)
    have = {name: adapter if name == "adapter" else getattr(result.params, name, None) for name in model.settings}
    if _pool(model.settings) != _pool(have):
        differ.add("pool")
    if differ:
        fitted, now = _describe(model.settings, differ), _describe(have, differ)
        return (f"it holds only for the settings it was fitted with, {', '.join(fitted)}; these candidates were "
                f"ranked with {', '.join(now)} (set {'it' if len(fitted) == 1 else 'them'} back to see it)")
    md = result.spectrum.metadata
    if md.get("formula_source") == "ranked candidates" and md.get("formula_score") not in (None, ""):
        try:
            float(md["formula_score"])
        except (TypeError, ValueError):
            return "the probability of the formula these candidates were drawn for is not known"
    return ""


def _why_no_suspect_confidence(bundle, result) -> str:
    """:func:`why_no_confidence` for a rank 1 from a suspect list: a suspect model in the bundle, a finished run, a
    native ion type, an ion mode the fit had, a given or ranked formula (not the mass track or an identification's
    formula: the fit's formulas were known),
    the fit's ranking settings (fragment and analog scores), the features."""
    model = getattr(bundle, "suspect_confidence", None)
    if model is None:
        return ("rank 1 comes from your suspect list, and this model ships no confidence of suspect rank 1s "
                "(suspect_confidence.json)")
    if result.partial:
        return "the run is not finished"
    if getattr(result, "ion_mapping", ""):
        return (f"rank 1 comes from your suspect list and its ion type {result.spectrum.adduct} runs by a chemical "
                f"mapping ({result.ion_mapping}): how often such a rank 1 is right was not measured "
                "(docs/ion_types.md)")
    fitted_modes = model.meta.get("polarities", ["positive"])
    if (result.spectrum.polarity or "positive") not in fitted_modes:
        return f"the confidence of suspect rank 1s was fitted on {' and '.join(fitted_modes)}-mode spectra only"
    source = result.spectrum.metadata.get("formula_source") or ""
    if source not in ("", "ranked candidates"):  # the mass track of a suspect list, an identification's formula
        return (f"rank 1 comes from your suspect list, of a formula neither given nor among the ranked formula "
                f"candidates ({source}): the confidence of suspect rank 1s was fitted with the formula known, and how "
                "often such a rank 1 is right was not measured")
    differ = sorted(model.differing_settings(result.params))
    if differ:
        return (f"rank 1 comes from your suspect list, ranked with other settings than the confidence of suspect "
                f"rank 1s was fitted with: {', '.join(n.replace('_', ' ') for n in differ)} (set "
                f"{'it' if len(differ) == 1 else 'them'} back to see it)")
    return why_no_suspect_features(result)


@lru_cache(maxsize=16)
def _load_identity_model(path: str, mtime: float) -> ConfidenceModel | None:
    p = Path(path)
    if not p.is_file():
        return None
    model = ConfidenceModel.load(p)
    if set(model.features) - set(IDENTITY_FEATURES):
        raise BundleError(f"{p}: not a confidence of identifications (features {list(model.features)}); refit it with "
                          "`python -m training.calibration.identity_confidence fit`.")
    return model


def identity_model(path: str | Path | None = None) -> ConfidenceModel | None:
    """The confidence of identifications at ``path`` (default: the one shipped beside the bundled spectral library,
    :func:`engine.spectral_library.identity.confidence_path`); None when there is none."""
    p = Path(path or confidence_path())
    try:
        mtime = p.stat().st_mtime
    except OSError:
        return None
    return _load_identity_model(str(p), mtime)  # a rewritten file (msgpt calibrate-library) is read again


def identification_confidence(matches, model: ConfidenceModel | None = None) -> float | None:
    """P(the rank-1 reference of the identity search ``matches`` is the query's structure)
    (:mod:`engine.spectral_library.identity`), by ``model`` or the calibration of the hit's library (its own,
    ``msgpt calibrate-library``, or the shipped one); None without a hit or a model."""
    features = identity_features(matches)
    if model is None and features is not None:  # the calibration of the rank-1 hit's library, if it has its own
        model = identity_model(matches.calibration_file(matches.hits[0].library))
    if model is None or features is None:
        return None
    return model.probability(features)


def _identified_first(result) -> bool:
    """Rank 1 of ``result`` is identified by a reference spectrum (its confidence is the identification's)."""
    return bool(result.candidates) and bool(getattr(result.candidates[0], "identified", False))


_SETTING_WORDS = {  # how a setting of the fit is written (the QueryParams field, or "adapter")
    "decoding": lambda v: f"{v} decoding",
    "ranking": lambda v: f"{v} ranking",
    "temperature": lambda v: f"temperature {v:g}",
    "top_k": lambda v: f"top-k {v}",
    "top_p": lambda v: f"top-p {v:g}",
    "adapter": lambda v: f"adapter {'on' if v else 'off'}",
    "edit_rounds": lambda v: f"{v} isomer edit round{'' if v == 1 else 's'}",
}


def _pool(values: dict) -> int | None:
    m, n = values.get("groups"), values.get("samples_per_group")
    return m * n if isinstance(m, int) and isinstance(n, int) else None


def _describe(values: dict, names: set[str]) -> list[str]:
    """The settings ``names`` of ``values`` in words (the band as one item; M, and B = M x N for N)."""
    out = []
    if names & {"kappa_min", "kappa_max"}:
        out.append(f"κ {values.get('kappa_min', '?'):g}–{values.get('kappa_max', '?'):g}")
    if "groups" in names:
        out.append(f"M = {values.get('groups')}")
    if "pool" in names:
        out.append(f"B = {_pool(values)}")
    out += [_SETTING_WORDS.get(k, lambda v, k=k: f"{k} {v}")(values.get(k)) for k in sorted(names)
            if k not in ("kappa_min", "kappa_max", "groups", "samples_per_group", "pool")]
    return out
