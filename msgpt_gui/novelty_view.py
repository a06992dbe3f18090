"""Novelty in the app: a Novelty column and filter on the candidates (training corpus / your list / new),
and the known-structures list setting, read in the background (:func:`msgpt_gui.logic.insights.read_known_list`)."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QComboBox

from engine.insight.novelty import CORPUS, NEW, USER, NoveltyMarker, categories
from engine.model.known import KnownStructures

from .candidates_model import CandidatesModel
from .logic.insights import KnownList, read_known_list
from .logic.libraries import ORIGIN_FILTERS, origin_accepted
from .models import DISPLAY, SORT_ROLE, SortProxy
from .workers import GeneratorWorker

log = logging.getLogger(__name__)

SETTINGS_KEY = "novelty/known_list"
NOVELTY_TIP = ("Is the candidate known? 'training corpus': the model was trained on this structure (it may recall "
               "it rather than infer it); 'user list': in your list of known structures (Model ▸ Known Structures "
               "List…); 'new': in neither. Compared by the first InChIKey block (stereochemistry ignored)")
FILTERS = (  # label, categories shown (None: every row)
    ("All candidates", None),
    ("New only", {NEW}),
    ("Known only", {CORPUS, USER}),
    ("Training corpus", {CORPUS}),
    ("Your list", {USER}),
)
_COLORS = {NEW: "#1b7f3b", CORPUS: "#6b6b6b", USER: "#1f5fbf"}


class NoveltyCandidatesModel(CandidatesModel):
    """The candidates table with a Novelty column (labels from a :class:`~engine.insight.novelty.NoveltyMarker`)."""

    NOVELTY = len(CandidatesModel.COLUMNS)
    COLUMNS = (*CandidatesModel.COLUMNS, "Novelty")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.marker: NoveltyMarker | None = None
        self.labels: dict[str, str] = {}

    def set_result(self, result, previous=None, formula_scores=None) -> None:
        self._label(result.candidates if result is not None else ())
        super().set_result(result, previous, formula_scores)

    def set_marker(self, marker: NoveltyMarker | None) -> None:
        self.beginResetModel()
        self.marker = marker
        self._label(self.candidates)
        self.endResetModel()

    def _label(self, candidates) -> None:
        keys = [c.inchikey14 for c in candidates]
        marker = self.marker or NoveltyMarker()
        self.labels = dict(zip(keys, marker.labels(keys)))

    def label(self, c) -> str:
        return self.labels.get(c.inchikey14, "")

    def _tip(self, section: int) -> str:
        return NOVELTY_TIP if section == self.NOVELTY else super()._tip(section)

    def data(self, index, role=DISPLAY):
        if index.isValid() and index.column() == self.NOVELTY:
            c = self.candidates[index.row()]
            label = self.label(c)
            if role in (DISPLAY, SORT_ROLE):
                return label
            if role == Qt.ItemDataRole.ToolTipRole:
                return NOVELTY_TIP if label else "Not checked: this model ships no training-corpus list and no list " \
                                                 "of yours is set (Model ▸ Known Structures List…)"
            if role == Qt.ItemDataRole.ForegroundRole:
                first = label.split("; ")[0]
                return QBrush(QColor(_COLORS[first])) if first in _COLORS else None
        return super().data(index, role)


class NoveltyProxy(SortProxy):
    """The candidates' proxy with a novelty filter and an origin filter (all / de novo / from libraries,
    :func:`~msgpt_gui.logic.libraries.origin_accepted`) on top of the SMILES text filter."""

    def __init__(self, parent=None, filter_columns: tuple[int, ...] = ()):
        super().__init__(parent, filter_columns)
        self.shown_categories: set[str] | None = None
        self.origin_choice = "all"

    def set_origin(self, choice: str) -> None:
        if hasattr(self, "beginFilterChange"):  # Qt >= 6.10
            self.beginFilterChange()
            self.origin_choice = choice
            self.endFilterChange()
        else:
            self.origin_choice = choice
            self.invalidateFilter()

    def set_categories(self, shown: set[str] | None) -> None:
        if hasattr(self, "beginFilterChange"):  # Qt >= 6.10
            self.beginFilterChange()
            self.shown_categories = shown
            self.endFilterChange()
        else:
            self.shown_categories = shown
            self.invalidateFilter()

    def filterAcceptsRow(self, row, parent) -> bool:
        if self.origin_choice != "all":
            c = self.sourceModel().candidate(row)
            if c is None or not origin_accepted(c.origin, self.origin_choice):
                return False
        if self.shown_categories is not None:
            model = self.sourceModel()
            c = model.candidate(row)
            if c is None or not categories(model.label(c)) & self.shown_categories:
                return False
        return super().filterAcceptsRow(row, parent)


class NoveltyFilter(QComboBox):
    """Show all / new only / known only / training corpus / your list."""

    def __init__(self, proxy: NoveltyProxy, parent=None):
        super().__init__(parent)
        self.proxy = proxy
        for label, _ in FILTERS:
            self.addItem(label)
        self.setToolTip("Show candidates by novelty: " + NOVELTY_TIP)
        self.currentIndexChanged.connect(lambda i: self.proxy.set_categories(FILTERS[i][1]))


class OriginFilter(QComboBox):
    """Show all candidates / de novo ones / those from libraries."""

    def __init__(self, proxy: NoveltyProxy, parent=None):
        super().__init__(parent)
        self.proxy = proxy
        for _, label in ORIGIN_FILTERS:
            self.addItem(label)
        self.setToolTip("Show candidates by origin: drawn by the model (de novo) or given by a structure or "
                        "spectral library (Run ▸ Libraries…)")
        self.currentIndexChanged.connect(lambda i: self.proxy.set_origin(ORIGIN_FILTERS[i][0]))


class NoveltyController(QObject):
    """The marker in use: the model's training-corpus set and the user's list (a setting), read in the
    background; ``changed`` whenever either changes."""

    changed = Signal(object)  # the NoveltyMarker now in use
    message = Signal(str, str)  # level, text
    list_loaded = Signal(str)  # path of the user's list ("" when it failed or was cleared)

    def __init__(self, settings, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.corpus: KnownStructures | None = None
        self.user: KnownStructures | None = None
        self.user_path = ""
        self.loader: GeneratorWorker | None = None
        saved = settings.get(SETTINGS_KEY, "", str) if settings is not None else ""
        if saved and Path(saved).is_file():
            self.load_list(saved)
        elif saved:
            log.warning("The known-structures list %s is gone; no list is used.", saved)

    @property
    def marker(self) -> NoveltyMarker:
        return NoveltyMarker(self.corpus, self.user)

    def set_bundle(self, bundle) -> None:
        self.corpus = bundle.known_structures if bundle is not None else None
        self.changed.emit(self.marker)

    def load_list(self, path: str | Path) -> None:
        """Read a list of known structures in the background; it replaces the current one when read."""
        if self.loader is not None:
            self.loader.cancel()
        worker = GeneratorWorker(read_known_list, str(path), name=f"reading {Path(path).name}")
        worker.returned.connect(self._loaded)
        worker.errored.connect(lambda msg: self._failed(str(path), msg))
        worker.finished.connect(lambda: self._finished(worker))
        self.loader = worker
        worker.start()

    def _loaded(self, listing: KnownList) -> None:
        self.user, self.user_path = listing.known, listing.path
        if self.settings is not None:
            self.settings.set(SETTINGS_KEY, listing.path)
        note = f"; {listing.n_problems} rows were not structures" if listing.n_problems else ""
        self.message.emit("info", f"Known structures: {len(listing.known):,} from {Path(listing.path).name}{note}.")
        self.changed.emit(self.marker)
        self.list_loaded.emit(listing.path)

    def _failed(self, path: str, message: str) -> None:
        self.message.emit("warning", f"Cannot use {path} as a list of known structures: {message}")
        self.list_loaded.emit("")

    def _finished(self, worker: GeneratorWorker) -> None:
        if self.loader is worker:
            self.loader = None
        worker.deleteLater()

    def clear_list(self) -> None:
        self.user, self.user_path = None, ""
        if self.settings is not None:
            self.settings.set(SETTINGS_KEY, "")
        self.changed.emit(self.marker)

    def shutdown(self, timeout_ms: int = 10000) -> None:
        if self.loader is not None:
            self.loader.cancel()
            self.loader.wait(timeout_ms)
