"""The right end of the window's status bar: the progress of the running task with a button that cancels it,
then the permanent labels (the model and the device). Messages show at its left, as in any status bar."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import time

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QProgressBar, QToolButton

QUIET_S = 2.0  # after this long without progress, the bar counts the seconds of the step under way
PAINT_MS = 100  # a run's progress repaints the bar at most this often (every batch of samples reports it)


def loading_text(model: str | None, libraries: list[str], run_waiting: bool = False) -> str:
    """What the status bar says is still loading at start-up (empty when nothing is), short enough for a laptop's
    status bar: the model (``model``: its name, None when none loads) and the ``libraries`` still to open (named
    when one, counted when more; :func:`loading_tip` names them all), and whether a Run asked for waits for them."""
    parts = (["the model"] if model is not None else []) + \
        ([libraries[0]] if len(libraries) == 1 else [f"{len(libraries)} libraries"] if libraries else [])
    if not parts:
        return ""
    what = " and ".join(parts)
    return f"Run waits for {what}" if run_waiting else f"Loading {what}…"


def loading_tip(model: str | None, libraries: list[str]) -> str:
    """The tooltip of :func:`loading_text`: everything still loading, by name."""
    names = ([f"the model {model}"] if model is not None else []) + libraries
    return ("Still loading in the background: " + ", ".join(names) + ". The window can be used meanwhile; a Run "
            "asked for now starts when they are ready (Esc cancels it).") if names else ""


class TaskIndicator(QObject):
    """``progress`` (0..1000, hidden between tasks and while a model loads) and ``cancel_button`` (shown while
    something can be cancelled), placed in ``status_bar`` before ``labels``. A step that reports nothing for a while
    (a deep search opening its analogs, a long batch of samples) shows its seconds, so the bar never looks stuck."""

    def __init__(self, status_bar, cancel_action, *labels):
        super().__init__(status_bar)
        self.progress = QProgressBar(maximumWidth=420, minimumWidth=200, textVisible=True)
        self.text, self.since = "", time.monotonic()  # the last progress text and when it came
        self.ticker = QTimer(self, interval=1000)
        self.ticker.timeout.connect(self._tick)
        self.pending: tuple[int, str] | None = None  # progress that came while the bar waits to repaint
        self.painter = QTimer(self, interval=PAINT_MS, singleShot=True)
        self.painter.timeout.connect(self._paint_pending)
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.cancel_button = QToolButton()
        self.cancel_button.setDefaultAction(cancel_action)
        self.cancel_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)
        self.cancel_button.hide()
        for widget in (self.progress, self.cancel_button, *labels):
            status_bar.addPermanentWidget(widget)

    def task_started(self, kind: str) -> None:
        """``kind``: "model", "run" or "export" (a model load shows no progress)."""
        self.painter.stop()
        self.pending = None
        self.progress.setValue(0)
        self.progress.setVisible(kind != "model")
        self.cancel_button.setVisible(True)
        self.text, self.since = "", time.monotonic()
        self.ticker.start()

    def task_ended(self, loading: bool) -> None:
        """``loading``: a file is still being read (that can be cancelled too)."""
        self.painter.stop()
        self.pending = None
        self.progress.hide()
        self.cancel_button.setVisible(loading)
        self.ticker.stop()

    def show_progress(self, value: int, text: str) -> None:
        """Show ``value`` (0..1000) and ``text``: at once, then at most every ``PAINT_MS`` (the latest)."""
        if self.painter.isActive():
            self.pending = (value, text)
            return
        self._paint(value, text)
        self.painter.start()

    def _paint_pending(self) -> None:
        if self.pending is not None:
            (value, text), self.pending = self.pending, None
            self._paint(value, text)
            self.painter.start()

    def _paint(self, value: int, text: str) -> None:
        self.progress.setValue(value)
        if text != self.text:
            self.text, self.since = text, time.monotonic()
        self.progress.setFormat(text)
        self.progress.setToolTip(text)

    def _tick(self) -> None:
        quiet = time.monotonic() - self.since
        if self.progress.isVisible() and self.text and quiet >= QUIET_S:
            self.progress.setFormat(f"{self.text} · {quiet:.0f} s")
