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
from engine.spectra.spectrum import Spectrum

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
    assert result.spectrum is nh4 and result.ion_mapping == NOTE  # the app's entry holds this very spectrum
    assert result.candidates and all(c.formula == s.formula for c in result.candidates)  # the neutral formula
    assert result.reference_status == "exact"  # the tiny decoder draws the reference whatever the query
    # the de novo confidence was fitted on native ion types only: a mapped rank 1 gets none, and says why
    from engine.model.confidence import why_no_confidence

    assert result.confidence is None and "chemical mapping" in why_no_confidence(tiny_bundle, result)
    native = drain(SpectrumSession(tiny_bundle, s).run(QueryParams(ranking="frequency")))[1]
    assert "chemical mapping" not in why_no_confidence(tiny_bundle, native)


def test_a_mapped_spectrum_goes_through_elucidate_and_an_unmappable_one_is_skipped_saying_why(tiny_bundle):
    s = protonated()
    negative = fixture_spectra(adducts=("[M-H]-",))[0]
    formate = dataclasses.replace(negative, adduct="[M+HCOO]-", precursor_mz=negative.precursor_mz + 46.00547931)
    events, summary = drain(elucidate(tiny_bundle, [ammonium(s), formate], QueryParams(groups=2, samples_per_group=2,
                                                                                      kappa_min=1.0, kappa_max=1.2)))
    finished = [e.result for e in events if isinstance(e, SpectrumFinished)]
    skipped = [e.record for e in events if isinstance(e, SpectrumSkipped)]
    assert summary.n_done == 1 and finished[0].spectrum.adduct == "[M+NH4]+"
    assert NOTE in finished[0].spectrum.metadata["warnings"]  # elucidate() notes it for msgpt predict's summary
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


def test_a_permanent_cation_runs_mapped_and_library_structures_of_the_cation_join_its_ranking(tiny_bundle, tmp_path,
                                                                                           monkeypatch):
    from engine.chem import molecules as chem
    from engine.elucidation.ranking import STRUCTURE_LIBRARY
    from engine.library import load_library
    from engine.progress import run_to_end

    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    choline, neutral = "C[N+](C)(C)CCO", "CN(C)CCCO"  # C5H14NO+ and a C5H13NO amine (the mapping's M' = F - H)
    path = tmp_path / "suspects.csv"
    path.write_text(f"Identifier,CompoundName,SMILES\nC1,choline,{choline}\nN1,an amine,{neutral}\n")
    library = load_library(path, "suspects")
    ion = 5 * 12.0 + 14 * 1.00782503207 + 14.0030740048 + 15.99491461956 - 0.00054857990946
    s = Spectrum(id="choline", precursor_mz=ion, adduct="[M]+", formula="C5H14NO", mz=[58.0651, 60.0808, ion],
                 intensity=[100.0, 40.0, 10.0])
    session = SpectrumSession(tiny_bundle, s, libraries=[library])
    assert session.model_spectrum.adduct == "[M+H]+" and session.model_spectrum.formula == "C5H13NO"
    assert session.formula == "C5H14NO"  # structures of the cation are drawn and ranked
    result = run_to_end(session.run(QueryParams(groups=2, samples_per_group=2, kappa_min=1.0, kappa_max=1.2)))
    keys = {c.inchikey14: c for c in result.candidates}
    assert chem.inchikey14(choline) in keys and STRUCTURE_LIBRARY in keys[chem.inchikey14(choline)].origin
    assert chem.inchikey14(neutral) not in keys  # another formula
    assert result.spectrum.adduct == "[M]+" and result.spectrum.formula == "C5H14NO"
    assert result.ion_mapping.startswith("run as [M+H]+ of C5H13NO, the cation's formula minus H (mapping; ")


def test_training_and_evaluation_select_native_ion_types_only(make_spectrum):
    from types import SimpleNamespace

    encoder_only = SimpleNamespace(name="run", supported_adducts=("[M+H]+", "[M+Na]+"))  # no runnable_adducts
    nh4 = ammonium(protonated())
    assert require_usable(encoder_only, nh4).note == NOTE
    with pytest.raises(SpectrumError, match=r"adduct \[M\+NH4\]\+ is not supported by the model run: it runs "
                                            r"\[M\+H\]\+, \[M\+Na\]\+ natively \(it was trained on them\)$"):
        require_usable(encoder_only, nh4, mapped=False)
    assert not require_usable(encoder_only, make_spectrum(), mapped=False).mapped
