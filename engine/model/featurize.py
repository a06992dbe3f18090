"""Peaks + precursor formula + ion type -> the spectrum encoder's input (pure functions).

One spectrum becomes a set of tokens (:class:`SpectrumFeatures`):

* token 0, the **root**: the precursor's neutral formula (``M``, or ``M - H2O`` for
  ``[M-H2O+H]+``), intensity 1;
* tokens 1.., the **peaks**: the neutral subformula of each annotated peak (14 counts over
  :data:`~engine.chem.formula.ELEMENTS`), its intensity as ``sqrt(I / I_max)`` over the kept peaks (the
  square root compresses the 10^3-10^4 dynamic range without giving noise the weight a log would),
  and whether the ion keeps a non-proton adduct (``S + Na`` vs ``S + H`` in ``[M+Na]+`` spectra).

Unannotated peaks are dropped (as MIST does) and counted; peaks annotated with the same ion formula
(split centroids) are merged by summing their intensities; the ``max_peaks`` most intense remaining
peaks are kept (default 60: on 2,000 MassBank ``[M+H]+`` / ``[M+Na]+`` spectra the median spectrum
has 8 annotated peaks, 94 % have at most 60, and ``P = 61`` keeps the (B, P, P) attention bias
small). m/z is not a feature: the formula fixes it up to the mass error, which is instrument noise.

Pairwise features (formula differences between tokens) are not stored here: the encoder derives
them from ``formulas`` on its own device, which keeps a batch ``P`` times smaller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.chem.adducts import Adduct
from engine.chem.formula import ELEMENTS
from engine.errors import ConfigError
from engine.model.encoder import DEFAULT_MAX_PEAKS, EncoderConfig
from engine.spectra.annotate import (
    DEFAULT_MIN_RDBE,
    DEFAULT_TOL_DA,
    DEFAULT_TOL_PPM,
    Annotation,
    IonType,
    annotate_peaks,
    annotate_spectrum,
    get_ion_type,
)
from engine.spectra.spectrum import Spectrum


@dataclass(frozen=True, eq=False)
class SpectrumFeatures:
    """Encoder input of one spectrum; token 0 is the root, tokens 1.. the kept peaks (by m/z)."""

    formulas: np.ndarray  # (P, 14) int64 neutral (sub)formula counts
    intensities: np.ndarray  # (P,) float32 sqrt(relative intensity); root 1.0
    adduct_retained: np.ndarray  # (P,) float32 1.0 where the ion keeps a non-proton adduct
    polarity: int  # +1 positive mode, -1 negative mode
    n_peaks: int  # peaks in the input spectrum
    n_unannotated: int  # dropped: no subformula within tolerance
    n_merged: int  # dropped: merged into a peak with the same ion formula
    n_truncated: int  # dropped: beyond max_peaks

    @property
    def n_tokens(self) -> int:
        return len(self.formulas)


def _check_max_peaks(max_peaks: int) -> None:
    if not isinstance(max_peaks, int) or max_peaks < 1:
        raise ConfigError(f"`max_peaks` must be a positive integer, got {max_peaks!r}.")


def featurize_annotation(annotation: Annotation, *, max_peaks: int = DEFAULT_MAX_PEAKS) -> SpectrumFeatures:
    """Turn a peak annotation into encoder tokens (root + at most ``max_peaks`` peaks)."""
    _check_max_peaks(max_peaks)
    idx = np.flatnonzero(annotation.matched)
    keys = [annotation.ion_formula[i] for i in idx]
    unique_keys, first, inverse = np.unique(
        np.array(keys, dtype=object), return_index=True, return_inverse=True
    )
    summed = np.bincount(inverse, weights=annotation.intensity[idx], minlength=len(unique_keys))  # (U,)
    rep = idx[first]  # (U,) one representative peak per ion formula
    # Most intense first (ties: lower m/z first), then back to m/z order for readability.
    order = np.lexsort((annotation.mz[rep], -summed))[:max_peaks]
    order = order[np.argsort(annotation.mz[rep][order], kind="stable")]
    kept, kept_int = rep[order], summed[order]

    top = kept_int.max() if len(kept) else 0.0
    rel = np.sqrt(kept_int / top) if top > 0 else np.zeros(len(kept))
    formulas = np.vstack([annotation.root_neutral[None, :], annotation.neutral[kept]]).astype(np.int64)
    return SpectrumFeatures(
        formulas=formulas,
        intensities=np.concatenate([[1.0], rel]).astype(np.float32),
        adduct_retained=np.concatenate([[0.0], annotation.adduct_retained[kept]]).astype(np.float32),
        polarity=1 if get_ion_type(annotation.ion_type).charge > 0 else -1,
        n_peaks=len(annotation.mz),
        n_unannotated=len(annotation.mz) - len(idx),
        n_merged=len(idx) - len(unique_keys),
        n_truncated=len(unique_keys) - len(kept),
    )


def featurize(
    mz: np.ndarray,
    intensity: np.ndarray,
    formula: str | Mapping[str, int],
    ion: str | Adduct | IonType,
    *,
    max_peaks: int = DEFAULT_MAX_PEAKS,
    tol_ppm: float = DEFAULT_TOL_PPM,
    tol_da: float = DEFAULT_TOL_DA,
    min_rdbe: float | None = DEFAULT_MIN_RDBE,
) -> SpectrumFeatures:
    """Annotate the peaks (:func:`~engine.spectra.annotate.annotate_peaks`) and build the encoder tokens."""
    annotation = annotate_peaks(
        mz, intensity, formula, ion, tol_ppm=tol_ppm, tol_da=tol_da, min_rdbe=min_rdbe
    )
    return featurize_annotation(annotation, max_peaks=max_peaks)


def featurize_spectrum(spectrum: Spectrum, config: EncoderConfig | None = None) -> SpectrumFeatures:
    """Encoder tokens of a :class:`~engine.spectra.spectrum.Spectrum` (formula and adduct required), with the
    annotation settings and ``max_peaks`` of the encoder's ``config`` (defaults when ``None``)."""
    config = config or EncoderConfig()
    annotation = annotate_spectrum(
        spectrum, tol_ppm=config.tol_ppm, tol_da=config.tol_da, min_rdbe=config.min_rdbe
    )
    return featurize_annotation(annotation, max_peaks=config.max_peaks)


def collate(features: Sequence[SpectrumFeatures], *, pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """Pad a list of spectra into a batch of tensors.

    Returns ``formulas`` (B, P, 14) float32, ``intensities`` (B, P) float32, ``adduct_retained``
    (B, P) float32, ``mask`` (B, P) bool (True on real tokens, root included), ``polarity`` (B,)
    float32. ``P`` is the longest spectrum's token count, or ``pad_to`` when given.
    """
    if not features:
        raise ConfigError("`features` is empty; collate needs at least one spectrum.")
    longest = max(f.n_tokens for f in features)
    p = longest if pad_to is None else pad_to
    if p < longest:
        raise ConfigError(f"`pad_to`={pad_to} is smaller than the longest spectrum ({longest} tokens).")
    b = len(features)
    formulas = np.zeros((b, p, len(ELEMENTS)), dtype=np.float32)
    intensities = np.zeros((b, p), dtype=np.float32)
    retained = np.zeros((b, p), dtype=np.float32)
    mask = np.zeros((b, p), dtype=bool)
    for i, f in enumerate(features):
        n = f.n_tokens
        formulas[i, :n] = f.formulas
        intensities[i, :n] = f.intensities
        retained[i, :n] = f.adduct_retained
        mask[i, :n] = True
    return {
        "formulas": torch.from_numpy(formulas),
        "intensities": torch.from_numpy(intensities),
        "adduct_retained": torch.from_numpy(retained),
        "mask": torch.from_numpy(mask),
        "polarity": torch.tensor([float(f.polarity) for f in features]),
    }
