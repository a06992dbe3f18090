"""Qt item models: the spectra list, the flat table the others build on (:class:`ColumnsModel`), the roles they
share and the proxies that sort and filter them. The ranked candidates' model is
:mod:`msgpt_gui.candidates_model`'s."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from collections.abc import Sequence

from PySide6.QtCore import QAbstractItemModel, QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor

from engine.spectra.spectrum import NO_FRAGMENTS_NOTE

from .logic.confidence import missing_confidence
from .logic.entries import SpectraFilter, SpectrumEntry, Status, compact_id, format_mz
from .logic.formulas import library_run_label
from .logic.handoff_files import abundance_cell, abundance_tip
from .logic.libraries import IDENTIFIED_TEXT, entry_level
from .logic.tooltips import TIPS

NO_FRAGMENTS_TIP = NO_FRAGMENTS_NOTE[0].upper() + NO_FRAGMENTS_NOTE[1:]  # "No fragments: candidates reflect ..."

SORT_ROLE = Qt.ItemDataRole.UserRole + 1  # a number (or text) to sort by
KEY_ROLE = Qt.ItemDataRole.UserRole + 2  # entry key / candidate InChIKey first block

DISPLAY = Qt.ItemDataRole.DisplayRole
_STATUS_COLORS = {
    Status.DONE: "#1b7f3b",
    Status.RUNNING: "#1f5fbf",
    Status.QUEUED: "#6b6b6b",
    Status.SKIPPED: "#a15c00",
    Status.FAILED: "#b3261e",
    Status.CANCELLED: "#6b6b6b",
}
BLOCKED_COLOR = "#a15c00"  # needs formula / adduct / m/z, ion not supported
WARNING_MARK = " ⚠"
NOTES_MARK = " ✎"  # after the ID of a spectrum with notes


class ColumnsModel(QAbstractTableModel):
    """A flat table: subclasses name their ``COLUMNS``, the rows (``_rows``) and the header tips (``_tip``)."""

    COLUMNS: tuple[str, ...] = ()

    def _rows(self) -> Sequence:
        raise NotImplementedError

    def _tip(self, section: int) -> str:
        raise NotImplementedError

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows())

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(self, section, orientation, role=DISPLAY):
        if orientation == Qt.Orientation.Horizontal:
            if role == DISPLAY:
                return self.COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return self._tip(section)
        return None


class SpectraModel(QAbstractItemModel):
    """One row per record of the opened files (skipped records too, with their reason); an LC-MS run lists one
    row per precursor feature, with its scans as child rows when it has several.

    ``supported_adducts`` (the loaded model's ion types, None without a model) decides which rows
    need something before they can run; the Status column says it in a few words, its tooltip in full.
    Formula runs (:attr:`~msgpt_gui.logic.entries.SpectrumEntry.formula_runs`) are not rows: :meth:`entry` finds
    them by key, and a change to one shows in the row of the entry they belong to.
    """

    ID, MZ, ADDUCT, FORMULA, RT, SCANS, PEAKS, STATUS, CONFIDENCE, LEVEL, ABUNDANCE, GROUP = range(12)
    COLUMNS = ("ID", "Prec. m/z", "Adduct", "Formula", "RT (min)", "Scans", "Peaks", "Status", "Confidence", "Level",
               "Abundance", "Group")
    TIPS = TIPS["spectra_columns"]

    def __init__(self, parent=None):
        super().__init__(parent)
        self.entries: list[SpectrumEntry] = []  # the top-level rows
        self._row_of: dict[int, int] = {}  # key of a top-level entry -> its row
        self._by_key: dict[int, SpectrumEntry] = {}  # every entry: rows, child rows, formula runs
        self.supported_adducts: tuple[str, ...] | None = None
        self.bundle = None  # the loaded model: why a confidence is missing (the Confidence cell's tooltip)
        self.has_features = False  # some row is a precursor feature (the Scans column is shown)
        self.has_children = False  # some row has child rows (the tree's branches are drawn)
        self.has_abundance = False  # some row has an abundance (a quant table, #60): the Abundance column is shown
        self.has_groups = False  # some row is in a compound group (adduct partners, #56): the Group column is shown

    # -- editing (main thread only)
    def append(self, entries: list[SpectrumEntry]) -> None:
        if not entries:
            return
        first = len(self.entries)
        self.beginInsertRows(QModelIndex(), first, first + len(entries) - 1)
        for e in entries:
            self._row_of[e.key] = len(self.entries)
            self.entries.append(e)
            self._by_key[e.key] = e
            for child in e.children:
                self._by_key[child.key] = child
            self.has_features |= e.feature is not None
            self.has_children |= bool(e.children)
            self.has_abundance |= e.abundance is not None
            self.has_groups |= e.feature is not None and e.feature.group is not None
        self.endInsertRows()

    def add_runs(self, runs: list[SpectrumEntry]) -> None:
        """Formula runs of a listed entry (found by :meth:`entry`, shown in their owner's row)."""
        for r in runs:
            self._by_key[r.key] = r

    def clear(self) -> None:
        self.beginResetModel()
        self.entries.clear()
        self._row_of.clear()
        self._by_key.clear()
        self.has_features = self.has_children = self.has_abundance = self.has_groups = False
        self.endResetModel()

    def set_supported_adducts(self, adducts) -> None:
        self.supported_adducts = tuple(adducts) if adducts is not None else None
        self.all_changed()

    def entry(self, key: int) -> SpectrumEntry | None:
        """The entry with ``key``: a row, a child row, or a formula run that still belongs to its entry."""
        e = self._by_key.get(key)
        if e is not None and e.owner_key is not None:
            owner = self._by_key.get(e.owner_key)
            if owner is None or not any(r is e for r in owner.formula_runs):
                return None  # a run its entry has dropped since
        return e

    def listed(self, key: int) -> SpectrumEntry | None:
        """The entry whose row shows ``key``: itself, or the entry a formula run belongs to."""
        e = self.entry(key)
        return self._by_key.get(e.owner_key) if e is not None and e.owner_key is not None else e

    def all_entries(self):
        """Every listed entry: the rows and their child rows, in file order."""
        for e in self.entries:
            yield e
            yield from e.children

    def row_of(self, key: int) -> int | None:
        """The row of a top-level entry (see :meth:`index_of` for any entry)."""
        return self._row_of.get(key)

    def index_of(self, key: int, column: int = 0) -> QModelIndex:
        """The index of the row that shows ``key`` (a formula run: its entry's row); invalid when none does."""
        e = self.listed(key)
        if e is None:
            return QModelIndex()
        if e.parent_key is None:
            row = self._row_of.get(e.key)
            return QModelIndex() if row is None else self.createIndex(row, column, 0)
        row = self._row_of.get(e.parent_key)
        if row is None:
            return QModelIndex()
        children = self.entries[row].children
        position = next((i for i, c in enumerate(children) if c is e), None)
        return QModelIndex() if position is None else self.createIndex(position, column, row + 1)

    def entry_at(self, index: QModelIndex) -> SpectrumEntry | None:
        if not index.isValid():
            return None
        if index.internalId() == 0:
            return self.entries[index.row()]
        return self.entries[index.internalId() - 1].children[index.row()]

    def entry_changed(self, key: int) -> None:
        first = self.index_of(key, 0)
        if first.isValid():
            self.dataChanged.emit(first, first.siblingAtColumn(len(self.COLUMNS) - 1))

    def all_changed(self) -> None:
        if self.entries:
            self.dataChanged.emit(self.index(0, 0), self.index(len(self.entries) - 1, len(self.COLUMNS) - 1))
            for row, e in enumerate(self.entries):
                if e.children:
                    parent = self.index(row, 0)
                    self.dataChanged.emit(self.index(0, 0, parent),
                                          self.index(len(e.children) - 1, len(self.COLUMNS) - 1, parent))

    # -- Qt model API (a tree of two levels: a child's internal id is its parent's row + 1)
    def index(self, row, column, parent=QModelIndex()):
        if not 0 <= column < len(self.COLUMNS):
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(row, column, 0) if 0 <= row < len(self.entries) else QModelIndex()
        if parent.internalId() != 0 or parent.column() != 0:
            return QModelIndex()
        children = self.entries[parent.row()].children
        return self.createIndex(row, column, parent.row() + 1) if 0 <= row < len(children) else QModelIndex()

    def parent(self, index=QModelIndex()):
        if not index.isValid() or index.internalId() == 0:
            return QModelIndex()
        return self.createIndex(index.internalId() - 1, 0, 0)

    def rowCount(self, parent=QModelIndex()) -> int:
        if not parent.isValid():
            return len(self.entries)
        if parent.internalId() == 0 and parent.column() == 0:
            return len(self.entries[parent.row()].children)
        return 0

    def columnCount(self, parent=QModelIndex()) -> int:
        return len(self.COLUMNS)

    def hasChildren(self, parent=QModelIndex()) -> bool:
        return self.rowCount(parent) > 0

    def headerData(self, section, orientation, role=DISPLAY):
        if orientation == Qt.Orientation.Horizontal:
            if role == DISPLAY:
                return self.COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return self.TIPS[section]
        return None

    def _unsupported(self, s) -> bool:
        return s is not None and bool(s.adduct) and self.supported_adducts is not None and \
            s.adduct not in self.supported_adducts

    def data(self, index, role=DISPLAY):
        if not index.isValid():
            return None
        e = self.entry_at(index)
        col = index.column()
        if role == KEY_ROLE:
            return e.key
        if role in (DISPLAY, SORT_ROLE):
            return self._text(e, col, sort=role == SORT_ROLE)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(e, col)
        if role == Qt.ItemDataRole.ForegroundRole:
            return self._foreground(e, col)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (self.MZ, self.RT, self.SCANS, self.PEAKS,
                                                                 self.CONFIDENCE, self.LEVEL, self.ABUNDANCE):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _text(self, e: SpectrumEntry, col: int, sort: bool):
        """What a cell shows (``sort``: the value it sorts by)."""
        s = e.spectrum
        if col == self.ID:
            return e.id if sort else e.display_id + (NOTES_MARK if e.user_notes.strip() else "")
        if col == self.STATUS:
            return e.status_label(self.supported_adducts)
        if col == self.CONFIDENCE:
            p = entry_confidence(e)
            if p is None and _identified(e):
                return 2.0 if sort else IDENTIFIED_TEXT
            if sort:
                return -1.0 if p is None else p
            return "" if p is None else format_confidence(p)
        if col == self.LEVEL:
            level = entry_level(e) if e.status != Status.RUNNING else None
            return (level.code if level is not None else "9") if sort else (level.code if level is not None else "")
        if col == self.RT:
            rt = e.retention_time
            if rt is None:
                return -1.0 if sort else ""
            span = e.rt_range
            if sort or span is None or span[1] - span[0] < 0.6:  # one scan (or 0.01 min): one time
                return rt if sort else f"{rt / 60:.2f}"
            return f"{span[0] / 60:.2f}–{span[1] / 60:.2f}"
        if col == self.SCANS:
            n = e.n_scans
            return (-1 if n is None else n) if sort else ("" if n is None else n)
        if col == self.GROUP:
            return e.group_label
        if col == self.ABUNDANCE:
            return abundance_cell(e, sort)
        if col == self.PEAKS:
            n = e.n_peaks
            if sort or n is None:
                return -1 if n is None else n
            return f"{n}{WARNING_MARK}" if e.no_fragments else n
        if s is None:
            return -1.0 if sort and col == self.MZ else ""
        if col == self.MZ:
            return s.precursor_mz if sort else format_mz(s) + (" *" if e.precursor_typed else "")
        runs = e.formula_runs
        if e.group_lead is not None:  # a compound group's member: the group's formula, its own ion type
            runs = e.group_lead.formula_runs
            if col == self.ADDUCT:
                return e.feature.ion_type_in_group or ""
        if col == self.ADDUCT:
            if runs and not s.adduct:
                return runs[0].spectrum.adduct or ""
            return s.adduct or ("" if sort else "—")
        if col == self.FORMULA:
            if runs:  # the best of the formulas Run took, "+2" for the others
                best = runs[0].spectrum.formula or ""
                return best if sort else best + (f" +{len(runs) - 1}" if len(runs) > 1 else "")
            if sort:
                return s.formula or ""
            changed = e.original is None or s.formula != e.original.formula or s.adduct != e.original.adduct
            return (s.formula + " *" if changed else s.formula) if s.formula else "—"
        return None

    def _tooltip(self, e: SpectrumEntry, col: int) -> str | None:
        s = e.spectrum
        if col == self.STATUS:
            return e.status_text(self.supported_adducts)
        if col == self.GROUP or (col == self.FORMULA and e.group_lead is not None):
            return e.group_text() or None
        if col == self.LEVEL:
            level = entry_level(e) if e.status != Status.RUNNING else None
            return str(level) if level is not None else None
        if col == self.CONFIDENCE and _identified(e):
            return entry_level(e).text
        if col == self.CONFIDENCE:
            why_not = missing_confidence(e.shown, self.bundle) if e.status != Status.RUNNING else ""
            return f"No confidence: {why_not}" if why_not else None
        if col == self.ID:
            name = e.name
            notes = f"\n\nYour notes: {e.user_notes.strip()}" if e.user_notes.strip() else ""
            if e.feature is not None:
                ids = e.feature.scan_ids
                scans = "\n".join(ids[:5]) + (f"\n… ({len(ids)} scans)" if len(ids) > 5 else "")
                return (f"{e.id}: precursor feature {e.feature.index + 1} of {e.source}\n"
                        f"MS/MS scan{'s' if len(ids) > 1 else ''}:\n{scans}{notes}")
            return f"{e.id}\n{name + chr(10) if name else ''}{e.source} (record {e.record_index + 1}){notes}"
        if col == self.PEAKS and e.no_fragments:
            return (f"{NO_FRAGMENTS_TIP}: no peak below precursor m/z − 2 Da, so the candidates are only "
                    "structures with the formula, not what the spectrum shows")
        if col == self.ADDUCT and self._unsupported(s):
            return e.blocker(self.supported_adducts)[1]
        if col == self.MZ and e.precursor_typed:
            file_mz = "none" if e.original is None else f"{e.original.precursor_mz:.4f}"
            return f"Typed by you (the file gives {file_mz})"
        if col == self.FORMULA and e.formula_runs:
            lines = [(f"#{r.candidate.rank} {r.spectrum.formula} {r.spectrum.adduct} (score {r.candidate.score:.1f}, "
                      f"{r.candidate.probability:.0%})" if r.candidate is not None else library_run_label(r.spectrum))
                     + f": {r.status}" for r in e.formula_runs]
            return "Run took the best formula candidates:\n" + "\n".join(lines)
        if col == self.FORMULA and s is not None and s.metadata.get("formula_source") == "ranked candidates":
            rank, score = s.metadata.get("formula_rank", "?"), s.metadata.get("formula_score", "?")
            return f"Formula candidate #{rank} (probability {score}) picked in the Formulas tab"
        if col == self.FORMULA and e.overridden and e.original is not None:
            return f"Set by you (the file says {e.original.formula or 'nothing'} / {e.original.adduct or 'nothing'})"
        if col == self.FORMULA and s is not None and not s.formula and e.blocker(self.supported_adducts) is None:
            return ("No formula: Run ranks the formula candidates and elucidates the best of them (Formulas tab); "
                    "pick one there or type one below the spectrum to run that one")
        if col == self.RT and e.rt_range is not None:
            lo, hi = e.rt_range
            return f"Scans from {lo / 60:.2f} to {hi / 60:.2f} min ({lo:.1f}–{hi:.1f} s); precursor at " \
                   f"{e.retention_time / 60:.2f} min"
        if col == self.ABUNDANCE and e.abundance is not None:
            return abundance_tip(e)
        if col == self.SCANS and e.feature is not None:
            return ("MS/MS scans of this precursor merged into its consensus spectrum:\n" +
                    "\n".join(compact_id(i) for i in e.feature.scan_ids[:20]) +
                    ("\n…" if e.n_scans > 20 else ""))
        return None

    def _foreground(self, e: SpectrumEntry, col: int) -> QBrush | None:
        s = e.spectrum
        if col == self.STATUS:
            blocked = e.status in (Status.NOT_RUN, Status.SKIPPED) and e.blocker(self.supported_adducts)
            color = BLOCKED_COLOR if blocked else _STATUS_COLORS.get(e.status)
            return QBrush(QColor(color)) if color else None
        if (col == self.PEAKS and e.no_fragments) or (col == self.ADDUCT and self._unsupported(s)):
            return QBrush(QColor(BLOCKED_COLOR))
        return None


def entry_confidence(e: SpectrumEntry) -> float | None:
    """The confidence of what the entry's candidate table shows (its rank 1), when complete."""
    r = e.shown
    return None if r is None or r.partial else r.confidence


def _identified(e: SpectrumEntry) -> bool:
    """A reference spectrum identifies the entry's best answer (level 2a): no confidence number stands for it."""
    if e.status == Status.RUNNING:
        return False
    level = entry_level(e)
    return level is not None and level.code == "2a"


def format_confidence(p: float) -> str:
    """A probability as a chemist reads it: ``<1%``, ``42%``, ``>99%`` (an identification at 0.9995 is not certain)."""
    if p < 0.01:
        return "<1%"
    return ">99%" if p > 0.99 else f"{p:.0%}"


class SortProxy(QSortFilterProxyModel):
    """Sorts by :data:`SORT_ROLE` (numbers as numbers); filters rows on a text in any column."""

    def __init__(self, parent=None, filter_columns: tuple[int, ...] = ()):
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setDynamicSortFilter(True)
        self._filter_columns = filter_columns
        self._text = ""

    def set_filter_text(self, text: str) -> None:
        if hasattr(self, "beginFilterChange"):  # Qt >= 6.10 (invalidateFilter is deprecated there)
            self.beginFilterChange()
            self._text = text.strip().lower()
            self.endFilterChange()
        else:
            self._text = text.strip().lower()
            self.invalidateFilter()

    def filterAcceptsRow(self, row, parent) -> bool:
        if not self._text:
            return True
        model = self.sourceModel()
        cols = self._filter_columns or range(model.columnCount())
        for col in cols:
            value = model.data(model.index(row, col, parent), DISPLAY)
            if value is not None and self._text in str(value).lower():
                return True
        return False

    def lessThan(self, left, right) -> bool:
        a, b = left.data(SORT_ROLE), right.data(SORT_ROLE)
        try:
            return a < b
        except TypeError:
            return str(a) < str(b)


class SpectraProxy(SortProxy):
    """The spectra list sorted by any column and filtered with :class:`~msgpt_gui.logic.entries.SpectraFilter`
    (m/z, RT ranges and text; see :mod:`msgpt_gui.logic.entries`)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.filter = SpectraFilter()

    def set_filter_text(self, text: str) -> None:
        if hasattr(self, "beginFilterChange"):  # Qt >= 6.10 (invalidateFilter is deprecated there)
            self.beginFilterChange()
            self.filter = SpectraFilter(text)
            self.endFilterChange()
        else:
            self.filter = SpectraFilter(text)
            self.invalidateFilter()

    def filterAcceptsRow(self, row, parent) -> bool:
        """A row when it or one of its scans matches; the scans of a row that is shown, all."""
        if parent.isValid():
            return True
        model = self.sourceModel()
        e = model.entries[row]
        if self.filter.matches(e, model.supported_adducts):
            return True
        return bool(self.filter) and any(self.filter.matches(c, model.supported_adducts) for c in e.children)
