"""What the user sets on spectra: the formula, adduct and precursor m/z typed below the current spectrum
(applied to it, or to every selected spectrum where it fits), going back to the file's values, and a formula
candidate picked in the Formulas tab. Run takes what was typed and not applied yet, when it is valid.

:class:`EditController` is wired to the editor of :class:`~msgpt_gui.spectrum_view.SpectrumPanel`; the checks
themselves are Qt-free (:mod:`msgpt_gui.logic.editing`).
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from PySide6.QtCore import QObject

from .logic.editing import ERROR, apply_formula
from .logic.entries import SpectrumEntry, Status, format_mz
from .run_controller import plural


class EditController(QObject):
    """Edits of the spectra list's entries; see the module notes."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        editor = window.spectrum_panel.editor
        editor.applied.connect(self._formula_applied)
        editor.applied_to_selected.connect(self.apply_to_selected)
        editor.reset_requested.connect(self._formula_reset)
        window.spectra_view.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())

    def _changed(self) -> None:
        """The list's title and the current spectrum's panels follow an edit."""
        self.window.spectra_list.update_title()
        self.window.show_current()

    def _formula_applied(self, spectrum) -> None:
        w = self.window
        e = w.current_entry()
        if e is None or e.status in (Status.RUNNING, Status.QUEUED):
            return
        if not e.take_formula_run(spectrum):  # a formula that ran already keeps its candidates
            e.spectrum = spectrum
            e.reset_results()
        w.spectra.entry_changed(e.key)
        self._changed()
        blocked = e.blocker(w.spectra.supported_adducts)
        what = f"formula {spectrum.formula or '—'}, adduct {spectrum.adduct or '—'}, precursor m/z {format_mz(spectrum)}"
        w.status(f"{e.id}: {what}. " + (f"Still {blocked[0]}." if blocked else "Press Run (Ctrl+R)."))

    def _formula_reset(self) -> None:
        e = self.window.current_entry()
        if e is None or not e.overridden or e.status in (Status.RUNNING, Status.QUEUED):
            return
        e.reset_results()
        e.spectrum = e.original
        if e.spectrum is None:  # a skipped record again
            e.status, e.reason = Status.SKIPPED, e.skipped.reason
        else:
            e.status, e.reason = Status.NOT_RUN, ""
        self.window.spectra.entry_changed(e.key)
        self._changed()

    def pick_formula(self, candidate) -> bool:
        """Set a formula candidate (Formulas tab) on the current spectrum, as if typed and applied."""
        from engine.formulas.candidates import with_formula_candidate

        e = self.window.current_entry()
        if e is None or e.spectrum is None or e.status in (Status.RUNNING, Status.QUEUED):
            return False
        self._formula_applied(with_formula_candidate(e.formula_base(), candidate))
        return True

    def _selection_changed(self) -> None:
        w = self.window
        w.spectrum_panel.editor.set_selection_count(len(w.spectra_view.selectionModel().selectedRows()))

    def apply_to_selected(self, formula: str, adduct: str) -> int:
        """One formula and adduct for every selected spectrum whose precursor m/z fits; returns how many
        changed. Spectra that do not fit (or are running) keep theirs, and the message says why."""
        w = self.window
        entries = [e for e in w.selected_entries()
                   if e.spectrum is not None and e.status not in (Status.RUNNING, Status.QUEUED)]
        outcomes = apply_formula([e.spectrum for e in entries], formula, adduct, w.spectra.supported_adducts)
        changed, problems = 0, {}
        for e, outcome in zip(entries, outcomes):
            if outcome.spectrum is None:
                problems.setdefault(outcome.problem, []).append(e.display_id)
                continue
            if outcome.spectrum != e.spectrum:
                e.spectrum = outcome.spectrum
                e.reset_results()
                w.spectra.entry_changed(e.key)
                changed += 1
        not_listed = len(w.selected_entries()) - len(entries)
        what = f"{formula} {adduct}".strip() if formula else f"adduct {adduct}"
        text = f"{what} applied to {plural(changed)}"
        if problems:
            text += f"; {sum(map(len, problems.values()))} kept their own:"
            for problem, ids in problems.items():
                text += f"\n  • {', '.join(ids[:5])}{' …' if len(ids) > 5 else ''}: {problem}"
        if not_listed:
            text += f"\n{not_listed} selected record(s) without a spectrum (or running) were left alone."
        self._changed()
        if problems or not_listed:
            w.show_message(text, "warning" if not changed else "info")
        else:
            w.status(text + ". Press Run (Ctrl+R).")
        return changed

    def take_pending_edit(self, entries: list[SpectrumEntry]) -> bool:
        """Run applies what was typed below the current spectrum and not applied, when it is valid;
        when it is wrong, nothing runs and the message says why (what was typed stays)."""
        w = self.window
        e = w.current_entry()
        pending = w.spectrum_panel.editor.pending()
        if e is None or pending is None or e not in entries:
            return True
        if pending.appliable:
            self._formula_applied(pending.spectrum)
            return True
        if pending.level == ERROR:
            w.show_message(f"Not run: what is typed below {e.display_id} cannot be applied: {pending.message}. "
                           "Correct it, or press Reset to go back to the file's values.")
            return False
        return True
