"""How likely a rank 1 from a suspect list is the right structure, and when the evidence makes it level 2b.

A suspect list's structures rank before every prediction (:mod:`engine.elucidation.ranking`), so a feature whose
formula a suspect has gets that suspect as rank 1 whatever the spectrum says. Whether it is right depends on two
things the de novo confidence cannot see: whether the compound is on the list at all, and whether the spectrum
tells the list's isomers apart. This model reads what the ranked suspects of the rank-1 formula run say of both
(:func:`suspect_features`); measured, they tell the second far better than the first
(docs/evidence/suspect_confidence.md):

``log_suspects``      log of the number of suspects of that formula (more isomers on the list, more ways to be wrong)
``alone``             1 when the list has only this structure of the formula
``score_gap``         the ranking score's lead over the next suspect (fingerprint + analog + fragment terms; 0 alone)
``fragment_gap``      the fragment (forward) score's lead over the next suspect's (nats, within ±20; 0 alone)
``fragment_fit``      the fragment score per weighted peak formula of the spectrum: how well its fragments explain
                      the peaks on an absolute scale
``analog``            the analog score: likeness to the compounds whose reference spectra resemble the query's
``analog_gap``        its lead over the next suspect's analog score (0 alone)
``fingerprint_fit``   its fingerprint score minus the best score any fingerprint could get under the posterior
                      (nats, at least −200): how far its bits are from what the encoder predicts

Fitted by :mod:`training.calibration.suspect_confidence` on FOLD=train spectra the encoder never saw, each with
suspect lists made of corpus isomers of its formula where the compound itself is on the list for half the
formulas (a list that holds the compound for every feature would make any lone suspect certain); it ships in the
bundle as ``suspect_confidence.json``. So the probability answers "if about half of the features whose formula
my list matches are on it, how likely is this rank 1 right": for a list screened against a sample known to hold
its compounds it is an underestimate, for a large list against a complex sample an overestimate
(docs/known_compounds.md). ``level_2b`` in the file is the least probability of a level-2b rank 1, chosen on the
fit's cross-fitted probabilities for a precision of at least :data:`LEVEL_2B_PRECISION` there (over at least 50
rows; none, 2, when no probability reaches it, as for the shipped model).

Imports numpy and :mod:`engine.model.forward`/:mod:`engine.model.scoring` only (lazily); no Qt.
"""

from __future__ import annotations

import math

import numpy as np

SUSPECT_FEATURES = ("log_suspects", "alone", "score_gap", "fragment_gap", "fragment_fit", "analog", "analog_gap",
                    "fingerprint_fit")
#: every feature :func:`suspect_features` can give; the fit compared them (docs/evidence/suspect_confidence.md)
MEASURED_FEATURES = SUSPECT_FEATURES + ("fingerprint_z", "second_similarity", "log_peaks")
GAP_CAP = 20.0
FIT_FLOOR = -200.0
LEVEL_2B_PRECISION = 0.9  # least precision (cross-fitted, FOLD=train) of the level-2b rule


def level_2b_probability(model) -> float:
    """The least confidence of a level-2b suspect rank 1 the suspect ``model`` was fitted with (``meta["level_2b"]``);
    above 1 (never) without a model or a measured one."""
    try:
        return float(model.meta["level_2b"]["min_probability"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return 2.0


def suspect_rank1(result) -> bool:
    """Rank 1 of ``result`` is a suspect-list structure no reference spectrum identifies."""
    return bool(result.candidates) and bool(getattr(result.candidates[0], "suspect", False)) \
        and not getattr(result.candidates[0], "identified", False)


def why_no_suspect_features(result) -> str:
    """Why :func:`suspect_features` has none for ``result`` (whose rank 1 is a suspect); "" when it has them."""
    first = result.candidates[0]
    if not math.isfinite(first.fragment_score):
        return ("its fragments could not be scored against the spectrum (no forward model, an element the "
                "fragmenter does not handle, or peaks its formula cannot annotate), and the confidence of a suspect "
                "rank 1 reads them")
    if result.posterior is None or not math.isfinite(first.fingerprint_score):
        return "the result keeps no fingerprint posterior to score the suspect against"
    return ""


def suspect_features(bundle, result, names: tuple[str, ...] = SUSPECT_FEATURES) -> dict[str, float] | None:
    """The features ``names`` (module docstring; :data:`MEASURED_FEATURES` those the fit compared) of ``result``'s
    suspect rank 1, drawn with ``bundle``; None when :func:`why_no_suspect_features` has a reason or rank 1 is not a
    suspect."""
    from engine.model.scoring import FingerprintScorer

    if not suspect_rank1(result) or why_no_suspect_features(result):
        return None
    first = result.candidates[0]
    others = [c for c in result.candidates[1:] if getattr(c, "suspect", False)]
    second = others[0] if others else None
    gap = frag_gap = 0.0
    if second is not None:
        if math.isfinite(second.score):
            gap = min(first.score - second.score, GAP_CAP)
        if math.isfinite(second.fragment_score):
            frag_gap = float(np.clip(first.fragment_score - second.fragment_score, -GAP_CAP, GAP_CAP))
    weight = observed_weight(bundle, result.spectrum, first.formula)
    scorer = FingerprintScorer(result.posterior, bundle.calibration.for_polarity(result.spectrum.polarity).bits)
    analog = float(first.analog_score) if math.isfinite(first.analog_score) else 0.0
    other_analog = (float(second.analog_score) if second is not None and math.isfinite(second.analog_score)
                    else 0.0)
    features = {
        "log_suspects": math.log(1 + len(others)),
        "alone": float(second is None),
        "score_gap": float(gap),
        "fragment_gap": frag_gap,
        "fragment_fit": float(first.fragment_score / weight) if weight > 0 else 0.0,
        "analog": analog,
        "fingerprint_fit": max(first.fingerprint_score - best_fingerprint_score(scorer), FIT_FLOOR),
        "fingerprint_z": fingerprint_z(scorer, first.fingerprint_score),
        "analog_gap": analog - other_analog,
        "second_similarity": 0.0 if second is None else _tanimoto(first.bits, second.bits),
        "log_peaks": math.log(1 + weight),
    }
    return {k: features[k] for k in names}


def _tanimoto(a, b) -> float:
    a, b = set(np.asarray(a).tolist()), set(np.asarray(b).tolist())
    return len(a & b) / max(len(a | b), 1)


def fingerprint_z(scorer, score: float) -> float:
    """How ``score`` (a fingerprint log-likelihood) compares with the fingerprints the posterior itself expects: a
    fingerprint drawn from the recalibrated posterior q scores on average ``Σ q log q + (1 − q) log(1 − q)`` with
    variance ``Σ q (1 − q) logit(q)²``; the standardised difference, within ±20 (a calibrated posterior gives the
    true structure about 0, a structure unlike the prediction far below). ``scorer``: the spectrum's
    :class:`engine.model.scoring.FingerprintScorer`."""
    q = 1.0 / (1.0 + np.exp(-scorer.gain))
    log1, log0 = np.log(q), np.log1p(-q)
    mean = float((q * log1 + (1 - q) * log0).sum())
    sd = math.sqrt(float((q * (1 - q) * scorer.gain ** 2).sum())) or 1.0
    return float(np.clip((score - mean) / sd, -GAP_CAP, GAP_CAP))


def observed_weight(bundle, spectrum, formula: str) -> float:
    """The weight of the spectrum's peak formulas under ``formula`` in the fragment score (each ``1 + a·sqrt(I /
    I_max)``, :class:`engine.model.forward.ForwardScorer`); 0 without a forward model or an annotation."""
    from engine.model.forward import ForwardScorer, PeakSettings

    model = getattr(bundle, "forward", None)
    if model is None:
        return 0.0
    a = model.ranking.intensity_weight
    scorer = ForwardScorer(model, spectrum, PeakSettings.of_encoder(bundle.encoder.config), intensity_weight=a)
    observed = scorer.observed(formula)
    return 0.0 if not observed else float(len(observed) + a * sum(observed.values()))


def best_fingerprint_score(scorer) -> float:
    """The highest fingerprint score any set of bits gets under the posterior of ``scorer`` (a
    :class:`engine.model.scoring.FingerprintScorer`): every bit it rates above one half on, the others off."""
    return scorer.base + float(np.clip(scorer.gain, 0.0, None).sum())
