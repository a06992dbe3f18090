"""Chemical mappings of ion types the model does not run natively (engine.model.ion_mapping): the masses, the peaks
each drops or keeps, the formula drawn, and what is refused. Masses are checked against values worked out here from
element masses, not from the module's own helpers."""

import numpy as np
import pytest

from engine.errors import SpectrumError
from engine.model.ion_mapping import (
    MAPPINGS,
    apply_mapping,
    is_even_electron_cation,
    map_spectrum,
    mapping_for,
    potassium_as_sodium,
    runnable_ion_types,
)
from engine.spectra.spectrum import Spectrum

# monoisotopic masses (IUPAC / AME), written out so that the test does not share the module's sums
H, C, N, O, NA, K, CL = 1.00782503207, 12.0, 14.0030740048, 15.99491461956, 22.9897692809, 38.96370668, 34.96885268
E = 0.00054857990946
NATIVE = ("[M+H]+", "[M+Na]+", "[M-H]-")
MELLEIN = "C10H10O3"
M = 10 * C + 10 * H + 3 * O  # 178.06299...


def spectrum(adduct, precursor, mz, formula=MELLEIN):
    return Spectrum(id="x", precursor_mz=precursor, adduct=adduct, formula=formula, mz=mz, intensity=[1.0] * len(mz))


# (ion type, precursor m/z of mellein as that ion, target, target precursor)
CASES = [
    ("[M+NH4]+", M + N + 4 * H - E, "[M+H]+", M + H - E),
    ("[M-H2O+H]+", M - 2 * H - O + H - E, "[M+H]+", M + H - E),
    ("[M+K]+", M + K - E, "[M+H]+", M + H - E),
    ("[M+HCOO]-", M + C + H + 2 * O + E, "[M-H]-", M - H + E),
    ("[M+CH3COO]-", M + 2 * C + 3 * H + 2 * O + E, "[M-H]-", M - H + E),
    ("[M+Cl]-", M + CL + E, "[M-H]-", M - H + E),
    ("[M-H2O-H]-", M - 2 * H - O - H + E, "[M-H]-", M - H + E),
]


@pytest.mark.parametrize("adduct, precursor, target, expected", CASES)
def test_each_mapping_moves_the_precursor_exactly_and_keeps_the_molecule(adduct, precursor, target, expected):
    s = spectrum(adduct, precursor, [77.0386, 105.0335])
    m = map_spectrum(s, NATIVE)
    assert m.spectrum.adduct == target and m.source == adduct
    assert abs(m.spectrum.precursor_mz - expected) < 1e-6
    assert m.spectrum.formula == m.formula == MELLEIN  # the same neutral molecule
    assert m.note.startswith(f"run as {target}") and m.note.endswith("(mapping)")
    assert np.array_equal(m.spectrum.mz, [77.0386, 105.0335])  # fragments below the precursor stay
    assert s.adduct == adduct and s.precursor_mz == precursor  # the original is not changed


@pytest.mark.parametrize("adduct, precursor, adduct_ion", [
    ("[M+NH4]+", M + N + 4 * H - E, N + 4 * H - E),
    ("[M+K]+", M + K - E, K - E),
    ("[M+HCOO]-", M + C + H + 2 * O + E, C + H + 2 * O + E),
    ("[M+CH3COO]-", M + 2 * C + 3 * H + 2 * O + E, 2 * C + 3 * H + 2 * O + E),
    ("[M+Cl]-", M + CL + E, CL + E),
])
def test_adduct_mappings_drop_the_peaks_above_the_new_precursor_and_the_adduct_ion(adduct, precursor, adduct_ion):
    new = map_spectrum(spectrum(adduct, precursor, [50.0]), NATIVE).spectrum.precursor_mz
    mz = [adduct_ion, 60.5, new - 0.001, new + 0.5, precursor]
    m = map_spectrum(spectrum(adduct, precursor, mz), NATIVE)
    assert np.array_equal(m.spectrum.mz, [60.5, new - 0.001])
    assert m.spectrum.mz.size == m.spectrum.intensity.size == 2


@pytest.mark.parametrize("adduct, precursor", [("[M-H2O+H]+", M - O - H - E), ("[M-H2O-H]-", M - O - 3 * H + E)])
def test_water_loss_mappings_keep_every_peak(adduct, precursor):
    mz = [60.5, precursor - 18.0, precursor]  # its precursor peak is a fragment of [M+H]+ / [M-H]-
    assert np.array_equal(map_spectrum(spectrum(adduct, precursor, mz), NATIVE).spectrum.mz, mz)


def test_a_permanent_cation_runs_as_the_protonated_cation_minus_h_and_draws_its_own_formula():
    choline = 5 * C + 14 * H + N + O  # C5H14NO+
    s = spectrum("[M]+", choline - E, [58.0651, 60.0808, choline - E], formula="C5H14NO")
    m = map_spectrum(s, NATIVE)
    assert m.spectrum.adduct == "[M+H]+" and m.spectrum.formula == "C5H13NO"
    assert abs(m.spectrum.precursor_mz - (choline - E)) < 1e-6  # the same ion
    assert np.array_equal(m.spectrum.mz, s.mz)
    assert m.formula == "C5H14NO"  # structures drawn: the cation's (its charge is not part of the drawn formula)
    assert "C5H13NO" in m.note


def test_a_radical_cation_is_refused_and_the_even_electron_rule():
    assert is_even_electron_cation("C5H14NO") and is_even_electron_cation("C9H14N")
    assert not is_even_electron_cation("C40H56") and not is_even_electron_cation("C10H10O3")
    with pytest.raises(SpectrumError, match=r"\[M\]\+ of C10H10O3 is a radical cation"):
        map_spectrum(spectrum("[M]+", M - E, [77.0]), NATIVE)


def test_potassium_as_sodium_shifts_the_potassium_keeping_fragments():
    # C10H10O3 + K, a fragment S + K (S = C2H4O2) and a protonated fragment S' + H (S' = C7H6O)
    s_k = 2 * C + 4 * H + 2 * O + K - E
    s_h = 7 * C + 6 * H + O + H - E
    s = spectrum("[M+K]+", M + K - E, [s_h, s_k])
    m = potassium_as_sodium(s)
    assert m.adduct == "[M+Na]+" and abs(m.precursor_mz - (M + NA - E)) < 1e-6
    assert np.allclose(m.mz, sorted([s_h, s_k - K + NA]), atol=1e-6)


def test_runnable_ion_types_follow_the_native_set():
    assert runnable_ion_types(("[M+H]+", "[M+Na]+")) == (
        "[M+H]+", "[M+Na]+", "[M+NH4]+", "[M-H2O+H]+", "[M+K]+", "[M]+")
    assert set(runnable_ion_types(NATIVE)) >= set(MAPPINGS)
    assert runnable_ion_types(("[M-H]-",)) == (
        "[M-H]-", "[M+HCOO]-", "[M+CH3COO]-", "[M+Cl]-", "[M-H2O-H]-")
    assert mapping_for("[M+NH4]+", ("[M-H]-",)) is None and mapping_for("[M+H]+", NATIVE) is None


def test_an_ion_type_without_a_mapping_on_this_model_is_said_plainly():
    s = spectrum("[M+HCOO]-", M + C + H + 2 * O + E, [50.0])
    with pytest.raises(SpectrumError, match=r"adduct \[M\+HCOO\]- cannot be run by this model: it runs \[M\+H\]\+, "
                                            r"\[M\+Na\]\+ natively and .*\[M\+NH4\]\+.* by mapping"):
        map_spectrum(s, ("[M+H]+", "[M+Na]+"))


def test_a_native_ion_type_is_run_as_it_is():
    s = spectrum("[M+H]+", M + H - E, [77.0])
    m = map_spectrum(s, NATIVE)
    assert m.spectrum is s and not m.mapped and m.note == ""
    assert apply_mapping(spectrum("[M+NH4]+", M + N + 4 * H - E, [77.0]), MAPPINGS["[M+NH4]+"]).mapped
