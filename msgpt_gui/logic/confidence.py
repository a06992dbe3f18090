"""Why a result shows no confidence: the reason :func:`engine.model.confidence.spectrum_confidence` returned None,
in words a chemist reads in the candidate summary and the spectra list's tooltip (no Qt).

The confidence model belongs to the settings its pools were drawn with (``ConfidenceModel.settings``: the κ band,
M and N, decoding, ranking, sampling and the adapter) and to the ion modes it saw (``meta["polarities"]``);
a re-ranking with another band or B is fine to look at, but its confidence would be a guess, so the engine leaves
it out. :func:`missing_confidence` checks the same things in the same order and names what differs.
"""

from __future__ import annotations

import math

from engine.elucidation.pipeline import SpectrumResult

FORMAT_SETTING = {  # how a setting of the fit is written (the QueryParams field, or "adapter")
    "decoding": lambda v: f"{v} decoding",
    "ranking": lambda v: f"{v} ranking",
    "temperature": lambda v: f"temperature {v:g}",
    "top_k": lambda v: f"top-k {v}",
    "top_p": lambda v: f"top-p {v:g}",
    "adapter": lambda v: f"adapter {'on' if v else 'off'}",
}


def _same(fitted, have) -> bool:
    if isinstance(fitted, float) and isinstance(have, (int, float)):
        return math.isclose(float(have), fitted, rel_tol=1e-9, abs_tol=1e-12)
    return fitted == have


def _pool(values: dict) -> int | None:
    m, n = values.get("groups"), values.get("samples_per_group")
    return m * n if isinstance(m, int) and isinstance(n, int) else None


def _describe(values: dict, names: set[str]) -> list[str]:
    """The settings ``names`` of ``values`` in words (the band as one item; M, and B = M × N for N)."""
    out = []
    if names & {"kappa_min", "kappa_max"}:
        out.append(f"κ {values.get('kappa_min', '?'):g}–{values.get('kappa_max', '?'):g}")
    if "groups" in names:
        out.append(f"M = {values.get('groups')}")
    if "pool" in names:
        out.append(f"B = {_pool(values)}")
    out += [FORMAT_SETTING.get(k, lambda v, k=k: f"{k} {v}")(values.get(k)) for k in sorted(names)
            if k not in ("kappa_min", "kappa_max", "groups", "samples_per_group", "pool")]
    return out


def settings_differences(model, params, adapter: bool) -> tuple[list[str], list[str]]:
    """(what the confidence model was fitted with, what ``params`` use) for the settings that differ."""
    have = {name: adapter if name == "adapter" else getattr(params, name, None) for name in model.settings}
    differ = {name for name, value in model.settings.items() if not _same(value, have[name])}
    if _pool(model.settings) != _pool(have):
        differ.add("pool")
    return _describe(model.settings, differ), _describe(have, differ)


def missing_confidence(result: SpectrumResult | None, bundle) -> str:
    """Why the complete ``result`` (drawn with the loaded ``bundle``) has no confidence, in one sentence; "" when
    it has one, is still running, has no candidates, or there is nothing to say."""
    if result is None or result.confidence is not None or result.partial or not result.candidates:
        return ""
    if bundle is None:
        return "no model is loaded"
    model = getattr(bundle, "confidence", None)
    if model is None:
        return "this model ships no confidence model (confidence.json)"
    if result.plan is not None:
        return "these candidates were drawn with a query plan of their own; it holds only for the κ band's queries"
    fitted_modes = model.meta.get("polarities", ["positive"])
    polarity = result.spectrum.polarity or "positive"
    if polarity not in fitted_modes:
        return f"it was fitted on {' and '.join(fitted_modes)}-mode spectra only, this one is {polarity}"
    adapter = bool(getattr(bundle, "has_adapter", False) and result.params.use_adapter)
    fitted, now = settings_differences(model, result.params, adapter)
    if fitted:
        return (f"it holds only for the settings it was fitted with, {', '.join(fitted)}; these candidates were "
                f"ranked with {', '.join(now)} (set {'it' if len(fitted) == 1 else 'them'} back to see it)")
    md = result.spectrum.metadata
    if md.get("formula_source") == "ranked candidates":
        return "the probability of the formula these candidates were drawn for is not known"
    return "not computed for these candidates (drawn before this model's confidence model was loaded)"
