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

from engine.adducts import precursor_mz_from_neutral
from engine.annotate import ION_TYPES, annotate_spectrum
from engine.errors import MsgptError
from engine.formula import formula_mass, normalize_formula, parse_formula
from engine.spectrum import Spectrum, check_formula_matches_precursor

from .plotting import plot_spectrum

COMMON_ADDUCTS = ("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M+K]+", "[M-H2O+H]+", "[M-H]-", "[M+Cl]-", "[M+HCOO]-")


def check_formula_adduct(spectrum: Spectrum, formula: str, adduct: str) -> tuple[Spectrum | None, str, bool]:
    """Validate a typed formula/adduct against ``spectrum``'s precursor m/z.

    Returns ``(new spectrum or None, message, ok)``; the message gives the calculated m/z and the
    mass error (or what is wrong and how to fix it).
    """
    formula, adduct = formula.strip(), adduct.strip()
    if not formula or not adduct:
        missing = " and ".join(w for w, v in (("formula", formula), ("adduct", adduct)) if not v)
        return None, f"Enter the {missing} to run this spectrum", False
    try:
        hill = normalize_formula(formula)
        new = spectrum.with_adduct(adduct, check=False).with_formula(hill, check=False)
        expected = precursor_mz_from_neutral(formula_mass(parse_formula(hill)), new.adduct)
    except MsgptError as e:
        return None, str(e), False
    delta = spectrum.precursor_mz - expected
    ppm = delta / expected * 1e6
    text = f"calc. m/z {expected:.4f} (Δ {ppm:+.1f} ppm)"
    try:
        check_formula_matches_precursor(new)
    except MsgptError:
        return None, text + ": too far from the precursor m/z; check the formula and adduct", False
    return new, text, True


class FormulaEditor(QWidget):
    """Formula + adduct of the current spectrum; Apply only when they fit the precursor m/z."""

    applied = Signal(object)  # the new Spectrum
    reset_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.spectrum: Spectrum | None = None
        self.formula = QLineEdit(placeholderText="e.g. C10H10O3")
        self.formula.setToolTip("Neutral molecular formula of the compound (Hill notation or any order)")
        self.formula.setMaximumWidth(150)
        self.adduct = QComboBox(editable=True)
        self.adduct.addItems(list(COMMON_ADDUCTS) + [a for a in ION_TYPES if a not in COMMON_ADDUCTS])
        self.adduct.setToolTip("Precursor ion type, e.g. [M+H]+ or [M+Na]+")
        self.adduct.setMinimumContentsLength(11)
        self.apply = QPushButton("Apply")
        self.apply.setToolTip("Use this formula and adduct for the spectrum (its earlier candidates are dropped)")
        self.reset = QPushButton("Reset")
        self.reset.setToolTip("Go back to the formula and adduct given in the file")
        self.message = QLabel()
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Formula"))
        row.addWidget(self.formula)
        row.addWidget(QLabel("Adduct"))
        row.addWidget(self.adduct)
        row.addWidget(self.apply)
        row.addWidget(self.reset)
        row.addWidget(self.message, 1)
        self.formula.textChanged.connect(self._validate)
        self.adduct.currentTextChanged.connect(self._validate)
        self.formula.returnPressed.connect(self._apply)
        self.apply.clicked.connect(self._apply)
        self.reset.clicked.connect(self.reset_requested)
        self._new: Spectrum | None = None
        self.set_spectrum(None)

    def set_spectrum(self, spectrum: Spectrum | None, overridden: bool = False, editable: bool = True) -> None:
        self.spectrum = spectrum
        for w in (self.formula, self.adduct):
            w.blockSignals(True)
        self.formula.setText(spectrum.formula or "" if spectrum else "")
        self.adduct.setEditText(spectrum.adduct or "" if spectrum else "")
        for w in (self.formula, self.adduct):
            w.blockSignals(False)
        self.formula.setEnabled(spectrum is not None and editable)
        self.adduct.setEnabled(spectrum is not None and editable)
        self.reset.setEnabled(overridden and editable)
        self._editable = editable
        self._validate()

    def _validate(self) -> None:
        self._new = None
        if self.spectrum is None:
            self.apply.setEnabled(False)
            self.message.setText("")
            return
        new, text, ok = check_formula_adduct(self.spectrum, self.formula.text(), self.adduct.currentText())
        changed = ok and (new.formula != self.spectrum.formula or new.adduct != self.spectrum.adduct)
        self._new = new if changed else None
        self.apply.setEnabled(bool(changed and self._editable))
        color = "#1b7f3b" if ok else "#b3261e"
        self.message.setText(f'<span style="color:{color}">{_html(text)}</span>')
        self.message.setToolTip(text if not ok else f"{self.adduct.currentText()} of {self.formula.text()}: {text}; "
                                "the precursor m/z in the file is " f"{self.spectrum.precursor_mz:.4f}")

    def _apply(self) -> None:
        if self._new is not None and self.apply.isEnabled():
            self.applied.emit(self._new)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SpectrumCanvas(QWidget):
    """Matplotlib figure + navigation toolbar (zoom, pan, save) for one spectrum."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.figure = Figure(figsize=(6, 3), dpi=100, layout="constrained")
        self.canvas = FigureCanvasQTAgg(self.figure)
        self.canvas.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.canvas.setMinimumHeight(160)
        self.toolbar = NavigationToolbar2QT(self.canvas, self)
        self.toolbar.setIconSize(self.toolbar.iconSize() * 0.8)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.toolbar)
        layout.addWidget(self.canvas, 1)
        self.ax = self.figure.add_subplot()
        self.annotation = None
        self.spectrum = None
        self.show_spectrum(None)

    def show_spectrum(self, spectrum: Spectrum | None) -> None:
        self.spectrum = spectrum
        self.ax.clear()
        self.annotation = None
        if spectrum is None:
            self.ax.set_axis_off()
            self.ax.text(0.5, 0.5, "Open spectra (Ctrl+O, or drop MGF / mzML files here)\nand select one",
                         ha="center", va="center", color="#777777", transform=self.ax.transAxes)
        else:
            self.ax.set_axis_on()
            if spectrum.formula and spectrum.adduct:
                try:
                    self.annotation = annotate_spectrum(spectrum)
                except MsgptError:
                    self.annotation = None  # e.g. an adduct the annotator does not know: plain peaks
            plot_spectrum(spectrum, self.annotation, ax=self.ax, fontsize=7.5)
        self.toolbar.update()  # forget the zoom history of the previous spectrum
        self.canvas.draw_idle()


class SpectrumPanel(QWidget):
    """Header line, formula editor and the plot of the current spectrum."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.header = QLabel()
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.header.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.editor = FormulaEditor()
        self.canvas = SpectrumCanvas()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 0)
        layout.setSpacing(4)
        layout.addWidget(self.header)
        layout.addWidget(self.editor)
        layout.addWidget(self.canvas, 1)
        self.show_entry(None)

    def show_entry(self, entry, editable: bool = True) -> None:
        s = entry.spectrum if entry is not None else None
        if entry is None:
            self.header.setText("<b>No spectrum selected</b>")
        elif s is None:
            self.header.setText(f"<b>{_html(entry.id)}</b> — skipped: {_html(entry.reason)}")
        else:
            bits = [f"<b>{_html(s.id)}</b>"]
            name = s.metadata.get("name")
            if name:
                bits.append(_html(name))
            bits.append(f"precursor m/z {s.precursor_mz:.4f}")
            if s.retention_time is not None:
                bits.append(f"RT {s.retention_time / 60:.2f} min")
            bits.append(f"{s.n_peaks} peaks")
            self.header.setText(" · ".join(bits))
            self.header.setToolTip(f"{s.source}, record {s.index + 1}")
        self.editor.set_spectrum(s, overridden=bool(entry and entry.overridden), editable=editable)
        if s is not self.canvas.spectrum or s is None:  # a status change does not re-draw the plot
            self.canvas.show_spectrum(s)
