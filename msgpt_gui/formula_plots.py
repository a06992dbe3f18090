"""The Formulas tab's isotope plot: the precursor's MS1 isotope peaks beside those of the selected formula
(:class:`IsotopeCanvas`; the m/z recalibration plot is :mod:`msgpt_gui.recalibration_view`'s)."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import numpy as np
from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg
from matplotlib.figure import Figure
from PySide6.QtWidgets import QSizePolicy, QVBoxLayout, QWidget

from engine.chem.adducts import parse_adduct
from engine.chem.formula import parse_formula
from engine.formulas.candidates import FormulaCandidate
from engine.spectra.isotopes import IsotopeMatch, isotope_pattern

from .logic.plotting import plot_isotopes


class IsotopeCanvas(QWidget):
    """The precursor's MS1 isotope peaks beside the theoretical ones of a formula (:func:`plot_isotopes`)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.figure = Figure(figsize=(3.2, 2.4), dpi=100, layout="constrained")
        self.canvas = FigureCanvasQTAgg(self.figure)
        self.canvas.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.canvas.setMinimumSize(220, 120)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.canvas)
        self.ax = self.figure.add_subplot()
        self.match: IsotopeMatch | None = None
        self.show_match(None, message="Select a formula candidate")

    def show_match(self, match: IsotopeMatch | None, survey=None, label: str = "theoretical", title: str = "",
                   message: str = "") -> None:
        self.match = match
        self.ax.clear()
        if match is None:
            self.ax.set_axis_off()
            self.ax.text(0.5, 0.5, message, ha="center", va="center", color="#777777", wrap=True,
                         transform=self.ax.transAxes, fontsize=8)
        else:
            self.ax.set_axis_on()
            # no legend over the bars of a small plot: the title names the formula, the tooltip the colours
            plot_isotopes(match, ax=self.ax, survey=survey, label=label, fontsize=7.5, legend=False,
                          title=" · ".join(t for t in (label if label != "theoretical" else "", title) if t))
            if message:
                self.ax.text(0.02, 0.97, message, ha="left", va="top", color="#a15c00", fontsize=7,
                             transform=self.ax.transAxes)
        self.canvas.draw_idle()


def theoretical_only(c: FormulaCandidate, n_peaks: int) -> IsotopeMatch:
    """A candidate's theoretical isotope peaks with nothing observed (no survey scan)."""
    adduct = parse_adduct(c.ion_type)
    mz, abundance = isotope_pattern(adduct.ion_counts(parse_formula(c.formula)), n_peaks, adduct.charge)
    nothing = np.full(len(mz), np.nan)
    return IsotopeMatch(theoretical_mz=mz, theoretical=abundance, observed_mz=nothing, observed=nothing,
                        detectable=np.ones(len(mz), dtype=bool), score=0.0)
