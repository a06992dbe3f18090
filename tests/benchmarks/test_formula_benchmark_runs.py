"""benchmarks/formula_benchmark_runs.py's additions for issue #56: co-detected adduct partners in the simulated
survey scans, every common ion type chosen, a per-ion-type cap."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.chem.adducts import COMMON_ION_TYPES, precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.spectra.spectrum import Spectrum

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import formula_benchmark_runs as fbr
import realistic_runs

FORMULA = "C15H17ClN4"


def spectrum(adduct: str) -> Spectrum:
    precursor = precursor_mz_from_neutral(formula_mass(parse_formula(FORMULA)), adduct)
    charge = 1 if adduct.endswith("+") else -1
    return Spectrum(id=adduct, precursor_mz=precursor, mz=[125.0153, 159.0917], intensity=[30.0, 100.0],
                    adduct=adduct, formula=FORMULA, charge=charge,
                    polarity="positive" if charge > 0 else "negative")


def quiet():
    return dataclasses.replace(realistic_runs.INSTRUMENTS["orbitrap"], scatter_ppm=0.0, fragment_scatter_ppm=0.0,
                               rel_error=0.0, abs_error_counts=0.0, noise_peaks=0.0, mono_log10=(7.0, 7.0))


def simulate(adduct: str, rate: float):
    calibration, items = realistic_runs.perturb_run([spectrum(adduct)], quiet(), np.random.default_rng(0))
    return fbr.add_partners(items, calibration, quiet(), np.random.default_rng(1), rate)[0], calibration


def has_peak(item, mz: float, calibration) -> bool:
    shifted = mz * (1 + calibration.ppm(mz) * 1e-6)
    return bool(np.any(np.abs(item.ms1.mz - shifted) < 1e-6 * shifted))


def test_every_partner_within_the_survey_window_is_added_at_rate_one():
    mass = formula_mass(parse_formula(FORMULA))
    item, calibration = simulate("[M+H]+", 1.0)
    for other in ("[M+Na]+", "[M+NH4]+", "[M+K]+"):  # 22, 17 and 38 Da above: inside the 40 Da window
        assert has_peak(item, precursor_mz_from_neutral(mass, other), calibration)
    assert fbr._n_partners(item) == 3
    item, calibration = simulate("[M-H]-", 1.0)
    assert has_peak(item, precursor_mz_from_neutral(mass, "[M+Cl]-"), calibration)
    assert not has_peak(item, precursor_mz_from_neutral(mass, "[M+HCOO]-"), calibration)  # 46 Da: outside
    assert fbr._n_partners(item) == 1


def test_no_partners_at_rate_zero_or_for_a_permanent_cation():
    plain, _ = simulate("[M+H]+", 0.0)
    calibration, (before,) = realistic_runs.perturb_run([spectrum("[M+H]+")], quiet(), np.random.default_rng(0))
    assert np.array_equal(plain.ms1.mz, before.ms1.mz) and fbr._n_partners(plain) == 0
    cation = dataclasses.replace(spectrum("[M+H]+"), adduct="[M]+")
    calibration, items = realistic_runs.perturb_run([cation], quiet(), np.random.default_rng(0))
    (item,) = fbr.add_partners(items, calibration, quiet(), np.random.default_rng(1), 1.0)
    assert np.array_equal(item.ms1.mz, items[0].ms1.mz)


def test_all_is_every_common_ion_type_and_the_cap_keeps_the_first_of_each():
    assert fbr.choose_adducts(["all"]) == (*COMMON_ION_TYPES["positive"], *COMMON_ION_TYPES["negative"])
    assert fbr.choose_adducts(["M+H", "[M+H]1+", "[M+H-H2O]+"]) == ("[M+H]+", "[M-H2O+H]+")
    spectra = [dataclasses.replace(spectrum(a), id=f"{a}{i}") for i, a in enumerate(
        ["[M+H]+", "[M+Na]+", "[M+H]+", "[M+H]+", "[M+Na]+"])]
    assert [s.id for s in fbr.cap_per_adduct(spectra, 2)] == ["[M+H]+0", "[M+Na]+1", "[M+H]+2", "[M+Na]+4"]
    assert fbr.cap_per_adduct(spectra, None) == spectra


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_the_partner_stream_leaves_the_runs_other_draws_alone(rate):
    """Partners come from their own random stream: the spectrum's own peaks and m/z are those of before."""
    item, _ = simulate("[M+H]+", rate)
    _, (before,) = realistic_runs.perturb_run([spectrum("[M+H]+")], quiet(), np.random.default_rng(0))
    assert item.spectrum.precursor_mz == before.spectrum.precursor_mz
    assert set(before.ms1.mz) <= set(item.ms1.mz)
