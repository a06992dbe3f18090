"""The Run menu and what else starts a run: Run Selected (also a double-click in the spectra list), Run All, the
Formulas tab's "Run best k", Cancel (Esc); and, when the parameters change after the current spectrum ran,
re-ranking it once they rest (drawing only what is missing).

At start-up the model and the libraries load in the background while the window is usable (issue #58): a run asked
for meanwhile waits for them, the status bar says so (``loading_label``: what is still loading, "Run waits for: …"),
and it starts when they are ready.

:class:`RunMenu` checks what a run needs (a model, a free task slot, valid parameters, what was typed below the
spectrum) and hands the entries to :class:`~msgpt_gui.run_controller.RunController`, which does the work.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import dataclasses

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QLabel

from engine.errors import MsgptError

from .actions import make_action
from .logic.entries import SpectrumEntry, Status
from .logic.libraries import share_stale_runs, stale_entries
from .status_bar import loading_text, loading_tip

RETUNE_DELAY_MS = 350
WAIT_REASON = "waits for the model and the libraries to load"  # the Status tooltip of an entry whose run waits


class RunMenu(QObject):
    """The Run menu's actions and the runs the window starts; see the module notes."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.act_run = make_action(window, "&Run Selected", self.run_selected, "Ctrl+R",
                                   "Elucidate structures for the selected spectra", "SP_MediaPlay")
        self.act_run_all = make_action(window, "Run &All", self.run_all, "Ctrl+Shift+R",
                                       "Elucidate structures for every spectrum", "SP_MediaSeekForward")
        self.act_cancel = make_action(window, "&Cancel", self.cancel, "Esc",
                                      "Stop the running work (Esc); a spectrum in progress keeps its earlier candidates",
                                      "SP_BrowserStop")
        self.act_cancel.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.retune_timer = QTimer(self, singleShot=True, interval=RETUNE_DELAY_MS)
        self.retune_timer.timeout.connect(self._retune)
        self.stale_libraries = False  # the libraries changed: every spectrum that ran is re-run with them
        self.stale_share = False  # the share of suspects present changed: every suspect rank 1 is re-ranked
        window.runs.retune_wanted.connect(self.retune_timer.start)
        # a run asked for while the model or libraries load: its entries, options and their statuses before it
        self.waiting: tuple[list[SpectrumEntry], dict, dict] | None = None
        self.loading_label = QLabel(objectName="loading_label")
        self.loading_label.hide()

    def follow_loading(self) -> None:
        """Follow the model and the libraries as they load (once the window has built its libraries)."""
        w = self.window
        w.runs.task_started.connect(lambda _kind: self.show_loading())
        w.model_changed.connect(lambda _bundle: self._ready_yet())
        w.libraries.controller.sources_changed.connect(self.show_loading)
        w.libraries.controller.finished_opening.connect(lambda _path: self._ready_yet())
        self.show_loading()

    def loading(self) -> tuple[str | None, list[str]]:
        """What is still loading: the model's folder name (None: no model loads) and the enabled libraries not yet
        open."""
        w = self.window
        model = w.models.model_dir.name if w.runs.task_kind == "model" else None
        libraries = [s.name for s in w.libraries.controller.sources if s.enabled and s.state in ("waiting", "opening")]
        return model, libraries

    def show_loading(self) -> None:
        model, libraries = self.loading()
        text = loading_text(model, libraries, self.waiting is not None)
        self.loading_label.setText(text)
        self.loading_label.setToolTip(loading_tip(model, libraries))
        self.loading_label.setVisible(bool(text))

    def _ready_yet(self) -> None:
        """The model or a library finished loading: a run that waited starts once nothing is left to load."""
        self.show_loading()
        model, libraries = self.loading()
        if self.waiting is None or model is not None or libraries or self.window.busy:
            return
        entries, options, _ = self.waiting
        self._release()
        self.run_entries(entries, **options)

    def _hold(self, entries: list[SpectrumEntry], options: dict) -> None:
        """A run waits: its entries show "queued" (their tooltip says for what) until it starts or is cancelled."""
        before = {} if self.waiting is None else self.waiting[2]
        for e in entries:
            if e.spectrum is not None and e.status not in (Status.RUNNING, Status.QUEUED):
                before[e.key] = (e.status, e.reason)
                e.status, e.reason = Status.QUEUED, WAIT_REASON
                self.window.spectra.entry_changed(e.key)
        self.waiting = (list(entries), options, before)
        self.show_loading()

    def _release(self) -> None:
        """The waiting run starts or is dropped: its entries show what they did before (those a model change reset
        since keep that)."""
        if self.waiting is None:
            return
        _, _, before = self.waiting
        self.waiting = None
        spectra = self.window.spectra
        for key, (status, reason) in before.items():
            e = spectra.entry(key)
            if e is not None and e.status == Status.QUEUED and e.reason == WAIT_REASON:
                e.status, e.reason = status, reason
                spectra.entry_changed(key)
        self.show_loading()

    def add_menu_actions(self, menu) -> None:
        for act in (self.act_run, self.act_run_all, self.act_cancel):
            menu.addAction(act)

    def update_actions(self) -> None:
        w = self.window
        busy, has_model = w.busy, w.bundle is not None
        loading_model = w.runs.task_kind == "model"  # a run asked for now waits for it
        runnable = (has_model or loading_model) and (not busy or loading_model) and \
            any(e.spectrum is not None for e in w.spectra.entries) and w.params_panel.error.isHidden()
        self.act_run.setEnabled(runnable)
        self.act_run_all.setEnabled(runnable)
        self.act_cancel.setEnabled(busy or w.loader is not None or self.waiting is not None)
        tip = "" if has_model else " (the model is loading: the run starts when it has)" if loading_model else \
            " (no model loaded: Model ▸ Open Model Folder…)"
        self.act_run.setToolTip("Elucidate structures for the selected spectra (Ctrl+R)" + tip)
        self.act_run_all.setToolTip("Elucidate structures for every spectrum (Ctrl+Shift+R)" + tip)

    # ------------------------------------------------------------------------------------------
    # starting and cancelling
    # ------------------------------------------------------------------------------------------
    def run_selected(self) -> None:
        self.run_entries(self.window.selected_entries())

    def run_all(self) -> None:
        """Every listed spectrum (a run's features, not their scans one by one)."""
        self.run_entries([e for e in self.window.spectra.entries if e.spectrum is not None])

    def run_best_formulas(self, k: int) -> bool:
        """Run the selected spectra for their best ``k`` formula candidates (the Formulas tab's button)."""
        return self.run_entries(self.window.selected_entries(), formulas=True, top_k=k)

    def run_entries(self, entries: list[SpectrumEntry], retune: bool = False, formulas: bool = False,
                    top_k: int | None = None, libraries_changed: bool = False) -> bool:
        """Run ``entries``: those without a formula for their best k formula candidates (``formulas``: every one
        of them; ``top_k``: k, the Formulas tab's by default). While the model or the libraries load, the run waits
        for them (said in the status bar) and starts when they are ready: True then too."""
        w = self.window
        model, libraries = self.loading()
        if not retune and (model is not None or libraries) and (w.bundle is not None or model is not None):
            self._hold(list(entries), {"formulas": formulas, "top_k": top_k, "libraries_changed": libraries_changed})
            w.status("The run starts when the model and the libraries have loaded (Esc cancels it).", 0)
            w.show_current()  # Cancel (Esc) drops the waiting run
            return True
        if w.bundle is None:
            w.show_message("No model is loaded: choose Model ▸ Open Model Folder… to pick a model bundle folder.")
            return False
        if w.busy:
            w.status("Busy: wait for the running work to finish, or cancel it with Esc.")
            return False
        try:
            params = w.params_panel.params()
        except MsgptError as e:
            w.show_message(f"Check the query parameters: {e}")
            return False
        if not retune and not w.edits.take_pending_edit(entries):
            return False
        if retune:  # a re-rank keeps the effort the spectra ran at: Effort applies to the next Run only
            efforts = {r.params.effort for e in entries for r in e.results()}
            if len(efforts) == 1:
                params = dataclasses.replace(params, effort=efforts.pop())
        started = w.runs.run(entries, params, retune=retune, top_k=top_k or w.formulas.top_k, formulas=formulas,
                             libraries_changed=libraries_changed)
        if started:
            w.first_candidates_s = None
        w.show_current()
        return started

    def cancel(self) -> None:
        if self.waiting is not None:
            self._release()
            self.window.status("The run that waited for the model and libraries was cancelled.")
            self.window.show_current()
        self.window.runs.cancel()

    # ------------------------------------------------------------------------------------------
    # re-ranking when the parameters change
    # ------------------------------------------------------------------------------------------
    def params_changed(self) -> None:
        """Debounced: a slider drag re-ranks the current spectrum once it rests (when it has results). Another share
        of the suspect lists' matches expected present re-ranks every spectrum whose rank 1 is a suspect (it draws
        nothing), so that the Confidence column holds one share."""
        w = self.window
        if w.bundle is not None and share_stale_runs(w.spectra.entries, w.query_params.suspects_present):
            self.stale_share = True
            self.retune_timer.start()
        e = w.current_entry()
        if w.bundle is not None and e is not None and e.has_results:
            self.retune_timer.start()

    def libraries_changed(self) -> None:
        """Other libraries are on: every spectrum that ran is re-run with them, only what they change: its samples
        stay (re-ranked, nothing drawn again), the formulas the libraries add (mass track, identification
        formula) are worked out again, and the status bar says what ran. Busy: once the running work ends."""
        self.stale_libraries = True
        self.retune_timer.start()

    def _retune(self) -> None:
        """Re-run the current spectrum (its formula runs) with the new parameters or libraries (draws only what is
        missing)."""
        w = self.window
        passes = (("stale_libraries", lambda: stale_entries(w.spectra.entries, w.runs.libraries_current), True),
                  ("stale_share", lambda: share_stale_runs(w.spectra.entries, w.query_params.suspects_present), False))
        for flag, find, libraries_changed in passes:  # what must be re-run beyond the current spectrum
            if getattr(self, flag):
                if w.busy:
                    w.runs.defer_retune()
                    return
                setattr(self, flag, False)
                stale = find()
                if stale:
                    self.run_entries(stale, retune=True, libraries_changed=libraries_changed)
                    return
        e = w.current_entry()
        if e is None or not e.has_results:
            return
        ran = [r for r in e.formula_runs if r.result is not None] or [e]
        same = all(r.params == dataclasses.replace(w.query_params, effort=r.params.effort) for r in e.results())
        if same and all(w.runs.libraries_current(r) for r in ran):
            return
        if w.busy:
            w.runs.defer_retune()
            return
        self.run_entries(ran, retune=True)

    def shutdown(self) -> None:
        self.retune_timer.stop()
