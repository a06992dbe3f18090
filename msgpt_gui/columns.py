"""Column widths of the app's tables: the spectra list's ID column and the candidates' SMILES column fill the room
the other columns leave, but never get narrower than their contents (within a cap), so a narrow window scrolls
sideways instead of showing "…" (issue #38)."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from PySide6.QtCore import QEvent, QModelIndex, QObject, Qt
from PySide6.QtWidgets import QHeaderView, QTableView

MEASURED_ROWS = 500  # rows whose text sets the contents' width (the first ones of a reset, each batch added)
PADDING = 18  # the cell's margins and the header's sort arrow


class FillColumn(QObject):
    """Column ``column`` of ``view`` (a table or a tree) takes the width the other columns leave, at least its
    contents' width clamped to ``min_chars``..``cap_chars`` average characters. Text wider than the column is
    elided as the view says (the middle, so that the end that tells IDs apart stays). The width follows the
    view's size, the other columns and the rows shown, until the user drags the column's edge: then it keeps
    the width the user gave it."""

    def __init__(self, view, column: int, min_chars: int = 12, cap_chars: int = 40):
        super().__init__(view)
        self.view, self.column = view, column
        self.header = view.horizontalHeader() if isinstance(view, QTableView) else view.header()
        self.header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
        chars = view.fontMetrics().averageCharWidth()
        self.min_px, self.cap_px = min_chars * chars, cap_chars * chars
        self.content_px = 0  # the widest text measured
        self.user_sized = False
        self._setting = False
        view.viewport().installEventFilter(self)
        self.header.sectionResized.connect(self._section_resized)
        model = view.model()
        model.modelReset.connect(self._reset)
        model.rowsInserted.connect(self._rows_inserted)

    @property
    def floor(self) -> int:
        """The narrowest the column gets: its contents' width, clamped to the minimum and the cap."""
        return int(min(max(self.content_px, self.min_px), self.cap_px))

    def _measure(self, first: int, last: int) -> None:
        model, fm = self.view.model(), self.view.fontMetrics()
        widest = 0
        for row in range(first, min(last, first + MEASURED_ROWS - 1) + 1):
            text = model.index(row, self.column, QModelIndex()).data(Qt.ItemDataRole.DisplayRole)
            if text not in (None, ""):
                widest = max(widest, fm.horizontalAdvance(str(text)))
        indent = self.view.indentation() if hasattr(self.view, "indentation") and self.column == 0 else 0
        self.content_px = max(self.content_px, widest + PADDING + indent if widest else 0)

    def _reset(self) -> None:
        self.content_px = 0
        self._measure(0, self.view.model().rowCount() - 1)
        self.fit()

    def _rows_inserted(self, parent, first: int, last: int) -> None:
        if not parent.isValid():
            self._measure(first, last)
            self.fit()

    def fit(self) -> None:
        """Give the column the room left, but at least :attr:`floor` (not after the user sized it)."""
        h = self.header
        if self.user_sized or h.isSectionHidden(self.column):
            return
        others = sum(h.sectionSize(c) for c in range(h.count()) if c != self.column and not h.isSectionHidden(c))
        width = max(self.floor, self.view.viewport().width() - others)
        if width != h.sectionSize(self.column):
            self._setting = True
            try:
                h.resizeSection(self.column, width)
            finally:
                self._setting = False

    def _section_resized(self, logical: int, _old: int, _new: int) -> None:
        if logical == self.column:
            if not self._setting:
                self.user_sized = True  # dragged (or double-clicked) by the user: theirs from now on
        else:
            self.fit()

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Resize:
            self.fit()
        return False
