"""``msgpt predict``'s writing: the output file (CSV/SDF, written to OUTPUT.partial and renamed at the end), its
resume journal, the per-feature rows, the run's summary on stderr. :mod:`engine.cli.predict` calls it as each feature
comes back."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from engine import __version__
from engine.cli.common import PosteriorSink, err


class _Summary:
    """What a batch did, in bounded memory: counts, and the first records of each kind to show."""

    SHOWN = 20

    def __init__(self, inputs: list[str]):
        self.inputs = inputs
        self.done = self.done_before = self.rows = 0
        self.skipped: list[str] = []
        self.n_skipped = 0
        self.reasons: Counter[str] = Counter()
        self.notes: list[str] = []
        self.n_notes = 0

    def _line(self, entry: dict, text: str) -> str:
        return f"  {self.inputs[entry['input']]} #{entry['index']} ({entry['id']}): {text}"

    def add(self, entry: dict, earlier: bool = False) -> None:
        if entry["status"] == "skipped":
            self.n_skipped += 1
            self.reasons[entry["reason"]] += 1
            if len(self.skipped) < self.SHOWN:
                self.skipped.append(self._line(entry, entry["reason"]))
            return
        if earlier:
            self.done_before += 1
        else:
            self.done += 1
        self.rows += entry["rows"]
        if entry.get("notes"):
            self.n_notes += 1
            if len(self.notes) < self.SHOWN:
                self.notes.append(self._line(entry, entry["notes"]))

    def report(self, output: str, seconds: float, written: bool) -> None:
        before = f" (and {self.done_before} in the interrupted run)" if self.done_before else ""
        err(f"Processed {self.done} spectra in {seconds:.1f} s{before}; "
             f"{self.rows} candidates written to {output if written else '(nothing)'}.")
        if self.n_notes:
            err(f"Notes on {self.n_notes} processed spectra:")
            for line in self.notes:
                err(line)
            if self.n_notes > len(self.notes):
                err(f"  … and {self.n_notes - len(self.notes)} more")
        if self.n_skipped:
            err(f"Skipped {self.n_skipped} spectra:")
            for line in self.skipped:
                err(line)
            if self.n_skipped > len(self.skipped):
                err("  … by reason:")
                for reason, count in self.reasons.most_common(self.SHOWN):
                    err(f"  {count:6d} × {reason}")


def _run_settings(args: argparse.Namespace, bundle, params, libraries=()) -> dict:
    """What decides the output: a resumed run must match these exactly."""
    import torch

    def identity(path: str) -> str:
        p = Path(path)
        try:
            size = f"{p.stat().st_size} bytes"
        except OSError:
            size = "unreadable"
        return f"{p.resolve()} ({size})"

    return {
        "msgpt_version": __version__,
        "model_checksum": bundle.checksum,
        "device": bundle.device.type,
        "precision": "bf16" if bundle.dtype == torch.bfloat16 else "fp32",
        "parameters": params.describe(),
        "top": args.top,
        "formula": args.formula,
        "adduct": args.adduct,
        "formula_candidates": f"k={args.formulas} min_p={args.min_formula_p:g} "
                              f"samples={'full' if getattr(args, 'full_formula_runs', False) else 'proportional'} "
                              f"ppm={args.formula_ppm} "
                              f"ion_types={args.ion_types} "
                              f"elements={args.elements} recalibrate={args.recalibrate}",
        "features": f"ppm={args.feature_ppm} rt_gap={args.feature_rt_gap} merge={not args.no_merge}"
                    f" adduct_groups={not getattr(args, 'no_adduct_groups', False)}",
        "inputs": [identity(p) for p in args.inputs],
        **({"known": identity(args.known)} if getattr(args, "known", None) else {}),
        **({"libraries": [_library_identity(lib) for lib in libraries]} if libraries else {}),
    }


def _library_identity(lib) -> str:
    """How a run's settings name a library: its kind, name and the SHA-256 of its source file."""
    from engine.library import StructureLibrary

    if isinstance(lib, StructureLibrary):
        return f"structure {lib.name} sha256:{lib.checksum}"
    return f"spectral {lib.name} sha256:{lib.checksum}"


def _open_journal(output: Path, resume: bool, settings: dict):
    """Lock the journal, then decide how to start (see engine.files.journal.plan_run)."""
    from engine.files.journal import JournalWriter, journal_path, plan_run

    path = journal_path(output)
    existed = path.exists()
    journal = JournalWriter(path)
    try:
        return journal, plan_run(output, resume, settings)
    except BaseException:
        journal.close()
        if not existed:
            path.unlink(missing_ok=True)
        raise


def _write_feature(position: int, item, outcomes: list, writer, sink: PosteriorSink | None,
                   offset: int) -> tuple[dict, int]:
    """Write the candidates of one feature's results (ranked on in one list) and their posteriors; returns the
    feature's journal entry and the output's offset after it."""
    from engine.spectra.spectrum import SkippedRecord

    results = [o for o in outcomes if not isinstance(o, SkippedRecord)]
    entry = {"input": position, "index": item.index}
    if not results:
        entry.update(id=outcomes[0].spectrum_id, status="skipped", reason=outcomes[0].reason, offset=offset)
        return entry, offset
    rows = writer.write_feature(results)
    offset = writer.sync()  # the rows are on disk before the journal says so
    if sink is not None:
        for result in results:
            sink.add_result(result)
    entry.update(id=item.id, status="done", rows=rows, offset=offset)
    if results[0].spectrum.metadata.get("warnings"):
        entry["notes"] = results[0].spectrum.metadata["warnings"]
    return entry, offset


def _abort(writer, sink: PosteriorSink | None) -> None:
    """Leave the output (and the posteriors file) of an interrupted or failed run as they were."""
    writer.abort()
    if sink is not None:
        sink.abort()


def _end_output(written: bool, journal, writer, partial: Path, sink: PosteriorSink | None) -> None:
    """With spectra written: the journal says complete, OUT.partial becomes OUT, the journal goes and the posteriors
    file is closed; without any, nothing is left behind."""
    from engine.errors import OutputError

    if written:
        journal.append({"status": "complete"})
        try:
            writer.close()
        except OutputError as e:
            raise OutputError(f"{e} All spectra are finished in {partial}; run the same command with --resume "
                              "to finish.") from e
        journal.remove()
        if sink is not None:
            sink.close()
    else:
        writer.abort()
        partial.unlink(missing_ok=True)
        journal.remove()
        if sink is not None:
            sink.abort()
