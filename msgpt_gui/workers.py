"""Run a generator job in a QThread (superqt's ``GeneratorWorker`` pattern, in 60 lines).

The job is iterated in the worker thread; each yielded event is emitted as ``yielded(event)``
(delivered to the main thread through Qt's queued connections), its return value as
``returned(value)``. :meth:`cancel` sets a flag that the job's ``cancel`` callable reads (the
engine checks it between decoding steps) and that is also checked between yields; the job then
raises :class:`~engine.errors.Cancelled` and the worker emits ``aborted`` instead of ``returned``.
An engine error becomes ``errored(message)`` with the engine's readable text; anything else is
logged with its traceback and reported in one sentence. ``finished`` (QThread's) always comes last.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import logging
import threading

from PySide6.QtCore import QThread, Signal

from engine.errors import Cancelled, MsgptError


log = logging.getLogger(__name__)


class GeneratorWorker(QThread):
    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(str)
    aborted = Signal()

    def __init__(self, func, *args, name: str = "", **kwargs):
        super().__init__()
        self._func, self._args, self._kwargs = func, args, kwargs
        self._cancel = threading.Event()
        self.name = name or getattr(func, "__name__", "job")
        self.setObjectName(self.name)

    def cancel(self) -> None:
        """Ask the job to stop at its next check (thread-safe; returns at once)."""
        self._cancel.set()

    def is_cancelled(self) -> bool:
        return self._cancel.is_set()

    def run(self) -> None:  # in the worker thread
        gen = None
        try:
            gen = self._func(*self._args, cancel=self.is_cancelled, **self._kwargs)
            while True:
                if self._cancel.is_set():
                    raise Cancelled("Cancelled by the user.")
                try:
                    event = next(gen)
                except StopIteration as stop:
                    value = stop.value
                    break
                self.yielded.emit(event)
        except Cancelled:
            if gen is not None:
                gen.close()  # a job's `with` blocks run their clean-up (an export drops its temp file)
            self.aborted.emit()
            return
        except MsgptError as e:
            self.errored.emit(str(e))
            return
        except MemoryError:
            self.errored.emit(f"{self.name}: out of memory. Try a smaller pool size B or fewer spectra at once.")
            return
        except Exception as e:  # noqa: BLE001 - the one place an unexpected error becomes a message
            log.exception("Unexpected error in %s", self.name)
            self.errored.emit(
                f"Unexpected error in {self.name} ({type(e).__name__}: {e}). "
                f"Details are in the log file; please report it."
            )
            return
        self.returned.emit(value)
