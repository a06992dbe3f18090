"""Structure and spectral libraries over every common ion type (issue #56): the mass track matches a suspect as
``[M+NH4]+``, ``[M+HCOO]-`` or, for a permanent cation, ``[M]+`` at the cation's own m/z (never ``[M+H]+``); a
spectral identification needs the reference's ion type to equal the query's (spellings normalised), and an
identified ``[M]+`` formula is run when the model can run ``[M]+``."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from engine.chem.adducts import (
    COMMON_ION_TYPES,
    ELECTRON_MASS,
    precursor_mz_from_neutral,
)
from engine.chem.formula import formula_mass, parse_formula
from engine.elucidation.libraries import (
    MASS_TRACK,
    charge_fits,
    general_ion_types,
    identified_formula_spectra,
    is_identification,
    library_formula_spectra,
    library_ion_types,
    library_structures,
    mass_track_spectra,
    search_spectrum,
    spectral_structures,
)
from engine.library import load_library
from engine.spectra.spectrum import Spectrum
from engine.spectral_library import load_spectral_library

CHOLINE_CHLORIDE = "C[N+](C)(C)CCO.[Cl-]"  # as suspect lists write the salt: stored as the cation C5H14NO
CHOLINE_MZ = 104.106990  # C5H14NO+ (the atoms' mass less an electron)
AMINOPENTANOL = "NCCCCCO"  # C5H13NO: its [M+H]+ is at the choline cation's m/z
GLUCOSE = "OCC1OC(O)C(O)C(O)C1O"  # C6H12O6
POSITIVE = COMMON_ION_TYPES["positive"]
NEGATIVE = COMMON_ION_TYPES["negative"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path


def suspects(path, rows):
    """A NORMAN-style suspect list (Name, Norman_SusDat_ID, SMILES), opened as a suspect list."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Name", "Norman_SusDat_ID", "SMILES"])
        w.writerows(rows)
    lib = load_library(path)
    lib.suspect = True
    return lib


def query(mz: float, polarity: str = "positive") -> Spectrum:
    return Spectrum(id="q", precursor_mz=mz, mz=np.array([60.0808, 58.0651, 45.0335]),
                    intensity=np.array([100.0, 40.0, 20.0]), charge=1 if polarity == "positive" else -1,
                    polarity=polarity)


def runs(spectra) -> list[tuple[str, str]]:
    return [(s.formula, s.adduct) for s in spectra]


def test_choline_is_stored_as_its_cation_with_the_cations_mass(home):
    lib = suspects(home / "s.csv", [("choline chloride", "NS1", CHOLINE_CHLORIDE), ("aminopentanol", "NS2",
                                                                                     AMINOPENTANOL)])
    choline, other = (lib.record(int(lib.rows_of_formula(f)[0])) for f in ("C5H14NO", "C5H13NO"))
    assert (choline.smiles, choline.charge, other.charge) == ("C[N+](C)(C)CCO", 1, 0)
    assert choline.mass == pytest.approx(CHOLINE_MZ + ELECTRON_MASS, abs=1e-5)  # M of [M]+: the ion's atoms


def test_charge_fits_ion_types():
    assert charge_fits(1, "[M]+") and not charge_fits(0, "[M]+") and not charge_fits(1, "[M+H]+")
    assert all(charge_fits(0, a) for a in (*POSITIVE[:-1], *NEGATIVE))
    assert not charge_fits(1, "[M+NH4]+") and charge_fits(0, "[M]+*")  # a radical cation is of a neutral
    assert charge_fits(-1, "[M]-") and not charge_fits(0, "[M]-")


def test_library_ion_types_are_the_common_ones_the_model_runs_and_the_run_allows():
    everything = (*POSITIVE, *NEGATIVE)
    assert library_ion_types("positive", everything) == POSITIVE
    assert library_ion_types("negative", everything) == NEGATIVE
    assert library_ion_types(None, everything) == everything
    assert library_ion_types("positive", ("[M+H]+", "[M+Na]+", "[M-H]-")) == ("[M+H]+", "[M+Na]+")
    assert library_ion_types("positive", everything, ["M+NH4", "[M]+"]) == ("[M+NH4]+", "[M]+")
    assert library_ion_types("positive", ("[M+H]+", "[M+2H]2+")) == ("[M+H]+", "[M+2H]2+")  # another runnable one


def test_the_mass_track_finds_a_suspect_seen_only_as_its_ammonium_adduct(home):
    lib = suspects(home / "s.csv", [("glucose", "NS3", GLUCOSE)])
    mz = precursor_mz_from_neutral(formula_mass(parse_formula("C6H12O6")), "[M+NH4]+")  # 198.0972
    spectrum = query(mz)
    assert runs(mass_track_spectra([lib], spectrum, [], POSITIVE, ppm=10)) == [("C6H12O6", "[M+NH4]+")]
    assert mass_track_spectra([lib], spectrum, [], ("[M+H]+", "[M+Na]+"), ppm=10) == []  # natively run ones only
    added = library_formula_spectra([lib], spectrum, [], POSITIVE, ppm=10)
    assert runs(added) == [("C6H12O6", "[M+NH4]+")]
    assert library_formula_spectra([lib], spectrum, [], POSITIVE, ppm=10, ion_types=["[M+H]+", "[M+Na]+"]) == []


def test_a_water_loss_searches_the_suspect_lists_but_not_the_general_libraries(home):
    """The bundled library under [M-H2O+H]+ would add structures 18 Da heavier to every feature: only suspect lists
    are matched under the ion types the formula ranking leaves out by default, unless the run names them."""
    suspect = suspects(home / "s.csv", [("glucose", "NS3", GLUCOSE)])
    general = suspects(home / "g.csv", [("glucose", "NS3", GLUCOSE)])
    general.suspect = False
    mz = precursor_mz_from_neutral(formula_mass(parse_formula("C6H12O6")), "[M-H2O+H]+")  # 163.0601
    assert "[M-H2O+H]+" not in general_ion_types("positive") and "[M]+" in general_ion_types("positive")
    assert runs(library_formula_spectra([suspect], query(mz), [], POSITIVE, ppm=10)) == [("C6H12O6", "[M-H2O+H]+")]
    assert library_formula_spectra([general], query(mz), [], POSITIVE, ppm=10) == []
    named = library_formula_spectra([general], query(mz), [], POSITIVE, ppm=10, ion_types=["[M-H2O+H]+"])
    assert runs(named) == [("C6H12O6", "[M-H2O+H]+")]
    nh4 = precursor_mz_from_neutral(formula_mass(parse_formula("C6H12O6")), "[M+NH4]+")  # a default ion type
    assert runs(library_formula_spectra([general], query(nh4), [], POSITIVE, ppm=10)) == [("C6H12O6", "[M+NH4]+")]


def test_the_mass_track_finds_a_formate_adduct_in_negative_mode(home):
    lib = suspects(home / "s.csv", [("glucose", "NS3", GLUCOSE)])
    mz = precursor_mz_from_neutral(formula_mass(parse_formula("C6H12O6")), "[M+HCOO]-")  # 225.0616
    assert runs(mass_track_spectra([lib], query(mz, "negative"), [], NEGATIVE, ppm=10)) == [("C6H12O6", "[M+HCOO]-")]
    assert mass_track_spectra([lib], query(mz, "negative"), [], POSITIVE, ppm=10) == []  # the other ion mode
    assert mass_track_spectra([lib], query(mz, "negative"), [], ("[M-H]-",), ppm=10) == []


def test_a_permanent_cation_is_found_as_m_plus_never_as_m_plus_h(home):
    lib = suspects(home / "s.csv", [("choline chloride", "NS1", CHOLINE_CHLORIDE), ("aminopentanol", "NS2",
                                                                                     AMINOPENTANOL)])
    # at the cation's m/z: choline as [M]+, and the neutral of the same ion mass as [M+H]+ (one ion, two molecules)
    assert sorted(runs(mass_track_spectra([lib], query(CHOLINE_MZ), [], POSITIVE, ppm=10))) == \
        [("C5H13NO", "[M+H]+"), ("C5H14NO", "[M]+")]
    # one proton heavier, where choline's atoms would be an [M+H]+: the cation is not offered
    assert mass_track_spectra([lib], query(CHOLINE_MZ + 1.007276), [], POSITIVE, ppm=10) == []
    assert runs(mass_track_spectra([lib], query(CHOLINE_MZ), [], ("[M+H]+",), ppm=10)) == [("C5H13NO", "[M+H]+")]
    assert [s.name for s in library_structures([lib], "C5H14NO", "[M]+")] == ["choline chloride"]
    assert library_structures([lib], "C5H14NO", "[M+H]+") == []
    assert [s.name for s in library_structures([lib], "C5H14NO")] == ["choline chloride"]  # no ion type: all


PEAKS = ((41.0386, 10.0), (45.0335, 20.0), (58.0651, 40.0), (60.0808, 100.0), (69.0699, 15.0))


def reference_mgf(path, smiles: str, adduct: str, precursor: float):
    peaks = "".join(f"{mz} {i}\n" for mz, i in PEAKS)
    path.write_text("BEGIN IONS\nTITLE=REF-1\nNAME=the reference\n"
                    f"PEPMASS={precursor}\nSMILES={smiles}\nADDUCT={adduct}\nIONMODE=positive\n{peaks}END IONS\n")
    return load_spectral_library(path)


def query_like_reference(mz: float) -> Spectrum:
    return Spectrum(id="q", precursor_mz=mz, mz=np.array([p[0] for p in PEAKS]),
                    intensity=np.array([p[1] for p in PEAKS]), charge=1, polarity="positive")


def test_an_m_plus_reference_identifies_a_cation_only_as_m_plus(home):
    refs = reference_mgf(home / "refs.mgf", "C[N+](C)(C)CCO", "[M]+", CHOLINE_MZ)
    spectrum = query_like_reference(CHOLINE_MZ)
    matches = search_spectrum([refs], spectrum)
    assert matches.hits and matches.answer() is matches.hits[0]  # passes the shipped threshold
    assert [k.spectral.identified for k in spectral_structures(matches, "[M]+")] == [True]
    assert [k.spectral.identified for k in spectral_structures(matches, "[M+H]+")] == [False]  # another ion type
    assert spectral_structures(matches, "[M]+")[0].formula == "C5H14NO"
    # the identified formula is run as [M]+ when the model runs [M]+ (natively or by mapping), else not at all
    assert runs(identified_formula_spectra(spectrum, matches, [], ("[M+H]+", "[M]+"))) == [("C5H14NO", "[M]+")]
    assert identified_formula_spectra(spectrum, matches, [], ("[M+H]+", "[M+Na]+")) == []
    added = library_formula_spectra([refs], spectrum, [], POSITIVE, ppm=10)
    assert [(s.formula, s.adduct, s.metadata["formula_source"]) for s in added] == \
        [("C5H14NO", "[M]+", "spectral library identification")]


def test_identity_compares_ion_types_after_normalising_their_spelling(home):
    mass = formula_mass(parse_formula("C5H13NO"))
    mz = precursor_mz_from_neutral(mass, "[M-H2O+H]+")
    refs = reference_mgf(home / "refs.mgf", AMINOPENTANOL, "M+H-H2O", mz)
    matches = search_spectrum([refs], query_like_reference(mz))
    hit = matches.hits[0]
    assert hit.reference.adduct == "[M-H2O+H]+"
    assert is_identification(matches, hit, "[M+H-H2O]+") and is_identification(matches, hit, "[M-H2O+H]1+")
    assert not is_identification(matches, hit, "[M+H]+") and not is_identification(matches, hit, "[M+NH4]+")


def test_predict_ranks_a_suspect_seen_only_as_its_ammonium_adduct_first(tiny_bundle_dir, home, captured):
    """A feature of no given formula whose precursor is only the [M+NH4]+ of a suspect (the first fixture
    spectrum's molecule, C14H28N2O6, at m/z 338.2286 instead of its [M+H]+ 321.2020): the mass track runs the
    suspect's formula as [M+NH4]+ (the model through its mapping), and the suspect is the feature's rank 1."""
    from tiny_bundle import FIXTURE

    from engine.chem import molecules as chem
    from engine.cli import main

    reference = "O=C(CCCCC(=O)N(CCO)CCO)N(CCO)CCO"
    mz = precursor_mz_from_neutral(formula_mass(parse_formula("C14H28N2O6")), "[M+NH4]+")
    block = FIXTURE.read_text().split("END IONS")[0]
    lines = [f"PEPMASS={mz:.4f}" if line.startswith("PEPMASS=") else line for line in block.splitlines()
             if not line.startswith(("FORMULA=", "ADDUCT=", "SMILES=", "INCHIKEY=", "INCHI="))]
    mgf = home / "ammonium.mgf"
    mgf.write_text("\n".join(lines) + "\nEND IONS\n")
    lib = home / "suspects.csv"
    with open(lib, "w", newline="") as fh:
        csv.writer(fh).writerows([["Name", "Norman_SusDat_ID", "SMILES"], ["the suspect", "NS0001", reference]])
    out = home / "o.csv"
    argv = ["predict", str(mgf), "-o", str(out), "--model", str(tiny_bundle_dir), "--groups", "2", "--pool-size", "4",
            "-q", "--no-bundled-libraries", "--structure-library", str(lib), "--formulas", "1"]
    assert main(argv) == 0
    sources = {(s.formula, s.adduct): s.metadata.get("formula_source") for s in captured}
    assert sources[("C14H28N2O6", "[M+NH4]+")] == MASS_TRACK  # the formula ranking's own runs lack it
    with open(out) as fh:
        rows = [r for r in csv.DictReader(line for line in fh if not line.startswith("#"))]
    top = min(rows, key=lambda r: int(r["feature_rank"]))
    assert (top["feature_rank"], top["InChIkey2D"], top["adduct"], top["formula"]) == \
        ("1", chem.inchikey14(reference), "[M+NH4]+", "C14H28N2O6")


def test_an_m_plus_reference_is_the_identification_of_the_m_plus_run(tiny_bundle, home):
    """Through the session: the run msgpt predict adds for a [M]+ hit (choline, C5H14NO as [M]+) ranks the
    reference's cation first as an identification; the feature's [M+H]+ run of the same m/z (C5H13NO) has the hit
    as another ion type's evidence at most, never as its identification."""
    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.progress import run_to_end

    refs = reference_mgf(home / "refs.mgf", "C[N+](C)(C)CCO", "[M]+", CHOLINE_MZ)
    spectrum = query_like_reference(CHOLINE_MZ)
    matches = search_spectrum([refs], spectrum)
    (cation_run,) = identified_formula_spectra(spectrum, matches, [], tiny_bundle.runnable_adducts)
    params = QueryParams(groups=2, samples_per_group=2, seed=0)
    result = run_to_end(SpectrumSession(tiny_bundle, cation_run, libraries=[refs], spectral_matches=matches).run(params))
    first = result.candidates[0]
    assert (cation_run.adduct, cation_run.formula) == ("[M]+", "C5H14NO")
    assert first.identified and result.identified is first and first.spectral.accession == "REF-1"
    protonated = spectrum.with_adduct("[M+H]+").with_formula("C5H13NO")
    other = run_to_end(SpectrumSession(tiny_bundle, protonated, libraries=[refs], spectral_matches=matches).run(params))
    assert other.identified is None
