"""The ranked candidates' table model (:class:`CandidatesModel`): one spectrum result's candidates with their rank
moves and evidence, drawn by :mod:`msgpt_gui.candidates_view`. Builds on :mod:`msgpt_gui.models` (the flat table and
its roles) and the Qt-free :mod:`msgpt_gui.logic`; imports no view."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import math
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon
from PySide6.QtWidgets import QApplication, QStyle

from engine.chem.plausibility import plausibility_note
from engine.elucidation.pipeline import SpectrumResult

from .logic import evidence
from .logic.formulas import format_probability
from .logic.tooltips import TIPS
from .models import DISPLAY, KEY_ROLE, SORT_ROLE, ColumnsModel

IMPLAUSIBLE = "Unlikely structure"  # the tooltip's word for a candidate engine.chem.plausibility flags


def _warning_icon() -> QIcon:
    """The style's warning sign: the mark of an implausible candidate (engine.chem.plausibility)."""
    return QApplication.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning)


class CandidatesModel(ColumnsModel):
    """Ranked candidates of one spectrum result (after a run of several formulas: the feature's ranking), with rank
    moves against the previous ranking and each candidate's evidence (:mod:`msgpt_gui.logic.evidence`).

    ``formula_scores`` (molecular formula -> (formula rank, probability), :func:`msgpt_gui.logic.formulas.formula_scores`)
    fill the Formula P column of candidates drawn for a formula candidate."""

    STRUCTURE, RANK, CHANGE, SMILES, NAME, ORIGIN, FORMULA, FORMULA_SCORE, SCORE, REFERENCE, COUNT, FREQUENCY, \
        SIMILARITY = range(13)
    COLUMNS = ("Structure", "Rank", "Change", "SMILES", "Name", "Origin", "Formula", "Formula P", "Score",
               "Reference", "Count", "Frequency", "Posterior sim.")
    RIGHT = (RANK, FORMULA_SCORE, COUNT, FREQUENCY, SIMILARITY, SCORE)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.result: SpectrumResult | None = None
        self.candidates: tuple = ()
        self._previous_rank: dict[str, int] | None = None
        self.formula_scores: dict[str, tuple[str, str]] = {}

    def set_result(self, result: SpectrumResult | None, previous: SpectrumResult | None = None,
                   formula_scores: dict[str, tuple[str, str]] | None = None) -> None:
        self.beginResetModel()
        self.result = result
        self.formula_scores = dict(formula_scores or {})
        self.candidates = result.candidates if result is not None else ()
        self._previous_rank = (
            {c.inchikey14: c.rank for c in previous.candidates} if previous is not None else None
        )
        self.endResetModel()

    def candidate(self, row: int):
        return self.candidates[row] if 0 <= row < len(self.candidates) else None

    def is_reference(self, c) -> bool:
        return bool(self.result and self.result.reference_inchikey14 and c.inchikey14 == self.result.reference_inchikey14)

    def change(self, c) -> tuple[str, float]:
        """('new' / '▲k' / '▼k' / '=' / '', sort key) against the previous ranking."""
        if self._previous_rank is None:
            return "", 0.0
        before = self._previous_rank.get(c.inchikey14)
        if before is None:
            return "new", 1e6
        moved = before - c.rank
        if moved > 0:
            return f"▲{moved}", float(moved)
        if moved < 0:
            return f"▼{-moved}", float(moved)
        return "=", 0.0

    def formula_score(self, c) -> tuple[str, str]:
        """(formula rank, probability) of the formula ``c`` was drawn for ('' when it was not a ranked candidate)."""
        return self.formula_scores.get(c.formula, ("", ""))

    def _rows(self) -> Sequence:
        return self.candidates

    def _tip(self, section: int) -> str:
        return TIPS["columns"][self.COLUMNS[section]]

    def _sort_key(self, c, col: int):
        if col in (self.STRUCTURE, self.RANK):
            return c.rank
        if col == self.FORMULA_SCORE:
            score = self.formula_score(c)[1]
            return float(score) if score else -1.0
        if col == self.SCORE:
            return -math.inf if math.isnan(c.fingerprint_score) else c.fingerprint_score
        if col == self.CHANGE:
            return self.change(c)[1]
        if col == self.REFERENCE:
            return (0 if self.is_reference(c) else 1, -(c.spectral.similarity if c.spectral else -1.0))
        return {self.COUNT: c.count, self.FREQUENCY: c.frequency, self.SIMILARITY: c.posterior_similarity}.get(
            col, self._text(c, col))

    def _text(self, c, col: int):
        if col == self.STRUCTURE:
            return None
        if col == self.RANK:
            return c.rank
        if col == self.CHANGE:
            return self.change(c)[0]
        if col == self.FORMULA_SCORE:
            rank, score = self.formula_score(c)
            return f"{format_probability(float(score))} (#{rank})" if score else ""
        if col == self.SCORE:
            return "" if math.isnan(c.fingerprint_score) else f"{c.fingerprint_score:.1f}"
        if col == self.REFERENCE:
            return evidence.reference_text(c, self.is_reference(c))
        return {self.SMILES: c.smiles, self.NAME: evidence.name_text(c), self.ORIGIN: evidence.origin_cell(c),
                self.FORMULA: c.formula, self.COUNT: c.count, self.FREQUENCY: f"{c.frequency:.3f}",
                self.SIMILARITY: f"{c.posterior_similarity:.3f}"}[col]

    def _tooltip(self, c, col: int) -> str | None:
        if col in (self.SMILES, self.STRUCTURE):
            note = plausibility_note(c.smiles)
            return f"{c.smiles}\nInChIKey {evidence.inchikey(c)}" + (f"\n⚠ {IMPLAUSIBLE}: {note}" if note else "")
        if col == self.ORIGIN:
            return evidence.origin_tooltip(c)
        if col == self.NAME:
            return evidence.name_tooltip(c)
        if col == self.REFERENCE:
            return evidence.reference_tooltip(c, self.is_reference(c))
        if col == self.CHANGE:
            text = self.change(c)[0]
            if text == "new":
                return "Not among the candidates of the previous ranking"
            if text:
                return f"Rank {c.rank}, was {self._previous_rank[c.inchikey14]} in the previous ranking"
        return None

    def data(self, index, role=DISPLAY):
        if not index.isValid():
            return None
        c = self.candidates[index.row()]
        col = index.column()
        if role == KEY_ROLE:
            return c.inchikey14
        if role == SORT_ROLE:
            return self._sort_key(c, col)
        if role == DISPLAY:
            return self._text(c, col)
        if role == Qt.ItemDataRole.DecorationRole and col == self.SMILES:  # ⚠: an implausible structure
            return _warning_icon() if plausibility_note(c.smiles) else None
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(c, col)
        if role == Qt.ItemDataRole.BackgroundRole and self.is_reference(c):
            return QBrush(QColor("#dff3e4"))
        if role == Qt.ItemDataRole.FontRole and self.is_reference(c):
            f = QFont()
            f.setBold(True)
            return f
        if role == Qt.ItemDataRole.ForegroundRole:
            if col == self.CHANGE:
                color = {"n": "#1f5fbf", "▲": "#1b7f3b", "▼": "#b3261e"}.get(self.change(c)[0][:1])
                return QBrush(QColor(color)) if color else None
            if col == self.ORIGIN and c.identified:
                return QBrush(QColor("#1b7f3b"))
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if col in self.RIGHT:
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if col == self.CHANGE:
                return int(Qt.AlignmentFlag.AlignCenter)
        return None
