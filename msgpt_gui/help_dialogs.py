"""The Help menu's dialogs: what the parameters and the scores mean, and About."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from engine import __version__

from .logic import tooltips


def show_scores_help(parent) -> None:
    """A non-blocking box on the parameters and the scores (the tooltips' texts, together)."""
    cols = tooltips.TIPS["columns"]
    text = "<br><br>".join([
        tooltips.KAPPA, tooltips.GROUPS, tooltips.SAMPLES, tooltips.POOL,
        f"<b>Count</b> — {cols['Count']}.", f"<b>Posterior similarity</b> — {cols['Posterior sim.']}.",
        tooltips.FIDELITY, tooltips.REFERENCE_RANK,
    ])
    box = QMessageBox(QMessageBox.Icon.Information, "Parameters and scores", text, QMessageBox.StandardButton.Ok, parent)
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.show()


def show_about(parent, settings_path) -> None:
    QMessageBox.about(
        parent, "About MS-GPT Desktop",
        f"<b>MS-GPT Desktop {__version__}</b><br>De novo molecular structure elucidation from MS/MS "
        "spectra, offline, on your own machine.<br><br>Settings: " + str(settings_path),
    )
