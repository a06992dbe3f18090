"""Library spectra made to look like a real LC-MS/MS run (the perturbations of the realistic formula benchmark).

MassBank records carry the theoretical precursor m/z, no survey scan and cleaned fragments. A real DDA run
differs in ways that matter for formulas (issue #38), and :func:`perturb_run` adds them to a group of spectra
that stands for one run:

* **mass calibration** of the run: every m/z (precursor, fragments, survey peaks) is off by
  ``offset + slope * (m/z - 500) / 1000`` ppm, offset and slope drawn once per run, plus a per-peak scatter
  (precursors and survey peaks ``scatter_ppm``, fragments ``fragment_scatter_ppm``);
* **a survey scan** around the precursor: the formula's isotope pattern (M .. M+5 of the ion) at a
  monoisotopic intensity drawn log-uniformly over ``mono_log10`` counts, each ratio to M multiplied by a
  detector factor drawn once per run over ``ratio_bias`` (a saturated or dead-time-limited M reads the
  others too low or too high), a relative and an absolute intensity error, and every peak below
  ``trim_counts`` removed (centroided, thresholded MS1 loses weak isotope peaks); plus unrelated ions;
* **noise peaks** in MS2: a Poisson number (mean ``noise_peaks``) at random m/z below the precursor with
  0.3-10% of the base peak.

The instrument types' numbers (:data:`INSTRUMENTS`) are typical figures (QTOF runs: run offsets of several
ppm without lock mass; Orbitrap: about 1-3 ppm), not fitted to any file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.chem.adducts import parse_adduct
from engine.chem.formula import parse_formula
from engine.spectra.features import MS1Evidence
from engine.spectra.isotopes import isotope_pattern
from engine.spectra.spectrum import PRECURSOR_DECIMALS_KEY, Spectrum


@dataclass(frozen=True)
class Instrument:
    """How a type of instrument perturbs a run (module notes)."""

    name: str
    offset_sd_ppm: float  # run offset ~ N(0, sd)
    slope_sd_ppm: float  # run slope (ppm per 1000 m/z) ~ N(0, sd)
    scatter_ppm: float  # precursor / survey peak scatter, sd
    fragment_scatter_ppm: float  # fragment scatter, sd
    ratio_bias: tuple[float, float]  # per-run factor on isotope ratios, uniform
    rel_error: float  # per-peak relative intensity error, sd
    abs_error_counts: float  # per-peak absolute intensity error, sd (counts)
    mono_log10: tuple[float, float]  # monoisotopic intensity, log10 counts, uniform
    trim_counts: float  # survey peaks below this are not written
    noise_peaks: float  # mean number of MS2 noise peaks


INSTRUMENTS = {
    "qtof": Instrument("qtof", offset_sd_ppm=5.0, slope_sd_ppm=3.0, scatter_ppm=2.0, fragment_scatter_ppm=3.0,
                       ratio_bias=(0.55, 1.15), rel_error=0.10, abs_error_counts=100.0, mono_log10=(3.3, 6.0),
                       trim_counts=300.0, noise_peaks=8.0),
    "orbitrap": Instrument("orbitrap", offset_sd_ppm=2.0, slope_sd_ppm=1.0, scatter_ppm=1.0,
                           fragment_scatter_ppm=1.5, ratio_bias=(0.85, 1.05), rel_error=0.06,
                           abs_error_counts=1000.0, mono_log10=(4.5, 7.5), trim_counts=5000.0, noise_peaks=8.0),
}


@dataclass(frozen=True)
class RunCalibration:
    """The true m/z error of a simulated run: ``offset_ppm + slope_ppm * (m/z - 500) / 1000``."""

    offset_ppm: float
    slope_ppm: float

    def ppm(self, mz: np.ndarray | float) -> np.ndarray | float:
        return self.offset_ppm + self.slope_ppm * (np.asarray(mz) - 500.0) / 1000.0


def _shift(mz: np.ndarray, calibration: RunCalibration, scatter_ppm: float, rng) -> np.ndarray:
    mz = np.asarray(mz, dtype=np.float64)
    return mz * (1.0 + (calibration.ppm(mz) + rng.normal(0.0, scatter_ppm, mz.shape)) * 1e-6)


def survey_scan(formula: str, adduct: str, calibration: RunCalibration, instrument: Instrument, rng,
                bias: float, n_peaks: int = 6, window_da: float = 40.0) -> MS1Evidence | None:
    """A survey scan around the ion of ``formula`` (module notes); None when even M falls below the trim."""
    ion = parse_adduct(adduct)
    theo_mz, theo = isotope_pattern(ion.ion_counts(parse_formula(formula)), n_peaks, ion.charge)
    mono = 10 ** rng.uniform(*instrument.mono_log10)
    ratios = theo * np.r_[1.0, np.full(n_peaks - 1, bias)]
    counts = mono * ratios * (1 + rng.normal(0, instrument.rel_error, n_peaks))
    counts = counts + rng.normal(0, instrument.abs_error_counts, n_peaks)
    mz = _shift(theo_mz, calibration, instrument.scatter_ppm, rng)
    keep = counts >= instrument.trim_counts
    if not keep[0]:
        return None
    n_other = int(rng.poisson(20))  # unrelated ions in the window
    other_mz = theo_mz[0] + rng.uniform(-window_da, window_da, n_other)
    other = 10 ** rng.uniform(np.log10(instrument.trim_counts), np.log10(mono), n_other)
    all_mz, all_int = np.r_[mz[keep], other_mz], np.r_[counts[keep], other]
    order = np.argsort(all_mz)
    return MS1Evidence(scan_id="simulated", retention_time=None, precursor_mz=float(mz[0]),
                       precursor_intensity=float(counts[0]), mz=all_mz[order], intensity=all_int[order])


def noisy_fragments(spectrum: Spectrum, calibration: RunCalibration, instrument: Instrument, rng):
    """The fragment peaks with the run's m/z error and noise peaks added: ``(mz, intensity)``, sorted."""
    mz = _shift(spectrum.mz, calibration, instrument.fragment_scatter_ppm, rng)
    n = int(rng.poisson(instrument.noise_peaks))
    base = float(spectrum.intensity.max()) if spectrum.intensity.size else 1.0
    noise_mz = rng.uniform(50.0, max(spectrum.precursor_mz - 1.0, 51.0), n)
    noise_int = base * 10 ** rng.uniform(-2.5, -1.0, n)
    all_mz, all_int = np.r_[mz, noise_mz], np.r_[spectrum.intensity, noise_int]
    order = np.argsort(all_mz, kind="stable")
    return all_mz[order], all_int[order]


@dataclass(frozen=True, eq=False)
class SimulatedSpectrum:
    """One spectrum of a simulated run: the hidden-formula spectrum, its survey scan and the truth."""

    spectrum: Spectrum  # formula hidden, precursor m/z as the survey scan (or, without one, the MS2 scan) saw it
    ms1: MS1Evidence | None
    formula: str
    adduct: str


def perturb_run(spectra: Sequence[Spectrum], instrument: Instrument, rng) -> tuple[RunCalibration, list[SimulatedSpectrum]]:
    """The spectra of one simulated run (module notes); the spectra must carry formula and adduct."""
    calibration = RunCalibration(rng.normal(0, instrument.offset_sd_ppm), rng.normal(0, instrument.slope_sd_ppm))
    bias = rng.uniform(*instrument.ratio_bias)
    out = []
    for s in spectra:
        ms1 = survey_scan(s.formula, s.adduct, calibration, instrument, rng, bias)
        if ms1 is not None:
            precursor = ms1.precursor_mz
        else:
            ion = parse_adduct(s.adduct)
            theo_mz, _ = isotope_pattern(ion.ion_counts(parse_formula(s.formula)), 1, ion.charge)
            precursor = float(_shift(theo_mz, calibration, instrument.scatter_ppm, rng)[0])
        mz, intensity = noisy_fragments(s, calibration, instrument, rng)
        metadata = {k: v for k, v in s.metadata.items() if k != PRECURSOR_DECIMALS_KEY}  # simulated: full precision
        hidden = dataclasses.replace(s, formula=None, smiles=None, inchikey=None, precursor_mz=precursor,
                                     mz=mz, intensity=intensity, metadata=metadata)
        out.append(SimulatedSpectrum(hidden, ms1, s.formula, s.adduct))
    return calibration, out
