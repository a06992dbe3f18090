"""The simulated runs of benchmarks/realistic_runs.py: each perturbation does what it says."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.spectra.spectrum import Spectrum

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "realistic_runs.py"
_spec = importlib.util.spec_from_file_location("realistic_runs", _PATH)
realistic_runs = importlib.util.module_from_spec(_spec)
sys.modules["realistic_runs"] = realistic_runs  # its dataclasses look their module up
_spec.loader.exec_module(realistic_runs)

FORMULA = "C15H17ClN4"


def library_spectrum() -> Spectrum:
    precursor = precursor_mz_from_neutral(formula_mass(parse_formula(FORMULA)), "[M+H]+")
    return Spectrum(id="x", precursor_mz=precursor, mz=[125.0153, 159.0917, 243.1138], intensity=[30.0, 100.0, 50.0],
                    adduct="[M+H]+", formula=FORMULA, metadata={"precursor_mz_decimals": "4"})


def quiet(instrument, **changes):
    """The instrument without random scatter, so what remains is the run's systematic error."""
    return dataclasses.replace(instrument, scatter_ppm=0.0, fragment_scatter_ppm=0.0, rel_error=0.0,
                               abs_error_counts=0.0, noise_peaks=0.0, **changes)


def test_a_run_shifts_every_mz_by_its_offset_and_hides_the_formula():
    qtof = quiet(realistic_runs.INSTRUMENTS["qtof"], mono_log10=(6.0, 6.0), ratio_bias=(1.0, 1.0))
    s = library_spectrum()
    calibration, (item,) = realistic_runs.perturb_run([s], qtof, np.random.default_rng(1))
    ppm = calibration.ppm(s.precursor_mz)
    assert item.spectrum.formula is None and item.formula == FORMULA and item.adduct == "[M+H]+"
    assert (item.spectrum.precursor_mz / s.precursor_mz - 1) * 1e6 == pytest.approx(ppm, abs=1e-3)
    assert (item.spectrum.mz / s.mz - 1) * 1e6 == pytest.approx(calibration.ppm(s.mz), abs=1e-6)
    assert "precursor_mz_decimals" not in item.spectrum.metadata
    assert item.ms1.precursor_mz == item.spectrum.precursor_mz


def test_the_detector_factor_scales_every_isotope_ratio_and_trimming_drops_weak_peaks():
    from engine.spectra.isotopes import isotope_envelope, isotope_pattern

    _, theo = isotope_pattern({"C": 15, "H": 18, "Cl": 1, "N": 4}, 6, 1)
    qtof = quiet(realistic_runs.INSTRUMENTS["qtof"], mono_log10=(6.0, 6.0), ratio_bias=(0.6, 0.6))
    _, (item,) = realistic_runs.perturb_run([library_spectrum()], qtof, np.random.default_rng(2))
    _, env = isotope_envelope(item.ms1.mz, item.ms1.intensity, item.ms1.precursor_mz, 3)
    assert env[1:] / env[0] == pytest.approx(0.6 * theo[1:3], rel=0.05)  # unrelated ions may add a little
    weak = quiet(realistic_runs.INSTRUMENTS["qtof"], mono_log10=(3.0, 3.0), ratio_bias=(1.0, 1.0))
    _, (item,) = realistic_runs.perturb_run([library_spectrum()], weak, np.random.default_rng(3))
    _, env = isotope_envelope(item.ms1.mz, item.ms1.intensity, item.ms1.precursor_mz, 2)
    assert env[1] == 0.0  # M+1 (~18% of 1,000 counts) is under the 300-count trim


def test_noise_peaks_are_added_below_the_precursor():
    noisy = dataclasses.replace(quiet(realistic_runs.INSTRUMENTS["orbitrap"]), noise_peaks=20.0)
    s = library_spectrum()
    _, (item,) = realistic_runs.perturb_run([s], noisy, np.random.default_rng(4))
    extra = item.spectrum.mz.size - s.mz.size
    assert extra > 5 and item.spectrum.mz.max() < s.precursor_mz
    assert np.all(np.diff(item.spectrum.mz) >= 0)
