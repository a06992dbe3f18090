"""The main window: spectra list, spectrum plot, query parameters, candidates; menus and dialogs.

Long work (reading files, loading a model, elucidating, exporting) is orchestrated by
:class:`~msgpt_gui.run_controller.RunController` in :class:`~msgpt_gui.workers.GeneratorWorker`
threads; the window only ever reacts to its signals, so it stays responsive and Esc cancels at the
next decoding step. One "task" (model load, run or export) runs at a time; files load beside it,
one after the other.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QStyle,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from engine import __version__
from engine.elucidation.pipeline import QueryParams
from engine.errors import MsgptError
from engine.model.bundle import ModelBundle, resolve_device
from engine.paths import default_model_dir, examples_dir

from . import (
    qtcompat,  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)
    tooltips,
)
from .candidates_view import CandidatesPanel, fit_columns
from .editing import ERROR, apply_formula
from .entries import FILTER_PLACEHOLDER, FILTER_TIP, SpectrumEntry, Status, format_mz
from .formulas import formula_scores
from .formulas_view import FormulaController
from .insights_view import Insights
from .jobs import FileSummary, export_info
from .models import KEY_ROLE, NO_FRAGMENTS_TIP, SpectraModel, SpectraProxy
from .params_view import ParamsPanel
from .project_view import ProjectController
from .run_controller import RunController, plural
from .settings import Settings
from .spectrum_view import SpectrumPanel

log = logging.getLogger(__name__)

SPECTRA_FILTER = "Spectra (*.mgf *.mgf.gz *.mzML *.mzml *.mzML.gz *.mzml.gz);;All files (*)"
SPECTRA_SUFFIXES = (".mgf", ".mzml", ".mgf.gz", ".mzml.gz")
RETUNE_DELAY_MS = 350
STATUS_SAMPLE = "ion not supported"  # the longest word the Status column shows (reasons are in its tooltip)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def is_spectra_file(path: Path) -> bool:
    name = path.name.lower()
    return any(name.endswith(s) for s in SPECTRA_SUFFIXES)


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
        self.model_dir = Path(model).expanduser() if model else self._settings_model_dir()
        self.device = device or self.settings.device
        self.query_params: QueryParams = self.settings.query_params()
        self.first_candidates_s: float | None = None  # time from Run to the first candidates on screen
        self.file_reports: dict[str, str] = {}  # path -> what was read from it (FileSummary.report)
        self._select_new = False

        self.setWindowTitle("MS-GPT Desktop")
        self.setAcceptDrops(True)
        self._build_widgets()
        self._retune_timer = QTimer(self, singleShot=True, interval=RETUNE_DELAY_MS)
        self._retune_timer.timeout.connect(self._retune)
        self.runs = RunController(self.spectra, self)
        self._connect_runs()
        self.formulas = FormulaController(self)  # the Formulas tab: formula candidates, isotopes, run best k
        self.projects = ProjectController(self)  # File ▸ Open/Save Project, notes, autosave and recovery
        self._build_actions()
        self._build_menus()
        self._build_statusbar()
        self._restore_layout()
        self._update_actions()

        self.load_model(self.model_dir, quiet_if_default=True)
        paths = [Path(f) for f in files]
        if not paths and open_examples and self.settings.first_start:
            paths = self.example_files()
        self.settings.mark_started()
        if paths:
            self.open_files(paths)

    # ------------------------------------------------------------------------------------------
    # construction
    # ------------------------------------------------------------------------------------------
    def _settings_model_dir(self) -> Path:
        saved = self.settings.model_path
        return Path(saved) if saved else default_model_dir()

    def _connect_runs(self) -> None:
        r = self.runs
        for theirs, ours in ((r.worker_started, self.worker_started), (r.file_loaded, self.file_loaded),
                             (r.model_changed, self.model_changed), (r.run_finished, self.run_finished),
                             (r.export_finished, self.export_finished)):
            theirs.connect(ours)
        r.message.connect(lambda level, text: self.show_message(text, level))
        r.status.connect(self.status)
        r.progress.connect(self._show_progress)
        r.task_started.connect(self._task_started)
        r.task_ended.connect(self._task_ended)
        r.loader_changed.connect(self._update_actions)
        r.records_added.connect(self._records_added)
        r.file_read.connect(self._file_read)
        r.model_loaded.connect(self._model_loaded)
        r.model_failed.connect(self._model_failed)
        r.entry_updated.connect(self._entry_updated)
        r.retune_wanted.connect(self._retune_timer.start)

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

    def _build_widgets(self) -> None:
        self.spectra = SpectraModel(self)
        self.spectra_proxy = SpectraProxy(self)
        self.spectra_proxy.setSourceModel(self.spectra)
        self.spectra_filter = QLineEdit(placeholderText=FILTER_PLACEHOLDER, clearButtonEnabled=True)
        self.spectra_filter.setToolTip(FILTER_TIP)
        self.spectra_filter.textChanged.connect(self.spectra_proxy.set_filter_text)
        # a tree: an LC-MS run lists precursor features, their scans below them (MGF records have no children,
        # and the branches are drawn only once some row has them: a library looks like a plain list)
        self.spectra_view = QTreeView(uniformRowHeights=True, rootIsDecorated=False, allColumnsShowFocus=True)
        self.spectra_view.setModel(self.spectra_proxy)
        self.spectra_view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.spectra_view.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.spectra_view.setAlternatingRowColors(True)
        self.spectra_view.setWordWrap(False)
        self.spectra_view.setTextElideMode(Qt.TextElideMode.ElideRight)  # IDs differ at their end: see compact_id
        self.spectra_view.setExpandsOnDoubleClick(False)  # a double-click runs the spectrum; ▸ expands
        self.spectra_view.setIndentation(14)
        header = self.spectra_view.header()
        header.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # file order until a column is clicked
        self.spectra_view.setSortingEnabled(True)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        fit_columns(self.spectra_view, {1: "1234.5678 *", 2: "[M+Na]+", 3: "C22H30NO4 *", 4: "99.99–99.99",
                                        5: "Scans", 6: "999 ⚠", 7: STATUS_SAMPLE})
        self.spectra_view.setColumnHidden(SpectraModel.SCANS, True)  # shown once a run's features are listed
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)  # IDs take what is left
        self.spectra_view.selectionModel().currentRowChanged.connect(lambda *_: self._show_current())
        self.spectra_view.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self.spectra_view.doubleClicked.connect(lambda *_: self.run_selected())

        left = QWidget()
        lay = QVBoxLayout(left)
        lay.setContentsMargins(6, 4, 0, 0)
        lay.setSpacing(3)
        self.spectra_title = QLabel("<b>Spectra</b>")
        lay.addWidget(self.spectra_title)
        lay.addWidget(self.spectra_filter)
        lay.addWidget(self.spectra_view, 1)

        self.spectrum_panel = SpectrumPanel()
        self.spectrum_panel.editor.applied.connect(self._formula_applied)
        self.spectrum_panel.editor.applied_to_selected.connect(self.apply_to_selected)
        self.spectrum_panel.editor.reset_requested.connect(self._formula_reset)

        self.params_panel = ParamsPanel(self.query_params)
        self.params_panel.changed.connect(self._params_changed)
        self.params_panel.invalid.connect(lambda msg: self._update_actions())
        self.candidates = CandidatesPanel()

        bottom = QWidget()
        blay = QVBoxLayout(bottom)
        blay.setContentsMargins(0, 0, 0, 0)
        blay.setSpacing(0)
        blay.addWidget(self.params_panel)
        self.insights = Insights(self)  # tabs: the candidates, fingerprint bits, score a structure
        blay.addWidget(self.insights.tabs, 1)

        self.top_splitter = QSplitter(Qt.Orientation.Horizontal, objectName="top_splitter")
        self.top_splitter.addWidget(left)
        self.top_splitter.addWidget(self.spectrum_panel)
        self.top_splitter.setStretchFactor(0, 4)
        self.top_splitter.setStretchFactor(1, 5)
        self.top_splitter.setChildrenCollapsible(False)
        self.main_splitter = QSplitter(Qt.Orientation.Vertical, objectName="main_splitter")
        self.main_splitter.addWidget(self.top_splitter)
        self.main_splitter.addWidget(bottom)
        self.main_splitter.setStretchFactor(0, 4)
        self.main_splitter.setStretchFactor(1, 5)
        self.main_splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.main_splitter)

    def _icon(self, name: str):
        return self.style().standardIcon(getattr(QStyle.StandardPixmap, name))

    def _action(self, text, slot, shortcut=None, tip="", icon=None) -> QAction:
        action = QAction(text, self)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        if tip:
            action.setToolTip(tip)
            action.setStatusTip(tip)
        if icon:
            action.setIcon(self._icon(icon))
        action.triggered.connect(lambda *_: slot())
        return action

    def _build_actions(self) -> None:
        a = self._action
        self.act_open = a("&Open Spectra…", self.open_dialog, "Ctrl+O",
                          "Open MGF or mzML files (.gz too); you can also drop them on the window", "SP_DialogOpenButton")
        self.act_examples = a("Open &Example Spectra", self.open_examples, tip="Open the example spectra shipped with the app")
        self.act_export = a("&Export Candidates of Selected Spectra…", lambda: self.export_dialog("selected"), "Ctrl+E",
                            "Write the candidates of the selected spectra to a CSV or SDF file", "SP_DialogSaveButton")
        self.act_export_all = a("Export Candidates of &All Spectra…", lambda: self.export_dialog("all"), "Ctrl+Shift+E",
                                "Write the candidates of every spectrum that has them to a CSV or SDF file")
        self.act_close_all = a("&Close All Spectra", self.close_all_spectra, tip="Remove every spectrum from the list")
        self.act_quit = a("&Quit", self.close, "Ctrl+Q")
        self.act_run = a("&Run Selected", self.run_selected, "Ctrl+R",
                         "Elucidate structures for the selected spectra", "SP_MediaPlay")
        self.act_run_all = a("Run &All", self.run_all, "Ctrl+Shift+R", "Elucidate structures for every spectrum",
                             "SP_MediaSeekForward")
        self.act_cancel = a("&Cancel", self.cancel, "Esc",
                            "Stop the running work (Esc); a spectrum in progress keeps its earlier candidates",
                            "SP_BrowserStop")
        self.act_default_model = a("Use the &Bundled Model", lambda: self.choose_model(None),
                                   tip="Load the default model shipped with the app")
        self.act_model_folder = a("Open &Model Folder…", self.model_dialog, tip="Load a model bundle folder (it holds config.json)")
        self.act_model_info = a("Model &Information", self.show_model_info)
        self.device_group = QActionGroup(self)
        self.device_actions = {}
        for key, text in (("auto", "&Automatic (GPU when present)"), ("cpu", "&CPU"), ("cuda", "CUDA &GPU")):
            act = QAction(text, self, checkable=True)
            act.setChecked(key == self.device)
            act.triggered.connect(lambda _=False, k=key: self.choose_device(k))
            self.device_group.addAction(act)
            self.device_actions[key] = act
        self.act_help_scores = a("&Parameters and Scores", self.show_scores_help)
        self.act_about = a("&About MS-GPT Desktop", self.show_about)
        for act in (self.act_cancel,):
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)

    def _build_menus(self) -> None:
        mb = self.menuBar()
        m = mb.addMenu("&File")
        self.projects.add_file_actions(m)
        m.addAction(self.act_open)
        self.recent_menu = m.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        m.addAction(self.act_examples)
        m.addSeparator()
        m.addAction(self.act_export)
        m.addAction(self.act_export_all)
        self.insights.add_file_actions(m)
        m.addSeparator()
        m.addAction(self.act_close_all)
        m.addSeparator()
        m.addAction(self.act_quit)
        m = mb.addMenu("&Run")
        m.addAction(self.act_run)
        m.addAction(self.act_run_all)
        m.addAction(self.act_cancel)
        m = mb.addMenu("&Model")
        m.addAction(self.act_default_model)
        m.addAction(self.act_model_folder)
        dm = m.addMenu("&Device")
        for act in self.device_actions.values():
            dm.addAction(act)
        m.addSeparator()
        m.addAction(self.act_model_info)
        self.insights.add_model_actions(m)
        m = mb.addMenu("&Help")
        m.addAction(self.act_help_scores)
        m.addAction(self.act_about)

        tb = self.addToolBar("Main")
        tb.setObjectName("main_toolbar")
        tb.setMovable(False)
        tb.setIconSize(QSize(18, 18))
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for act in (self.act_open, None, self.act_run, self.act_run_all, self.act_cancel, None, self.act_export):
            tb.addSeparator() if act is None else tb.addAction(act)
        self.act_export.setIconText("Export…")
        self.act_open.setIconText("Open…")

    def _build_statusbar(self) -> None:
        sb = self.statusBar()
        self.progress = QProgressBar(maximumWidth=260, minimumWidth=200, textVisible=True)
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.cancel_button = QToolButton()
        self.cancel_button.setDefaultAction(self.act_cancel)
        self.cancel_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)
        self.cancel_button.hide()
        self.model_label = QLabel()
        self.model_label.setToolTip("The model bundle in use (Model ▸ Open Model Folder… to change it)")
        self.device_label = QLabel()
        self.device_label.setToolTip("Where the model runs (Model ▸ Device to change it)")
        sb.addPermanentWidget(self.progress)
        sb.addPermanentWidget(self.cancel_button)
        sb.addPermanentWidget(self.model_label)
        sb.addPermanentWidget(self.device_label)
        self._show_model_label()

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
                self._default_splitter(splitter)

    def _default_splitter(self, splitter: QSplitter) -> None:
        if splitter is self.main_splitter:
            splitter.setSizes([380, 470])
        elif splitter is self.top_splitter:
            splitter.setSizes([640, 760])
        else:
            splitter.setSizes([1040, 340])

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

    # ------------------------------------------------------------------------------------------
    # model and device
    # ------------------------------------------------------------------------------------------
    def load_model(self, path: Path | None, quiet_if_default: bool = False) -> bool:
        """Load a model bundle in the background (None: the bundled default)."""
        path = Path(path) if path else default_model_dir()
        if self.busy:
            self.show_message("Wait for the running work to finish (or cancel it with Esc) before changing the model.")
            return False
        is_default = path == default_model_dir()
        if is_default and not (path / "config.json").is_file():
            text = ("No model loaded: the bundled default model is not installed in this version. "
                    "Choose Model ▸ Open Model Folder… to pick a model bundle folder.")
            if not quiet_if_default:  # asked for from the menu: keep whatever model is loaded
                self.show_message(text.replace("No model loaded: t", "T"))
                return False
            self.model_dir = path
            self.runs.bundle = None
            self._follow_model()
            self.status(text, 0)
            self._show_model_label()
            self.runs.unload_model()
            return False
        self.model_label.setText(f"Loading model {path.name}…")
        return self.runs.load_model(path, self.device)

    def _model_loaded(self, bundle: ModelBundle, path: Path) -> None:
        self.model_dir = path
        self.settings.model_path = "" if path == default_model_dir() else str(path)
        self._reset_all_results()
        self._follow_model()
        _, device_note = resolve_device(self.device)
        self._show_model_label()
        self.status(f"Model {bundle.name} loaded. {device_note}")

    def _follow_model(self) -> None:
        """What follows the model: the "Use adapter" box (enabled only for a model with an adapter; the
        parameters follow it) and the ion types offered and accepted."""
        adducts = self.bundle.supported_adducts if self.bundle is not None else None
        self.spectra.set_supported_adducts(adducts)
        self.spectrum_panel.editor.set_supported_adducts(adducts)
        self.params_panel.set_adapter_available(self.bundle is not None and self.bundle.has_adapter)
        try:
            self.query_params = self.params_panel.params()
        except MsgptError:  # invalid parameters: the panel shows why; they are taken when fixed
            pass

    def _model_failed(self, message: str, path: Path) -> None:
        self._show_model_label()
        self.show_message(f"Cannot load the model bundle {path}:\n{message}", "error")
        if self.bundle is None:
            self.status("No model loaded: choose Model ▸ Open Model Folder… to pick a model bundle folder.", 0)

    def _show_model_label(self) -> None:
        if self.bundle is None:
            self.model_label.setText("<span style='color:#b3261e'><b>No model loaded</b></span> — "
                                     "Model ▸ Open Model Folder…")
            self.model_label.setToolTip("No model is loaded: Model ▸ Open Model Folder… picks a bundle folder")
        else:
            b = self.bundle
            adapter = (" · adapter " + ("on" if self.query_params.use_adapter else "off")) if b.has_adapter else ""
            default = " (bundled)" if self.model_dir == default_model_dir() else ""
            self.model_label.setText(f"Model: <b>{b.name}</b>{default} [{b.checksum[:8]}]{adapter}")
            self.model_label.setToolTip(f"{b.describe()}\n{b.path}")
        dev, note = resolve_device(self.device)
        label = dev.type.upper()
        if self.bundle is not None:
            label = self.bundle.device.type.upper()
        self.device_label.setText(f"Device: <b>{label}</b>" + (" (auto)" if self.device == "auto" else ""))
        self.device_label.setToolTip(note + "\nModel ▸ Device changes it")

    def choose_model(self, path: Path | None) -> None:
        self.load_model(path)

    def model_dialog(self) -> None:
        start = str(self.model_dir if self.model_dir.exists() else Path.home())
        folder = QFileDialog.getExistingDirectory(self, "Choose a model bundle folder (it holds config.json)", start)
        if folder:
            self.load_model(Path(folder))

    def choose_device(self, device: str) -> None:
        if device == self.device:
            return
        if self.busy:
            self.device_actions[self.device].setChecked(True)
            self.show_message("Wait for the running work to finish (or cancel it with Esc) before changing the device.")
            return
        self.device = device
        self.settings.device = device
        self.device_actions[device].setChecked(True)
        if self.bundle is not None or (self.model_dir / "config.json").is_file():
            self.load_model(self.model_dir)
        else:
            self._show_model_label()

    def show_model_info(self) -> None:
        if self.bundle is None:
            text = "No model is loaded: Model ▸ Open Model Folder… picks a model bundle folder."
        else:
            b = self.bundle
            card = b.path / "MODEL_CARD.md"
            text = (f"{b.describe()}\n\nFolder: {b.path}\nChecksum: {b.checksum}\n"
                    f"Supported adducts: {', '.join(b.supported_adducts)}")
            if card.is_file():
                text += "\n\n" + card.read_text(encoding="utf-8", errors="replace")[:3000]
        self.message_shown.emit("info", text)
        if self.popups:
            box = QMessageBox(QMessageBox.Icon.Information, "Model information", text, QMessageBox.StandardButton.Ok, self)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.show()

    # ------------------------------------------------------------------------------------------
    # files
    # ------------------------------------------------------------------------------------------
    def example_files(self) -> list[Path]:
        folder = examples_dir()
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if p.is_file() and is_spectra_file(p))

    def open_examples(self) -> None:
        files = self.example_files()
        if not files:
            self.show_message(f"No example spectra are installed ({examples_dir()} is empty).", "info")
            return
        self.open_files(files)

    def open_dialog(self) -> None:
        start = self.settings.get("files/last_dir", str(Path.home()), str)
        names, _ = QFileDialog.getOpenFileNames(self, "Open spectra", start, SPECTRA_FILTER)
        if names:
            self.settings.set("files/last_dir", str(Path(names[0]).parent))
            self.open_files([Path(n) for n in names])

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        files = self.settings.recent_files()
        for f in files:
            act = self.recent_menu.addAction(Path(f).name)
            act.setToolTip(f)
            act.setStatusTip(f)
            act.triggered.connect(lambda _=False, f=f: self.open_files([Path(f)]))
        if not files:
            self.recent_menu.addAction("(none)").setEnabled(False)
        else:
            self.recent_menu.addSeparator()
            self.recent_menu.addAction("Clear Recent Files", self.settings.clear_recent_files)

    def open_files(self, paths) -> None:
        """Queue files for loading in the background (the path drag-and-drop and File ▸ Open take)."""
        paths = self.projects.take_project_files(paths)  # a project file opens as the project
        expanded: list[Path] = []
        for p in map(Path, paths):
            if p.is_dir():
                inside = sorted(q for q in p.iterdir() if q.is_file() and is_spectra_file(q))
                if not inside:
                    self.show_message(f"{p} holds no MGF or mzML files.")
                expanded.extend(inside)
            else:
                expanded.append(p)
        queued = []
        for p in expanded:
            if self.runs.is_open(p) or p in queued:
                self.status(f"{p.name} is already open.")
                continue
            if p.is_file():
                self.settings.add_recent_file(str(p))
            queued.append(p)
        if queued:
            self._select_new = True  # the first record of the first of these files is selected and shown
        self.runs.load_files(queued)

    def _records_added(self, path: str, entries: list[SpectrumEntry], first_batch: bool) -> None:
        self._update_spectra_title()
        self._follow_tree()
        current = self.spectra_view.selectionModel().currentIndex()
        if (first_batch and self._select_new) or not current.isValid():
            self._select_new = False
            key = entries[0].key
            if not self.spectra_proxy.mapFromSource(self.spectra.index_of(key)).isValid():
                self.spectra_filter.clear()  # the filter would hide the new file
            self.select_entry(key)
            self.spectra_view.scrollTo(self.spectra_view.currentIndex(), QAbstractItemView.ScrollHint.PositionAtTop)

    def _follow_tree(self) -> None:
        """The Scans column and the branches of the tree appear once a run's features are listed."""
        self.spectra_view.setColumnHidden(SpectraModel.SCANS, not self.spectra.has_features)
        self.spectra_view.setRootIsDecorated(self.spectra.has_children)

    def _file_read(self, path: str, summary: FileSummary, seconds: float) -> None:
        """One report per file: a dialog when something was passed over, skipped or needs input."""
        entries = [e for e in self.spectra.entries if e.source == path]
        name = Path(path).name
        if summary.records == 0:
            self.show_message(f"{name} holds no MS/MS spectra.", "info")
        text, worth_a_dialog = summary.report(entries, self.spectra.supported_adducts,
                                              self.bundle.name if self.bundle is not None else "",
                                              top_k=self.formulas.top_k)
        self.file_reports[path] = text
        hint = " No model loaded: choose Model ▸ Open Model Folder… to run." if self.bundle is None and not self.busy else ""
        self.status(text.splitlines()[0].removesuffix(".") + f" (read in {seconds:.1f} s)." + hint, 0 if hint else 8000)
        if worth_a_dialog:
            self.file_reported.emit(path, text)
            self.message_shown.emit("info", text)
            if self.popups:
                box = QMessageBox(QMessageBox.Icon.Information, f"What was read from {name}", text,
                                  QMessageBox.StandardButton.Ok, self)
                box.setObjectName("file_report")
                box.setWindowModality(Qt.WindowModality.NonModal)
                box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
                box.show()

    def close_all_spectra(self) -> None:
        if self.busy:
            self.show_message("Wait for the running work to finish (or cancel it with Esc) first.")
            return
        self.spectra.clear()
        self.runs.forget_files()
        self._follow_tree()
        self._update_spectra_title()
        self._show_current()

    def document_replaced(self) -> None:
        """The list was filled from elsewhere (a project opened): title, panels and actions follow."""
        self._follow_tree()
        self._update_spectra_title()
        self._show_current()

    def _update_spectra_title(self) -> None:
        entries = self.spectra.entries
        n = sum(e.spectrum is not None for e in entries)
        features = sum(e.feature is not None for e in entries)
        done = sum(e.has_results for e in entries)
        skipped = len(entries) - n
        extra = f", {skipped} skipped" if skipped else ""
        what = plural(n)
        if features:
            scans = sum(e.feature.n_scans for e in entries if e.feature is not None)
            others = n - features
            what = (f"{features} precursor feature{'s' if features != 1 else ''} ({scans} scans)"
                    + (f", {plural(others)}" if others else ""))
        self.spectra_title.setText(f"<b>Spectra</b> — {what}{extra}, {done} with candidates")

    # drag and drop -----------------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:
        if self._dropped_paths(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:
        self.dragEnterEvent(event)

    def dropEvent(self, event) -> None:
        paths = self._dropped_paths(event.mimeData())
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.open_files(paths)

    @staticmethod
    def _dropped_paths(mime) -> list[Path]:
        if mime is None or not mime.hasUrls():
            return []
        return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile() and u.toLocalFile()]

    # ------------------------------------------------------------------------------------------
    # selection and display
    # ------------------------------------------------------------------------------------------
    def current_entry(self) -> SpectrumEntry | None:
        idx = self.spectra_view.selectionModel().currentIndex()
        return self.spectra.entry(idx.data(KEY_ROLE)) if idx.isValid() else None

    def selected_entries(self) -> list[SpectrumEntry]:
        rows = self.spectra_view.selectionModel().selectedRows()
        keys = [i.data(KEY_ROLE) for i in sorted(rows, key=lambda i: i.row())]
        entries = [self.spectra.entry(k) for k in keys]
        if not entries and self.current_entry() is not None:
            entries = [self.current_entry()]
        return [e for e in entries if e is not None]

    def select_entry(self, key: int) -> None:
        idx = self.spectra_proxy.mapFromSource(self.spectra.index_of(key))
        if idx.isValid():
            if idx.parent().isValid():
                self.spectra_view.expand(idx.parent())
            self.spectra_view.selectionModel().setCurrentIndex(
                idx, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
            )

    def focus_entry(self) -> SpectrumEntry | None:
        """The entry the tabs beside the candidates follow: the current one, or, after a run of several formulas,
        the formula run of the selected candidate (else the best formula's)."""
        e = self.current_entry()
        if e is None or not e.formula_runs:
            return e
        key = self.candidates.selected_key()
        for run in e.formula_runs:
            if key and run.shown is not None and any(c.inchikey14 == key for c in run.shown.candidates):
                return run
        return next((r for r in e.formula_runs if r.shown is not None), e.formula_runs[0])

    def _show_current(self) -> None:
        e = self.current_entry()
        running = e is not None and e.status in (Status.RUNNING, Status.QUEUED)
        self.spectrum_panel.show_entry(e, editable=not running)
        self._show_candidates(e)
        self._update_actions()

    def _show_candidates(self, e: SpectrumEntry | None) -> None:
        supported = self.spectra.supported_adducts
        if e is None:
            self.candidates.show_result(None)
        elif e.spectrum is None:
            self.candidates.show_result(None, note=f"<span style='color:#a15c00'>{_html(e.status_text(supported))}"
                                                   "</span>")
        else:
            running = e.status in (Status.RUNNING, Status.QUEUED)
            shown = e.shown
            live = e.live is not None or any(r.live is not None for r in e.formula_runs)
            note = ""
            if shown is None:
                if e.status in (Status.FAILED, Status.SKIPPED):
                    note = f"<span style='color:#b3261e'>{_html(e.status_text(supported))}</span>"
                elif e.status == Status.NOT_RUN and e.blocker(supported) is not None:
                    note = f"<span style='color:#a15c00'>{_html(e.status_text(supported))}</span>"
                elif running:
                    note = ("<span style='color:#1f5fbf'>Ranking formula candidates…</span>"
                            if e.needs_formulas and not e.formula_runs else
                            "<span style='color:#1f5fbf'>Drawing structures…</span>")
                elif e.status == Status.CANCELLED:
                    note = "Cancelled: no candidates. Press Run (Ctrl+R) to start again."
                elif e.needs_formulas:
                    note = (f"<span style='color:#777'>No molecular formula: Run (Ctrl+R) ranks the formula candidates "
                            f"and elucidates the best {self.formulas.top_k} (Formulas tab: pick one there to run that "
                            "one).</span>")
            flag = NO_FRAGMENTS_TIP + " (the spectrum holds only the precursor)" if e.no_fragments else ""
            runs = e.formula_runs
            detail = ""
            if runs:
                parts = []
                for r in runs:
                    c = r.candidate
                    got = (f"{len(r.shown.candidates)}" if r.shown is not None else
                           ("failed" if r.status == Status.FAILED else r.status))
                    parts.append(f"#{c.rank} {r.spectrum.formula} {r.spectrum.adduct} ({c.probability:.2f}): {got}")
                detail = "Formula candidates run (ranks run on formula by formula): " + _html(" · ".join(parts))
            self.candidates.show_result(shown, e.baseline, running=running and live, note=note, flag=flag,
                                        formula_scores=formula_scores(r.shown for r in runs) if runs else
                                        formula_scores([shown]), detail=detail,
                                        formula_text=f"one of the {len(runs)} formulas" if len(runs) > 1 else "")
        self.candidates_shown.emit(self.candidates.model.rowCount())

    # ------------------------------------------------------------------------------------------
    # formula / adduct / precursor m/z
    # ------------------------------------------------------------------------------------------
    def _formula_applied(self, spectrum) -> None:
        e = self.current_entry()
        if e is None or e.status in (Status.RUNNING, Status.QUEUED):
            return
        if not e.take_formula_run(spectrum):  # a formula that ran already keeps its candidates
            e.spectrum = spectrum
            e.reset_results()
        self.spectra.entry_changed(e.key)
        self._update_spectra_title()
        self._show_current()
        blocked = e.blocker(self.spectra.supported_adducts)
        what = f"formula {spectrum.formula or '—'}, adduct {spectrum.adduct or '—'}, precursor m/z {format_mz(spectrum)}"
        self.status(f"{e.id}: {what}. " + (f"Still {blocked[0]}." if blocked else "Press Run (Ctrl+R)."))

    def _formula_reset(self) -> None:
        e = self.current_entry()
        if e is None or not e.overridden or e.status in (Status.RUNNING, Status.QUEUED):
            return
        e.reset_results()
        e.spectrum = e.original
        if e.spectrum is None:  # a skipped record again
            e.status, e.reason = Status.SKIPPED, e.skipped.reason
        else:
            e.status, e.reason = Status.NOT_RUN, ""
        self.spectra.entry_changed(e.key)
        self._update_spectra_title()
        self._show_current()

    def pick_formula(self, candidate) -> bool:
        """Set a formula candidate (Formulas tab) on the current spectrum, as if typed and applied."""
        from engine.formulas.candidates import with_formula_candidate

        e = self.current_entry()
        if e is None or e.spectrum is None or e.status in (Status.RUNNING, Status.QUEUED):
            return False
        self._formula_applied(with_formula_candidate(e.formula_base(), candidate))
        return True

    def run_best_formulas(self, k: int) -> bool:
        """Run the selected spectra for their best ``k`` formula candidates (the Formulas tab's button)."""
        return self.run_entries(self.selected_entries(), formulas=True, top_k=k)

    def _selection_changed(self) -> None:
        self.spectrum_panel.editor.set_selection_count(len(self.spectra_view.selectionModel().selectedRows()))

    def apply_to_selected(self, formula: str, adduct: str) -> int:
        """One formula and adduct for every selected spectrum whose precursor m/z fits; returns how many
        changed. Spectra that do not fit (or are running) keep theirs, and the message says why."""
        entries = [e for e in self.selected_entries()
                   if e.spectrum is not None and e.status not in (Status.RUNNING, Status.QUEUED)]
        outcomes = apply_formula([e.spectrum for e in entries], formula, adduct, self.spectra.supported_adducts)
        changed, problems = 0, {}
        for e, outcome in zip(entries, outcomes):
            if outcome.spectrum is None:
                problems.setdefault(outcome.problem, []).append(e.display_id)
                continue
            if outcome.spectrum != e.spectrum:
                e.spectrum = outcome.spectrum
                e.reset_results()
                self.spectra.entry_changed(e.key)
                changed += 1
        not_listed = len(self.selected_entries()) - len(entries)
        what = f"{formula} {adduct}".strip() if formula else f"adduct {adduct}"
        text = f"{what} applied to {plural(changed)}"
        if problems:
            text += f"; {sum(map(len, problems.values()))} kept their own:"
            for problem, ids in problems.items():
                text += f"\n  • {', '.join(ids[:5])}{' …' if len(ids) > 5 else ''}: {problem}"
        if not_listed:
            text += f"\n{not_listed} selected record(s) without a spectrum (or running) were left alone."
        self._update_spectra_title()
        self._show_current()
        if problems or not_listed:
            self.show_message(text, "warning" if not changed else "info")
        else:
            self.status(text + ". Press Run (Ctrl+R).")
        return changed

    # ------------------------------------------------------------------------------------------
    # parameters
    # ------------------------------------------------------------------------------------------
    def _params_changed(self, params: QueryParams) -> None:
        self.query_params = params
        self.settings.set_query_params(self._saved_params())
        self._update_actions()
        if self.bundle is not None:
            self._show_model_label()  # "adapter on/off"
        e = self.current_entry()
        if self.bundle is not None and e is not None and e.has_results:
            self._retune_timer.start()  # debounced: a slider drag re-ranks once it rests

    def _saved_params(self) -> QueryParams:
        """The parameters to remember: with the adapter as the user wants it for models that have one."""
        return dataclasses.replace(self.query_params, use_adapter=self.params_panel.adapter_wanted)

    def _retune(self) -> None:
        """Re-run the current spectrum (its formula runs) with the new parameters (draws only what is missing)."""
        e = self.current_entry()
        if e is None or not e.has_results or all(r.params == self.query_params for r in e.results()):
            return
        if self.busy:
            self.runs.defer_retune()
            return
        self.run_entries([r for r in e.formula_runs if r.result is not None] or [e], retune=True)

    # ------------------------------------------------------------------------------------------
    # running
    # ------------------------------------------------------------------------------------------
    def run_selected(self) -> None:
        self.run_entries(self.selected_entries())

    def run_all(self) -> None:
        """Every listed spectrum (a run's features, not their scans one by one)."""
        self.run_entries([e for e in self.spectra.entries if e.spectrum is not None])

    def run_entries(self, entries: list[SpectrumEntry], retune: bool = False, formulas: bool = False,
                    top_k: int | None = None) -> bool:
        """Run ``entries``: those without a formula for their best k formula candidates (``formulas``: every one
        of them; ``top_k``: k, the Formulas tab's by default)."""
        if self.bundle is None:
            self.show_message("No model is loaded: choose Model ▸ Open Model Folder… to pick a model bundle folder.")
            return False
        if self.busy:
            self.status("Busy: wait for the running work to finish, or cancel it with Esc.")
            return False
        try:
            params = self.params_panel.params()
        except MsgptError as e:
            self.show_message(f"Check the query parameters: {e}")
            return False
        if not retune and not self._take_pending_edit(entries):
            return False
        started = self.runs.run(entries, params, retune=retune, top_k=top_k or self.formulas.top_k,
                                formulas=formulas)
        if started:
            self.first_candidates_s = None
        self._show_current()
        return started

    def _take_pending_edit(self, entries: list[SpectrumEntry]) -> bool:
        """Run applies what was typed below the current spectrum and not applied, when it is valid;
        when it is wrong, nothing runs and the message says why (what was typed stays)."""
        e = self.current_entry()
        editor = self.spectrum_panel.editor
        pending = editor.pending()
        if e is None or pending is None or e not in entries:
            return True
        if pending.appliable:
            self._formula_applied(pending.spectrum)
            return True
        if pending.level == ERROR:
            self.show_message(f"Not run: what is typed below {e.display_id} cannot be applied: {pending.message}. "
                              "Correct it, or press Reset to go back to the file's values.")
            return False
        return True

    def _entry_updated(self, key: int, what: str) -> None:
        if what == "result":
            self._update_spectra_title()
        e = self.current_entry()
        if e is None or self.spectra.listed(key) is not e:  # a formula run shows in its entry's row
            return
        if what == "ranking":
            self._show_candidates(e)
        else:
            self._show_current()
        if what in ("ranking", "result"):
            self._note_first_candidates()

    def _note_first_candidates(self) -> None:
        if self.first_candidates_s is None and self.candidates.model.rowCount() > 0 and self.runs.run_t0 is not None:
            self.first_candidates_s = time.perf_counter() - self.runs.run_t0
            log.info("first candidates on screen after %.2f s", self.first_candidates_s)

    def cancel(self) -> None:
        self.runs.cancel()

    # ------------------------------------------------------------------------------------------
    # export
    # ------------------------------------------------------------------------------------------
    def export_dialog(self, scope: str = "selected") -> None:
        entries = self._export_entries(scope)
        if not entries:
            return
        start_dir = self.settings.get("files/export_dir", str(Path.home()), str)
        suggested = str(Path(start_dir) / "candidates.csv")
        path = self.ask_save_path(suggested)
        if path:
            self.settings.set("files/export_dir", str(Path(path).parent))
            self.export(path, scope)

    def ask_save_path(self, suggested: str) -> str | None:
        """Ask where to export (a method, so tests can replace the dialog)."""
        name, selected = QFileDialog.getSaveFileName(
            self, "Export candidates", suggested, "CSV table (*.csv);;SD file with 2D structures (*.sdf)"
        )
        if not name:
            return None
        if Path(name).suffix.lower() not in (".csv", ".sdf", ".sd"):
            name += ".sdf" if "sdf" in selected else ".csv"
        return name

    def _export_entries(self, scope: str) -> list[SpectrumEntry]:
        pool = list(self.spectra.all_entries()) if scope == "all" else self.selected_entries()
        entries = [e for e in pool if e.has_results]
        if not entries:
            which = "any spectrum" if scope == "all" else "the selected spectra"
            self.show_message(f"Nothing to export: {which} has no candidates yet. Run them first (Ctrl+R).")
        return entries

    def export(self, path: str | Path, scope: str = "selected") -> bool:
        """Write the candidates of the selected / all spectra as shown, atomically, in the background."""
        if self.busy:
            self.show_message("Wait for the running work to finish (or cancel it with Esc) before exporting.")
            return False
        entries = self._export_entries(scope)
        if not entries:
            return False
        results = [e.result if e.result is not None else tuple(e.results()) for e in entries]  # formulas: ranks run on
        try:
            info = export_info(self.bundle, results)
        except MsgptError as err:
            self.show_message(str(err))
            return False
        info["novelty"] = self.insights.marker.describe()
        return self.runs.export(Path(path), results, info, novelty=self.insights.marker)

    # ------------------------------------------------------------------------------------------
    # the task slot
    # ------------------------------------------------------------------------------------------
    def _task_started(self, kind: str) -> None:
        self.progress.setValue(0)
        self.progress.setVisible(kind != "model")
        self.cancel_button.setVisible(True)
        self._update_actions()

    def _task_ended(self) -> None:
        self.progress.hide()
        self.cancel_button.setVisible(self.loader is not None)
        self._update_actions()

    def _show_progress(self, value: int, text: str) -> None:
        self.progress.setValue(value)
        self.progress.setFormat(text)

    def _update_actions(self) -> None:
        busy = self.busy
        has_model = self.bundle is not None
        entries = self.spectra.entries
        any_spectra = any(e.spectrum is not None for e in entries)
        any_results = any(e.has_results for e in self.spectra.all_entries())
        params_ok = self.params_panel.error.isHidden()
        self.act_run.setEnabled(has_model and not busy and any_spectra and params_ok)
        self.act_run_all.setEnabled(has_model and not busy and any_spectra and params_ok)
        self.act_cancel.setEnabled(busy or self.loader is not None)
        self.cancel_button.setVisible(busy or self.loader is not None)
        self.act_export.setEnabled(not busy and any_results)
        self.act_export_all.setEnabled(not busy and any_results)
        self.act_examples.setEnabled(bool(self.example_files()))
        has_default = (default_model_dir() / "config.json").is_file()
        self.act_default_model.setEnabled(not busy and has_default)
        self.act_default_model.setToolTip("Load the default model shipped with the app" if has_default else
                                          "The bundled default model is not installed in this version")
        self.act_model_folder.setEnabled(not busy)
        tip = "" if has_model else " (no model loaded: Model ▸ Open Model Folder…)"
        self.act_run.setToolTip("Elucidate structures for the selected spectra (Ctrl+R)" + tip)
        self.act_run_all.setToolTip("Elucidate structures for every spectrum (Ctrl+Shift+R)" + tip)

    def _reset_all_results(self) -> None:
        for e in self.spectra.all_entries():
            if e.spectrum is not None:
                e.reset_results()
        self.spectra.all_changed()
        self._update_spectra_title()
        self._show_current()

    # ------------------------------------------------------------------------------------------
    # help
    # ------------------------------------------------------------------------------------------
    def show_scores_help(self) -> None:
        cols = tooltips.TIPS["columns"]
        text = "<br><br>".join([
            tooltips.KAPPA, tooltips.GROUPS, tooltips.SAMPLES, tooltips.POOL,
            f"<b>Count</b> — {cols['Count']}.", f"<b>Posterior similarity</b> — {cols['Posterior sim.']}.",
            tooltips.FIDELITY, tooltips.REFERENCE_RANK,
        ])
        if self.popups:
            box = QMessageBox(QMessageBox.Icon.Information, "Parameters and scores", text, QMessageBox.StandardButton.Ok, self)
            box.setTextFormat(Qt.TextFormat.RichText)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.show()

    def show_about(self) -> None:
        if self.popups:
            QMessageBox.about(
                self, "About MS-GPT Desktop",
                f"<b>MS-GPT Desktop {__version__}</b><br>De novo molecular structure elucidation from MS/MS "
                "spectra, offline, on your own machine.<br><br>Settings: " + str(self.settings.path),
            )

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
        self._retune_timer.stop()
        self.formulas.shutdown(timeout_ms)
        self.runs.shutdown(timeout_ms)
        self.insights.shutdown(timeout_ms)
        self.projects.shutdown(timeout_ms)
