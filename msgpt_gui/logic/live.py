"""What a run shows while it goes on: which spectra get live rankings (and the quick preview stage), and how often.

Ranking a spectrum's pool while its samples are drawn costs as much as the final ranking each time (issue #58), and
only the spectrum on screen shows it. :class:`LiveFocus` holds the keys of the entries the window shows; the run's
worker (:func:`msgpt_gui.logic.jobs.elucidate_sessions`) asks it, per spectrum, whether to draw the preview stage
(one sample per query group first) and whether a batch's live ranking is due (:class:`LiveThrottle`: at most one per
``LiveConfig.min_interval`` seconds, and never for a spectrum off screen). The final ranking of every spectrum is the
same either way: samples are identified by (query, index), so the pool a run ends with does not depend on what was
shown on the way.

The window writes the focus from the GUI thread and the worker reads it from its own: both are single attribute
reads and writes of immutable values, atomic under the GIL. Qt-free; imports only the standard library.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LiveConfig:
    """How often a spectrum on screen gets a live ranking while its samples are drawn."""

    min_interval: float = field(default=0.5, metadata={
        "help": "seconds between two live rankings of the spectrum on screen (0: after every batch of samples)"})

    def __post_init__(self) -> None:
        if not self.min_interval >= 0:
            raise ValueError(f"LiveConfig.min_interval must be >= 0 seconds, got {self.min_interval!r}; "
                             "use 0 for a live ranking after every batch")


class LiveFocus:
    """The entries on screen (their keys), set by the window and read by the run's worker; see the module notes.

    ``everything``: every spectrum counts as on screen (today's behaviour before #58; tests compare the two)."""

    def __init__(self, keys: Iterable[int] = (), config: LiveConfig = LiveConfig(), everything: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        self.keys: frozenset[int] = frozenset(keys)
        self.config = config
        self.everything = everything
        self.clock = clock

    def set(self, keys: Iterable[int]) -> None:
        """The window now shows the entries ``keys`` (an entry's formula runs follow their entry's key)."""
        self.keys = frozenset(keys)

    def shows(self, *keys: int | None) -> bool:
        """Whether one of ``keys`` (a spectrum, the entry it belongs to) is on screen."""
        if self.everything:
            return True
        focus = self.keys
        return any(k is not None and k in focus for k in keys)

    def throttle(self, *keys: int | None) -> LiveThrottle:
        """The live-ranking clock of one spectrum (``keys``: itself and the entry it belongs to)."""
        return LiveThrottle(self, tuple(keys))


class LiveThrottle:
    """Whether a spectrum's next live ranking is due: it is on screen and ``min_interval`` has passed since its
    last one (the first is due at once)."""

    def __init__(self, focus: LiveFocus, keys: tuple):
        self.focus = focus
        self.keys = keys
        self.last: float | None = None

    def due(self) -> bool:
        if not self.focus.shows(*self.keys):
            return False
        now = self.focus.clock()
        if self.last is not None and now - self.last < self.focus.config.min_interval:
            return False
        self.last = now
        return True


#: today's behaviour: every spectrum's every batch ranked live, each with the preview stage
EVERYTHING = LiveFocus(config=LiveConfig(min_interval=0.0), everything=True)
