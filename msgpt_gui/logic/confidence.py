"""Why a result shows no confidence, for the candidate summary and the spectra list's tooltip (no Qt): the
engine's reason (:func:`engine.model.confidence.why_no_confidence`), and the cases only the app has (no model
loaded, a result drawn before the model's confidence model was loaded)."""

from __future__ import annotations

from engine.elucidation.pipeline import SpectrumResult
from engine.model.confidence import why_no_confidence


def missing_confidence(result: SpectrumResult | None, bundle) -> str:
    """Why the complete ``result`` (drawn with the loaded ``bundle``) has no confidence, in one sentence; "" when
    it has one, is still running, has no candidates, or there is nothing to say."""
    if result is None or result.confidence is not None or result.partial or not result.candidates:
        return ""
    if bundle is None:
        return "no model is loaded"
    return (why_no_confidence(bundle, result)
            or "not computed for these candidates (drawn before this model's confidence model was loaded)")
