"""What ``msgpt predict`` and ``msgpt score`` share: printing to stderr, opening the model bundle of ``--model``
(with ``--device``, ``--precision``, ``--threads``), the novelty marker of ``--known`` and the bundle's training
structures, and the ``--posteriors`` sink."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.errors import MsgptError, OutputError


def err(msg: str) -> None:
    """A message to the user on stderr (the table or CSV goes to stdout)."""
    print(msg, file=sys.stderr, flush=True)


def open_model(args: argparse.Namespace, use_adapter: bool):
    """The bundle of ``--model`` on ``--device`` / ``--precision``, after applying ``--threads``
    (``msgpt predict`` and ``msgpt score`` share it); says which device runs it."""
    from engine import threads
    from engine.model.bundle import load_bundle, resolve_device

    if args.threads is not None and args.threads < 1:
        raise MsgptError(f"--threads must be at least 1, got {args.threads}.")
    threads.apply(args.threads)  # --threads, else OMP_NUM_THREADS, else one (engine/threads.py)
    _, device_msg = resolve_device(args.device)
    err(device_msg)
    return load_bundle(model_path(args.model), device=args.device, use_adapter=use_adapter,
                       precision=args.precision)


def model_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    from engine.paths import default_model_dir

    path = default_model_dir()
    if not (path / "config.json").is_file():
        raise MsgptError(
            f"No model bundle is installed at {path}. Pass --model FOLDER with a bundle made by "
            "msgpt-train (see docs/training.md)."
        )
    return path


def novelty_marker(bundle, known: str | None):
    """Training-corpus set of the bundle (if it ships one) and the user's list (``--known``)."""
    from engine.insight.novelty import NoveltyMarker, read_structure_list

    user = None
    if known:
        listing = read_structure_list(known)
        user = listing.known()
        err(f"Known structures: {len(listing.keys):,} from {known} ({listing.n_rows:,} rows"
             f"{f', {listing.n_problems} unreadable' if listing.n_problems else ''}).")
        for line in listing.problems[:5]:
            err(f"  {line}")
    marker = NoveltyMarker(bundle.known_structures, user)
    if bundle.known_structures is None:
        err("This model ships no list of its training structures: candidates are checked against "
             + ("your --known list only." if user is not None else "nothing (the novelty column stays empty)."))
    return marker


class PosteriorSink:
    """``msgpt predict --posteriors``: every processed spectrum's posterior into one ``.npz``.

    Spectra of this run come with their result; spectra an interrupted run finished get their
    posterior recomputed (the encoder alone, deterministic), so a resumed run writes the same file.
    """

    def __init__(self, path: str, bundle, params):
        from engine.files.posteriors import PosteriorWriter, posterior_info

        self.path, self.bundle, self.params = path, bundle, params
        self.writer = PosteriorWriter(path, posterior_info(bundle, params))

    def add_result(self, result) -> None:
        from engine.files.posteriors import record_for_result

        self.writer.write(record_for_result(result))

    def add_spectrum(self, item) -> None:
        from engine.files.posteriors import record_for_spectrum
        from engine.spectra.spectrum import SkippedRecord

        if isinstance(item, SkippedRecord):
            return
        try:
            record = record_for_spectrum(self.bundle, item, self.params)
        except MsgptError:
            return  # it was skipped: no posterior, as in the uninterrupted run
        self.writer.write(record)

    def add_inputs(self, items) -> None:
        for _, item in items:
            self.add_spectrum(item)

    def close(self) -> None:
        try:
            self.writer.close()
        except OutputError as e:
            raise OutputError(f"{e} The candidates were written; run again without --resume for the posteriors.") from e
        err(f"Posteriors of {self.writer.n} spectra written to {self.path}.")

    def abort(self) -> None:
        self.writer.abort()
