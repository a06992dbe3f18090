"""The selected candidate in full (depiction, identifiers, scores, library and reference-spectrum evidence, the
mirror plot of its reference match), and the structure pixmaps the table and this pane share."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import html
from collections import OrderedDict

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QGuiApplication, QImage, QPixmap
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QStyledItemDelegate,
    QVBoxLayout,
    QWidget,
)

from engine.chem.plausibility import plausibility_note

from .candidates_model import IMPLAUSIBLE, CandidatesModel
from .logic import evidence
from .logic.depict import depict_png
from .logic.libraries import identification_words
from .logic.plotting import find_hit, plot_mirror

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
        self.title.setWordWrap(True)  # a long name wraps instead of widening the pane past the window
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
        self.library.setText(library_html(c, matches) if has else "")
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
        name = evidence.name_text(c)
        self.title.setText(f"<b>Rank {c.rank}</b>" + (f" · <b>{_html(name)}</b>" if name else "")
                           + f" · {_html(c.formula)} · {c.monoisotopic_mass:.4f} Da · {_html(evidence.origin_text(c))}"
                           + ref)
        self.title.setToolTip(evidence.origin_tooltip(c))
        self.smiles.setText(c.smiles)
        self.smiles.setCursorPosition(0)
        self.inchikey.setText(evidence.inchikey(c))
        self.inchikey.setCursorPosition(0)
        note = plausibility_note(c.smiles)
        self.scores.setText(
            (f"Made by an isomer edit of {_elide(c.edited_from)} (no sample drew it)" if c.edited_from and not c.count
             else f"Generated {c.count}× (frequency {c.frequency:.3f})")
            + f" · posterior similarity {c.posterior_similarity:.3f}"
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


def library_html(c, matches=None) -> str:
    """The library lines of the detail pane: the suspect list or library that holds the candidate (identifier,
    name) and its reference spectrum match (accession, licence, contributor; a match below the floor of spectral
    evidence says so; an identification with its calibrated confidence and, from the result's identity search
    ``matches``, the isomers it cannot tell apart, which make it level 3); "" for a de novo structure only."""
    lines = []
    suspect = evidence.suspect_list(c)
    if suspect:
        lines.append(f"Suspect list: <b>{_html(suspect)}</b>")
    others = [n for n in evidence.library_names(c) if n != suspect]
    if others:
        lines.append(f"Library: <b>{_html('; '.join(others))}</b>")
    if lines and c.library_id:
        lines[0] += f" · {_html(c.library_id)}"
    name = evidence.name_text(c)
    if name:
        lines.append(f"Name: <b>{_html(name)}</b>")
    ev = c.spectral
    if ev is not None:
        weak = "spectral_library" not in (c.origin or "")
        sure, isomers = identification_words(matches) if ev.identified else ("", "")
        verdict = ("<b style='color:#a15c00'>identified, but its isomers match nearly as well (level 3)</b>" if isomers
                   else "<b style='color:#1b7f3b'>identified (level 2a)</b>" if ev.identified else
                   "<span style='color:#777'>too weak to count as evidence</span>" if weak else
                   "<span style='color:#a15c00'>matched, below the identification threshold</span>")
        lines.append(f"Reference spectrum {_html(ev.accession)} ({_html(ev.library)}): {verdict}, similarity "
                     f"{ev.similarity:.2f}, {ev.matched_peaks} matched peaks" + (f", {sure}" if sure else ""))
        if isomers:
            lines.append(f"<span style='color:#a15c00'>{_html(isomers[0].upper() + isomers[1:])}: the library cannot "
                         "tell them apart by their spectra</span>")
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


def _elide(text: str, width: int = 40) -> str:
    """``text`` cut to ``width`` characters with an ellipsis (a long SMILES would widen the panel)."""
    return text if len(text) <= width else text[: width - 1] + "…"
