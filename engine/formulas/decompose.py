"""Molecular formulas of a neutral mass: decomposition within a tolerance, and chemical rules.

:func:`decompose_mass` lists every formula over C, H, N, O, P, S, F, Cl, Br, I, Si (by default)
whose monoisotopic mass lies within ``tol_da`` of a mass, that obeys:

* **element limits** (:data:`DEFAULT_MAX_COUNTS`; set from the molecule corpus: no structure of its
  562k has more than 24 N, 39 O, 8 P, 14 S, 36 F, 12 Cl, 10 Br, 6 I or 6 Si; the caps keep all
  but a few hundredths of a percent of them) and at least one carbon;
* **LEWIS and SENIOR** (Kind & Fiehn 2007, rules 2): the ring-plus-double-bond equivalent with the
  lowest valences (C/Si 4, N/P 3, O/S 2, H/halogens 1), ``RDBE = 1 + C + Si - (H + X)/2 +
  (N + P)/2``, is at least ``min_rdbe`` (0) and a whole number (an even-electron neutral molecule:
  the sum of valences is even). Hypervalent S and P (sulfones, phosphates) pass with their lowest
  valences, since their extra bonds go to oxygen;
* **element ratios** (rule 4, the "extended" ranges that hold for 99.99 % of the paper's
  databases): H/C 0.1-6 (halogens counted with H for the floor: C6Cl6 passes), N/C <= 4, O/C <= 3, P/C <= 2, S/C <= 3, F/C <= 6, Cl/C <= 2, Br/C <= 2,
  I/C <= 2, Si/C <= 1;
* **HNOPS counts** (rule 5): N, O, P, S all > 1: N < 10, O < 20, P < 4, S < 5; N, O, P all > 3:
  N < 11, O < 22, P < 6; O, P, S all > 1: O < 14, P < 3, S < 5; P, S, N all > 1: P < 3, S < 5,
  N < 4; N, O, S all > 6: N < 19, O < 14, S < 8. Kind & Fiehn's S < 3 in the three P-and-S rules
  dropped pesticides with two P and three or four S (ethion C9H22O4P2S4, temephos C16H20O6P2S3; issue #56);
* at most ``max_rare_elements`` (3) distinct elements besides C, H, N, O (the corpus has 0.02 %
  structures with four), or ``max_rare_with_p_and_s`` (4) when two of them are P and S: thiophosphate
  pesticides carry two halogens (profenofos C11H15BrClO3PS, bromophos C8H8BrCl2O3PS, iodofenphos
  C8H8Cl2IO3PS).

The search meets in the middle: all (C, H, N, O) compositions up to the mass, sorted by mass, and
all compositions of the other elements; for each of the latter a binary search finds the (C, H, N,
O) parts that complete the mass. A 500 Da query takes a few tens of milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

import numpy as np

from engine.chem.formula import ELEMENT_INDEX, ELEMENTS, element_mass
from engine.errors import ConfigError

DECOMPOSITION_ELEMENTS: tuple[str, ...] = ("C", "H", "N", "O", "P", "S", "F", "Cl", "Br", "I", "Si")
DEFAULT_MAX_COUNTS: Mapping[str, int] = MappingProxyType(
    {"C": 90, "H": 190, "N": 20, "O": 30, "P": 6, "S": 8, "F": 20, "Cl": 8, "Br": 6, "I": 6, "Si": 6}
)
#: Kind & Fiehn (2007) rule 4, extended ranges: element / C.
RATIO_LIMITS: Mapping[str, tuple[float, float]] = MappingProxyType({
    "H": (0.1, 6.0), "N": (0.0, 4.0), "O": (0.0, 3.0), "P": (0.0, 2.0), "S": (0.0, 3.0), "F": (0.0, 6.0),
    "Cl": (0.0, 2.0), "Br": (0.0, 2.0), "I": (0.0, 2.0), "Si": (0.0, 1.0),
})  # fmt: skip
#: S must stay below this in rule 5's P-and-S parts (Kind & Fiehn: 3; 5 keeps ethion's S4 and temephos' S3).
HNOPS_MAX_S = 5
_CORE = ("C", "H", "N", "O")
_HALOGENS = ("F", "Cl", "Br", "I")
_I = ELEMENT_INDEX


@dataclass(frozen=True)
class DecompositionConfig:
    """Which formulas a mass may have (see the module notes)."""

    elements: tuple[str, ...] = field(default=DECOMPOSITION_ELEMENTS, metadata={"help": "elements allowed"})
    max_counts: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_MAX_COUNTS), metadata={
        "help": "most atoms per element (elements left out keep their default)"})
    max_rare_elements: int = field(default=3, metadata={"help": "distinct elements besides C, H, N, O"})
    max_rare_with_p_and_s: int = field(default=4, metadata={
        "help": "distinct elements besides C, H, N, O when P and S are two of them (thiophosphates with halogens)"})
    min_rdbe: float = field(default=0.0, metadata={"help": "lowest ring-plus-double-bond equivalent"})
    golden_rules: bool = field(default=True, metadata={"help": "element ratios and HNOPS counts (Kind & Fiehn)"})

    def __post_init__(self):
        elements = tuple(self.elements)
        object.__setattr__(self, "elements", elements)
        unknown = [e for e in elements if e not in DECOMPOSITION_ELEMENTS]
        if unknown:
            raise ConfigError(f"`elements` holds {', '.join(unknown)}; allowed are {', '.join(DECOMPOSITION_ELEMENTS)}.")
        if "C" not in elements or "H" not in elements:
            raise ConfigError(f"`elements` must include C and H, got {', '.join(elements)}.")
        counts = dict(DEFAULT_MAX_COUNTS)
        counts.update(self.max_counts)
        for e, n in counts.items():
            if e not in DECOMPOSITION_ELEMENTS or isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ConfigError(f"`max_counts` must map elements of {', '.join(DECOMPOSITION_ELEMENTS)} to whole "
                                  f"numbers >= 0, got {e}: {n!r}.")
        object.__setattr__(self, "max_counts", MappingProxyType(counts))
        if isinstance(self.max_rare_elements, bool) or not isinstance(self.max_rare_elements, int) or self.max_rare_elements < 0:
            raise ConfigError(f"`max_rare_elements` must be a whole number >= 0, got {self.max_rare_elements!r}.")
        value = self.max_rare_with_p_and_s
        if isinstance(value, bool) or not isinstance(value, int) or value < self.max_rare_elements:
            raise ConfigError(f"`max_rare_with_p_and_s` must be a whole number >= max_rare_elements "
                              f"({self.max_rare_elements}), got {value!r}.")
        if not math.isfinite(self.min_rdbe):
            raise ConfigError(f"`min_rdbe` must be a number, got {self.min_rdbe!r}.")

    def cap(self, element: str) -> int:
        return self.max_counts[element] if element in self.elements else 0


def rdbe_of(vectors: np.ndarray) -> np.ndarray:
    """RDBE with the lowest valences, ``1 + C + Si - (H + X)/2 + (N + P)/2``, of count vectors (..., 14)."""
    v = np.asarray(vectors, dtype=np.float64)
    x = sum(v[..., _I[e]] for e in _HALOGENS)
    return 1.0 + v[..., _I["C"]] + v[..., _I["Si"]] - (v[..., _I["H"]] + x) / 2.0 + (v[..., _I["N"]] + v[..., _I["P"]]) / 2.0


def chemical_rules_mask(vectors: np.ndarray, config: DecompositionConfig = DecompositionConfig()) -> np.ndarray:
    """Which count vectors ``(K, 14)`` pass LEWIS/SENIOR and (with ``golden_rules``) rules 4 and 5."""
    v = np.asarray(vectors, dtype=np.int64)
    r = rdbe_of(v)
    ok = (r >= config.min_rdbe) & (r == np.floor(r)) & (v[:, _I["C"]] >= 1)
    ok &= (v >= 0).all(axis=1)
    for e in ELEMENTS:
        ok &= v[:, _I[e]] <= (config.cap(e) if e in DECOMPOSITION_ELEMENTS else 0)
    rare = [e for e in DECOMPOSITION_ELEMENTS if e not in _CORE]
    n_rare = (v[:, [_I[e] for e in rare]] > 0).sum(axis=1)
    p_and_s = (v[:, _I["P"]] > 0) & (v[:, _I["S"]] > 0)
    ok &= (n_rare <= config.max_rare_elements) | (p_and_s & (n_rare <= config.max_rare_with_p_and_s))
    if config.golden_rules:
        c = v[:, _I["C"]].astype(np.float64)
        for e, (lo, hi) in RATIO_LIMITS.items():
            n = v[:, _I[e]]
            if e == "H":  # halogens stand in for hydrogens (C6Cl6, perfluorinated acids)
                n = n + sum(v[:, _I[x]] for x in _HALOGENS)
            ok &= (n >= lo * c) & (n <= hi * c)
        n, o, p, s = (v[:, _I[e]] for e in ("N", "O", "P", "S"))
        ok &= ~((n > 1) & (o > 1) & (p > 1) & (s > 1) & ((n >= 10) | (o >= 20) | (p >= 4) | (s >= HNOPS_MAX_S)))
        ok &= ~((n > 3) & (o > 3) & (p > 3) & ((n >= 11) | (o >= 22) | (p >= 6)))
        ok &= ~((o > 1) & (p > 1) & (s > 1) & ((o >= 14) | (p >= 3) | (s >= HNOPS_MAX_S)))
        ok &= ~((p > 1) & (s > 1) & (n > 1) & ((p >= 3) | (s >= HNOPS_MAX_S) | (n >= 4)))
        ok &= ~((n > 6) & (o > 6) & (s > 6) & ((n >= 19) | (o >= 14) | (s >= 8)))
    return ok


@lru_cache(maxsize=1)
def _masses() -> np.ndarray:
    return np.array([element_mass(e) for e in ELEMENTS], dtype=np.float64)


def _grid(axes: list[np.ndarray]) -> np.ndarray:
    """Cartesian product of integer ranges as rows ``(N, len(axes))``."""
    if not axes:
        return np.zeros((1, 0), dtype=np.int64)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1).astype(np.int64)


@lru_cache(maxsize=4)
def _rare_part(elements: tuple[str, ...], caps: tuple[int, ...], max_rare: int, max_mass: float,
               max_rare_with_p_and_s: int | None = None):
    """Every composition of the non-CHNO elements (at most ``max_rare`` of them, or ``max_rare_with_p_and_s`` when
    P and S are two of them) up to ``max_mass``."""
    masses = _masses()
    rows = [np.zeros(len(ELEMENTS), dtype=np.int64)]
    rare = [(e, c) for e, c in zip(elements, caps) if e not in _CORE and c > 0]
    from itertools import combinations

    with_p_and_s = max(max_rare, max_rare_with_p_and_s or 0)
    for k in range(1, with_p_and_s + 1):
        for combo in combinations(rare, k):
            if k > max_rare and not {"P", "S"} <= {e for e, _ in combo}:
                continue
            grid = _grid([np.arange(1, c + 1) for _, c in combo])  # (G, k)
            block = np.zeros((len(grid), len(ELEMENTS)), dtype=np.int64)
            for j, (e, _) in enumerate(combo):
                block[:, _I[e]] = grid[:, j]
            block = block[block @ masses <= max_mass]
            if len(block):
                rows.append(block)
    vectors = np.vstack([r.reshape(-1, len(ELEMENTS)) for r in rows])
    return vectors, vectors @ masses


_CHNO = [_I["C"], _I["H"], _I["N"], _I["O"]]
_CORE_CACHE: dict[tuple, tuple[float, np.ndarray, np.ndarray]] = {}
_CORE_STEP_DA = 250.0


def _build_core(mass_max: float, config: DecompositionConfig, extra_h: int) -> tuple[np.ndarray, np.ndarray]:
    """(C, H, N, O) compositions with mass <= ``mass_max``, sorted by mass: ``(counts (K, 4) int16, masses)``."""
    m = _masses()
    c_max = min(config.cap("C"), int(mass_max // m[_I["C"]]))
    if c_max < 1:
        return np.zeros((0, 4), dtype=np.int16), np.zeros(0)
    n_max = min(config.cap("N"), int(mass_max // m[_I["N"]]))
    o_max = min(config.cap("O"), int(mass_max // m[_I["O"]]))
    cno = _grid([np.arange(1, c_max + 1), np.arange(n_max + 1), np.arange(o_max + 1)])  # (T, 3)
    cno_mass = cno @ m[[_I["C"], _I["N"], _I["O"]]]
    keep = cno_mass <= mass_max
    if config.golden_rules:
        keep &= (cno[:, 1] <= RATIO_LIMITS["N"][1] * cno[:, 0]) & (cno[:, 2] <= RATIO_LIMITS["O"][1] * cno[:, 0])
    cno, cno_mass = cno[keep], cno_mass[keep]
    # hydrogens: at most what the valences allow (RDBE >= 0, with P and Si of the other part as slack);
    # the H/C floor counts halogens too, so it is checked on the whole formula
    h_hi = 2 * cno[:, 0] + cno[:, 1] + 2 + extra_h
    h_hi = np.minimum(h_hi, config.cap("H"))
    if config.golden_rules:
        h_hi = np.minimum(h_hi, np.floor(RATIO_LIMITS["H"][1] * cno[:, 0]).astype(np.int64))
    h_hi = np.minimum(h_hi, np.floor((mass_max - cno_mass) / m[_I["H"]]).astype(np.int64))
    n_h = np.maximum(h_hi + 1, 0)
    rows = np.repeat(np.arange(len(cno)), n_h)
    h = np.arange(int(n_h.sum())) - np.repeat(np.cumsum(n_h) - n_h, n_h)
    counts = np.empty((len(rows), 4), dtype=np.int16)
    counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3] = cno[rows, 0], h, cno[rows, 1], cno[rows, 2]
    masses = cno_mass[rows] + h * m[_I["H"]]
    order = np.argsort(masses, kind="stable")
    return counts[order], masses[order]


def _core_part(mass_max: float, config: DecompositionConfig, extra_h: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_build_core` up to ``mass_max``, cut from a cached table built for a larger mass.

    The table only grows (in 250 Da steps), so a run's precursors share one (1000 Da: 2.3 million
    rows, 37 MB).
    """
    key = (tuple(config.cap(e) for e in ("C", "H", "N", "O")), config.golden_rules, extra_h)
    cached = _CORE_CACHE.get(key)
    if cached is None or cached[0] < mass_max:
        size = math.ceil(mass_max / _CORE_STEP_DA) * _CORE_STEP_DA
        cached = (size, *_build_core(size, config, extra_h))
        _CORE_CACHE.clear()  # one table at a time
        _CORE_CACHE[key] = cached
    _, counts, masses = cached
    n = int(np.searchsorted(masses, mass_max, side="right"))
    return counts[:n], masses[:n]


def decompose_mass(
    mass: float, tol_da: float, config: DecompositionConfig = DecompositionConfig()
) -> tuple[np.ndarray, np.ndarray]:
    """Formulas within ``tol_da`` of a neutral monoisotopic ``mass`` that obey the rules (module notes).

    Returns ``(vectors, masses)``: int64 ``(K, 14)`` counts over :data:`~engine.chem.formula.ELEMENTS`
    and their masses, sorted by ``|mass error|``.
    """
    if not (math.isfinite(mass) and mass > 0):
        raise ConfigError(f"The neutral mass must be a number > 0, got {mass!r}.")
    if not (math.isfinite(tol_da) and tol_da > 0):
        raise ConfigError(f"The mass tolerance must be > 0 Da, got {tol_da!r}.")
    hi = mass + tol_da
    caps = tuple(config.cap(e) for e in DECOMPOSITION_ELEMENTS)  # 0 for elements not allowed
    # the rare part is cached for a mass range (rounded up to 100 Da, so nearby masses share it)
    rare, rare_mass = _rare_part(DECOMPOSITION_ELEMENTS, caps, config.max_rare_elements, float(math.ceil(hi / 100.0) * 100.0),
                                 config.max_rare_with_p_and_s)
    within = rare_mass <= hi
    rare, rare_mass = rare[within], rare_mass[within]
    extra_h = max(config.cap("P") + 2 * config.cap("Si"), 0)
    core, core_mass = _core_part(hi, config, extra_h)
    if not len(core) or not len(rare):
        return np.zeros((0, len(ELEMENTS)), dtype=np.int64), np.zeros(0)
    lo_idx = np.searchsorted(core_mass, mass - tol_da - rare_mass, side="left")  # (R,)
    hi_idx = np.searchsorted(core_mass, mass + tol_da - rare_mass, side="right")
    n_hits = np.maximum(hi_idx - lo_idx, 0)
    which_rare = np.repeat(np.arange(len(rare)), n_hits)
    which_core = np.arange(int(n_hits.sum())) - np.repeat(np.cumsum(n_hits) - n_hits, n_hits) + lo_idx[which_rare]
    vectors = rare[which_rare].copy()  # (K, 14)
    vectors[:, _CHNO] += core[which_core]
    masses = core_mass[which_core] + rare_mass[which_rare]
    keep = chemical_rules_mask(vectors, config)
    vectors, masses = vectors[keep], masses[keep]
    order = np.lexsort((masses, np.abs(masses - mass)))
    return vectors[order], masses[order]
