"""The main window: spectra list, spectrum plot, query parameters, candidates; menus, status bar and layout.

The window builds the views and the controllers and wires them together; what they do lives with them: the
model (:mod:`~msgpt_gui.model_controller`), files in and candidates out (:mod:`~msgpt_gui.file_controller`),
formulas set by hand (:mod:`~msgpt_gui.edit_controller`), runs started (:mod:`~msgpt_gui.run_menu`), projects
(:mod:`~msgpt_gui.project_view`), the tabs beside the candidates (:mod:`~msgpt_gui.formulas_view`,
:mod:`~msgpt_gui.insights_view`), libraries of known compounds (:mod:`~msgpt_gui.library_view`). Long work (reading files, loading a model, elucidating, exporting) is
orchestrated by :class:`~msgpt_gui.run_controller.RunController` in worker threads; the window only ever reacts
to its signals, so it stays responsive and Esc cancels at the next decoding step. One "task" (model load, run
or export) runs at a time; files load beside it, one after the other.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import dataclasses
import logging
import time
from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from engine.elucidation.pipeline import QueryParams
from engine.errors import MsgptError
from engine.model.bundle import ModelBundle

from .actions import make_action
from .candidates_view import CandidatesPanel
from .edit_controller import EditController
from .file_controller import FileController, dropped_paths
from .formulas_view import FormulaController
from .help_dialogs import show_about, show_scores_help
from .insights_view import Insights
from .library_view import LibrariesUI
from .logic.entries import SpectrumEntry, Status
from .model_controller import ModelController
from .params_view import ParamsPanel
from .project_view import ProjectController
from .run_controller import RunController
from .run_menu import RunMenu
from .settings import Settings
from .spectra_list import SpectraList
from .spectrum_view import SpectrumPanel
from .status_bar import TaskIndicator

log = logging.getLogger(__name__)

SPLITTER_SIZES = {"main_splitter": [380, 470], "top_splitter": [640, 760], "candidates_splitter": [1040, 340]}


class MainWindow(QMainWindow):
    message_shown = Signal(str, str)  # level ("info" / "warning" / "error"), text
    worker_started = Signal(object)  # a GeneratorWorker about to start (tests hook into its signals)
    model_changed = Signal(object)  # the ModelBundle, or None when none could be loaded
    file_loaded = Signal(str)  # a file finished loading (or failed)
    run_finished = Signal(str)  # "done", "cancelled" or "failed"
    export_finished = Signal(str, int)  # path and number of rows; ("", 0) when it failed or was cancelled
    candidates_shown = Signal(int)  # the candidate table now holds this many rows
    file_reported = Signal(str, str)  # path, the report of a file worth a dialog (one per file)

    def __init__(
        self,
        model: str | None = None,
        device: str | None = None,
        files=(),
        settings: Settings | None = None,
        open_examples: bool = True,
        popups: bool = True,
    ):
        super().__init__()
        self.settings = settings or Settings()
        self.popups = popups
        self.query_params: QueryParams = self.settings.query_params()
        self.first_candidates_s: float | None = None  # time from Run to the first candidates on screen

        self.setWindowTitle("MS-GPT Desktop")
        self.setAcceptDrops(True)
        self._build_widgets()
        self.runs = RunController(self.spectra, self)
        self._connect_runs()
        self.models = ModelController(self, model, device)  # Model menu: the bundle, its adapter, the device
        self.files = FileController(self)  # File menu: spectra files in, candidates out
        self.edits = EditController(self)  # formula / adduct / precursor m/z set by hand
        self.run_menu = RunMenu(self)  # Run Selected / All / Cancel, re-ranking when the parameters change
        self.formulas = FormulaController(self)  # the Formulas tab: formula candidates, isotopes, run best k
        self.projects = ProjectController(self)  # File ▸ Open/Save Project, notes, autosave and recovery
        self.libraries = LibrariesUI(self)  # Run ▸ Libraries…: known compounds, opened in the background
        self._build_actions()
        self._build_menus()
        self._build_statusbar()
        self.run_menu.follow_loading()  # the status bar says what still loads; a run asked for meanwhile waits
        self._restore_layout()
        self._update_actions()

        self.models.load_model(self.models.model_dir, quiet_if_default=True)
        paths = [Path(f) for f in files]
        if not paths and open_examples and self.settings.first_start:
            paths = self.files.example_files()
        self.settings.mark_started()
        if paths:
            self.files.open_files(paths)

    # ------------------------------------------------------------------------------------------
    # construction
    # ------------------------------------------------------------------------------------------
    def _connect_runs(self) -> None:
        r = self.runs
        for theirs, ours in ((r.worker_started, self.worker_started), (r.file_loaded, self.file_loaded),
                             (r.model_changed, self.model_changed), (r.run_finished, self.run_finished),
                             (r.export_finished, self.export_finished)):
            theirs.connect(ours)
        r.message.connect(lambda level, text: self.show_message(text, level))
        r.status.connect(self.status)
        r.progress.connect(lambda value, text: self.tasks.show_progress(value, text))
        r.task_started.connect(self._task_started)
        r.task_ended.connect(self._task_ended)
        r.loader_changed.connect(self._update_actions)
        r.entry_updated.connect(self._entry_updated)

    @property
    def bundle(self) -> ModelBundle | None:
        return self.runs.bundle

    @property
    def busy(self) -> bool:
        """A task (model load, run, export) is running; files may load beside it."""
        return self.runs.busy

    @property
    def loader(self):
        """The worker reading a file, or None."""
        return self.runs.loader

    @property
    def device(self) -> str:
        """The device chosen: "auto", "cpu" or "cuda" (Model ▸ Device)."""
        return self.models.device

    def _build_widgets(self) -> None:
        self.spectra_list = SpectraList()
        self.spectra = self.spectra_list.model  # the document: one entry per record of the opened files
        self.spectra_proxy = self.spectra_list.proxy
        self.spectra_filter = self.spectra_list.filter
        self.spectra_view = self.spectra_list.view
        self.spectra_title = self.spectra_list.title
        self.spectra_view.selectionModel().currentRowChanged.connect(lambda *_: self.show_current())
        self.spectra_view.doubleClicked.connect(lambda *_: self.run_selected())

        self.spectrum_panel = SpectrumPanel()
        self.params_panel = ParamsPanel(self.query_params)
        self.params_panel.changed.connect(self._params_changed)
        self.params_panel.invalid.connect(lambda msg: self._update_actions())
        self.candidates = CandidatesPanel()
        self._scroll_detail()

        bottom = QWidget()
        blay = QVBoxLayout(bottom)
        blay.setContentsMargins(0, 0, 0, 0)
        blay.setSpacing(0)
        blay.addWidget(self.params_panel)
        self.insights = Insights(self)  # tabs: the candidates, fingerprint bits, score a structure
        blay.addWidget(self.insights.tabs, 1)

        self.top_splitter = self._splitter(Qt.Orientation.Horizontal, "top_splitter", self.spectra_list,
                                           self.spectrum_panel)
        self.main_splitter = self._splitter(Qt.Orientation.Vertical, "main_splitter", self.top_splitter, bottom)
        self.setCentralWidget(self.main_splitter)

    def _scroll_detail(self) -> None:
        """The candidate's details (depiction, identifiers, scores, a library hit's mirror plot) scroll when the
        pane is lower than they are, so that a laptop's window shows them all (issue #54) and their height never
        sets the window's minimum."""
        splitter, detail = self.candidates.splitter, self.candidates.detail
        index = splitter.indexOf(detail)
        scroll = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame, objectName="detail_scroll")
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(detail.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width())
        splitter.insertWidget(index, scroll)
        scroll.setWidget(detail)  # out of the splitter, into the scroll area (its stretch and saved sizes stay)
        splitter.setStretchFactor(index, 1)

    @staticmethod
    def _splitter(orientation, name: str, first: QWidget, second: QWidget) -> QSplitter:
        splitter = QSplitter(orientation, objectName=name)
        splitter.addWidget(first)
        splitter.addWidget(second)
        splitter.setStretchFactor(0, 4)
        splitter.setStretchFactor(1, 5)
        splitter.setChildrenCollapsible(False)
        return splitter

    def _build_actions(self) -> None:
        self.act_quit = make_action(self, "&Quit", self.close, "Ctrl+Q")
        self.act_help_scores = make_action(self, "&Parameters and Scores", self.show_scores_help)
        self.act_about = make_action(self, "&About MS-GPT Desktop", self.show_about)

    def _build_menus(self) -> None:
        mb, f = self.menuBar(), self.files
        m = mb.addMenu("&File")
        self.projects.add_file_actions(m)
        m.addAction(f.act_open)
        f.add_recent_menu(m)
        m.addAction(f.act_examples)
        m.addSeparator()
        m.addAction(f.act_export)
        m.addAction(f.act_export_all)
        m.addAction(f.act_export_features)
        m.addAction(f.act_add_quant)
        self.insights.add_file_actions(m)
        m.addSeparator()
        m.addAction(f.act_close_all)
        m.addSeparator()
        m.addAction(self.act_quit)
        m = mb.addMenu("&Run")
        self.run_menu.add_menu_actions(m)
        self.libraries.add_menu_actions(m)
        m = mb.addMenu("&Model")
        self.models.add_menu_actions(m)
        self.insights.add_model_actions(m)
        m = mb.addMenu("&Help")
        m.addAction(self.act_help_scores)
        m.addAction(self.act_about)

        tb = QToolBar("Main", objectName="main_toolbar", movable=False)
        tb.setIconSize(QSize(18, 18))
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        r = self.run_menu
        for act in (f.act_open, None, r.act_run, r.act_run_all, r.act_cancel, None, f.act_export):
            tb.addSeparator() if act is None else tb.addAction(act)
        f.act_export.setIconText("Export…")
        f.act_open.setIconText("Open…")
        if mb.isNativeMenuBar():  # macOS: the menus are at the top of the screen; the toolbar stays in the window
            self.addToolBar(tb)
        else:  # in the menu bar's row, which the menus leave mostly empty: the plots keep that height (issue #54)
            tb.setStyleSheet("QToolBar { border: 0px; padding: 0px; spacing: 2px; }")
            mb.setCornerWidget(tb, Qt.Corner.TopRightCorner)
        self.main_toolbar = tb

    def _build_statusbar(self) -> None:
        self.tasks = TaskIndicator(self.statusBar(), self.run_menu.act_cancel, self.run_menu.loading_label,
                                   self.models.model_label,
                                   self.models.device_label)
        self.models.show_label()

    def _restore_layout(self) -> None:
        geometry = self.settings.bytes_value("window/geometry")
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(1400, 900)
        state = self.settings.bytes_value("window/state")
        if state is not None:
            self.restoreState(state)
        for splitter in (self.main_splitter, self.top_splitter, self.candidates.splitter):
            saved = self.settings.bytes_value(f"window/{splitter.objectName()}")
            if saved is None or not splitter.restoreState(saved):
                splitter.setSizes(SPLITTER_SIZES[splitter.objectName()])

    def save_layout(self) -> None:
        s = self.settings
        s.set("window/geometry", self.saveGeometry())
        s.set("window/state", self.saveState())
        for splitter in (self.main_splitter, self.top_splitter, self.candidates.splitter):
            s.set(f"window/{splitter.objectName()}", splitter.saveState())
        s.set_query_params(self._saved_params())
        s.device = self.device
        try:
            s.sync()
        except MsgptError as err:  # OutputError: disk full or no permission; the previous file is kept
            self.show_message(str(err), "error")

    # ------------------------------------------------------------------------------------------
    # messages
    # ------------------------------------------------------------------------------------------
    def show_message(self, text: str, level: str = "warning", title: str | None = None) -> None:
        """Every message to the user goes through here: status bar, signal, non-modal box."""
        log.log(logging.ERROR if level == "error" else logging.WARNING if level == "warning" else logging.INFO, text)
        self.statusBar().showMessage(text.splitlines()[0] if text else "", 15000)
        self.message_shown.emit(level, text)
        if self.popups and level in ("warning", "error"):
            icon = QMessageBox.Icon.Critical if level == "error" else QMessageBox.Icon.Warning
            box = QMessageBox(icon, title or "MS-GPT Desktop", text, QMessageBox.StandardButton.Ok, self)
            box.setWindowModality(Qt.WindowModality.NonModal)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.show()

    def status(self, text: str, ms: int = 8000) -> None:
        self.statusBar().showMessage(text, ms)

    # drag and drop: files and folders open as from File ▸ Open -----------------------------------
    def dragEnterEvent(self, event) -> None:
        if dropped_paths(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:
        self.dragEnterEvent(event)

    def dropEvent(self, event) -> None:
        self.files.drop(event)

    # ------------------------------------------------------------------------------------------
    # selection and display
    # ------------------------------------------------------------------------------------------
    def current_entry(self) -> SpectrumEntry | None:
        return self.spectra_list.current_entry()

    def selected_entries(self) -> list[SpectrumEntry]:
        return self.spectra_list.selected_entries()

    def select_entry(self, key: int) -> None:
        self.spectra_list.select_entry(key)

    def focus_entry(self) -> SpectrumEntry | None:
        """The entry the tabs beside the candidates follow: the current one, or, after a run of several formulas,
        the formula run of the selected candidate (else the best formula's)."""
        e = self.current_entry()
        return e.formula_run_of(self.candidates.selected_key()) if e is not None and e.formula_runs else e

    def document_replaced(self) -> None:
        """The list was filled or emptied as a whole (a project opened, Close All): title, panels and actions
        follow."""
        self.spectra_list.follow_tree()
        self.spectra_list.update_title()
        self.show_current()

    def show_current(self) -> None:
        e = self.current_entry()
        running = e is not None and e.status in (Status.RUNNING, Status.QUEUED)
        self.runs.show_live(e)  # only the spectrum on screen is ranked live while it runs
        self.spectrum_panel.show_entry(e, editable=not running)
        self._show_candidates(e)
        self._update_actions()

    def _show_candidates(self, e: SpectrumEntry | None) -> None:
        self.candidates.show_entry(e, self.spectra.supported_adducts, self.formulas.top_k)
        self.candidates_shown.emit(self.candidates.model.rowCount())

    # ------------------------------------------------------------------------------------------
    # parameters
    # ------------------------------------------------------------------------------------------
    def _params_changed(self, params: QueryParams) -> None:
        effort_only = params.effort != self.query_params.effort and \
            dataclasses.replace(self.query_params, effort=params.effort) == params
        self.query_params = params
        self.settings.set_query_params(self._saved_params())
        self._update_actions()
        if self.bundle is not None:
            self.models.show_label()  # "adapter on/off"
        if effort_only:  # a deep search takes minutes: it starts on Run, never by itself
            self.status(f"Effort {params.effort}: applies to the next Run (Ctrl+R); nothing was started.", 10000)
            return
        self.run_menu.params_changed()

    def _saved_params(self) -> QueryParams:
        """The parameters to remember: with the adapter as the user wants it for models that have one."""
        return dataclasses.replace(self.query_params, use_adapter=self.params_panel.adapter_wanted)

    # ------------------------------------------------------------------------------------------
    # running
    # ------------------------------------------------------------------------------------------
    def run_selected(self) -> None:
        """Run the selected spectra (Run ▸ Run Selected; a double-click in the list)."""
        self.run_menu.run_selected()

    def _entry_updated(self, key: int, what: str) -> None:
        if what == "result":
            self.spectra_list.update_title()
        e = self.current_entry()
        if e is None or self.spectra.listed(key) is not e:  # a formula run shows in its entry's row
            return
        if what == "ranking":
            self._show_candidates(e)
        else:
            self.show_current()
        if what in ("ranking", "result"):
            self._note_first_candidates()

    def _note_first_candidates(self) -> None:
        if self.first_candidates_s is None and self.candidates.model.rowCount() > 0 and self.runs.run_t0 is not None:
            self.first_candidates_s = time.perf_counter() - self.runs.run_t0
            log.info("first candidates on screen after %.2f s", self.first_candidates_s)

    # ------------------------------------------------------------------------------------------
    # the task slot
    # ------------------------------------------------------------------------------------------
    def _task_started(self, kind: str) -> None:
        self.tasks.task_started(kind)
        self._update_actions()

    def _task_ended(self) -> None:
        self.tasks.task_ended(self.loader is not None)
        self._update_actions()

    def _update_actions(self) -> None:
        busy = self.busy
        self.run_menu.update_actions()
        self.tasks.cancel_button.setVisible(busy or self.loader is not None or self.run_menu.waiting is not None)
        self.files.update_actions(busy, any(e.has_results for e in self.spectra.all_entries()))
        self.models.update_actions(busy)

    # help ----------------------------------------------------------------------------------------
    def show_scores_help(self) -> None:
        if self.popups:
            show_scores_help(self)

    def show_about(self) -> None:
        if self.popups:
            show_about(self, self.settings.path)

    # ------------------------------------------------------------------------------------------
    # closing
    # ------------------------------------------------------------------------------------------
    def closeEvent(self, event) -> None:
        if not self.projects.may_close():  # unsaved work: save, discard, or stay
            event.ignore()
            return
        self.save_layout()
        self.shutdown()
        self.projects.clean_exit()
        super().closeEvent(event)

    def shutdown(self, timeout_ms: int = 10000) -> None:
        """Cancel and wait for every worker (the engine stops at its next decoding step)."""
        self.run_menu.shutdown()
        self.libraries.shutdown(timeout_ms)
        self.formulas.shutdown(timeout_ms)
        self.runs.shutdown(timeout_ms)
        self.insights.shutdown(timeout_ms)
        self.projects.shutdown(timeout_ms)
