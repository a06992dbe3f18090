"""Ranked candidates: summary line, formula selector, sortable table with lazily drawn structures, detail pane.

What the table shows is the feature's ranking (``msgpt predict``'s ``feature_rank``,
:func:`msgpt_gui.logic.formulas.combine_results`): after a run of several formulas every candidate by its score
and its formula's probability (:data:`engine.insight.identification.FORMULA_WEIGHT`); the formula selector above
the table narrows it to one formula run. The summary's rank 1, the spectra list's Confidence and Level, and the
table's rank 1 are the same candidate."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import html

from PySide6.QtCore import QItemSelectionModel, Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine.elucidation.pipeline import SpectrumResult
from engine.formulas.groups import GROUP_ANSWER_KEY
from engine.insight.identification import identification_level

from .candidate_detail import ROW_HEIGHT, STRUCTURE_WIDTH, DetailPane, PixmapCache, StructureDelegate
from .candidates_model import CandidatesModel
from .columns import FillColumn
from .logic import evidence, tooltips
from .logic.confidence import missing_confidence
from .logic.entries import SpectrumEntry, Status
from .logic.formulas import formula_scores, run_label
from .logic.libraries import IDENTIFIED_TEXT, entry_level
from .models import KEY_ROLE, NO_FRAGMENTS_TIP, format_confidence
from .novelty_view import NoveltyCandidatesModel, NoveltyFilter, NoveltyProxy, OriginFilter

ALL_FORMULAS = "All formulas (feature ranking)"
FORMULA_CHOICE_TIP = (
    "The table shows the feature's ranking: identifications first, then your suspect lists' structures, then "
    "every candidate by its score and its formula's probability (as msgpt predict's feature_rank). Choose one "
    "formula to see only the candidates drawn for it, ranked within it")


def _html(text: str) -> str:
    """``text`` for a rich-text label: "<1%" or a title with "<" shows as written, not as a tag."""
    return html.escape(str(text), quote=False)


class CandidatesPanel(QWidget):
    """Everything about the candidates of the current spectrum."""

    candidate_selected = Signal(object)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.cache = PixmapCache()
        self.model = NoveltyCandidatesModel(self)  # + a Novelty column (training corpus / user list / new)
        self.proxy = NoveltyProxy(self, filter_columns=(CandidatesModel.SMILES, CandidatesModel.NAME,
                                                        CandidatesModel.FORMULA))
        self.proxy.setSourceModel(self.model)

        self.bundle = None  # the loaded model: why a result has no confidence (set when the model changes)
        self._shown = (None, None, 0)  # (entry, supported ion types, top k) of the last show_entry
        self._auto_key = None  # the candidate the app selected itself (rank 1), not the user
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.TextFormat.RichText)  # user data in it is escaped (_html)
        self.summary.setWordWrap(True)
        self.reference = QLabel()
        self.reference.setTextFormat(Qt.TextFormat.RichText)
        self.reference.setToolTip(tooltips.REFERENCE_RANK + "<br><br>" + tooltips.FIDELITY)
        self.formula_choice = QComboBox()
        self.formula_choice.setToolTip(FORMULA_CHOICE_TIP)
        self.formula_choice.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.formula_choice.setMinimumContentsLength(18)
        self.formula_choice.currentIndexChanged.connect(self._formula_chosen)
        self.formula_choice.hide()
        self.filter = QLineEdit(placeholderText="Filter SMILES, name…", clearButtonEnabled=True)
        self.filter.setToolTip("Show only candidates whose SMILES, name or formula contains this text (e.g. "
                               "'N', 'c1ccccc1' or 'fenamiphos')")
        self.filter.setMaximumWidth(200)
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
        self.table.setWordWrap(True)  # names and origin tags take the rows' height (a SMILES has no spaces: elided)
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
        fit_columns(self.table, {CandidatesModel.RANK: "9999", CandidatesModel.CHANGE: "▲99",
                                 CandidatesModel.NAME: "chlorpyrifos",
                                 CandidatesModel.ORIGIN: evidence.ORIGIN_SAMPLE,
                                 CandidatesModel.FORMULA: "C22H30NaO4", CandidatesModel.FORMULA_SCORE: "0.00 (#9)",
                                 CandidatesModel.SCORE: "-000.0", CandidatesModel.REFERENCE: "★ MSBNK-Eawag-EA290310",
                                 CandidatesModel.COUNT: "9999", CandidatesModel.FREQUENCY: "0.000",
                                 CandidatesModel.SIMILARITY: "0.000", NoveltyCandidatesModel.NOVELTY: "training corpus"},
                    bold_rows=True)  # the reference row is bold
        self.table.setColumnWidth(CandidatesModel.STRUCTURE, STRUCTURE_WIDTH)
        # SMILES take what is left, at least their width up to 30 characters (longer ones: elided in the middle)
        self.smiles_column = FillColumn(self.table, CandidatesModel.SMILES, min_chars=16, cap_chars=30)
        self.table.selectionModel().currentRowChanged.connect(self._current_changed)

        self.detail = DetailPane(self.cache)
        top = QHBoxLayout()
        top.addWidget(self.formula_choice)
        top.addStretch(1)
        top.addWidget(self.origin_filter)
        top.addWidget(self.novelty_filter)
        top.addWidget(self.filter)
        left = QWidget()
        lay = QVBoxLayout(left)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(3)
        lay.addWidget(self.summary)
        lay.addWidget(self.reference)
        lay.addLayout(top)
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
        (e.g. the spectrum holds no fragments); ``formula_scores``: formula -> (rank, probability) of the formula
        candidates the candidates were drawn for; ``detail``: the summary's tooltip (HTML: the formula runs);
        ``formula_text``: what the structures were drawn for when not the result's formula (several formulas);
        ``level``: the identification level of what the table shows (:func:`~msgpt_gui.logic.libraries.entry_level`)."""
        keep = self.selected_key()
        if keep == self._auto_key:
            keep = None  # picked by the app, not the user: rank 1 again (a ranking of several formulas moves it)
        self.model.set_result(result, previous, formula_scores)
        # shown for candidates drawn for ranked formula candidates only (a library's given formulas have none)
        self.table.setColumnHidden(CandidatesModel.FORMULA_SCORE, not self.model.formula_scores)
        self._summarise(result, running, note, formula_text, level)
        about = f"Identification level {level.code}: {level.text}" if level is not None and result else ""
        self.summary.setToolTip("\n\n".join(x for x in (about, detail) if x))
        if flag:
            self.summary.setText(self.summary.text() + f"<br><span style='color:#a15c00'>⚠ {_html(flag)}</span>")
        if result is not None and result.ion_mapping:  # an ion type the model runs by a mapping (engine.model.ion_mapping)
            self.summary.setText(self.summary.text() + f"<br>{result.spectrum.adduct}: {_html(result.ion_mapping)}")
        group = result.spectrum.metadata.get(GROUP_ANSWER_KEY) if result is not None else None
        if group:  # a compound group's member shows its lead's answer (engine.formulas.groups)
            said = _html(group[:1].upper() + group[1:])
            self.summary.setText(self.summary.text() + f"<br><span style='color:#1f5fbf'>{said}</span>")
        row = self._proxy_row_of(keep) if keep else None
        if row is None and self.proxy.rowCount() and not running:
            row = 0
        if row is not None:
            idx = self.proxy.index(row, CandidatesModel.RANK)
            self.table.selectionModel().setCurrentIndex(
                idx, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
            )
            self._auto_key = idx.data(KEY_ROLE) if keep is None else self._auto_key
        else:
            self.detail.show_candidate(None)

    def show_entry(self, e: SpectrumEntry | None, supported, top_k: int) -> None:
        """The candidates of a spectrum of the list (``supported``: the model's ion types; ``top_k``: how many
        formula candidates Run takes), or why it has none: the feature's ranking, or the formula run chosen above
        the table."""
        if e is not self._shown[0]:
            self.formula_choice.setProperty("run", None)  # another spectrum: its whole ranking first
        self._shown = (e, supported, top_k)
        runs = e.formula_runs if e is not None and e.spectrum is not None else []
        self._fill_formula_choice(runs)
        if e is None:
            self.show_result(None)
            return
        if e.spectrum is None:
            self.show_result(None, note=f"<span style='color:#a15c00'>{_html(e.status_text(supported))}</span>")
            return
        running = e.status in (Status.RUNNING, Status.QUEUED)
        flag = NO_FRAGMENTS_TIP + " (the spectrum holds only the precursor)" if e.no_fragments else ""
        ion_note = getattr(e, "ion_note", "")
        flag = " · ".join(x for x in (ion_note, flag) if x)
        run = self.chosen_run()
        if run is not None:  # one formula run, ranked within it
            shown = run.shown
            done = [] if running or shown is None or shown.partial else [shown]
            self.show_result(shown, run.result if run.live is not None else run.previous, running=running,
                             note=_no_candidates_note(run, supported, top_k) if shown is None else "", flag=flag,
                             formula_scores=formula_scores([shown]), detail=_formula_runs_detail(runs),
                             level=identification_level(done) if done else None)
            return
        shown = e.shown
        live = e.live is not None or any(r.live is not None for r in runs)
        note = _no_candidates_note(e, supported, top_k) if shown is None else ""
        self.show_result(shown, e.baseline, running=running and live, note=note, flag=flag,
                         formula_scores=formula_scores(r.shown for r in runs) if runs else formula_scores([shown]),
                         detail=_formula_runs_detail(runs),
                         formula_text=f"{len(runs)} formulas" if len(runs) > 1 else "",
                         level=entry_level(e) if not running else None)

    # -- the formula selector
    def chosen_run(self) -> SpectrumEntry | None:
        """The formula run the table is narrowed to (None: the feature's ranking)."""
        e = self._shown[0]
        key = self.formula_choice.property("run")
        if e is None or key is None:
            return None
        return next((r for r in e.formula_runs if (r.spectrum.formula, r.spectrum.adduct) == tuple(key)), None)

    def choose_formula(self, formula: str | None, adduct: str | None = None) -> None:
        """Narrow the table to the run of ``formula`` (and ``adduct``; None: the first of that formula), or show
        the feature's ranking again (``formula`` None)."""
        for i in range(self.formula_choice.count()):
            key = self.formula_choice.itemData(i)
            if (formula is None and key is None) or (key is not None and key[0] == formula
                                                     and adduct in (None, key[1])):
                self.formula_choice.setCurrentIndex(i)
                return
        raise ValueError(f"no formula run of {formula} {adduct or ''} to choose")

    def _fill_formula_choice(self, runs) -> None:
        items = [(ALL_FORMULAS, None)] + [(self._run_item(r), (r.spectrum.formula, r.spectrum.adduct)) for r in runs]
        keys = [k for _, k in items]
        chosen = self.formula_choice.property("run")
        chosen = tuple(chosen) if chosen is not None and tuple(chosen) in keys else None
        self.formula_choice.blockSignals(True)
        listed = [self.formula_choice.itemData(i) for i in range(self.formula_choice.count())]
        if [None if k is None else tuple(k) for k in listed] != keys:  # Qt may hand a tuple back as a list
            self.formula_choice.clear()
            for text, key in items:
                self.formula_choice.addItem(text, key)
        else:
            for i, (text, _) in enumerate(items):
                self.formula_choice.setItemText(i, text)
        self.formula_choice.setCurrentIndex(keys.index(chosen))
        self.formula_choice.setProperty("run", chosen)
        self.formula_choice.blockSignals(False)
        self.formula_choice.setVisible(len(runs) > 1)

    @staticmethod
    def _run_item(run) -> str:
        got = (f"{len(run.shown.candidates)} cand." if run.shown is not None else
               "failed" if run.status == Status.FAILED else run.status)
        return f"{run_label(run)} · {got}"

    def _formula_chosen(self, index: int) -> None:
        key = self.formula_choice.itemData(index)
        self.formula_choice.setProperty("run", key)
        e, supported, top_k = self._shown
        if e is not None:
            self.show_entry(e, supported, top_k)

    def _summarise(self, r: SpectrumResult | None, running: bool, note: str, formula_text: str = "",
                   level=None) -> None:
        """Two lines: what rank 1 is and how sure (name, formula, origin, confidence or level), then how the
        candidates were drawn; a third when the confidence is left out, saying why."""
        if r is None:
            self.summary.setText(note or "<span style='color:#777'>No candidates yet: select spectra and press "
                                 "Run (Ctrl+R).</span>")
            self.reference.hide()
            return
        p = r.params
        done = not (running or r.partial)
        formula = _html(formula_text or f"formula {r.spectrum.formula}")
        identified = level is not None and level.code == "2a"
        why_not = missing_confidence(r, self.bundle) if done and not identified else ""
        live = "" if done else (" <span style='color:#1f5fbf'>(updating…)</span>" if running else  # a kept partial:
                                " <span style='color:#a15c00'>(cancelled (partial): the deep search stopped)</span>")
        first = r.candidates[0] if r.candidates else None
        head = ""
        if first is not None:
            name = evidence.name_text(first)
            sure = (f"<b style='color:#1b7f3b'>{IDENTIFIED_TEXT}</b>" + (  # with the identification's confidence
                    f", confidence <b>{_html(format_confidence(r.confidence))}</b>" if done and r.confidence is not None
                    else "") if identified else
                    f"confidence <b>{_html(format_confidence(r.confidence))}</b>"
                    + (" <span style='color:#555'>(its evidence against your list's other isomers, with "
                       f"{r.params.suspects_present:.0%} of your lists' formula matches expected present: "
                       "Run ▸ Libraries…)</span>" if first.suspect else "")
                    if done and r.confidence is not None else "")
            label = name or (first.smiles if len(first.smiles) <= 40 else first.smiles[:39] + "…")
            head = (f"Rank 1: <b>{_html(label)}</b>"
                    f" · {_html(first.formula)} {_html(r.spectrum.adduct or '')} · {_html(evidence.origin_text(first))}"
                    + (f" · {sure}" if sure else "")
                    + (f" · level <b>{_html(level.code)}</b>" if level is not None else "") + "<br>")
        elif done:
            head = (f"<span style='color:#a15c00'>No drawn structure is valid with {formula}: raise the pool size B "
                    "to draw more, or widen the κ band.</span><br>")
        n_edits = sum(1 for c in r.candidates if c.edited_from and not c.count)
        self.summary.setText(
            head + f"<span style='color:#555'>{len(r.candidates)} candidate{'' if len(r.candidates) == 1 else 's'}"
            f"{live} from {r.n_samples} structures drawn ({r.n_valid} valid, {r.n_formula_consistent} with {formula})"
            + (f" and {n_edits} isomer edit{'' if n_edits == 1 else 's'} of them" if n_edits else "")
            + f" · κ {p.kappa_min:g}–{p.kappa_max:g}, M = {p.groups}, B = {p.pool_size}, seed {p.seed}"
            + (f" · {r.seconds:.1f} s, {r.new_samples} newly drawn" if done else "") + "</span>"
            + (f"<br><span style='color:#777'>No confidence: {_html(why_not)}.</span>" if why_not and first else "")
        )
        self._show_reference(r)

    def _show_reference(self, r: SpectrumResult) -> None:
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
    """The formula candidates Run took, one a line (the summary's tooltip; "" when it took none)."""
    if not runs:
        return ""
    parts = []
    for r in runs:
        got = (f"{len(r.shown.candidates)} candidates" if r.shown is not None else
               ("failed" if r.status == Status.FAILED else r.status))
        parts.append(f"{run_label(r)}: {got}")
    return "Formula candidates run (the table ranks their candidates together):\n" + "\n".join(parts)


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
