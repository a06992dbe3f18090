"""Subformula enumeration and peak annotation: what the spectrum encoder consumes.

Every fragment ion of a precursor is, chemically, a *neutral subformula* ``S`` of the precursor's
formula plus an *ion part* (``+H``, ``-H``, ``+Na``, ...). :func:`enumerate_subformulas` lists all
``S`` (element-wise ``0 <= S <= M``), :func:`annotate_peaks` gives each peak the ion formula whose
m/z is closest to it, if that one lies within tolerance.

Defaults and rules (measured on 2,000 MassBank ``[M+H]+`` / ``[M+Na]+`` spectra, 1,877 of them
high-resolution; decoys = the same peaks shifted by 10-30 mDa):

* **Tolerance**: a peak matches a candidate when ``|observed - theoretical| <=
  max(tol_ppm * 1e-6 * observed, tol_da)``; defaults ``tol_ppm=10``, ``tol_da=0.002``, i.e. 10 ppm
  above m/z 200 and an absolute 2 mDa floor below it, where a ppm window becomes narrower than
  the absolute error of QTOF instruments (below m/z 100 pure 10 ppm explains 66 % of the peaks,
  2 mDa 82 %, the decoys rise from 12 % to 27 %). With these defaults 80 % of the high-resolution
  peaks and 90 % of their intensity are explained (decoys 42 %). A 5 mDa floor adds 11 points of
  peaks but 24 points of decoys, so it is not the default. ``tol_da=0`` gives a pure ppm window.
* **Pruning** (optional, ``min_rdbe``, default ``-0.5``): a neutral subformula is kept when its
  ring-plus-double-bond equivalent, computed with the lowest common valences (C 4, H 1, N 3, O 2,
  S 2, P 3, F/Cl/Br/I 1, B 3, Si 4, Se 2, As 3) as ``1 + sum(n_i * (v_i - 2)) / 2``, is at least
  ``-0.5``. It removes a median 20 % of the candidates (7-39 %); the peaks that lose their match
  (2 % of peaks, median intensity 1.3 % of the base peak) were explained by impossible ions such
  as ``C2H9S+``, ``CH13NO+`` or ``C6H60NO14+``, while the decoy match rate falls by 5 points.
  ``min_rdbe=None`` switches it off.
* **Low resolution**: unit-resolution spectra (QQ, ion trap; 6 % of the sample) are explained at
  the decoy rate (17 % of peaks vs 18 %); their annotations carry no information.
* **Ion parts** (see :data:`ION_TYPES`): fragments of a protonated precursor are ``S + H``, of a
  deprotonated one ``S - H``; fragments of an adduct such as ``[M+Na]+`` may keep the adduct
  (``S + Na``) or be protonated (``S + H``); ``[M+Cl]-`` / formate / acetate adducts give
  ``S - H`` or keep the anion. Radical fragment ions need no extra part: ``S`` with an odd number
  of hydrogens already describes them.
* **Ties**: when two routes give the same ion formula (``S + NH4`` and ``(S + NH3) + H``) the part
  listed first in the ion type wins, i.e. the (de)protonated route that explains the fragment from
  the molecule's own atoms. Between different formulas the smaller mass error wins; an exact tie
  of the error goes to the lower-mass candidate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine.chem.adducts import Adduct, parse_adduct
from engine.chem.formula import (
    ELECTRON_MASS,
    ELEMENT_INDEX,
    ELEMENTS,
    element_mass,
    element_masses,
    format_formula,
    formula_vector,
    parse_formula,
    vector_to_counts,
)
from engine.errors import AdductError, ConfigError, FormulaError, SpectrumError
from engine.spectra.spectrum import Spectrum

DEFAULT_TOL_PPM = 10.0
DEFAULT_TOL_DA = 0.002
DEFAULT_MIN_RDBE = -0.5

# Lowest common valence of each element of ELEMENTS, for the RDBE filter.
VALENCES = np.array([4, 1, 3, 2, 2, 3, 1, 1, 1, 1, 3, 4, 2, 3], dtype=np.int64)

# Enumerations larger than this are refused instead of exhausting memory: a row costs ~36 bytes,
# plus ~37 bytes per ion part in the candidate table (C60H100N10O20Cl2Br: 5.4 M rows).
MAX_SUBFORMULAS = 10_000_000

_H = ELEMENT_INDEX["H"]


# --------------------------------------------------------------------------------------------
# Ion types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IonPart:
    """What a fragment ion adds to (or removes from) its neutral subformula."""

    label: str  # "+H", "-H", "+Na", "" (radical cation / intrinsic charge)
    delta: tuple[tuple[str, int], ...]  # element counts added (negative: removed)
    adduct_retained: bool  # True when the part carries atoms of a non-proton adduct (Na, Cl, ...)


@dataclass(frozen=True)
class IonType:
    """A precursor ion type: its charge, the ion parts its fragments may carry, and its core.

    ``core_delta`` is applied to the molecule ``M`` before enumeration (``[M-H2O+H]+`` fragments
    come from ``M - H2O``); ``precursor_part`` is the index of the part the precursor itself carries.
    """

    name: str
    charge: int
    parts: tuple[IonPart, ...]
    precursor_part: int = 0
    core_delta: tuple[tuple[str, int], ...] = ()


_PLUS_H = IonPart("+H", (("H", 1),), False)
_MINUS_H = IonPart("-H", (("H", -1),), False)
_NA = IonPart("+Na", (("Na", 1),), True)
_K = IonPart("+K", (("K", 1),), True)
_NH4 = IonPart("+NH4", (("N", 1), ("H", 4)), True)
_CL = IonPart("+Cl", (("Cl", 1),), True)
_HCOO = IonPart("+HCOO", (("C", 1), ("H", 1), ("O", 2)), True)
_CH3COO = IonPart("+CH3COO", (("C", 2), ("H", 3), ("O", 2)), True)
_H2O_LOSS = (("H", -2), ("O", -1))

_ION_TYPE_LIST: tuple[IonType, ...] = (
    IonType("[M+H]+", 1, (_PLUS_H,)),
    IonType("[M]+", 1, (IonPart("", (), False),)),
    IonType("[M+Na]+", 1, (_NA, _PLUS_H)),
    IonType("[M+K]+", 1, (_K, _PLUS_H)),
    IonType("[M+NH4]+", 1, (_PLUS_H, _NH4), precursor_part=1),
    IonType("[M-H2O+H]+", 1, (_PLUS_H,), core_delta=_H2O_LOSS),
    IonType("[M-H]-", -1, (_MINUS_H,)),
    IonType("[M+Cl]-", -1, (_MINUS_H, _CL), precursor_part=1),
    IonType("[M+HCOO]-", -1, (_MINUS_H, _HCOO), precursor_part=1),
    IonType("[M+CH3COO]-", -1, (_MINUS_H, _CH3COO), precursor_part=1),
    IonType("[M-H2O-H]-", -1, (_MINUS_H,), core_delta=_H2O_LOSS),
)

#: Supported ion types by normalised name (:func:`engine.chem.adducts.parse_adduct` spelling).
ION_TYPES: dict[str, IonType] = {ion.name: ion for ion in _ION_TYPE_LIST}


def get_ion_type(ion: str | Adduct | IonType) -> IonType:
    """The :class:`IonType` of a precursor type such as ``"[M+H]+"``, ``"M+Na"`` or ``"[M+FA-H]-"``.

    Any spelling :func:`~engine.chem.adducts.parse_adduct` understands is accepted; a radical mark
    (``[M]+*``) is ignored, since radical fragments are covered by the subformulas themselves.
    """
    if isinstance(ion, IonType):
        return ion
    name = parse_adduct(ion).name.rstrip("*")
    if name not in ION_TYPES:
        raise AdductError(
            f"Adduct {name} is not supported for peak annotation; supported are {', '.join(ION_TYPES)}."
        )
    return ION_TYPES[name]


# --------------------------------------------------------------------------------------------
# Subformula enumeration
# --------------------------------------------------------------------------------------------


def rdbe(vectors: np.ndarray) -> np.ndarray:
    """Ring-plus-double-bond equivalents of count vectors ``(..., 14)`` (lowest valences)."""
    return 1.0 + (np.asarray(vectors, dtype=np.int64) @ (VALENCES - 2)) / 2.0


def _as_vector(formula: str | Mapping[str, int]) -> np.ndarray:
    counts = parse_formula(formula) if isinstance(formula, str) else formula
    vec = formula_vector(counts)
    if (vec < 0).any():
        raise FormulaError(f"Formula counts must be non-negative, got {dict(counts)!r}.")
    return vec


def enumerate_subformulas(
    formula: str | Mapping[str, int], *, min_rdbe: float | None = DEFAULT_MIN_RDBE
) -> tuple[np.ndarray, np.ndarray]:
    """All element-count vectors ``0 <= S <= formula`` that pass the RDBE filter, and their masses.

    Returns ``(vectors, masses)``: ``vectors`` int16 ``(K, 14)`` over :data:`ELEMENTS` (int16 keeps
    a 5-million-row enumeration at 150 MB), ``masses`` float64 ``(K,)`` neutral monoisotopic
    masses; rows run over the heavy elements in lexicographic order, hydrogens fastest.
    The empty formula is included (it is the neutral part of a bare ``H+`` / ``Na+`` ion). With
    ``min_rdbe=None`` ``K`` is the product of ``(n_i + 1)``. Results are cached per formula and
    returned read-only.
    """
    vec = _as_vector(formula)
    return _enumerate(tuple(int(n) for n in vec), min_rdbe)


@lru_cache(maxsize=8)
def _enumerate(core: tuple[int, ...], min_rdbe: float | None) -> tuple[np.ndarray, np.ndarray]:
    top = np.array(core, dtype=np.int64)
    heavy = [i for i in range(len(ELEMENTS)) if i != _H and top[i] > 0]
    n_grid = int(np.prod([top[i] + 1 for i in heavy]))
    if n_grid > MAX_SUBFORMULAS:
        _too_many(top, n_grid)
    # Cartesian grid over the heavy elements; hydrogens are expanded per grid row below.
    grid = np.zeros((n_grid, len(ELEMENTS)), dtype=np.int16)  # (G, 14), H column still 0
    if heavy:
        axes = np.meshgrid(*[np.arange(top[i] + 1, dtype=np.int16) for i in heavy], indexing="ij")
        for i, ax in zip(heavy, axes):
            grid[:, i] = ax.ravel()

    h_max = np.full(n_grid, top[_H], dtype=np.int64)  # (G,)
    if min_rdbe is not None:
        # rdbe = 1 + (u - H) / 2 with u the heavy-atom part, so rdbe >= r  <=>  H <= 2 + u - 2r.
        u = grid @ (VALENCES - 2)  # (G,)
        h_max = np.minimum(h_max, np.floor(2.0 + u - 2.0 * min_rdbe).astype(np.int64))
    keep = h_max >= 0
    grid, h_max = grid[keep], h_max[keep]
    n_h = h_max + 1  # (G,) hydrogen counts per row
    total = int(n_h.sum())
    if total > MAX_SUBFORMULAS:
        _too_many(top, total)
    vectors = np.repeat(grid, n_h, axis=0)  # (K, 14)
    starts = np.repeat(np.cumsum(n_h) - n_h, n_h)  # (K,) first row of each grid row's H block
    n_hydrogen = np.arange(total) - starts  # (K,)
    vectors[:, _H] = n_hydrogen
    element_mass_array = element_masses()
    masses = np.repeat(grid @ element_mass_array, n_h) + n_hydrogen * element_mass_array[_H]  # (K,)
    vectors.flags.writeable = False
    masses.flags.writeable = False
    return vectors, masses


def _too_many(top: np.ndarray, count: int) -> None:
    raise FormulaError(
        f"Formula {format_formula(vector_to_counts(top))} has at least {count:,} subformulas, more "
        f"than the {MAX_SUBFORMULAS:,} that annotation handles; it is too large for this tool."
    )


# --------------------------------------------------------------------------------------------
# Candidate ions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Candidates:
    """All candidate ions of one (core formula, ion type, filter), sorted by m/z."""

    mz: np.ndarray  # (K',) float64, ascending
    row: np.ndarray  # (K',) int64 row of the neutral subformula in `neutral`
    part: np.ndarray  # (K',) int8 index into IonType.parts
    neutral: np.ndarray  # (K, 14) int16 the enumeration (shared, not reordered)


def _part_vector(part: IonPart) -> tuple[np.ndarray, float]:
    """The part's counts over ELEMENTS (others such as Na, K left out) and its full mass."""
    vec = np.zeros(len(ELEMENTS), dtype=np.int64)
    for e, n in part.delta:
        if e in ELEMENT_INDEX:
            vec[ELEMENT_INDEX[e]] = n
    return vec, sum(element_mass(e) * n for e, n in part.delta)


def _has_outside_elements(part: IonPart) -> bool:
    return any(e not in ELEMENT_INDEX for e, _ in part.delta)


@lru_cache(maxsize=8)
def _candidates(core: tuple[int, ...], ion: IonType, min_rdbe: float | None) -> _Candidates:
    neutral, masses = _enumerate(core, min_rdbe)  # (K, 14) int16, (K,)
    top = np.array(core, dtype=np.int16)
    by_mass = np.argsort(masses)  # (K,) so that each part's m/z list comes out sorted
    chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for k, part in enumerate(ion.parts):
        vec, mass = _part_vector(part)
        keep = np.ones(len(neutral), dtype=bool)  # (K,)
        for i in np.flatnonzero(vec < 0):
            keep &= neutral[:, i] >= -vec[i]  # e.g. "-H" needs a hydrogen
        if not vec.any() and not _has_outside_elements(part):
            keep &= masses > 0  # an ion must have atoms
        for earlier in ion.parts[:k]:
            if _has_outside_elements(part) or _has_outside_elements(earlier):
                continue  # different Na/K content: never the same ion formula
            other = neutral + (vec - _part_vector(earlier)[0]).astype(np.int16)  # same ion via `earlier`
            valid = (other >= 0).all(axis=1) & (other <= top).all(axis=1)  # (K,)
            if min_rdbe is not None:
                valid &= rdbe(other) >= min_rdbe
            keep &= ~valid
        rows = by_mass[keep[by_mass]]  # (K',) kept rows in ascending mass
        ion_mz = (masses[rows] + mass - ion.charge * ELECTRON_MASS) / abs(ion.charge)
        chunks.append((ion_mz, rows, np.full(len(rows), k, dtype=np.int8)))
    mz = np.concatenate([c[0] for c in chunks])
    order = np.argsort(mz, kind="stable")  # merges the already sorted runs of the parts
    result = _Candidates(
        mz=mz[order],
        row=np.concatenate([c[1] for c in chunks])[order],
        part=np.concatenate([c[2] for c in chunks])[order],
        neutral=neutral,
    )
    for array in (result.mz, result.row, result.part):
        array.flags.writeable = False
    return result


def ion_formula(neutral: np.ndarray | Mapping[str, int], part: IonPart, charge: int) -> str:
    """Hill-order ion formula with its charge, e.g. ``C9H9O+`` for neutral ``C9H8O`` and ``+H``."""
    counts = vector_to_counts(neutral) if isinstance(neutral, np.ndarray) else dict(neutral)
    for e, n in part.delta:
        counts[e] = counts.get(e, 0) + n
    sign = "+" if charge > 0 else "-"
    return format_formula(counts) + (sign if abs(charge) == 1 else f"{abs(charge)}{sign}")


# --------------------------------------------------------------------------------------------
# Annotation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Annotation:
    """Per-peak subformula annotation of one spectrum (peaks in the order given)."""

    ion_type: str
    mz: np.ndarray  # (N,) float64 observed m/z
    intensity: np.ndarray  # (N,) float64
    matched: np.ndarray  # (N,) bool
    neutral: np.ndarray  # (N, 14) int64 neutral subformula, zeros where unmatched
    ion_formula: tuple[str | None, ...]  # (N,) e.g. "C9H9O+", None where unmatched
    adduct_retained: np.ndarray  # (N,) bool: the ion keeps a non-proton adduct (Na, Cl, ...)
    theoretical_mz: np.ndarray  # (N,) float64, NaN where unmatched
    error_ppm: np.ndarray  # (N,) float64 (observed - theoretical) / theoretical * 1e6, NaN where unmatched
    root_neutral: np.ndarray  # (14,) int64: the precursor's neutral core (M, or M - H2O, ...)
    root_ion_formula: str  # precursor ion formula, e.g. "C10H11O3+"
    root_mz: float  # theoretical precursor m/z
    root_error_ppm: float | None  # observed precursor m/z error when one was given
    tol_ppm: float
    tol_da: float
    n_candidates: int  # candidate ions searched

    @property
    def n_matched(self) -> int:
        return int(self.matched.sum())


def _check_peaks(mz: np.ndarray, intensity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mz = np.asarray(mz, dtype=np.float64)
    intensity = np.asarray(intensity, dtype=np.float64)
    if mz.ndim != 1 or mz.shape != intensity.shape:
        raise SpectrumError(
            f"m/z and intensity must be 1-D arrays of the same length, got shapes {mz.shape} and "
            f"{intensity.shape}."
        )
    if not (np.isfinite(mz).all() and np.isfinite(intensity).all()):
        raise SpectrumError("Peaks contain NaN or infinite values; remove them before annotation.")
    if (mz <= 0).any() or (intensity < 0).any():
        raise SpectrumError("Peaks need m/z > 0 and intensity >= 0.")
    return mz, intensity


def annotate_peaks(
    mz: np.ndarray,
    intensity: np.ndarray,
    formula: str | Mapping[str, int],
    ion: str | Adduct | IonType,
    *,
    tol_ppm: float = DEFAULT_TOL_PPM,
    tol_da: float = DEFAULT_TOL_DA,
    min_rdbe: float | None = DEFAULT_MIN_RDBE,
    precursor_mz: float | None = None,
) -> Annotation:
    """Give each peak the candidate ion formula closest in m/z, if within tolerance.

    ``formula`` is the neutral molecule ``M``; ``ion`` a precursor type from :data:`ION_TYPES`.
    A peak matches when ``|observed - theoretical| <= max(tol_ppm * 1e-6 * observed, tol_da)``.
    ``precursor_mz`` (optional) only fills ``root_error_ppm``, a check of formula and adduct.
    """
    if tol_ppm < 0 or tol_da < 0 or (tol_ppm == 0 and tol_da == 0):
        raise ConfigError(
            f"`tol_ppm` and `tol_da` must be >= 0 and not both zero, got {tol_ppm} and {tol_da}."
        )
    mz, intensity = _check_peaks(mz, intensity)
    ion_type = get_ion_type(ion)
    core = _as_vector(formula) + formula_vector(dict(ion_type.core_delta))
    if (core < 0).any():
        raise FormulaError(
            f"Formula {format_formula(vector_to_counts(_as_vector(formula)))} is too small for "
            f"{ion_type.name}: it must contain {format_formula({e: -n for e, n in ion_type.core_delta})}."
        )
    cand = _candidates(tuple(int(n) for n in core), ion_type, min_rdbe)
    if len(cand.mz) == 0:  # e.g. [M-H]- of a molecule without hydrogen (C4F8): no ion of it can form
        raise FormulaError(
            f"Formula {format_formula(vector_to_counts(_as_vector(formula)))} cannot form a {ion_type.name} ion "
            f"(no fragment or precursor of it has the atoms the ion type adds or removes); check the formula or "
            f"the ion type."
        )

    # Closest candidate: compare the neighbours on either side of the insertion point.
    right = np.clip(np.searchsorted(cand.mz, mz), 0, len(cand.mz) - 1)  # (N,)
    left = np.clip(right - 1, 0, len(cand.mz) - 1)
    take_left = np.abs(mz - cand.mz[left]) <= np.abs(mz - cand.mz[right])  # tie -> lower mass
    best = np.where(take_left, left, right)  # (N,)
    theo = cand.mz[best]
    matched = np.abs(mz - theo) <= np.maximum(tol_ppm * 1e-6 * mz, tol_da)

    neutral = np.where(matched[:, None], cand.neutral[cand.row[best]].astype(np.int64), 0)  # (N, 14)
    parts = cand.part[best]
    formulas = tuple(
        ion_formula(neutral[i], ion_type.parts[parts[i]], ion_type.charge) if matched[i] else None
        for i in range(len(mz))
    )
    retained = matched & np.array([p.adduct_retained for p in ion_type.parts])[parts]
    root_part = ion_type.parts[ion_type.precursor_part]
    root_mz = (
        float(core @ element_masses()) + _part_vector(root_part)[1] - ion_type.charge * ELECTRON_MASS
    ) / abs(ion_type.charge)
    return Annotation(
        ion_type=ion_type.name,
        mz=mz,
        intensity=intensity,
        matched=matched,
        neutral=neutral,
        ion_formula=formulas,
        adduct_retained=retained,
        theoretical_mz=np.where(matched, theo, np.nan),
        error_ppm=np.where(matched, (mz - theo) / theo * 1e6, np.nan),
        root_neutral=core,
        root_ion_formula=ion_formula(core, root_part, ion_type.charge),
        root_mz=root_mz,
        root_error_ppm=None if precursor_mz is None else (precursor_mz - root_mz) / root_mz * 1e6,
        tol_ppm=tol_ppm,
        tol_da=tol_da,
        n_candidates=len(cand.mz),
    )


def explained_intensity_fraction(annotation: Annotation) -> float:
    """Fraction of the total intensity carried by annotated peaks (0.0 for an empty spectrum)."""
    total = float(annotation.intensity.sum())
    return float(annotation.intensity[annotation.matched].sum()) / total if total > 0 else 0.0


def annotate_spectrum(
    spectrum: Spectrum,
    *,
    tol_ppm: float = DEFAULT_TOL_PPM,
    tol_da: float = DEFAULT_TOL_DA,
    min_rdbe: float | None = DEFAULT_MIN_RDBE,
) -> Annotation:
    """:func:`annotate_peaks` for a :class:`~engine.spectra.spectrum.Spectrum` with formula and adduct."""
    if spectrum.formula is None or spectrum.adduct is None:
        missing = "formula" if spectrum.formula is None else "adduct"
        raise SpectrumError(
            f"Spectrum {spectrum.id!r} has no {missing}; peak annotation needs both the molecular "
            f"formula and the adduct (set FORMULA= / ADDUCT= in the file)."
        )
    return annotate_peaks(
        spectrum.mz,
        spectrum.intensity,
        spectrum.formula,
        spectrum.adduct,
        tol_ppm=tol_ppm,
        tol_da=tol_da,
        min_rdbe=min_rdbe,
        precursor_mz=spectrum.precursor_mz,
    )
