"""How sure an identification is: what an identity search says about its rank-1 reference, the calibrated rule that
makes it an identification, and the isomers a reference spectrum cannot tell apart from it.

A reference spectrum that matches well is not always the query's structure: on FOLD=val spectra searched with their
own lab's records left out, the wrong identifications were mostly positional isomers whose spectra are nearly the
same, or a structure the library lacks with an isomer it holds (docs/spectral_library.md, "How sure an identification
is"). What follows from the search alone, at no cost at run time:

* :func:`identity_features` -- the numbers read off the rank-1 hit (:data:`IDENTITY_FEATURES`): ``similarity``
  (entropy), ``log_matched`` (log of its matched fragments), ``matched_intensity`` (the share of the query's cleaned
  intensity those fragments carry), ``margin`` (its similarity minus that of the best reference of another
  structure, 0 without one), ``isomer_similarity`` (the best similarity of a reference of another structure of the
  same formula, 0 without one), ``log_isomers`` (log of the structures of its formula the searched libraries hold),
  ``log_structure_spectra`` (log 1 + the references of its own structure scoring at least 0.5: several spectra of it
  agreeing); read off every reference the search scored (:class:`engine.spectral_library.search.SpectralMatches`),
  not only the reported hits;
* :class:`IdentityRule` -- the calibrated probability that the rank-1 reference is the query's structure (a
  logistic over those features and an isotonic map, fitted by :mod:`training.calibration.identity_confidence` on
  leave-one-lab-out identity searches) and the least probability that makes it an identification
  (:meth:`engine.spectral_library.search.SpectralMatches.answer`); :class:`engine.model.confidence.ConfidenceModel`
  reads the same file for the number the app and the exports show;
* :func:`close_isomers` -- references of other structures of the rank-1 hit's formula within :data:`ISOMER_WINDOW`
  of its similarity: the library cannot say which of them the query is, so the level is 3, not 2a
  (:func:`engine.insight.identification.identification_level`).

Both ship beside the spectral library as ``resources/spectral_library/confidence.json`` (:func:`confidence_path`):
they describe the library's identity matches, whatever model bundle ranks the de novo candidates.

May import: :mod:`engine.errors`, :mod:`engine.paths` (the spectral_library layer; it never imports
:mod:`.search`, which imports it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import paths
from engine.errors import BundleError

#: The features of an identity search's rank-1 hit (:func:`identity_features`), in the model's order.
IDENTITY_FEATURES = ("similarity", "log_matched", "matched_intensity", "margin", "isomer_similarity",
                     "log_isomers", "log_structure_spectra")
CONFIDENCE_FILE = "confidence.json"
#: A user's library ``X.msp`` uses the calibration ``X.msp.confidence.json`` beside it when there is one (written by
#: ``msgpt calibrate-library``, :mod:`engine.cli.calibrate_library`).
USER_SUFFIX = ".confidence.json"
#: A reference of another structure of the same formula whose similarity is within this of the rank-1 hit's makes
#: the identification ambiguous (level 3, the isomer named). Chosen on FOLD=train leave-one-lab-out searches by
#: ``python -m training.calibration.identity_confidence report`` (docs/spectral_library.md).
ISOMER_WINDOW = 0.05


def identity_features(matches) -> dict[str, float] | None:
    """The :data:`IDENTITY_FEATURES` of the rank-1 hit of an identity search; None without one."""
    if matches is None or matches.params.mode != "identity" or not matches.hits:
        return None
    first = matches.hits[0]
    total = float(np.sum(matches.query_intensity)) if matches.query_intensity.size else 0.0
    pairs = first.fragment_pairs
    share = float(np.sum(matches.query_intensity[pairs[:, 0]])) / total if total > 0 and len(pairs) else 0.0
    return {
        "similarity": float(first.similarity),
        "log_matched": math.log(max(int(first.matched_peaks), 1)),
        "matched_intensity": min(max(share, 0.0), 1.0),
        "margin": float(first.similarity) - float(matches.other_similarity),
        "isomer_similarity": float(matches.best_isomer[0]) if matches.best_isomer else 0.0,
        "log_isomers": math.log(max(int(matches.formula_structures), 1)),
        "log_structure_spectra": math.log1p(int(matches.structure_spectra)),
    }


@dataclass(frozen=True)
class CloseIsomer:
    """A reference of another structure of the identified one's formula, nearly as similar to the query."""

    name: str
    inchikey14: str
    similarity: float
    accession: str

    def text(self) -> str:
        return f"or its isomer {self.name or self.inchikey14}, similarity {self.similarity:.2f}"


def close_isomers(matches, window: float = ISOMER_WINDOW) -> list[CloseIsomer]:
    """The other structures of the rank-1 hit's formula whose best reference is within ``window`` of its similarity
    (best first, one per structure): the reported hits' and the best isomer of every reference that scored."""
    if matches is None or matches.params.mode != "identity" or not matches.hits:
        return []
    first = matches.hits[0]
    formula = first.reference.formula
    refs = [(float(h.similarity), h.reference) for h in matches.hits[1:]]
    if matches.best_isomer is not None:
        refs.append(matches.best_isomer)
    seen, out = {first.reference.inchikey14 or first.reference.accession}, []
    for similarity, ref in sorted(refs, key=lambda sr: -sr[0]):
        key = ref.inchikey14 or ref.accession
        if not formula or ref.formula != formula or key in seen:
            continue
        seen.add(key)
        if similarity >= first.similarity - window:
            out.append(CloseIsomer(ref.name, ref.inchikey14, similarity, ref.accession))
    return out


def confidence_path() -> Path:
    """``resources/spectral_library/confidence.json``: the confidence of the bundled library's identifications and the
    identification rule on it."""
    return paths.resources_dir() / "spectral_library" / CONFIDENCE_FILE


@dataclass(frozen=True)
class IdentityRule:
    """When an identity search's rank-1 hit is an identification: its calibrated probability of being the query's
    structure (the logistic ``weights``/``bias`` over standardised :data:`IDENTITY_FEATURES`, then the isotonic
    ``knots``) at least ``min_probability``, its similarity at least ``min_similarity`` and its matched peaks at
    least ``min_matched_peaks``. ``measured``: its rates where it was chosen (docs/spectral_library.md)."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    knots: tuple[tuple[float, ...], tuple[float, ...]]
    min_probability: float
    min_similarity: float = 0.0
    min_matched_peaks: int = 1
    measured: dict | None = None

    def __post_init__(self):
        n = len(IDENTITY_FEATURES)
        if not (len(self.weights) == len(self.mean) == len(self.scale) == n):
            raise BundleError(f"identification rule: {len(self.weights)} weights for {n} features; refit it with "
                              "`python -m training.calibration.identity_confidence fit`.")
        if not 0.0 <= self.min_probability <= 1.0:
            raise BundleError(f"identification rule: min_probability {self.min_probability!r} is not in [0, 1].")

    def probability(self, features: dict[str, float]) -> float:
        """The calibrated probability of :func:`identity_features` ``features`` (as ``ConfidenceModel.probability``)."""
        x = (np.array([features[f] for f in IDENTITY_FEATURES]) - np.array(self.mean)) / np.array(self.scale)
        z = float(self.bias + np.dot(self.weights, x))
        p = 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
        return float(np.interp(p, *self.knots)) if self.knots else p

    def accepts(self, matches) -> bool:
        """The rank-1 hit of the identity search ``matches`` is an identification."""
        features = identity_features(matches)
        if features is None:
            return False
        first = matches.hits[0]
        return (first.similarity >= self.min_similarity and first.matched_peaks >= self.min_matched_peaks
                and self.probability(features) >= self.min_probability)

    @classmethod
    def from_json(cls, d: dict, where: str = "") -> IdentityRule | None:
        """The rule of a confidence file's JSON ``d`` (None when it has none)."""
        rule = d.get("identification_rule")
        if not rule:
            return None
        try:
            if tuple(d["features"]) != IDENTITY_FEATURES:
                raise ValueError(f"features {d['features']}")
            knots = d.get("recalibration") or {}
            return cls(tuple(float(w) for w in d["weights"]), float(d["bias"]), tuple(float(m) for m in d["mean"]),
                       tuple(float(s) for s in d["scale"]),
                       (tuple(knots["p"]), tuple(knots["calibrated"])) if knots else (),
                       float(rule["min_probability"]), float(rule.get("min_similarity", 0.0)),
                       int(rule.get("min_matched_peaks", 1)), dict(rule.get("measured", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise BundleError(f"{where or 'confidence file'}: bad identification rule ({e}); refit it with "
                              "`python -m training.calibration.identity_confidence fit`.") from e


def user_calibration_path(library_path: str | Path) -> Path:
    """Where the calibration of the user's library file ``library_path`` lives: beside it, ``<file>.confidence.json``."""
    return Path(str(library_path) + USER_SUFFIX)


def load_rule(path: str | Path) -> IdentityRule | None:
    """The identification rule of the confidence file at ``path``; None when the file or its rule is missing."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise BundleError(f"{path}: cannot read the confidence of identifications ({e}).") from e
    return IdentityRule.from_json(d, str(path))
