"""Guard against a reference-counting bug of PySide6 6.12.0 on Python < 3.12.

PySide6/shiboken6 6.12.0 return ``None`` / ``True`` / ``False`` from C++ calls without taking a
reference (as if they were immortal, which they are only since Python 3.12, PEP 683). On
Python 3.10/3.11 every void call (``processEvents()``, ``setObjectName()``, ``dataChanged.emit``,
...) takes one reference from ``None`` and every signal ``emit()`` one from ``True``; after some
ten thousand calls the interpreter aborts with "Fatal Python error: none_dealloc: deallocating
None". 6.11.3 does not do this. The fix below gives those singletons the effectively infinite
reference count that Python 3.12 gives them, so the missing references can never reach zero.
It runs only where the leak is measured (CPython < 3.12 with an affected PySide6).
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

_SINGLETONS = (None, True, False, NotImplemented, Ellipsis)
_applied = False


def singletons_leak() -> bool:
    """True when PySide6 calls take references from ``None`` that they never gave."""
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(64):
        probe.setObjectName("probe")
    return sys.getrefcount(None) <= before - 32


def apply() -> bool:
    """Make None/True/False immortal-like when PySide6 leaks their references (idempotent)."""
    global _applied
    if _applied:
        return True
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return False  # immortal there already
    if not singletons_leak():
        return False
    for obj in _SINGLETONS:
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 40  # ob_refcnt is the first field
    _applied = True
    import PySide6

    log.warning(
        "PySide6 %s leaks references to None/True/False on Python %d.%d; worked around. "
        "PySide6 6.11.3 does not have this bug.", PySide6.__version__, *sys.version_info[:2],
    )
    return True


apply()
