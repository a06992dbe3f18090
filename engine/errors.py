"""Typed exceptions of the engine.

Every error a user can cause carries the bad value and says how to fix it. The GUI turns these into
dialogs; the CLI prints ``str(error)``; nothing in ``engine/`` prints tracebacks for them.
"""

from __future__ import annotations


class MsgptError(Exception):
    """Base class of every error the engine raises on purpose."""


class FormulaError(MsgptError, ValueError):
    """A molecular formula that cannot be parsed or is not supported."""


class AdductError(MsgptError, ValueError):
    """An adduct / precursor-type string that cannot be parsed or is not supported."""


class SpectrumError(MsgptError, ValueError):
    """One spectrum record is unusable (the rest of its file goes on)."""


class InputFileError(MsgptError):
    """A whole input file cannot be read (missing, unreadable, wrong format, corrupt)."""

    def __init__(self, path: object, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class BundleError(MsgptError):
    """A model bundle directory is missing, incomplete, corrupt or incompatible."""


class OutputError(MsgptError):
    """An output file (export, settings, batch journal) cannot be written; an earlier file is kept."""

    @classmethod
    def from_os_error(cls, path: object, e: OSError, kept: str = "") -> OutputError:
        """Name the file and the system's reason, say what to do, and what was kept."""
        import errno

        hint = ""
        if isinstance(e, PermissionError):
            hint = " Choose a folder you may write to."
        elif e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            hint = " Free some space, or choose another folder."
        return cls(f"Cannot write {path}: {e.strerror or e}.{hint}{' ' + kept if kept else ''}")


class ConfigError(MsgptError, ValueError):
    """A configuration or parameter value is out of range or inconsistent."""


class Cancelled(MsgptError):
    """Raised inside long work when the caller asked it to stop."""
