"""``msgpt`` command line: elucidate structures from MGF/mzML files, inspect a model bundle.

``msgpt predict`` by role, as ``msgpt score`` (:mod:`engine.cli.score`): its arguments are in
:mod:`engine.cli.predict_args`, what it writes (output, journal, summary) in :mod:`engine.cli.predict_write`, the
libraries it opens in :mod:`engine.cli.predict_libraries`, its compound groups' members in
:mod:`engine.cli.predict_groups`, and its runs here: the features of the inputs, their spectra and formula runs, in
one process or on a cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from engine import __version__
from engine.cli.common import PosteriorSink, err, model_path, novelty_marker, open_model
from engine.cli.predict_args import _feature_config, _formula_config, add_predict_arguments
from engine.cli.predict_groups import _elucidate_group_member, _GroupCache, _grouped
from engine.cli.predict_handoff import check_handoff_args, write_feature_table_of_run
from engine.cli.predict_libraries import _open_libraries
from engine.cli.predict_write import _abort, _end_output, _open_journal, _run_settings, _Summary, _write_feature
from engine.errors import InputFileError, MsgptError

log = logging.getLogger("msgpt")


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
        description="Rank candidate structures for every precursor of the input files (MGF, mzML, "
        "optionally .gz). The MS2 scans of one precursor in an LC-MS/MS run (mzML) are merged into one "
        "consensus spectrum (a precursor feature); an MGF record is its own feature. A spectrum without a "
        "molecular formula gets formula and ion type candidates (precursor mass, fragments, MS1 isotopes "
        "and adducts, corpus prior) and is predicted for the best --formulas K of them; --formula/--adduct "
        "force one on every spectrum.",
    )
    add_predict_arguments(pr)
    pr.set_defaults(func=cmd_predict)

    from engine.cli.score import add_score_parser

    add_score_parser(sub)

    from engine.cli.calibrate_library import add_calibrate_library_parser

    add_calibrate_library_parser(sub)

    info = sub.add_parser("info", help="describe a model bundle")
    info.add_argument("--model", help="model bundle folder (default: the bundled model)")
    info.set_defaults(func=cmd_info)
    return p


def _features(paths: list[str], args: argparse.Namespace, file_errors: list[str], counts: list) -> Iterator:
    """``(input position, Feature or SkippedRecord)`` for every precursor of every input.

    MGF streams record by record; an mzML run is read whole and its MS2 scans grouped into features
    (engine.spectra.run_features). ``counts`` gets one :class:`~engine.spectra.run_features.RunCounts` per input. A file
    that cannot be read (or stops being readable mid-way) prints one line and the next input goes on.
    """
    from engine.spectra.handoff import attach_quant, iter_input_features
    from engine.spectra.run_features import RunCounts

    config = _feature_config(args)
    for position, path in enumerate(paths):
        run = RunCounts(source=path)
        counts.append(run)
        try:
            features = attach_quant(iter_input_features(path, config, counts=run), getattr(args, "quant", None), config)
            for item in _with_partners(_recalibrated(features, path, args)):
                yield position, item
        except InputFileError as e:
            counts.remove(run)
            file_errors.append(str(e))
            err(f"error: {e}")


def _with_partners(items) -> Iterator:
    """The features of one input, each member of a compound group held back until its whole group has come and then
    given with its (recalibrated) partners (engine.spectra.adduct_groups.with_partners): a group decides together."""
    from engine.spectra.adduct_groups import with_partners

    waiting: dict[str, list] = {}
    for item in items:
        group = getattr(item, "group", None)
        if group is None:
            yield item
            continue
        waiting.setdefault(group.id, []).append(item)
        if len(waiting[group.id]) == len(group.members):
            yield from with_partners(waiting.pop(group.id))
    for members in waiting.values():  # a run cut off mid-way: the members read, each on its own
        yield from (dataclasses.replace(f, partners=()) for f in members)


def _recalibrated(items, path: str, args: argparse.Namespace) -> Iterator:
    """The features of one input with its m/z recalibrated (--recalibrate), one line saying how."""
    if args.formulas == 0:
        return items
    from engine.formulas.recalibration import parse_setting, recalibrate_features

    return recalibrate_features(items, parse_setting(args.recalibrate), config=_formula_config(args),
                                report=lambda r: err(f"{Path(path).name}: {r.describe()}"))


def _spectra_of_feature(feature, args: argparse.Namespace, bundle, formula_config, libraries=(), table=None,
                        metadata=None) -> list:
    """The spectra to elucidate for one feature, or a SkippedRecord saying why there are none.

    The feature's spectrum with ``--formula``/``--adduct`` applied and the no-fragments note; with a
    formula and an adduct, that one; else one copy per formula candidate (``--formulas`` best of the
    ion types the model supports), each noting its formula rank and score, and what the libraries add
    (:func:`engine.elucidation.libraries.library_formula_spectra`): the formula of a spectral identification when
    they lack it, and the formulas of structure-library structures within the tolerance of the precursor that they
    lack (the mass track, ranked without sampling). A precursor written too coarsely for formula candidates (a
    record of 2 decimals) gets only the libraries' runs (the mass track of the suspect lists within its
    precision, noted); with none, it is skipped. ``table`` (a compound group's joint ranking, engine.formulas.groups)
    replaces the feature's own formula ranking; ``metadata`` is added to every spectrum run.
    """
    from engine.elucidation.libraries import library_formula_spectra
    from engine.elucidation.pipeline import apply_overrides
    from engine.errors import AdductError, FormulaError, SpectrumError
    from engine.elucidation.formula_runs import formula_run_spectra
    from engine.formulas.candidates import PrecursorPrecisionError, rank_formulas
    from engine.formulas.recalibration import run_formula_config
    from engine.spectra.spectrum import SkippedRecord, note_no_fragments

    spectrum = feature.spectrum
    try:
        if args.formula or args.adduct:
            spectrum = apply_overrides(spectrum, formula=args.formula, adduct=args.adduct)
        spectrum = note_no_fragments(spectrum)
        if metadata:
            spectrum = dataclasses.replace(spectrum, metadata={**spectrum.metadata, **metadata})
        if table is not None:
            spectrum = spectrum.with_adduct(table.candidates[0].ion_type, check=False)
        if (spectrum.formula and spectrum.adduct and table is None) or args.formulas == 0:
            return [spectrum]
        config = run_formula_config(spectrum, formula_config)
        coarse = None  # a precursor too coarse for formulas: only suspect lists by mass, and identifications
        try:
            if table is None:
                table = rank_formulas(spectrum, ms1=feature.ms1, config=config,
                                      supported_adducts=bundle.runnable_adducts)
        except PrecursorPrecisionError as e:
            table, coarse = None, e
    except (SpectrumError, FormulaError, AdductError) as e:
        return SkippedRecord(spectrum.source, spectrum.index, spectrum.id, str(e))
    chosen = [] if table is None else [s for _, s in formula_run_spectra(
        spectrum, table, args.formulas, bundle.runnable_adducts, libraries, args.min_formula_p,
        proportional=not args.full_formula_runs)]
    chosen += library_formula_spectra(libraries, spectrum, chosen, bundle.runnable_adducts, config.ppm,
                                      config.ion_types or (), precision_da=coarse.precision if coarse else 0.0)
    if not chosen:
        reason = str(coarse) if coarse else table.why_none_runnable(bundle.runnable_adducts, args.formula_ppm)
        return SkippedRecord(spectrum.source, spectrum.index, spectrum.id, reason)
    return chosen


def _elucidate_one(bundle, spectrum, params, bar, libraries=()):
    """The result of one spectrum, or a SkippedRecord saying why it has none.

    Problems of this spectrum alone (its formula is too large to annotate, ...) skip it; the
    batch goes on. Problems of the model or the parameters stop the batch.
    """
    from engine.elucidation.deep import run_session
    from engine.elucidation.formula_runs import draws_samples, run_params
    from engine.elucidation.pipeline import SamplesDrawn, SpectrumFinished, SpectrumSession, SpectrumSkipped, elucidate
    from engine.errors import AdductError, FormulaError, SpectrumError
    from engine.spectra.spectrum import SkippedRecord

    outcome = None
    try:
        if not draws_samples(spectrum):  # the library structures of this formula alone, no samples
            return SpectrumSession(bundle, spectrum, libraries=libraries).rank_known(params)
        for ev in elucidate(bundle, [spectrum], run_params(spectrum, params), libraries=libraries,
                            run_session=run_session):
            if isinstance(ev, SamplesDrawn):
                bar.set_postfix_str(f"samples {ev.done}/{ev.total}", refresh=False)
            elif isinstance(ev, SpectrumFinished):
                outcome = ev.result
            elif isinstance(ev, SpectrumSkipped):
                outcome = ev.record
    except (SpectrumError, FormulaError, AdductError) as e:
        outcome = SkippedRecord(spectrum.source, spectrum.index, spectrum.id, str(e))
    return outcome


def cmd_predict(args: argparse.Namespace) -> int:
    from engine.elucidation.pipeline import QueryParams
    from engine.files.export import export_format

    export_format(args.output)  # fail on a bad output name before loading anything
    check_handoff_args(args)
    if args.posteriors and Path(args.posteriors).suffix.lower() != ".npz":
        raise MsgptError(f"--posteriors {args.posteriors!r}: give a file name ending in .npz.")
    n = args.samples_per_group
    if args.pool_size is not None:
        n = QueryParams.samples_for_pool_size(args.pool_size, args.groups)
    params = QueryParams(
        kappa_min=args.band[0], kappa_max=args.band[1], groups=args.groups,
        samples_per_group=n or 5, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed, use_adapter=not args.no_adapter, decoding=args.decoding, ranking=args.ranking,
        effort=args.effort, fragment_score=not args.no_fragment_score, analog_score=not args.no_analog_score,
        edit_rounds=args.edit_rounds, suspects_present=args.suspects_present,
        **({} if args.library_prior is None else {"library_prior": args.library_prior}),
        **({} if args.undrawn_prior is None else {"undrawn_prior": args.undrawn_prior}),
    )
    if args.top is not None and args.top < 1:
        raise MsgptError(f"--top must be at least 1, got {args.top}.")
    if args.formulas < 0:
        raise MsgptError(f"--formulas must be 0 or more, got {args.formulas}.")
    if not 0.0 <= args.min_formula_p <= 1.0:
        raise MsgptError(f"--min-formula-p must be a probability from 0 to 1, got {args.min_formula_p:g} "
                         "(0 samples every one of the --formulas K).")
    _feature_config(args), _formula_config(args)  # bad tolerances or ion types stop here, before the model loads
    from engine.formulas.recalibration import parse_setting

    parse_setting(args.recalibrate)
    _check_cluster(args)
    bundle = open_model(args, params.use_adapter)
    if not bundle.has_adapter and params.use_adapter:  # record what really runs: no adapter to switch on
        params = dataclasses.replace(params, use_adapter=False)
    err(f"Model: {bundle.describe()}")
    err(f"Parameters: {params.describe()}")
    libraries = _open_libraries(args)
    marker = novelty_marker(bundle, args.known)  # before the journal: a bad list stops here
    output = Path(args.output)
    settings = _run_settings(args, bundle, params, libraries)
    journal, plan = _open_journal(output, args.resume, settings)
    try:
        return _run_batch(args, bundle, params, settings, journal, plan, marker, libraries)
    finally:
        journal.close()  # releases the lock; the journal stays unless the run removed it


class _NoBar:
    """The progress bar of a worker: a feature's samples are not shown, the client's bar counts features."""

    def set_postfix_str(self, *args, **kwargs) -> None:
        pass


def _finish_renamed(args, bundle, formula_config, journal, sink: PosteriorSink | None, summary: _Summary,
                    partial: Path, libraries=()) -> int:
    """End a run whose interrupted predecessor finished every spectrum and only missed the rename: OUT.partial
    becomes OUT, the journal goes, the posteriors asked for are computed (the encoder alone)."""
    from engine.files.export import fsync_directory
    from engine.spectra.spectrum import SkippedRecord

    output = Path(args.output)
    if partial.is_file():
        os.replace(partial, output)
        fsync_directory(output.parent)
    journal.remove()
    if sink is not None:
        for _, item in _features(args.inputs, args, [], []):
            todo = (_spectra_of_feature(item, args, bundle, formula_config, libraries)
                    if hasattr(item, "spectrum") else ())
            for spectrum in () if isinstance(todo, SkippedRecord) else todo:
                sink.add_spectrum(spectrum)
        sink.close()
    summary.report(args.output, 0.0, written=True)
    return 0


def _check_cluster(args: argparse.Namespace) -> None:
    """A bad ``--cluster`` address, or no Dask installed, stops the run before the model loads."""
    if args.cluster is None:
        if args.ship_model:
            raise MsgptError("--ship-model sends the model to the workers of --cluster; give --cluster too, or leave "
                             "--ship-model out.")
        return
    from engine.cluster.client import parse_address, require_distributed

    parse_address(args.cluster)
    require_distributed()


def _run_batch(args, bundle, params, settings: dict, journal, plan, marker, libraries=()) -> int:
    """Stream the inputs through the model into OUT.partial, one journal line per spectrum; rename at the end."""
    import time

    from tqdm import tqdm

    from engine.errors import OutputError
    from engine.files.export import CandidateWriter, provenance
    from engine.files.feature_table import FeatureTableSink
    from engine.files.journal import new_header, partial_path
    from engine.threads import JobShare

    output = Path(args.output)
    sink = PosteriorSink(args.posteriors, bundle, params) if args.posteriors else None
    partial = partial_path(output)
    formula_config = _formula_config(args)
    run_counts: list = []
    if plan.note:
        err(plan.note)
    summary = _Summary(args.inputs)
    for entry in plan.state.entries if plan.state else ():
        summary.add(entry, earlier=True)
    if plan.action == "finish":  # every spectrum was done; the interrupted run only missed the rename
        rc = _finish_renamed(args, bundle, formula_config, journal, sink, summary, partial, libraries)
        write_feature_table_of_run(args, None, earlier=True, journal=plan.state.entries)
        return rc

    cluster = _open_cluster(args, bundle, params, formula_config, libraries)  # before OUT.partial: a bad address leaves none
    resuming = plan.action == "resume"
    info = plan.state.header["info"] if resuming else provenance(
        bundle, params, {"inputs": " ".join(args.inputs), "novelty": marker.describe()})
    writer = CandidateWriter(output, info, args.top, partial=partial, resume_at=plan.state.offset if resuming else None,
                             novelty=marker)
    done = plan.state.keys() if resuming else set()
    table = FeatureTableSink(args.feature_table, args.inputs, args.feature_table_style) if getattr(
        args, "feature_table", None) else None  # --feature-table: one row per feature (#60)
    file_errors: list[str] = []
    t0 = time.perf_counter()
    bar = tqdm(desc="spectra", unit="spectrum", disable=args.quiet, file=sys.stderr, dynamic_ncols=True,
               initial=len(done))
    todo = _todo(_features(args.inputs, args, file_errors, run_counts), done, sink, args, bundle, formula_config,
                 libraries)
    group_cache = _GroupCache()
    computed = (_cluster_outcomes(cluster, todo) if cluster is not None
                else ((position, item, _elucidate_feature(item, args, bundle, params, formula_config, bar, libraries,
                                                          group_cache))
                      for position, item in todo))  # lazy: nothing is computed before the loop
    share = JobShare(threads=args.threads) if cluster is None else None  # the cores shared with other jobs
    try:
        if share is not None:
            share.__enter__()
        if resuming:
            journal.resume(plan.state)
            offset = plan.state.offset
        else:
            offset = writer.sync()
            journal.start(new_header(settings, info, offset))
        for position, item, outcomes in computed:
            if share is not None:
                share.rebalance()  # another job started or ended: this one's share of the cores (engine/threads.py)
            entry, offset = _write_feature(position, item, outcomes, writer, sink, offset)
            if table is not None:
                table.add(position, item, outcomes)
            journal.append(entry)
            summary.add(entry)
            bar.update(1)
    except KeyboardInterrupt:
        _abort(writer, sink)
        bar.close()
        err(f"Interrupted: {summary.done_before + summary.done} finished spectra are kept in {partial}. "
             f"Run the same command with --resume to go on.")
        return 130
    except OutputError as e:
        _abort(writer, sink)
        bar.close()
        raise OutputError(f"{e} The {summary.done_before + summary.done} finished spectra are kept in "
                          f"{partial}; run the same command with --resume to go on.") from e
    except BaseException:
        _abort(writer, sink)
        raise
    finally:
        computed.close()
        if share is not None:
            share.__exit__(None, None, None)
        if cluster is not None:
            cluster.close()  # cancels the futures still pending, closes the client (and a local:N cluster)
    bar.close()

    written = summary.done_before + summary.done > 0
    _end_output(written, journal, writer, partial, sink)
    summary.report(args.output, time.perf_counter() - t0, written)
    if table is not None and written:
        write_feature_table_of_run(args, table, earlier=resuming, journal=plan.state.entries if resuming else ())
    for counts in run_counts:  # what each LC-MS/MS run held, MS1 survey scans included
        if counts.n_survey or counts.n_features != counts.n_ms2:
            err(f"  {counts.describe()}")
    if file_errors:
        err(f"{len(file_errors)} input file(s) could not be read (see above).")
    return 0 if written else 1


def _todo(features: Iterator, done: set, sink: PosteriorSink | None, args, bundle, formula_config,
          libraries=()) -> Iterator:
    """The ``(input position, feature)`` pairs still to compute: those the interrupted run finished are passed over
    (their posteriors, when asked for, come from the encoder alone, here)."""
    from engine.spectra.spectrum import SkippedRecord

    for position, item in features:
        if (position, item.index) not in done:
            yield position, item
        elif sink is not None and not isinstance(item, SkippedRecord):
            todo = _spectra_of_feature(item, args, bundle, formula_config, libraries)
            for spectrum in () if isinstance(todo, SkippedRecord) else todo:
                sink.add_spectrum(spectrum)  # the encoder alone: posteriors of the interrupted run's spectra


def _open_cluster(args, bundle, params, formula_config, libraries):
    """The Dask cluster of ``--cluster`` (engine.cluster.client.ClusterRun) with this run's model loaded on every
    worker, or None without ``--cluster``."""
    if args.cluster is None:
        return None
    from tqdm import tqdm

    from engine.cluster.client import ClusterRun, parse_address
    from engine.cluster.worker import ModelSpec

    spec = ModelSpec(path=str(bundle.path.resolve()), checksum=bundle.checksum, device=args.device,
                     precision=args.precision, use_adapter=params.use_adapter, device_type=bundle.device.type,
                     dtype=str(bundle.dtype), threads=args.threads, default=args.model is None)
    shared = {"args": args, "params": params, "formula_config": formula_config, "libraries": tuple(libraries)}
    return ClusterRun(parse_address(args.cluster), spec, shared, ship=args.ship_model,
                      notify=lambda line: tqdm.write(line, file=sys.stderr))


def _cluster_outcomes(cluster, todo: Iterator) -> Iterator:
    """``(position, feature, outcomes)`` of every feature of ``todo``, computed on the cluster and handed back in input
    order; a feature that kept killing its workers is skipped, saying so."""
    from engine.cluster.client import Crashed
    from engine.spectra.spectrum import SkippedRecord

    for (position, item), outcome in cluster.map_ordered(_feature_task, todo):
        if isinstance(outcome, Crashed):
            spectrum = getattr(item, "spectrum", item)
            outcome = [SkippedRecord(spectrum.source, item.index, getattr(item, "id", spectrum.id), outcome.message)]
        yield position, item, outcome


def _feature_task(bundle, item: tuple, args, params, formula_config, libraries) -> list:
    """One feature on a cluster worker (engine.cluster.worker.run_task): what :func:`_elucidate_feature` gives here."""
    _, feature = item
    return _elucidate_feature(feature, args, bundle, params, formula_config, _NoBar(), libraries)


def _elucidate_feature(item, args, bundle, params, formula_config, bar, libraries=(), cache=None) -> list:
    """The outcomes of one feature (or skipped record): its skip, or a result (or skip) for each of its spectra,
    its own or one per formula candidate; a compound group's member shows its group's (``cache`` keeps a group's
    lead outcomes for its other members)."""
    from engine.spectra.spectrum import SkippedRecord

    def outcomes_of(todo) -> list:
        # one feature: its spectrum, or one per formula candidate; their candidates are ranked on in one list
        if isinstance(todo, SkippedRecord):
            return [todo]
        return [_elucidate_one(bundle, s, params, bar, libraries) for s in todo]

    if _grouped(item, args):  # the lead with its group's joint ranking (engine.cli.predict_groups)
        outcomes = _elucidate_group_member(
            item, bundle, formula_config, cache=cache,
            run_lead=lambda lead, table, metadata: outcomes_of(_spectra_of_feature(
                lead, args, bundle, formula_config, libraries, table=table, metadata=metadata)))
        if outcomes is not None:
            return outcomes
    return outcomes_of(item if isinstance(item, SkippedRecord) else _spectra_of_feature(item, args, bundle,
                                                                                        formula_config, libraries))


def cmd_info(args: argparse.Namespace) -> int:
    from engine.model.bundle import load_bundle
    from engine.model.decoder import parameter_counts

    bundle = load_bundle(model_path(args.model), device="cpu")
    cal = bundle.calibration
    print(f"Model bundle: {bundle.path}")
    print(f"  name: {bundle.name}\n  checksum: {bundle.checksum}")
    print(f"  supported adducts: {', '.join(bundle.supported_adducts)} (natively); "
          f"{', '.join(bundle.runnable_adducts[len(bundle.supported_adducts):]) or 'none'} by mapping")
    print(f"  adapter: {'yes' if bundle.has_adapter else 'no'}")
    for k, v in parameter_counts(bundle.decoder).items():
        print(f"  decoder {k}: {v:,}")
    print(f"  encoder parameters: {sum(p.numel() for p in bundle.encoder.parameters()):,}")
    for label, c in (("", cal), (" (negative mode)", cal.negative)):
        if c is not None:
            print(f"  calibration{label}: D_enc={c.d_enc:.2f} bits over {c.n_spectra} spectra; "
                  f"t(κ=0.95)={c.threshold_for_kappa(0.95):.4f}, t(κ=1.50)={c.threshold_for_kappa(1.50):.4f}")
    legend, known = bundle.bit_legend, bundle.known_structures
    print(f"  bit legend: {f'{len(legend)} bits described, {legend.source}' if legend else 'none'}")
    print(f"  known structures (novelty): {(known.source or f'{len(known):,} structures') if known else 'none'}")
    conf = bundle.confidence
    if conf is None:
        print("  confidence (P rank 1 is right): none")
    else:
        fit, val = conf.meta.get("fit", {}), conf.meta.get("val", {})
        checked = f"; on FOLD=val ECE {val['ece']:.3f} over {val['n']} spectra" if val else ""
        print(f"  confidence (P rank 1 is right): fitted on {fit.get('spectra', '?')} out-of-fold spectra{checked}")
    sus = bundle.suspect_confidence
    if sus is None:
        print("  confidence of a suspect-list rank 1: none")
    else:
        from engine.model.suspect_confidence import level_2b_probability

        bar = level_2b_probability(sus)
        print(f"  confidence of a suspect-list rank 1: fitted on {sus.meta.get('fit', {}).get('rows', '?')} suspect "
              f"rank 1s; level 2b {'at P >= ' + format(bar, 'g') if bar <= 1 else 'not given (no bar reached 90%)'}")
    fw = bundle.forward
    if fw is None or not fw.ranking.fragments_on:
        print("  fragment score (forward model): none")
    else:
        r = fw.ranking
        print(f"  fragment score (forward model): first {r.shortlist} of "
              f"{'each suspect list' if r.scope == 'suspects' else 'every ranking'} by fingerprint + {r.weight:g} × "
              "fragment score"
              + (f"; first {r.others_shortlist} of the other candidates + {r.others_weight:g} × fragment score"
                 if r.scope == "suspects" and r.others_weight > 0 else "")
              + (f" (peaks weighted 1 + {r.intensity_weight:g} × sqrt(I / I_max))" if r.intensity_weight else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MsgptError as e:
        err(f"error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
