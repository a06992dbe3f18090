"""Project format 2 (engine/files/project.py): precursor features (scans, RT range, MS1 evidence), formula runs nested
in their entry with their formula candidate, scans with a state of their own, the runs' m/z recalibrations; the
samples of nested entries; a version 1 document's formula runs nested again on reading."""

from __future__ import annotations

import dataclasses
import json
import zipfile

import numpy as np
import pytest

from engine.errors import InputFileError
from engine.files.project import (
    FORMAT_VERSION,
    Project,
    ProjectEntry,
    RunRecalibration,
    Selection,
    save_project,
)
from engine.files.project_read import _upgrade_1, load_project, read_summary
from engine.formulas.candidates import FormulaCandidate
from engine.formulas.recalibration import Recalibration
from engine.spectra.adduct_groups import CompoundGroup, GroupMember, PairEvidence
from engine.spectra.features import Feature, MS1Evidence


def candidate(formula: str, rank: int) -> FormulaCandidate:
    return FormulaCandidate(rank=rank, formula=formula, ion_type="[M+H]+", neutral_mass=178.06, theoretical_mz=179.07,
                            ppm_error=-0.4, rdbe=6.0, terms={"mass": -0.01, "prior": 1.5, "isotopes": float("-inf")},
                            score=1.49, probability=0.8, explained_intensity=0.7, n_explained=3, isomers=12,
                            supported=True)


def feature_project(make_spectrum) -> Project:
    scans = tuple(make_spectrum(id=f"scan={i}", formula=None, adduct=None, retention_time=60.0 + i, source="run.mzML",
                                index=i, intensity=[10.0 * i, 20.0, 30.0, 40.0]) for i in (1, 3, 5))
    consensus = make_spectrum(id="F0001_mz179.0703_rt62.0", formula=None, adduct=None, retention_time=62.0,
                              source="run.mzML", index=1, metadata={"n_scans": "3"})
    ms1 = MS1Evidence("scan=2", 62.5, 179.0702, 1e6, np.array([179.0702, 180.0735]), np.array([1e6, 1.1e5]), 2)
    feature = Feature("F0001_mz179.0703_rt62.0", 1, 179.0702, 61.0, 65.0, scans, consensus, ms1)
    runs = []
    for j, formula in enumerate(("C10H10O3", "C6H14O6")):
        s = dataclasses.replace(consensus, formula=formula, adduct="[M+H]+", metadata={"formula_rank": str(j + 1)})
        runs.append(ProjectEntry(s, s, status="done" if j == 0 else "failed", reason="" if j == 0 else "too big",
                                 candidate=candidate(formula, j + 1)))
    noted = ProjectEntry(scans[1], scans[1], notes="the apex scan")
    recal = Recalibration(offset_ppm=4.2, slope_ppm=-1.0, scatter_ppm=1.8, n_features=7,
                          points_mz=np.array([150.0, 300.0]), points_ppm=np.array([4.0, 4.4]),
                          points_precursor=np.array([True, False]), applied=True, mz_range=(150.0, float("inf")))
    return Project(entries=[ProjectEntry(consensus, consensus, status="done", feature=feature, formula_runs=runs,
                                         scan_entries={1: noted})],
                   recalibrations=[RunRecalibration("run.mzML", recal, {"ppm": 10.0, "elements": "CHNO",
                                                                        "ion_types": None})],
                   selection=Selection(current=0, selected=(0,)))


def test_features_formula_runs_and_recalibrations_round_trip(make_spectrum, tmp_path):
    project = feature_project(make_spectrum)
    path = tmp_path / "run.msgpt"
    save_project(path, project)
    back = load_project(path)
    assert back.format_version == FORMAT_VERSION == 2 and len(back.entries) == 1
    e, was = back.entries[0], project.entries[0]
    f = e.feature
    assert (f.id, f.index, f.precursor_mz, f.rt_min, f.rt_max, f.n_scans) == ("F0001_mz179.0703_rt62.0", 1, 179.0702,
                                                                             61.0, 65.0, 3)
    assert f.spectrum is e.original and list(f.scans) == list(was.feature.scans)
    assert (f.ms1.scan_id, f.ms1.retention_time, f.ms1.n_scans) == ("scan=2", 62.5, 2)
    assert np.array_equal(f.ms1.mz, was.feature.ms1.mz) and np.array_equal(f.ms1.intensity, was.feature.ms1.intensity)
    assert [(r.spectrum, r.status, r.reason, r.candidate) for r in e.formula_runs] == \
        [(r.spectrum, r.status, r.reason, r.candidate) for r in was.formula_runs]
    assert e.formula_runs[0].candidate.terms["isotopes"] == float("-inf")
    assert list(e.scan_entries) == [1] and e.scan_entries[1].notes == "the apex scan"
    (rc,) = back.recalibrations
    assert rc.file == "run.mzML" and rc.settings == {"ppm": 10.0, "elements": "CHNO", "ion_types": None}
    r, w = rc.recalibration, project.recalibrations[0].recalibration
    assert r.describe() == w.describe() and r.mz_range == (150.0, float("inf"))
    assert np.array_equal(r.points_mz, w.points_mz) and r.points_precursor.tolist() == [True, False]
    assert back.summary() == "1 record, 0 with candidates"


def test_the_samples_of_nested_entries_and_the_summary(make_spectrum, tmp_path, tiny_bundle):
    from tiny_bundle import fixture_spectra

    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.progress import run_to_end

    project = feature_project(make_spectrum)
    s = fixture_spectra()[0]
    session = SpectrumSession(tiny_bundle, s)
    params = QueryParams(groups=2, samples_per_group=3, seed=1)
    result = run_to_end(session.run(params))
    drawn = tuple(session.drawn_samples(params))
    assert drawn
    run = project.entries[0].formula_runs[0]
    project.entries[0].formula_runs[0] = dataclasses.replace(run, spectrum=s, original=s, result=result,
                                                             samples=drawn, model_checksum=tiny_bundle.checksum)
    path = tmp_path / "run.msgpt"
    save_project(path, project)
    with zipfile.ZipFile(path) as zf:
        assert list(json.loads(zf.read("samples.json"))) == ["0.f0"]
    back = load_project(path)
    assert back.entries[0].formula_runs[0].samples == drawn and back.entries[0].has_results
    assert back.summary() == "1 record, 1 with candidates"
    assert read_summary(path).n_results == 1


def test_version_1_formula_runs_nest_in_their_entry_again():
    bare = {"id": "F1", "metadata": {}, "peaks": 0}
    run = {"id": "F1", "metadata": {"formula_rank": "1"}, "peaks": 0}
    other = {"id": "x", "metadata": {}, "peaks": 1}
    doc = {"format_version": 1, "selection": {"current": 3, "selected": [1, 3]}, "entries": [
        {"status": "not run", "spectrum": bare, "original": "spectrum", "skipped": None, "result": None},
        {"status": "done", "spectrum": run, "original": bare, "skipped": None, "result": {"r": 1}},
        {"status": "done", "spectrum": {**run, "metadata": {"formula_rank": "2"}}, "original": bare, "skipped": None,
         "result": {"r": 2}},
        {"status": "done", "spectrum": other, "original": "spectrum", "skipped": None, "result": {"r": 3}},
    ]}
    up = _upgrade_1(doc)
    assert [e["spectrum"]["id"] for e in up["entries"]] == ["F1", "x"]
    assert up["entries"][0]["status"] == "done"
    assert [r["result"] for r in up["entries"][0]["formula_runs"]] == [{"r": 1}, {"r": 2}]
    assert all(r["original"] == "spectrum" for r in up["entries"][0]["formula_runs"])
    assert up["selection"] == {"current": 1, "selected": [0, 1]}
    assert up["_sample_keys"] == {"1": "0.f0", "2": "0.f1", "3": "1"}
    plain = {"format_version": 1, "entries": [doc["entries"][0], doc["entries"][3]]}
    assert _upgrade_1(plain) is plain  # nothing to nest


def test_the_committed_version_2_file_still_reads(data_dir):
    """tests/data/project_v2.msgpt was written by format version 2 (scripts/build_project_fixture.py); every later
    version must still read it."""
    project = load_project(data_dir / "project_v2.msgpt")
    assert project.format_version == 2 and len(project.entries) == 4
    e = project.entries[3]
    f = e.feature
    assert (f.id, f.index, f.rt_min, f.rt_max, [s.id for s in f.scans]) == (
        "F0001_mz179.0703_rt64.5", 4, 64.0, 67.0, ["scan=4", "scan=7"])
    assert f.spectrum is e.original and f.ms1.scan_id == "scan=6" and f.ms1.mz.tolist() == [179.0703, 180.0737,
                                                                                             201.0522]
    assert [(r.spectrum.formula, r.status, r.candidate.rank, r.result is not None) for r in e.formula_runs] == [
        ("C10H10O3", "done", 1, True), ("C6H14O6", "failed", 2, False)]
    assert e.formula_runs[0].samples == ((0, 0, "CC1Cc2cccc(O)c2C(=O)O1"),)
    assert e.formula_runs[0].candidate.terms == {"mass": -0.25, "prior": 1.5, "isotopes": 0.75}
    assert e.scan_entries[1].notes == "the later scan is cleaner" and e.scan_entries[1].spectrum == f.scans[1]
    (rc,) = project.recalibrations
    assert rc.file == "/data/run.mzML" and rc.recalibration.offset_ppm == 4.5 and rc.recalibration.mz_range == (
        150.25, 300.5) and rc.recalibration.points_precursor.tolist() == [False, True, True]
    assert project.summary() == "4 records, 2 with candidates, 1 with notes"


def test_compound_groups_round_trip_with_their_partners_per_run(make_spectrum, tmp_path):
    """FEATURE's "group" (issue #56 item 2): each member's CompoundGroup comes back, its partners are the other
    entries' features of its run and group (a second run's G0001 is another group); features without one stay so."""
    entries = []
    for source in ("a.mzML", "b.mzML"):
        ids = ("F0001_mz195.0877_rt60.0", "F0002_mz217.0696_rt60.0", "F0003_mz300.1000_rt90.0")
        group = CompoundGroup("G0001", 194.0804, (GroupMember(ids[0], "[M+H]+", 195.0877, 60.0),
                                                  GroupMember(ids[1], "[M+Na]+", 217.0696, 60.5)),
                              (PairEvidence(0, 1, "[M+H]+", "[M+Na]+", 194.0804, 0.5, 0.0003, 0.97, 8),))
        for k, (fid, mz) in enumerate(zip(ids, (195.0877, 217.0696, 300.1))):
            s = make_spectrum(id=fid, formula=None, adduct=None, precursor_mz=mz, source=source, index=k)
            f = Feature(fid, k, mz, 58.0, 62.0, (s,), s, None, group=group if k < 2 else None)
            entries.append(ProjectEntry(s, s, feature=f))
    path = tmp_path / "groups.msgpt"
    save_project(path, Project(entries=entries))
    with zipfile.ZipFile(path) as zf:
        doc = json.loads(zf.read("project.json"))
    assert doc["entries"][0]["feature"]["group"]["members"][1]["ion_type"] == "[M+Na]+"
    assert "group" not in doc["entries"][2]["feature"]
    back = load_project(path)
    for e, was in zip(back.entries, entries, strict=True):
        assert e.feature.group == was.feature.group
    a_h, a_na, a_other, b_h, b_na, _ = (e.feature for e in back.entries)
    assert [p.id for p in a_h.partners] == [a_na.id] and a_h.partners[0].spectrum.source == "a.mzML"
    assert [p.spectrum.source for p in b_na.partners] == ["b.mzML"] and a_other.partners == ()
    assert [f.id for f in a_na.group_members] == [a_h.id, a_na.id] and b_h.ion_type_in_group == "[M+H]+"

    doc["entries"][0]["feature"]["group"]["members"][0].pop("ion_type")  # damaged: named
    with zipfile.ZipFile(path) as zf:
        arrays = {n: zf.read(n) for n in zf.namelist() if n != "project.json"}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("project.json", json.dumps(doc))
        for n, data in arrays.items():
            zf.writestr(n, data)
    with pytest.raises(InputFileError, match=r"entries\[0\]\.feature\.group"):
        load_project(path)
