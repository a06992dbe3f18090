"""Libraries of known compounds in the app: the manager (add, open in the background, switch, remember, errors),
library candidates in the table (Origin column and filter, details, level 2a) and the mirror plot."""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.figure import Figure
from PySide6.QtCore import Qt

from engine.spectra.io import read_spectra
from msgpt_gui.candidates_model import CandidatesModel
from msgpt_gui.library_view import SETTINGS_KEY, LibraryController
from msgpt_gui.logic.libraries import (
    BUNDLED_SPECTRA,
    BUNDLED_STRUCTURES,
    SPECTRAL,
    STRUCTURE,
    default_sources,
    origin_accepted,
    sources_from_setting,
)
from msgpt_gui.logic.plotting import MATCHED_QUERY_COLOR, MATCHED_REFERENCE_COLOR, find_hit, plot_mirror
from msgpt_gui.models import SpectraModel, format_confidence

SITAGLIPTIN = "MSBNK-Eawag-EA290310"
NICOTINE = "MSBNK-NaToxAq-NA003084"
CSV = "name,smiles,id\nCaffeine,CN1C=NC2=C1C(=O)N(C(=O)N2C)C,L1\nNicotine,CN1CCCC1C1=CN=CC=C1,L2\n" \
      "Ethanol,CCO,L3\n"


@pytest.fixture
def structure_csv(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(CSV)
    return path


def add_and_wait(qtbot, controller, path, kind=None):
    with qtbot.waitSignal(controller.finished_opening, timeout=60_000):
        source = controller.add(path, kind)
    return source


def test_manager_adds_opens_switches_and_remembers_libraries(qtbot, make_window, structure_csv, write_mgf, home):
    window = make_window()
    ui = window.libraries
    assert ui.controller.sources == []  # the bundled ones are left out of the GUI tests (conftest)
    dialog = ui.show_manager()
    with qtbot.waitSignal(ui.controller.changed, timeout=60_000) as changed:
        add_and_wait(qtbot, ui.controller, structure_csv)
    structures = ui.controller.sources[0]
    assert (structures.kind, structures.state, structures.counts()) == (STRUCTURE, "open", "3 structures")
    assert changed.args[0] == (structures.library,) and window.runs.libraries == (structures.library,)
    assert any(p.name.endswith(".npz") for p in (home / "data").rglob("*"))  # indexed into MSGPT_HOME

    spectra = add_and_wait(qtbot, ui.controller, write_mgf("refs.mgf", titles={SITAGLIPTIN, NICOTINE}))
    assert spectra.kind == SPECTRAL and spectra.state == "open"
    assert spectra.counts().startswith("2 searchable spectra")
    assert window.runs.libraries == (structures.library, spectra.library)
    table = dialog.table
    assert table.rowCount() == 2
    assert [table.item(r, dialog.KIND).text() for r in range(2)] == ["structure library", "spectral library"]
    assert table.item(1, dialog.CONTENTS).text() == spectra.counts()

    # unticking in the dialog takes a library out of the runs, and the settings keep it off
    with qtbot.waitSignal(ui.controller.changed):
        table.item(0, dialog.NAME).setCheckState(Qt.CheckState.Unchecked)
    assert window.runs.libraries == (spectra.library,)
    saved = json.loads(window.settings.get(SETTINGS_KEY, "", str))
    assert saved == [{"kind": STRUCTURE, "path": str(structure_csv.resolve()), "enabled": False},
                     {"kind": SPECTRAL, "path": spectra.path, "enabled": True}]
    again = LibraryController(window.settings, start=False)
    assert [(s.path, s.enabled) for s in again.sources] == [(str(structure_csv.resolve()), False),
                                                           (spectra.path, True)]
    # removing
    table.selectRow(1)
    dialog.remove_selected()
    assert [s.path for s in ui.controller.sources] == [str(structure_csv.resolve())]
    assert window.runs.libraries == ()


def test_a_file_that_is_no_library_is_reported_naming_it(qtbot, make_window, tmp_path):
    window = make_window()
    controller = window.libraries.controller
    assert controller.add(tmp_path / "notes.docx") is None
    level, text = window.messages[-1]
    assert level == "warning" and "notes.docx" in text and "MSP or MGF" in text
    bad = tmp_path / "empty.csv"
    bad.write_text("name,comment\nfoo,bar\n")
    source = add_and_wait(qtbot, controller, bad)
    assert source.state == "failed" and source.library is None
    level, text = window.messages[-1]
    assert level == "warning" and "empty.csv" in text and "remove it" in text
    assert window.runs.libraries == ()


def test_opening_can_be_cancelled_and_opens_when_ticked_again(qtbot, make_window, structure_csv):
    window = make_window()
    controller = window.libraries.controller
    window.worker_started.connect(lambda w: w.cancel() if w.name.startswith("opening") else None)
    source = add_and_wait(qtbot, controller, structure_csv)
    assert source.state == "cancelled" and source.library is None
    window.worker_started.disconnect()
    controller.set_enabled(source, False)
    with qtbot.waitSignal(controller.finished_opening, timeout=60_000):
        controller.set_enabled(source, True)
    assert source.state == "open" and window.runs.libraries == (source.library,)


def test_settings_bring_the_bundled_libraries_and_keep_the_users(monkeypatch):
    import msgpt_gui.logic.libraries as libraries

    monkeypatch.setattr(libraries, "default_sources", default_sources)  # undo conftest's: nothing is opened here
    sources = sources_from_setting([{"kind": "spectral", "path": "/x/mine.msp", "enabled": "false"}, {"junk": 1}])
    assert [(s.path, s.enabled) for s in sources] == [(BUNDLED_STRUCTURES, True), (BUNDLED_SPECTRA, True),
                                                     ("/x/mine.msp", False)]
    assert sources_from_setting("not a list")[0].path == BUNDLED_STRUCTURES


@pytest.mark.parametrize("origin, shown", [
    ("de_novo", {"all", "de_novo"}),
    ("structure_library", {"all", "library"}),
    ("spectral_library", {"all", "library"}),
    ("de_novo;structure_library", {"all", "de_novo", "library"}),
])
def test_origin_filter_choices(origin, shown):
    assert {c for c in ("all", "de_novo", "library") if origin_accepted(origin, c)} == shown


def test_spectral_library_hits_reach_the_run_table_filter_level_and_mirror(qtbot, make_window, write_mgf):
    window = make_window()
    path = write_mgf("run.mgf", titles={SITAGLIPTIN})
    controller = window.libraries.controller
    add_and_wait(qtbot, controller, write_mgf("refs.mgf", titles={SITAGLIPTIN, NICOTINE}))
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([path])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    result = entry.result
    assert result.spectral_matches is not None and result.spectral_matches.hits
    origins = [c.origin for c in result.candidates]
    assert any("spectral_library" in o for o in origins)
    assert result.identified is not None and result.candidates[0].identified

    panel = window.candidates
    model, proxy = panel.model, panel.proxy
    column = [proxy.index(r, CandidatesModel.ORIGIN).data() for r in range(proxy.rowCount())]
    assert column[0].startswith("✔ 2a")  # compact tags; the tooltip says it in full
    tip = proxy.index(0, CandidatesModel.ORIGIN).data(Qt.ItemDataRole.ToolTipRole)
    assert "Identified (level 2a)" in tip and "reference spectrum" in tip
    ref = proxy.index(0, CandidatesModel.REFERENCE).data()
    assert ref and ref.endswith(result.candidates[0].spectral.accession)  # the Reference column names the accession
    assert proxy.index(0, CandidatesModel.NAME).data() == result.candidates[0].compound_name != ""
    panel.origin_filter.setCurrentIndex(2)  # from libraries
    shown = [model.candidate(proxy.mapToSource(proxy.index(r, 0)).row()) for r in range(proxy.rowCount())]
    assert shown and all(c.origin != "de_novo" for c in shown)
    panel.origin_filter.setCurrentIndex(1)  # de novo
    assert all("de_novo" in model.candidate(proxy.mapToSource(proxy.index(r, 0)).row()).origin
               for r in range(proxy.rowCount()))
    panel.origin_filter.setCurrentIndex(0)
    assert proxy.rowCount() == len(result.candidates)

    # details: library and reference match; the mirror plot of the hit
    panel.select_candidate(result.candidates[0].inchikey14)
    detail = panel.detail
    assert SITAGLIPTIN in detail.library.text() and "Licence" in detail.library.text()
    assert detail.mirror.isVisibleTo(detail) and detail.mirror.hit is not None
    # identification level: the summary and the spectra list
    assert "identified (level 2a)" in panel.summary.text() and "level <b>2a</b>" in panel.summary.text()
    spectra = window.spectra
    assert spectra.index_of(entry.key, SpectraModel.LEVEL).data() == "2a"
    # the identification's calibrated confidence (issue #57), in the list, the summary and the detail pane
    assert result.confidence is not None and result.confidence >= 0.01
    shown = format_confidence(result.confidence)
    assert spectra.index_of(entry.key, SpectraModel.CONFIDENCE).data() == shown
    assert f"confidence <b>{html.escape(shown)}</b>" in panel.summary.text() and "confidence" in detail.library.text()

    # the export: the level, the reference's accession and the libraries used
    out = path.parent / "out.csv"
    with qtbot.waitSignal(window.export_finished, timeout=30_000):
        assert window.files.export(out)
    text = out.read_text()
    assert "identification_level" in text and SITAGLIPTIN in text and "refs.mgf (spectral library)" in text

    # switching the library off re-ranks the current spectrum without it
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        controller.set_enabled(controller.sources[0], False)
    assert entry.result.spectral_matches is None or not entry.result.spectral_matches.hits
    assert all(c.origin == "de_novo" for c in entry.result.candidates)
    assert spectra.index_of(entry.key, SpectraModel.LEVEL).data() == "3"


def test_mirror_plot_draws_matched_peaks_in_colour(write_mgf):
    from engine.spectral_library import load_spectral_library, search

    refs = write_mgf("refs.mgf", titles={SITAGLIPTIN, NICOTINE})
    library = load_spectral_library(refs, folder=refs.parent / "index")
    spectrum = next(s for s in read_spectra(refs)[0] if s.id == SITAGLIPTIN)
    matches = search([library], spectrum)
    hit = matches.hits[0]
    assert hit.reference.accession == SITAGLIPTIN and hit.matched_peaks > 0

    class Candidate:
        inchikey14 = hit.reference.inchikey14
        spectral = None

    assert find_hit(matches, Candidate()) is hit
    ax = Figure().add_subplot()
    assert plot_mirror(matches, hit, ax=ax) is ax
    colours = {}
    for coll in ax.collections:
        rgba = tuple(np.round(coll.get_colors()[0], 3))
        segs = coll.get_segments()
        colours[rgba] = colours.get(rgba, 0) + len(segs)
        ys = [seg[1][1] for seg in segs]
        assert all(y >= 0 for y in ys) or all(y <= 0 for y in ys)  # query up, reference down
    from matplotlib.colors import to_rgba

    assert colours[tuple(np.round(to_rgba(MATCHED_QUERY_COLOR), 3))] == hit.matched_peaks
    assert colours[tuple(np.round(to_rgba(MATCHED_REFERENCE_COLOR), 3))] == hit.matched_peaks
    texts = " ".join(t.get_text() for t in ax.texts)
    assert f"similarity {hit.similarity:.2f}" in texts and SITAGLIPTIN in texts


def test_a_project_records_its_libraries_and_old_projects_read_without(qtbot, make_window, structure_csv,
                                                                       write_mgf, tmp_path):
    from engine.files.project import LibraryRef
    from engine.files.project_read import load_project
    from engine.files.project import save_project
    from msgpt_gui.logic.projects import entries_from_project, snapshot

    old = load_project(Path(__file__).parents[1] / "data" / "project_v1.msgpt")
    assert old.libraries == []
    window = make_window()
    controller = window.libraries.controller
    source = add_and_wait(qtbot, controller, structure_csv)
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("run.mgf", titles={NICOTINE})])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.run_selected()
    assert entry.result is not None
    ref = LibraryRef(source.library.name, STRUCTURE, source.library.checksum)
    project = snapshot(window.spectra.entries, window.query_params, window.bundle)
    assert project.libraries == [ref]
    path = tmp_path / "work.msgpt"
    save_project(path, project)
    back = load_project(path)
    assert back.libraries == [ref]
    reopened = entries_from_project(back, [100])[0]
    assert reopened.library_refs == (ref,) and window.runs.libraries_current(reopened)


def test_the_details_show_a_suspects_analog_score_and_its_reference(qtbot):
    import dataclasses

    from engine.elucidation.ranking import Candidate
    from msgpt_gui.candidates_view import DetailPane, PixmapCache

    pane = DetailPane(PixmapCache())
    qtbot.addWidget(pane)
    c = Candidate(rank=1, smiles="CCO", inchikey="LFQSCWFLJHTTHZ-UHFFFAOYSA-N", inchikey14="LFQSCWFLJHTTHZ",
                  formula="C2H6O", count=0, frequency=0.0, posterior_similarity=0.5, bits=np.zeros(0, dtype=np.int64),
                  fingerprint_score=-12.0, fragment_score=-3.5, analog_score=0.58,
                  analog_reference="MSBNK-AAFC-AC000233 T-2 Toxin", suspect=True)
    pane.show_candidate(c)
    text = pane.scores.text()
    assert "fragment score -3.5" in text and "analog score 0.58 (like MSBNK-AAFC-AC000233 T-2 Toxin)" in text
    pane.show_candidate(dataclasses.replace(c, analog_score=float("nan"), analog_reference=""))
    assert "analog score" not in pane.scores.text()  # not scored: nothing said


def test_a_formula_run_the_libraries_added_is_named_by_its_source(qtbot, make_window, write_mgf):
    """A run of the mass track (a library structure's formula Run did not take) has no formula candidate: the
    spectra list's formula tooltip and the candidates' summary name it by where its formula came from."""
    from engine.elucidation.libraries import MASS_TRACK
    from engine.formulas.candidates import rank_formulas
    from msgpt_gui.candidates_view import _formula_runs_detail
    from msgpt_gui.logic.jobs import FormulaRun, FormulasRanked

    window = make_window()
    path = write_mgf("run.mgf", titles={NICOTINE}, drop_keys=("FORMULA", "ADDUCT"))
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([path])
    entry = window.spectra.entries[0]
    base = entry.spectrum
    added = base.with_adduct("[M+H]+", check=False).with_formula("C10H14N2")
    added = dataclasses.replace(added, metadata={**added.metadata, "formula_source": MASS_TRACK})
    table = rank_formulas(base)
    window.runs._entry_event(entry, FormulasRanked(entry.key, base, table, (FormulaRun(900, None, added, None,
                                                                                       "not run here"),)))
    assert [r.candidate for r in entry.formula_runs] == [None]
    tip = window.spectra.index_of(entry.key, SpectraModel.FORMULA).data(Qt.ItemDataRole.ToolTipRole)
    assert "C10H14N2 [M+H]+ (from structure library (mass)): failed" in tip
    assert "C10H14N2 [M+H]+ (from structure library (mass)): failed" in _formula_runs_detail(entry.formula_runs)


def test_the_share_of_suspects_present_is_set_beside_the_libraries_and_kept(qtbot, make_window):
    window = make_window()
    dialog = window.libraries.show_manager()
    assert dialog.present.value() == 50 and window.query_params.suspects_present == 0.5
    with qtbot.waitSignal(window.params_panel.changed) as changed:
        dialog.present.setValue(90)  # standards known to be in the sample
    assert changed.args[0].suspects_present == 0.9 and window.query_params.suspects_present == 0.9
    assert window.settings.query_params().suspects_present == 0.9  # remembered for the next session
    assert "suspects_present=0.9" in window.query_params.describe()  # and written into every export
    # parameters set elsewhere (a project opened) show in the dialog
    window.params_panel.set_params(dataclasses.replace(window.query_params, suspects_present=0.1))
    window.params_panel.changed.emit(window.params_panel.params())
    assert dialog.present.value() == 10
    assert "broad" in dialog.present.toolTip() and dialog.present_note.isVisibleTo(dialog)


def test_another_share_re_ranks_every_suspect_rank_1_drawing_nothing(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("two.mgf", titles={SITAGLIPTIN, NICOTINE})])
    suspects = tmp_path / "suspects.csv"  # the two spectra's own structures: each rank 1 is a suspect
    structures = {e.id: e.spectrum.smiles for e in window.spectra.entries}
    suspects.write_text("name,smiles\n" + "".join(f"{k},{v}\n" for k, v in structures.items()))
    add_and_wait(qtbot, window.libraries.controller, suspects)
    with qtbot.waitSignal(window.run_finished, timeout=60_000):
        window.run_menu.run_all()
    done = [e for e in window.spectra.entries if e.result is not None]
    assert len(done) == 2 and all(e.result.candidates[0].suspect for e in done)
    assert all(e.result.params.suspects_present == 0.5 for e in done)
    drawn = {e.key: e.result.n_samples for e in done}
    dialog = window.libraries.show_manager()
    with qtbot.waitSignal(window.run_finished, timeout=60_000):
        dialog.present.setValue(20)  # a broad screening list
    assert all(e.result.params.suspects_present == 0.2 for e in done)  # not only the current spectrum
    assert all(e.result.new_samples == 0 and e.result.n_samples == drawn[e.key] for e in done)  # nothing drawn
    # a spectrum whose rank 1 is no suspect keeps its result: the share moves only a suspect's confidence
    window.libraries.controller.set_enabled(window.libraries.controller.sources[0], False)
    with qtbot.waitSignal(window.run_finished, timeout=60_000):  # the libraries changed: re-ranked without the list
        pass
    assert not any(e.result.candidates[0].suspect for e in done)
    kept = {e.key: e.result for e in done}
    with qtbot.waitSignal(window.run_finished, timeout=60_000):  # the current spectrum re-ranks, as for any setting
        dialog.present.setValue(70)
    others = [e for e in done if e is not window.current_entry()]
    assert others and all(e.result is kept[e.key] for e in others) and window.run_menu.stale_share is False
