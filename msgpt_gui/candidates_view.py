"""Ranked candidates: summary line, sortable table with lazily drawn structures, detail pane."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import html
from collections import OrderedDict

from PySide6.QtCore import QItemSelectionModel, QSize, Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics, QGuiApplication, QImage, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStyledItemDelegate,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine.elucidation.pipeline import SpectrumResult
from engine.chem.plausibility import plausibility_note

from .columns import FillColumn
from .logic import tooltips
from .logic.confidence import missing_confidence
from .logic.depict import depict_png
from .logic.entries import SpectrumEntry, Status
from .logic.formulas import formula_scores, library_run_label
from .logic.libraries import IDENTIFIED_TEXT, entry_level
from .logic.plotting import find_hit, plot_mirror
from .models import IMPLAUSIBLE, KEY_ROLE, NO_FRAGMENTS_TIP, CandidatesModel, format_confidence
from .novelty_view import NoveltyCandidatesModel, NoveltyFilter, NoveltyProxy, OriginFilter

ROW_HEIGHT = 116
STRUCTURE_WIDTH = 164


def _html(text: str) -> str:
    """``text`` for a rich-text label: "<1%" or a title with "<" shows as written, not as a tag."""
    return html.escape(str(text), quote=False)


class PixmapCache:
    """Structure pixmaps by (SMILES, size, device pixel ratio); drawn on first paint, kept (LRU)."""

    def __init__(self, size: int = 1000):
        self.size = size
        self._cache: OrderedDict[tuple, QPixmap] = OrderedDict()
        self.rendered = 0  # how many were drawn (tests check that drawing is lazy)

    def get(self, smiles: str, width: int, height: int, ratio: float = 1.0) -> QPixmap | None:
        key = (smiles, width, height, ratio)
        pm = self._cache.get(key)
        if pm is not None:
            self._cache.move_to_end(key)
            return pm
        png = depict_png(smiles, int(width * ratio), int(height * ratio))
        if png is None:
            return None
        image = QImage.fromData(png, "PNG")
        pm = QPixmap.fromImage(image)
        pm.setDevicePixelRatio(ratio)
        self.rendered += 1
        self._cache[key] = pm
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return pm


class StructureDelegate(QStyledItemDelegate):
    """Paints the candidate's 2D structure in the Structure column (only rows that are visible)."""

    def __init__(self, cache: PixmapCache, parent=None):
        super().__init__(parent)
        self.cache = cache

    def paint(self, painter, option, index):
        super().paint(painter, option, index)  # background, selection, reference highlight
        model = index.model()
        smiles = model.data(index.siblingAtColumn(CandidatesModel.SMILES))
        if not smiles:
            return
        rect = option.rect.adjusted(3, 3, -3, -3)
        ratio = painter.device().devicePixelRatioF() if painter.device() else 1.0
        pm = self.cache.get(smiles, rect.width(), rect.height(), ratio)
        if pm is not None:
            painter.drawPixmap(rect.topLeft(), pm)

    def sizeHint(self, option, index):
        return QSize(STRUCTURE_WIDTH, ROW_HEIGHT)


class DetailPane(QWidget):
    """Large depiction of the selected candidate with its identifiers and copy buttons."""

    def __init__(self, cache: PixmapCache, parent=None):
        super().__init__(parent)
        self.cache = cache
        self.candidate = None
        self.picture = QLabel(alignment=Qt.AlignmentFlag.AlignCenter)
        self.picture.setMinimumSize(220, 170)
        self.picture.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.picture.setStyleSheet("background: white; border: 1px solid #d0d0d0;")
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.smiles = QLineEdit(readOnly=True)
        self.inchikey = QLineEdit(readOnly=True)
        self.scores = QLabel()
        self.scores.setTextFormat(Qt.TextFormat.PlainText)  # numbers and a plausibility note, never markup
        self.scores.setWordWrap(True)
        self.library = QLabel()
        self.library.setTextFormat(Qt.TextFormat.RichText)  # library texts in it are escaped (_html)
        self.library.setWordWrap(True)
        self.library.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.mirror = MirrorCanvas()
        self.copy_smiles = QPushButton("Copy SMILES")
        self.copy_inchikey = QPushButton("Copy InChIKey")
        self.copy_smiles.clicked.connect(lambda: self._copy(self.smiles.text()))
        self.copy_inchikey.clicked.connect(lambda: self._copy(self.inchikey.text()))
        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("SMILES", self.smiles)
        form.addRow("InChIKey", self.inchikey)
        buttons = QHBoxLayout()
        buttons.addWidget(self.copy_smiles)
        buttons.addWidget(self.copy_inchikey)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.picture, 1)
        layout.addLayout(form)
        layout.addWidget(self.scores)
        layout.addWidget(self.library)
        layout.addWidget(self.mirror, 1)
        layout.addLayout(buttons)
        self.show_candidate(None)

    def show_candidate(self, c, is_reference: bool = False, matches=None) -> None:
        """``matches``: the result's spectral library search (its hit of ``c`` is drawn as a mirror plot)."""
        self.candidate = c
        has = c is not None
        self.library.setText(library_html(c) if has else "")
        self.library.setVisible(bool(has and self.library.text()))
        self.mirror.show_hit(matches, find_hit(matches, c) if has else None)
        for w in (self.copy_smiles, self.copy_inchikey):
            w.setEnabled(has)
        if not has:
            self.title.setText("<b>No candidate selected</b>")
            self.picture.setPixmap(QPixmap())
            self.picture.setText("")
            self.smiles.clear()
            self.inchikey.clear()
            self.scores.setText("")
            return
        ref = " — <span style='color:#1b7f3b'>★ the reference structure</span>" if is_reference else ""
        self.title.setText(f"<b>Rank {c.rank}</b> · {_html(c.formula)} · {c.monoisotopic_mass:.4f} Da{ref}")
        self.smiles.setText(c.smiles)
        self.smiles.setCursorPosition(0)
        self.inchikey.setText(c.inchikey)
        self.inchikey.setCursorPosition(0)
        note = plausibility_note(c.smiles)
        self.scores.setText(
            f"Generated {c.count}× (frequency {c.frequency:.3f}) · posterior similarity {c.posterior_similarity:.3f}"
            + ("" if c.fingerprint_score != c.fingerprint_score else f" · fingerprint score {c.fingerprint_score:.1f}")
            + ("" if c.fragment_score != c.fragment_score else f" · fragment score {c.fragment_score:.1f}")
            + ("" if c.analog_score != c.analog_score else f" · analog score {c.analog_score:.2f}"
               + (f" (like {c.analog_reference})" if c.analog_reference else ""))
            + (f"\n⚠ {IMPLAUSIBLE}: {note}" if note else "")
        )
        self._draw()

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._draw()

    def _draw(self) -> None:
        if self.candidate is None:
            return
        size = self.picture.contentsRect().size()
        w, h = max(size.width() - 4, 60), max(size.height() - 4, 60)
        pm = self.cache.get(self.candidate.smiles, w, h, self.devicePixelRatioF())
        if pm is None:
            self.picture.setText("(cannot draw this structure)")
        else:
            self.picture.setPixmap(pm)

    @staticmethod
    def _copy(text: str) -> None:
        if text:
            QGuiApplication.clipboard().setText(text)


def library_html(c) -> str:
    """The library lines of the detail pane: which library holds the candidate (identifier, name) and its
    reference spectrum match (accession, licence, contributor); "" for a de novo structure only."""
    lines = []
    if c.library:
        ident = f" · {_html(c.library_id)}" if c.library_id else ""
        lines.append(f"Library: <b>{_html(c.library)}</b>{ident}")
    if c.compound_name:
        lines.append(f"Name: {_html(c.compound_name)}")
    ev = c.spectral
    if ev is not None:
        verdict = ("<b style='color:#1b7f3b'>identified (level 2a)</b>" if ev.identified else
                   "<span style='color:#a15c00'>matched, below the identification threshold</span>")
        lines.append(f"Reference spectrum {_html(ev.accession)} ({_html(ev.library)}): {verdict}, similarity "
                     f"{ev.similarity:.2f}, {ev.matched_peaks} matched peaks")
        about = [x for x in (ev.reference_name, ev.adduct, ev.collision_energy, ev.instrument_type) if x]
        if about:
            lines.append(_html(" · ".join(about)))
        lines.append(f"Licence: {_html(ev.license or 'not given')} · contributor: {_html(ev.contributor or 'not given')}")
    return "<br>".join(lines)


class MirrorCanvas(QWidget):
    """The mirror plot of a library hit (query up, reference down), hidden when there is none."""

    def __init__(self, parent=None):
        super().__init__(parent)
        from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg
        from matplotlib.figure import Figure

        self.figure = Figure(figsize=(3.4, 2.0), dpi=100, layout="constrained")
        self.canvas = FigureCanvasQTAgg(self.figure)
        self.canvas.setMinimumHeight(150)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.canvas)
        self.ax = self.figure.add_subplot()
        self.hit = None
        self.setVisible(False)

    def show_hit(self, matches, hit) -> None:
        if hit is self.hit:
            return
        self.hit = hit
        self.ax.clear()
        if hit is not None:
            plot_mirror(matches, hit, ax=self.ax, fontsize=7)
            self.canvas.draw_idle()
        self.setVisible(hit is not None)


class CandidatesPanel(QWidget):
    """Everything about the candidates of the current spectrum."""

    candidate_selected = Signal(object)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.cache = PixmapCache()
        self.model = NoveltyCandidatesModel(self)  # + a Novelty column (training corpus / user list / new)
        self.proxy = NoveltyProxy(self, filter_columns=(CandidatesModel.SMILES,))
        self.proxy.setSourceModel(self.model)

        self.bundle = None  # the loaded model: why a result has no confidence (set when the model changes)
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.TextFormat.RichText)  # user data in it is escaped (_html)
        self.summary.setWordWrap(True)
        self.reference = QLabel()
        self.reference.setTextFormat(Qt.TextFormat.RichText)
        self.reference.setToolTip(tooltips.REFERENCE_RANK + "<br><br>" + tooltips.FIDELITY)
        self.filter = QLineEdit(placeholderText="Filter SMILES…", clearButtonEnabled=True)
        self.filter.setToolTip("Show only candidates whose SMILES contains this text (e.g. 'N' or 'c1ccccc1')")
        self.filter.setMaximumWidth(220)
        self.filter.textChanged.connect(self.proxy.set_filter_text)
        self.novelty_filter = NoveltyFilter(self.proxy)
        self.origin_filter = OriginFilter(self.proxy)

        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(CandidatesModel.RANK, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        self.table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.delegate = StructureDelegate(self.cache, self.table)
        self.table.setItemDelegateForColumn(CandidatesModel.STRUCTURE, self.delegate)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(False)
        fit_columns(self.table, {CandidatesModel.RANK: "9999", CandidatesModel.CHANGE: "▲99", CandidatesModel.FORMULA:
                                 "C22H30NaO4", CandidatesModel.FORMULA_SCORE: "0.00 (#9)",
                                 CandidatesModel.COUNT: "9999", CandidatesModel.FREQUENCY: "0.000",
                                 CandidatesModel.SIMILARITY: "0.000", CandidatesModel.SCORE: "-000.0",
                                 CandidatesModel.REFERENCE: "★ reference",
                                 CandidatesModel.ORIGIN: "✔ spectral library",
                                 NoveltyCandidatesModel.NOVELTY: "training corpus"},
                    bold_rows=True)  # the reference row is bold
        self.table.setColumnWidth(CandidatesModel.STRUCTURE, STRUCTURE_WIDTH)
        # SMILES take what is left, at least their width up to 30 characters (longer ones: elided in the middle)
        self.smiles_column = FillColumn(self.table, CandidatesModel.SMILES, min_chars=16, cap_chars=30)
        self.table.selectionModel().currentRowChanged.connect(self._current_changed)

        self.detail = DetailPane(self.cache)
        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addWidget(self.origin_filter)
        top.addWidget(self.novelty_filter)
        top.addWidget(self.filter)
        left = QWidget()
        lay = QVBoxLayout(left)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(3)
        lay.addLayout(top)
        lay.addWidget(self.reference)
        lay.addWidget(self.table, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("candidates_splitter")
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.detail)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addWidget(self.splitter)
        self.show_result(None)

    # -- showing a result
    def show_result(self, result: SpectrumResult | None, previous: SpectrumResult | None = None,
                    running: bool = False, note: str = "", flag: str = "", formula_scores: dict | None = None,
                    detail: str = "", formula_text: str = "", level=None) -> None:
        """``note``: what to say when there is no result; ``flag``: a warning shown with the result
        (e.g. the spectrum holds no fragments); ``formula_scores``: formula -> (rank, score) of the formula
        candidates the candidates were drawn for; ``detail``: a line (HTML) under the summary; ``formula_text``:
        what the structures were drawn for when not the result's formula (several formulas); ``level``: the
        spectrum's identification level (:func:`~msgpt_gui.logic.libraries.entry_level`)."""
        keep = self.selected_key()
        self.model.set_result(result, previous, formula_scores)
        # shown for candidates drawn for ranked formula candidates only (a library's given formulas have none)
        self.table.setColumnHidden(CandidatesModel.FORMULA_SCORE, not self.model.formula_scores)
        self._summarise(result, running, note, formula_text, level)
        if detail and result is not None:
            self.summary.setText(self.summary.text() + f"<br>{detail}")
        if flag:
            self.summary.setText(self.summary.text() + f"<br><span style='color:#a15c00'>⚠ {flag}</span>")
        row = self._proxy_row_of(keep) if keep else None
        if row is None and self.proxy.rowCount() and not running:
            row = 0
        if row is not None:
            idx = self.proxy.index(row, CandidatesModel.RANK)
            self.table.selectionModel().setCurrentIndex(
                idx, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
            )
        else:
            self.detail.show_candidate(None)

    def show_entry(self, e: SpectrumEntry | None, supported, top_k: int) -> None:
        """The candidates of a spectrum of the list (``supported``: the model's ion types; ``top_k``: how many
        formula candidates Run takes), or why it has none."""
        if e is None:
            self.show_result(None)
        elif e.spectrum is None:
            self.show_result(None, note=f"<span style='color:#a15c00'>{_html(e.status_text(supported))}</span>")
        else:
            running = e.status in (Status.RUNNING, Status.QUEUED)
            shown = e.shown
            live = e.live is not None or any(r.live is not None for r in e.formula_runs)
            note = _no_candidates_note(e, supported, top_k) if shown is None else ""
            flag = NO_FRAGMENTS_TIP + " (the spectrum holds only the precursor)" if e.no_fragments else ""
            runs = e.formula_runs
            self.show_result(shown, e.baseline, running=running and live, note=note, flag=flag,
                             formula_scores=formula_scores(r.shown for r in runs) if runs else
                             formula_scores([shown]), detail=_formula_runs_detail(runs),
                             formula_text=f"one of the {len(runs)} formulas" if len(runs) > 1 else "",
                             level=entry_level(e) if not running else None)

    def _summarise(self, r: SpectrumResult | None, running: bool, note: str, formula_text: str = "",
                   level=None) -> None:
        if r is None:
            self.summary.setText(note or "<span style='color:#777'>No candidates yet: select spectra and press "
                                 "Run (Ctrl+R).</span>")
            self.reference.hide()
            return
        p = r.params
        formula = _html(formula_text or f"formula {r.spectrum.formula}")
        identified = level is not None and level.code == "2a"
        why_not = missing_confidence(r, self.bundle) if not (running or identified) else ""
        live = " <span style='color:#1f5fbf'>(updating…)</span>" if running or r.partial else ""
        self.summary.setText(
            f"<b>{len(r.candidates)} candidate{'' if len(r.candidates) == 1 else 's'}</b>{live} from {r.n_samples} structures drawn "
            f"({r.n_valid} valid, {r.n_formula_consistent} with {formula}) · "
            f"κ {p.kappa_min:g}–{p.kappa_max:g}, M = {p.groups}, B = {p.pool_size}, seed {p.seed}"
            + (f" · {r.seconds:.1f} s, {r.new_samples} newly drawn" if not (running or r.partial) else "")
            + (f"<br>Confidence that rank 1 is right: <b>{_html(format_confidence(r.confidence))}</b>"
               if r.confidence is not None and not (running or r.partial or identified) and r.candidates else "")
            + (f"<br>Rank 1: <b style='color:#1b7f3b'>{IDENTIFIED_TEXT}</b>" if identified else "")
            + (f"<br>Identification level <b>{_html(level.code)}</b>: {_html(level.text)}" if level is not None
               else "")
            + (f"<br><span style='color:#777'>No confidence: {_html(why_not)}.</span>" if why_not else "")
            + (f"<br><span style='color:#a15c00'>No drawn structure is valid with {formula}: "
               "raise the pool size B to draw more, or widen the κ band.</span>"
               if not (running or r.partial or r.candidates) else "")
        )
        if r.reference_inchikey14:
            status = r.reference_status
            color = {"exact": "#1b7f3b", "absent": "#b3261e"}.get(status, "#a15c00")
            fid = f" · spectrum fidelity {r.fidelity:.2f}" if r.fidelity is not None else ""
            words = {"exact": "ranked first (exact)", "absent": "not among the candidates (absent)"}
            self.reference.setText(
                f"Reference structure from the file: <b style='color:{color}'>"
                f"{words.get(status, f'ranked {status}')}</b>{fid}"
            )
            self.reference.show()
        else:
            self.reference.hide()

    # -- selection
    def selected_key(self) -> str | None:
        idx = self.table.selectionModel().currentIndex()
        return idx.data(KEY_ROLE) if idx.isValid() else None

    def select_candidate(self, key: str) -> None:
        """Make the candidate with this InChIKey first block the current row (when it is listed)."""
        row = self._proxy_row_of(key)
        if row is not None:
            self.table.selectionModel().setCurrentIndex(
                self.proxy.index(row, 0), QItemSelectionModel.SelectionFlag.ClearAndSelect
                | QItemSelectionModel.SelectionFlag.Rows)

    def _proxy_row_of(self, key: str) -> int | None:
        for row in range(self.proxy.rowCount()):
            if self.proxy.index(row, 0).data(KEY_ROLE) == key:
                return row
        return None

    def _current_changed(self, current, _previous) -> None:
        if not current.isValid():
            self.detail.show_candidate(None)
            return
        c = self.model.candidate(self.proxy.mapToSource(current).row())
        matches = self.model.result.spectral_matches if self.model.result is not None else None
        self.detail.show_candidate(c, c is not None and self.model.is_reference(c), matches)
        self.candidate_selected.emit(c)



def _no_candidates_note(e: SpectrumEntry, supported, top_k: int) -> str:
    """Why a spectrum shows no candidates (HTML; "" when nothing needs saying)."""
    if e.status in (Status.FAILED, Status.SKIPPED):
        return f"<span style='color:#b3261e'>{_html(e.status_text(supported))}</span>"
    if e.status == Status.NOT_RUN and e.blocker(supported) is not None:
        return f"<span style='color:#a15c00'>{_html(e.status_text(supported))}</span>"
    if e.status in (Status.RUNNING, Status.QUEUED):
        return ("<span style='color:#1f5fbf'>Ranking formula candidates…</span>"
                if e.needs_formulas and not e.formula_runs else
                "<span style='color:#1f5fbf'>Drawing structures…</span>")
    if e.status == Status.CANCELLED:
        return "Cancelled: no candidates. Press Run (Ctrl+R) to start again."
    if e.needs_formulas:
        return (f"<span style='color:#777'>No molecular formula: Run (Ctrl+R) ranks the formula candidates "
                f"and elucidates the best {top_k} (Formulas tab: pick one there to run that one).</span>")
    return ""


def _formula_runs_detail(runs) -> str:
    """A line on the formula candidates Run took (HTML; "" when it took none)."""
    if not runs:
        return ""
    parts = []
    for r in runs:
        c = r.candidate
        got = (f"{len(r.shown.candidates)}" if r.shown is not None else
               ("failed" if r.status == Status.FAILED else r.status))
        name = (f"#{c.rank} {r.spectrum.formula} {r.spectrum.adduct} ({c.probability:.2f})" if c is not None else
                library_run_label(r.spectrum))
        parts.append(f"{name}: {got}")
    return "Formula candidates run (ranks run on formula by formula): " + _html(" · ".join(parts))

def fit_columns(view, samples: dict[int, str], bold_rows: bool = False) -> None:
    """Width of each column = its header or a sample value (whichever is wider), in the view's font (a table or a
    tree view)."""
    font = QFont(view.font())
    font.setBold(bold_rows)
    bold = QFontMetrics(font)
    header = view.horizontalHeader() if isinstance(view, QTableView) else view.header()
    header_fm = header.fontMetrics()
    model = view.model()
    for col, sample in samples.items():
        header = str(model.headerData(col, Qt.Orientation.Horizontal) or "")
        width = max(bold.horizontalAdvance(sample), header_fm.horizontalAdvance(header) + 8) + 14
        view.setColumnWidth(col, width)
