"""Files in the window: opening spectra (File ▸ Open, drag and drop, the command line, recent files, the example
spectra), what was read from each file, closing them all, and exporting the candidates (CSV or SDF).

:class:`FileController` holds the File menu's actions for spectra and candidates (projects are
:mod:`msgpt_gui.project_view`'s); files are read by :class:`~msgpt_gui.run_controller.RunController`, one
after the other, and an export runs in its task slot.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from engine.errors import MsgptError
from engine.paths import examples_dir

from .actions import make_action
from .logic.entries import SpectrumEntry
from .logic.jobs import FileSummary, export_info
from .logic.projects import used_libraries

SPECTRA_FILTER = ("Spectra (*.mgf *.mgf.gz *.mzML *.mzml *.mzML.gz *.mzml.gz *.msp *.mat *.ms);;"
                  "All files (*)")  # .msp/.mat: MS-DIAL, .ms: SIRIUS (#60)
SPECTRA_SUFFIXES = (".mgf", ".mzml", ".mgf.gz", ".mzml.gz", ".msp", ".mat", ".ms")
EXAMPLES_CLOSED = ("The example spectra were closed to make room for yours (File ▸ Open Example Spectra opens them "
                   "again).")


def is_spectra_file(path: Path) -> bool:
    name = path.name.lower()
    return any(name.endswith(s) for s in SPECTRA_SUFFIXES)


def is_example(path: Path) -> bool:
    """A file of the bundled example spectra (or their folder)."""
    try:
        return Path(path).resolve().is_relative_to(examples_dir().resolve())
    except OSError:
        return False


def dropped_paths(mime) -> list[Path]:
    """The local files and folders of a drag and drop."""
    if mime is None or not mime.hasUrls():
        return []
    return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile() and u.toLocalFile()]


class FileController(QObject):
    """Spectra files in and candidates out; see the module notes."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.file_reports: dict[str, str] = {}  # path -> what was read from it (FileSummary.report)
        self._select_new = False
        self._examples_note = ""  # the examples made way for the user's files: said with the next file's report
        a = make_action
        self.act_open = a(window, "&Open Spectra…", self.open_dialog, "Ctrl+O",
                          "Open MGF or mzML files (.gz too); you can also drop them on the window", "SP_DialogOpenButton")
        self.act_examples = a(window, "Open &Example Spectra", self.open_examples,
                              tip="Open the example spectra shipped with the app")
        self.act_export = a(window, "&Export Candidates of Selected Spectra…", lambda: self.export_dialog("selected"),
                            "Ctrl+E", "Write the candidates of the selected spectra to a CSV or SDF file",
                            "SP_DialogSaveButton")
        self.act_export_all = a(window, "Export Candidates of &All Spectra…", lambda: self.export_dialog("all"),
                                "Ctrl+Shift+E", "Write the candidates of every spectrum that has them to a CSV or SDF "
                                "file")
        self.act_export_features = a(window, "Export &Feature Table…", self.export_features_dialog,
                                     tip="One row per listed feature (its ID as the source tool wrote it, m/z, RT, "
                                     "rank-1 structure, level, confidence, abundance) to join back to MZmine, MS-DIAL "
                                     "or GNPS (docs/app.md)")
        self.act_add_quant = a(window, "Add &Quantification Table…", self.add_quant_dialog,
                               tip="Give the listed features their abundance per sample from a quantification table "
                               "(MZmine/GNPS _quant.csv, MS-DIAL alignment table, any CSV/TSV with a feature ID "
                               "column): by feature ID, else by m/z and RT")
        self.act_close_all = a(window, "&Close All Spectra", self.close_all_spectra,
                               tip="Remove every spectrum from the list")
        self.recent_menu = None
        window.runs.records_added.connect(self._records_added)
        window.runs.file_read.connect(self._file_read)

    def add_recent_menu(self, menu) -> None:
        self.recent_menu = menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)

    def update_actions(self, busy: bool, any_results: bool) -> None:
        self.act_export.setEnabled(not busy and any_results)
        self.act_export_all.setEnabled(not busy and any_results)
        self.act_examples.setEnabled(bool(self.example_files()))

    # ------------------------------------------------------------------------------------------
    # opening
    # ------------------------------------------------------------------------------------------
    def example_files(self) -> list[Path]:
        folder = examples_dir()
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if p.is_file() and is_spectra_file(p))

    def open_examples(self) -> None:
        files = self.example_files()
        if not files:
            self.window.show_message(f"No example spectra are installed ({examples_dir()} is empty).", "info")
            return
        self.open_files(files)

    def open_dialog(self) -> None:
        """File ▸ Open: starts in the folder of the spectra opened last, else beside the listed spectra, else in the
        documents folder (:meth:`Settings.open_dir`)."""
        names, _ = QFileDialog.getOpenFileNames(self.window, "Open spectra",
                                                self.window.settings.open_dir(self.spectra_folder()), SPECTRA_FILTER)
        if names:
            self.open_files([Path(n) for n in names])

    def spectra_folder(self) -> str:
        """The folder of the first listed spectra file that is the user's (not the bundled examples), '' when none."""
        seen = set()
        for e in self.window.spectra.entries:
            source = e.source
            if not source or source in seen:
                continue
            seen.add(source)
            path = Path(source)
            if not is_example(path) and path.parent.is_dir():
                return str(path.parent)
        return ""

    def _fill_recent_menu(self) -> None:
        menu, settings = self.recent_menu, self.window.settings
        menu.clear()
        files = settings.recent_files()
        for f in files:
            act = menu.addAction(Path(f).name)
            act.setToolTip(f)
            act.setStatusTip(f)
            act.triggered.connect(lambda _=False, f=f: self.open_files([Path(f)]))
        if not files:
            menu.addAction("(none)").setEnabled(False)
        else:
            menu.addSeparator()
            menu.addAction("Clear Recent Files", settings.clear_recent_files)

    def drop(self, event) -> None:
        """Files and folders dropped on the window open as from File ▸ Open."""
        paths = dropped_paths(event.mimeData())
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.open_files(paths)

    def open_files(self, paths) -> None:
        """Queue files for loading in the background (the path drag-and-drop and File ▸ Open take)."""
        w = self.window
        # a project file opens as the project; the other files once it is open (its own spectra files attach to it)
        paths = w.projects.take_project_files(paths, then=self.open_files)
        expanded: list[Path] = []
        for p in map(Path, paths):
            if p.is_dir():
                inside = sorted(q for q in p.iterdir() if q.is_file() and is_spectra_file(q))
                if not inside:
                    w.show_message(f"{p} holds no MGF or mzML files.")
                expanded.extend(inside)
            else:
                expanded.append(p)
        own = [p for p in expanded if not is_example(p)]
        if own:  # the user's own files: File ▸ Open starts in their folder next time; untouched examples make way
            w.settings.remember_open_dir(own[0])
            if any(is_spectra_file(p) for p in own):
                self.close_untouched_examples()
        queued, attach = [], []
        for p in expanded:
            if p in queued or p in attach:
                continue
            if w.projects.may_attach(p):  # a reopened project's file: attached to its entries, not listed again
                if p.is_file():
                    w.settings.add_recent_file(str(p))
                attach.append(p)
                continue
            if w.runs.is_open(p):
                w.status(f"{p.name} is already open.")
                continue
            if p.is_file():
                w.settings.add_recent_file(str(p))
            queued.append(p)
        if queued:
            self._select_new = True  # the first record of the first of these files is selected and shown
        w.runs.load_files(queued)
        for p in attach:
            w.projects.attach_file(p)

    def _records_added(self, path: str, entries: list[SpectrumEntry], first_batch: bool) -> None:
        listed = self.window.spectra_list
        listed.update_title()
        listed.follow_tree()
        current = listed.view.selectionModel().currentIndex()
        if (first_batch and self._select_new) or not current.isValid():
            self._select_new = False
            listed.reveal(entries[0].key)

    def _file_read(self, path: str, summary: FileSummary, seconds: float) -> None:
        """One report per file: a dialog when something was passed over, skipped or needs input."""
        w = self.window
        entries = [e for e in w.spectra.entries if e.source == path]
        name = Path(path).name
        if summary.records == 0:
            w.show_message(f"{name} holds no MS/MS spectra.", "info")
        text, worth_a_dialog = summary.report(entries, w.spectra.supported_adducts,
                                              w.bundle.name if w.bundle is not None else "", top_k=w.formulas.top_k)
        self.file_reports[path] = text
        hint = " No model loaded: choose Model ▸ Open Model Folder… to run." if w.bundle is None and not w.busy else ""
        note, self._examples_note = (" " + self._examples_note if self._examples_note else ""), ""
        w.status(text.splitlines()[0].removesuffix(".") + f" (read in {seconds:.1f} s)." + hint + note,
                 0 if hint else 15000 if note else 8000)
        if worth_a_dialog:
            w.file_reported.emit(path, text)
            w.message_shown.emit("info", text)
            if w.popups:
                box = QMessageBox(QMessageBox.Icon.Information, f"What was read from {name}", text,
                                  QMessageBox.StandardButton.Ok, w)
                box.setObjectName("file_report")
                box.setWindowModality(Qt.WindowModality.NonModal)
                box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
                box.show()

    def close_untouched_examples(self) -> bool:
        """Close the bundled example spectra when they are all that is listed and nobody touched them (not run, no
        formula set, no notes; not a saved project; nothing being read): the user's own files replace them rather
        than mix with them. Examples that were run or edited stay. Returns whether they were closed."""
        w = self.window
        entries = w.spectra.entries
        if not entries or w.loader is not None or w.runs.load_queue or (w.busy and w.runs.task_kind != "model") \
                or w.projects.path is not None or w.spectrum_panel.editor.dirty:
            return False
        if not all(is_example(Path(e.source)) and e.untouched for e in entries):
            return False
        w.spectra.clear()
        w.runs.forget_files()
        w.document_replaced()
        self._examples_note = EXAMPLES_CLOSED  # said again with the report of the user's first file
        w.show_message(EXAMPLES_CLOSED, "info")
        return True

    def close_all_spectra(self) -> None:
        w = self.window
        if w.busy:
            w.show_message("Wait for the running work to finish (or cancel it with Esc) first.")
            return
        w.spectra.clear()
        w.runs.forget_files()
        w.document_replaced()

    # ------------------------------------------------------------------------------------------
    # export
    # ------------------------------------------------------------------------------------------
    def export_dialog(self, scope: str = "selected") -> None:
        entries = self._export_entries(scope)
        if not entries:
            return
        settings = self.window.settings
        # the last export's folder, else the spectra's (never the app's own folders)
        suggested = str(Path(settings.export_dir(self.spectra_folder())) / "candidates.csv")
        path = self.ask_save_path(suggested)
        if path:
            settings.remember_export_dir(path)
            self.export(path, scope)

    def add_quant_dialog(self) -> None:
        """File ▸ Add Quantification Table: pick a table and attach it to the listed rows (#60)."""
        name, _ = QFileDialog.getOpenFileName(self.window, "Add quantification table",
                                              self.window.settings.open_dir(self.spectra_folder()),
                                              "Tables (*.csv *.tsv *.txt);;All files (*)")
        if name:
            self.add_quant_table(name)

    def add_quant_table(self, path: str | Path) -> int:
        """Attach the table at ``path`` to every listed row; returns the rows matched (0 also when it failed)."""
        from engine.spectra.handoff import read_quant_table

        from .logic.handoff_files import attach_quant_to_entries, has_abundance

        w = self.window
        try:
            table = read_quant_table(path)
        except MsgptError as err:
            w.show_message(str(err))
            return 0
        entries = list(w.spectra.all_entries())
        matched = attach_quant_to_entries(entries, table)
        w.spectra.has_abundance = has_abundance(entries)
        w.spectra.all_changed()
        w.spectra_list.follow_tree()
        w.status(f"{Path(path).name}: {matched} of {len(entries)} listed rows got their abundance "
                 f"({len(table.rows)} rows in the table).")
        return matched

    def export_features_dialog(self) -> None:
        """File ▸ Export Feature Table: every listed row, run or not, to a TSV/CSV keyed by feature ID (#60)."""
        if not self.window.spectra.entries:
            self.window.show_message("Nothing to export: open spectra first.")
            return
        suggested = str(Path(self.window.settings.export_dir(self.spectra_folder())) / "features.tsv")
        name, _ = QFileDialog.getSaveFileName(self.window, "Export feature table", suggested,
                                              "Tab-separated table (*.tsv);;CSV table (*.csv)")
        if name:
            self.export_feature_table(name if Path(name).suffix.lower() in (".tsv", ".csv") else name + ".tsv")

    def export_feature_table(self, path: str | Path) -> int:
        """Write the feature table of every listed row; returns the rows written (0 when it failed)."""
        from engine.files.feature_table import write_feature_table

        from .logic.handoff_files import entry_feature_rows

        try:
            n = write_feature_table(path, entry_feature_rows(self.window.spectra.entries))
        except MsgptError as err:
            self.window.show_message(str(err))
            return 0
        self.window.settings.remember_export_dir(str(path))
        self.window.status(f"{n} features written to {Path(path).name}.")
        return n

    def ask_save_path(self, suggested: str) -> str | None:
        """Ask where to export (a method, so tests can replace the dialog)."""
        name, selected = QFileDialog.getSaveFileName(
            self.window, "Export candidates", suggested, "CSV table (*.csv);;SD file with 2D structures (*.sdf)"
        )
        if not name:
            return None
        if Path(name).suffix.lower() not in (".csv", ".sdf", ".sd"):
            name += ".sdf" if "sdf" in selected else ".csv"
        return name

    def _export_entries(self, scope: str) -> list[SpectrumEntry]:
        w = self.window
        pool = list(w.spectra.all_entries()) if scope == "all" else w.selected_entries()
        entries = [e for e in pool if e.has_results]
        if not entries:
            which = "any spectrum" if scope == "all" else "the selected spectra"
            w.show_message(f"Nothing to export: {which} has no candidates yet. Run them first (Ctrl+R).")
        return entries

    def export(self, path: str | Path, scope: str = "selected") -> bool:
        """Write the candidates of the selected / all spectra as shown, atomically, in the background."""
        w = self.window
        if w.busy:
            w.show_message("Wait for the running work to finish (or cancel it with Esc) before exporting.")
            return False
        entries = self._export_entries(scope)
        if not entries:
            return False
        results = [e.result if e.result is not None else tuple(e.results()) for e in entries]  # formulas: ranks run on
        try:
            info = export_info(w.bundle, results)
        except MsgptError as err:
            w.show_message(str(err))
            return False
        info["novelty"] = w.insights.marker.describe()
        libraries = used_libraries(entries)
        if libraries:
            info["libraries"] = "; ".join(ref.describe() for ref in libraries)
        return w.runs.export(Path(path), results, info, novelty=w.insights.marker)
