"""What the app says beyond the candidates, wired into the main window: the tabs beside the candidates
(Fingerprint bits, Score a structure), the novelty of candidates, File ▸ Export Posteriors and
Model ▸ Known Structures List.

The window creates one :class:`Insights` and only places its widgets and actions; everything else is
connected here to signals the window already has.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QTabWidget

from engine.elucidation.pipeline import QueryParams

from .bits_view import BitsPanel
from .logic.insights import PosteriorsWritten, Progress, export_posteriors
from .novelty_view import NoveltyController
from .score_view import ScorePanel
from .workers import GeneratorWorker

STRUCTURE_LISTS = "Structure lists (*.txt *.smi *.csv *.tsv *.sdf *.sd *.gz);;All files (*)"


class Insights(QObject):
    """Tabs, actions and their wiring (see the module notes)."""

    posteriors_exported = Signal(str, int)  # path and spectra written; ("", 0) when it failed or was cancelled

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.bits = BitsPanel()
        self.score = ScorePanel()
        self.score.settings = window.settings  # its export starts where the last export went
        self.novelty = NoveltyController(window.settings, self)
        self.tabs = QTabWidget(documentMode=True, objectName="insights_tabs")
        self.tabs.addTab(window.candidates, "Candidates")
        self.tabs.addTab(self.bits, "Fingerprint bits")
        self.tabs.addTab(self.score, "Score a structure")
        self.tabs.setTabToolTip(1, "The bits the spectrum's posterior predicts, and what each means in the corpus")
        self.tabs.setTabToolTip(2, "Score a structure of your own against the selected spectrum")

        self.act_export_posteriors = QAction("Export &Posteriors of Selected Spectra…", window)
        self.act_export_posteriors.setToolTip("Write the fingerprint posteriors, band thresholds and queries of the "
                                              "selected spectra to a .npz file (no pickles; see the README)")
        self.act_export_posteriors.triggered.connect(lambda *_: self.export_posteriors_dialog())
        self.act_known_list = QAction("&Known Structures List…", window)
        self.act_known_list.setToolTip("Choose your list of known structures (SMILES / InChIKeys, one per row, or an "
                                       "SDF, e.g. a database export): candidates in it are marked 'user list'")
        self.act_known_list.triggered.connect(lambda *_: self.known_list_dialog())
        self.act_forget_list = QAction("&Forget Known Structures List", window)
        self.act_forget_list.triggered.connect(lambda *_: self.novelty.clear_list())

        window.candidates_shown.connect(lambda *_: self._follow_current())
        window.candidates.candidate_selected.connect(self.bits.set_candidate)
        window.candidates.candidate_selected.connect(lambda *_: self._follow_current())  # several formulas: its own
        window.model_changed.connect(self._model_changed)
        window.params_panel.changed.connect(self._params_changed)
        window.worker_started.connect(self._worker_started)
        self.novelty.changed.connect(self._marker_changed)
        self.novelty.message.connect(lambda level, text: window.show_message(text, level))
        self.novelty.list_loaded.connect(lambda *_: self._update_actions())
        self.score.message.connect(lambda level, text: self._say(text, level))
        self._params_changed(window.query_params)
        self._update_actions()

    @property
    def marker(self):
        return self.novelty.marker

    def add_file_actions(self, menu) -> None:
        menu.addAction(self.act_export_posteriors)

    def add_model_actions(self, menu) -> None:
        menu.addSeparator()
        menu.addAction(self.act_known_list)
        menu.addAction(self.act_forget_list)

    # -- following the window
    def _worker_started(self, worker) -> None:
        """Scoring waits while a task runs (it would share the model with it); the slot is free again once the
        worker finishes (the run controller hears of it first)."""
        self.score.set_busy(self.window.busy)
        worker.finished.connect(lambda: self.score.set_busy(self.window.busy))

    def _follow_current(self) -> None:
        e = self.window.focus_entry()  # after a run of several formulas: that of the selected candidate
        self.bits.set_entry(e)
        self.score.set_busy(self.window.busy)
        self.score.set_entry(e)
        self._update_actions()

    def _model_changed(self, bundle) -> None:
        self.bits.set_bundle(bundle)
        self.score.set_bundle(bundle)
        self.novelty.set_bundle(bundle)
        self.score.set_busy(self.window.busy)

    def _params_changed(self, params: QueryParams) -> None:
        self.bits.set_params(params)
        self.score.set_params(params)

    def _marker_changed(self, marker) -> None:
        self.window.candidates.model.set_marker(marker)
        self.score.set_marker(marker)
        self._update_actions()

    def _update_actions(self) -> None:
        self.act_forget_list.setEnabled(self.novelty.user is not None)
        self.act_forget_list.setToolTip(f"Stop marking candidates found in {self.novelty.user_path}"
                                        if self.novelty.user_path else "No list of known structures is set")

    def _say(self, text: str, level: str) -> None:
        if level == "info":
            self.window.status(text)
        else:
            self.window.show_message(text, level)

    # -- known structures
    def known_list_dialog(self) -> None:
        start = self.novelty.user_path or self.window.settings.open_dir()
        name, _ = QFileDialog.getOpenFileName(self.window, "Your list of known structures", start, STRUCTURE_LISTS)
        if name:
            self.novelty.load_list(name)

    # -- posterior export
    def export_posteriors_dialog(self) -> None:
        settings = self.window.settings
        suggested = str(Path(settings.export_dir()) / "posteriors.npz")  # where the last export went
        name, _ = QFileDialog.getSaveFileName(self.window, "Export posteriors", suggested, "NumPy archive (*.npz)")
        if name:
            settings.remember_export_dir(name)
            self.export_posteriors(name if name.lower().endswith(".npz") else name + ".npz")

    def export_posteriors(self, path: str | Path) -> bool:
        """Posteriors of the selected spectra (those that ran carry theirs; the others are computed, the encoder
        alone) into one ``.npz``, in the background as the run's task."""
        w = self.window
        if w.bundle is None:
            w.show_message("No model is loaded: choose Model ▸ Open Model Folder… first.")
            return False
        entries = [r for e in w.selected_entries() for r in (e.formula_runs or [e]) if r.spectrum is not None]
        if not entries:
            w.show_message("Select the spectra whose posteriors to export.")
            return False
        bundle, params = w.bundle, w.query_params
        items = [(e.spectrum, e.result.posterior if e.result is not None and e.result.spectrum is e.spectrum
                  and e.model_checksum == bundle.checksum else None) for e in entries]
        worker = GeneratorWorker(export_posteriors, str(path), bundle, items, params,
                                 name=f"exporting posteriors to {Path(path).name}")
        worker.yielded.connect(lambda ev: self._progress(ev))

        def done(out: PosteriorsWritten) -> None:
            skipped = f"; {len(out.skipped)} left out ({out.skipped[0]}{' …' if len(out.skipped) > 1 else ''})" \
                if out.skipped else ""
            self._say(f"Posteriors of {out.n_written} spectra written to {out.path}{skipped}.",
                      "warning" if out.skipped else "info")
            self.posteriors_exported.emit(out.path, out.n_written)

        def failed(message: str) -> None:
            w.show_message(f"Posterior export failed: {message}\nAn earlier {Path(path).name}, if any, was left "
                           "unchanged.", "error")
            self.posteriors_exported.emit("", 0)

        def aborted() -> None:
            w.status(f"Posterior export cancelled; {Path(path).name} was not changed.")
            self.posteriors_exported.emit("", 0)

        return w.runs.start_job("export", worker, on_returned=done, on_errored=failed, on_aborted=aborted)

    def _progress(self, ev: Progress) -> None:
        self.window.runs.progress.emit(int(1000 * ev.done / max(ev.total, 1)), ev.text)

    def shutdown(self, timeout_ms: int = 10000) -> None:
        self.novelty.shutdown(timeout_ms)
