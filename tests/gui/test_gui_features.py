"""The app on an LC-MS/MS run (issue #16): precursor features listed and expandable to their scans, the
formula table of a spectrum without a formula, picking a formula, running the best k formulas (one result
per formula, their candidates in one list), and the MS1 isotope plot.

The run is a small synthetic mzML (tests/synthetic_run.py): caffeine fragmented three times along its peak,
with survey scans that hold its isotope pattern and its [M+Na]+, and one scan of another precursor that holds
only the precursor. The model is the tiny test bundle; nothing depends on what it happens to generate.
"""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from PySide6.QtCore import Qt
from synthetic_run import scan_id, write_mzml

from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.spectra.isotopes import isotope_pattern
from msgpt_gui.candidates_model import CandidatesModel
from msgpt_gui.logic.entries import Status
from msgpt_gui.formulas_view import FormulaTableModel
from msgpt_gui.logic.formulas import format_probability
from engine.insight.identification import feature_ranks
from msgpt_gui.models import KEY_ROLE, SpectraModel

CAFFEINE = "C8H10N4O2"
FRAGMENTS = ["C6H7N3O", "C5H7N3", "C4H5N3", "C7H6N4O"]  # neutral subformulas; ions are +H
NICOTINE = "MSBNK-NaToxAq-NA003084"


def mz_of(formula: str, ion: str = "[M+H]+") -> float:
    return precursor_mz_from_neutral(formula_mass(parse_formula(formula)), ion)


def survey(rt: float, scale: float) -> dict:
    masses, abundances = isotope_pattern("C8H11N4O2", 3, charge=1)
    mz = [*masses, mz_of(CAFFEINE, "[M+Na]+"), mz_of("C10H10O3"), 400.0]
    intensity = [*(abundances * 1e6 * scale), 2e5 * scale, 5e5, 1e3]
    order = np.argsort(mz)
    return {"ms_level": 1, "rt": rt, "mz": np.array(mz)[order], "intensity": np.array(intensity)[order]}


def ms2(rt: float, precursor: float, fragments: list[str], ref=None) -> dict:
    mz = sorted([mz_of(f) for f in fragments] + [precursor])
    return {"ms_level": 2, "rt": rt, "precursor_mz": precursor, "charge": 1, "ref": ref, "mz": mz,
            "intensity": [100.0] * len(mz)}


@pytest.fixture
def run(tmp_path):
    caffeine = mz_of(CAFFEINE)
    scans = [
        survey(60.0, 0.5),
        ms2(60.5, caffeine, FRAGMENTS, ref=scan_id(0)),
        survey(66.0, 1.0),
        ms2(66.5, caffeine, FRAGMENTS[:3], ref=scan_id(2)),
        ms2(67.0, mz_of("C10H10O3"), [], ref=scan_id(2)),  # the precursor only: no fragments
        survey(72.0, 0.4),
        ms2(72.5, caffeine, FRAGMENTS, ref=scan_id(5)),
    ]
    return write_mzml(tmp_path / "run.mzML", scans)


def loaded(qtbot, window, *paths):
    with qtbot.waitSignals([window.file_loaded] * len(paths), timeout=30_000):
        window.files.open_files(list(paths))
    return window.spectra.entries


def run_and_wait(qtbot, window, start, expect="done"):
    with qtbot.waitSignal(window.run_finished, timeout=120_000) as blocker:
        assert start() is not False
    assert blocker.args == [expect]


def show_formulas(qtbot, window, entry):
    """Select ``entry`` with the Formulas tab shown; wait for its table."""
    window.insights.tabs.setCurrentWidget(window.formulas.panel)
    window.select_entry(entry.key)
    qtbot.waitUntil(lambda: window.formulas.panel.entry is entry and window.formulas.panel.model.rowCount() > 0,
                    timeout=60_000)
    return window.formulas.panel


def row_of(panel, formula, ion="[M+H]+"):
    proxy = panel.proxy
    return next(r for r in range(proxy.rowCount())
                if (proxy.index(r, FormulaTableModel.FORMULA).data(), proxy.index(r, FormulaTableModel.ION).data())
                == (formula, ion))


def test_a_run_is_listed_by_precursor_feature_expandable_to_its_scans(qtbot, make_window, run):
    window = make_window()
    entries = loaded(qtbot, window, run)
    model, view = window.spectra, window.spectra_view
    assert model.rowCount() == 2  # caffeine's three scans are one feature; the other precursor is its own
    caffeine, other = entries
    assert caffeine.n_scans == 3 and other.n_scans == 1
    row = [model.index(0, c).data() for c in range(len(SpectraModel.COLUMNS))]
    assert row[SpectraModel.ID] == "F0001" and row[SpectraModel.SCANS] == 3
    assert row[SpectraModel.MZ] == f"{mz_of(CAFFEINE):.4f}"  # from the MS1 survey scan
    assert row[SpectraModel.RT] == f"{60.5 / 60:.2f}–{72.5 / 60:.2f}"  # first to last scan
    assert model.index(1, SpectraModel.ID).data() == "F0002 · scan=5"  # one scan: no children
    assert not view.isColumnHidden(SpectraModel.SCANS) and view.rootIsDecorated()
    assert "2 precursor features (4 scans)" in window.spectra_title.text()

    # expandable: the scans of a feature are its children, each plotted when selected
    parent = model.index(0, 0)
    assert model.rowCount(parent) == 3 and model.rowCount(model.index(1, 0)) == 0
    assert [model.index(r, 0, parent).data() for r in range(3)] == ["scan=2", "scan=4", "scan=7"]
    assert [model.index(r, SpectraModel.RT, parent).data() for r in range(3)] == \
        [f"{t / 60:.2f}" for t in (60.5, 66.5, 72.5)]
    scan = caffeine.children[1]
    window.select_entry(scan.key)
    assert view.isExpanded(window.spectra_proxy.mapFromSource(parent))
    assert window.current_entry() is scan and window.spectrum_panel.canvas.spectrum is scan.spectrum
    window.select_entry(caffeine.key)
    assert window.spectrum_panel.canvas.spectrum is caffeine.spectrum  # the consensus
    assert "consensus of 3 scans" in window.spectrum_panel.header.text()

    # the filter finds a feature by the ID of one of its scans, and shows its scans with it
    window.spectra_filter.setText("scan=4")
    proxy = window.spectra_proxy
    assert proxy.rowCount() == 1 and proxy.index(0, 0).data() == "F0001"
    assert proxy.rowCount(proxy.index(0, 0)) == 3
    window.spectra_filter.clear()

    # Run on the feature runs its consensus spectrum, for its formula candidates (it has no formula)
    run_and_wait(qtbot, window, window.run_selected)
    assert caffeine.status == Status.DONE and caffeine.formula_runs
    assert all(r.owner_key == caffeine.key for r in caffeine.formula_runs)
    first = caffeine.formula_runs[0]
    assert np.array_equal(first.spectrum.mz, caffeine.spectrum.mz) and first.spectrum.metadata["n_scans"] == "3"
    assert (first.spectrum.formula, first.spectrum.adduct) == (CAFFEINE, "[M+H]+")  # the best candidate
    assert all(c.status == Status.NOT_RUN for c in caffeine.children)  # its scans did not run one by one


def test_the_formula_table_fills_for_a_spectrum_without_formula_and_the_isotope_plot_draws(qtbot, make_window, run):
    window = make_window()
    caffeine, other = loaded(qtbot, window, run)
    assert caffeine.spectrum.formula is None and caffeine.cached_formulas() is None
    panel = show_formulas(qtbot, window, caffeine)
    headers = [panel.model.headerData(c, Qt.Orientation.Horizontal) for c in range(panel.model.columnCount())]
    for name in ("Rank", "Formula", "Ion type", "ppm", "Mass", "Prior", "Fragments", "Isotopes", "Adducts", "Score"):
        assert name in headers
    top = [panel.proxy.index(0, c).data() for c in (FormulaTableModel.RANK, FormulaTableModel.FORMULA,
                                                     FormulaTableModel.ION)]
    assert top == ["1", CAFFEINE, "[M+H]+"]
    assert caffeine.cached_formulas() is not None  # kept on the entry: Run does not rank it again
    assert "MS1: survey scan" in panel.summary.text() and "formula candidates" in panel.summary.text()
    ammonium = [r for r in range(panel.proxy.rowCount()) if panel.proxy.index(r, 2).data() == "[M+NH4]+"]
    assert ammonium and panel.proxy.index(ammonium[0], FormulaTableModel.RUN).data() != "ion not supported"  # mapped

    # the isotope plot: the survey scan's M, M+1, M+2 beside caffeine's
    plot = panel.isotopes
    assert panel.selected().formula == CAFFEINE and plot.match is not None
    assert plot.match.observed[0] == pytest.approx(1.0)
    assert plot.match.observed[1] == pytest.approx(plot.match.theoretical[1], rel=0.05)  # written from the pattern
    assert len(plot.ax.patches) >= 2 * 3 and "score" in plot.ax.get_title(loc="left")
    assert [t.get_text() for t in plot.ax.texts][:3] == ["M", "M+1", "M+2"]
    panel.table.selectRow(1)  # another formula: its pattern
    assert plot.match is not None and panel.selected().formula != CAFFEINE

    # a spectrum of the precursor only gets its table too
    panel = show_formulas(qtbot, window, other)
    assert panel.model.rowCount() > 0 and "no fragments" in panel.summary.text()


def test_without_survey_scans_the_plot_shows_the_theoretical_pattern(qtbot, make_window, write_mgf):
    window = make_window()
    (entry,) = loaded(qtbot, window, write_mgf("bare.mgf", titles={NICOTINE}, drop_keys=("FORMULA", "ADDUCT")))
    panel = show_formulas(qtbot, window, entry)
    assert "no MS1 survey scan" in panel.summary.text()
    assert panel.selected().formula == "C10H14N2"
    plot = panel.isotopes
    assert plot.match is not None and np.isnan(plot.match.observed).all() and plot.ax.patches
    assert any("no MS1 survey scan" in t.get_text() for t in plot.ax.texts)


def test_picking_a_formula_sets_it_on_the_spectrum(qtbot, make_window, run):
    window = make_window()
    caffeine, _ = loaded(qtbot, window, run)
    panel = show_formulas(qtbot, window, caffeine)
    second = panel.proxy.index(1, FormulaTableModel.FORMULA).data()
    panel.table.selectRow(1)
    assert panel.use.isEnabled()
    panel.use.click()
    s = caffeine.spectrum
    assert (s.formula, s.metadata["formula_rank"], s.metadata["formula_source"]) == (second, "2", "ranked candidates")
    assert window.spectrum_panel.editor.formula.text() == second  # shown as if typed
    assert window.spectra.index(0, SpectraModel.FORMULA).data() == f"{second} *"
    tip = window.spectra.index(0, SpectraModel.FORMULA).data(Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith("Formula candidate #2 (probability") and "picked in the Formulas tab" in tip
    assert panel.model.current == (second, s.adduct)  # the table marks it, and still offers the others
    assert panel.model.rowCount() == len(caffeine.cached_formulas().candidates)

    # double-click another: it replaces the first; Run then runs that one formula
    panel.table.doubleClicked.emit(panel.proxy.index(row_of(panel, CAFFEINE), FormulaTableModel.FORMULA))
    assert caffeine.spectrum.formula == CAFFEINE and caffeine.spectrum.metadata["formula_rank"] == "1"
    run_and_wait(qtbot, window, window.run_selected)
    assert caffeine.result is not None and not caffeine.formula_runs
    assert caffeine.result.spectrum.formula == CAFFEINE
    assert window.candidates.model.formula_scores[CAFFEINE][0] == "1"

    # another formula typed over it is no longer a ranked candidate
    other = next(c for c in caffeine.cached_formulas().candidates
                 if c.formula != CAFFEINE and c.ion_type in window.bundle.supported_adducts)
    editor = window.spectrum_panel.editor
    editor.formula.setText(other.formula)
    editor.adduct.setEditText(other.ion_type)
    assert editor.check.spectrum is not None and "formula_rank" not in editor.check.spectrum.metadata


def test_run_best_k_gives_one_result_per_formula_in_one_ranked_list(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    (entry,) = loaded(qtbot, window, write_mgf("bare.mgf", titles={NICOTINE}, drop_keys=("FORMULA", "ADDUCT")))
    panel = show_formulas(qtbot, window, entry)
    assert window.candidates.table.isColumnHidden(CandidatesModel.FORMULA_SCORE)  # nothing drawn for a candidate yet
    panel.k.setValue(2)
    assert panel.run.text() == "Run best 2"
    run_and_wait(qtbot, window, panel.run.click)
    runs = entry.formula_runs
    table = entry.cached_formulas()
    expected = [c for c in table.candidates if c.ion_type in window.bundle.runnable_adducts][:2]  # mapped ones too
    assert [(r.spectrum.formula, r.spectrum.adduct) for r in runs] == [(c.formula, c.ion_type) for c in expected]
    assert all(r.result is not None and r.result.spectrum is r.spectrum for r in runs)  # one result per formula
    assert [r.spectrum.metadata["formula_rank"] for r in runs] == [str(c.rank) for c in expected]
    assert entry.status == Status.DONE and entry.spectrum.formula is None and entry.result is None
    assert window.spectra.index(0, SpectraModel.FORMULA).data() == f"{expected[0].formula} +1"
    assert [panel.proxy.index(row_of(panel, c.formula, c.ion_type), FormulaTableModel.RUN).data()
            for c in expected] == [f"done · {len(r.result.candidates)} candidates" for r in runs]

    # the candidates table: one ranking for the feature (msgpt predict's feature_rank) over both formulas' candidates,
    # each with its formula's probability
    model = window.candidates.model
    counts = [len(r.result.candidates) for r in runs]
    assert model.rowCount() == sum(counts) > 0
    assert [model.candidate(i).rank for i in range(model.rowCount())] == list(range(1, sum(counts) + 1))
    franks = feature_ranks([r.result for r in runs])
    by_rank = {k: (c.inchikey14, c.formula) for r, ks in zip(runs, franks) for k, c in zip(ks, r.result.candidates)}
    assert [(model.candidate(i).inchikey14, model.candidate(i).formula) for i in range(model.rowCount())] == \
        [by_rank[k] for k in range(1, sum(counts) + 1)]
    assert not window.candidates.table.isColumnHidden(CandidatesModel.FORMULA_SCORE)
    probability = {c.formula: f"{format_probability(c.probability)} (#{c.rank})" for c in expected}
    assert [model.index(i, CandidatesModel.FORMULA_SCORE).data() for i in range(model.rowCount())] == \
        [probability[model.candidate(i).formula] for i in range(model.rowCount())]
    # the app's own selection follows rank 1 as the formulas finish; a candidate the user picks stays picked
    panel_c = window.candidates
    assert panel_c.selected_key() == model.candidate(0).inchikey14 and panel_c.detail.candidate.rank == 1
    if model.rowCount() > 1:
        pick = panel_c.proxy.index(1, 0).data(KEY_ROLE)
        panel_c.select_candidate(pick)
        window.show_current()
        assert panel_c.selected_key() == pick
        panel_c.select_candidate(model.candidate(0).inchikey14)
    # the formula selector lists the runs; choosing one narrows the table to it, ranked within it
    choice = window.candidates.formula_choice
    assert not choice.isHidden() and choice.count() == 3 and "feature" in choice.itemText(0)
    window.candidates.choose_formula(expected[1].formula, expected[1].ion_type)
    assert [model.candidate(i).smiles for i in range(model.rowCount())] == [c.smiles for c in runs[1].result.candidates]
    assert expected[1].formula in window.candidates.summary.text()
    window.candidates.choose_formula(None)
    assert model.rowCount() == sum(counts)
    first = model.candidate(0)
    assert f"Rank 1: <b>" in window.candidates.summary.text() and first.formula in window.candidates.summary.text()
    assert "#1 " in window.candidates.summary.toolTip() and "Formula candidates run" in window.candidates.summary.toolTip()

    # exported as the CLI writes them: ranks running on formula by formula, feature_rank the app's rank
    path = tmp_path / "out.csv"
    with qtbot.waitSignal(window.export_finished, timeout=30_000):
        assert window.files.export(path, "all")
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["rank"]) for r in rows] == list(range(1, sum(counts) + 1))
    assert [r["formula_rank"] for r in rows] == [str(c.rank) for c, n in zip(expected, counts) for _ in range(n)]
    assert all(r["formula_score"] for r in rows)
    app_rank = {(model.candidate(i).inchikey14, model.candidate(i).formula): model.candidate(i).rank
                for i in range(model.rowCount())}
    assert all(int(r["feature_rank"]) == app_rank[(r["InChIkey2D"], r["formula"])] for r in rows)

    # picking a formula that ran keeps its candidates
    panel.table.selectRow(row_of(panel, expected[1].formula, expected[1].ion_type))
    second = runs[1].result
    panel.use.click()
    assert entry.result is second and not entry.formula_runs and entry.status == Status.DONE


def test_cancelling_a_formula_run_keeps_nothing_partial_and_retuning_redraws_every_formula(qtbot, make_window, run):
    from PySide6.QtCore import Qt as QtCore_Qt

    from msgpt_gui.logic.jobs import EntryFinished

    window = make_window()
    caffeine, _ = loaded(qtbot, window, run)
    window.select_entry(caffeine.key)

    def hook(worker):  # cancel from inside the job once the first formula has its result
        if worker.name.startswith("elucidation"):
            worker.yielded.connect(lambda ev: worker.cancel() if isinstance(ev, EntryFinished) else None,
                                   QtCore_Qt.ConnectionType.DirectConnection)

    window.worker_started.connect(hook)
    run_and_wait(qtbot, window, window.run_selected, expect="cancelled")
    window.worker_started.disconnect(hook)
    runs = caffeine.formula_runs
    assert runs and all(r.status in (Status.DONE, Status.CANCELLED, Status.NOT_RUN) for r in runs)
    assert all(r.live is None for r in runs) and sum(r.result is not None for r in runs) <= 1
    assert caffeine.status in (Status.DONE, Status.CANCELLED) and caffeine.status == (
        Status.DONE if any(r.result for r in runs) else Status.CANCELLED)

    # Run again: the same formulas, their sessions kept; then a larger pool re-runs every formula
    run_and_wait(qtbot, window, window.run_selected)
    assert caffeine.formula_runs is runs and all(r.result is not None for r in runs)
    before = [r.result for r in runs]
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.params_panel.pool.setValue(140)
    assert all(r.result is not b and r.result.params.pool_size == 140 for r, b in zip(runs, before))
    assert all(r.result.n_samples == 140 and r.previous is b for r, b in zip(runs, before))


def test_formula_settings_are_set_in_the_app_and_kept(qtbot, make_window, run):
    from msgpt_gui.formulas_view import SETTINGS_ELEMENTS
    from msgpt_gui.logic.formulas import DEFAULT_ELEMENTS, current_config, set_current_config

    window = make_window()
    caffeine, _ = loaded(qtbot, window, run)
    panel = show_formulas(qtbot, window, caffeine)
    try:
        assert row_of(panel, CAFFEINE) is not None
        assert "m/z recalibration: none (" in panel.summary.text()  # the run's two features: too few to measure
        panel.ppm.setValue(5.0)
        panel.elements.setText("CHNO")
        panel._settings_edited()
        qtbot.waitUntil(lambda: "within 5 ppm" in panel.summary.text() and panel.model.rowCount() > 0, timeout=60_000)
        formulas = [panel.proxy.index(r, FormulaTableModel.FORMULA).data() for r in range(panel.proxy.rowCount())]
        assert CAFFEINE in formulas and not any(e in f for f in formulas for e in ("S", "P", "Cl", "F", "Br", "Si"))
        assert window.settings.get(SETTINGS_ELEMENTS, "", str) == "CHNO" and current_config().ppm == 5.0
        panel.elements.setText("CHNO Xx")
        panel._settings_edited()
        assert "Formula settings not changed" in panel.summary.text() and panel.elements.text() == "CHNO"
    finally:
        set_current_config(10.0, DEFAULT_ELEMENTS, "")


def test_the_recalibration_setting_re_ranks_with_it_plots_it_and_is_kept(qtbot, make_window, run):
    from pathlib import Path

    from msgpt_gui.logic.formulas import (
        DEFAULT_ELEMENTS,
        RecalibrationChoice,
        current_recalibration,
        set_current_config,
    )

    window = make_window()
    caffeine, _ = loaded(qtbot, window, run)
    panel = window.formulas.panel
    window.runs.load_queue.append(Path(run))  # as if the run were still being read: auto waits for all its features
    window.insights.tabs.setCurrentWidget(panel)
    window.select_entry(caffeine.key)
    assert "ranked once the run is read" in panel.summary.text() and panel.model.rowCount() == 0
    window.runs.load_queue.clear()
    window.file_loaded.emit(str(run))
    panel = show_formulas(qtbot, window, caffeine)
    try:
        ppm_cell = panel.proxy.index(row_of(panel, CAFFEINE), FormulaTableModel.PPM)
        assert ppm_cell.data() in ("+0.0", "-0.0")  # the synthetic run's m/z are exact
        measured = panel.recalibration.recalibration  # auto: measured, too few precursors; the plot says why
        assert measured.source == "off" and panel.recalibration.isVisibleTo(panel)
        assert panel.recalibration.caption.text().startswith("m/z recalibration: no points: ")  # beside the plot
        assert panel.recalibration.ax.get_title(loc="left") == ""  # the plot keeps its height for the data
        assert not panel.recal_settings.offset.isEnabled()
        settings = panel.recal_settings
        settings.mode.setCurrentText("fixed")
        settings.offset.setValue(5.0)
        settings.mode.activated.emit(settings.mode.currentIndex())  # as a user's pick
        qtbot.waitUntil(lambda: "(set by the user)" in panel.summary.text() and panel.model.rowCount() > 0,
                        timeout=60_000)
        assert current_recalibration() == RecalibrationChoice("fixed", 5.0, 0.0) and settings.offset.isEnabled()
        assert "m/z recalibration: +5.0 ppm at m/z 500" in panel.summary.text()
        assert panel.proxy.index(row_of(panel, CAFFEINE), FormulaTableModel.PPM).data() == "-5.0"
        plotted = panel.recalibration.recalibration
        assert plotted.source == "set by the user" and not panel.recalibration.ax.collections  # the line alone
        window.settings.sync()
        again = make_window()  # the setting is kept
        assert again.formulas.panel.recal_settings.choice() == RecalibrationChoice("fixed", 5.0, 0.0)
    finally:
        set_current_config(10.0, DEFAULT_ELEMENTS, "")
