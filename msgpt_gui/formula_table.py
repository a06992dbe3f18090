"""The Formulas tab's table model: the rows of a formula table (:class:`FormulaTableModel`), greyed out where the
model cannot run the ion type, highlighted where it is the spectrum's formula (see :mod:`msgpt_gui.formulas_view`)."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont

from engine.formulas.candidates import FormulaCandidate

from .logic.formulas import TERM_COLUMNS
from .models import DISPLAY, SORT_ROLE, ColumnsModel

UNSUPPORTED_COLOR = "#9a9a9a"
CURRENT_BACKGROUND = "#e4eefb"


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class FormulaTableModel(ColumnsModel):
    """The rows of a :class:`~engine.formulas.candidates.FormulaTable`: rank, formula, ion type, mass error, the
    score terms, total score, probability; greyed out where the model cannot run the ion type, highlighted where
    it is the spectrum's formula, and what Run made of the formulas it took."""

    FIXED = ("Rank", "Formula", "Ion type", "m/z", "ppm", "RDBE")
    TAIL = ("Score", "Prob.", "Explained", "Isomers", "Run")
    COLUMNS = FIXED + tuple(label for _, label, _ in TERM_COLUMNS) + TAIL
    RANK, FORMULA, ION, MZ, PPM, RDBE = range(6)
    FIRST_TERM = len(FIXED)
    SCORE, PROB, EXPLAINED, ISOMERS, RUN = range(len(FIXED) + len(TERM_COLUMNS), len(COLUMNS))
    TIPS = (
        "Rank of the (formula, ion type) by total score",
        "Neutral molecular formula",
        "Precursor ion type the formula is read with",
        "m/z of that ion of that formula",
        "Precursor mass error, ppm: (observed − calculated) / calculated",
        "Ring and double-bond equivalents",
        *(f"Score term '{key}': {tip}" for key, _, tip in TERM_COLUMNS),
        "Total score: the sum of the terms (log-odds; higher is better)",
        "Probability of the candidate among the table's (softmax of the scores)",
        "Share of the fragment intensity (square root) explained by subformulas of the formula",
        "Structures of the molecule corpus with exactly this formula (how ordinary it is)",
        "What Run made of this formula: it takes the best k of the ion types the model supports",
    )

    def __init__(self, parent=None):
        super().__init__(parent)
        self.table = None
        self.candidates: tuple[FormulaCandidate, ...] = ()
        self.supported: tuple[str, ...] | None = None
        self.current: tuple[str, str] | None = None  # (formula, ion type) set on the spectrum
        self.runs: dict[tuple[str, str], str] = {}  # (formula, ion type) -> what its run gave

    def set_table(self, table, supported=None, current=None, runs=None) -> None:
        self.beginResetModel()
        self.table = table
        self.candidates = table.candidates if table is not None else ()
        self.supported = tuple(supported) if supported is not None else None
        self.current = current
        self.runs = dict(runs or {})
        self.endResetModel()

    def set_runs(self, current=None, runs=None) -> None:
        self.current = current
        self.runs = dict(runs or {})
        if self.candidates:
            self.dataChanged.emit(self.index(0, 0), self.index(len(self.candidates) - 1, len(self.COLUMNS) - 1))

    def candidate(self, row: int) -> FormulaCandidate | None:
        return self.candidates[row] if 0 <= row < len(self.candidates) else None

    def is_supported(self, c: FormulaCandidate) -> bool:
        return self.supported is None or c.ion_type in self.supported

    def _rows(self):
        return self.candidates

    def _tip(self, section: int) -> str:
        return self.TIPS[section]

    def _value(self, c: FormulaCandidate, col: int):
        """(sort key, text) of a cell."""
        if col == self.RANK:
            return c.rank, str(c.rank)
        if col == self.FORMULA:
            return c.formula, c.formula
        if col == self.ION:
            return c.ion_type, c.ion_type
        if col == self.MZ:
            return c.theoretical_mz, f"{c.theoretical_mz:.4f}"
        if col == self.PPM:
            return abs(c.ppm_error), f"{c.ppm_error:+.1f}"
        if col == self.RDBE:
            return c.rdbe, f"{c.rdbe:g}"
        if self.FIRST_TERM <= col < self.SCORE:
            value = float(c.terms.get(TERM_COLUMNS[col - self.FIRST_TERM][0], 0.0))
            return value, f"{value:.2f}"
        if col == self.SCORE:
            return c.score, f"{c.score:.2f}"
        if col == self.PROB:
            return c.probability, f"{c.probability:.3f}"
        if col == self.EXPLAINED:
            return c.explained_intensity, f"{c.explained_intensity:.0%} ({c.n_explained})"
        if col == self.ISOMERS:
            return c.isomers, f"{c.isomers:,}"
        if col == self.RUN:
            text = self.runs.get((c.formula, c.ion_type), "")
            if not text and not self.is_supported(c):
                text = "ion not supported"
            return text, text
        return "", ""

    def data(self, index, role=DISPLAY):
        if not index.isValid():
            return None
        c = self.candidates[index.row()]
        col = index.column()
        if role in (DISPLAY, SORT_ROLE):
            key, text = self._value(c, col)
            return key if role == SORT_ROLE else text
        if role == Qt.ItemDataRole.ForegroundRole and not self.is_supported(c):
            return QBrush(QColor(UNSUPPORTED_COLOR))
        if role == Qt.ItemDataRole.BackgroundRole and self.current == (c.formula, c.ion_type):
            return QBrush(QColor(CURRENT_BACKGROUND))
        if role == Qt.ItemDataRole.FontRole and self.current == (c.formula, c.ion_type):
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            if not self.is_supported(c):
                return (f"{c.ion_type} is not supported by this model ({', '.join(self.supported or ())}): Run "
                        "passes over it")
            if self.current == (c.formula, c.ion_type):
                return "The spectrum's formula and ion type now"
            return "Double-click (or Use this formula) to set it on the spectrum"
        if role == Qt.ItemDataRole.TextAlignmentRole and col not in (self.FORMULA, self.ION, self.RUN):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None
