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

**LC-MS runs with adduct partners** (issue #56, item 2; :func:`lcms_run`): ions elute as Gaussian peaks (apex,
sigma), sampled by survey scans every ``step_s`` seconds that hold every eluting ion's isotope pattern at its height
then (with the run's m/z error, the per-run detector factor, per-peak intensity errors and the trim), and one
data-dependent MS2 scan per ion with an MS2 spectrum near its apex (the spectrum's fragments with the run's m/z error
and noise peaks; formula, structure and ion type hidden). :func:`adduct_partner_ions` makes the ions of one
compound: its ``[M+H]+`` and, at given rates, co-eluting ``[M+Na]+``/``[M+NH4]+``/``[M+K]+`` partners (same apex and
peak shape, a fraction of the ``[M+H]+`` height) with their own MS2 (a real spectrum of that ion type and structure
when the library has one, else the precursor and noise: an adduct that does not fragment), and, at a given rate, a
**decoy**: another compound whose ion lies within a few ppm of a partner m/z, eluting 1-3 s apart with its own peak
shape, which must not join the group.

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


# ----------------------------------------------------------------------------------------------
# LC-MS runs with adduct partners (issue #56, item 2)
# ----------------------------------------------------------------------------------------------

PARTNER_ION_TYPES = ("[M+Na]+", "[M+NH4]+", "[M+K]+")


@dataclass(frozen=True, eq=False)
class ElutingIon:
    """One ion of a simulated LC-MS run: what it is (compound key, formula, ion type, role), how it elutes and
    the MS2 spectrum it triggers (None: seen in MS1 only)."""

    compound: str
    formula: str
    ion_type: str
    apex: float  # s
    sigma: float  # s
    height: float  # counts of M at the apex
    ms2: Spectrum | None
    role: str  # "main", "partner" or "decoy"
    mz_offset_ppm: float = 0.0  # a decoy's ion placed off its own formula's m/z (near a partner's)
    source: str = ""  # "real" (library spectrum of this ion type) or "simulated" (precursor and noise)

    @property
    def mz(self) -> float:
        from engine.chem.adducts import precursor_mz_from_neutral
        from engine.chem.formula import formula_mass

        return precursor_mz_from_neutral(formula_mass(parse_formula(self.formula)), self.ion_type) * (
            1 + self.mz_offset_ppm * 1e-6)


def weak_ms2(template: Spectrum, precursor_mz: float) -> Spectrum:
    """An adduct's MS2 that shows little but its precursor (sodium and potassium adducts often do): the precursor
    peak alone (:func:`lcms_run` adds the noise peaks)."""
    return dataclasses.replace(template, precursor_mz=precursor_mz, mz=np.array([precursor_mz]),
                               intensity=np.array([100.0]))


def adduct_partner_ions(key: str, main: Spectrum, partner_spectra: dict, apex: float, sigma: float, height: float,
                        rates: dict, rng) -> list[ElutingIon]:
    """The ions of one compound (module notes): its ``[M+H]+`` (``main``, a spectrum with formula) and partners
    drawn at ``rates`` (ion type -> probability), each with the real spectrum of ``partner_spectra`` (ion type ->
    Spectrum) or :func:`weak_ms2`; a partner is 5-60% of the ``[M+H]+`` height."""
    ions = [ElutingIon(key, main.formula, "[M+H]+", apex, sigma, height, main, "main", source="real")]
    for ion_type in PARTNER_ION_TYPES:
        if rng.random() >= rates.get(ion_type, 0.0):
            continue
        real = partner_spectra.get(ion_type)
        part = ElutingIon(key, main.formula, ion_type, apex, sigma, height * rng.uniform(0.05, 0.6), None, "partner")
        ms2 = real if real is not None else weak_ms2(main, part.mz)
        ions.append(dataclasses.replace(part, ms2=ms2, source="real" if real is not None else "simulated"))
    return ions


def decoy_ion(key: str, near: ElutingIon, other: Spectrum, rng, max_ppm: float = 3.0) -> ElutingIon:
    """Another compound's ion within ``max_ppm`` of ``near``'s m/z, eluting 1-3 s apart with its own peak width."""
    from engine.chem.adducts import precursor_mz_from_neutral
    from engine.chem.formula import formula_mass

    own = precursor_mz_from_neutral(formula_mass(parse_formula(other.formula)), "[M+H]+")
    offset = (near.mz * (1 + rng.uniform(-max_ppm, max_ppm) * 1e-6) - own) / own * 1e6
    delta = rng.uniform(1.0, 3.0) * rng.choice([-1.0, 1.0])
    return ElutingIon(key, other.formula, "[M+H]+", near.apex + delta, rng.uniform(1.5, 3.0),
                      near.height * rng.uniform(0.3, 1.5), other, "decoy", mz_offset_ppm=offset, source="real")


def lcms_run(ions: Sequence[ElutingIon], instrument: Instrument, rng, rt_range: tuple[float, float],
             step_s: float = 0.5, source: str = "simulated.mzML"):
    """``(MS2 spectra, survey scans, calibration, ion of each MS2 spectrum)`` of a simulated run of ``ions``
    (module notes). Formula, structure and ion type of the MS2 spectra are hidden."""
    from engine.spectra.spectrum import SurveyScan

    calibration = RunCalibration(rng.normal(0, instrument.offset_sd_ppm), rng.normal(0, instrument.slope_sd_ppm))
    bias = rng.uniform(*instrument.ratio_bias)
    patterns = []
    for ion in ions:
        adduct = parse_adduct(ion.ion_type)
        mz, ratios = isotope_pattern(adduct.ion_counts(parse_formula(ion.formula)), 4, adduct.charge)
        mz = np.asarray(mz) * (1 + ion.mz_offset_ppm * 1e-6)
        patterns.append((mz, np.asarray(ratios) / ratios[0] * np.r_[1.0, np.full(len(ratios) - 1, bias)]))
    apex = np.array([i.apex for i in ions])
    sigma = np.array([i.sigma for i in ions])
    events = [(float(t), 1, -1) for t in np.arange(rt_range[0], rt_range[1] + 1e-9, step_s)]
    for k, ion in enumerate(ions):
        if ion.ms2 is not None:
            events.append((ion.apex + rng.uniform(-0.5, 0.5) * ion.sigma, 2, k))
    events.sort()
    spectra, survey, owner = [], [], []
    last = None
    for t, level, k in events:
        index = len(spectra) + len(survey)
        if level == 1:
            active = np.flatnonzero(np.abs(t - apex) < 4 * sigma)
            mz_parts, int_parts = [np.array([1000.0])], [np.array([instrument.trim_counts * 2])]
            for j in active:
                theo_mz, ratios = patterns[j]
                height = ions[j].height * np.exp(-0.5 * ((t - apex[j]) / sigma[j]) ** 2)
                counts = height * ratios * (1 + rng.normal(0, instrument.rel_error, ratios.size))
                counts = counts + rng.normal(0, instrument.abs_error_counts, ratios.size)
                keep = counts >= instrument.trim_counts
                mz_parts.append(_shift(theo_mz[keep], calibration, instrument.scatter_ppm, rng))
                int_parts.append(counts[keep])
            mz, intensity = np.concatenate(mz_parts), np.concatenate(int_parts)
            order = np.argsort(mz)
            last = SurveyScan(id=f"scan={index + 1}", index=index, retention_time=t, polarity="positive",
                              mz=mz[order], intensity=intensity[order], source=source)
            survey.append(last)
            continue
        ion = ions[k]
        precursor = float(_shift(np.array([ion.mz]), calibration, instrument.scatter_ppm, rng)[0])
        frag_mz, frag_int = noisy_fragments(dataclasses.replace(ion.ms2, precursor_mz=ion.mz), calibration, instrument,
                                            rng)
        metadata = {"scan": str(index + 1)} | ({"precursor_scan_id": last.id} if last is not None else {})
        spectra.append(Spectrum(id=f"scan={index + 1}", precursor_mz=precursor, charge=1, polarity="positive",
                                retention_time=t, mz=frag_mz, intensity=frag_int, metadata=metadata, source=source,
                                index=index))
        owner.append(ion)
    return spectra, survey, calibration, owner
