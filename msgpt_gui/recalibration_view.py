"""The m/z recalibration in the Formulas tab: its setting (auto / off / a fixed correction, as ``msgpt predict
--recalibrate``) and the plot of a run's m/z error against m/z (:func:`msgpt_gui.logic.plotting.plot_recalibration`).

Both are parts of :class:`~msgpt_gui.formulas_view.FormulaPanel`; what the setting means and how a run's
recalibration is measured and kept is in :mod:`msgpt_gui.logic.formulas`.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg
from matplotlib.figure import Figure
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from .logic.formulas import RECALIBRATION_MODES, RecalibrationChoice
from .logic.plotting import plot_recalibration, recalibration_caption

MODE_TIPS = {
    "auto": "Measure each run's m/z error from its features the first time one is ranked (as msgpt predict "
            "--recalibrate auto) and take it out before formulas are ranked",
    "off": "Rank formulas on the m/z as measured",
    "fixed": "Take out this correction from every spectrum ranked: ppm at m/z 500 and ppm per 1000 m/z (as msgpt "
             "predict --recalibrate PPM,SLOPE)",
}


class RecalibrationSettings(QWidget):
    """Mode (auto / off / fixed) and, for fixed, the correction; ``changed`` when the user edits it."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.mode = QComboBox()
        for i, mode in enumerate(RECALIBRATION_MODES):
            self.mode.addItem(mode)
            self.mode.setItemData(i, MODE_TIPS[mode], Qt.ItemDataRole.ToolTipRole)
        self.mode.setToolTip("m/z recalibration of the spectra formulas are ranked for: " + "; ".join(
            f"{m}: {tip}" for m, tip in MODE_TIPS.items()))
        self.offset = QDoubleSpinBox(minimum=-200.0, maximum=200.0, singleStep=0.5, decimals=1,
                                     suffix=" ppm at m/z 500")
        self.offset.setToolTip("Fixed correction: the m/z error at m/z 500, ppm (measured − true)")
        self.slope = QDoubleSpinBox(minimum=-200.0, maximum=200.0, singleStep=0.5, decimals=1,
                                    suffix=" ppm per 1000 m/z")
        self.slope.setToolTip("Fixed correction: how the error changes with m/z, ppm per 1000 m/z")
        self.mode.activated.connect(lambda *_: self._edited())
        self.offset.editingFinished.connect(self._edited)
        self.slope.editingFinished.connect(self._edited)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("m/z recalibration"))
        for widget in (self.mode, self.offset, self.slope):
            layout.addWidget(widget)
        layout.addStretch(1)
        self._enable()

    def choice(self) -> RecalibrationChoice:
        """What the widgets say (raises ConfigError for a correction out of range)."""
        return RecalibrationChoice(self.mode.currentText(), self.offset.value(), self.slope.value())

    def set_choice(self, choice: RecalibrationChoice) -> None:
        """Show ``choice`` (no signal)."""
        for widget in (self.mode, self.offset, self.slope):
            widget.blockSignals(True)
        self.mode.setCurrentText(choice.mode)
        self.offset.setValue(choice.offset_ppm)
        self.slope.setValue(choice.slope_ppm)
        for widget in (self.mode, self.offset, self.slope):
            widget.blockSignals(False)
        self._enable()

    def _enable(self) -> None:
        fixed = self.mode.currentText() == "fixed"
        self.offset.setEnabled(fixed)
        self.slope.setEnabled(fixed)

    def _edited(self) -> None:
        self._enable()
        self.changed.emit()


class RecalibrationCanvas(QWidget):
    """A run's m/z error against m/z with the correction taken out (:func:`plot_recalibration`), its caption (points,
    correction, scatter) in a label above the plot, so that a small plot keeps its height for the data."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.caption = QLabel(wordWrap=True)
        self.caption.setTextFormat(Qt.TextFormat.PlainText)
        self.caption.setStyleSheet("color: #333333")
        font = self.caption.font()
        font.setPointSizeF(max(font.pointSizeF() * 0.9, 7.0))
        self.caption.setFont(font)
        self.figure = Figure(figsize=(3.2, 2.2), dpi=100, layout="constrained")
        self.canvas = FigureCanvasQTAgg(self.figure)
        self.canvas.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.canvas.setMinimumSize(220, 110)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(self.caption)
        layout.addWidget(self.canvas, 1)
        self.ax = self.figure.add_subplot()
        self.recalibration = None
        self.setToolTip("m/z error of the run's precursors (red) and of the fragment peaks their formulas explain "
                        "(grey) against m/z, and the correction taken out before formulas are ranked (blue)")

    def show_recalibration(self, recal, title: str = "") -> None:
        """Plot ``recal`` (None: hide the plot; a spectrum without a run recalibration)."""
        self.recalibration = recal
        self.setVisible(recal is not None)
        if recal is None:
            return
        self.caption.setText(f"{title or 'm/z recalibration'}: " + "; ".join(recalibration_caption(recal)))
        self.ax.clear()
        plot_recalibration(recal, ax=self.ax, fontsize=7.0, legend=False, caption=False)
        self.ax.set_ylabel("error (ppm)", fontsize=7.0)  # the caption says of what: fits a plot 130 px tall
        self.canvas.draw_idle()
