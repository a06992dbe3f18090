"""How many CPU threads torch takes, one rule for ``msgpt predict``/``score``, the app and cluster workers (issue #58).

Decoding is a long chain of small matrix products (B=100 rows of 256 columns), so each torch operation is a short
OpenMP parallel region. Two things follow:

* **Waiting threads must sleep.** GNU OpenMP (torch's CPU build) lets a thread that reaches the end of a region
  spin for a while before it sleeps. Alone on the machine that saves a wake-up; with a second job on the same cores
  the spinning threads take the CPU from the threads doing work, and two ``msgpt predict`` jobs with torch's
  default threads on 2 cores ran about 8× slower than one each with ``--threads 1``. :func:`prepare_openmp` sets
  ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep at once) unless the user set a policy; it must run before torch is
  imported, so every entry point calls it first.
* **One job takes the cores it may use**, the cores of this process's CPU affinity (a container or ``taskset``
  limit counts) divided among the workers that share them (``--cluster local:N``: N workers; the app keeps one core
  for its window). ``--threads T`` or ``OMP_NUM_THREADS`` override it.

Pure standard library until :func:`apply` (which imports torch).
"""

from __future__ import annotations

import os
import sys

WAIT_POLICY = "PASSIVE"


def prepare_openmp() -> bool:
    """Make OpenMP threads sleep when they wait (``OMP_WAIT_POLICY``), unless the user chose a policy. False when
    torch was imported before (too late: OpenMP reads it when it starts)."""
    if "torch" in sys.modules:
        return False
    os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)
    return True


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, else all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_threads(workers: int = 1, reserve: int = 0) -> int:
    """Threads for each of ``workers`` jobs sharing this machine's cores, ``reserve`` cores left to others (the
    app's window); ``OMP_NUM_THREADS`` when set."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, (available_cores() - reserve) // max(1, workers))


def apply(threads: int | None = None, workers: int = 1, reserve: int = 0) -> int:
    """Set torch's thread count (``threads``, else :func:`default_threads`) and return it."""
    import torch

    n = threads if threads else default_threads(workers, reserve)
    torch.set_num_threads(n)
    return n
