"""The top fingerprint bits of the selected spectrum's posterior, with what each bit means (the bundle's
bit legend: the atom environments behind it in the training corpus), drawn as fragments."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import html

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.elucidation.pipeline import QueryParams
from engine.errors import MsgptError
from engine.model.bitlegend import share_text

from .logic.insights import ORDERS, BitRow, depict_fragment_png, entry_posterior, top_bits

FRAGMENT_SIZE = (120, 60)
BIT, PROB, QUERIES, CANDIDATE, FRAGMENT, MEANING = range(6)
COLUMNS = ("Bit", "π", "Queries", "Candidate", "Fragment", "What sets it in corpus molecules")
TIPS = (
    "Index of the Morgan bit (radius 2, 4096 bits)",
    "Posterior probability of the bit given the spectrum (the spectrum encoder's output)",
    "How many of the M band queries hold the bit: the decoder is asked for structures with it",
    "✓ the selected candidate has this bit; ✗ it has not",
    "The most frequent atom environment behind the bit (centre atom highlighted)",
    "The most frequent atom environments that set the bit in the corpus sample, with their share of the "
    "molecules that have the bit (SMILES rooted at the centre atom, hydrogens as in the whole molecule)",
)


class BitsPanel(QWidget):
    """Shows :func:`~msgpt_gui.logic.insights.top_bits` of the current entry; cheap to refresh (cached posteriors)."""

    shown = Signal(int)  # rows now in the table

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bundle = None
        self.params = QueryParams()
        self.entry = None
        self.candidate = None
        self.rows: list[BitRow] = []
        self._posteriors: dict[tuple, np.ndarray] = {}
        self._dirty = True
        self._shown_for = None  # (spectrum, result) the table was drawn for
        self.summary = QLabel(wordWrap=True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.count = QSpinBox(minimum=5, maximum=500, value=25, singleStep=5)
        self.count.setToolTip("How many of the most probable bits to list")
        self.count.valueChanged.connect(lambda *_: self.refresh())
        self.order = QComboBox()
        self.order.addItems(["most probable", "most specific"])
        self.order.setToolTip("most probable: by π; most specific: by how much π exceeds the bit's frequency in the "
                              "corpus (rare predicted substructures first, the ubiquitous CH3/CH2 bits last)")
        self.order.currentIndexChanged.connect(lambda *_: self.refresh())
        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addWidget(self.order)
        top.addWidget(QLabel("Top"))
        top.addWidget(self.count)
        top.addWidget(QLabel("bits"))
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        for col, tip in enumerate(TIPS):
            self.table.horizontalHeaderItem(col).setToolTip(tip)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(FRAGMENT_SIZE[1] + 6)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(FRAGMENT, QHeaderView.ResizeMode.Fixed)
        self.table.setColumnWidth(FRAGMENT, FRAGMENT_SIZE[0] + 6)
        header.setSectionResizeMode(MEANING, QHeaderView.ResizeMode.Stretch)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        self.refresh()

    # -- inputs
    def set_bundle(self, bundle) -> None:
        self.bundle = bundle
        self._posteriors.clear()
        self.refresh()

    def set_params(self, params: QueryParams) -> None:
        self.params = params
        self.refresh()

    def set_entry(self, entry) -> None:
        """Follow the current entry; a live ranking of the same spectrum changes nothing here."""
        shown = self._shown_for
        same = entry is self.entry and entry is not None and shown is not None and shown[0] is entry.spectrum \
            and shown[1] is entry.result
        self.entry = entry
        if not same:
            self.refresh()

    def set_candidate(self, candidate) -> None:
        self.candidate = candidate
        self.refresh()

    # -- display
    def posterior(self):
        """π of the current entry (cached per spectrum and model); None with the reason in the summary."""
        e, b = self.entry, self.bundle
        key = (e.key, id(e.spectrum), b.checksum)
        if key not in self._posteriors:
            if len(self._posteriors) > 200:
                self._posteriors.clear()
            self._posteriors[key] = entry_posterior(e, b)
        return self._posteriors[key]

    def refresh(self) -> None:
        if not self.isVisible():  # nothing is computed for a hidden panel; showEvent refreshes it
            self._dirty = True
            return
        self._dirty = False
        self.rows = []
        self._shown_for = (self.entry.spectrum, self.entry.result) if self.entry is not None else None
        if self.bundle is None:
            self._show([], "<span style='color:#777'>No model loaded.</span>")
            return
        if self.entry is None:
            self._show([], "<span style='color:#777'>Select a spectrum to see the bits its posterior predicts.</span>")
            return
        try:
            posterior = self.posterior()
        except MsgptError as err:
            self._show([], f"<span style='color:#a15c00'>No posterior for {html.escape(self.entry.display_id)}: "
                           f"{html.escape(str(err))}</span>")
            return
        bits = None
        if self.candidate is not None:
            bits = getattr(self.candidate, "bits", None)
        self.rows = top_bits(posterior, self.bundle, self.params, self.count.value(), bits,
                             ORDERS[self.order.currentIndex()], polarity=self.entry.spectrum.polarity)
        legend = self.bundle.bit_legend
        about = (f"legend: {legend.source}" if legend is not None else
                 "<span style='color:#a15c00'>this model ships no bit legend (bit_legend.json.gz)</span>")
        expected = float(np.sum(posterior))
        which = "most probable" if self.order.currentIndex() == 0 else "most specific"
        self._show(self.rows, f"<b>{html.escape(self.entry.display_id)}</b>: the {len(self.rows)} {which} of "
                              f"{posterior.size} bits (Σπ = {expected:.1f} expected active bits) · {about}")

    def _show(self, rows: list[BitRow], summary: str) -> None:
        self.summary.setText(summary)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            envs = row.environments
            meaning = "; ".join(f"{e.smiles} ({share_text(e.count, row.n_with_bit)})" for e in envs) \
                or "not seen in the corpus sample"
            have = "" if row.in_candidate is None else ("✓" if row.in_candidate else "✗")
            values = (str(row.bit), f"{row.probability:.3f}", f"{row.in_queries}/{row.n_queries}", have, "", meaning)
            for col, text in enumerate(values):
                item = QTableWidgetItem(text)
                if col in (BIT, PROB, QUERIES):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if col == MEANING and envs:
                    item.setToolTip("\n".join(f"{e.smiles}  (radius {e.radius}, {e.count} molecules)\nSMARTS {e.smarts}"
                                              for e in envs))
                self.table.setItem(r, col, item)
            picture = QLabel(alignment=Qt.AlignmentFlag.AlignCenter)
            if envs:
                png = depict_fragment_png(envs[0].smiles, *FRAGMENT_SIZE)
                if png is not None:
                    picture.setPixmap(QPixmap.fromImage(QImage.fromData(png, "PNG")))
                picture.setToolTip(envs[0].smiles)
            self.table.setCellWidget(r, FRAGMENT, picture)
        self.shown.emit(len(rows))

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._dirty:
            self.refresh()
