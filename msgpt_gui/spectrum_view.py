"""The spectrum panel: header, formula/adduct editor (validated as typed) and the embedded plot."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg, NavigationToolbar2QT
from matplotlib.figure import Figure
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from engine.errors import MsgptError
from engine.spectra.annotate import ION_TYPES, annotate_spectrum
from engine.spectra.spectrum import NO_FRAGMENTS_NOTE, SkippedRecord, Spectrum

from .logic.editing import ERROR, INCOMPLETE, OK, EditCheck, check_edit
from .logic.entries import format_mz
from .logic.formulas import readiness
from .logic.plotting import plot_spectrum

COMMON_ADDUCTS = ("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M+K]+", "[M-H2O+H]+", "[M-H]-", "[M+Cl]-", "[M+HCOO]-")
LEVEL_COLORS = {OK: "#1b7f3b", INCOMPLETE: "#a15c00", ERROR: "#b3261e"}


class FormulaEditor(QWidget):
    """Precursor m/z, formula and adduct of the current spectrum, checked as typed.

    Apply takes what is valid for the current spectrum; Apply to selected takes the formula and
    adduct for every selected spectrum (each checked against its own precursor m/z). Only the ion
    types of the loaded model are offered; another one typed is refused with the reason.
    """

    applied = Signal(object)  # the new Spectrum of the current entry
    applied_to_selected = Signal(str, str)  # formula, adduct
    reset_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.base: Spectrum | SkippedRecord | None = None
        self.supported_adducts: tuple[str, ...] | None = None
        self.check: EditCheck | None = None
        self._filled = ("", "", "")
        self._editable = True
        self._n_selected = 0
        self.precursor = QLineEdit(placeholderText="m/z")
        self.precursor.setToolTip("Precursor m/z of the ion that was fragmented (PEPMASS). Type it when the file "
                                  "gives none; the formula is checked against it")
        self.precursor.setFixedWidth(self.precursor.fontMetrics().horizontalAdvance("0000.00000") + 16)
        self.formula = QLineEdit(placeholderText="e.g. C10H10O3")
        self.formula.setToolTip("Neutral molecular formula of the compound (Hill notation or any order)")
        self.formula.setMaximumWidth(150)
        self.adduct = QComboBox(editable=True)
        self.adduct.setMinimumContentsLength(11)
        self.apply = QPushButton("Apply")
        self.apply.setToolTip("Use these values for this spectrum (its earlier candidates are dropped). Run "
                              "(Ctrl+R) applies valid values typed here, too")
        self.apply_selected = QPushButton("Apply to selected")
        self.apply_selected.setToolTip("Use this formula and adduct for every selected spectrum whose precursor "
                                       "m/z fits them (an empty formula sets the adduct only)")
        self.reset = QPushButton("Reset")
        self.reset.setToolTip("Go back to the values given in the file")
        self.message = QLabel(wordWrap=True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        fields = QHBoxLayout()
        fields.setContentsMargins(0, 0, 0, 0)
        for label, widget in (("Precursor m/z", self.precursor), ("Formula", self.formula), ("Adduct", self.adduct)):
            fields.addWidget(QLabel(label))
            fields.addWidget(widget)
        fields.addStretch(1)
        actions = QHBoxLayout()
        actions.setContentsMargins(0, 0, 0, 0)
        actions.addWidget(self.apply)
        actions.addWidget(self.apply_selected)
        actions.addWidget(self.reset)
        actions.addWidget(self.message, 1)  # the rest of the line: a long hint wraps instead of being cut
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(fields)
        layout.addLayout(actions)
        self.precursor.textChanged.connect(self._validate)
        self.formula.textChanged.connect(self._validate)
        self.adduct.currentTextChanged.connect(self._validate)
        self.precursor.returnPressed.connect(self._apply)
        self.formula.returnPressed.connect(self._apply)
        self.apply.clicked.connect(self._apply)
        self.apply_selected.clicked.connect(self._apply_selected)
        self.reset.clicked.connect(self.reset_requested)
        self.set_supported_adducts(None)
        self.set_base(None)

    # -- what is shown
    def set_supported_adducts(self, adducts) -> None:
        """The loaded model's ion types (None: no model; the common ones are offered)."""
        self.supported_adducts = tuple(adducts) if adducts is not None else None
        offered = list(self.supported_adducts) if self.supported_adducts is not None else \
            list(COMMON_ADDUCTS) + [a for a in ION_TYPES if a not in COMMON_ADDUCTS]
        text = self.adduct.currentText()
        self.adduct.blockSignals(True)
        self.adduct.clear()
        self.adduct.addItems(offered)
        self.adduct.setEditText(text)
        self.adduct.blockSignals(False)
        ions = ", ".join(offered) if self.supported_adducts is not None else "no model loaded"
        self.adduct.setToolTip(f"Precursor ion type, e.g. [M+H]+ or [M+Na]+. This model supports: {ions}")
        self._validate()

    def set_base(self, base: Spectrum | SkippedRecord | None, overridden: bool = False, editable: bool = True,
                 keep_typed: bool = False) -> None:
        """Show ``base`` (a spectrum, or a skipped record that kept its peaks). ``keep_typed``: the same
        entry again (its status changed): what the user typed stays."""
        typed = keep_typed and base is self.base and self.dirty
        self.base = base
        self._editable = editable
        if not typed:
            s = base if isinstance(base, Spectrum) else None
            values = (format_mz(s) if s else "", (s.formula or "") if s else "", (s.adduct or "") if s else "")
            for w in (self.precursor, self.formula, self.adduct):
                w.blockSignals(True)
            self.precursor.setText(values[0])
            self.formula.setText(values[1])
            self.adduct.setEditText(values[2])
            for w in (self.precursor, self.formula, self.adduct):
                w.blockSignals(False)
            self._filled = values
        self.precursor.setPlaceholderText("m/z" if isinstance(base, Spectrum) else "type it")
        for w in (self.precursor, self.formula, self.adduct):
            w.setEnabled(base is not None and editable)
        self.reset.setEnabled(overridden and editable)
        self._validate()

    def set_selection_count(self, n: int) -> None:
        self._n_selected = n
        self._update_buttons()

    @property
    def dirty(self) -> bool:
        """The user typed something that is not applied."""
        return self._texts() != self._filled

    def pending(self) -> EditCheck | None:
        """The check of what was typed and not applied (None when nothing was)."""
        return self.check if self.base is not None and self.dirty else None

    # -- reactions
    def _texts(self) -> tuple[str, str, str]:
        return self.precursor.text().strip(), self.formula.text().strip(), self.adduct.currentText().strip()

    def _validate(self) -> None:
        if self.base is None:
            self.check = None
            self.message.setText("")
            self._update_buttons()
            return
        self.check = check_edit(self.base, *self._texts(), self.supported_adducts)
        color = LEVEL_COLORS[self.check.level]
        text = tip = self.check.message
        s = self.check.spectrum
        if self.check.level == INCOMPLETE and s is not None and readiness(s, self.supported_adducts) is None:
            text = "No formula: Run takes the best candidates (Formulas tab)" if not s.formula else \
                "No adduct: Run takes the best ion types (Formulas tab)"
            color = LEVEL_COLORS[OK]
            tip = (f"{tip}, or Run ranks the formula and ion type candidates and elucidates the best of them; the "
                   "Formulas tab lists them (pick one there to run that one)")
        self.message.setText(f'<span style="color:{color}">{_html(text)}</span>')
        if self.check.level == OK and isinstance(self.base, Spectrum):
            tip = (f"{self.adduct.currentText()} of {self.formula.text()}: {tip}; the precursor m/z in the file is "
                   f"{format_mz(self.base)}")
        self.message.setToolTip(tip)
        self._update_buttons()

    def _update_buttons(self) -> None:
        check = self.check
        self.apply.setEnabled(bool(self._editable and check is not None and check.appliable))
        adduct = self._texts()[2]
        self.apply_selected.setEnabled(bool(self._editable and self._n_selected > 1 and adduct))

    def _apply(self) -> None:
        if self.check is not None and self.check.appliable and self.apply.isEnabled():
            self.applied.emit(self.check.spectrum)

    def _apply_selected(self) -> None:
        if self.apply_selected.isEnabled():
            _, formula, adduct = self._texts()
            self.applied_to_selected.emit(formula, adduct)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SpectrumToolbar(NavigationToolbar2QT):
    """matplotlib's toolbar (zoom, pan, save), standing upright beside the plot so that the plot keeps its height;
    the cursor's m/z and intensity show in :attr:`readout`, a label over the plot's top right corner. No "configure
    subplots" button (the layout is constrained), so that zoom, pan and save fit the plot's height."""

    toolitems = [item for item in NavigationToolbar2QT.toolitems if item[0] != "Subplots"]

    def __init__(self, canvas, parent=None):
        super().__init__(canvas, parent, coordinates=False)
        self.setOrientation(Qt.Orientation.Vertical)
        self.readout = QLabel(canvas)
        self.readout.setStyleSheet("color: #444444; background: rgba(255, 255, 255, 200); padding: 0px 3px;")
        self.readout.hide()

    def set_message(self, s) -> None:
        text = " ".join(str(s).split())
        self.readout.setText(text)
        self.readout.setVisible(bool(text))
        if text:
            self.readout.adjustSize()
            self.readout.move(max(self.canvas.width() - self.readout.width() - 4, 0), 2)


class SpectrumCanvas(QWidget):
    """Matplotlib figure with its navigation toolbar (zoom, pan, save) at its left, for one spectrum."""

    MIN_HEIGHT = 130  # px: the plot stays readable at the window's smallest (issue #54; 150 and more at 1280×800)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.figure = Figure(figsize=(6, 3), dpi=100, layout="constrained")
        self.canvas = FigureCanvasQTAgg(self.figure)
        self.canvas.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.canvas.setMinimumHeight(self.MIN_HEIGHT)
        self.toolbar = SpectrumToolbar(self.canvas, self)
        self.toolbar.setIconSize(self.toolbar.iconSize() * 0.7)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.toolbar)
        layout.addWidget(self.canvas, 1)
        self.ax = self.figure.add_subplot()
        self.annotation = None
        self.spectrum = None
        self.show_spectrum(None)

    def show_spectrum(self, spectrum: Spectrum | SkippedRecord | None) -> None:
        """Plot a spectrum, or the peaks of a skipped record (no precursor marked when it has none)."""
        self.spectrum = spectrum
        self.ax.clear()
        self.annotation = None
        if spectrum is None:
            self.ax.set_axis_off()
            self.ax.text(0.5, 0.5, "Open spectra (Ctrl+O, or drop MGF / mzML files here)\nand select one",
                         ha="center", va="center", color="#777777", transform=self.ax.transAxes)
        else:
            self.ax.set_axis_on()
            if isinstance(spectrum, Spectrum) and spectrum.formula and spectrum.adduct:
                try:
                    self.annotation = annotate_spectrum(spectrum)
                except MsgptError:
                    self.annotation = None  # e.g. an adduct the annotator does not know: plain peaks
            plot_spectrum(spectrum, self.annotation, ax=self.ax, fontsize=7.5)
        self.toolbar.update()  # forget the zoom history of the previous spectrum
        self.canvas.draw_idle()


class SpectrumPanel(QWidget):
    """Header line, the "no fragments" flag, the editor and the plot of the current spectrum."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.header = QLabel()
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.header.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.header.setWordWrap(True)  # a long ID or skip reason wraps instead of being cut
        self.flag = QLabel(wordWrap=True)
        self.flag.setTextFormat(Qt.TextFormat.PlainText)
        self.flag.setStyleSheet("color: #a15c00")
        self.editor = FormulaEditor()
        self.canvas = SpectrumCanvas()
        self.key: int | None = None  # the entry shown
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 0)
        layout.setSpacing(4)
        layout.addWidget(self.header)
        layout.addWidget(self.flag)
        layout.addWidget(self.editor)
        layout.addWidget(self.canvas, 1)
        self.show_entry(None)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_header()

    def _fit_header(self) -> None:
        """The header wraps (a long ID or reason): it asks for the lines it needs at this width, so that the window's
        splitters give them room instead of taking it from the plot."""
        width = self.header.width() or self.width() - 12
        self.header.setMinimumHeight(max(self.header.heightForWidth(width), self.header.fontMetrics().height()))

    def show_entry(self, entry, editable: bool = True) -> None:
        s = entry.spectrum if entry is not None else None
        record = entry.skipped if entry is not None and s is None and entry.plottable else None
        if entry is None:
            self.header.setText("<b>No spectrum selected</b>")
            self.header.setToolTip("")
        else:
            bits = [f"<b>{_html(entry.id)}</b>"]
            if entry.name:
                bits.append(_html(entry.name))
            if s is not None:
                bits.append(f"precursor m/z {format_mz(s)}")
            if entry.retention_time is not None:
                bits.append(f"RT {entry.retention_time / 60:.2f} min")
            if entry.n_scans is not None and entry.n_scans > 1:
                lo, hi = entry.rt_range or (entry.retention_time, entry.retention_time)
                bits.append(f"consensus of {entry.n_scans} scans"
                            + (f" ({lo / 60:.2f}–{hi / 60:.2f} min)" if lo is not None else ""))
            if entry.n_peaks is not None:
                bits.append(f"{entry.n_peaks} peaks")
            text = " · ".join(bits)
            if s is None:
                text += f" — <span style='color:#a15c00'>skipped: {_html(entry.reason)}</span>"
            self.header.setText(text)
            where = f"{entry.source}, record {entry.record_index + 1}"
            if entry.feature is not None:
                where = (f"{entry.source}: precursor feature {entry.feature.index + 1}, "
                         f"{entry.feature.spectrum.metadata.get('merged', 'one scan')}; precursor m/z from "
                         f"{entry.feature.spectrum.metadata.get('precursor_source', 'the scans')}")
            self.header.setToolTip(where)
        self._fit_header()
        no_fragments = entry is not None and entry.no_fragments
        self.flag.setText(f"⚠ {NO_FRAGMENTS_NOTE[0].upper()}{NO_FRAGMENTS_NOTE[1:]} (no peak below precursor m/z "
                          "− 2 Da): the spectrum holds only the precursor" if no_fragments else "")
        self.flag.setVisible(no_fragments)
        same = entry is not None and entry.key == self.key
        self.key = entry.key if entry is not None else None
        self.editor.set_base(s if s is not None else record, overridden=bool(entry and entry.overridden),
                             editable=editable, keep_typed=same)
        shown = s if s is not None else record
        if shown is not self.canvas.spectrum or shown is None:  # a status change does not re-draw the plot
            self.canvas.show_spectrum(shown)
