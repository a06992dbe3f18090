"""Where a run's time goes: named stages, timed only when someone asks (``benchmarks/bench_run.py``).

The engine marks its stages (``with stage("encoder"): ...``, ``for x in timed("sampling", generator)``); nothing
is measured until :func:`measure` installs a :class:`StageClock`, so a normal run pays one global look-up per
mark. Stages nest: each one's time is *exclusive* (a stage inside another is taken out of the outer one's), so
the table adds up to the wall time of the marked work. Pure standard library; imports nothing of the engine.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

_NULL = nullcontext()


@dataclass
class StageClock:
    """Exclusive seconds and calls per stage name."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    _stack: list[list] = field(default_factory=list, repr=False)  # [name, start, time of the stages inside]

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        frame = [name, start, 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            total = time.perf_counter() - start
            self.seconds[name] = self.seconds.get(name, 0.0) + total - frame[2]
            self.calls[name] = self.calls.get(name, 0) + 1
            if self._stack:
                self._stack[-1][2] += total

    def table(self, wall: float | None = None) -> list[tuple[str, float, int, float]]:
        """``(stage, seconds, calls, share of wall)`` rows, largest first; ``wall`` defaults to the stages' sum and
        adds an ``unmarked`` row for what no stage covered."""
        total = sum(self.seconds.values())
        rows = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        out = [(name, s, self.calls[name]) for name, s in rows]
        if wall is not None and wall > total:
            out.append(("unmarked", wall - total, 0))
        denominator = wall if wall else total
        return [(n, s, c, s / denominator if denominator else 0.0) for n, s, c in out]


_clock: StageClock | None = None


def stage(name: str):
    """A context that adds its time to stage ``name`` while a clock is installed (else does nothing)."""
    return _clock.stage(name) if _clock is not None else _NULL


def staged(name: str):
    """Decorator: every call of the (plain, not generator) function counts as stage ``name``."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if _clock is None:
                return fn(*args, **kwargs)
            with _clock.stage(name):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


def timed(name: str, items: Iterable) -> Iterator:
    """Iterate ``items`` (a generator doing the work), counting the time spent producing each item as ``name``
    and not the time the consumer spends between items."""
    if _clock is None:
        yield from items
        return
    it = iter(items)
    while True:
        with _clock.stage(name):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


@contextmanager
def measure():
    """Install a fresh :class:`StageClock` for the duration of the block and give it to the caller."""
    global _clock
    previous, _clock = _clock, StageClock()
    try:
        yield _clock
    finally:
        _clock = previous
