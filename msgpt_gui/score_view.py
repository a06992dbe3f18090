"""Score your own structure: type or paste (from a sketcher) a structure and see what the model says about
it for the selected spectrum: fingerprint score and rank among the candidates, decoder likelihood,
formula check, explained peaks, novelty (:func:`engine.insight.structure_score.score_structures`)."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import html
import math
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QImage, QKeySequence, QPixmap, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.elucidation.pipeline import QueryParams
from engine.errors import MsgptError
from engine.insight.structure_score import SCORE_COLUMNS, StructureScore, score_structures

from .logic.depict import depict_png
from .logic.insights import scoring_session

PICTURE = (120, 84)
COLUMNS = ("Structure", "SMILES", "Formula", "FP score", "FP rank", "Cand. rank", "Decoder log p", "Explained peaks",
           "Novelty", "Note")
TIPS = (
    "Your structure (stereochemistry removed: the fingerprint and the decoder ignore it)",
    "Canonical SMILES of what was read",
    "Its formula: ✓ equals the spectrum's; ✗ differs (the scores are computed all the same)",
    "Fingerprint score: log-likelihood of its Morgan fingerprint under the spectrum's posterior (higher is better; "
    "the score the default ranking sorts by)",
    "Its rank by fingerprint score among this spectrum's candidates (1 = above every candidate)",
    "Its own rank in the candidate list, when the model generated it too",
    "Log-probability of its SAFE tokens under the decoder, averaged over the M band queries (nats; per token in "
    "brackets). Higher: the model finds it more plausible for this spectrum's fingerprint and formula",
    "Peaks its bond-cleavage fragments explain (of all peaks) and their share of the intensity; in brackets what the "
    "best structure of this formula could explain (peaks annotated with subformulas)",
    "training corpus / user list / new",
    "Anything to know: a different formula, tokens the decoder does not know, …",
)
MOLFILE_MIME = ("chemical/x-mdl-molfile", "chemical/x-mdl-molfile-v3000", "chemical/x-daylight-smiles")


def structures_of(text: str) -> list[str]:
    """One molfile (as pasted from a sketcher), or one SMILES / InChI per line."""
    if "M  END" in text or "V2000" in text or "V3000" in text:
        return [text]
    return [line.strip() for line in text.splitlines() if line.strip()]


def mime_structure(mime) -> str:
    """What a sketcher put in ``mime``: a molfile or SMILES flavour when offered, else the plain text."""
    if mime is None:
        return ""
    for fmt in MOLFILE_MIME:
        if mime.hasFormat(fmt):
            data = bytes(mime.data(fmt)).decode("utf-8", errors="replace").strip("\x00")
            if data.strip():
                return data
    return mime.text() if mime.hasText() else ""


def clipboard_structure() -> str:
    return mime_structure(QGuiApplication.clipboard().mimeData())


class StructureEdit(QPlainTextEdit):
    """The structure box: Ctrl+V and drops take a sketcher's molfile flavour too, not only plain text."""

    def canInsertFromMimeData(self, source) -> bool:
        return any(source.hasFormat(f) for f in MOLFILE_MIME) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source) -> None:
        text = mime_structure(source)
        if text:
            self.textCursor().insertText(text)


class ScorePanel(QWidget):
    """The structure box, the Score button and the table of scored structures of the current spectrum."""

    scored = Signal(object)  # list[StructureScore] just computed
    message = Signal(str, str)  # level, text (the window shows it)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bundle = None
        self.settings = None  # the app's Settings: where the export dialog starts (set by the window)
        self.libraries: tuple = ()  # the enabled structure and spectral libraries (set by the window)
        self.params = QueryParams()
        self.marker = None
        self.entry = None
        self.busy = False
        self.history: dict[int, list[StructureScore]] = {}  # entry key -> its scored structures, newest first
        self._filled_for = None
        self.input = StructureEdit(placeholderText="A structure to score against the selected spectrum: SMILES or "
                                    "InChI (one per line), or paste a molfile from your sketcher (Ctrl+V or Paste)")
        self.input.setMaximumHeight(self.fontMetrics().height() * 4 + 12)
        self.input.setTabChangesFocus(True)
        self.paste_button = QPushButton("Paste")
        self.paste_button.setToolTip("Paste a structure from the clipboard (SMILES, InChI or a molfile from ChemDraw, "
                                     "Ketcher, MarvinSketch…)")
        self.paste_button.clicked.connect(self.paste)
        self.score_button = QPushButton("Score")
        self.score_button.setToolTip("Score the structure(s) against the selected spectrum (Ctrl+Return)")
        self.score_button.setDefault(True)
        self.score_button.clicked.connect(self.score)
        self.export_button = QPushButton("Export CSV…")
        self.export_button.setToolTip("Write the scored structures of this spectrum to a CSV file")
        self.export_button.clicked.connect(self.export_dialog)
        self.clear_button = QPushButton("Clear")
        self.clear_button.setToolTip("Forget the scored structures of this spectrum")
        self.clear_button.clicked.connect(self.clear)
        QShortcut(QKeySequence("Ctrl+Return"), self.input, activated=self.score)
        buttons = QVBoxLayout()
        for b in (self.paste_button, self.score_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        top = QHBoxLayout()
        top.addWidget(self.input, 1)
        top.addLayout(buttons)
        self.summary = QLabel(wordWrap=True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        for col, tip in enumerate(TIPS):
            self.table.horizontalHeaderItem(col).setToolTip(tip)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(PICTURE[1] + 6)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Fixed)
        self.table.setColumnWidth(0, PICTURE[0] + 6)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        bottom = QHBoxLayout()
        bottom.addWidget(self.summary, 1)
        bottom.addWidget(self.clear_button)
        bottom.addWidget(self.export_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addLayout(top)
        layout.addLayout(bottom)
        layout.addWidget(self.table, 1)
        self._update()

    # -- inputs
    def set_bundle(self, bundle) -> None:
        self.bundle = bundle
        self.history.clear()
        self._update()

    def set_params(self, params: QueryParams) -> None:
        self.params = params

    def set_marker(self, marker) -> None:
        self.marker = marker

    def set_entry(self, entry) -> None:
        self.entry = entry
        self._update()

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._update()

    def scores(self) -> list[StructureScore]:
        return self.history.get(self.entry.key, []) if self.entry is not None else []

    # -- actions
    def paste(self) -> None:
        text = clipboard_structure()
        if not text.strip():
            self.message.emit("info", "The clipboard holds no structure (copy SMILES, InChI or a molfile from your "
                                      "sketcher first).")
            return
        self.input.setPlainText(text)

    def score(self) -> list[StructureScore]:
        """Score what is in the box against the current spectrum; returns the new rows (also kept and shown)."""
        structures = structures_of(self.input.toPlainText())
        if not structures or not self._ready():
            if not structures:
                self.message.emit("info", "Type or paste a structure first (SMILES, InChI or a molfile).")
            return []
        candidates = self.entry.result.candidates if self.entry.result is not None else None
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            session = scoring_session(self.entry, self.bundle, self.libraries)
            rows = score_structures(session, structures, self.params, candidates=candidates, marker=self.marker)
        except MsgptError as err:
            self.message.emit("warning", f"Cannot score against {self.entry.display_id}: {err}")
            return []
        finally:
            QApplication.restoreOverrideCursor()
        self.history[self.entry.key] = rows[::-1] + self.history.get(self.entry.key, [])
        self._update()
        self.table.selectRow(0)
        self.scored.emit(rows)
        return rows

    def clear(self) -> None:
        if self.entry is not None:
            self.history.pop(self.entry.key, None)
        self._update()

    def export_dialog(self) -> None:
        start = self.settings.export_dir() if self.settings is not None else ""
        name, _ = QFileDialog.getSaveFileName(self, "Export scored structures", str(Path(start) / "scores.csv"),
                                              "CSV table (*.csv)")
        if name:
            if self.settings is not None:
                self.settings.remember_export_dir(name)
            self.export(name if name.lower().endswith(".csv") else name + ".csv")

    def export(self, path: str) -> bool:
        """The scored structures of the current spectrum as CSV (the columns of ``msgpt score``)."""
        from engine.cli.score import write_csv_table
        from engine.files.export import provenance

        rows = self.scores()
        if not rows or self.bundle is None:
            return False
        info = provenance(self.bundle, self.params, {"spectrum": self.entry.id})
        if self.marker is not None:
            info["novelty"] = self.marker.describe()
        try:
            write_csv_table(path, info, SCORE_COLUMNS, [r.row() for r in reversed(rows)])
        except MsgptError as err:
            self.message.emit("error", str(err))
            return False
        self.message.emit("info", f"{len(rows)} scored structure(s) written to {path}.")
        return True

    # -- display
    def _ready(self) -> bool:
        why = self._blocker()
        if why:
            self.message.emit("info", why)
        return not why

    def _blocker(self) -> str:
        if self.bundle is None:
            return "No model loaded: Model ▸ Open Model Folder… picks one."
        if self.entry is None or self.entry.spectrum is None:
            return "Select a spectrum to score structures against."
        if self.busy:
            return "Wait for the running work to finish (or cancel it with Esc), then score."
        return ""

    def _update(self) -> None:
        why = self._blocker()
        self.score_button.setEnabled(not why)
        self.score_button.setToolTip(why or "Score the structure(s) against the selected spectrum (Ctrl+Return)")
        rows = self.scores()
        self.export_button.setEnabled(bool(rows))
        self.clear_button.setEnabled(bool(rows))
        if self.entry is None or self.entry.spectrum is None:
            self.summary.setText("<span style='color:#777'>Select a spectrum, then type or paste a structure.</span>")
        else:
            n = len(self.entry.result.candidates) if self.entry.result is not None else 0
            ranks = f"ranked among its {n} candidates" if n else "run the spectrum to rank it among candidates"
            s = self.entry.spectrum
            self.summary.setText(f"Against <b>{html.escape(self.entry.display_id)}</b> ("
                                 f"{html.escape(s.formula or 'no formula')}, {html.escape(s.adduct or 'no adduct')}): "
                                 f"{ranks}.")
        shown = (self.entry, rows)
        if self._filled_for is None or shown[0] is not self._filled_for[0] or shown[1] is not self._filled_for[1]:
            self._filled_for = shown  # live rankings of a run re-show the same rows: not redrawn
            self._fill(rows)

    def _fill(self, rows: list[StructureScore]) -> None:
        self.table.setRowCount(len(rows))
        for r, s in enumerate(rows):
            if s.formula_match is None:
                formula = ""
            else:
                formula = f"{'✓' if s.formula_match else '✗'} {s.structure_formula}"
            logp = "" if math.isnan(s.decoder_logp) else f"{s.decoder_logp:.1f} ({s.decoder_logp_per_token:.2f})"
            explained = ""
            if s.ok and s.n_peaks:
                explained = f"{s.explained_peaks}/{s.n_peaks}, {s.explained_intensity:.0%}"
                if not math.isnan(s.subformula_explained_intensity):
                    explained += f" ({s.subformula_explained_intensity:.0%})"
            values = ("", s.smiles or s.structure, formula, "" if math.isnan(s.fingerprint_score) else
                      f"{s.fingerprint_score:.1f}", "" if s.fingerprint_rank is None else str(s.fingerprint_rank),
                      "" if s.candidate_rank is None else str(s.candidate_rank), logp, explained, s.novelty,
                      "; ".join(s.notes))
            for col, text in enumerate(values):
                item = QTableWidgetItem(text)
                if col == 1:
                    item.setToolTip(s.structure if s.structure != s.smiles else s.smiles)
                self.table.setItem(r, col, item)
            picture = QLabel(alignment=Qt.AlignmentFlag.AlignCenter)
            png = depict_png(s.smiles, *PICTURE) if s.smiles else None
            if png is not None:
                picture.setPixmap(QPixmap.fromImage(QImage.fromData(png, "PNG")))
            self.table.setCellWidget(r, 0, picture)
