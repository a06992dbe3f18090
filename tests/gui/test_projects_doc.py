"""The document as a project, without Qt (msgpt_gui/logic/projects.py): what is worth saving, a run in progress, the
notes and filter, the model and source-file notes, finding the project's model."""

from __future__ import annotations

import dataclasses
import json
import shutil
from types import SimpleNamespace

from engine.elucidation.pipeline import QueryParams
from engine.files.project import SOURCE_CHANGED, SOURCE_MISSING, SOURCE_SAME, ModelRef, Project, ProjectEntry
from msgpt_gui.logic.entries import SpectraFilter, SpectrumEntry, Status
from msgpt_gui.logic.projects import entries_from_project, find_model, model_note, snapshot, sources_note, worth_saving


def test_worth_saving_means_work_that_opening_the_files_again_would_not_bring_back(make_spectrum):
    s = make_spectrum()
    assert not worth_saving([SpectrumEntry(0, s, original=s)])
    assert worth_saving([SpectrumEntry(0, s, original=s, user_notes="checked")])
    assert worth_saving([SpectrumEntry(0, s, original=dataclasses.replace(s, formula=None))])  # set by hand
    assert not worth_saving([SpectrumEntry(0, s, original=s, user_notes="  \n")])


def test_a_run_in_progress_is_saved_as_it_was_before_and_notes_travel(make_spectrum):
    s = make_spectrum()
    running = SpectrumEntry(0, s, original=s, status=Status.RUNNING, user_notes="lactone?")
    queued = SpectrumEntry(1, s, original=s, status=Status.QUEUED)
    project = snapshot([running, queued], QueryParams())
    assert [(e.status, e.notes) for e in project.entries] == [(Status.NOT_RUN, "lactone?"), (Status.NOT_RUN, "")]
    back = entries_from_project(project, [7, 8])
    assert [e.key for e in back] == [7, 8] and back[0].user_notes == "lactone?"
    assert SpectraFilter("lactone").matches(back[0]) and not SpectraFilter("lactone").matches(back[1])


def test_formula_runs_are_saved_inside_their_entry_and_reopen_as_one_row(make_spectrum):
    from engine.files.project import Selection

    bare = make_spectrum(formula=None, adduct=None)
    result = SimpleNamespace(spectrum=None, params=QueryParams())  # what snapshot reads of a result
    feature = SpectrumEntry(0, bare, original=bare, status=Status.DONE)
    runs = []
    for key, formula in ((5, "C10H10O3"), (6, "C6H14O6")):
        s = make_spectrum(formula=formula, metadata={"formula_rank": str(key - 4)})
        runs.append(SpectrumEntry(key, s, original=s, owner_key=0, status=Status.DONE, result=result,
                                  model_checksum="c" * 64, candidate=f"candidate {key}"))
    runs.append(SpectrumEntry(7, make_spectrum(formula="C9H6O4"), owner_key=0, status=Status.FAILED, reason="no"))
    feature.formula_runs = runs
    other = SpectrumEntry(1, make_spectrum(), original=make_spectrum())
    assert worth_saving([feature])  # the candidates of its formula runs
    project = snapshot([feature, other], QueryParams(), selection=Selection(current=1, selected=(0, 1)))
    assert len(project.entries) == 2 and project.entries[0].status == Status.DONE and project.entries[0].has_results
    assert [(r.spectrum.formula, r.status, r.result is result, r.candidate) for r in project.entries[0].formula_runs] \
        == [("C10H10O3", Status.DONE, True, "candidate 5"), ("C6H14O6", Status.DONE, True, "candidate 6"),
            ("C9H6O4", Status.FAILED, False, None)]
    assert (project.selection.current, project.selection.selected) == (1, (0, 1))
    back = entries_from_project(project, [10, 11])
    assert [e.key for e in back] == [10, 11] and back[0].status == Status.DONE
    assert [(r.owner_key, r.spectrum.formula, r.candidate) for r in back[0].formula_runs] == [
        (10, "C10H10O3", "candidate 5"), (10, "C6H14O6", "candidate 6"), (10, "C9H6O4", None)]
    assert len({r.key for r in back[0].formula_runs} | {10, 11}) == 5  # keys of their own


def test_a_features_scans_come_back_and_those_with_a_state_keep_it(make_spectrum):
    from engine.spectra.features import Feature

    scans = tuple(make_spectrum(id=f"scan={i}", formula=None, adduct=None, index=i, retention_time=60.0 + i)
                  for i in range(3))
    consensus = make_spectrum(id="F0001", formula=None, adduct=None, index=0, retention_time=61.0)
    feature = Feature("F0001", 0, 179.0703, 60.0, 62.0, scans, consensus)
    keys = iter(range(100, 200))
    entry = SpectrumEntry.from_feature(0, feature, lambda: next(keys))
    entry.children[2].user_notes = "the last one is noisy"
    project = snapshot([entry], QueryParams())
    assert list(project.entries[0].scan_entries) == [2]  # untouched scans are the feature's
    (back,) = entries_from_project(project, [5])
    assert back.feature is feature and [c.original for c in back.children] == list(scans)
    assert [c.user_notes for c in back.children] == ["", "", "the last one is noisy"]
    assert all(c.parent_key == 5 for c in back.children) and len({c.key for c in back.children}) == 3
    assert list(snapshot([back], QueryParams()).entries[0].scan_entries) == [2]  # saved again: the same


def test_a_skipped_record_stays_skipped(make_spectrum):
    from engine.spectra.spectrum import SkippedRecord

    record = SkippedRecord("a.mgf", 3, "x", "no precursor m/z")
    back = entries_from_project(Project(entries=[ProjectEntry(None, skipped=record, status="not run")]), [0])
    assert back[0].status == Status.SKIPPED and back[0].reason == "no precursor m/z"


def test_notes_on_models_and_files():
    bundle = SimpleNamespace(name="here", checksum="a" * 64)
    done = SimpleNamespace(result=object(), model_checksum="b" * 64)
    project = Project(entries=[done], model=ModelRef("there", "b" * 64, "/models/there"))
    text = model_note(project, bundle)
    assert "there [bbbbbbbb] (it was at /models/there)" in text and "loaded model is here [aaaaaaaa]" in text
    assert "no model is loaded" in model_note(project, None)
    assert model_note(project, SimpleNamespace(name="there", checksum="b" * 64)) == ""
    assert model_note(Project(entries=[SimpleNamespace(result=None, model_checksum=None)]), bundle) == ""
    assert sources_note([("/d/a.mgf", SOURCE_SAME)]) == ""
    text = sources_note([("/d/a.mgf", SOURCE_MISSING), ("/d/b.mgf", SOURCE_MISSING), ("/d/c.mgf", SOURCE_CHANGED)])
    assert text.startswith("a.mgf, b.mgf are not at their saved place") and "c.mgf changed" in text


def test_the_projects_model_is_found_by_its_checksum(tiny_bundle_dir, tmp_path):
    from engine.model.bundle import bundle_checksum

    checksum = bundle_checksum(tiny_bundle_dir)
    assert find_model(ModelRef("tiny", checksum, str(tiny_bundle_dir))) == tiny_bundle_dir
    assert find_model(ModelRef("tiny", checksum, str(tmp_path / "gone"))) is None
    changed = shutil.copytree(tiny_bundle_dir, tmp_path / "changed")
    config = json.loads((changed / "config.json").read_text())
    (changed / "config.json").write_text(json.dumps({**config, "name": "other"}))
    assert find_model(ModelRef("tiny", checksum, str(changed))) is None  # the folder holds another model now
    assert find_model(None) is None
