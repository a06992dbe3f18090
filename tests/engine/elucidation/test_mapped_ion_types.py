"""Ion types the model runs by a chemical mapping (engine.model.ion_mapping), through the pipeline on the tiny bundle
(natively [M+H]+ and [M+Na]+): an [M+NH4]+ spectrum runs as the [M+H]+ of the same molecule, its result keeps the
original ion type, formula and precursor with a note, and require_usable says what the model runs."""

import dataclasses

import numpy as np
import pytest
from progress_events import drain
from tiny_bundle import fixture_spectra

from engine.elucidation.pipeline import (
    QueryParams,
    SpectrumFinished,
    SpectrumSession,
    SpectrumSkipped,
    compute_posterior,
    elucidate,
    require_usable,
)
from engine.errors import SpectrumError

NH3 = 14.0030740048 + 3 * 1.00782503207
NH4_ION = 14.0030740048 + 4 * 1.00782503207 - 0.00054857990946
NOTE = "run as [M+H]+ after NH3 loss (mapping)"


def protonated():
    """A fixture [M+H]+ spectrum with its peaks at or below the precursor (what the mapping keeps)."""
    s = fixture_spectra(adducts=("[M+H]+",))[0]
    keep = s.mz <= s.precursor_mz + 0.01
    return dataclasses.replace(s, mz=s.mz[keep], intensity=s.intensity[keep])


def ammonium(s):
    """The same molecule seen as [M+NH4]+: precursor + NH3, the NH4 precursor peak, NH4+ and the [M+H]+ fragments."""
    mz = np.concatenate([s.mz, [NH4_ION, s.precursor_mz + NH3]])
    intensity = np.concatenate([s.intensity, [s.intensity.max(), s.intensity.max() / 2]])
    return dataclasses.replace(s, id="nh4", precursor_mz=s.precursor_mz + NH3, adduct="[M+NH4]+", mz=mz,
                               intensity=intensity)


def test_an_ammonium_spectrum_runs_as_the_protonated_molecule_and_keeps_its_own_ion_type(tiny_bundle):
    s = protonated()
    nh4 = ammonium(s)
    session = SpectrumSession(tiny_bundle, nh4)
    assert session.model_spectrum.adduct == "[M+H]+"
    assert session.model_spectrum.precursor_mz == pytest.approx(s.precursor_mz, abs=1e-6)
    assert np.array_equal(session.model_spectrum.mz, s.mz)  # NH4+ and the ammonium precursor dropped
    # the encoder reads the [M+H]+ spectrum of the molecule, exactly
    assert np.array_equal(session.posterior, compute_posterior(tiny_bundle, s))
    assert np.array_equal(compute_posterior(tiny_bundle, nh4), compute_posterior(tiny_bundle, s))
    result = drain(session.run(QueryParams(ranking="frequency")))[1]
    assert result.spectrum.adduct == "[M+NH4]+" and result.spectrum.precursor_mz == nh4.precursor_mz
    assert result.spectrum.formula == s.formula and result.ion_mapping == NOTE
    assert NOTE in result.spectrum.metadata["warnings"]
    assert result.candidates and all(c.formula == s.formula for c in result.candidates)  # the neutral formula
    assert result.reference_status == "exact"  # the tiny decoder draws the reference whatever the query


def test_a_mapped_spectrum_goes_through_elucidate_and_an_unmappable_one_is_skipped_saying_why(tiny_bundle):
    s = protonated()
    negative = fixture_spectra(adducts=("[M-H]-",))[0]
    formate = dataclasses.replace(negative, adduct="[M+HCOO]-", precursor_mz=negative.precursor_mz + 46.00547931)
    events, summary = drain(elucidate(tiny_bundle, [ammonium(s), formate], QueryParams(groups=2, samples_per_group=2,
                                                                                      kappa_min=1.0, kappa_max=1.2)))
    finished = [e.result for e in events if isinstance(e, SpectrumFinished)]
    skipped = [e.record for e in events if isinstance(e, SpectrumSkipped)]
    assert summary.n_done == 1 and finished[0].spectrum.adduct == "[M+NH4]+"
    assert len(skipped) == 1 and skipped[0].reason.startswith(
        "adduct [M+HCOO]- is not supported by the model tiny-test-bundle: it runs [M+H]+, [M+Na]+ natively "
        "(it was trained on them) and [M+NH4]+, [M-H2O+H]+, [M+K]+, [M]+ by mapping")


def test_require_usable_names_what_the_model_runs(tiny_bundle, make_spectrum):
    assert tiny_bundle.runnable_adducts == ("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M-H2O+H]+", "[M+K]+", "[M]+")
    with pytest.raises(SpectrumError, match=r"no adduct: .* this model runs \[M\+H\]\+, \[M\+Na\]\+, \[M\+NH4\]\+"):
        require_usable(tiny_bundle, make_spectrum(adduct=None))
    native = require_usable(tiny_bundle, make_spectrum())
    assert not native.mapped and native.spectrum.adduct == "[M+H]+"
    mapped = require_usable(tiny_bundle, ammonium(protonated()))
    assert mapped.mapped and mapped.note == NOTE
    radical = make_spectrum(adduct="[M]+", precursor_mz=178.0624, mz=[77.0], intensity=[1.0])  # C10H10O3+•
    with pytest.raises(SpectrumError, match="radical cation"):
        require_usable(tiny_bundle, radical)
