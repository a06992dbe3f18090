"""Libraries of known compounds in the app: the controller that opens them in the background and remembers them
(:class:`LibraryController`), and the manager dialog (Run ▸ Libraries…, :class:`LibraryManager`).

The bundled structure and spectral libraries are listed and on by default; the user adds structure libraries
(CSV/TSV/SDF/SMILES, ``.gz`` too) and spectral libraries (MSP/MGF), turns them on and off, and removes them. The
settings keep the list (paths and on/off). Opening a library runs in a :class:`~msgpt_gui.workers.GeneratorWorker`
(one at a time, never blocking the window: the bundled ones take seconds the first time on a machine, well under
one afterwards) with a progress bar and Cancel in the dialog. Whenever the set of enabled, opened libraries
changes, ``changed`` carries it: the run controller gives it to every new session, and the current spectrum is
re-ranked (:meth:`msgpt_gui.run_menu.RunMenu.libraries_changed`).
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import json
import logging
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from engine.errors import MsgptError
from engine.model.suspect_confidence import PRESENT_DEFAULT

from .logic.libraries import (
    SPECTRAL,
    SPECTRAL_FILTER,
    STRUCTURE,
    STRUCTURE_FILTER,
    LibrarySource,
    enabled_libraries,
    kind_of_path,
    library_key,
    open_source,
    sources_from_setting,
)
from .actions import make_action
from .logic import tooltips
from .workers import GeneratorWorker

log = logging.getLogger(__name__)

SETTINGS_KEY = "libraries/sources"  # JSON: [{"kind", "path", "enabled"}, ...]


class LibraryController(QObject):
    """The libraries of the app, opened one after the other in the background; see the module notes."""

    changed = Signal(object)  # the enabled, opened libraries (a tuple), whenever that set changed
    sources_changed = Signal()  # a library was added, removed, switched, opened or failed (the dialog redraws)
    progress = Signal(int, int, str)  # done, total, text of the library being opened
    finished_opening = Signal(str)  # the path of a library that opened, failed or was cancelled
    message = Signal(str, str)  # level, text
    worker_started = Signal(object)

    def __init__(self, settings=None, parent=None, start: bool = True):
        super().__init__(parent)
        self.settings = settings
        saved = settings.get(SETTINGS_KEY, "", str) if settings is not None else ""
        try:
            data = json.loads(saved) if saved else []
        except ValueError:
            log.warning("The library list in the settings is not readable; the bundled libraries are used.")
            data = []
        self.sources: list[LibrarySource] = sources_from_setting(data)
        self.worker: GeneratorWorker | None = None
        self.opening: LibrarySource | None = None
        self._key: tuple = ()
        if start:
            QTimer.singleShot(0, self.open_next)  # after the window is up: never at start-up in the foreground

    # -- what runs use
    def libraries(self) -> tuple:
        """The enabled libraries that are open, in the list's order."""
        return enabled_libraries(self.sources)

    @property
    def busy(self) -> bool:
        return self.worker is not None

    # -- editing the list
    def add(self, path: str | Path, kind: str | None = None) -> LibrarySource | None:
        """Add a library file (its kind from its name unless given) and open it in the background; None when it
        is not a library file or listed already (said)."""
        path = str(Path(path).expanduser().resolve())
        try:
            kind = kind or kind_of_path(path)
        except MsgptError as e:
            self.message.emit("warning", str(e))
            return None
        if any(s.path == path for s in self.sources):
            self.message.emit("info", f"{Path(path).name} is listed already.")
            return None
        source = LibrarySource(kind, path)
        self.sources.append(source)
        self._save()
        self.sources_changed.emit()
        self.open_next()
        return source

    def remove(self, source: LibrarySource) -> None:
        """Take a library off the list (a bundled one cannot be removed: turn it off instead)."""
        if source.bundled:
            self.message.emit("info", f"{source.name} ships with the app: untick it to leave it out of runs.")
            return
        if source is self.opening and self.worker is not None:
            self.worker.cancel()
        self.sources.remove(source)
        self._save()
        self.sources_changed.emit()
        self._announce()

    def set_enabled(self, source: LibrarySource, enabled: bool) -> None:
        """Switch a library on or off; one that was not opened (cancelled, failed, off since start) opens now."""
        if source.enabled == enabled:
            return
        source.enabled = enabled
        if enabled and source.library is None and source.state != "opening":
            source.state, source.error = "waiting", ""
        self._save()
        self.sources_changed.emit()
        self._announce()
        self.open_next()

    def _save(self) -> None:
        if self.settings is not None:
            self.settings.set(SETTINGS_KEY, json.dumps([s.setting() for s in self.sources]))

    def _announce(self) -> None:
        """``changed`` when the enabled, opened set differs from the one announced last."""
        libraries = self.libraries()
        key = library_key(libraries)
        if key != self._key:
            self._key = key
            self.changed.emit(libraries)

    # -- opening in the background
    def open_next(self) -> None:
        """Open the next enabled library that is waiting (one at a time)."""
        if self.worker is not None:
            return
        source = next((s for s in self.sources if s.enabled and s.state == "waiting"), None)
        if source is None:
            return
        source.state = "opening"
        self.opening = source
        worker = GeneratorWorker(open_source, source.kind, source.path, name=f"opening {source.name}")
        self.worker = worker
        worker.yielded.connect(lambda ev: self.progress.emit(ev.done, ev.total, ev.text))
        worker.returned.connect(lambda lib: self._opened(source, lib))
        worker.errored.connect(lambda msg: self._failed(source, msg))
        worker.aborted.connect(lambda: self._cancelled(source))
        worker.finished.connect(lambda: self._finished(worker, source))
        self.sources_changed.emit()
        self.progress.emit(0, 0, f"Opening {source.name}…")
        self.worker_started.emit(worker)
        worker.start()

    def cancel(self) -> None:
        """Stop opening: the library being opened and those waiting stay closed (ticking one again opens it)."""
        for s in self.sources:
            if s.state == "waiting":
                s.state = "cancelled"
        if self.worker is not None:
            self.worker.cancel()
        self.sources_changed.emit()

    def _opened(self, source: LibrarySource, library) -> None:
        source.library, source.state, source.error = library, "open", ""
        log.info("Library %s open: %s", source.name, source.counts())

    def _failed(self, source: LibrarySource, message: str) -> None:
        source.state, source.error = "failed", message
        where = "" if source.bundled else f" ({source.path})"
        self.message.emit("warning", f"The {source.kind_label} {source.name}{where} cannot be used:\n{message}\n"
                                     "Fix or replace the file and tick it again, or remove it (Run ▸ Libraries…).")

    def _cancelled(self, source: LibrarySource) -> None:
        source.state = "cancelled"

    def _finished(self, worker: GeneratorWorker, source: LibrarySource) -> None:
        if self.worker is worker:
            self.worker, self.opening = None, None
        worker.deleteLater()
        self.sources_changed.emit()
        self.progress.emit(1, 1, "")
        self._announce()
        self.finished_opening.emit(source.path)
        self.open_next()

    def shutdown(self, timeout_ms: int = 10000) -> None:
        if self.worker is not None:
            self.worker.cancel()
            self.worker.wait(timeout_ms)


class LibraryManager(QDialog):
    """The list of libraries: name (ticked: on), kind, contents, file and state; add, remove, progress, cancel."""

    NAME, KIND, CONTENTS, STATE, FILE = range(5)
    COLUMNS = ("Library", "Kind", "Contents", "State", "File")

    def __init__(self, controller: LibraryController, parent=None, settings=None, params_panel=None):
        super().__init__(parent)
        self.controller = controller
        self.settings = settings
        self.params_panel = params_panel  # holds the share of the suspect lists' matches that are real
        self.setWindowTitle("Libraries of known compounds")
        self.resize(820, 400)
        self.note = QLabel(
            "Structures of the spectrum's formula from the ticked structure libraries, and the structures of the "
            "reference spectra that match it in the ticked spectral libraries, are ranked beside the structures "
            "the model draws (Origin column of the candidates).", wordWrap=True)
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(self.FILE, QHeaderView.ResizeMode.Stretch)
        self.add_structures = QPushButton("Add Structure Library…")
        self.add_spectra = QPushButton("Add Spectral Library…")
        self.remove_button = QPushButton("Remove")
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.cancel_button = QPushButton("Cancel")
        self.add_structures.clicked.connect(lambda: self.add_dialog(STRUCTURE))
        self.add_spectra.clicked.connect(lambda: self.add_dialog(SPECTRAL))
        self.remove_button.clicked.connect(self.remove_selected)
        self.cancel_button.clicked.connect(controller.cancel)
        self.table.itemChanged.connect(self._item_changed)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        buttons = QHBoxLayout()
        for w in (self.add_structures, self.add_spectra, self.remove_button):
            buttons.addWidget(w)
        buttons.addStretch(1)
        busy = QHBoxLayout()
        busy.addWidget(self.progress, 1)
        busy.addWidget(self.cancel_button)
        self.present = QSpinBox(minimum=1, maximum=99, suffix=" %")
        self.present.setToolTip(tooltips.SUSPECTS_PRESENT)
        self.present.setKeyboardTracking(False)
        share = QHBoxLayout()
        for w in (QLabel("Of the features your suspect lists match by formula, about"), self.present,
                  QLabel("are their compounds.")):
            w.setToolTip(tooltips.SUSPECTS_PRESENT)
            share.addWidget(w)
        share.addStretch(1)
        self.present_note = QLabel("The confidence of a suspect rank 1 follows it (90% for standards known to be in "
                                   "the sample, 10% or less for a broad screening list); the ranking does not.",
                                   wordWrap=True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.note)
        layout.addWidget(self.table, 1)
        layout.addLayout(busy)
        layout.addLayout(buttons)
        layout.addLayout(share)
        layout.addWidget(self.present_note)
        self.show_present()
        self.present.valueChanged.connect(self._present_changed)
        if params_panel is not None:
            params_panel.changed.connect(lambda _params: self.show_present())
        controller.sources_changed.connect(self.refresh)
        controller.progress.connect(self._progress)
        self._filling = False
        self.refresh()

    def refresh(self) -> None:
        """Fill the table from the controller's list."""
        self._filling = True
        try:
            sources = self.controller.sources
            self.table.setRowCount(len(sources))
            for row, s in enumerate(sources):
                name = QTableWidgetItem(s.name)
                name.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsUserCheckable)
                name.setCheckState(Qt.CheckState.Checked if s.enabled else Qt.CheckState.Unchecked)
                name.setToolTip("Ticked: used in runs")
                texts = (s.kind_label, s.counts(), s.status_text(), "bundled with the app" if s.bundled else s.path)
                self.table.setItem(row, self.NAME, name)
                for col, text in enumerate(texts, start=1):
                    item = QTableWidgetItem(text)
                    item.setToolTip(text)
                    self.table.setItem(row, col, item)
            self.table.resizeColumnsToContents()
        finally:
            self._filling = False
        self._update_buttons()

    def show_present(self) -> None:
        """The spin box shows the share the parameters hold (a project opened with another one changes it)."""
        share = self.params_panel.suspects_present if self.params_panel is not None else PRESENT_DEFAULT
        self.present.blockSignals(True)
        self.present.setValue(round(100 * share))
        self.present.blockSignals(False)
        self.present.setEnabled(self.params_panel is not None)

    def _present_changed(self, percent: int) -> None:
        if self.params_panel is not None:
            self.params_panel.set_suspects_present(percent / 100)

    def selected_source(self) -> LibrarySource | None:
        rows = {i.row() for i in self.table.selectedIndexes()}
        return self.controller.sources[rows.pop()] if len(rows) == 1 else None

    def _update_buttons(self) -> None:
        s = self.selected_source()
        self.remove_button.setEnabled(s is not None and not s.bundled)
        busy = self.controller.busy
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)

    def _item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != self.NAME:
            return
        source = self.controller.sources[item.row()]
        self.controller.set_enabled(source, item.checkState() == Qt.CheckState.Checked)

    def _progress(self, done: int, total: int, text: str) -> None:
        self.progress.setRange(0, 1000 if total else 0)  # total 0: busy without a known end
        if total:
            self.progress.setValue(int(1000 * done / total))
        self.progress.setFormat(text or "%p%")
        self._update_buttons()

    def add_dialog(self, kind: str) -> None:
        start = self.settings.get("libraries/last_dir", "", str) if self.settings is not None else ""
        title = "Add a structure library" if kind == STRUCTURE else "Add a spectral library"
        path, _ = QFileDialog.getOpenFileName(self, title, start, STRUCTURE_FILTER if kind == STRUCTURE
                                              else SPECTRAL_FILTER)
        if path:
            if self.settings is not None:
                self.settings.set("libraries/last_dir", str(Path(path).parent))
            self.controller.add(path, kind)

    def remove_selected(self) -> None:
        s = self.selected_source()
        if s is not None:
            self.controller.remove(s)


class LibrariesUI(QObject):
    """What the window holds of the libraries: the controller, Run ▸ Libraries… and its dialog; it hands the
    enabled libraries to the runs and the Score tab, and re-ranks the current spectrum when they change."""

    def __init__(self, window, start: bool = True):
        super().__init__(window)
        self.window = window
        self.controller = LibraryController(window.settings, self, start=start)
        self.dialog: LibraryManager | None = None
        self.act_manage = make_action(window, "&Libraries…", self.show_manager, "Ctrl+L",
                                      "Structure and spectral libraries of known compounds: which ones the runs use")
        c = self.controller
        c.changed.connect(self._changed)
        c.message.connect(lambda level, text: window.show_message(text, level))
        c.worker_started.connect(window.worker_started)
        c.progress.connect(self._status)

    def add_menu_actions(self, menu) -> None:
        menu.addSeparator()
        menu.addAction(self.act_manage)

    def show_manager(self) -> LibraryManager:
        if self.dialog is None:
            self.dialog = LibraryManager(self.controller, self.window, self.window.settings,
                                         self.window.params_panel)
        self.dialog.show()
        self.dialog.raise_()
        return self.dialog

    def _status(self, done: int, total: int, text: str) -> None:
        if text:
            pct = f" {100 * done // total}%" if total else ""
            self.window.status(f"{text}{pct}", 0 if done < total or not total else 4000)

    def _changed(self, libraries: tuple) -> None:
        w = self.window
        w.runs.libraries = libraries
        w.insights.score.libraries = libraries
        names = ", ".join(lib.name for lib in libraries) or "none"
        w.status(f"Libraries in use: {names}.", 6000)
        w.run_menu.libraries_changed()

    def shutdown(self, timeout_ms: int = 10000) -> None:
        self.controller.shutdown(timeout_ms)
