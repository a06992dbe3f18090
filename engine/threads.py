"""How many CPU threads torch takes: one rule for ``msgpt predict``/``score``, the app and cluster workers (issue #58).

Decoding is a long chain of small matrix products (B=100 rows of 256 columns), each a short OpenMP parallel region.
Measured with ``msgpt predict`` on 30 FOLD=val spectra on the 2-core AMD EPYC (``benchmarks/bench_run.py
--concurrency``, docs/evidence/run_speed.md): one job alone took 31.2 s on one thread and 24.0 s on two (torch's
default: threads spin while they wait; 41.7 s with sleeping waits, ``OMP_WAIT_POLICY=PASSIVE``); two such two-thread
jobs side by side took 139.6 s each, their spinning threads taking the cores from each other's work, where two
one-thread jobs took 32.8 s each. So the jobs on one machine **share its cores**:

* every ``msgpt predict`` and app run registers in the data folder (:class:`JobShare`, a file per job) and takes
  ``cores // jobs`` threads, looked at again between features: alone it takes every core, and when a second job
  starts both drop to their share within a feature;
* a cluster's N workers take ``cores / N`` each (:func:`worker_threads`; a worker you start yourself, ``cores / its
  --nthreads``);
* ``--threads T`` or ``OMP_NUM_THREADS`` fix the count.

Pure standard library until torch is set (which imports it).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, else all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _from_environment() -> int | None:
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else None


def job_threads(jobs: int = 1, reserve: int = 0) -> int:
    """Threads of one of ``jobs`` jobs running on this machine, ``reserve`` cores left to others (the app's window):
    ``OMP_NUM_THREADS`` when set, else its share of the cores."""
    return _from_environment() or max(1, (available_cores() - reserve) // max(1, jobs))


def worker_threads(workers: int) -> int:
    """Threads of each of ``workers`` processes that share this machine's cores (a cluster's workers):
    ``OMP_NUM_THREADS`` when set, else the cores over the workers."""
    return _from_environment() or max(1, available_cores() // max(1, workers))


def apply(threads: int | None = None, workers: int | None = None) -> int:
    """Set torch's thread count (``threads``; else :func:`worker_threads` of ``workers``; else :func:`job_threads`
    of one job) and return it."""
    import torch

    n = threads or (worker_threads(workers) if workers else job_threads())
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


class JobShare:
    """This process's place among the msgpt jobs of this machine: a file ``<host>-<pid>`` in ``folder`` while it runs
    (a ``with`` block). :meth:`rebalance` (between features) sets torch's threads to this job's share of the cores
    (``reserve`` of them left to others),
    counting the jobs whose process still lives (a file left by a job that died is removed). ``threads`` (``--threads``)
    fixes the count instead."""

    def __init__(self, folder: Path | None = None, threads: int | None = None, reserve: int = 0):
        if folder is None:
            from engine.paths import data_dir

            folder = data_dir() / "jobs"
        self.folder = Path(folder)
        self.fixed = threads
        self.reserve = reserve
        self.host = socket.gethostname().replace("-", "_")
        self.path = self.folder / f"{self.host}-{os.getpid()}"

    def __enter__(self) -> JobShare:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError:
            pass  # an unwritable data folder: this job counts as alone
        self.rebalance()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass

    def jobs(self) -> int:
        """The live msgpt jobs of this host, this one included."""
        alive = 1
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return alive
        for entry in entries:
            host, _, pid = entry.name.rpartition("-")
            if host != self.host or entry == self.path or not pid.isdigit():
                continue
            if _alive(int(pid)):
                alive += 1
            else:
                entry.unlink(missing_ok=True)
        return alive

    def rebalance(self) -> int:
        """Set torch's threads to this job's share (or the fixed count) and return it."""
        return apply(self.fixed or job_threads(self.jobs(), self.reserve))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it lives
        return True
    return True
