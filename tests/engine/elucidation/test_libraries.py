"""Structure libraries in a spectrum's search: library structures of the spectrum's formula join the one ranking,
each once, with its origin, library, identifier and name; the library prior moves them; exports, projects and
``msgpt predict --structure-library`` carry all of it."""

from __future__ import annotations

import csv
import dataclasses

import pytest
from tiny_bundle import FIXTURE, fixture_spectra

from engine.chem import molecules as chem
from engine.elucidation.libraries import library_structures
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.elucidation.ranking import DE_NOVO, STRUCTURE_LIBRARY
from engine.files.export import CSV_COLUMNS, candidate_rows
from engine.library import load_library
from engine.progress import run_to_end

REFERENCE = "O=C(CCCCC(=O)N(CCO)CCO)N(CCO)CCO"  # the first fixture spectrum's structure, C14H28N2O6
ISOMER = "O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO"  # the same formula, one CH2 moved
OTHER = "CCO"  # another formula: never offered
PARAMS = QueryParams(groups=2, samples_per_group=2, seed=0, edit_rounds=0)  # edits: test_pipeline.py


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path


def write_library(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Identifier", "CompoundName", "SMILES"])
        w.writerows(rows)
    return path


@pytest.fixture
def spectrum():
    s = fixture_spectra()[0]
    assert s.formula == "C14H28N2O6" and chem.canonical_smiles(REFERENCE) == chem.canonical_smiles(s.smiles)
    return s


@pytest.fixture
def library(home):
    assert chem.mol_formula(chem.mol_from_smiles(ISOMER)) == "C14H28N2O6"
    path = write_library(home / "mine.csv", [("ID-1", "the reference", REFERENCE), ("ID-2", "an isomer", ISOMER),
                                             ("ID-3", "ethanol", OTHER)])
    return load_library(path, "mine")


def run(bundle, spectrum, libraries, **params):
    session = SpectrumSession(bundle, spectrum, libraries=libraries)
    return run_to_end(session.run(dataclasses.replace(PARAMS, **params)))


def test_only_structures_of_the_formula_are_offered(library):
    offered = library_structures([library], "C14H28N2O6")
    assert sorted(s.name for s in offered) == ["an isomer", "the reference"]
    assert {s.library for s in offered} == {"mine"} and library_structures([library], "C2H6O")[0].name == "ethanol"


def test_library_structures_join_the_ranking_once_with_their_origin(tiny_bundle, spectrum, library):
    plain = run(tiny_bundle, spectrum, [])
    joined = run(tiny_bundle, spectrum, [library])
    assert all(c.origin == DE_NOVO and not c.library for c in plain.candidates)
    keys = [c.inchikey14 for c in joined.candidates]
    assert len(keys) == len(set(keys))  # one candidate per structure, generated or not
    by_key = {c.inchikey14: c for c in joined.candidates}
    ref = by_key[chem.inchikey14(REFERENCE)]
    assert ref.library == "mine" and ref.library_id == "ID-1" and ref.compound_name == "the reference"
    assert STRUCTURE_LIBRARY in ref.origin.split(";")
    assert chem.inchikey14(OTHER) not in by_key
    generated = {c.inchikey14 for c in plain.candidates}
    for c in joined.candidates:  # a structure both drawn and in the library is both, with its count
        in_library = c.inchikey14 in {chem.inchikey14(REFERENCE), chem.inchikey14(ISOMER)}
        assert (DE_NOVO in c.origin.split(";")) == (c.inchikey14 in generated)
        assert (STRUCTURE_LIBRARY in c.origin.split(";")) == in_library
        assert (c.count == 0) == (c.inchikey14 not in generated)
    assert joined.reference_rank is not None and [c.rank for c in joined.candidates] == list(range(1, len(keys) + 1))


def test_the_library_prior_moves_library_structures_and_nothing_else(tiny_bundle, spectrum, library):
    up = run(tiny_bundle, spectrum, [library], library_prior=1000.0, undrawn_prior=0.0)
    down = run(tiny_bundle, spectrum, [library], library_prior=-1000.0, undrawn_prior=0.0)
    known = {chem.inchikey14(REFERENCE), chem.inchikey14(ISOMER)}
    assert {c.inchikey14 for c in up.candidates[:2]} == known
    assert {c.inchikey14 for c in down.candidates[-2:]} == known
    rest = lambda r: [c.inchikey14 for c in r.candidates if c.inchikey14 not in known]  # noqa: E731
    assert rest(up) == rest(down)  # the de novo order does not change
    assert all(c.score == pytest.approx(c.fingerprint_score + 1000.0) for c in up.candidates if c.inchikey14 in known)
    frequency = run(tiny_bundle, spectrum, [library], ranking="frequency")
    assert all(c.count == 0 for c in frequency.candidates[-2:] if c.inchikey14 in known and STRUCTURE_LIBRARY ==
               c.origin)


def test_the_undrawn_prior_moves_library_structures_no_sample_drew_and_no_suspect(tiny_bundle, spectrum, library,
                                                                                    home):
    base = run(tiny_bundle, spectrum, [library], undrawn_prior=0.0)
    low = run(tiny_bundle, spectrum, [library], undrawn_prior=-1000.0)
    undrawn = {c.inchikey14 for c in base.candidates if c.count == 0}
    assert undrawn == {chem.inchikey14(ISOMER)}  # the tiny decoder draws the reference, not the isomer
    assert low.candidates[-1].inchikey14 == chem.inchikey14(ISOMER)
    assert low.candidates[-1].score == pytest.approx(low.candidates[-1].fingerprint_score - 1000.0)
    drawn = lambda r: [(c.inchikey14, c.score) for c in r.candidates if c.count > 0]  # noqa: E731
    assert drawn(low) == drawn(base)  # a library structure that was drawn (the reference) is not moved
    suspects = load_library(write_library(home / "s.csv", [("S1", "an isomer", ISOMER)]))
    suspects.suspect = True
    first = run(tiny_bundle, spectrum, [suspects], undrawn_prior=-1000.0).candidates[0]
    assert first.inchikey14 == chem.inchikey14(ISOMER) and first.count == 0
    assert first.score == pytest.approx(first.fingerprint_score)  # a suspect's order is its own
    with pytest.raises(Exception, match="undrawn_prior"):
        QueryParams(undrawn_prior=float("-inf"))


def test_exports_and_projects_carry_the_origin(tiny_bundle, spectrum, library, tmp_path):
    from engine.files.project import Project, ProjectEntry, save_project
    from engine.files.project_read import load_project

    result = run(tiny_bundle, spectrum, [library])
    save_project(tmp_path / "p.msgpt", Project(entries=[ProjectEntry(spectrum=spectrum, result=result)]))
    back = load_project(tmp_path / "p.msgpt").entries[0].result
    fields = lambda r: [(c.inchikey14, c.origin, c.library, c.library_id, c.compound_name) for c in r.candidates]  # noqa: E731
    assert fields(back) == fields(result)
    rows = list(candidate_rows(result))
    assert list(rows[0]) == list(CSV_COLUMNS)[: len(rows[0])] and set(CSV_COLUMNS) == set(rows[0])
    ref = next(r for r in rows if r["InChIkey2D"] == chem.inchikey14(REFERENCE))
    assert ref["library"] == "mine" and ref["library_id"] == "ID-1" and ref["compound_name"] == "the reference"
    assert ref["inchikey"].startswith(chem.inchikey14(REFERENCE))  # the full key, also of a library-only candidate


def test_predict_with_a_structure_library_writes_the_origin_columns(tiny_bundle_dir, home, capsys):
    from engine.cli import main

    lib = write_library(home / "suspects.csv", [("S1", "the reference", REFERENCE), ("S2", "an isomer", ISOMER)])
    out = home / "out.csv"
    argv = ["predict", str(FIXTURE), "-o", str(out), "--model", str(tiny_bundle_dir), "--groups", "2",
            "--samples-per-group", "2", "--band", "0.95", "1.5", "-q", "--formulas", "0", "--no-bundled-libraries"]
    assert main(argv + ["--structure-library", str(lib), "--structure-library", str(home / "missing.csv")]) == 0
    err = capsys.readouterr().err
    assert "Structure library left out" in err and "missing.csv" in err and "suspects.csv: 2 structures" in err
    rows = [r for r in csv.DictReader(line for line in open(out) if not line.startswith("#"))]
    first = [r for r in rows if r["spectrum_id"] == "MSBNK-Athens_Univ-AU406406"]
    named = {r["compound_name"]: r for r in first if r["compound_name"]}
    assert set(named) == {"the reference", "an isomer"} and named["the reference"]["library_id"] == "S1"
    assert named["the reference"]["library"] == "suspects.csv"
    assert all(r["origin"] in ("de_novo", "structure_library", "de_novo;structure_library") for r in rows)
    assert main(argv + ["--structure-library", str(lib), "--no-libraries"]) == 0
    rows = [r for r in csv.DictReader(line for line in open(out) if not line.startswith("#"))]
    assert {r["origin"] for r in rows} == {"de_novo"} and not any(r["library"] for r in rows)


def test_the_library_progress_bar_names_each_step(capsys):
    from engine.cli.predict_libraries import _open_one
    from engine.library.build import LibraryProgress
    from engine.library.read import LibraryError

    def job():
        yield LibraryProgress(10, 10, "Checking mine.csv")
        yield LibraryProgress(4, 10, "Indexing mine.csv")  # a second step starts again from 0
        return "the library"

    assert _open_one(job(), "Structure library", "mine.csv", LibraryError, quiet=False) == "the library"
    err = capsys.readouterr().err
    assert "Structure library: Checking mine.csv" in err and "Structure library: Indexing mine.csv" in err

    def broken():
        yield LibraryProgress(0, 10, "Checking bad.csv")
        raise LibraryError("bad.csv", "no SMILES column")

    assert _open_one(broken(), "Structure library", "bad.csv", LibraryError, quiet=True) is None
    assert "Structure library left out: bad.csv: no SMILES column" in capsys.readouterr().err
