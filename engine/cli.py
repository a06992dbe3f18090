"""``msgpt`` command line: elucidate structures from MGF/mzML files, inspect a model bundle."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from . import __version__
from .errors import InputFileError, MsgptError

log = logging.getLogger("msgpt")


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="msgpt",
        description="De novo structure elucidation from MS/MS spectra with MS-GPT, offline.",
    )
    p.add_argument("--version", action="version", version=f"msgpt {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    pr = sub.add_parser(
        "predict",
        help="rank candidate structures for every spectrum of MGF/mzML files",
        description="Rank candidate structures for every MS2 spectrum in the input files (MGF, mzML, "
        "optionally .gz). Each spectrum needs its molecular formula and a supported adduct "
        "(from the file, or forced with --formula/--adduct).",
    )
    pr.add_argument("inputs", nargs="+", metavar="INPUT", help="MGF or mzML files (.gz allowed)")
    pr.add_argument("-o", "--output", required=True, help="output .csv or .sdf file")
    pr.add_argument("--model", help="model bundle folder (default: the bundled model)")
    pr.add_argument("--band", nargs=2, type=float, metavar=("KMIN", "KMAX"), default=(0.95, 1.50),
                    help="density-ratio band κ of the queries (default 0.95 1.50; 1.0 1.0 with --groups 1 "
                    "is the point query)")
    pr.add_argument("--groups", type=int, default=20, metavar="M", help="query groups M (default 20)")
    size = pr.add_mutually_exclusive_group()
    size.add_argument("--samples-per-group", type=int, metavar="N", help="samples per group N (default 5)")
    size.add_argument("--pool-size", type=int, metavar="B", help="candidate pool size B = M × N (default 100)")
    pr.add_argument("--top", type=int, metavar="K", help="write only the K best candidates per spectrum")
    pr.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same result")
    pr.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    pr.add_argument("--top-k", type=int, default=50, help="top-k sampling (default 50)")
    pr.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass (default 0.95)")
    pr.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="compute device")
    pr.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                    help="decoder precision: auto = bf16 where the hardware computes it natively (about 2x "
                    "faster on CPU), else fp32")
    pr.add_argument("--threads", type=int, metavar="T",
                    help="CPU threads for torch (default: torch's choice, usually one per core)")
    pr.add_argument("--formula", help="force this molecular formula on every input spectrum")
    pr.add_argument("--adduct", help="force this adduct (e.g. [M+H]+) on every input spectrum")
    pr.add_argument("--no-adapter", action="store_true", help="switch the bundle's LoRA adapter off")
    pr.add_argument("--decoding", choices=("formula", "free"), default="formula",
                    help="formula (default): draw only strings with exactly the formula's heavy atoms; "
                         "free: the paper's unconstrained sampling, filtered afterwards")
    pr.add_argument("--ranking", choices=("fingerprint", "combined", "frequency"), default="fingerprint",
                    help="fingerprint (default): the candidate's fingerprint score under the posterior; combined: "
                         "that + log generation count; frequency: the paper's generation count")
    pr.add_argument("--resume", action="store_true",
                    help="go on with an interrupted run of the same command: spectra already in OUTPUT.partial "
                    "(listed in OUTPUT.journal) are passed over")
    pr.add_argument("--posteriors", metavar="OUT.npz",
                    help="also write every spectrum's fingerprint posterior, band thresholds and queries to this .npz")
    pr.add_argument("--known", metavar="FILE",
                    help="your list of known structures (SMILES/InChIKeys, one per row, or an SDF): candidates in it "
                    "are marked 'user list' in the novelty column")
    pr.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    pr.set_defaults(func=cmd_predict)

    from .score_cli import add_score_parser

    add_score_parser(sub)

    info = sub.add_parser("info", help="describe a model bundle")
    info.add_argument("--model", help="model bundle folder (default: the bundled model)")
    info.set_defaults(func=cmd_info)
    return p


def _model_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    from .paths import default_model_dir

    path = default_model_dir()
    if not (path / "config.json").is_file():
        raise MsgptError(
            f"No model bundle is installed at {path}. Pass --model FOLDER with a bundle made by "
            "msgpt-train (see README, 'Training')."
        )
    return path


def _spectra(paths: list[str], formula: str | None, adduct: str | None, file_errors: list[str]) -> Iterator:
    """``(input position, Spectrum or SkippedRecord)`` for every record of every input, streaming.

    A file that cannot be read (or stops being readable mid-way) prints one line and the next
    input goes on.
    """
    from .io import iter_spectra
    from .pipeline import apply_overrides
    from .spectrum import SkippedRecord

    for position, path in enumerate(paths):
        try:
            for item in iter_spectra(path):
                if not isinstance(item, SkippedRecord) and (formula or adduct):
                    try:
                        item = apply_overrides(item, formula=formula, adduct=adduct)
                    except MsgptError as e:
                        item = SkippedRecord(item.source, item.index, item.id, str(e))
                yield position, item
        except InputFileError as e:
            file_errors.append(str(e))
            _err(f"error: {e}")


def _elucidate_one(bundle, spectrum, params, bar):
    """The result of one spectrum, or a SkippedRecord saying why it has none.

    Problems of this spectrum alone (its formula is too large to annotate, ...) skip it; the
    batch goes on. Problems of the model or the parameters stop the batch.
    """
    from .errors import AdductError, FormulaError, SpectrumError
    from .pipeline import SamplesDrawn, SpectrumFinished, SpectrumSkipped, elucidate
    from .spectrum import SkippedRecord

    outcome = None
    try:
        for ev in elucidate(bundle, [spectrum], params):
            if isinstance(ev, SamplesDrawn):
                bar.set_postfix_str(f"samples {ev.done}/{ev.total}", refresh=False)
            elif isinstance(ev, SpectrumFinished):
                outcome = ev.result
            elif isinstance(ev, SpectrumSkipped):
                outcome = ev.record
    except (SpectrumError, FormulaError, AdductError) as e:
        outcome = SkippedRecord(spectrum.source, spectrum.index, spectrum.id, str(e))
    return outcome


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
        _err(f"Processed {self.done} spectra in {seconds:.1f} s{before}; "
             f"{self.rows} candidates written to {output if written else '(nothing)'}.")
        if self.n_notes:
            _err(f"Notes on {self.n_notes} processed spectra:")
            for line in self.notes:
                _err(line)
            if self.n_notes > len(self.notes):
                _err(f"  … and {self.n_notes - len(self.notes)} more")
        if self.n_skipped:
            _err(f"Skipped {self.n_skipped} spectra:")
            for line in self.skipped:
                _err(line)
            if self.n_skipped > len(self.skipped):
                _err("  … by reason:")
                for reason, count in self.reasons.most_common(self.SHOWN):
                    _err(f"  {count:6d} × {reason}")


def _run_settings(args: argparse.Namespace, bundle, params) -> dict:
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
        "inputs": [identity(p) for p in args.inputs],
        **({"known": identity(args.known)} if getattr(args, "known", None) else {}),
    }


def _open_journal(output: Path, resume: bool, settings: dict):
    """Lock the journal, then decide how to start (see engine.journal.plan_run)."""
    from .journal import JournalWriter, journal_path, plan_run

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


def cmd_predict(args: argparse.Namespace) -> int:
    import torch

    from .bundle import load_bundle, resolve_device
    from .export import export_format
    from .pipeline import QueryParams

    export_format(args.output)  # fail on a bad output name before loading anything
    if args.posteriors and Path(args.posteriors).suffix.lower() != ".npz":
        raise MsgptError(f"--posteriors {args.posteriors!r}: give a file name ending in .npz.")
    n = args.samples_per_group
    if args.pool_size is not None:
        n = QueryParams.samples_for_pool_size(args.pool_size, args.groups)
    params = QueryParams(
        kappa_min=args.band[0], kappa_max=args.band[1], groups=args.groups,
        samples_per_group=n or 5, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed, use_adapter=not args.no_adapter, decoding=args.decoding, ranking=args.ranking,
    )
    if args.top is not None and args.top < 1:
        raise MsgptError(f"--top must be at least 1, got {args.top}.")
    if args.threads is not None:
        if args.threads < 1:
            raise MsgptError(f"--threads must be at least 1, got {args.threads}.")
        torch.set_num_threads(args.threads)
    _, device_msg = resolve_device(args.device)
    _err(device_msg)
    bundle = load_bundle(_model_path(args.model), device=args.device, use_adapter=params.use_adapter,
                         precision=args.precision)
    if not bundle.has_adapter and params.use_adapter:  # record what really runs: no adapter to switch on
        params = dataclasses.replace(params, use_adapter=False)
    _err(f"Model: {bundle.describe()}")
    _err(f"Parameters: {params.describe()}")

    from .score_cli import novelty_marker

    marker = novelty_marker(bundle, args.known)  # before the journal: a bad list stops here
    output = Path(args.output)
    settings = _run_settings(args, bundle, params)
    journal, plan = _open_journal(output, args.resume, settings)
    try:
        return _run_batch(args, bundle, params, settings, journal, plan, marker)
    finally:
        journal.close()  # releases the lock; the journal stays unless the run removed it


def _run_batch(args, bundle, params, settings: dict, journal, plan, marker) -> int:
    """Stream the inputs through the model into OUT.partial, one journal line per spectrum; rename at the end."""
    import time

    from tqdm import tqdm

    from .errors import OutputError
    from .export import CandidateWriter, fsync_directory, provenance
    from .journal import new_header, partial_path
    from .score_cli import PosteriorSink
    from .spectrum import SkippedRecord

    output = Path(args.output)
    sink = PosteriorSink(args.posteriors, bundle, params) if args.posteriors else None
    partial = partial_path(output)
    if plan.note:
        _err(plan.note)
    summary = _Summary(args.inputs)
    for entry in plan.state.entries if plan.state else ():
        summary.add(entry, earlier=True)
    if plan.action == "finish":  # every spectrum was done; the interrupted run only missed the rename
        if partial.is_file():
            os.replace(partial, output)
            fsync_directory(output.parent)
        journal.remove()
        if sink is not None:
            sink.add_inputs(_spectra(args.inputs, args.formula, args.adduct, []))
            sink.close()
        summary.report(args.output, 0.0, written=True)
        return 0

    resuming = plan.action == "resume"
    info = plan.state.header["info"] if resuming else provenance(
        bundle, params, {"inputs": " ".join(args.inputs), "novelty": marker.describe()})
    writer = CandidateWriter(output, info, args.top, partial=partial, resume_at=plan.state.offset if resuming else None,
                             novelty=marker)
    done = plan.state.keys() if resuming else set()
    file_errors: list[str] = []
    t0 = time.perf_counter()
    bar = tqdm(desc="spectra", unit="spectrum", disable=args.quiet, file=sys.stderr, dynamic_ncols=True,
               initial=len(done))
    try:
        if resuming:
            journal.resume(plan.state)
            offset = plan.state.offset
        else:
            offset = writer.sync()
            journal.start(new_header(settings, info, offset))
        for position, item in _spectra(args.inputs, args.formula, args.adduct, file_errors):
            if (position, item.index) in done:
                if sink is not None:
                    sink.add_spectrum(item)  # the encoder alone: posteriors of the interrupted run's spectra
                continue
            outcome = item if isinstance(item, SkippedRecord) else _elucidate_one(bundle, item, params, bar)
            entry = {"input": position, "index": item.index}
            if isinstance(outcome, SkippedRecord):
                entry.update(id=outcome.spectrum_id, status="skipped", reason=outcome.reason, offset=offset)
            else:
                rows = writer.write(outcome)
                offset = writer.sync()  # the rows are on disk before the journal says so
                if sink is not None:
                    sink.add_result(outcome)
                entry.update(id=item.id, status="done", rows=rows, offset=offset)
                if outcome.spectrum.metadata.get("warnings"):
                    entry["notes"] = outcome.spectrum.metadata["warnings"]
            journal.append(entry)
            summary.add(entry)
            bar.update(1)
    except KeyboardInterrupt:
        writer.abort()
        if sink is not None:
            sink.abort()
        bar.close()
        _err(f"Interrupted: {summary.done_before + summary.done} finished spectra are kept in {partial}. "
             f"Run the same command with --resume to go on.")
        return 130
    except OutputError as e:
        writer.abort()
        if sink is not None:
            sink.abort()
        bar.close()
        raise OutputError(f"{e} The {summary.done_before + summary.done} finished spectra are kept in "
                          f"{partial}; run the same command with --resume to go on.") from e
    except BaseException:
        writer.abort()
        if sink is not None:
            sink.abort()
        raise
    bar.close()

    written = summary.done_before + summary.done > 0
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
    summary.report(args.output, time.perf_counter() - t0, written)
    if file_errors:
        _err(f"{len(file_errors)} input file(s) could not be read (see above).")
    return 0 if written else 1


def cmd_info(args: argparse.Namespace) -> int:
    from .bundle import load_bundle
    from .decoder import parameter_counts

    bundle = load_bundle(_model_path(args.model), device="cpu")
    cal = bundle.calibration
    print(f"Model bundle: {bundle.path}")
    print(f"  name: {bundle.name}\n  checksum: {bundle.checksum}")
    print(f"  supported adducts: {', '.join(bundle.supported_adducts)}")
    print(f"  adapter: {'yes' if bundle.has_adapter else 'no'}")
    for k, v in parameter_counts(bundle.decoder).items():
        print(f"  decoder {k}: {v:,}")
    print(f"  encoder parameters: {sum(p.numel() for p in bundle.encoder.parameters()):,}")
    print(f"  calibration: D_enc={cal.d_enc:.2f} bits over {cal.n_spectra} spectra; "
          f"t(κ=0.95)={cal.threshold_for_kappa(0.95):.4f}, t(κ=1.50)={cal.threshold_for_kappa(1.50):.4f}")
    legend, known = bundle.bit_legend, bundle.known_structures
    print(f"  bit legend: {f'{len(legend)} bits described, {legend.source}' if legend else 'none'}")
    print(f"  known structures (novelty): {f'{len(known):,}: {known.source}' if known else 'none'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MsgptError as e:
        _err(f"error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
