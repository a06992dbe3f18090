"""Query parameters: κ band, query groups M, pool size B (snapping to multiples of M), seed, adapter on/off; and the
share of the suspect lists' matches that are real, which Run ▸ Libraries… sets."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.elucidation.pipeline import EFFORTS, QueryParams
from engine.errors import ConfigError
from engine.model.querying import KAPPA_LIMITS
from engine.model.sampling import DECODING_MODES
from engine.model.suspect_confidence import PRESENT_DEFAULT
from engine.model.scoring import RANKINGS

from .logic import tooltips

B_MIN, B_MAX = 100, 1500
EFFORT_NEXT_RUN = ("<br><br>Changing it starts nothing: it applies to the next Run (Ctrl+R), and a spectrum that ran "
                   "keeps its candidates until then")


def snap_pool_size(value: int, groups: int, lo: int = B_MIN, hi: int = B_MAX) -> int:
    """The multiple of ``groups`` nearest to ``value`` within [lo, hi] (at least ``groups``)."""
    b = max(groups, round(value / groups) * groups)
    while b < lo:
        b += groups
    while b > hi and b - groups >= max(groups, 1):
        b -= groups
    return b


class ParamsPanel(QWidget):
    """Emits ``changed(QueryParams)`` for a valid combination, ``invalid(message)`` otherwise."""

    changed = Signal(object)
    invalid = Signal(str)

    def __init__(self, params: QueryParams | None = None, parent=None):
        super().__init__(parent)
        lo, hi = KAPPA_LIMITS
        self.kappa_min = self._kappa_box(lo, hi, tooltips.KAPPA_MIN)
        self.kappa_max = self._kappa_box(lo, hi, tooltips.KAPPA_MAX)
        self.groups = QSpinBox(minimum=1, maximum=100)
        self.groups.setToolTip(tooltips.GROUPS)
        self.groups.setKeyboardTracking(False)
        self.pool = QSlider(Qt.Orientation.Horizontal, minimum=B_MIN, maximum=B_MAX)
        self.pool.setToolTip(tooltips.POOL)
        self.pool.setMinimumWidth(120)
        self.pool.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.pool.setTickInterval(100)
        self.pool_label = QLabel()
        self.pool_label.setToolTip(tooltips.POOL + "<br><br>" + tooltips.SAMPLES)
        self.pool_label.setMinimumWidth(self.pool_label.fontMetrics().horizontalAdvance("B = 1500  (N = 1500)") + 8)
        self.seed = QSpinBox(minimum=0, maximum=2**31 - 1)
        self.seed.setToolTip(tooltips.SEED)
        self.seed.setKeyboardTracking(False)
        self.decoding = QComboBox()
        self.decoding.addItems(list(DECODING_MODES))
        self.decoding.setToolTip(tooltips.DECODING)
        self.ranking = QComboBox()
        self.ranking.addItems(list(RANKINGS))
        self.ranking.setToolTip(tooltips.RANKING)
        self.effort = QComboBox()
        self.effort.addItems(list(EFFORTS))
        self.effort.setToolTip(tooltips.EFFORT + EFFORT_NEXT_RUN)
        self.adapter = QCheckBox("Use adapter")
        self.adapter_wanted = True  # the user's choice, kept while a model without an adapter is loaded
        self.set_adapter_available(False)
        self.error = QLabel()
        self.error.setTextFormat(Qt.TextFormat.PlainText)  # a message may hold "<" (e.g. "κ < 0.5")
        self.error.setStyleSheet("color: #b3261e")
        self.error.setWordWrap(True)  # a long message takes two lines, not the groups' room
        self.error.hide()

        def label(text: str, tip: str) -> QLabel:
            w = QLabel(text)
            w.setToolTip(tip)
            return w

        # groups (a label and its fields) in one row when the window is wide, in two when it is not (a laptop)
        self.groups_row = [
            self._group(label("Band κ", tooltips.KAPPA), self.kappa_min, QLabel("–"), self.kappa_max),
            self._group(label("Groups M", tooltips.GROUPS), self.groups),
            self._group(label("Pool size B", tooltips.POOL), (self.pool, 1), self.pool_label, stretch=True),
            self._group(label("Seed", tooltips.SEED), self.seed),
            self._group(label("Decoding", tooltips.DECODING), self.decoding),
            self._group(label("Ranking", tooltips.RANKING), self.ranking),
            self._group(label("Effort", tooltips.EFFORT), self.effort),
            self._group(self.adapter),
        ]
        self.rows = QVBoxLayout(self)
        self.rows.setContentsMargins(6, 2, 6, 2)
        self.rows.setSpacing(2)
        self.row1, self.row2 = QHBoxLayout(), QHBoxLayout()
        for row in (self.row1, self.row2):
            row.setSpacing(12)
            self.rows.addLayout(row)
        self.rows.setSizeConstraint(QVBoxLayout.SizeConstraint.SetNoConstraint)  # minimumSizeHint: two rows
        self.wrapped = None
        self._arrange(False)
        # no widget here: Run ▸ Libraries… sets it (msgpt_gui.library_view), beside the suspect lists it is about
        self.suspects_present = PRESENT_DEFAULT

        self.set_params(params or QueryParams())
        self.kappa_min.valueChanged.connect(self._emit)
        self.kappa_max.valueChanged.connect(self._emit)
        self.groups.valueChanged.connect(self._groups_changed)
        self.pool.valueChanged.connect(self._pool_changed)
        self.seed.valueChanged.connect(self._emit)
        self.adapter.toggled.connect(self._adapter_toggled)
        self.decoding.currentTextChanged.connect(self._emit)
        self.ranking.currentTextChanged.connect(self._emit)
        self.effort.currentTextChanged.connect(self._emit)

    @staticmethod
    def _group(*items, stretch: bool = False) -> QWidget:
        """Widgets side by side (an item ``(widget, stretch)`` stretches) that wrap together."""
        box = QWidget()
        lay = QHBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(4)
        for item in items:
            widget, factor = item if isinstance(item, tuple) else (item, 0)
            lay.addWidget(widget, factor)
        box.setSizePolicy(QSizePolicy.Policy.Expanding if stretch else QSizePolicy.Policy.Fixed,
                          QSizePolicy.Policy.Fixed)
        return box

    def _one_row_width(self) -> int:
        margins = self.rows.contentsMargins()
        widths = [g.sizeHint().width() for g in self.groups_row]
        return sum(widths) + self.row1.spacing() * len(widths) + margins.left() + margins.right()

    def _arrange(self, wrapped: bool) -> None:
        """All groups in one row, or (``wrapped``) the sampling ones in a first row and the ranking ones below; the
        error message ends the last row."""
        if wrapped == self.wrapped:
            return
        self.wrapped = wrapped
        for row in (self.row1, self.row2):
            while row.count():
                row.takeAt(0)
        first = self.groups_row[:4] if wrapped else self.groups_row
        for g in first:
            self.row1.addWidget(g, 1 if g is self.groups_row[2] else 0)
        for g in self.groups_row[4:] if wrapped else ():
            self.row2.addWidget(g)
        (self.row2 if wrapped else self.row1).addWidget(self.error, 1)
        if wrapped:
            self.row2.addStretch(0)
        self.updateGeometry()  # one row or two: the window's layout asks again

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._arrange(event.size().width() < self._one_row_width())

    def minimumSizeHint(self):
        """As narrow as two rows (the groups wrap below the width of one row), as tall as the rows shown."""
        margins = self.rows.contentsMargins()

        def row(groups) -> tuple[int, int]:
            hints = [g.minimumSizeHint() for g in groups]
            return (sum(h.width() for h in hints) + self.row1.spacing() * (len(hints) - 1),
                    max(h.height() for h in hints))

        (w1, h1), (w2, h2) = row(self.groups_row[:4]), row(self.groups_row[4:])
        height = h1 + h2 + self.rows.spacing() if self.wrapped else max(h1, h2)
        return QSize(max(w1, w2) + margins.left() + margins.right(), height + margins.top() + margins.bottom())

    @staticmethod
    def _kappa_box(lo: float, hi: float, tip: str) -> QDoubleSpinBox:
        box = QDoubleSpinBox(minimum=lo, maximum=hi, singleStep=0.05, decimals=2)
        box.setToolTip(tip)
        box.setKeyboardTracking(False)  # one change when typing is done, not one per digit
        return box

    # -- values
    @property
    def pool_size(self) -> int:
        return self.pool.value()

    def set_pool_size(self, b: int) -> None:
        self.pool.setValue(snap_pool_size(b, self.groups.value()))

    def set_adapter_available(self, available: bool) -> None:
        """The adapter switch is enabled, and ticked as the user last chose, for a model with an adapter;
        for one without, it is unticked and disabled (as results and exports say: adapter=off). No
        signal is emitted."""
        self.adapter.blockSignals(True)
        self.adapter.setChecked(available and self.adapter_wanted)
        self.adapter.blockSignals(False)
        self.adapter.setEnabled(available)
        self.adapter.setToolTip(tooltips.ADAPTER if available else tooltips.ADAPTER + "<br><br>" + tooltips.ADAPTER_MISSING)

    def set_params(self, p: QueryParams) -> None:
        widgets = (self.kappa_min, self.kappa_max, self.groups, self.pool, self.seed, self.adapter, self.decoding,
                   self.ranking, self.effort)
        for w in widgets:
            w.blockSignals(True)
        self.kappa_min.setValue(p.kappa_min)
        self.kappa_max.setValue(p.kappa_max)
        self.groups.setValue(p.groups)
        self.pool.setSingleStep(p.groups)
        self.pool.setPageStep(p.groups * max(1, round(100 / p.groups)))
        self.pool.setValue(snap_pool_size(p.pool_size, p.groups))
        self.seed.setValue(p.seed)
        self.adapter_wanted = p.use_adapter
        self.adapter.setChecked(p.use_adapter and self.adapter.isEnabled())
        self.decoding.setCurrentText(p.decoding)
        self.ranking.setCurrentText(p.ranking)
        self.effort.setCurrentText(p.effort)
        self.suspects_present = p.suspects_present
        for w in widgets:
            w.blockSignals(False)
        self._update_label()
        self._sync_point_query()

    def params(self) -> QueryParams:
        """The current parameters (raises ConfigError for an invalid combination).

        ``use_adapter`` is on only when the model has an adapter and the box is ticked, so results
        and exports of a model without one say ``adapter=off``.
        """
        m = self.groups.value()
        return QueryParams(
            kappa_min=round(self.kappa_min.value(), 4),
            kappa_max=round(self.kappa_max.value(), 4),
            groups=m,
            samples_per_group=QueryParams.samples_for_pool_size(self.pool.value(), m),
            seed=self.seed.value(),
            use_adapter=self.adapter.isEnabled() and self.adapter.isChecked(),
            decoding=self.decoding.currentText(),
            ranking=self.ranking.currentText(),
            effort=self.effort.currentText(),
            suspects_present=self.suspects_present,
        )

    def set_suspects_present(self, share: float) -> None:
        """The share of the suspect lists' formula matches the user expects to be their compounds (the confidence of
        a suspect rank 1 follows it, :mod:`engine.model.suspect_confidence`); a change is emitted as any other."""
        if share != self.suspects_present:
            self.suspects_present = share
            self._emit()

    # -- reactions
    def _groups_changed(self, m: int) -> None:
        self.pool.blockSignals(True)
        self.pool.setSingleStep(m)
        self.pool.setPageStep(m * max(1, round(100 / m)))
        self.pool.setValue(snap_pool_size(self.pool.value(), m))
        self.pool.blockSignals(False)
        self._sync_point_query()
        self._emit()

    def _pool_changed(self, value: int) -> None:
        snapped = snap_pool_size(value, self.groups.value())
        if snapped != value:
            self.pool.setValue(snapped)  # re-enters with the snapped value
            return
        self._emit()

    def _adapter_toggled(self, checked: bool) -> None:
        if self.adapter.isEnabled():
            self.adapter_wanted = checked
        self._emit()

    def _sync_point_query(self) -> None:
        point = self.groups.value() == 1
        self.kappa_max.setEnabled(not point)
        if point and self.kappa_max.value() != self.kappa_min.value():
            self.kappa_max.blockSignals(True)
            self.kappa_max.setValue(self.kappa_min.value())
            self.kappa_max.blockSignals(False)

    def _update_label(self) -> None:
        m = self.groups.value()
        self.pool_label.setText(f"B = {self.pool.value()}  (N = {self.pool.value() // m})")

    def _emit(self, *_) -> None:
        if self.groups.value() == 1:
            self._sync_point_query()
        self._update_label()
        try:
            p = self.params()
        except ConfigError as e:
            self.error.setText(str(e))
            self.error.show()
            self.invalid.emit(str(e))
            return
        self.error.hide()
        self.changed.emit(p)
