"""The client side of ``msgpt predict --cluster``: open the cluster, load the model on its workers, map a
per-feature function over the features and hand the outcomes back in input order.

:func:`parse_address` reads ``--cluster`` (``local:N``, or a scheduler's ``tcp://host:port``);
:class:`ClusterRun` opens it (a :class:`distributed.LocalCluster` of N worker processes, or a
:class:`distributed.Client` to a running scheduler), registers :class:`~engine.cluster.worker.ModelPlugin`, and
:meth:`ClusterRun.map_ordered` submits one task per feature, at most ``window`` of them in flight at a time
(``as_completed``), buffering the ones that finish early so that the caller writes them in input order.

Faults are dask's: the tasks of a worker that dies are recomputed on the others (a task's result is taken once,
so nothing is written twice); a task whose workers die more than ``allowed_failures`` times (the scheduler's
``distributed.scheduler.allowed-failures``) comes back as :class:`Crashed` instead of a result; an exception
raised by the function itself is raised again here, as it would be in one process. Closing the run (or Ctrl-C)
cancels every future still pending.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from engine.errors import ConfigError
from engine.threads import worker_threads

INSTALL_HINT = 'pip install -e ".[cluster]" (or pip install "dask[distributed]")'
log = logging.getLogger(__name__)
DEFAULT_ALLOWED_FAILURES = 2  # local:N: a feature that kills 3 workers is skipped


@dataclass(frozen=True)
class ClusterAddress:
    """Where to run: ``local`` workers on this machine (``n_workers``), or a running ``scheduler``."""

    scheduler: str | None = None
    n_workers: int = 0

    @property
    def local(self) -> bool:
        return self.scheduler is None

    def describe(self) -> str:
        return f"local:{self.n_workers}" if self.local else self.scheduler


def parse_address(text: str) -> ClusterAddress:
    """``local:N`` (N ≥ 1 worker processes here) or ``SCHEME://HOST:PORT`` of a running Dask scheduler."""
    m = re.fullmatch(r"local:(\d+)", text.strip())
    if m:
        n = int(m.group(1))
        if n < 1:
            raise ConfigError(f"--cluster {text!r}: local:N needs at least one worker process, e.g. local:2.")
        return ClusterAddress(n_workers=n)
    if re.fullmatch(r"(tcp|tls|ws|wss|ucx|inproc)://[^\s/]+(:\d+)?/?", text.strip()):
        return ClusterAddress(scheduler=text.strip())
    raise ConfigError(f"--cluster {text!r} is neither local:N (worker processes on this machine, e.g. local:4) nor "
                      "a Dask scheduler's address (e.g. tcp://10.0.0.5:8786).")


def require_distributed() -> None:
    """Raise a ConfigError saying how to install the ``cluster`` extra when dask's distributed is missing."""
    try:
        import distributed  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"--cluster needs Dask's distributed scheduler, which is not installed: {INSTALL_HINT}.") from e


@dataclass(frozen=True)
class Crashed:
    """A task whose workers kept dying: it was given up after ``failures`` worker losses."""

    failures: int
    message: str


class ClusterRun:
    """One batch on a cluster: the client (and a LocalCluster it owns), the model on every worker, the futures.

    ``notify`` gets one line whenever a worker joins or leaves, and the cluster's size when it opens.
    """

    def __init__(self, address: ClusterAddress, spec, shared: dict, notify: Callable[[str], None] = print,
                 allowed_failures: int | None = None, ship: bool = False):
        require_distributed()
        import time

        import dask
        from distributed import Client, LocalCluster

        from engine.cluster.worker import ModelPlugin, bundle_files

        self.address, self.notify = address, notify
        t0 = time.perf_counter()
        self.allowed_failures = DEFAULT_ALLOWED_FAILURES if allowed_failures is None else allowed_failures
        self._futures: set = set()
        self._cluster = None
        logging.getLogger("distributed").setLevel(logging.ERROR)  # our own lines say what happens to workers
        logging.getLogger("distributed.scheduler").setLevel(logging.CRITICAL)  # "marked as failed": Crashed says it
        try:
            if address.local:
                # the workers' statistical profiler samples every thread's stack 100 times a second, which takes the
                # GIL from the sampling loop; nobody reads those profiles here
                # worker-saturation 1.0: a worker holds only the feature it computes (dask's default, 1.1, queues a
                # second one on a one-thread worker, which then dies with it when the first one crashes the worker,
                # and is counted as crashing too)
                with dask.config.set({"distributed.scheduler.allowed-failures": self.allowed_failures,
                                      "distributed.scheduler.worker-saturation": 1.0,
                                      "distributed.worker.profile.enabled": False}):
                    # memory_limit=0: no nanny kills a worker at 1/N of this machine's memory (that would look like
                    # a crash of its feature); the operating system's limit is the one left
                    self._cluster = LocalCluster(n_workers=address.n_workers, threads_per_worker=1, processes=True,
                                                 memory_limit=0, dashboard_address=None, silence_logs=logging.ERROR)
                self.client = Client(self._cluster)
            else:
                try:
                    self.client = Client(address.scheduler, timeout="30s")
                except OSError as e:
                    raise ConfigError(f"--cluster {address.scheduler}: no Dask scheduler answers there ({e}). Start "
                                      "one (dask scheduler) and its workers (dask worker ADDRESS), or use local:N.") from e
                self.allowed_failures = self.client.run_on_scheduler(_allowed_failures)
        except BaseException:
            self.close()
            raise
        try:
            if ship:
                spec = replace(spec, files=bundle_files(Path(spec.path)))
            if address.local and spec.threads is None:  # N workers share this machine's cores
                spec = replace(spec, threads=worker_threads(address.n_workers))
            self.run_id = uuid.uuid4().hex[:12]
            self.plugin_name = f"msgpt-model-{self.run_id}"
            self._workers = set(self.client.nthreads())  # every worker (scheduler_info lists only a few in newer versions)
            self.client.subscribe_topic("all", self._on_event)
            self._subscribed = True
            self.client.register_plugin(ModelPlugin(self.run_id, spec, shared))
        except BaseException:
            self.close()
            raise
        self.seconds_to_open = time.perf_counter() - t0
        self.notify(f"Cluster {address.describe()}: {len(self._workers)} workers, "
                    f"{sum(self.client.nthreads().values())} threads; the model is loaded on each "
                    f"(ready in {self.seconds_to_open:.1f} s).")
        if not self._workers:
            self.notify(f"No worker is connected to {address.describe()} yet: the features wait until one joins "
                        f"(dask worker {address.describe()}).")

    def _on_event(self, event) -> None:
        """The scheduler's events (run in the client's event loop): a line per worker that joins or leaves."""
        _, msg = event
        if not isinstance(msg, dict) or "worker" not in msg:
            return
        if msg.get("action") == "add-worker" and msg["worker"] not in self._workers:
            self._workers.add(msg["worker"])
            self.notify(f"Worker joined: {msg['worker']} ({len(self._workers)} workers).")
        elif msg.get("action") == "remove-worker" and msg["worker"] in self._workers:
            self._workers.discard(msg["worker"])
            lost = len(msg.get("processing-tasks") or ())
            again = f"; its {lost} running feature(s) go to other workers" if lost else ""
            self.notify(f"Worker left: {msg['worker']} ({len(self._workers)} workers){again}.")

    @property
    def n_workers(self) -> int:
        return len(self._workers)

    def in_flight(self) -> int:
        """Futures computed at a time: one per worker thread, so that a worker that dies was computing only its own
        feature (the scheduler counts a death against every task a worker holds, and gives a task up after
        ``allowed_failures``; features queued behind a crashing one would be given up with it)."""
        return max(1, sum(self.client.nthreads().values()))

    def window(self) -> int:
        """Features handed out but not yet written: room for the ones that finish before an earlier, slower one."""
        return 8 + 4 * self.in_flight()

    def map_ordered(self, fn: Callable, items: Iterable) -> Iterator[tuple[object, object]]:
        """``(item, fn(bundle, item, **shared))`` for every item, in input order (or ``(item, Crashed)``).

        ``fn`` runs on the workers (it must be importable there: a module-level function); ``items`` is consumed
        lazily: :meth:`in_flight` futures at a time, at most :meth:`window` items ahead of the one written last.
        """
        from distributed import KilledWorker, as_completed

        from engine.cluster.worker import run_task

        source = iter(items)
        pending: dict = {}  # future -> sequence number
        items_by_seq: dict[int, object] = {}
        ready: dict[int, object] = {}
        submitted = written = 0
        done = as_completed()

        def fill() -> None:
            nonlocal submitted
            computing, limit = self.in_flight(), self.window()
            while len(pending) < computing and submitted - written < limit:
                try:
                    item = next(source)
                except StopIteration:
                    return
                future = self.client.submit(run_task, fn, self.run_id, item, pure=False,
                                            key=f"msgpt-feature-{self.run_id}-{submitted}")
                pending[future] = submitted
                items_by_seq[submitted] = item
                self._futures.add(future)
                done.add(future)
                submitted += 1

        try:
            fill()
            while written < submitted:
                future = next(done)
                seq = pending.pop(future)
                self._futures.discard(future)
                try:
                    ready[seq] = future.result()
                except KilledWorker:
                    ready[seq] = Crashed(self.allowed_failures + 1,
                                         f"its worker died {self.allowed_failures + 1} times while computing it (a "
                                         "crash or out-of-memory this feature causes; the workers' logs say more)")
                future.release()
                while written in ready:
                    yield items_by_seq.pop(written), ready.pop(written)
                    written += 1
                    fill()  # between yields: what the caller wrote frees room in the window
                fill()
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Cancel every future still pending (Ctrl-C, an error, or the end of :meth:`map_ordered`)."""
        if self._futures:
            futures, self._futures = list(self._futures), set()
            try:
                self.client.cancel(futures)
            except Exception as e:  # noqa: BLE001 - the scheduler may be gone already; nothing is left to cancel then
                log.debug("cancelling the pending futures: %s", e)

    def close(self) -> None:
        """Cancel what is pending, take the model off the workers, close the client and the local cluster."""
        self.cancel()
        client = getattr(self, "client", None)
        if client is not None:
            if getattr(self, "_subscribed", False):
                self._subscribed = False
                client.unsubscribe_topic("all")  # before the client goes: the scheduler would send it its own leaving
            try:
                if getattr(self, "plugin_name", None) and self._cluster is None and client.status == "running":
                    client.unregister_worker_plugin(self.plugin_name)
            except Exception as e:  # noqa: BLE001 - a plugin that never registered, or a scheduler that is gone
                log.debug("removing the model plugin: %s", e)
            client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def _allowed_failures(dask_scheduler=None) -> int:
    """The retry limit of a running scheduler (run there with ``Client.run_on_scheduler``)."""
    return int(dask_scheduler.allowed_failures)
