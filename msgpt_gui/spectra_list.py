"""The spectra list: a title that counts what is listed, a filter, and a tree with one row per record of the
opened files (an LC-MS run: its precursor features, their scans below them).

:class:`SpectraList` is a view: it knows the current and the selected entries and selects one; what happens
when the selection changes (the spectrum shown, a run on a double-click) the window connects.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QLineEdit, QTreeView, QVBoxLayout, QWidget

from .candidates_view import fit_columns
from .columns import FillColumn
from .logic.entries import FILTER_PLACEHOLDER, FILTER_TIP, SpectrumEntry
from .models import KEY_ROLE, SpectraModel, SpectraProxy
from .run_controller import plural

STATUS_SAMPLE = "cancelled (partial)"  # the longest words the Status column shows (reasons are in its tooltip)
#: Confidence and Level stand after the formula (before Status, RT, Scans, Peaks): the answer is in view in a
#: list of 700 px (a 1600 px window), the rest scrolls sideways (issue #54)
VISUAL_ORDER = (SpectraModel.ID, SpectraModel.MZ, SpectraModel.ADDUCT, SpectraModel.FORMULA, SpectraModel.CONFIDENCE,
                SpectraModel.LEVEL, SpectraModel.STATUS, SpectraModel.RT, SpectraModel.SCANS, SpectraModel.PEAKS,
                SpectraModel.ABUNDANCE, SpectraModel.GROUP)
ROWS = QItemSelectionModel.SelectionFlag.Rows


class SpectraList(QWidget):
    """The left pane: ``title``, ``filter`` and ``view`` over ``model`` (sorted and filtered by ``proxy``)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model = SpectraModel(self)
        self.proxy = SpectraProxy(self)
        self.proxy.setSourceModel(self.model)
        self.filter = QLineEdit(placeholderText=FILTER_PLACEHOLDER, clearButtonEnabled=True)
        self.filter.setToolTip(FILTER_TIP)
        self.filter.textChanged.connect(self.proxy.set_filter_text)
        self.view = self._tree()
        self.title = QLabel("<b>Spectra</b>")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 0, 0)
        lay.setSpacing(3)
        lay.addWidget(self.title)
        lay.addWidget(self.filter)
        lay.addWidget(self.view, 1)

    def _tree(self) -> QTreeView:
        # a tree: an LC-MS run lists precursor features, their scans below them (MGF records have no children,
        # and the branches are drawn only once some row has them: a library looks like a plain list)
        view = QTreeView(uniformRowHeights=True, rootIsDecorated=False, allColumnsShowFocus=True)
        view.setModel(self.proxy)
        view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        view.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        view.setAlternatingRowColors(True)
        view.setWordWrap(False)
        view.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # IDs differ at their end (compact_id): it stays
        view.setExpandsOnDoubleClick(False)  # a double-click runs the spectrum; ▸ expands
        view.setIndentation(14)
        header = view.header()
        header.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # file order until a column is clicked
        view.setSortingEnabled(True)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        fit_columns(view, {1: "1234.5678 *", 2: "[M+Na]+", 3: "C22H30NO4 *", 4: "99.99–99.99",
                           5: "Scans", 6: "999 ⚠", 7: STATUS_SAMPLE, 9: "2a"})
        view.setColumnHidden(SpectraModel.SCANS, True)  # shown once a run's features are listed
        view.setColumnHidden(SpectraModel.ABUNDANCE, True)  # shown once a feature has an abundance (#60)
        view.setColumnHidden(SpectraModel.GROUP, True)  # shown once a run has compound groups (#56)
        for visual, logical in enumerate(VISUAL_ORDER):
            header.moveSection(header.visualIndex(logical), visual)
        header.setStretchLastSection(False)
        # IDs take what is left, but at least their width (up to 32 characters): a narrow list scrolls sideways
        self.id_column = FillColumn(view, SpectraModel.ID, min_chars=14, cap_chars=32)
        return view

    # -- the current and the selected entries
    def current_entry(self) -> SpectrumEntry | None:
        idx = self.view.selectionModel().currentIndex()
        return self.model.entry(idx.data(KEY_ROLE)) if idx.isValid() else None

    def selected_entries(self) -> list[SpectrumEntry]:
        rows = self.view.selectionModel().selectedRows()
        keys = [i.data(KEY_ROLE) for i in sorted(rows, key=lambda i: i.row())]
        entries = [self.model.entry(k) for k in keys]
        if not entries and self.current_entry() is not None:
            entries = [self.current_entry()]
        return [e for e in entries if e is not None]

    def select_entry(self, key: int) -> None:
        idx = self.proxy.mapFromSource(self.model.index_of(key))
        if idx.isValid():
            if idx.parent().isValid():
                self.view.expand(idx.parent())
            self.view.selectionModel().setCurrentIndex(idx, QItemSelectionModel.SelectionFlag.ClearAndSelect | ROWS)

    def select_also(self, key: int) -> None:
        """Add the row of ``key`` to the selection (the current row stays)."""
        idx = self.proxy.mapFromSource(self.model.index(self.model.row_of(key), 0))
        if idx.isValid():
            self.view.selectionModel().select(idx, QItemSelectionModel.SelectionFlag.Select | ROWS)

    def reveal(self, key: int) -> None:
        """Select ``key`` and scroll it to the top (clearing the filter when it would hide it)."""
        if not self.proxy.mapFromSource(self.model.index_of(key)).isValid():
            self.filter.clear()
        self.select_entry(key)
        self.view.scrollTo(self.view.currentIndex(), QAbstractItemView.ScrollHint.PositionAtTop)

    # -- what follows the entries
    def follow_tree(self) -> None:
        """The Scans column and the branches of the tree appear once a run's features are listed."""
        self.view.setColumnHidden(SpectraModel.SCANS, not self.model.has_features)
        self.view.setColumnHidden(SpectraModel.ABUNDANCE, not self.model.has_abundance)
        self.view.setColumnHidden(SpectraModel.GROUP, not self.model.has_groups)
        self.view.setRootIsDecorated(self.model.has_children)

    def update_title(self) -> None:
        entries = self.model.entries
        n = sum(e.spectrum is not None for e in entries)
        features = sum(e.feature is not None for e in entries)
        done = sum(e.has_results for e in entries)
        skipped = len(entries) - n
        extra = f", {skipped} skipped" if skipped else ""
        what = plural(n)
        if features:
            scans = sum(e.feature.n_scans for e in entries if e.feature is not None)
            others = n - features
            what = (f"{features} precursor feature{'s' if features != 1 else ''} ({scans} scans)"
                    + (f", {plural(others)}" if others else ""))
        self.title.setText(f"<b>Spectra</b> — {what}{extra}, {done} with candidates")
