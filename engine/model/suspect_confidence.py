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

Measured and not used by the shipped model (they added 0.004 AUROC; docs/evidence/suspect_confidence.md), what the
run's de novo pool says (:data:`POOL_FEATURES`, :func:`pool_features`): whether the decoder drew the suspect, and
whether a structure the list does not hold fits the posterior better:

``drawn``             1 when the decoder drew the suspect itself (its sample count above 0)
``pool_lead``         its fingerprint score's lead over the best candidate the list does not hold (drawn, edited or
                      from another library; nats, within ±20; +20 when there is none)
``pool_above``        log of 1 + the number of such candidates whose fingerprint score is above the suspect's

Fitted by :mod:`training.calibration.suspect_confidence` on FOLD=train spectra the encoder never saw, each with
suspect lists made of corpus isomers of its formula where the compound itself is on the list for half the
formulas (a list that holds the compound for every feature would make any lone suspect certain); it ships in the
bundle as ``suspect_confidence.json``.

**How many of the list's matches are real** decides most of it, and the spectrum barely tells: a rank 1 whose
compound is not on the list at all is always wrong, and the features set it apart from one whose compound is
there only weakly (docs/evidence/suspect_confidence.md). So the model has two parts (:func:`suspect_probability`):
P(right | the compound is on the list, features), the logistic of the file, and P(on the list | features), the
logistic of ``meta["on_list"]``, fitted at the share of rank 1s whose compound was on the list (``share``, about
one half). The second part's odds are moved from that share to the one the user states, ``present``
(``QueryParams.suspects_present``: of the features a suspect list matches by formula, the share that really are
one of its compounds; 0.9 for a mix of standards known to be in the sample, 0.1 or less for a large list screened
against a complex sample), by Bayes' rule with the features' likelihoods unchanged. A file without
``meta["on_list"]`` (fitted before) is one logistic of P(right | features) at half the formulas listed, and ignores
``present``.

``level_2b`` in the file is the least probability of a level-2b rank 1, chosen on the fit's cross-fitted
probabilities at :data:`PRESENT_DEFAULT` for a precision of at least :data:`LEVEL_2B_PRECISION` there (over at
least 50 rows; none, 2, when no probability reaches it). Level 2b reads the evidence at that even share whatever
the user states (:func:`engine.model.confidence.with_confidence`): what the user expects of the list moves the
number, not the level.

Imports numpy, :mod:`engine.errors` and :mod:`engine.model.forward`/:mod:`engine.model.scoring` only (the last two
lazily); no Qt.
"""

from __future__ import annotations

import math

import numpy as np

from engine.errors import ConfigError

SUSPECT_FEATURES = ("log_suspects", "alone", "score_gap", "fragment_gap", "fragment_fit", "analog", "analog_gap",
                    "fingerprint_fit")
#: the run's de novo pool's evidence (:func:`pool_features`), measured with ``collect --pool`` and not used
POOL_FEATURES = ("drawn", "pool_lead", "pool_above")
#: every feature :func:`suspect_features` can give; the fit compared them (docs/evidence/suspect_confidence.md)
MEASURED_FEATURES = SUSPECT_FEATURES + ("fingerprint_z", "second_similarity", "log_peaks") + POOL_FEATURES
GAP_CAP = 20.0
FIT_FLOOR = -200.0
LEVEL_2B_PRECISION = 0.9  # least precision (cross-fitted, FOLD=train) of the level-2b rule
PRESENT_DEFAULT = 0.5  # the share of a suspect list's formula matches that are its compounds, unless one is stated


def check_present(value: float, name: str = "suspects_present") -> float:
    """``value`` as a share strictly between 0 and 1, else a ConfigError that says what to give."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    if not 0.0 < v < 1.0:
        raise ConfigError(f"`{name}` is the share of the features a suspect list matches by formula that really are "
                          f"one of its compounds: a number between 0 and 1 (not 0 or 1 themselves), got {value!r}; "
                          f"for example 0.9 for standards known to be in the sample, 0.1 for a broad screening list.")
    return v


def on_list_model(model):
    """The P(on the list | features) part of a suspect ``model`` (:class:`engine.model.confidence.ConfidenceModel`)
    and the share it was fitted at, or (None, None) for a one-part model."""
    part = (getattr(model, "meta", None) or {}).get("on_list")
    if not part:
        return None, None
    return type(model).from_json(part["model"]), float(part["share"])  # a ConfidenceModel, as ``model``


def shift_share(p: float, fitted: float, present: float) -> float:
    """A probability ``p`` of being on the list at the share ``fitted`` moved to the share ``present`` (Bayes' rule:
    the odds times the ratio of the shares' odds)."""
    p = min(max(float(p), 1e-12), 1 - 1e-12)
    odds = p / (1 - p) * (present / (1 - present)) / (fitted / (1 - fitted))
    return odds / (1 + odds)


def suspect_probability(model, features: dict[str, float] | None, present: float = PRESENT_DEFAULT) -> float:
    """P(a suspect rank 1 with ``features`` is right) under ``model`` when a share ``present`` of the list's formula
    matches are its compounds (module docstring); 0 without features."""
    if features is None:
        return 0.0
    on, share = on_list_model(model)
    if on is None:
        return model.probability(features)
    return shift_share(on.probability(features), share, check_present(present)) * model.probability(features)


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
    if any(k in POOL_FEATURES for k in names):
        features.update(pool_features(result))
    return {k: features[k] for k in names}


def pool_features(result) -> dict[str, float]:
    """:data:`POOL_FEATURES` of ``result``'s suspect rank 1 (module docstring): how it stands among the candidates no
    suspect list holds."""
    first = result.candidates[0]
    others = np.array([c.fingerprint_score for c in result.candidates
                       if not getattr(c, "suspect", False) and math.isfinite(c.fingerprint_score)], dtype=np.float64)
    lead = GAP_CAP if not len(others) else float(np.clip(first.fingerprint_score - others.max(), -GAP_CAP, GAP_CAP))
    return {"drawn": float(first.count > 0), "pool_lead": lead,
            "pool_above": math.log(1 + int((others > first.fingerprint_score).sum()))}


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
