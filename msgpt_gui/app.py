"""Entry point of ``msgpt-gui``: ``msgpt-gui [--model DIR] [--device auto|cpu|cuda] [FILES...]``."""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from logging.handlers import RotatingFileHandler

from engine import __version__
from engine.paths import cache_dir

log = logging.getLogger("msgpt_gui")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="msgpt-gui",
        description="MS-GPT Desktop: de novo structure elucidation from MS/MS spectra, offline.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="MGF or mzML files to open (.gz too)")
    p.add_argument("--model", metavar="DIR", help="model bundle folder (default: the bundled model, or the last one chosen)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help="compute device (default: the last one chosen, else auto)")
    p.add_argument("--version", action="version", version=f"msgpt-gui {__version__}")
    return p


def log_file():
    return cache_dir() / "logs" / "msgpt-gui.log"


def setup_logging() -> None:
    """Warnings and unexpected tracebacks go to a log file in the cache folder (not the window)."""
    root = logging.getLogger()
    if any(getattr(h, "_msgpt_gui", False) for h in root.handlers):
        return
    path = log_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(path, maxBytes=2_000_000, backupCount=2, encoding="utf-8")
    except OSError:
        handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler._msgpt_gui = True
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def install_excepthook(window_getter) -> None:
    """An unexpected error in a slot becomes a readable message (and a traceback in the log file)."""

    def hook(exc_type, exc, tb):
        log.error("Unexpected error:\n%s", "".join(traceback.format_exception(exc_type, exc, tb)))
        window = window_getter()
        if window is not None:
            window.show_message(
                f"Unexpected error ({exc_type.__name__}: {exc}). The window keeps working; details are in "
                f"{log_file()}. Please report it.",
                "error",
            )

    sys.excepthook = hook


def configure_threads() -> None:
    """Runs take the cores but one, which the window keeps (their share when other msgpt jobs run: each run
    registers, engine.threads.JobShare). OMP_NUM_THREADS wins."""
    from engine import threads

    threads.apply(threads.job_threads(reserve=1))


def create_window(argv: list[str] | None = None, **window_options):
    """Parse ``argv`` and build the QApplication and the main window (shown), as ``msgpt-gui`` does."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging()
    configure_threads()
    from PySide6.QtWidgets import QApplication

    from .main_window import MainWindow

    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setApplicationName("MS-GPT Desktop")
    app.setOrganizationName("msgpt")
    app.setApplicationVersion(__version__)
    window = MainWindow(model=args.model, device=args.device, files=args.files, **window_options)
    install_excepthook(lambda: window)
    window.show()
    return app, window


def main(argv: list[str] | None = None) -> int:
    app, window = create_window(argv)
    code = app.exec()
    window.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
