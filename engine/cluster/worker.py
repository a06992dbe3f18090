"""What runs on a Dask worker: :class:`ModelPlugin` loads the model bundle once per worker process, and
:func:`run_task` hands it to the per-feature function of each task.

The plugin is registered with ``Client.register_plugin``: the scheduler keeps it and sets it up on every worker,
those that join later (or are restarted by their nanny after a crash) included. Its ``setup`` loads the bundle
from the path the client gave (it must be readable on the worker: a shared file system), or from the bundle files
the plugin carries (``ship=True``), and refuses to serve when the bundle's checksum, the device or the decoder's
precision differ from the client's, so that every worker computes what one process would. A worker whose plugin
refuses at start-up does not join the cluster; one already running makes the registration fail on the client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from engine.errors import BundleError

_LOADED: dict[str, tuple[Any, dict]] = {}  # run id -> (ModelBundle, the run's shared arguments), in this worker
_LOCK = threading.Lock()


@dataclass(frozen=True)
class ModelSpec:
    """Which model a run needs and how it must run: what the client loaded, so that the workers compute the same."""

    path: str  # the bundle folder as the client names it
    checksum: str  # ModelBundle.checksum
    device: str  # --device (auto, cpu, cuda)
    precision: str  # --precision (auto, bf16, fp32)
    use_adapter: bool
    device_type: str  # the device the client resolved ("cpu", "cuda"): workers must resolve the same
    dtype: str  # the decoder's dtype on the client ("torch.float32", "torch.bfloat16")
    threads: int | None = None  # torch threads per worker process (None: one per core / worker threads)
    files: dict[str, bytes] = field(default_factory=dict, repr=False)  # the bundle's files, when shipped
    default: bool = False  # the bundled default model: each worker loads its own installation's copy (checksum checked)


def bundle_files(path: Path) -> dict[str, bytes]:
    """Every file of a bundle folder (sub-folders such as ``adapter/`` included) by relative path, to ship."""
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


class ModelPlugin(WorkerPlugin):
    """Loads a run's model bundle once per worker and keeps it, with the run's shared arguments, for its tasks."""

    idempotent = False

    def __init__(self, run_id: str, spec: ModelSpec, shared: dict):
        self.name = f"msgpt-model-{run_id}"
        self.run_id, self.spec, self.shared = run_id, spec, shared

    def setup(self, worker) -> None:
        from engine import threads
        from engine.model.bundle import load_bundle

        spec = self.spec
        threads.apply(spec.threads, workers=worker.state.nthreads)
        path = Path(spec.path)
        if spec.default and not spec.files:
            from engine.paths import default_model_dir

            path = default_model_dir()
        if spec.files:
            path = Path(worker.local_directory) / f"msgpt-model-{spec.checksum[:16]}"
            for name, data in spec.files.items():
                target = path / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        elif not (path / "config.json").is_file():
            raise BundleError(
                f"Worker {worker.address} cannot read the model bundle {path}: put the bundle at the same path "
                "on every worker (a shared file system), or pass --ship-model to send it with the run.")
        bundle = load_bundle(path, device=spec.device, use_adapter=spec.use_adapter, precision=spec.precision)
        if bundle.checksum != spec.checksum:
            raise BundleError(
                f"Worker {worker.address} has a different model at {path} (checksum {bundle.checksum[:12]}, the "
                f"client's is {spec.checksum[:12]}): copy the same bundle to every worker, or pass --ship-model.")
        if bundle.device.type != spec.device_type or str(bundle.dtype) != spec.dtype:
            raise BundleError(
                f"Worker {worker.address} runs the model on {bundle.device.type} ({bundle.dtype}), the client on "
                f"{spec.device_type} ({spec.dtype}): the results would differ. Give --device and --precision "
                "explicitly (e.g. --device cpu --precision fp32), the same for the client and the workers.")
        with _LOCK:
            _LOADED[self.run_id] = (bundle, self.shared)

    def teardown(self, worker) -> None:
        with _LOCK:
            _LOADED.pop(self.run_id, None)


def run_task(fn: Callable, run_id: str, item):
    """A task: ``fn(bundle, item, **shared)`` with the model and shared arguments the run's plugin loaded here."""
    with _LOCK:
        loaded = _LOADED.get(run_id)
    if loaded is None:
        from distributed import get_worker

        try:
            where = f"Worker {get_worker().address}"
        except ValueError:  # not in a worker (a test calling it directly)
            where = "This process"
        raise BundleError(f"{where} has not loaded the model of run {run_id}: its model plugin failed or was "
                          "removed (see the worker's log).")
    bundle, shared = loaded
    return fn(bundle, item, **shared)
