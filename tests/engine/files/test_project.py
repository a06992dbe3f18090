"""Project files (engine/files/project.py): round trips, the drawn samples, versions, damaged files, sources."""

from __future__ import annotations

import dataclasses
import json
import zipfile

import numpy as np
import pytest
from tiny_bundle import fixture_spectra

from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.errors import Cancelled, ConfigError, InputFileError
from engine.files.project import (
    FORMAT_VERSION,
    SOURCE_CHANGED,
    SOURCE_MISSING,
    SOURCE_SAME,
    ModelRef,
    Project,
    ProjectEntry,
    Selection,
    SourceFile,
    check_source,
    describe_source,
    save_project,
    write_project,
)
from engine.files.project_read import load_project, read_summary
from engine.spectra.spectrum import SkippedRecord, Spectrum

PARAMS = QueryParams(kappa_min=0.9, kappa_max=1.4, groups=4, samples_per_group=5, seed=7, ranking="combined")


def drain(gen):
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


@pytest.fixture(scope="module")
def ran(tiny_bundle):
    """Two fixture spectra run on the tiny bundle: [(spectrum, session, result)]."""
    out = []
    for s in fixture_spectra()[:2]:
        session = SpectrumSession(tiny_bundle, s)
        out.append((s, session, drain(session.run(PARAMS))))
    return out


def make_project(ran, tiny_bundle) -> Project:
    (s1, session1, r1), (s2, _, r2) = ran
    as_read = dataclasses.replace(s2, formula=None, adduct=None, charge=0)  # the file said neither
    peaks = SkippedRecord("run.mzML", 7, "scan=8", "no precursor m/z in the record", mz=np.array([50.5, 80.25]),
                          intensity=np.array([10.0, 3.0]), retention_time=61.5, polarity="positive")
    typed = Spectrum(id="scan=8", precursor_mz=163.0754, adduct="[M+H]+", formula="C10H10O2", mz=peaks.mz,
                     intensity=peaks.intensity, retention_time=61.5, source="run.mzML", index=7,
                     metadata={"precursor_source": "typed in the app"})
    entries = [
        ProjectEntry(s1, s1, status="done", notes="Fragment 145 fits the lactone.\nCheck with a standard — ✓",
                     result=r1, model_checksum=tiny_bundle.checksum,
                     samples=tuple(session1.drawn_samples(PARAMS))),
        ProjectEntry(s2, as_read, status="done", result=r2, model_checksum=tiny_bundle.checksum),
        ProjectEntry(typed, None, skipped=peaks, status="not run"),
        ProjectEntry(None, None, skipped=SkippedRecord("run.mzML", 9, "scan=10", "MS1 only"), status="skipped",
                     reason="MS1 only"),
        ProjectEntry(dataclasses.replace(s1, precursor_mz=s1.precursor_mz + 0.001), s1, status="failed",
                     reason="the formula does not fit"),
    ]
    return Project(entries=entries, params=PARAMS, model=ModelRef.of(tiny_bundle),
                   files=[SourceFile("/data/a.mgf", 1234, "ab" * 32)],
                   selection=Selection(current=1, selected=(0, 1), candidate=r2.candidates[0].inchikey14
                                       if r2.candidates else None),
                   app={"project_path": "/somewhere/x.msgpt"})


def assert_same_result(a, b):
    assert a.spectrum == b.spectrum and a.params == b.params
    for name in ("n_samples", "n_valid", "n_formula_consistent", "n_distinct_queries", "mean_query_bits", "fidelity",
                 "reference_inchikey14", "reference_rank", "new_samples", "seconds", "partial", "plan"):
        assert getattr(a, name) == getattr(b, name), name
    assert np.array_equal(a.thresholds, b.thresholds)
    assert a.posterior.dtype == b.posterior.dtype == np.float32 and np.array_equal(a.posterior, b.posterior)
    assert len(a.candidates) == len(b.candidates)
    for x, y in zip(a.candidates, b.candidates):
        for name in ("rank", "smiles", "inchikey", "inchikey14", "formula", "count", "frequency",
                     "posterior_similarity", "fingerprint_score", "score"):
            assert getattr(x, name) == getattr(y, name), name
        assert np.array_equal(x.bits, y.bits)


def test_round_trip_gives_back_every_entry_result_and_setting(ran, tiny_bundle, tmp_path):
    project = make_project(ran, tiny_bundle)
    assert project.entries[0].result.candidates and project.entries[0].samples
    path = tmp_path / "work.msgpt"
    assert save_project(path, project) == path.stat().st_size
    back = load_project(path)

    assert back.params == PARAMS and back.model == project.model and back.files == project.files
    assert back.selection == project.selection and back.app == project.app
    assert back.format_version == FORMAT_VERSION and back.saved_by.startswith("msgpt ")
    assert len(back.entries) == len(project.entries)
    for a, b in zip(project.entries, back.entries):
        assert (a.status, a.reason, a.notes, a.model_checksum, a.samples) == (b.status, b.reason, b.notes,
                                                                              b.model_checksum, b.samples)
        assert a.spectrum == b.spectrum and a.original == b.original
        assert (a.original is a.spectrum) == (b.original is b.spectrum)
        assert a.skipped == b.skipped
        if a.skipped is not None:
            assert (a.skipped.retention_time, a.skipped.polarity) == (b.skipped.retention_time, b.skipped.polarity)
            assert a.skipped.has_peaks == b.skipped.has_peaks
            if a.skipped.has_peaks:
                assert np.array_equal(a.skipped.mz, b.skipped.mz)
                assert np.array_equal(a.skipped.intensity, b.skipped.intensity)
        assert (a.result is None) == (b.result is None)
        if a.result is not None:
            assert_same_result(a.result, b.result)
            assert b.result.spectrum is b.spectrum  # the app tells the result of the shown spectrum by identity
    # what the user set by hand
    assert back.entries[1].original.formula is None and back.entries[1].spectrum.formula == ran[1][0].formula
    assert back.entries[4].spectrum.precursor_mz == pytest.approx(ran[0][0].precursor_mz + 0.001, abs=1e-12)
    assert back.entries[2].spectrum.metadata["precursor_source"] == "typed in the app"


def test_file_holds_json_and_plain_arrays_only(ran, tiny_bundle, tmp_path):
    path = tmp_path / "work.msgpt"
    save_project(path, make_project(ran, tiny_bundle))
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert names[0] == "project.json" and "samples.json" in names
        assert all(n in ("project.json", "samples.json") or (n.startswith("arrays/") and n.endswith(".npy"))
                   for n in names)
        doc = json.loads(zf.read("project.json"))
        for n in names:
            if n.endswith(".npy"):
                with zf.open(n) as fh:
                    np.lib.format.read_array(fh, allow_pickle=False)  # raises for an object array
    assert doc["format"] == "msgpt-project" and doc["format_version"] == FORMAT_VERSION
    assert doc["entries"][0]["original"] == "spectrum" and doc["entries"][0]["result"]["spectrum"] == "spectrum"
    first = doc["entries"][0]["result"]["candidates"][0]
    assert set(first) >= {"rank", "smiles", "inchikey14", "count", "fingerprint_score", "score"}
    # records with the same peaks share one row of the peak arrays
    assert doc["entries"][4]["spectrum"]["peaks"] == doc["entries"][0]["spectrum"]["peaks"]


def test_restored_samples_mean_nothing_is_drawn_again(ran, tiny_bundle, tmp_path):
    path = tmp_path / "work.msgpt"
    save_project(path, make_project(ran, tiny_bundle))
    e = load_project(path).entries[0]
    session = SpectrumSession(tiny_bundle, e.spectrum, posterior=e.result.posterior)
    session.add_drawn_samples(e.result.params, e.samples)
    again = drain(session.run(e.result.params))
    assert again.new_samples == 0
    assert [(c.inchikey14, c.count, c.score) for c in again.candidates] == \
        [(c.inchikey14, c.count, c.score) for c in e.result.candidates]
    bigger = dataclasses.replace(PARAMS, samples_per_group=8)
    grown = drain(session.run(bigger))
    assert grown.new_samples == 4 * 3  # only j = 5, 6, 7 of each of the 4 groups
    fresh = drain(SpectrumSession(tiny_bundle, e.spectrum).run(bigger))
    assert [(c.inchikey14, c.count) for c in grown.candidates] == [(c.inchikey14, c.count) for c in fresh.candidates]
    # samples of other settings are not offered as this band's
    assert session.drawn_samples(dataclasses.replace(PARAMS, seed=8)) == []


def test_empty_project_and_defaults(tmp_path):
    path = tmp_path / "empty.msgpt"
    save_project(path, Project())
    back = load_project(path)
    assert back.entries == [] and back.params == QueryParams() and back.model is None
    assert back.selection == Selection()


def test_a_minimal_version_1_document_reads_with_defaults(tmp_path, make_spectrum):
    """What version 1 requires: format, version and entries; everything else has a default."""
    s = make_spectrum()
    path = tmp_path / "minimal.msgpt"
    doc = {"format": "msgpt-project", "format_version": 1, "entries": [{"spectrum": {
        "id": s.id, "precursor_mz": s.precursor_mz, "formula": s.formula, "adduct": s.adduct, "peaks": 0}}]}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("project.json", json.dumps(doc))
        for name, arr in {"peaks_offsets": np.array([0, s.n_peaks]), "peaks_mz": s.mz,
                          "peaks_intensity": s.intensity}.items():
            with zf.open(f"arrays/{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, arr)
    e = load_project(path).entries[0]
    assert e.spectrum == s and e.original is None and e.status == "not run" and e.notes == "" and e.result is None


def test_the_committed_version_1_file_still_reads(data_dir):
    """tests/data/project_v1.msgpt was written by format version 1 (scripts/build_project_fixture.py); every later
    version must still read it."""
    project = load_project(data_dir / "project_v1.msgpt")
    assert project.format_version == 1  # the version it was written in (read through every upgrade since)
    assert project.model == ModelRef("fixture-model", "0123456789abcdef" * 4, "/models/fixture-model")
    assert project.params == QueryParams(kappa_min=1.0, kappa_max=1.25, groups=2, samples_per_group=3, seed=11,
                                         ranking="frequency", decoding="free", use_adapter=False)
    assert [e.spectrum.id if e.spectrum else e.skipped.spectrum_id for e in project.entries] == \
        ["mellein", "no-formula", "scan=3"]
    mellein, no_formula, skipped = project.entries
    assert mellein.notes == "Lactone; compare with the standard."
    assert [c.smiles for c in mellein.result.candidates] == ["CC1Cc2cccc(O)c2C(=O)O1", "COc1ccc(C=CC(=O)O)cc1"]
    assert [c.count for c in mellein.result.candidates] == [4, 2]
    assert mellein.result.params.edit_rounds == 0  # written before isomer edits: its results were made without them
    assert mellein.result.candidates[0].fingerprint_score == -12.5 and np.isnan(mellein.result.candidates[1].score)
    assert list(mellein.result.candidates[0].bits) == [1, 80, 650, 4000]
    assert mellein.result.posterior.shape == (4096,) and mellein.result.posterior[80] == np.float32(0.75)
    assert mellein.samples == ((0, 0, "CC1Cc2cccc(O)c2C(=O)O1"), (1, 0, "CC1Cc2cccc(O)c2C(=O)O1"))
    assert no_formula.original.formula is None and no_formula.spectrum.formula == "C10H10O3"
    assert skipped.spectrum is None and skipped.skipped.reason == "no precursor m/z" and skipped.skipped.has_peaks
    assert project.selection == Selection(current=0, selected=(0, 1), candidate="KWILGNNWGSNMPA")
    assert project.files == [SourceFile("/data/fixture.mgf", 2048, "cd" * 32)]


def write_document(path, doc):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("project.json", json.dumps(doc))


def test_a_newer_version_is_refused_with_a_message(tmp_path):
    path = tmp_path / "future.msgpt"
    write_document(path, {"format": "msgpt-project", "format_version": FORMAT_VERSION + 1,
                          "saved_by": "msgpt 9.0.0", "entries": []})
    with pytest.raises(InputFileError, match=rf"saved by msgpt 9\.0\.0 in project format {FORMAT_VERSION + 1}.*"
                                             rf"reads project formats up to {FORMAT_VERSION}\. Update MS-GPT Desktop"):
        load_project(path)
    with pytest.raises(InputFileError, match="Update MS-GPT Desktop"):
        read_summary(path)


@pytest.mark.parametrize("content, match", [
    (b"BEGIN IONS\nEND IONS\n", "is not an MS-GPT Desktop project"),
    ({"other.txt": "x"}, "without project.json"),
    ({"project.json": "{not json"}, "not valid JSON"),
    ({"project.json": json.dumps({"format": "msgpt-posteriors", "format_version": 1})}, "format 'msgpt-posteriors'"),
    ({"project.json": json.dumps({"format": "msgpt-project", "format_version": "one"})}, "no valid format_version"),
    ({"project.json": json.dumps({"format": "msgpt-project", "format_version": 1,
                                  "entries": [{"spectrum": {"id": "a", "precursor_mz": 100.0, "peaks": 3}}]})},
     r"is damaged: entries\[0\]\.spectrum: no row 3 in arrays/peaks_mz"),
    ({"project.json": json.dumps({"format": "msgpt-project", "format_version": 1, "params": {"groups": 0}})},
     "is damaged: params: `groups` must be a positive integer"),
])
def test_what_is_not_a_readable_project_is_refused_with_its_reason(tmp_path, content, match):
    path = tmp_path / "bad.msgpt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        with zipfile.ZipFile(path, "w") as zf:
            for name, text in content.items():
                zf.writestr(name, text)
    with pytest.raises(InputFileError, match=match):
        load_project(path)


def test_writing_is_atomic_and_checks_the_name(ran, tiny_bundle, tmp_path):
    path = tmp_path / "work.msgpt"
    path.write_bytes(b"the earlier file")
    gen = write_project(path, make_project(ran, tiny_bundle), cancel=lambda: True)
    with pytest.raises(Cancelled):
        drain(gen)
    assert path.read_bytes() == b"the earlier file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work.msgpt"]  # no temporary file left
    with pytest.raises(ConfigError, match=r"ending in \.msgpt"):
        save_project(tmp_path / "work.zip", Project())
    with pytest.raises(ConfigError, match="does not exist"):
        save_project(tmp_path / "nowhere" / "work.msgpt", Project())


def test_summary_reads_the_document_alone(ran, tiny_bundle, tmp_path):
    path = tmp_path / "work.msgpt"
    project = make_project(ran, tiny_bundle)
    save_project(path, project)
    s = read_summary(path)
    assert (s.n_entries, s.n_results, s.model, s.app) == (5, 2, project.model, project.app)
    assert "5 records, 2 with candidates" in s.describe()


def test_sources_are_recorded_with_their_checksum_and_checked(tmp_path, monkeypatch):
    f = tmp_path / "a.mgf"
    f.write_text("BEGIN IONS\nEND IONS\n")
    cache = {}
    src = describe_source(f, cache)
    assert src.size == f.stat().st_size and len(src.sha256) == 64
    calls = []
    import engine.files.project as project_module

    monkeypatch.setattr(project_module, "file_sha256", lambda *a, **k: calls.append(a) or "x")
    assert describe_source(f, cache) == src and calls == []  # not read again while unchanged
    monkeypatch.undo()
    assert check_source(src) == SOURCE_SAME
    f.write_text("BEGIN IONS\nTITLE=changed\nEND IONS\n")
    assert check_source(src) == SOURCE_CHANGED
    f.unlink()
    assert check_source(src) == SOURCE_MISSING
    assert describe_source(f) == SourceFile(str(f))


def test_a_candidates_fragment_and_analog_scores_round_trip_and_export(ran, tiny_bundle, tmp_path):
    import math

    from engine.files.export import candidate_rows

    s1, _, r1 = ran[0]
    first = dataclasses.replace(r1.candidates[0], fragment_score=-3.25, analog_score=0.58,
                                analog_reference="REF1 T-2 Toxin", suspect=True)
    result = dataclasses.replace(r1, candidates=(first, *r1.candidates[1:]))
    project = Project(entries=[ProjectEntry(s1, s1, status="done", result=result, model_checksum=tiny_bundle.checksum)],
                      params=PARAMS, model=ModelRef.of(tiny_bundle))
    save_project(tmp_path / "scores.msgpt", project)
    back = load_project(tmp_path / "scores.msgpt").entries[0].result.candidates
    assert (back[0].fragment_score, back[0].analog_score, back[0].analog_reference) == (-3.25, 0.58,
                                                                                          "REF1 T-2 Toxin")
    assert all(math.isnan(c.analog_score) and c.analog_reference == "" for c in back[1:])  # not scored
    rows = list(candidate_rows(result))
    assert (rows[0]["analog_score"], rows[0]["analog_reference"]) == ("0.5800", "REF1 T-2 Toxin")
    assert all(r["analog_score"] == "" and r["analog_reference"] == "" for r in rows[1:])


def test_an_edited_candidates_parent_round_trips_and_exports(ran, tiny_bundle, tmp_path):
    from engine.files.export import candidate_rows

    s1, _, r1 = ran[0]
    edit = dataclasses.replace(r1.candidates[0], count=0, edited_from="CCCN(CCC)C(=S)SSC(=S)NCC")
    result = dataclasses.replace(r1, candidates=(edit, *r1.candidates[1:]))
    project = Project(entries=[ProjectEntry(s1, s1, status="done", result=result, model_checksum=tiny_bundle.checksum)],
                      params=PARAMS, model=ModelRef.of(tiny_bundle))
    save_project(tmp_path / "edits.msgpt", project)
    back = load_project(tmp_path / "edits.msgpt").entries[0].result
    assert back.candidates[0].edited_from == "CCCN(CCC)C(=S)SSC(=S)NCC"
    assert [c.edited_from for c in back.candidates[1:]] == [c.edited_from for c in r1.candidates[1:]]
    assert back.params.edit_rounds == result.params.edit_rounds  # written now: kept as it was
    rows = list(candidate_rows(result))
    assert rows[0]["edited_from"] == "CCCN(CCC)C(=S)SSC(=S)NCC"
    assert [r["edited_from"] for r in rows[1:]] == [c.edited_from for c in r1.candidates[1:]]
