"""Known compounds beyond the formula's library structures: reference spectra (identifications rank first, or with
the suspects by score when an analog term weighs them; their formula is run even when the formula ranking missed
it), suspect lists (their structures before predictions),
the mass track (library structures of a formula nobody else proposed, ranked without sampling), feature ranks
and identification levels, through the session and ``msgpt predict``."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest
from tiny_bundle import FIXTURE, fixture_spectra

from engine.chem import molecules as chem
from engine.elucidation.libraries import (
    MASS_TRACK,
    identified_formula_spectra,
    library_formula_spectra,
    mass_track_spectra,
    search_spectrum,
    spectral_structures,
)
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.elucidation.ranking import DE_NOVO, SPECTRAL_LIBRARY, STRUCTURE_LIBRARY
from engine.insight.identification import feature_ranks, identification_level
from engine.library import load_library
from engine.model.confidence import why_no_confidence
from engine.progress import run_to_end
from engine.spectra.spectrum import Spectrum
from engine.spectral_library import load_spectral_library

REFERENCE = "O=C(CCCCC(=O)N(CCO)CCO)N(CCO)CCO"  # the first fixture spectrum's structure, C14H28N2O6
ISOMER = "O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO"  # the same formula, one CH2 moved
TITLE = "MSBNK-Athens_Univ-AU406406"
PARAMS = QueryParams(groups=2, samples_per_group=2, seed=0)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.fixture
def spectrum():
    s = fixture_spectra()[0]
    assert s.id == TITLE and chem.canonical_smiles(s.smiles) == chem.canonical_smiles(REFERENCE)
    return s


def reference_mgf(path, smiles: str, adduct: str = "[M+H]+"):
    """The first fixture record as a reference spectrum, its structure given as ``smiles``."""
    block = FIXTURE.read_text().split("END IONS")[0]
    lines = [line for line in block.splitlines() if not line.startswith(("SMILES=", "INCHIKEY=", "ADDUCT="))]
    lines.insert(lines.index("BEGIN IONS") + 1, f"SMILES={smiles}\nADDUCT={adduct}")
    path.write_text("\n".join(lines) + "\nEND IONS\n")
    return path


def suspect_csv(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Identifier", "Name", "SMILES"])
        w.writerows(rows)
    return path


def run(bundle, spectrum, libraries):
    return run_to_end(SpectrumSession(bundle, spectrum, libraries=libraries).run(PARAMS))


def test_an_identity_match_ranks_first_with_its_evidence(tiny_bundle, spectrum, home):
    """The tiny decoder always draws the reference; a reference spectrum naming the isomer identifies the isomer,
    which then ranks before every prediction, with level 2a and the identification's confidence."""
    refs = load_spectral_library(reference_mgf(home / "refs.mgf", ISOMER))
    result = run(tiny_bundle, spectrum, [refs])
    first = result.candidates[0]
    assert first.inchikey14 == chem.inchikey14(ISOMER) and first.identified and result.identified is first
    assert first.origin == SPECTRAL_LIBRARY and first.count == 0
    assert first.spectral.similarity == pytest.approx(1.0, abs=1e-3) and first.spectral.matched_peaks >= 3
    assert first.spectral.accession == TITLE and first.compound_name == first.spectral.reference_name
    assert identification_level([result]).code == "2a"
    # the identification's calibrated confidence (resources/spectral_library/confidence.json), not the de novo model's
    assert result.confidence is not None and 0 < result.confidence <= 1 and why_no_confidence(tiny_bundle, result) == ""
    plain = run(tiny_bundle, spectrum, [])
    assert identification_level([plain]).code == "3" and plain.candidates[0].origin == DE_NOVO


def test_a_match_of_another_ion_type_is_evidence_not_an_identification(tiny_bundle, spectrum, home):
    refs = load_spectral_library(reference_mgf(home / "refs.mgf", ISOMER, adduct="[M+Na]+"))
    matches = search_spectrum([refs], spectrum)
    assert matches.hits and matches.answer() is matches.hits[0]  # passes the threshold...
    known = spectral_structures(matches, spectrum.adduct)
    assert len(known) == 1 and not known[0].spectral.identified  # ...but it is another molecule's ion
    result = run(tiny_bundle, spectrum, [refs])
    assert not result.candidates[0].identified and result.identified is None
    isomer = next(c for c in result.candidates if c.inchikey14 == chem.inchikey14(ISOMER))
    assert isomer.origin == SPECTRAL_LIBRARY and isomer.spectral.similarity > 0.9


def test_the_identified_formula_is_run_when_the_formula_ranking_missed_it(spectrum, home):
    refs = load_spectral_library(reference_mgf(home / "refs.mgf", REFERENCE))
    unknown = spectrum.with_formula(None)
    wrong = unknown.with_formula("C14H28N2O6")  # stands for a formula candidate list that holds it
    matches = search_spectrum([refs], unknown)
    assert identified_formula_spectra(unknown, matches, [wrong], ["[M+H]+"]) == []
    added = identified_formula_spectra(unknown, matches, [], ["[M+H]+"])
    assert [(s.formula, s.adduct) for s in added] == [("C14H28N2O6", "[M+H]+")]
    assert added[0].metadata["formula_source"] == "spectral library identification"
    assert identified_formula_spectra(unknown, matches, [], ["[M+Na]+"]) == []  # an ion type the model cannot run


def test_suspects_rank_before_predictions_and_the_bundled_way_does_not(tiny_bundle, spectrum, home):
    path = suspect_csv(home / "suspects.csv", [("S1", "an isomer", ISOMER)])
    joined = run(tiny_bundle, spectrum, [load_library(path)])
    assert joined.candidates[0].inchikey14 != chem.inchikey14(ISOMER)  # by score: the drawn reference is better
    suspects = load_library(path)
    suspects.suspect = True
    first = run(tiny_bundle, spectrum, [suspects]).candidates[0]
    assert first.inchikey14 == chem.inchikey14(ISOMER) and first.suspect and first.origin == STRUCTURE_LIBRARY


def test_the_mass_track_ranks_library_structures_of_a_formula_nobody_proposed(tiny_bundle, spectrum, home):
    lib = load_library(suspect_csv(home / "lib.csv", [("L1", "an isomer", ISOMER), ("L2", "ethanol", "CCO")]))
    unknown = spectrum.with_formula(None)
    extra = mass_track_spectra([lib], unknown, [], tiny_bundle.supported_adducts, ppm=10)
    assert [(s.formula, s.adduct) for s in extra] == [("C14H28N2O6", "[M+H]+")]
    assert extra[0].metadata["formula_source"] == MASS_TRACK
    have = [dataclasses.replace(extra[0])]
    assert mass_track_spectra([lib], unknown, have, tiny_bundle.supported_adducts, ppm=10) == []
    assert mass_track_spectra([lib], spectrum, [], tiny_bundle.supported_adducts, ppm=10) == []  # formula given
    result = SpectrumSession(tiny_bundle, extra[0], libraries=[lib]).rank_known(PARAMS)
    assert result.n_samples == 0 and [c.inchikey14 for c in result.candidates] == [chem.inchikey14(ISOMER)]
    assert "no candidate was drawn" in why_no_confidence(tiny_bundle, result)


def test_the_mass_track_leaves_out_formulas_that_cannot_form_the_ion(home):
    # 4-chlorophthalic acid [M-H]- at m/z 198.9804; octafluorocyclobutane (C4F8) has the same mass within
    # 10 ppm but no hydrogen to lose: running it as [M-H]- crashed the annotation before
    lib = load_library(suspect_csv(home / "lib.csv", [("P1", "octafluorocyclobutane", "FC1(F)C(F)(F)C(F)(F)C1(F)F"),
                                                      ("P2", "4-chlorophthalic acid", "O=C(O)c1ccc(Cl)cc1C(=O)O")]))
    query = Spectrum(id="q", precursor_mz=198.980359907, mz=np.array([111.0007, 154.9905]),
                     intensity=np.array([100.0, 73.8]), adduct="[M-H]-", charge=-1, polarity="negative")
    extra = mass_track_spectra([lib], query, [], ["[M-H]-"], ppm=10)
    assert [(s.formula, s.adduct) for s in extra] == [("C8H5ClO4", "[M-H]-")]


def test_feature_ranks_put_identifications_then_suspects_then_formula_order(tiny_bundle, spectrum, home):
    refs = load_spectral_library(reference_mgf(home / "refs.mgf", ISOMER))
    suspects = load_library(suspect_csv(home / "s.csv", [("S1", "the reference", REFERENCE)]))
    suspects.suspect = True
    plain = run(tiny_bundle, spectrum, [])
    with_suspect = run(tiny_bundle, spectrum, [suspects])
    identified = run(tiny_bundle, spectrum, [refs])
    ranks = feature_ranks([plain, identified])
    assert ranks[1][0] == 1 and ranks[0][0] == 2  # the second formula's identification comes first
    assert sorted(r for rs in ranks for r in rs) == list(range(1, sum(map(len, ranks)) + 1))
    ranks = feature_ranks([plain, with_suspect], top=1)
    assert ranks == [[2], [1]]
    worse = dataclasses.replace(plain, candidates=tuple(dataclasses.replace(c, score=c.score - 100.0)
                                                        for c in plain.candidates))
    ranks = feature_ranks([worse, plain])  # the rest by score, whatever the formula's place
    assert ranks[1] == list(range(1, len(plain.candidates) + 1))
    assert ranks[0] == list(range(len(plain.candidates) + 1, 2 * len(plain.candidates) + 1))


def test_an_identification_the_analog_term_scored_ranks_with_the_suspects_by_score(tiny_bundle, spectrum, home):
    refs = load_spectral_library(reference_mgf(home / "refs.mgf", ISOMER))
    suspects = load_library(suspect_csv(home / "s.csv", [("S1", "the reference", REFERENCE)]))
    suspects.suspect = True
    with_suspect = run(tiny_bundle, spectrum, [suspects])
    identified = run(tiny_bundle, spectrum, [refs])
    assert identified.candidates[0].rank_group == 0 and with_suspect.candidates[0].rank_group == 1
    best = with_suspect.candidates[0].score

    def scored(score: float):  # the identification as a ranking with an analog term gives it
        first = dataclasses.replace(identified.candidates[0], analog_score=0.5, score=score)
        return dataclasses.replace(identified, candidates=(first, *identified.candidates[1:]))

    low, high = scored(best - 1.0), scored(best + 1.0)
    assert low.candidates[0].rank_group == 1
    assert [r[0] for r in feature_ranks([with_suspect, low], top=1)] == [1, 2]
    assert identification_level([with_suspect, low]).code == "3"  # the feature's rank 1 is the suspect
    assert [r[0] for r in feature_ranks([with_suspect, high], top=1)] == [2, 1]
    assert identification_level([with_suspect, high]).code == "2a"
    assert identification_level([with_suspect, identified]).code == "2a"  # ranked first outright


def test_predict_identifies_from_a_spectral_library_and_writes_the_evidence(tiny_bundle_dir, home, capsys):
    from engine.cli import main

    refs = reference_mgf(home / "refs.mgf", ISOMER)
    out = home / "out.csv"
    argv = ["predict", str(FIXTURE), "-o", str(out), "--model", str(tiny_bundle_dir), "--groups", "2",
            "--samples-per-group", "2", "--band", "0.95", "1.5", "-q", "--formulas", "0", "--no-bundled-libraries"]
    assert main(argv + ["--spectral-library", str(refs), "--spectral-library", str(home / "none.msp")]) == 0
    err = capsys.readouterr().err
    assert "Spectral library left out" in err and "none.msp" in err and "refs.mgf: 1 searchable spectra" in err
    rows = [r for r in csv.DictReader(line for line in open(out) if not line.startswith("#"))]
    first = [r for r in rows if r["spectrum_id"] == TITLE]
    top = min(first, key=lambda r: int(r["feature_rank"]))
    assert top["InChIkey2D"] == chem.inchikey14(ISOMER) and top["origin"] == SPECTRAL_LIBRARY
    assert top["identification_level"] == "2a" and top["reference_accession"] == TITLE
    assert float(top["spectral_similarity"]) > 0.99 and int(top["matched_peaks"]) >= 3
    others = {r["spectrum_id"] for r in rows if r["identification_level"] == "2a"}
    assert others == {TITLE}  # the other spectra match no reference


def test_a_project_keeps_the_reference_match_and_the_suspect_flag(tiny_bundle, spectrum, home):
    from engine.files.project import Project, ProjectEntry, save_project
    from engine.files.project_read import load_project

    refs = load_spectral_library(reference_mgf(home / "refs.mgf", ISOMER))
    suspects = load_library(suspect_csv(home / "s.csv", [("S1", "the reference", REFERENCE)]))
    suspects.suspect = True
    result = run(tiny_bundle, spectrum, [refs, suspects])
    save_project(home / "p.msgpt", Project(entries=[ProjectEntry(spectrum=spectrum, result=result)]))
    back = load_project(home / "p.msgpt").entries[0].result
    assert [(c.inchikey14, c.origin, c.suspect, c.spectral) for c in back.candidates] == \
        [(c.inchikey14, c.origin, c.suspect, c.spectral) for c in result.candidates]
    assert back.identified is not None and identification_level([back]).code == "2a"
    assert back.candidates[1].suspect and back.candidates[1].inchikey14 == chem.inchikey14(REFERENCE)


def test_the_mass_track_keeps_to_the_ion_types_asked_for(tiny_bundle_dir, home, captured):
    """--ion-types limits the library's mass track as it limits the formula candidates. The library holds a
    structure that fits the precursor only as [M+Na]+ (C13H26N6O2, 3.5 ppm), a formula the formula ranking never
    gives (it ranks one formula, C14H28N2O6 as [M+H]+): the mass track adds its run when [M+Na]+ is allowed, and
    none when only [M+H]+ (or only [M+NH4]+) is."""
    from engine.cli import main

    sodium = "NC(=N)NCCCC(N)C(=O)NC1CCCCC1C(=O)N"  # C13H26N6O2: [M+Na]+ 321.2009 vs 321.2020
    lib = suspect_csv(home / "lib.csv", [("L1", "an isomer", ISOMER), ("L2", "a sodium ion's fit", sodium)])
    mgf = home / "one.mgf"
    block = FIXTURE.read_text().split("END IONS")[0]
    lines = [line for line in block.splitlines() if not line.startswith(("FORMULA=", "ADDUCT="))]
    mgf.write_text("\n".join(lines) + "\nEND IONS\n")
    argv = ["predict", str(mgf), "-o", str(home / "o.csv"), "--model", str(tiny_bundle_dir), "--groups", "2",
            "--pool-size", "4", "-q", "--no-bundled-libraries", "--structure-library", str(lib), "--formulas", "1"]

    def runs():
        return {(s.formula, s.adduct, s.metadata.get("formula_source")) for s in captured}

    assert main(argv) == 0
    assert ("C13H26N6O2", "[M+Na]+", MASS_TRACK) in runs()  # the track does add another ion type's run
    assert ("C14H28N2O6", "[M+H]+") in {r[:2] for r in runs()}
    captured.clear()
    assert main(argv + ["--ion-types", "[M+H]+"]) == 0
    assert {r[:2] for r in runs()} == {("C14H28N2O6", "[M+H]+")}  # no [M+Na]+ run from the track
    captured.clear()
    assert main(argv + ["--ion-types", "[M+NH4]+"]) == 0  # [M+NH4]+ runs by mapping (#56)
    assert captured and {s.adduct for s in captured} == {"[M+NH4]+"}  # the track adds none of another ion type


def test_a_coarse_precursor_ranks_the_suspects_within_its_precision(tiny_bundle_dir, home, captured, capsys):
    """A precursor written to 0.01 Da cannot rank formulas: the spectrum is skipped, saying why, unless a suspect
    list holds structures within 0.01 Da, which are then ranked (no de novo candidates), with a note."""
    from engine.cli import main

    lib = suspect_csv(home / "lib.csv", [("L1", "an isomer", ISOMER), ("L2", "ethanol", "CCO")])
    mgf = home / "coarse.mgf"
    block = FIXTURE.read_text().split("END IONS")[0]
    lines = ["PEPMASS=321.20" if line.startswith("PEPMASS=") else line for line in block.splitlines()
             if not line.startswith(("FORMULA=", "ADDUCT="))]
    mgf.write_text("\n".join(lines) + "\nEND IONS\n")
    out = home / "o.csv"
    argv = ["predict", str(mgf), "-o", str(out), "--model", str(tiny_bundle_dir), "--groups", "2",
            "--pool-size", "4", "-q", "--no-bundled-libraries"]
    main(argv)
    assert not captured and "is written to 0.01 Da; formulas need it" in capsys.readouterr().err
    assert main(argv + ["--structure-library", str(lib)]) == 0
    assert [(s.formula, s.metadata["formula_source"]) for s in captured] == [("C14H28N2O6", MASS_TRACK)]
    assert "too coarse for formulas: the suspect-list structures within 0.01 Da" in captured[0].metadata["warnings"]
    rows = [r for r in csv.DictReader(line for line in open(out) if not line.startswith("#"))]
    assert [(r["InChIkey2D"], r["origin"], r["feature_rank"]) for r in rows] == \
        [(chem.inchikey14(ISOMER), STRUCTURE_LIBRARY, "1")]


def test_the_mass_track_of_a_coarse_precursor_searches_suspect_lists_only(tiny_bundle, spectrum, home):
    lib = load_library(suspect_csv(home / "lib.csv", [("L1", "an isomer", ISOMER)]))
    unknown = dataclasses.replace(spectrum.with_formula(None), precursor_mz=spectrum.precursor_mz + 0.008)
    adducts = tiny_bundle.supported_adducts
    assert mass_track_spectra([lib], unknown, [], adducts, ppm=10) == []  # 25 ppm away
    assert mass_track_spectra([lib], unknown, [], adducts, ppm=10, precision_da=0.01) == []  # not a suspect list
    lib.suspect = True
    extra = mass_track_spectra([lib], unknown, [], adducts, ppm=10, precision_da=0.01)
    assert [(s.formula, s.adduct) for s in extra] == [("C14H28N2O6", "[M+H]+")]
    assert mass_track_spectra([lib], unknown, [], adducts, ppm=10, precision_da=0.005) == []


def test_library_formula_spectra_add_the_identified_formula_then_the_mass_track(tiny_bundle, spectrum, home):
    refs = load_spectral_library(reference_mgf(home / "refs.mgf", REFERENCE))
    lib = load_library(suspect_csv(home / "lib.csv", [("L1", "an isomer", ISOMER)]))
    lib.suspect = True
    unknown = spectrum.with_formula(None)
    adducts = tiny_bundle.supported_adducts
    added = library_formula_spectra([refs, lib], unknown, [], adducts, ppm=10)
    # the identification's formula is the isomer's too: one run, which the mass track does not repeat
    assert [(s.formula, s.metadata["formula_source"]) for s in added] == \
        [("C14H28N2O6", "spectral library identification")]
    assert library_formula_spectra([lib], unknown, [], adducts, ppm=10)[0].metadata["formula_source"] == \
        MASS_TRACK
    coarse = library_formula_spectra([lib], unknown, [], adducts, ppm=10, precision_da=0.01)
    assert "too coarse for formulas" in coarse[0].metadata["warnings"]
    assert "warnings" not in added[0].metadata or "too coarse" not in added[0].metadata["warnings"]
    assert library_formula_spectra([lib], unknown, [], adducts, ppm=10, ion_types=["[M+Na]+"]) == []
