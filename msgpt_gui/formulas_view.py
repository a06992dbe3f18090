"""The Formulas tab: the formula and ion type candidates of the selected spectrum (or precursor feature), to pick
one from or to run the best ``k``, and the precursor's MS1 isotope pattern beside the selected formula's.

:class:`FormulaController` is created by the window (like :class:`~msgpt_gui.insights_view.Insights`) and wires
itself to the window's signals. A table is ranked in the background (:func:`msgpt_gui.logic.formulas.rank_job`) when
the tab is shown for a spectrum that has none yet, and kept on the entry; a Run that ranks one keeps it too.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from PySide6.QtCore import QItemSelectionModel, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine.errors import MsgptError
from engine.formulas.candidates import (
    DEFAULT_ION_TYPES,
    FormulaCandidate,
    isotope_comparison,
)

from .formula_plots import IsotopeCanvas, theoretical_only
from .formula_table import FormulaTableModel, _html
from .logic.entries import Status
from .logic.formulas import (
    AUTO_RECALIBRATION,
    DEFAULT_ELEMENTS,
    DEFAULT_TOP_K,
    MAX_TOP_K,
    RecalibrationChoice,
    current_config,
    current_recalibration,
    mapped_ion_note,
    rank_job,
    readiness,
    run_recalibration,
    set_current_config,
    unsupported_ion_note,
)
from .models import SortProxy
from .recalibration_view import RecalibrationCanvas, RecalibrationSettings
from .workers import GeneratorWorker

__all__ = ["FormulaController", "FormulaPanel", "FormulaTableModel", "IsotopeCanvas", "theoretical_only"]

SETTINGS_TOP_K = "formulas/top_k"
SETTINGS_PPM, SETTINGS_ELEMENTS, SETTINGS_IONS = "formulas/ppm", "formulas/elements", "formulas/ion_types"
SETTINGS_RECAL = ("formulas/recalibration", "formulas/recalibration_ppm", "formulas/recalibration_slope")


class FormulaPanel(QWidget):
    """The table, its buttons and the isotope plot (no knowledge of the window: see :class:`FormulaController`)."""

    picked = Signal(object)  # the FormulaCandidate to set on the spectrum
    run_best = Signal(int)  # k: run the best k formulas of the selected spectra
    top_k_changed = Signal(int)
    settings_changed = Signal(float, str, str, object)  # ppm, elements, ion types, RecalibrationChoice
    shown = Signal()  # the tab became visible

    def __init__(self, top_k: int = DEFAULT_TOP_K, parent=None):
        super().__init__(parent)
        self.entry = None
        self.model = FormulaTableModel(self)
        self.proxy = SortProxy(self)
        self.proxy.setSourceModel(self.model)
        self.summary = QLabel(wordWrap=True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(FormulaTableModel.RANK, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.doubleClicked.connect(self._pick_at)
        self.table.selectionModel().currentRowChanged.connect(lambda *_: self._current_changed())
        self.use = QPushButton("Use this formula")
        self.use.setToolTip("Set the selected formula and ion type on the spectrum (as if typed; Run then "
                            "elucidates that one). Double-click a row does the same")
        self.use.clicked.connect(self._pick)
        self.k = QSpinBox(minimum=1, maximum=MAX_TOP_K, value=max(1, min(int(top_k), MAX_TOP_K)))
        self.k.setToolTip("How many of the best formulas Run elucidates for a spectrum without a formula "
                          "(msgpt predict --formulas K does the same)")
        self.k.valueChanged.connect(self._k_changed)
        self.run = QPushButton()
        self.run.setToolTip("Elucidate the selected spectra for their best k formula candidates (the ion types "
                            "the model supports), their candidates in one list ranked formula by formula")
        self.run.clicked.connect(lambda: self.run_best.emit(self.k.value()))
        self._k_changed(self.k.value())
        settings = self._settings_row()
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(self.use)
        buttons.addStretch(1)
        buttons.addWidget(QLabel("Best"))
        buttons.addWidget(self.k)
        buttons.addWidget(self.run)
        left = QWidget()
        lay = QVBoxLayout(left)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(3)
        lay.addLayout(settings)
        lay.addWidget(self.recal_settings)
        lay.addWidget(self.summary)
        lay.addWidget(self.table, 1)
        lay.addLayout(buttons)
        self.isotopes = IsotopeCanvas()
        self.isotopes.setToolTip("MS1 isotope peaks of the precursor (blue bars: the survey scan where it is most "
                                 "intense; grey sticks: its peaks) beside those of the selected formula and ion type "
                                 "(red outline; dashed: below the scan's detection limit)")
        self.recalibration = RecalibrationCanvas()
        plots = QSplitter(Qt.Orientation.Vertical, objectName="formulas_plots_splitter")
        plots.addWidget(self.isotopes)
        plots.addWidget(self.recalibration)
        plots.setChildrenCollapsible(False)
        plots.setStretchFactor(0, 1)
        plots.setStretchFactor(1, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal, objectName="formulas_splitter")
        self.splitter.addWidget(left)
        self.splitter.addWidget(plots)
        self.splitter.setStretchFactor(0, 2)  # the plots get a third: readable beside a table that scrolls sideways
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addWidget(self.splitter)
        self.show_message("Select a spectrum to see its formula candidates.")

    def _settings_row(self) -> QHBoxLayout:
        """Precursor tolerance, elements and ion types of the formula candidates (msgpt predict's --formula-ppm,
        --elements, --ion-types)."""
        self.ppm = QDoubleSpinBox(minimum=0.5, maximum=50.0, singleStep=0.5, decimals=1, suffix=" ppm")
        self.ppm.setValue(current_config().ppm)
        self.ppm.setToolTip("Precursor mass tolerance of the formula candidates (at least 1 mDa); a run whose "
                            "m/z recalibration is measured (auto) gets one from its measured scatter")
        self.elements = QLineEdit(DEFAULT_ELEMENTS)
        self.elements.setToolTip("Elements formulas may hold, e.g. CHNOPSFClBrISi (C and H always)")
        self.ion_types = QLineEdit()
        positive, negative = (" ".join(DEFAULT_ION_TYPES[p]) for p in ("positive", "negative"))
        self.ion_types.setPlaceholderText(f"{positive} (default)")
        self.ion_types.setToolTip(f"Ion types tried for a spectrum without one, separated by spaces (empty: {positive}, "
                                  f"or {negative} in negative mode; [M-H2O+H]+ and [M]+ when asked)")
        self.ppm.editingFinished.connect(self._settings_edited)
        self.elements.editingFinished.connect(self._settings_edited)
        self.ion_types.editingFinished.connect(self._settings_edited)
        self.recal_settings = RecalibrationSettings()  # on a row of its own below
        self.recal_settings.changed.connect(self._settings_edited)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        for label, widget in (("Tolerance", self.ppm), ("Elements", self.elements), ("Ion types", self.ion_types)):
            row.addWidget(QLabel(label))
            row.addWidget(widget, 1 if widget is not self.ppm else 0)
        return row

    def set_settings(self, ppm: float, elements: str, ion_types: str,
                     recalibration: RecalibrationChoice = AUTO_RECALIBRATION) -> None:
        """Show these settings (no signal)."""
        self.recal_settings.set_choice(recalibration)
        for widget in (self.ppm, self.elements, self.ion_types):
            widget.blockSignals(True)
        self.ppm.setValue(ppm)
        self.elements.setText(elements)
        self.ion_types.setText(ion_types)
        for widget in (self.ppm, self.elements, self.ion_types):
            widget.blockSignals(False)

    def _settings_edited(self) -> None:
        self.settings_changed.emit(self.ppm.value(), self.elements.text().strip(), self.ion_types.text().strip(),
                                   self.recal_settings.choice())

    @property
    def top_k(self) -> int:
        return self.k.value()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.shown.emit()

    # -- what is shown
    def show_message(self, html: str, entry=None) -> None:
        """No table: a sentence instead (nothing selected, being ranked, why there is none)."""
        self.entry = entry
        self.model.set_table(None)
        self.summary.setText(html)
        self.isotopes.show_match(None, message="")
        self.recalibration.show_recalibration(None)
        self._update_buttons()

    def show_table(self, entry, table, supported, native=None) -> None:
        """``table`` of ``entry`` (its rows marked by what ``supported`` ion types the model runs; ``native``: those
        it runs without a mapping, for the note on the others)."""
        same = entry is self.entry and self.model.table is table
        keep = self.selected() if same else None
        self.entry = entry
        self.model.set_table(table, supported, *self._entry_marks(entry))
        n = len(table.candidates)
        ions = ", ".join(table.ion_types)
        ms1 = entry.ms1
        evidence = (f"MS1: survey scan {_html(ms1.scan_id)}" + (f" at {ms1.retention_time / 60:.2f} min"
                                                                 if ms1.retention_time is not None else "")
                    if ms1 is not None else "no MS1 survey scan (isotopes and adducts not scored)")
        ion_note = entry.ion_note or unsupported_ion_note(table, supported, self.k.value()).replace(
            ": ran ", ": Run takes ")  # before Run: what it will take
        notes = "".join(f"<br><span style='color:#a15c00'>{_html(n)}</span>" for n in (*table.notes, ion_note) if n)
        mapped = mapped_ion_note(table, supported, native, self.k.value())
        notes += f"<br>{_html(mapped)}" if mapped else ""
        source = entry.spectrum.source if entry.spectrum is not None else ""
        self.recalibration.show_recalibration(run_recalibration(source) if source else None)
        self.summary.setText(
            f"<b>{n} formula candidate{'s' if n != 1 else ''}</b> for precursor m/z {table.precursor_mz:.4f} "
            f"({_html(ions)}; {table.n_decompositions:,} formulas within {current_config().ppm:g} ppm, the best "
            f"{current_config().max_scored} per ion type scored on {table.n_fragment_peaks} fragment peaks) · {evidence}{notes}")
        row = None
        if keep is not None:
            row = next((r for r in range(self.proxy.rowCount()) if self._candidate_at(r) == keep), None)
        if row is None and self.model.current:
            row = next((r for r in range(self.proxy.rowCount())
                        if (self._candidate_at(r).formula, self._candidate_at(r).ion_type) == self.model.current), None)
        if row is None and self.proxy.rowCount():
            row = 0
        if row is not None:
            self.table.selectionModel().setCurrentIndex(
                self.proxy.index(row, 0),
                QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        else:
            self.isotopes.show_match(None, message="No formula candidate")
        self._update_buttons()

    def refresh_runs(self, entry) -> None:
        """The entry's formula or formula runs changed: the marks follow (the table stays)."""
        if entry is self.entry and self.model.table is not None:
            self.model.set_runs(*self._entry_marks(entry))

    @staticmethod
    def _entry_marks(entry) -> tuple:
        s = entry.spectrum
        current = (s.formula, s.adduct) if s is not None and s.formula and s.adduct else None
        runs = {}
        for r in entry.formula_runs:
            key = (r.spectrum.formula, r.spectrum.adduct)
            if r.result is not None:
                runs[key] = f"done · {len(r.result.candidates)} candidates"
            elif r.status == Status.FAILED:
                runs[key] = f"failed: {r.reason}"
            else:
                runs[key] = r.status
        return current, runs

    # -- selection
    def _candidate_at(self, proxy_row: int) -> FormulaCandidate | None:
        return self.model.candidate(self.proxy.mapToSource(self.proxy.index(proxy_row, 0)).row())

    def selected(self) -> FormulaCandidate | None:
        idx = self.table.selectionModel().currentIndex()
        return self._candidate_at(idx.row()) if idx.isValid() else None

    def select_candidate(self, formula: str, ion_type: str) -> bool:
        for r in range(self.proxy.rowCount()):
            c = self._candidate_at(r)
            if (c.formula, c.ion_type) == (formula, ion_type):
                self.table.selectionModel().setCurrentIndex(
                    self.proxy.index(r, 0),
                    QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
                return True
        return False

    def _current_changed(self) -> None:
        self._update_buttons()
        c = self.selected()
        if c is None or self.entry is None:
            self.isotopes.show_match(None, message="Select a formula candidate")
            return
        ms1 = self.entry.ms1
        label = f"{c.formula} {c.ion_type}"
        match = None
        try:
            match = isotope_comparison(c, ms1, config=current_config()) if ms1 is not None else None
        except MsgptError:
            match = None
        if match is not None:
            self.isotopes.show_match(match, survey=(ms1.mz, ms1.intensity), label=label,
                                     title=f"isotope score {round(match.score, 1) + 0.0:.1f}")
            return
        try:
            theo = theoretical_only(c, current_config().isotope_peaks)
        except MsgptError:
            self.isotopes.show_match(None, message=f"No isotope pattern for {label}")
            return
        why = "no MS1 survey scan" if ms1 is None else "the precursor is not in the survey scan"
        self.isotopes.show_match(theo, label=label, title="Theoretical isotopes", message=why)

    def _update_buttons(self) -> None:
        c = self.selected()
        editable = self.entry is not None and self.entry.status not in (Status.RUNNING, Status.QUEUED)
        self.use.setEnabled(bool(c is not None and editable and self.model.is_supported(c)))
        self.run.setEnabled(self.entry is not None and self.entry.spectrum is not None)

    def _pick_at(self, index) -> None:
        if index.isValid():
            self.table.selectionModel().setCurrentIndex(
                index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        self._pick()

    def _pick(self) -> None:
        c = self.selected()
        if c is not None and self.use.isEnabled():
            self.picked.emit(c)

    def _k_changed(self, k: int) -> None:
        self.run.setText(f"Run best {k}")
        self.top_k_changed.emit(k)


class FormulaController(QObject):
    """The Formulas tab in the window: follows the current spectrum, ranks its table in the background when the
    tab is shown, picks a formula and runs the best k (see the module notes)."""

    table_shown = Signal(int)  # the table now holds this many rows (after a spectrum was selected or ranked)

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.panel = FormulaPanel(window.settings.get(SETTINGS_TOP_K, DEFAULT_TOP_K, int))
        self.worker: GeneratorWorker | None = None
        self._worker_entry = None
        self._wanted = None  # the entry whose table should be ranked next
        tabs = window.insights.tabs
        tabs.insertTab(1, self.panel, "Formulas")
        tabs.setTabToolTip(1, "Formula and ion type candidates of the selected spectrum (precursor mass, "
                              "fragments, MS1 isotopes, corpus prior): pick one, or run the best k")
        self.panel.picked.connect(window.edits.pick_formula)
        self.panel.run_best.connect(lambda k: window.run_menu.run_best_formulas(k))
        self.panel.top_k_changed.connect(lambda k: window.settings.set(SETTINGS_TOP_K, int(k)))
        self._settings = None  # set below: the app's formula settings are module-wide (logic.formulas)
        saved = (window.settings.get(SETTINGS_PPM, current_config().ppm, float),
                 window.settings.get(SETTINGS_ELEMENTS, DEFAULT_ELEMENTS, str), window.settings.get(SETTINGS_IONS, "", str))
        self.apply_settings(*saved, self._saved_recalibration(), save=False)
        self.panel.settings_changed.connect(self.apply_settings)
        self.panel.shown.connect(self.follow)
        window.candidates_shown.connect(lambda *_: self.follow())
        window.model_changed.connect(lambda *_: self.follow(force=True))
        window.file_loaded.connect(lambda *_: self.follow())
        window.runs.entry_updated.connect(self._entry_updated)

    @property
    def top_k(self) -> int:
        return self.panel.top_k

    def _saved_recalibration(self) -> RecalibrationChoice:
        get = self.window.settings.get
        try:
            return RecalibrationChoice(get(SETTINGS_RECAL[0], "auto", str), get(SETTINGS_RECAL[1], 0.0, float),
                                       get(SETTINGS_RECAL[2], 0.0, float))
        except (MsgptError, TypeError):  # no longer valid: the default
            return RecalibrationChoice()

    def apply_settings(self, ppm: float, elements: str, ion_types: str,
                       recalibration: RecalibrationChoice = AUTO_RECALIBRATION, save: bool = True) -> bool:
        """Rank formulas with these settings (and this m/z recalibration) from now on (tables of other settings are
        ranked again); False, and the reason shown, when they are not valid (the last valid ones stay)."""
        if (ppm, elements, ion_types, recalibration) == self._settings:
            return True
        try:
            set_current_config(ppm, elements, ion_types, recalibration)
        except MsgptError as e:
            if self._settings is None:  # saved settings no longer valid: the defaults
                return self.apply_settings(current_config().ppm, DEFAULT_ELEMENTS, "", recalibration, save=False)
            self.panel.set_settings(*self._settings)
            self.panel.show_message(f"<span style='color:#b3261e'>Formula settings not changed: {_html(str(e))}</span>")
            return False
        self._settings = (ppm, elements, ion_types, recalibration)
        self.panel.set_settings(*self._settings)
        if save:  # a change by the user: save it, and rank the current spectrum again
            values = (ppm, elements, ion_types, recalibration.mode, recalibration.offset_ppm, recalibration.slope_ppm)
            for key, value in zip((SETTINGS_PPM, SETTINGS_ELEMENTS, SETTINGS_IONS, *SETTINGS_RECAL), values):
                self.window.settings.set(key, value)
            self.follow(force=True)
        return True

    def follow(self, force: bool = False) -> None:
        """Show the current entry's table (ranking it in the background when the tab is visible)."""
        e = self.window.current_entry()
        panel = self.panel
        supported = self.window.spectra.supported_adducts
        if e is None:
            panel.show_message("Select a spectrum to see its formula candidates.")
            return
        if e.spectrum is None:
            panel.show_message(f"<span style='color:#a15c00'>{_html(e.status_text(supported))}</span>", e)
            return
        base = e.formula_base()
        why_not = readiness(base, None)
        if why_not is not None:
            panel.show_message(f"<span style='color:#a15c00'>No formula candidates: {_html(why_not)}. Type the "
                               "formula and adduct below the spectrum.</span>", e)
            return
        table = e.cached_formulas()
        if table is not None:
            if force or panel.entry is not e or panel.model.table is not table:
                panel.show_table(e, table, supported, self.window.bundle.supported_adducts if self.window.bundle else None)
                self.table_shown.emit(len(table.candidates))
            else:
                panel.refresh_runs(e)
            return
        if e.feature is not None and current_recalibration().mode == "auto" and self.window.runs.reading(base.source):
            panel.show_message("Formula candidates are ranked once the run is read: its m/z recalibration is "
                               "measured from all its features.", e)
            return  # file_loaded follows again
        panel.show_message("Ranking formula candidates…" if panel.isVisible() else
                           "Formula candidates are ranked when this tab is shown.", e)
        if panel.isVisible():
            self._rank(e)

    def _rank(self, e) -> None:
        self._wanted = e
        if self.worker is not None:
            if self._worker_entry is not e:
                self.worker.cancel()  # the next one starts when it has stopped
            return
        self._start(e)

    def _start(self, e) -> None:
        base = e.formula_base()
        run_items = None
        if e.feature is not None and base.source:  # a run's feature: its siblings measure the run's m/z error
            run_items = [(x.feature.spectrum, x.ms1) for x in self.window.spectra.entries
                         if x.feature is not None and x.feature.spectrum.source == base.source]
        worker = GeneratorWorker(rank_job, base, e.ms1, run_items=run_items, name=f"ranking formulas of {e.display_id}")
        self.worker, self._worker_entry, self._wanted = worker, e, None
        worker.returned.connect(lambda table: self._ranked(e, base, table))
        worker.errored.connect(lambda msg: self._failed(e, msg))
        worker.finished.connect(lambda: self._finished(worker))
        self.window.worker_started.emit(worker)
        worker.start()

    def _ranked(self, e, base, table) -> None:
        if e.spectrum is not None and e.formula_base() is not None:
            e.keep_formulas(base, table)
        if self.window.current_entry() is e:
            self.follow()

    def _failed(self, e, message: str) -> None:
        if self.window.current_entry() is e:
            self.panel.show_message(f"<span style='color:#b3261e'>No formula candidates: {_html(message)}</span>", e)

    def _finished(self, worker) -> None:
        if self.worker is worker:
            self.worker, self._worker_entry = None, None
        worker.deleteLater()
        wanted, self._wanted = self._wanted, None
        if wanted is not None and wanted is self.window.current_entry() and wanted.cached_formulas() is None:
            self._start(wanted)

    def _entry_updated(self, key: int, what: str) -> None:
        current = self.window.current_entry()
        listed = self.window.spectra.listed(key)
        if current is None or listed is not current:
            return
        if what == "formulas":
            self.follow()
        else:
            self.panel.refresh_runs(current)
            self.panel._update_buttons()

    def shutdown(self, timeout_ms: int = 10000) -> None:
        self._wanted = None
        if self.worker is not None:
            self.worker.cancel()
            self.worker.wait(timeout_ms)
