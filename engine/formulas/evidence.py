"""Fragment evidence for formula candidates: which fragment peaks are scored (:func:`fragment_peaks`) and how well
the subformulas of each candidate explain them, against the same peaks shifted by ±23 mDa
(:func:`fragment_features_many`, the ``fragments`` term's inputs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.chem.formula import (
    ELECTRON_MASS,
    ELEMENT_INDEX,
    ELEMENTS,
    element_mass,
    formula_vector,
)
from engine.formulas.prior import element_mass_array
from engine.spectra.annotate import DEFAULT_MIN_RDBE, ION_TYPES, get_ion_type, rdbe
from engine.spectra.annotate import DEFAULT_TOL_DA as FRAGMENT_TOL_DA
from engine.spectra.annotate import DEFAULT_TOL_PPM as FRAGMENT_TOL_PPM
from engine.spectra.spectrum import Spectrum

DECOY_SHIFTS_DA = (-0.0231, 0.0231)
MAX_FRAGMENT_PEAKS = 40
FRAGMENT_FEATURES = ("frag_intensity", "frag_peaks", "frag_decoy", "frag_error", "frag_none")


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

    :func:`engine.spectra.annotate.annotate_peaks` enumerates the subformulas of one formula; the fragment
    stage asks the same question of up to a few hundred formulas of one precursor. Their (C, H, N,
    O) parts up to the largest counts, sorted by mass, and the union of their other elements'
    sub-boxes are tabulated once; a mass query meets in the middle, and each formula then keeps the
    hits it contains. The RDBE filter (>= -0.5) and the ion parts are those of annotate_peaks.
    """

    _CHNO = [ELEMENT_INDEX[e] for e in ("C", "H", "N", "O")]

    def __init__(self, cores: np.ndarray, max_mass: float):
        masses = element_mass_array()
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
    in :func:`engine.spectra.annotate.annotate_peaks`) lies within ``max(tol_ppm, tol_da)``; the decoy peaks
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

