"""Qt item models: the spectra list and the ranked candidates (sorted/filtered by proxies)."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import math
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor, QFont

from engine.pipeline import SpectrumResult
from engine.spectrum import NO_FRAGMENTS_NOTE

from .entries import SpectraFilter, SpectrumEntry, Status, format_mz
from .tooltips import TIPS

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


class _ColumnsModel(QAbstractTableModel):
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


class SpectraModel(_ColumnsModel):
    """One row per record of the opened files (skipped records too, with their reason).

    ``supported_adducts`` (the loaded model's ion types, None without a model) decides which rows
    need something before they can run; the Status column says it in a few words, its tooltip in full.
    """

    ID, MZ, ADDUCT, FORMULA, RT, PEAKS, STATUS = range(7)
    COLUMNS = ("ID", "Prec. m/z", "Adduct", "Formula", "RT (min)", "Peaks", "Status")
    TIPS = (
        "Spectrum title (TITLE / FEATURE_ID / scan number) and the file it comes from",
        "m/z of the precursor ion (PEPMASS); * typed by you",
        "Precursor ion type; set it below the spectrum when the file has none",
        "Neutral molecular formula; MS-GPT needs it. Set it below the spectrum when the file has none",
        "Retention time in minutes",
        "Number of peaks; ⚠ no fragments: the spectrum holds only the precursor",
        "not run / queued / running / done / failed, or what the spectrum needs before it can run "
        "(the tooltip of a cell gives the reason)",
    )

    def __init__(self, parent=None):
        super().__init__(parent)
        self.entries: list[SpectrumEntry] = []
        self._row_of: dict[int, int] = {}
        self.supported_adducts: tuple[str, ...] | None = None

    # -- editing (main thread only)
    def append(self, entries: list[SpectrumEntry]) -> None:
        if not entries:
            return
        first = len(self.entries)
        self.beginInsertRows(QModelIndex(), first, first + len(entries) - 1)
        for e in entries:
            self._row_of[e.key] = len(self.entries)
            self.entries.append(e)
        self.endInsertRows()

    def clear(self) -> None:
        self.beginResetModel()
        self.entries.clear()
        self._row_of.clear()
        self.endResetModel()

    def set_supported_adducts(self, adducts) -> None:
        self.supported_adducts = tuple(adducts) if adducts is not None else None
        self.all_changed()

    def entry(self, key: int) -> SpectrumEntry | None:
        row = self._row_of.get(key)
        return None if row is None else self.entries[row]

    def row_of(self, key: int) -> int | None:
        return self._row_of.get(key)

    def entry_changed(self, key: int) -> None:
        row = self._row_of.get(key)
        if row is not None:
            self.dataChanged.emit(self.index(row, 0), self.index(row, len(self.COLUMNS) - 1))

    def all_changed(self) -> None:
        if self.entries:
            self.dataChanged.emit(self.index(0, 0), self.index(len(self.entries) - 1, len(self.COLUMNS) - 1))

    # -- Qt model API
    def _rows(self) -> Sequence:
        return self.entries

    def _tip(self, section: int) -> str:
        return self.TIPS[section]

    def _unsupported(self, s) -> bool:
        return s is not None and bool(s.adduct) and self.supported_adducts is not None and \
            s.adduct not in self.supported_adducts

    def data(self, index, role=DISPLAY):
        if not index.isValid():
            return None
        e = self.entries[index.row()]
        col = index.column()
        s = e.spectrum
        if role == KEY_ROLE:
            return e.key
        if role in (DISPLAY, SORT_ROLE):
            sort = role == SORT_ROLE
            if col == self.ID:
                return e.id if sort else e.display_id + (NOTES_MARK if e.user_notes.strip() else "")
            if col == self.STATUS:
                return e.status_label(self.supported_adducts)
            if col == self.RT:
                rt = e.retention_time
                if rt is None:
                    return -1.0 if sort else ""
                return rt if sort else f"{rt / 60:.2f}"
            if col == self.PEAKS:
                n = e.n_peaks
                if sort or n is None:
                    return -1 if n is None else n
                return f"{n}{WARNING_MARK}" if e.no_fragments else n
            if s is None:
                return -1.0 if sort and col == self.MZ else ""
            if col == self.MZ:
                return s.precursor_mz if sort else format_mz(s) + (" *" if e.precursor_typed else "")
            if col == self.ADDUCT:
                return s.adduct or ("" if sort else "—")
            if col == self.FORMULA:
                if sort:
                    return s.formula or ""
                changed = e.original is None or s.formula != e.original.formula or s.adduct != e.original.adduct
                return (s.formula + " *" if changed else s.formula) if s.formula else "—"
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == self.STATUS:
                return e.status_text(self.supported_adducts)
            if col == self.ID:
                name = e.name
                notes = f"\n\nYour notes: {e.user_notes.strip()}" if e.user_notes.strip() else ""
                return f"{e.id}\n{name + chr(10) if name else ''}{e.source} (record {e.record_index + 1}){notes}"
            if col == self.PEAKS and e.no_fragments:
                return (f"{NO_FRAGMENTS_TIP}: no peak below precursor m/z − 2 Da, so the candidates are only "
                        "structures with the formula, not what the spectrum shows")
            if col == self.ADDUCT and self._unsupported(s):
                return e.blocker(self.supported_adducts)[1]
            if col == self.MZ and e.precursor_typed:
                file_mz = "none" if e.original is None else f"{e.original.precursor_mz:.4f}"
                return f"Typed by you (the file gives {file_mz})"
            if col == self.FORMULA and e.overridden and e.original is not None:
                return f"Set by you (the file says {e.original.formula or 'nothing'} / {e.original.adduct or 'nothing'})"
            return None
        if role == Qt.ItemDataRole.ForegroundRole:
            if col == self.STATUS:
                blocked = e.status in (Status.NOT_RUN, Status.SKIPPED) and e.blocker(self.supported_adducts)
                color = BLOCKED_COLOR if blocked else _STATUS_COLORS.get(e.status)
                return QBrush(QColor(color)) if color else None
            if (col == self.PEAKS and e.no_fragments) or (col == self.ADDUCT and self._unsupported(s)):
                return QBrush(QColor(BLOCKED_COLOR))
            return None
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (self.MZ, self.RT, self.PEAKS):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


class CandidatesModel(_ColumnsModel):
    """Ranked candidates of one spectrum result, with rank moves against the previous ranking."""

    STRUCTURE, RANK, CHANGE, SMILES, FORMULA, COUNT, FREQUENCY, SIMILARITY, SCORE, REFERENCE = range(10)
    COLUMNS = ("Structure", "Rank", "Change", "SMILES", "Formula", "Count", "Frequency", "Posterior sim.", "Score",
               "Reference")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.result: SpectrumResult | None = None
        self.candidates: tuple = ()
        self._previous_rank: dict[str, int] | None = None

    def set_result(self, result: SpectrumResult | None, previous: SpectrumResult | None = None) -> None:
        self.beginResetModel()
        self.result = result
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

    def _rows(self) -> Sequence:
        return self.candidates

    def _tip(self, section: int) -> str:
        return TIPS["columns"][self.COLUMNS[section]]

    def data(self, index, role=DISPLAY):
        if not index.isValid():
            return None
        c = self.candidates[index.row()]
        col = index.column()
        if role == KEY_ROLE:
            return c.inchikey14
        if role == SORT_ROLE:
            return (
                c.rank, c.rank, self.change(c)[1], c.smiles, c.formula, c.count, c.frequency,
                c.posterior_similarity, -math.inf if math.isnan(c.fingerprint_score) else c.fingerprint_score,
                0 if self.is_reference(c) else 1,
            )[col]
        if role == DISPLAY:
            if col == self.STRUCTURE:
                return None
            if col == self.RANK:
                return c.rank
            if col == self.CHANGE:
                return self.change(c)[0]
            if col == self.SMILES:
                return c.smiles
            if col == self.FORMULA:
                return c.formula
            if col == self.COUNT:
                return c.count
            if col == self.FREQUENCY:
                return f"{c.frequency:.3f}"
            if col == self.SIMILARITY:
                return f"{c.posterior_similarity:.3f}"
            if col == self.SCORE:
                return "" if math.isnan(c.fingerprint_score) else f"{c.fingerprint_score:.1f}"
            if col == self.REFERENCE:
                return "★ reference" if self.is_reference(c) else ""
        if role == Qt.ItemDataRole.ToolTipRole:
            if col in (self.SMILES, self.STRUCTURE):
                return f"{c.smiles}\nInChIKey {c.inchikey}"
            if col == self.CHANGE:
                text = self.change(c)[0]
                if text == "new":
                    return "Not among the candidates of the previous ranking"
                if text:
                    return f"Rank {c.rank}, was {self._previous_rank[c.inchikey14]} in the previous ranking"
            return None
        if role == Qt.ItemDataRole.BackgroundRole and self.is_reference(c):
            return QBrush(QColor("#dff3e4"))
        if role == Qt.ItemDataRole.FontRole and self.is_reference(c):
            f = QFont()
            f.setBold(True)
            return f
        if role == Qt.ItemDataRole.ForegroundRole and col == self.CHANGE:
            text = self.change(c)[0]
            color = {"n": "#1f5fbf", "▲": "#1b7f3b", "▼": "#b3261e"}.get(text[:1])
            return QBrush(QColor(color)) if color else None
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if col in (self.RANK, self.COUNT, self.FREQUENCY, self.SIMILARITY, self.SCORE):
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if col == self.CHANGE:
                return int(Qt.AlignmentFlag.AlignCenter)
        return None


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
    """The spectra list sorted by any column and filtered with :class:`~msgpt_gui.entries.SpectraFilter`
    (m/z, RT ranges and text; see :mod:`msgpt_gui.entries`)."""

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
        model = self.sourceModel()
        return self.filter.matches(model.entries[row], model.supported_adducts)


def short_source(path: str) -> str:
    return Path(path).name if path else ""
