"""The corpus prior of molecular formulas: how ordinary a formula is among the molecule corpus's 562k structures
(its pattern of elements beyond CHNO, its element counts at its mass, its H/C, N/C, O/C and RDBE/C, and how many
corpus structures have exactly this formula). :class:`FormulaPrior` holds the statistics; the scorer
(:mod:`engine.formulas.scorer`) turns them into the ``prior`` term.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from engine.chem.formula import (
    ELEMENT_INDEX,
    ELEMENTS,
    format_formula,
    formula_vector,
    parse_formula,
)
from engine.errors import ConfigError, FormulaError
from engine.formulas.decompose import (
    DECOMPOSITION_ELEMENTS,
    DEFAULT_MAX_COUNTS,
    rdbe_of,
)

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


def pattern_codes(vectors: np.ndarray) -> np.ndarray:
    """Which elements beyond C, H, N, O each count vector holds (its element pattern), as a bit code (bit j: the
    j-th of P, S, F, Cl, Br, I, Si)."""
    present = np.asarray(vectors)[:, [ELEMENT_INDEX[e] for e in _RARE]] > 0  # (K, 7)
    return present.astype(np.int64) @ (1 << np.arange(len(_RARE)))


_pattern_codes = pattern_codes


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
        masses = v @ element_mass_array()
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
            k = keys_of_formulas(list(isomers))
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
def element_mass_array() -> np.ndarray:
    from engine.chem.formula import element_masses

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


_TOKEN = re.compile(r"([A-Z][a-z]?)(\d*)")


def keys_of_formulas(formulas: list[str]) -> np.ndarray:
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


def formulas_of_keys(keys: np.ndarray) -> list[str]:
    out = []
    for key in keys.tolist():
        counts = {}
        for j in range(len(_RADICES) - 1, -1, -1):
            key, n = divmod(key, int(_RADICES[j]))
            if n:
                counts[DECOMPOSITION_ELEMENTS[j]] = n
        out.append(format_formula(counts))
    return out
