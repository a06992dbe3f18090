"""The formula scorer: the learned weights of the ``mass``, ``prior`` and ``fragments`` terms (a conditional logit
trained on FOLD=train MassBank spectra by ``python -m training.calibration.formula_scorer``) with the corpus prior, shipped in
``resources/formula_scorer.json`` (:func:`default_scorer`).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.errors import ConfigError
from engine.formulas.evidence import FRAGMENT_FEATURES
from engine.formulas.prior import FormulaPrior, formulas_of_keys

SCORER_FILE = "formula_scorer.json"
ISOMERS_FILE = "formula_isomers.tsv.gz"


STAGE1_FEATURES = ("mass_error", "prior_pattern", "prior_counts", "prior_hc", "prior_nc", "prior_oc",
                   "prior_rdbec", "prior_isomers")
# the same times neutral mass / 500 Da: large molecules explain more peaks by chance, and differently
MASS_SCALED_FEATURES = tuple(f"{f}_x_mass" for f in FRAGMENT_FEATURES[:4])
STAGE2_FEATURES = STAGE1_FEATURES + FRAGMENT_FEATURES + MASS_SCALED_FEATURES
_TERM_OF = {"mass_error": "mass", **{f: "prior" for f in STAGE1_FEATURES if f.startswith("prior")},
            **{f: "fragments" for f in FRAGMENT_FEATURES + MASS_SCALED_FEATURES}}


def fragment_terms(fragments: Mapping[str, np.ndarray], neutral_masses: np.ndarray) -> dict[str, np.ndarray]:
    """The stage-2 fragment features of formulas: FRAGMENT_FEATURES and MASS_SCALED_FEATURES."""
    scale = np.asarray(neutral_masses, dtype=np.float64) / 500.0
    out = {f: np.asarray(fragments[f], dtype=np.float64) for f in FRAGMENT_FEATURES}
    out.update({f"{f}_x_mass": out[f] * scale for f in FRAGMENT_FEATURES[:4]})
    return out


@dataclass(frozen=True, eq=False)
class FormulaScorer:
    """Corpus prior + the two stages' weights + the ion types' log prior."""

    prior: FormulaPrior
    stage1: Mapping[str, float]
    stage2: Mapping[str, float]
    ion_type_log_prior: Mapping[str, float] = field(default_factory=dict)
    info: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        for name, weights, allowed in (("stage1", self.stage1, STAGE1_FEATURES), ("stage2", self.stage2, STAGE2_FEATURES)):
            unknown = set(weights) - set(allowed)
            if unknown:
                raise ConfigError(f"Formula scorer `{name}` has unknown features {sorted(unknown)}; "
                                  f"known are {', '.join(allowed)}.")

    def ion_prior(self, ion_type: str) -> float:
        if not self.ion_type_log_prior:
            return 0.0
        return float(self.ion_type_log_prior.get(ion_type, min(self.ion_type_log_prior.values()) - 1.0))

    @staticmethod
    def linear(weights: Mapping[str, float], features: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        """Per-term sums of weight * feature (terms: mass, prior, fragments)."""
        terms = {t: np.zeros(n) for t in ("mass", "prior", "fragments")}
        for name, w in weights.items():
            if name in features:
                terms[_TERM_OF[name]] = terms[_TERM_OF[name]] + w * np.asarray(features[name], dtype=np.float64)
        return terms

    def to_json(self, with_isomers_file: bool = True) -> dict:
        return {
            "format": "msgpt-formula-scorer/1",
            "info": dict(self.info),
            "stage1": dict(self.stage1),
            "stage2": dict(self.stage2),
            "ion_type_log_prior": dict(self.ion_type_log_prior),
            "prior": self.prior.to_json(),
            "isomers_file": ISOMERS_FILE if with_isomers_file else None,
        }

    def save(self, folder: str | os.PathLike) -> Path:
        """``formula_scorer.json`` (+ ``formula_isomers.tsv.gz``, the corpus formula counts) in ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with_isomers = bool(len(self.prior.isomer_keys))
        if with_isomers:
            rows = sorted(zip(formulas_of_keys(self.prior.isomer_keys), self.prior.isomer_counts.tolist()))
            text = "".join(f"{f}\t{n}\n" for f, n in rows).encode("utf-8")
            with open(folder / ISOMERS_FILE, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as fh:
                fh.write(text)  # mtime 0: the same table gives the same bytes
        path = folder / SCORER_FILE
        path.write_text(json.dumps(self.to_json(with_isomers), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> FormulaScorer:
        path = Path(path)
        if path.is_dir():
            path = path / SCORER_FILE
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"Cannot read the formula scorer {path}: {e}.") from e
        if d.get("format") != "msgpt-formula-scorer/1":
            raise ConfigError(f"{path} is not a formula scorer (format {d.get('format')!r}).")
        isomers = None
        if d.get("isomers_file"):
            isomers = {}
            with gzip.open(path.parent / d["isomers_file"], "rt", encoding="utf-8") as fh:
                for line in fh:
                    f, n = line.rstrip("\n").split("\t")
                    isomers[f] = int(n)
        return cls(prior=FormulaPrior.from_json(d["prior"], isomers), stage1=d["stage1"], stage2=d["stage2"],
                   ion_type_log_prior=d.get("ion_type_log_prior", {}), info=d.get("info", {}))


@lru_cache(maxsize=1)
def default_scorer() -> FormulaScorer:
    """The scorer shipped in ``resources/`` (trained by ``python -m training.calibration.formula_scorer``)."""
    from engine.paths import resources_dir

    path = resources_dir() / SCORER_FILE
    if not path.is_file():
        raise ConfigError(f"The formula scorer {path} is missing; reinstall the app or run "
                          "`python -m training.calibration.formula_scorer` to make one.")
    return FormulaScorer.load(path)
