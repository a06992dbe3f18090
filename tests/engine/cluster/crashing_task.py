"""A per-feature task for the cluster tests that kills its own worker process (SIGKILL, as ``kill -9`` would):
the feature named by ``MSGPT_TEST_CRASH_ONCE`` on its first attempt only (a marker file in
``MSGPT_TEST_CRASH_DIR`` remembers it), the one named by ``MSGPT_TEST_CRASH_ALWAYS`` on every attempt; the rest run
as ``msgpt predict`` runs them. The workers import it by name (the test puts this folder on their path)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from engine.cli import predict


def crashing_task(bundle, item, **shared):
    _, feature = item
    if feature.id == os.environ.get("MSGPT_TEST_CRASH_ALWAYS"):
        os.kill(os.getpid(), signal.SIGKILL)
    if feature.id == os.environ.get("MSGPT_TEST_CRASH_ONCE"):
        marker = Path(os.environ["MSGPT_TEST_CRASH_DIR"]) / "crashed-once"
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    return predict._feature_task(bundle, item, **shared)
