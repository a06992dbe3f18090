"""Progress and cancellation plumbing that every long job of the engine, the CLI, the app and training shares.

Long work is a generator of progress events that returns its result (``StopIteration.value``) and takes a
``cancel`` callable (``CancelFn``) it polls between steps: :func:`check_cancel` raises
:class:`~engine.errors.Cancelled` when asked to stop, and :func:`run_to_end` runs such a generator for
callers that show no progress. Imports only :mod:`engine.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from engine.errors import Cancelled

CancelFn = Callable[[], bool]


def check_cancel(cancel: CancelFn | None, message: str = "Cancelled by the user.") -> None:
    """Raise :class:`Cancelled` (saying ``message``) when ``cancel`` says the user asked to stop (None: never)."""
    if cancel is not None and cancel():
        raise Cancelled(message)


def run_to_end(gen: Generator):
    """Run a generator of progress events to its end and return what it returns (a :meth:`SpectrumSession.run`'s
    result, a project written or read, ...), for callers that show no progress."""
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value
