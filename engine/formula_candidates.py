"""Molecular formula and ion type candidates for a precursor whose formula is not known.

Real LC-MS/MS runs carry no formula. For a spectrum (or a run's feature) this module lists the
formulas and ion types its precursor m/z allows and ranks them, as SIRIUS and BUDDY do, offline:

1. **Ion types**: the record's adduct when it has one; else ``[M+H]+``, ``[M+Na]+``, ``[M+NH4]+``
   (positive) or ``[M-H]-``, ``[M+Cl]-``, ``[M+HCOO]-`` (negative), or those asked for. The neutral
   mass of each follows from the precursor m/z.
2. **Formulas**: :func:`engine.decompose.decompose_mass` within ``max(ppm, da)`` of the neutral
   mass (default 10 ppm or 1 mDa), over C, H, N, O, P, S, F, Cl, Br, I, Si with element limits,
   LEWIS/SENIOR and the Seven Golden Rules' ratios.
3. **Score** of a (formula, ion type), a log-odds sum of terms (the ``terms`` of a candidate):

   ``mass``       the precursor's mass error (``-w * ppm^2``);
   ``prior``      how ordinary the formula is in the molecule corpus (562k structures): the
                  frequency of its pattern of elements beyond CHNO, of its element counts at its
                  mass, of its H/C, N/C, O/C and RDBE/C, and the number of corpus structures with
                  exactly this formula (isomers; the structures themselves are not needed);
   ``fragments``  how well subformulas of the formula explain the fragment peaks
                  (:func:`engine.annotate.annotate_peaks`): the explained share of the (square-root)
                  fragment intensity and of the fragment peaks, the mass errors of the explained
                  peaks, and, against chance, the share the same peaks shifted by ±23 mDa would have
                  explained (large formulas explain anything);
   ``ion_type``   the ion type's frequency (log prior);
   ``isotopes``   with a survey scan: the precursor's isotope pattern against the formula's
                  (:mod:`engine.isotopes`; Cl/Br/S signatures), weight ``isotope_weight``;
   ``adducts``    with a survey scan: ``adduct_weight`` for each other ion type of the same
                  molecule seen in it (an ``[M+Na]+`` beside an ``[M+H]+`` 21.98 Da lower).

   The weights of ``mass``, ``prior`` and ``fragments`` were learned by a conditional logit on
   FOLD=train MassBank spectra (``python -m training.formula_scorer``; never FOLD=val) and ship in
   ``resources/formula_scorer.json``, with the corpus statistics. Ranking runs in two stages: all
   formulas by mass, prior and ion type, then the best ``max_scored`` per ion type (default 60)
   also by their fragments (and MS1); the table holds the latter.
4. The candidates' probabilities are a softmax of the total scores over the table.

:func:`rank_formulas` gives a :class:`FormulaTable` (what the app shows and the CLI runs the top
``k`` of); :func:`isotope_comparison` the observed and theoretical MS1 isotope peaks of one candidate.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from .adducts import neutral_mass_from_precursor, parse_adduct, precursor_mz_from_neutral
from .annotate import DEFAULT_TOL_DA as FRAGMENT_TOL_DA
from .annotate import DEFAULT_TOL_PPM as FRAGMENT_TOL_PPM
from .annotate import DEFAULT_MIN_RDBE, ION_TYPES, get_ion_type, rdbe
from .decompose import DEFAULT_MAX_COUNTS, DECOMPOSITION_ELEMENTS, DecompositionConfig, decompose_mass, rdbe_of
from .errors import AdductError, Cancelled, ConfigError, FormulaError, SpectrumError
from .formula import (
    ELECTRON_MASS,
    ELEMENT_INDEX,
    ELEMENTS,
    element_mass,
    format_formula,
    formula_vector,
    parse_formula,
    vector_to_counts,
)
from .isotopes import IsotopeMatch, match_isotopes
from .spectrum import Spectrum, precursor_precision_da

DEFAULT_ION_TYPES = {
    "positive": ("[M+H]+", "[M+Na]+", "[M+NH4]+"),
    "negative": ("[M-H]-", "[M+Cl]-", "[M+HCOO]-"),
}
#: Other ion types of the same molecule looked for in a survey scan (co-detected adducts).
PARTNER_ION_TYPES = {
    "positive": ("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M+K]+"),
    "negative": ("[M-H]-", "[M+Cl]-", "[M+HCOO]-", "[M+CH3COO]-"),
}
DECOY_SHIFTS_DA = (-0.0231, 0.0231)
MAX_FRAGMENT_PEAKS = 40
SCORER_FILE = "formula_scorer.json"
ISOMERS_FILE = "formula_isomers.tsv.gz"
TERMS = ("mass", "prior", "fragments", "ion_type", "isotopes", "adducts")


@dataclass(frozen=True)
class FormulaConfig:
    """How formula candidates are found and scored (see the module notes)."""

    ppm: float = field(default=10.0, metadata={"help": "precursor mass tolerance, ppm"})
    da: float = field(default=0.001, metadata={"help": "precursor mass tolerance, Da (the larger wins)"})
    ion_types: tuple[str, ...] | None = field(default=None, metadata={
        "help": "ion types to consider when the record has none (None: [M+H]+, [M+Na]+, [M+NH4]+ or the negative three)"})
    decomposition: DecompositionConfig = field(default_factory=DecompositionConfig)
    max_scored: int = field(default=60, metadata={"help": "formulas per ion type scored by their fragments"})
    max_mass: float = field(default=1000.0, metadata={
        "help": "largest neutral mass decomposed, Da (above it formulas are too many to rank: give the formula)"})
    fragment_tol_ppm: float = FRAGMENT_TOL_PPM
    fragment_tol_da: float = FRAGMENT_TOL_DA
    ms1_tol_ppm: float = field(default=10.0, metadata={"help": "survey peaks (isotopes, adducts), ppm"})
    ms1_tol_da: float = field(default=0.005, metadata={"help": "survey peaks (isotopes, adducts), Da"})
    isotope_peaks: int = field(default=4, metadata={"help": "isotope peaks compared (M .. M+3)"})
    isotope_weight: float = field(default=1.0, metadata={"help": "weight of the isotope pattern score"})
    adduct_weight: float = field(default=2.0, metadata={"help": "score per co-detected ion type of the molecule"})

    def __post_init__(self):
        for name in ("ppm", "da", "fragment_tol_ppm", "fragment_tol_da", "ms1_tol_ppm", "ms1_tol_da",
                     "isotope_weight", "adduct_weight", "max_mass"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ConfigError(f"`{name}` must be a number >= 0, got {value!r}.")
        if self.ppm == 0 and self.da == 0:
            raise ConfigError("`ppm` and `da` are both 0; give a precursor mass tolerance > 0.")
        for name in ("max_scored", "isotope_peaks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a whole number >= 1, got {value!r}.")
        if self.ion_types is not None:
            names = []
            for ion in self.ion_types:
                try:
                    name = get_ion_type(ion).name
                except AdductError as e:
                    raise ConfigError(f"`ion_types`: {e}") from None
                names.append(name)
            if not names:
                raise ConfigError("`ion_types` is empty; give at least one, e.g. [M+H]+.")
            object.__setattr__(self, "ion_types", tuple(dict.fromkeys(names)))

    def tolerance(self, mz: float) -> float:
        return max(self.ppm * 1e-6 * mz, self.da)


# ----------------------------------------------------------------------------------------------
# Corpus prior
# ----------------------------------------------------------------------------------------------

_RARE = tuple(e for e in DECOMPOSITION_ELEMENTS if e not in ("C", "H", "N", "O"))
_COUNTED = ("N", "O") + _RARE
_RADICES = np.array([DEFAULT_MAX_COUNTS[e] + 1 for e in DECOMPOSITION_ELEMENTS], dtype=np.int64)
_COLUMNS = np.array([ELEMENT_INDEX[e] for e in DECOMPOSITION_ELEMENTS])
_OTHER_COLUMNS = np.array([i for i, e in enumerate(ELEMENTS) if e not in DECOMPOSITION_ELEMENTS])
RATIO_EDGES = {
    "H/C": np.round(np.arange(0.0, 6.05, 0.1), 2),
    "N/C": np.round(np.arange(0.0, 4.05, 0.05), 2),
    "O/C": np.round(np.arange(0.0, 3.05, 0.05), 2),
    "RDBE/C": np.round(np.arange(0.0, 2.05, 0.05), 2),
}
MASS_EDGES = (0.0, 150.0, 200.0, 250.0, 300.0, 350.0, 400.0, 500.0, 600.0, 800.0, 1000.0)


def formula_keys(vectors: np.ndarray) -> np.ndarray:
    """One int64 per count vector (mixed radix over the decomposition elements); -1 outside the limits."""
    v = np.asarray(vectors, dtype=np.int64).reshape(-1, len(ELEMENTS))
    sub = v[:, _COLUMNS]
    ok = (sub >= 0).all(axis=1) & (sub < _RADICES).all(axis=1) & (v[:, _OTHER_COLUMNS] == 0).all(axis=1)
    keys = np.zeros(len(v), dtype=np.int64)
    for j in range(len(_RADICES)):
        keys = keys * _RADICES[j] + sub[:, j]
    return np.where(ok, keys, -1)


def _pattern_codes(vectors: np.ndarray) -> np.ndarray:
    """Which non-CHNO elements each count vector holds, as a bit code (bit j: _RARE[j])."""
    present = np.asarray(vectors)[:, [ELEMENT_INDEX[e] for e in _RARE]] > 0  # (K, 7)
    return present.astype(np.int64) @ (1 << np.arange(len(_RARE)))


def _pattern(vector_row: np.ndarray) -> str:
    return ",".join(e for e in _RARE if vector_row[ELEMENT_INDEX[e]] > 0)


@dataclass(frozen=True, eq=False)
class FormulaPrior:
    """Statistics of the molecule corpus' formulas, as log-probabilities (see :meth:`fit`)."""

    mass_edges: np.ndarray  # (B + 1,) neutral mass bins (the last open-ended)
    patterns: Mapping[str, float]  # log P(elements beyond CHNO present), "" = none, "Cl,S" = both
    unseen_pattern: float
    counts: Mapping[str, np.ndarray]  # element -> (B, cap + 1) log P(count | mass bin[, present])
    ratios: Mapping[str, np.ndarray]  # "H/C" -> log P(ratio bin), bins of RATIO_EDGES (+ one beyond)
    isomer_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # sorted
    isomer_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    n_formulas: int = 0
    n_structures: int = 0

    @classmethod
    def fit(cls, formula_counts: Mapping[str, int], with_isomers: bool = True) -> FormulaPrior:
        """Statistics of ``{formula: number of structures}`` (add-half smoothing everywhere).

        Formulas with elements beyond the decomposition elements, or over their limits, are left out.
        """
        rows, weights = [], []
        for text, n in formula_counts.items():
            try:
                v = formula_vector(parse_formula(text))
            except FormulaError:
                continue
            if formula_keys(v)[0] < 0 or v[ELEMENT_INDEX["C"]] < 1:
                continue
            rows.append(v)
            weights.append(int(n))
        if not rows:
            raise ConfigError("No usable formulas to fit the prior on.")
        v = np.array(rows, dtype=np.int64)
        w = np.array(weights, dtype=np.float64)
        masses = v @ _element_mass_array()
        edges = np.array(MASS_EDGES)
        bins = np.clip(np.searchsorted(edges, masses, side="right") - 1, 0, len(edges) - 1)
        total = w.sum()
        pattern_counts: dict[str, float] = {}
        for row, weight in zip(v, w):
            key = _pattern(row)
            pattern_counts[key] = pattern_counts.get(key, 0.0) + weight
        patterns = {k: math.log((c + 0.5) / (total + 1.0)) for k, c in pattern_counts.items()}
        counts = {}
        for e in _COUNTED:
            cap = DEFAULT_MAX_COUNTS[e]
            n = v[:, ELEMENT_INDEX[e]]
            table = np.zeros((len(edges), cap + 1))
            for b in range(len(edges)):
                sel = bins == b
                if e in _RARE:
                    sel &= n > 0
                hist = np.bincount(n[sel], weights=w[sel], minlength=cap + 1)[: cap + 1]
                table[b] = np.log((hist + 0.5) / (hist.sum() + 0.5 * (cap + 1)))
            counts[e] = table
        ratios = {name: np.log(_ratio_histogram(_ratio(v, name), w, RATIO_EDGES[name])) for name in RATIO_EDGES}
        keys = formula_keys(v)
        order = np.argsort(keys)
        return cls(
            mass_edges=edges, patterns=patterns, unseen_pattern=math.log(0.5 / (total + 1.0)), counts=counts,
            ratios=ratios, isomer_keys=keys[order] if with_isomers else np.zeros(0, dtype=np.int64),
            isomer_counts=w[order].astype(np.int64) if with_isomers else np.zeros(0, dtype=np.int64),
            n_formulas=len(v), n_structures=int(total),
        )

    def isomers(self, vectors: np.ndarray) -> np.ndarray:
        """Corpus structures with exactly each formula (0 when absent)."""
        keys = formula_keys(vectors)
        if not len(self.isomer_keys):
            return np.zeros(len(keys), dtype=np.int64)
        pos = np.clip(np.searchsorted(self.isomer_keys, keys), 0, len(self.isomer_keys) - 1)
        return np.where((self.isomer_keys[pos] == keys) & (keys >= 0), self.isomer_counts[pos], 0)

    def features(self, vectors: np.ndarray, masses: np.ndarray, exclude_self: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Prior features of count vectors ``(K, 14)`` (names as in the scorer's weights).

        ``exclude_self`` (training only): 1 where the formula's own structure is in the corpus, so
        that the isomer count leaves it out.
        """
        v = np.asarray(vectors, dtype=np.int64)
        bins = np.clip(np.searchsorted(self.mass_edges, masses, side="right") - 1, 0, len(self.mass_edges) - 1)
        pattern = self._pattern_table()[_pattern_codes(v)]
        counts = np.zeros(len(v))
        for e in _COUNTED:
            n = v[:, ELEMENT_INDEX[e]]
            table = self.counts[e]
            lp = table[bins, np.clip(n, 0, table.shape[1] - 1)]
            counts += np.where(n > 0, lp, 0.0) if e in _RARE else lp
        out = {"prior_pattern": pattern, "prior_counts": counts}
        for name, log_p in self.ratios.items():
            idx = np.clip(np.searchsorted(RATIO_EDGES[name], _ratio(v, name), side="right") - 1, 0, len(log_p) - 1)
            out[f"prior_{name.replace('/', '').lower()}"] = log_p[idx]
        isomers = self.isomers(v).astype(np.float64)
        if exclude_self is not None:
            isomers = np.maximum(isomers - np.asarray(exclude_self, dtype=np.float64), 0.0)
        out["prior_isomers"] = np.log1p(isomers)
        return out

    def _pattern_table(self) -> np.ndarray:
        """log P of each of the 2^7 patterns of non-CHNO elements, by :func:`_pattern_codes` code."""
        table = np.full(2 ** len(_RARE), self.unseen_pattern)
        for code in range(len(table)):
            key = ",".join(e for j, e in enumerate(_RARE) if code >> j & 1)
            table[code] = self.patterns.get(key, self.unseen_pattern)
        return table

    def to_json(self) -> dict:
        return {
            "mass_edges": [float(x) for x in self.mass_edges],
            "patterns": {k: round(v, 4) for k, v in sorted(self.patterns.items())},
            "unseen_pattern": round(self.unseen_pattern, 4),
            "counts": {e: np.round(t, 4).tolist() for e, t in self.counts.items()},
            "ratios": {k: np.round(t, 4).tolist() for k, t in self.ratios.items()},
            "n_formulas": self.n_formulas,
            "n_structures": self.n_structures,
        }

    @classmethod
    def from_json(cls, d: Mapping, isomers: Mapping[str, int] | None = None) -> FormulaPrior:
        keys, counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if isomers:
            k = _keys_of_formulas(list(isomers))
            order = np.argsort(k)
            keys, counts = k[order], np.array(list(isomers.values()), dtype=np.int64)[order]
            keep = keys >= 0
            keys, counts = keys[keep], counts[keep]
        return cls(
            mass_edges=np.array(d["mass_edges"], dtype=np.float64),
            patterns=dict(d["patterns"]), unseen_pattern=float(d["unseen_pattern"]),
            counts={e: np.array(t, dtype=np.float64) for e, t in d["counts"].items()},
            ratios={k: np.array(t, dtype=np.float64) for k, t in d["ratios"].items()},
            isomer_keys=keys, isomer_counts=counts, n_formulas=int(d.get("n_formulas", 0)),
            n_structures=int(d.get("n_structures", 0)),
        )


@lru_cache(maxsize=1)
def _element_mass_array() -> np.ndarray:
    from .formula import element_masses

    return element_masses()


def _ratio(v: np.ndarray, name: str) -> np.ndarray:
    c = np.maximum(v[:, ELEMENT_INDEX["C"]], 1).astype(np.float64)
    if name == "RDBE/C":
        return np.maximum(rdbe_of(v), 0.0) / c
    return v[:, ELEMENT_INDEX[name.split("/")[0]]] / c


def _ratio_histogram(values: np.ndarray, weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Smoothed probabilities of ratio bins [e_i, e_i+1) and one bin beyond the last edge."""
    idx = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 1)
    hist = np.bincount(idx, weights=weights, minlength=len(edges))
    return (hist + 0.5) / (hist.sum() + 0.5 * len(hist))


# ----------------------------------------------------------------------------------------------
# The scorer (learned weights + prior)
# ----------------------------------------------------------------------------------------------

STAGE1_FEATURES = ("mass_error", "prior_pattern", "prior_counts", "prior_hc", "prior_nc", "prior_oc",
                   "prior_rdbec", "prior_isomers")
FRAGMENT_FEATURES = ("frag_intensity", "frag_peaks", "frag_decoy", "frag_error", "frag_none")
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
            rows = sorted(zip(_formulas_of_keys(self.prior.isomer_keys), self.prior.isomer_counts.tolist()))
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


_TOKEN = re.compile(r"([A-Z][a-z]?)(\d*)")


def _keys_of_formulas(formulas: list[str]) -> np.ndarray:
    """:func:`formula_keys` of formula strings, fast (the isomer table has 130k of them); -1 if not keyable."""
    position = {e: j for j, e in enumerate(DECOMPOSITION_ELEMENTS)}
    radices = _RADICES.tolist()
    weights = [int(np.prod(radices[j + 1:])) for j in range(len(radices))]
    out = np.empty(len(formulas), dtype=np.int64)
    for i, text in enumerate(formulas):
        key = 0
        for symbol, digits in _TOKEN.findall(text):
            j = position.get(symbol)
            n = int(digits) if digits else 1
            if j is None or n >= radices[j]:
                key = -1
                break
            key += n * weights[j]
        out[i] = key
    return out


def _formulas_of_keys(keys: np.ndarray) -> list[str]:
    out = []
    for key in keys.tolist():
        counts = {}
        for j in range(len(_RADICES) - 1, -1, -1):
            key, n = divmod(key, int(_RADICES[j]))
            if n:
                counts[DECOMPOSITION_ELEMENTS[j]] = n
        out.append(format_formula(counts))
    return out


@lru_cache(maxsize=1)
def default_scorer() -> FormulaScorer:
    """The scorer shipped in ``resources/`` (trained by ``python -m training.formula_scorer``)."""
    from .paths import resources_dir

    path = resources_dir() / SCORER_FILE
    if not path.is_file():
        raise ConfigError(f"The formula scorer {path} is missing; reinstall the app or run "
                          "`python -m training.formula_scorer` to make one.")
    return FormulaScorer.load(path)


# ----------------------------------------------------------------------------------------------
# Fragment features
# ----------------------------------------------------------------------------------------------


def fragment_peaks(spectrum: Spectrum, margin_da: float = 0.5, max_peaks: int = MAX_FRAGMENT_PEAKS):
    """The fragment peaks scored: below ``precursor - margin_da``, the ``max_peaks`` most intense,
    with square-root relative intensities (``(mz, weight)``, sorted by m/z)."""
    keep = spectrum.mz < spectrum.precursor_mz - margin_da
    mz, intensity = spectrum.mz[keep], spectrum.intensity[keep]
    if mz.size > max_peaks:
        top = np.sort(np.argsort(-intensity, kind="stable")[:max_peaks])
        mz, intensity = mz[top], intensity[top]
    if mz.size == 0 or intensity.max() <= 0:
        return np.zeros(0), np.zeros(0)
    return mz, np.sqrt(intensity / intensity.max())


def _box(upper: Sequence[int]) -> np.ndarray:
    """Every count vector between 0 and ``upper`` (over the 14 elements), as rows."""
    axes = [np.arange(int(n) + 1) for n in upper]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1).astype(np.int64)


class _SubformulaIndex:
    """Neutral subformulas of a set of formulas, searchable by mass (the fragment stage's engine).

    :func:`engine.annotate.annotate_peaks` enumerates the subformulas of one formula; the fragment
    stage asks the same question of up to a few hundred formulas of one precursor. Their (C, H, N,
    O) parts up to the largest counts, sorted by mass, and the union of their other elements'
    sub-boxes are tabulated once; a mass query meets in the middle, and each formula then keeps the
    hits it contains. The RDBE filter (>= -0.5) and the ion parts are those of annotate_peaks.
    """

    _CHNO = [ELEMENT_INDEX[e] for e in ("C", "H", "N", "O")]

    def __init__(self, cores: np.ndarray, max_mass: float):
        masses = _element_mass_array()
        upper = cores.max(axis=0)
        chno = _box([upper[i] for i in self._CHNO])  # (G, 4)
        core_mass = chno.astype(np.float64) @ masses[self._CHNO]
        keep = core_mass <= max_mass + 1.0
        order = np.argsort(core_mass[keep], kind="stable")
        self.core, self.core_mass = chno[keep][order].astype(np.int16), core_mass[keep][order]  # (G', 4), (G',)
        other = [i for i in range(len(ELEMENTS)) if i not in self._CHNO]
        blocks = [np.zeros((1, len(ELEMENTS)), dtype=np.int64)]
        for pattern in np.unique(cores[:, other], axis=0):  # each formula's other elements: its sub-box
            present = [i for i, n in zip(other, pattern) if n > 0]
            if present:
                sub = _box([pattern[other.index(i)] for i in present])  # (B, len(present))
                block = np.zeros((len(sub), len(ELEMENTS)), dtype=np.int64)
                block[:, present] = sub
                blocks.append(block)
        self.rare = np.unique(np.vstack(blocks), axis=0)  # (R, 14)
        self.rare_mass = self.rare @ masses

    def query(self, neutral_mass: np.ndarray, tol: np.ndarray):
        """``(hit vectors (T, 14), query of each hit (T,), |error| / tol (T,))`` for many masses at once."""
        lo = np.searchsorted(self.core_mass, (neutral_mass - tol)[:, None] - self.rare_mass[None, :], "left")  # (Q, R)
        hi = np.searchsorted(self.core_mass, (neutral_mass + tol)[:, None] - self.rare_mass[None, :], "right")
        n = np.maximum(hi - lo, 0).ravel()
        q_idx, r_idx = np.divmod(np.repeat(np.arange(n.size), n), len(self.rare))
        c_idx = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + lo.ravel()[np.repeat(np.arange(n.size), n)]
        vectors = self.rare[r_idx].copy()  # (T, 14)
        vectors[:, self._CHNO] += self.core[c_idx]
        error = np.abs(self.core_mass[c_idx] + self.rare_mass[r_idx] - neutral_mass[q_idx]) / tol[q_idx]
        keep = rdbe(vectors) >= DEFAULT_MIN_RDBE
        return vectors[keep], q_idx[keep], error[keep]


def fragment_features_many(
    mz: np.ndarray, weight: np.ndarray, vectors: np.ndarray, ion_types: Sequence[str],
    tol_ppm: float = FRAGMENT_TOL_PPM, tol_da: float = FRAGMENT_TOL_DA,
) -> dict[str, np.ndarray]:
    """How well subformulas of each formula explain the fragment peaks (FRAGMENT_FEATURES + ``n_explained``).

    ``vectors`` (K, 14) are neutral molecules, ``ion_types`` their K ion types. A peak is explained
    by a formula when some ion of a subformula of it (RDBE >= -0.5, an ion part of its ion type, as
    in :func:`engine.annotate.annotate_peaks`) lies within ``max(tol_ppm, tol_da)``; the decoy peaks
    are the same shifted by DECOY_SHIFTS_DA.
    """
    vectors = np.asarray(vectors, dtype=np.int64).reshape(-1, len(ELEMENTS))
    k = len(vectors)
    out = {name: np.zeros(k) for name in FRAGMENT_FEATURES}
    out["n_explained"] = np.zeros(k, dtype=np.int64)
    if mz.size == 0:
        out["frag_none"][:] = 1.0
        return out
    if k == 0:
        return out
    total = float(weight.sum())
    ions = [get_ion_type(a) for a in ion_types]
    cores = np.array([v + formula_vector(dict(ion.core_delta)) for v, ion in zip(vectors, ions)])  # (K, 14)
    index = _SubformulaIndex(np.maximum(cores, 0), float(mz.max()) + 50.0)
    shifts = (0.0, *DECOY_SHIFTS_DA)
    peaks = np.concatenate([mz + d for d in shifts])  # (S * P,)
    tol = np.maximum(tol_ppm * 1e-6 * peaks, tol_da)
    explained = np.zeros((k, len(shifts), mz.size), dtype=bool)  # (K, S, P)
    best_error = np.full((k, mz.size), np.inf)  # (K, P), observed peaks only
    for name in dict.fromkeys(ion.name for ion in ions):
        ion = ION_TYPES[name]
        rows = np.flatnonzero([i.name == name for i in ions])
        for part in ion.parts:
            delta = np.zeros(len(ELEMENTS), dtype=np.int64)
            part_mass = 0.0
            for e, n in part.delta:
                part_mass += element_mass(e) * n
                if e in ELEMENT_INDEX:
                    delta[ELEMENT_INDEX[e]] = n
            neutral = peaks * abs(ion.charge) + ion.charge * ELECTRON_MASS - part_mass
            hits, query, error = index.query(neutral, tol)
            needs = (hits + np.minimum(delta, 0) >= 0).all(axis=1)  # "-H" needs a hydrogen
            if not part.delta:
                needs &= hits.any(axis=1)  # an ion must have atoms
            hits, query, error = hits[needs], query[needs], error[needs]
            if not len(hits):
                continue
            cols = np.flatnonzero(hits.any(axis=0))  # elements some hit holds (the others are 0 <= anything)
            sub_hits, sub_cores = hits[:, cols].astype(np.int16), cores[rows][:, cols].astype(np.int16)
            inside = np.ones((len(rows), len(hits)), dtype=bool)  # (K', T): hit is a subformula of the core
            for j in range(len(cols)):
                inside &= sub_hits[None, :, j] <= sub_cores[:, j, None]
            shift, peak = np.divmod(query, mz.size)
            for j, row in enumerate(rows):
                sel = inside[j]
                explained[row, shift[sel], peak[sel]] = True
                real = sel & (shift == 0)
                np.minimum.at(best_error[row], peak[real], error[real])
    observed = explained[:, 0, :]  # (K, P)
    out["frag_intensity"] = (observed * weight).sum(axis=1) / total
    out["frag_peaks"] = observed.mean(axis=1)
    out["frag_decoy"] = (explained[:, 1:, :] * weight).sum(axis=2).mean(axis=1) / total
    explained_w = (observed * weight).sum(axis=1)
    err = np.where(observed, best_error, 0.0)
    out["frag_error"] = np.divide((err * weight).sum(axis=1), explained_w, out=np.zeros(k), where=explained_w > 0)
    out["n_explained"] = observed.sum(axis=1)
    return out


def fragment_features(
    mz: np.ndarray, weight: np.ndarray, counts: Mapping[str, int], ion_type: str,
    tol_ppm: float = FRAGMENT_TOL_PPM, tol_da: float = FRAGMENT_TOL_DA,
) -> dict[str, float]:
    """:func:`fragment_features_many` for one formula (values as plain numbers)."""
    many = fragment_features_many(mz, weight, formula_vector(counts)[None, :], [ion_type], tol_ppm, tol_da)
    return {name: (int(v[0]) if name == "n_explained" else float(v[0])) for name, v in many.items()}


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormulaCandidate:
    """One (formula, ion type) for a precursor, with its score terms."""

    rank: int
    formula: str  # neutral molecular formula (Hill)
    ion_type: str
    neutral_mass: float
    theoretical_mz: float
    ppm_error: float  # (observed - theoretical) / theoretical * 1e6
    rdbe: float
    terms: Mapping[str, float]  # TERMS -> value; they add up to `score`
    score: float
    probability: float  # softmax of the scores over the table
    explained_intensity: float  # share of the (square-root) fragment intensity explained
    n_explained: int  # fragment peaks explained
    isomers: int  # structures of the molecule corpus with this formula
    supported: bool | None = None  # whether the model can run this ion type (None: not asked)


@dataclass(frozen=True)
class FormulaTable:
    """Ranked formula candidates of one precursor."""

    spectrum_id: str
    precursor_mz: float
    ion_types: tuple[str, ...]
    candidates: tuple[FormulaCandidate, ...]
    n_decompositions: int  # formulas found before the fragment stage
    has_ms1: bool
    n_fragment_peaks: int
    notes: tuple[str, ...] = ()

    def top(self, k: int, supported_only: bool = True) -> tuple[FormulaCandidate, ...]:
        """The ``k`` best candidates (of ion types the model can run, unless ``supported_only=False``)."""
        pool = [c for c in self.candidates if c.supported is not False or not supported_only]
        return tuple(pool[:k])


def default_ion_types(spectrum: Spectrum, config: FormulaConfig = FormulaConfig()) -> tuple[str, ...]:
    """The ion types to consider for ``spectrum`` (its own adduct, else ``config``'s, else by polarity)."""
    if spectrum.adduct:
        return (get_ion_type(spectrum.adduct).name,)
    polarity = spectrum.polarity or "positive"
    if config.ion_types is not None:
        chosen = tuple(a for a in config.ion_types if ION_TYPES[a].charge * (1 if polarity == "positive" else -1) > 0)
        if not chosen:
            raise SpectrumError(f"none of the ion types {', '.join(config.ion_types)} is {polarity}; "
                                f"the spectrum is {polarity} mode")
        return chosen
    return DEFAULT_ION_TYPES[polarity]


def _ion_counts(neutral: Mapping[str, int], ion_type: str) -> dict[str, int]:
    return parse_adduct(ion_type).ion_counts(neutral)


def _partners(neutral_mass: float, ion_type: str, polarity: str, ms1, config: FormulaConfig) -> int:
    """Other ion types of the molecule seen in the survey peaks."""
    if ms1 is None or not len(ms1.mz):
        return 0
    found = 0
    for other in PARTNER_ION_TYPES[polarity]:
        if other == ion_type:
            continue
        target = precursor_mz_from_neutral(neutral_mass, other)
        tol = max(config.ms1_tol_ppm * 1e-6 * target, config.ms1_tol_da)
        lo, hi = np.searchsorted(ms1.mz, [target - tol, target + tol])
        found += int(hi > lo)
    return found


def rank_formulas(
    spectrum: Spectrum,
    *,
    ms1=None,
    config: FormulaConfig = FormulaConfig(),
    supported_adducts: Iterable[str] | None = None,
    scorer: FormulaScorer | None = None,
    cancel: Callable[[], bool] | None = None,
) -> FormulaTable:
    """Formula and ion type candidates of a precursor, best first (module notes).

    ``ms1`` is the precursor's :class:`~engine.features.MS1Evidence` (isotopes, co-detected
    adducts), when the run has survey scans. A spectrum with a formula keeps it: only the ion
    types are ranked (those whose m/z fits). ``supported_adducts`` marks each candidate
    ``supported`` or not (the ion types a model can run).
    """
    scorer = scorer or default_scorer()
    notes = []
    precision = precursor_precision_da(spectrum)
    if precision > config.tolerance(spectrum.precursor_mz) and not spectrum.formula:
        raise SpectrumError(
            f"the precursor m/z {spectrum.precursor_mz:g} is written to {precision:g} Da; formulas need it to "
            f"{config.ppm:g} ppm: give the molecular formula (FORMULA=, or --formula)"
        )
    ion_types = default_ion_types(spectrum, config)
    polarity = "positive" if ION_TYPES[ion_types[0]].charge > 0 else "negative"
    supported = None if supported_adducts is None else set(supported_adducts)
    tol = max(config.tolerance(spectrum.precursor_mz), precision)
    frag_mz, frag_w = fragment_peaks(spectrum)
    if frag_mz.size == 0:
        notes.append("no fragments: formulas ranked by mass, prior and MS1 only")
    rows = []  # (ion_type, vector, mass, stage-1 terms, features)
    too_heavy: list[str] = []
    n_decompositions = 0
    for ion_type in ion_types:
        neutral = neutral_mass_from_precursor(spectrum.precursor_mz, ion_type)
        if spectrum.formula:
            v = formula_vector(parse_formula(spectrum.formula))[None, :]
            masses = v @ _element_mass_array()
            keep = np.abs(masses - neutral) <= tol
            vectors, masses = v[keep], masses[keep]
        elif neutral <= 0:
            continue
        elif neutral > config.max_mass:
            too_heavy.append(f"{neutral:.1f} Da as {ion_type}")
            continue
        else:
            vectors, masses = decompose_mass(neutral, tol, config.decomposition)
        n_decompositions += len(vectors)
        if not len(vectors):
            continue
        adduct = parse_adduct(ion_type)
        theo_mz = (adduct.n_molecules * masses + adduct.mass_delta) / abs(adduct.charge)  # precursor_mz_from_neutral
        ppm = (spectrum.precursor_mz - theo_mz) / theo_mz * 1e6
        features = scorer.prior.features(vectors, masses)
        features["mass_error"] = (ppm / 10.0) ** 2
        terms = scorer.linear(scorer.stage1, features, len(vectors))
        stage1 = terms["mass"] + terms["prior"]
        best = np.argsort(-stage1, kind="stable")[: config.max_scored]
        for i in best:
            rows.append((ion_type, vectors[i], float(masses[i]), float(theo_mz[i]), float(ppm[i]),
                         {k: float(np.asarray(f)[i]) for k, f in features.items()}))
    if too_heavy:
        notes.append(f"neutral mass above {config.max_mass:g} Da ({', '.join(too_heavy)}), where formulas are too many "
                     f"to rank; give the formula")
    if cancel is not None and cancel():
        raise Cancelled("Cancelled by the user.")
    fragments = fragment_features_many(frag_mz, frag_w, np.array([r[1] for r in rows]).reshape(-1, len(ELEMENTS)),
                                       [r[0] for r in rows], config.fragment_tol_ppm, config.fragment_tol_da)
    stage2 = fragment_terms(fragments, np.array([r[2] for r in rows]))
    candidates = []
    for k, (ion_type, vector, mass, theo_mz, ppm, feats) in enumerate(rows):
        if cancel is not None and cancel():
            raise Cancelled("Cancelled by the user.")
        counts = vector_to_counts(vector)
        frag = {name: values[k] for name, values in fragments.items()}
        feats = {**feats, **{name: values[k] for name, values in stage2.items()}}
        t = scorer.linear(scorer.stage2, {name: np.array([value]) for name, value in feats.items()}, 1)
        terms = {"mass": float(t["mass"][0]), "prior": float(t["prior"][0]), "fragments": float(t["fragments"][0]),
                 "ion_type": scorer.ion_prior(ion_type), "isotopes": 0.0, "adducts": 0.0}
        if ms1 is not None:
            match = _isotopes(counts, ion_type, spectrum.precursor_mz, ms1, config)
            if match is not None:
                terms["isotopes"] = config.isotope_weight * match.score
            terms["adducts"] = config.adduct_weight * _partners(mass, ion_type, polarity, ms1, config)
        candidates.append(dict(
            formula=format_formula(counts), ion_type=ion_type, neutral_mass=mass, theoretical_mz=theo_mz,
            ppm_error=ppm, rdbe=float(rdbe_of(vector[None, :])[0]), terms=terms, score=sum(terms.values()),
            explained_intensity=float(frag["frag_intensity"]), n_explained=int(frag["n_explained"]),
            isomers=int(scorer.prior.isomers(vector[None, :])[0]),
            supported=None if supported is None else ion_type in supported,
        ))
    candidates.sort(key=lambda c: (-c["score"], abs(c["ppm_error"]), c["formula"], c["ion_type"]))
    scores = np.array([c["score"] for c in candidates])
    probs = np.exp(scores - scores.max()) if len(scores) else scores
    probs = probs / probs.sum() if len(scores) else probs
    table = tuple(FormulaCandidate(rank=i + 1, probability=float(p), **c) for i, (c, p) in enumerate(zip(candidates, probs)))
    if not table and not too_heavy:
        notes.append(f"no formula within {tol:.4g} Da of the neutral mass for {', '.join(ion_types)}")
    return FormulaTable(spectrum_id=spectrum.id, precursor_mz=spectrum.precursor_mz, ion_types=ion_types,
                        candidates=table, n_decompositions=n_decompositions, has_ms1=ms1 is not None,
                        n_fragment_peaks=int(frag_mz.size), notes=tuple(notes))


def _isotopes(counts: Mapping[str, int], ion_type: str, precursor_mz: float, ms1, config: FormulaConfig) -> IsotopeMatch | None:
    try:
        ion = _ion_counts(counts, ion_type)
    except AdductError:
        return None
    return match_isotopes(ion, parse_adduct(ion_type).charge, ms1.mz, ms1.intensity, precursor_mz,
                          n_peaks=config.isotope_peaks, tol_ppm=config.ms1_tol_ppm, tol_da=config.ms1_tol_da)


def isotope_comparison(
    candidate: FormulaCandidate | tuple[str, str], ms1, precursor_mz: float | None = None,
    config: FormulaConfig = FormulaConfig(),
) -> IsotopeMatch | None:
    """Observed vs theoretical MS1 isotope peaks of a candidate (or ``(formula, ion type)``).

    ``None`` without survey peaks or when they hold no precursor peak.
    """
    if ms1 is None:
        return None
    formula, ion_type = (candidate.formula, candidate.ion_type) if isinstance(candidate, FormulaCandidate) else candidate
    mz = precursor_mz if precursor_mz is not None else ms1.precursor_mz
    return _isotopes(parse_formula(formula), get_ion_type(ion_type).name, mz, ms1, config)


def with_formula_candidate(spectrum: Spectrum, candidate: FormulaCandidate) -> Spectrum:
    """A copy of ``spectrum`` with the candidate's formula and ion type, and its rank and score noted."""
    import dataclasses

    metadata = {**spectrum.metadata, "formula_rank": str(candidate.rank),
                "formula_score": f"{candidate.probability:.4f}", "formula_source": "ranked candidates"}
    new = dataclasses.replace(spectrum, metadata=metadata).with_adduct(candidate.ion_type, check=False)
    return new.with_formula(candidate.formula, check=False)
