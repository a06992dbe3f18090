"""How many CPU threads torch takes: one rule for ``msgpt predict``/``score``, the app and cluster workers (issue #58).

Decoding is a long chain of small matrix products (B=100 rows of 256 columns), each a short OpenMP parallel region,
too small for threads to pay. Measured with ``msgpt predict`` on 30 FOLD=val spectra on the 2-core AMD EPYC
(docs/evidence/run_speed.md): one job alone took 31.8 s on one thread and 26.9 s on two (torch's default, threads
spinning while they wait; 41.0 s with sleeping waits, ``OMP_WAIT_POLICY=PASSIVE``); two such two-thread jobs side by
side took 172 s each, their spinning threads taking the cores from each other's work, where two one-thread jobs took
32.7 and 34.4 s. So:

* **a job samples on one thread** (the command, the app): at most a fifth slower alone than on every core, and two
  jobs, or the app and a job, share a machine without slowing each other;
* **features run in parallel as processes**: ``--cluster local:N`` gives each of its N workers ``cores / N`` threads
  (a worker you start yourself, ``cores / its --nthreads``);
* ``--threads T`` or ``OMP_NUM_THREADS`` override both.

Pure standard library until :func:`apply` (which imports torch).
"""

from __future__ import annotations

import os


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, else all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _from_environment() -> int | None:
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else None


def job_threads() -> int:
    """Threads of one job (``msgpt predict``, the app's runs): ``OMP_NUM_THREADS`` when set, else one."""
    return _from_environment() or 1


def worker_threads(workers: int) -> int:
    """Threads of each of ``workers`` processes that share this machine's cores (a cluster's workers):
    ``OMP_NUM_THREADS`` when set, else the cores over the workers."""
    return _from_environment() or max(1, available_cores() // max(1, workers))


def apply(threads: int | None = None, workers: int | None = None) -> int:
    """Set torch's thread count (``threads``; else :func:`worker_threads` of ``workers``; else :func:`job_threads`)
    and return it."""
    import torch

    n = threads or (worker_threads(workers) if workers else job_threads())
    torch.set_num_threads(n)
    return n
