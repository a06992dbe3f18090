"""The one way the window and its controllers make a menu or toolbar action."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QStyle


def make_action(parent, text: str, slot, shortcut: str | None = None, tip: str = "",
                icon: str | None = None) -> QAction:
    """An action of ``parent`` (the window: its shortcuts work wherever the focus is in it) that calls ``slot()``;
    ``tip`` is its tooltip and status-bar text, ``icon`` the name of a standard pixmap of the style."""
    action = QAction(text, parent)
    if shortcut:
        action.setShortcut(QKeySequence(shortcut))
    if tip:
        action.setToolTip(tip)
        action.setStatusTip(tip)
    if icon:
        action.setIcon(parent.style().standardIcon(getattr(QStyle.StandardPixmap, icon)))
    action.triggered.connect(lambda *_: slot())
    return action
