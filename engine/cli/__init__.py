"""The ``msgpt`` command: ``predict`` and ``info`` (``predict``), ``score`` (``score``), ``calibrate-library``
(``calibrate_library``), and the plumbing both
share (``common``: opening the model, the novelty marker, the posterior sink, error printing).

May import every other package of the engine; nothing in the engine imports it.
"""

from engine.cli.predict import main

__all__ = ["main"]
