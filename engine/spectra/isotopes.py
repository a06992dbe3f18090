"""Isotope patterns: theoretical (from a formula) and observed (in an MS1 survey scan), and their match.

:func:`isotope_pattern` computes the aggregated isotope peaks M, M+1, M+2, ... of a formula: the
isotopic species are binned by their nominal mass shift (13C and 15N and 2H fall in M+1; 34S, 37Cl,
81Br, 18O and 13C2 in M+2) and each bin carries its total abundance and abundance-weighted mass, as a
mass spectrometer that does not resolve the fine structure sees them. Element isotopes (masses and
natural abundances) are IUPAC's, as tabulated in ``pyteomics.mass.nist_mass``; elements are combined
by convolution, element counts by repeated squaring, so a formula costs microseconds.

:func:`isotope_envelope` reads the same peaks from a survey scan: the precursor peak, then for each
``k`` the peaks summed over the window where an M+k peak can lie (:func:`isotope_window`, the same for every
formula): from ``k`` times the smallest mass shift per neutron of an abundant heavier isotope (34S, 0.99790 Da;
37Cl and 81Br lie between) to ``k`` times 13C's (1.00335 Da), widened by 5 mDa for the scan's m/z error (narrower
than the old window at every k, so an unrelated ion falls into it less often). A fixed window of ``k`` 13C masses +- 20 mDa (before issue #56) missed the M+4 of two 37Cl
(19.3 mDa below 4 13C) and the M+5 of Cl3 whenever the scan read it 1 mDa light, so a Cl3 formula was scored
against an M+4 of 0 and lost to a bromine formula (fluopicolide on a TripleTOF run).
:func:`isotope_score` compares the two (module :mod:`engine.formulas.candidates` adds it to a formula's score):

    score = -1/2 * sum_k ((o_k - t_k) / sigma_k)^2,   sigma_k = abs_error + rel_error * t_k

with ``o_k``, ``t_k`` the observed and theoretical intensities relative to the monoisotopic peak
(defaults ``abs_error=0.02``, ``rel_error=0.10``: Orbitrap and QTOF isotope ratios of an
ion well above the noise agree to a few percent). A missing peak counts as ``o_k = 0`` when the
theoretical peak would be above the scan's weakest recorded peak (the detection limit), and is
passed over otherwise. A chlorine (M+2 ~ 32 %) or bromine (M+2 ~ 97 %) formula against a scan
without that M+2 peak thus loses several units; one that predicts it gains on those that do not.

:func:`isotope_patterns_many` and :func:`isotope_scores_many` do the same for thousands of formulas at once (the
patterns through a power series of the elements' isotope polynomials: log, weighted sum, exp), so every formula
within tolerance can be weighed against the survey pattern (:mod:`engine.formulas.elements`: Cl or Br present).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from engine.chem.adducts import parse_adduct
from engine.chem.formula import ELECTRON_MASS, ELEMENTS, parse_formula
from engine.errors import ConfigError

NEUTRON_SHIFT = 1.0033548378  # 13C - 12C, the spacing of isotope peaks of charge 1
LIGHTEST_SHIFT = 0.9978980  # (34S - 32S) / 2: the smallest shift per neutron of an abundant heavier isotope (37Cl 0.99853,
# 81Br 0.99898; 15N's 0.99704 matters at M+1 only, inside the margin)
ISOTOPE_WINDOW_DA = 0.005  # the observed M+k windows reach this far beyond the isotope shifts (m/z error)


@cache
def _element_isotopes(symbol: str) -> tuple[tuple[int, float, float], ...]:
    """``(nominal shift, abundance, mass offset from the lightest)`` of an element's stable isotopes."""
    from pyteomics.mass import nist_mass

    if symbol not in nist_mass:
        raise ConfigError(f"No isotope data for element {symbol!r}.")
    isotopes = sorted((number, mass, abundance) for number, (mass, abundance) in nist_mass[symbol].items()
                      if number and abundance > 0)
    base_number, base_mass, _ = isotopes[0]
    return tuple((number - base_number, abundance, mass - base_mass) for number, mass, abundance in isotopes)


@cache
def _lightest_mass(symbol: str) -> float:
    """Mass of the lightest stable isotope (the monoisotopic one for every element formulas here use)."""
    from pyteomics.mass import nist_mass

    _element_isotopes(symbol)  # checks the symbol
    return min(mass for number, (mass, abundance) in nist_mass[symbol].items() if number and abundance > 0)


def _convolve(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], n: int):
    """Combine two (abundance, abundance * mass offset) distributions over nominal shifts 0..n-1."""
    pa, sa = a
    pb, sb = b
    p = np.convolve(pa, pb)[:n]
    s = (np.convolve(sa, pb) + np.convolve(pa, sb))[:n]
    return p, s


@lru_cache(maxsize=4096)
def _element_distribution(symbol: str, count: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    single_p = np.zeros(n)
    single_s = np.zeros(n)
    for shift, abundance, offset in _element_isotopes(symbol):
        if shift < n:
            single_p[shift] += abundance
            single_s[shift] += abundance * offset
    result = (np.eye(1, n).ravel(), np.zeros(n))  # count 0: everything at shift 0
    power = (single_p, single_s)
    k = count
    while k:
        if k & 1:
            result = _convolve(result, power, n)
        k >>= 1
        if k:
            power = _convolve(power, power, n)
    return result


def isotope_pattern(
    formula: str | Mapping[str, int], n_peaks: int = 4, charge: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Masses (m/z for a ``charge``) and abundances of the aggregated isotope peaks M, M+1, ...

    ``formula`` is the species measured (for an ion: the neutral formula plus the adduct's atoms,
    ``charge`` removing or adding electrons). Abundances are relative to the monoisotopic peak (1.0).
    """
    counts = parse_formula(formula) if isinstance(formula, str) else {e: int(n) for e, n in formula.items() if n}
    if isinstance(n_peaks, bool) or not isinstance(n_peaks, int) or n_peaks < 1:
        raise ConfigError(f"`n_peaks` must be a whole number >= 1, got {n_peaks!r}.")
    p, s = np.eye(1, n_peaks).ravel(), np.zeros(n_peaks)
    mono = 0.0
    for symbol, count in sorted(counts.items()):
        if count < 0:
            raise ConfigError(f"Element counts must be >= 0, got {symbol}{count}.")
        mono += count * _lightest_mass(symbol)
        p, s = _convolve((p, s), _element_distribution(symbol, count, n_peaks), n_peaks)
    offsets = np.divide(s, p, out=np.arange(n_peaks) * NEUTRON_SHIFT, where=p > 0)
    masses = mono + offsets - charge * ELECTRON_MASS
    if charge:
        masses = masses / abs(charge)
    return masses, p / p[0]


@dataclass(frozen=True, eq=False)
class IsotopeMatch:
    """A formula's isotope peaks beside those a survey scan shows (relative to the monoisotopic peak)."""

    theoretical_mz: np.ndarray  # (n,)
    theoretical: np.ndarray  # (n,) relative abundances, [0] = 1
    observed_mz: np.ndarray  # (n,) NaN where no peak was found
    observed: np.ndarray  # (n,) relative intensities, 0 where no peak was found
    detectable: np.ndarray  # (n,) bool: the theoretical peak would be above the scan's detection limit
    score: float


def observed_pattern(
    mz: np.ndarray, intensity: np.ndarray, expected_mz: np.ndarray, tol_ppm: float = 10.0, tol_da: float = 0.005
) -> tuple[np.ndarray, np.ndarray]:
    """The most intense survey peak within tolerance of each ``expected_mz``: ``(m/z, intensity)``.

    NaN m/z and zero intensity where there is none.
    """
    mz = np.asarray(mz, dtype=np.float64)
    intensity = np.asarray(intensity, dtype=np.float64)
    out_mz = np.full(len(expected_mz), np.nan)
    out_int = np.zeros(len(expected_mz))
    for k, target in enumerate(expected_mz):
        tol = max(tol_ppm * 1e-6 * target, tol_da)
        lo, hi = np.searchsorted(mz, target - tol, "left"), np.searchsorted(mz, target + tol, "right")
        if hi > lo:
            j = lo + int(np.argmax(intensity[lo:hi]))
            out_mz[k], out_int[k] = mz[j], intensity[j]
    return out_mz, out_int


def isotope_window(k: int, charge: int = 1, margin_da: float = ISOTOPE_WINDOW_DA) -> tuple[float, float]:
    """``(low, high)`` m/z offsets from the monoisotopic peak between which an ion's M+``k`` peak lies.

    From ``k`` neutrons of the lightest abundant shift (34S's; 37Cl, 81Br and 18O lie between, 15N at M+1 inside the
    margin) to ``k`` of 13C's, divided by the charge and widened by ``margin_da`` on both sides: at M+4, 3.987 to
    4.018 Da for charge 1 (two 37Cl at 3.994, two 81Br at 3.996, four 13C at 4.013). ``k`` 0 is the monoisotopic peak itself (0, 0).
    """
    if k == 0:
        return 0.0, 0.0
    z = abs(charge) or 1
    return k * LIGHTEST_SHIFT / z - margin_da, k * NEUTRON_SHIFT / z + margin_da


def isotope_envelope(
    mz: np.ndarray, intensity: np.ndarray, mono_mz: float, n_peaks: int = 4, charge: int = 1,
    window_da: float = ISOTOPE_WINDOW_DA,
) -> tuple[np.ndarray, np.ndarray]:
    """Observed M, M+1, ... of an ion whose monoisotopic peak is at ``mono_mz``: ``(m/z, intensity)``.

    Peak ``k`` sums the survey peaks in :func:`isotope_window` ``(k, charge, window_da)`` above ``mono_mz``: 37Cl,
    81Br and 34S sit 9-11 mDa below 13C2 at M+2 and 17-19 mDa below 13C4 at M+4 (two of them), and are summed
    because a high-resolution scan may split them, as the theoretical pattern does not. Its m/z is the
    intensity-weighted mean; NaN and 0 where nothing was found.
    """
    mz = np.asarray(mz, dtype=np.float64)
    intensity = np.asarray(intensity, dtype=np.float64)
    out_mz, out_int = np.full(n_peaks, np.nan), np.zeros(n_peaks)
    for k in range(n_peaks):
        low, high = isotope_window(k, charge, window_da) if k else (-1e-9, 1e-9)  # k 0: mono_mz is the peak's m/z
        lo = np.searchsorted(mz, mono_mz + low, "left")
        hi = np.searchsorted(mz, mono_mz + high, "right")
        if hi > lo:
            out_int[k] = intensity[lo:hi].sum()
            out_mz[k] = float((mz[lo:hi] * intensity[lo:hi]).sum() / out_int[k])
    return out_mz, out_int


RATIO_GRID = np.exp(np.linspace(-1.0, 0.5, 31))  # detector factors tried on the isotope ratios (0.37 .. 1.65)


def isotope_score(
    observed: np.ndarray, theoretical: np.ndarray, detectable: np.ndarray, abs_error: float = 0.02,
    rel_error: float = 0.10, ratio_sd: float = 0.0,
) -> float:
    """``-1/2 * sum ((o - t) / sigma)^2`` over the isotope peaks after the first (module notes).

    With ``ratio_sd > 0`` the ratios to M may all be off by one detector factor ``b`` (a saturated or
    clipped M reads the others too high; weak or trimmed M+1 and M+2 read them too low): the score is the
    best over ``b`` of the same sum with ``t * b``, less ``1/2 * (ln b / ratio_sd)^2``. The shape of the
    pattern (a 37Cl or 81Br M+2 against M+1) still counts in full; the level of M+1 alone much less.
    """
    o, t, d = np.asarray(observed)[1:], np.asarray(theoretical)[1:], np.asarray(detectable, dtype=bool)[1:]
    use = d | (o > 0)
    if ratio_sd <= 0:
        sigma = abs_error + rel_error * t
        return float(-0.5 * np.sum(((o - t) / sigma)[use] ** 2))
    tb = t[None, :] * RATIO_GRID[:, None]  # (G, n)
    sigma = abs_error + rel_error * tb
    chi = np.sum(np.where(use[None, :], ((o[None, :] - tb) / sigma) ** 2, 0.0), axis=1)  # (G,)
    return float(np.max(-0.5 * chi - 0.5 * (np.log(RATIO_GRID) / ratio_sd) ** 2))


def match_isotopes(
    ion_counts: Mapping[str, int],
    charge: int,
    mz: np.ndarray,
    intensity: np.ndarray,
    precursor_mz: float,
    *,
    n_peaks: int = 4,
    tol_ppm: float = 10.0,
    tol_da: float = 0.005,
    window_da: float = ISOTOPE_WINDOW_DA,
    ratio_sd: float = 0.0,
    abs_error: float = 0.02,
) -> IsotopeMatch | None:
    """Compare the isotope pattern of an ion formula with survey peaks around ``precursor_mz``.

    The monoisotopic peak is the survey peak within ``max(tol_ppm, tol_da)`` of ``precursor_mz``;
    the others are read by :func:`isotope_envelope`, the same for every formula, so a peak one
    formula does not predict (a 37Cl M+2) still counts against it. ``None`` when the survey peaks
    hold no monoisotopic peak. ``ratio_sd``: see :func:`isotope_score`. ``abs_error`` 0 takes the absolute error
    of the ratios from the scan: its weakest peak (the detection limit) over the monoisotopic peak, between
    0.002 and 0.05 (a strong ion's 34S M+2 then counts; a weak one's M+1 barely).
    """
    theo_mz, theo = isotope_pattern(ion_counts, n_peaks, charge)
    anchor_mz, anchor_int = observed_pattern(mz, intensity, np.array([precursor_mz]), tol_ppm, tol_da)
    if not anchor_int[0] > 0:
        return None
    obs_mz, obs_int = isotope_envelope(mz, intensity, anchor_mz[0], n_peaks, abs(charge) or 1, window_da)
    floor = float(np.min(intensity)) if len(intensity) else 0.0
    detectable = theo * anchor_int[0] >= floor
    observed = obs_int / anchor_int[0]
    if abs_error <= 0:
        abs_error = min(max(floor / anchor_int[0], 0.002), 0.05)
    score = isotope_score(observed, theo, detectable, abs_error=abs_error, ratio_sd=ratio_sd)
    if not math.isfinite(score):
        score = 0.0
    return IsotopeMatch(theoretical_mz=theo_mz, theoretical=theo, observed_mz=obs_mz, observed=observed,
                        detectable=detectable, score=score)


# --- many formulas at once (what engine.formulas.elements reads the elements from) ---------------------------------


@lru_cache(maxsize=256)
def _log_series(symbol: str, n: int) -> np.ndarray:
    """Coefficients 1..n-1 of ln q(x), q the element's isotope polynomial relative to its lightest isotope."""
    q = np.zeros(n)
    isotopes = _element_isotopes(symbol)
    base = isotopes[0][1]
    for shift, abundance, _ in isotopes:
        if shift < n:
            q[shift] += abundance / base
    c = np.zeros(n)
    for k in range(1, n):  # ln of a series with q0 = 1
        c[k] = q[k] - sum(j * c[j] * q[k - j] for j in range(1, k)) / k
    return c


def isotope_patterns_many(vectors: np.ndarray, ion_type: str, n_peaks: int) -> np.ndarray:
    """(N, n_peaks) isotope abundances M, M+1, ... relative to M of the ions of neutral formula ``vectors``.

    The same numbers as :func:`isotope_pattern` of each ion's counts (up to rounding).
    """
    vectors = np.asarray(vectors, dtype=np.float64).reshape(-1, len(ELEMENTS))
    adduct = parse_adduct(ion_type)
    logs = np.array([_log_series(e, n_peaks) for e in ELEMENTS])  # (14, n)
    series = adduct.n_molecules * vectors @ logs  # (N, n): ln of the pattern's generating function
    for e, count in adduct.net_counts.items():
        series = series + count * _log_series(e, n_peaks)[None, :]
    out = np.zeros_like(series)
    out[:, 0] = 1.0
    for k in range(1, n_peaks):  # exp of a series with zero constant term
        out[:, k] = sum(j * series[:, j] * out[:, k - j] for j in range(1, k + 1)) / k
    return np.maximum(out, 0.0)


@dataclass(frozen=True)
class ObservedPattern:
    """The survey scan's M, M+1, ... of a precursor, relative to M, as the isotope term reads it."""

    ratios: np.ndarray  # (n,), ratios[0] = 1
    floor: float  # weakest survey peak over M: what a ratio below it cannot show
    abs_error: float  # the ratios' absolute error


def observed_isotopes(ms1, precursor_mz: float, charge: int, n_peaks: int, tol_ppm: float, tol_da: float,
                      abs_error: float = 0.0) -> ObservedPattern | None:
    """The pattern :func:`match_isotopes` compares (None without a precursor peak)."""
    anchor_mz, anchor = observed_pattern(ms1.mz, ms1.intensity, np.array([precursor_mz]), tol_ppm, tol_da)
    if not anchor[0] > 0:
        return None
    _, envelope = isotope_envelope(ms1.mz, ms1.intensity, float(anchor_mz[0]), n_peaks, abs(charge) or 1)
    floor = float(np.min(ms1.intensity)) / anchor[0] if len(ms1.intensity) else 0.0
    if abs_error <= 0:
        abs_error = min(max(floor, 0.002), 0.05)
    return ObservedPattern(ratios=envelope / anchor[0], floor=floor, abs_error=abs_error)


def isotope_scores_many(theoretical: np.ndarray, observed: ObservedPattern, ratio_sd: float,
                        rel_error: float = 0.10, chunk: int = 4096) -> np.ndarray:
    """(N,) :func:`isotope_score` of each theoretical pattern (N, n) against ``observed``."""
    theoretical = np.asarray(theoretical, dtype=np.float64)
    o = observed.ratios[1:]
    out = np.empty(len(theoretical))
    for start in range(0, len(theoretical), chunk):
        t = theoretical[start:start + chunk, 1:]
        use = (t >= observed.floor) | (o > 0)[None, :]  # detectable, or seen
        if ratio_sd <= 0:
            sigma = observed.abs_error + rel_error * t
            out[start:start + chunk] = -0.5 * np.sum(np.where(use, ((o - t) / sigma) ** 2, 0.0), axis=1)
            continue
        tb = t[:, None, :] * RATIO_GRID[None, :, None]  # (B, G, n)
        sigma = observed.abs_error + rel_error * tb
        chi = np.sum(np.where(use[:, None, :], ((o[None, None, :] - tb) / sigma) ** 2, 0.0), axis=2)  # (B, G)
        out[start:start + chunk] = np.max(-0.5 * chi - 0.5 * (np.log(RATIO_GRID) / ratio_sd)[None, :] ** 2, axis=1)
    return np.where(np.isfinite(out), out, 0.0)
