"""Out-of-fold encoder posteriors: every training spectrum scored by an encoder that never saw its structure.

Run ``python -m training.calibration.oof_posteriors --mgf spectra.mgf.gz --out runs/oof --folds 5 [--resume]``, or
call :func:`oof_posteriors`, a generator of progress events (stop iterating, or set ``stop``, to
cancel; the fold being trained keeps a checkpoint and ``--resume`` continues it).

The training selection of :mod:`training.encoder.train_encoder` (``FOLD=train``, licences ``CC0, CC BY, CC BY-SA,
dl-de/by-2-0``, ``[M+H]+`` / ``[M+Na]+`` or the ion types of ``--adducts``, unit-resolution instruments
excluded) is split into ``folds`` folds by structure (:func:`training.data.spectra.structure_folds`: first
InChIKey blocks ordered by a seeded hash and dealt out in turn). For each fold ``k`` an encoder is trained
with the shipped encoder's recipe (or the one ``--grow-levels`` / ``--fragment-bits`` + ``--substructure-weight`` /
``--adducts`` / ``--stop-after-epochs``
give) on the other folds (``cv_folds=K, cv_fold=k``) and predicts the posteriors of fold ``k``'s spectra.
No ``FOLD=val`` spectrum is used for training or for choosing anything: instead of early stopping, every
fold trains a fixed ``stop_after_epochs`` epochs of an ``epochs``-long cosine, the epoch the shipped
encoder's selection kept (MODEL_CARD.md: best step 2952 of 3444 = epoch 6 of 7). Each fold encoder is
calibrated on its own training spectra (``calibration.json``, as :mod:`training.calibration.calibrate` does), so a
fold folder is also an encoder folder ``msgpt-eval`` can read.

For contrast the reference encoder (``default``: the shipped bundle, ``resources/default_model``) is scored
on the same training spectra (in sample: it was trained on all of them) and on ``FOLD=val`` (reported
only).

Output directory::

    oof_config.json         this run's OOFConfig
    reference.json          the reference encoder's numbers (train in sample, val)
    fold_<k>/               a train_encoder run (train_config.json, metrics.json, encoder.safetensors, ...)
        calibration.json    D_enc and A(t) on the fold's training spectra
        held_out.npz        ids and float32 posteriors of the fold's held-out spectra (the fold is done)
    oof_posteriors.npz      every training spectrum: ids (TITLE), inchikey14, adduct, license,
                            instrument, fold, posteriors (float16, n x fp_bits), the true bits as CSR
                            (bit_offsets (n+1,), bits), threshold_calibrated (the fold encoder's t_κ=1;
                            threshold_calibrated_negative: its negative-mode curve's, when it has one)
    summary.json            per fold and overall: fidelity at κ=1, fidelity bins, AP / AUROC, timings;
                            by_polarity: the overall numbers per ion mode when both are present

Fidelity at κ=1 (the paper's posterior fidelity T_c): per spectrum the Tanimoto of ``π > t`` to the true
bits. ``kappa1`` takes ``t`` = :func:`training.core.metrics.density_matched_threshold` on the scored spectra
themselves (as many predicted bits as true ones, on average); ``kappa1_calibrated`` takes the encoder's
calibrated ``t_κ=1 = A⁻¹(D_enc)`` from its training spectra, the threshold the app and ``msgpt-eval``'s
κ sweep use (on an encoder's own training spectra the two coincide); a negative-mode spectrum takes the
encoder's negative-mode curve when it has one (``--adducts ... [M-H]-``). The summary is computed from the
float32 posteriors; the ``.npz`` stores them as float16.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine import paths
from engine.errors import ConfigError, InputFileError
from engine.model.encoder import EncoderConfig, SpectrumEncoder
from engine.model.querying import Calibration

from training.calibration.calibrate import CalibrationDone, PosteriorsProgress, calibrate_encoder, load_encoder
from training.core.checkpoint import complete_folder, write_json_atomic
from training.core.loop import stop_on_signals, torch_threads
from training.core.metrics import FIDELITY_BINS, bit_metrics, density_matched_threshold, tanimoto_at
from training.data.spectra import (
    CacheHit,
    LabelledSpectra,
    ReadProgress,
    describe_selection,
    iter_load_labelled_spectra,
    structure_folds,
)
from training.encoder.train_encoder import (
    STOP_NOTICE,
    CheckpointSaved,
    DataReady,
    EncoderTrainConfig,
    Evaluated,
    Resumed,
    StepDone,
    TrainingFinished,
    TrainingStopped,
    epoch_bar,
    load_weights,
    predict_posteriors,
    train_encoder,
    training_split,
)
from training.calibration.oof_config import (
    FoldDone,
    FoldEvent,
    FoldStarted,
    FoldsAssigned,
    FoldsPending,
    OOFConfig,
    OOFFinished,
    OOFStopped,
    Predicting,
    ReferenceDone,
    _RESUMABLE_CHANGES,
)

log = logging.getLogger(__name__)



# ----------------------------------------------------------------------------------------------
# Metrics


def posterior_summary(posteriors: np.ndarray, data: LabelledSpectra, calibrated_threshold=None) -> dict:
    """Fidelity at κ=1 (density-matched on these spectra, and at ``calibrated_threshold`` when given: a
    float, or one per spectrum), fidelity-bin shares, and :func:`training.core.metrics.bit_metrics` (AUROC and
    AP micro / macro; ``tanimoto`` at 0.5)."""
    targets = data.targets(np.arange(len(data))).astype(bool)
    out: dict[str, Any] = {
        "spectra": len(data),
        "structures": int(len(np.unique(data.inchikey14))),
        "mean_true_bits": round(float(data.n_true_bits.mean()), 3),
    }
    t_self = density_matched_threshold(posteriors, float(data.n_true_bits.mean()))
    out["kappa1"] = _fidelity(posteriors, targets, t_self)
    if calibrated_threshold is not None:
        out["kappa1_calibrated"] = _fidelity(posteriors, targets, calibrated_threshold)
    metrics = bit_metrics(posteriors, targets, 0.5, macro=True)
    out.update({k: (round(v, 5) if isinstance(v, float) else v) for k, v in metrics.items() if k != "n_spectra"})
    return out


def row_thresholds(cal: Calibration, data: LabelledSpectra, kappa: float = 1.0) -> np.ndarray:
    """Each spectrum's calibrated t_κ: the negative-mode curve for negative ions when ``cal`` has one."""
    t = np.full(len(data), cal.threshold_for_kappa(kappa))
    if cal.negative is not None:
        t[data.polarity < 0] = cal.negative.threshold_for_kappa(kappa)
    return t


def by_polarity(posteriors: np.ndarray, data: LabelledSpectra, thresholds: np.ndarray) -> dict:
    """:func:`posterior_summary` of each ion mode present, when there are two (else empty)."""
    modes = {"positive": data.polarity > 0, "negative": data.polarity < 0}
    if not all(m.any() for m in modes.values()):
        return {}
    return {name: posterior_summary(posteriors[rows], data.subset(np.flatnonzero(rows)), thresholds[rows])
            for name, rows in modes.items()}  # fmt: skip


def _fidelity(posteriors: np.ndarray, targets: np.ndarray, threshold) -> dict:
    t = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (len(posteriors),))
    fid = np.zeros(len(posteriors))
    active = np.zeros(len(posteriors))
    for value in np.unique(t):  # one pass per distinct threshold (per fold)
        rows = np.flatnonzero(t == value)
        fid[rows] = tanimoto_at(posteriors[rows], targets[rows], float(value))
        active[rows] = np.count_nonzero(posteriors[rows] > value, axis=1)
    out = {
        "mean_fidelity": round(float(fid.mean()), 4),
        "median_fidelity": round(float(np.median(fid)), 4),
        "bins": {name: round(float(np.mean((fid >= lo) & (fid < hi))), 4) for name, lo, hi in FIDELITY_BINS},
        "mean_active_bits": round(float(active.mean()), 3),
    }
    distinct = np.unique(t)
    out["threshold"] = round(float(distinct[0]), 6) if len(distinct) == 1 else [round(float(x), 6) for x in distinct]
    return out


# ----------------------------------------------------------------------------------------------
# The run


def oof_posteriors(
    config: OOFConfig, stop: threading.Event | None = None, only_folds: Sequence[int] | None = None
) -> Iterator:
    """Train the K fold encoders (resumably) and write the out-of-fold posteriors; yields progress events,
    ends with :class:`OOFFinished` (or :class:`OOFStopped`).

    ``only_folds`` trains just those folds (to share the K folds between processes writing to the same
    ``out_dir``, one per core); the posteriors are assembled by the run that finds every fold done.
    """
    if only_folds is not None:
        bad = sorted(k for k in only_folds if not 0 <= k < config.folds)
        if bad:
            raise ConfigError(f"--only-folds {bad}: the folds are 0 to {config.folds - 1}.")
    with torch_threads(config.threads):
        yield from _run(config, stop, only_folds)


def _run(config: OOFConfig, stop: threading.Event | None, only_folds: Sequence[int] | None = None) -> Iterator:
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "oof_config.json"
    if config_path.is_file():
        if not config.resume:
            raise ConfigError(
                f"{out} already holds an out-of-fold run; pass --resume to continue it or use a new --out."
            )
        saved, now = json.loads(config_path.read_text()), config.to_dict()
        changed = sorted(k for k in set(saved) | set(now) if k not in _RESUMABLE_CHANGES and saved.get(k) != now.get(k))
        if changed:
            raise ConfigError(
                f"Cannot resume: the settings {', '.join(f'`{k}`' for k in changed)} differ from {config_path}; "
                f"use the same settings or a new --out."
            )
    config_path.write_text(json.dumps(config.to_dict(), indent=1) + "\n")

    base = config.fold_config(0)
    data = yield from iter_load_labelled_spectra(
        config.mgf, base.feature_settings(), cache_dir=config.cache_dir, min_annotated_peaks=base.min_annotated_peaks
    )
    whole = EncoderTrainConfig.from_dict(
        {**base.to_dict(), "cv_folds": None, "cv_fold": None, "max_train_spectra": None}
    )
    everything = training_split(whole, data).train  # every training spectrum, in the cache's order
    fold_of = structure_folds(everything.inchikey14, config.folds, config.cv_seed)
    per_fold = [describe_selection(everything.subset(np.flatnonzero(fold_of == k))) for k in range(config.folds)]
    yield FoldsAssigned(len(everything), int(len(np.unique(everything.inchikey14))),
                        [{"spectra": d["spectra"], "structures": d["structures"]} for d in per_fold])  # fmt: skip

    reference = None
    if config.reference:
        reference = yield from _reference(config, data, everything)
        yield ReferenceDone(reference)

    summaries: dict[int, dict] = {}

    def finished(k: int) -> bool:
        return (config.fold_dir(k) / "held_out.npz").is_file()

    for k in range(config.folds):
        if only_folds is not None and k not in only_folds and not finished(k):
            continue  # another process's fold, not finished yet
        summary = yield from _fold(config, k, everything, fold_of, stop)
        if summary is None:  # stopped
            return
        summaries[k] = summary
        yield FoldDone(k, summary)
    # the other process may have finished its folds while this one trained: the last to finish assembles
    for k in [k for k in range(config.folds) if k not in summaries and finished(k)]:
        summaries[k] = yield from _fold(config, k, everything, fold_of, stop)
        yield FoldDone(k, summaries[k])
    if len(summaries) < config.folds:
        yield FoldsPending([k for k in range(config.folds) if not finished(k)])
        return
    fold_summaries = [summaries[k] for k in range(config.folds)]

    summary = yield from _assemble(config, everything, fold_of, fold_summaries, reference)
    yield OOFFinished(str(out), summary)


def _reference(config: OOFConfig, data: LabelledSpectra, train: LabelledSpectra) -> Iterator:
    path = Path(config.out_dir) / "reference.json"
    if path.is_file():
        doc = json.loads(path.read_text())
        if doc.get("reference") == config.reference and ("val" in doc) == config.reference_val:
            return doc
    model, cal = load_reference(config.reference)
    doc: dict[str, Any] = {"reference": config.reference, "t_kappa1": round(cal.threshold_for_kappa(1.0), 6),
                           "d_enc": round(cal.d_enc, 4)}  # fmt: skip
    t0 = time.monotonic()
    yield Predicting("reference train (in sample)", len(train))
    post = predict_posteriors(model, train, 256)
    doc["predict_seconds_train"] = round(time.monotonic() - t0, 1)
    doc["train"] = posterior_summary(post, train, cal.threshold_for_kappa(1.0))
    del post
    if config.reference_val:
        base = config.fold_config(0)
        pick = dict(licenses=base.licenses, exclude_unit_resolution=base.exclude_unit_resolution)
        val = data.select(("val",), **pick)
        if len(val):
            yield Predicting("reference val", len(val))
            doc["val"] = posterior_summary(predict_posteriors(model, val, 256), val, cal.threshold_for_kappa(1.0))
    write_json_atomic(path, doc)
    return doc


def load_reference(path: str | Path) -> tuple[SpectrumEncoder, Calibration]:
    """The encoder (eval mode, float32) and calibration of a bundle or an encoder training folder."""
    folder = paths.default_model_dir() if str(path) == "default" else Path(path)
    if (folder / "config.json").is_file():  # a bundle: read only its encoder part
        enc_cfg = EncoderConfig.from_dict(json.loads((folder / "config.json").read_text())["encoder"])
        model = SpectrumEncoder(enc_cfg)
        load_weights(model, folder / "encoder.safetensors")
        model = model.float().eval()
    else:
        model = load_encoder(folder)
    if not (folder / "calibration.json").is_file():
        raise ConfigError(f"{folder} has no calibration.json.")
    return model, Calibration.load(folder / "calibration.json")


def _fold(config: OOFConfig, k: int, everything: LabelledSpectra, fold_of: np.ndarray, stop) -> Iterator:
    folder = config.fold_dir(k)
    done_path = folder / "held_out.npz"
    held = everything.subset(np.flatnonzero(fold_of == k))
    timings: dict[str, float] = {}
    if done_path.is_file():
        yield FoldStarted(k, "done")
        with np.load(done_path, allow_pickle=False) as z:
            post = z["posteriors"]
            if not np.array_equal(z["ids"], held.ids):
                raise ConfigError(f"{done_path} holds other spectra than fold {k}; delete {folder} to redo the fold.")
            timings = json.loads(str(z["timings"]))
    else:
        trained = (folder / "encoder.safetensors").is_file() and (folder / "metrics.json").is_file() \
            and not (folder / "checkpoint.tmp").exists() and _finished(folder)  # fmt: skip
        if not trained:
            resume = complete_folder(folder / "checkpoint", "state.json") is not None
            if resume and not config.resume:
                raise ConfigError(f"{folder} holds a training run; pass --resume to continue it.")
            yield FoldStarted(k, "resumed" if resume else "new")
            t0 = time.monotonic()
            gen = train_encoder(config.fold_config(k, resume=resume), stop)
            try:
                for event in gen:
                    yield FoldEvent(k, event)
                    if isinstance(event, TrainingStopped):
                        yield OOFStopped(k, event.checkpoint)
                        return None
            finally:
                gen.close()
            timings["train_session_wall_seconds"] = round(time.monotonic() - t0, 1)
        else:
            yield FoldStarted(k, "trained")
        metrics = json.loads((folder / "metrics.json").read_text())
        timings["train_minutes"] = metrics.get("train_minutes")
        timings["steps"] = metrics.get("steps")
        timings["epochs_done"] = metrics.get("epochs_done")
        # calibration on the fold's own training spectra (training.calibration.calibrate reads the cv split)
        t0 = time.monotonic()
        for event in calibrate_encoder(folder, cache_dir=config.cache_dir, threads=config.threads):
            if isinstance(event, CalibrationDone):
                event.calibration.save(folder / "calibration.json")
                write_json_atomic(folder / "calibration_summary.json", event.summary)
            elif isinstance(event, (PosteriorsProgress, ReadProgress, CacheHit)):
                yield FoldEvent(k, event)
        timings["calibrate_seconds"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        yield Predicting(f"fold {k} held-out", len(held))
        post = predict_posteriors(load_encoder(folder), held, 256)
        timings["predict_seconds"] = round(time.monotonic() - t0, 1)
        tmp = folder / "held_out.npz.tmp"
        with open(tmp, "wb") as fh:
            np.savez(fh, ids=held.ids, posteriors=post, timings=np.array(json.dumps(timings)))
        os.replace(tmp, done_path)
    cal = Calibration.load(folder / "calibration.json")
    summary = posterior_summary(post, held, row_thresholds(cal, held))
    summary["t_kappa1_calibrated"] = round(cal.threshold_for_kappa(1.0), 6)
    summary["d_enc"] = round(cal.d_enc, 4)
    if cal.negative is not None:
        summary["negative_t_kappa1_calibrated"] = round(cal.negative.threshold_for_kappa(1.0), 6)
        summary["negative_d_enc"] = round(cal.negative.d_enc, 4)
    data = json.loads((folder / "metrics.json").read_text())["data"]
    summary["trained_on"] = data["train"]  # the measured spectra; simulated ones (if any) apart
    if "simulated" in data:
        summary["trained_on_simulated"] = data["simulated"]
    summary["timings"] = timings
    return summary


def _finished(folder: Path) -> bool:
    """The fold's training wrote its final metrics (its ``stop_reason`` is set)."""
    try:
        return json.loads((folder / "metrics.json").read_text()).get("stop_reason") is not None
    except (OSError, ValueError):
        return False


def _assemble(config, everything: LabelledSpectra, fold_of: np.ndarray, fold_summaries, reference) -> Iterator:
    out = Path(config.out_dir)
    n_bits = everything.settings.fp_bits
    post = np.zeros((len(everything), n_bits), dtype=np.float32)
    t_cal = np.zeros(len(everything))
    thresholds, negative_thresholds = [], []
    for k in range(config.folds):
        rows = np.flatnonzero(fold_of == k)
        with np.load(config.fold_dir(k) / "held_out.npz", allow_pickle=False) as z:
            assert np.array_equal(z["ids"], everything.ids[rows])
            post[rows] = z["posteriors"]
        cal = Calibration.load(config.fold_dir(k) / "calibration.json")
        t_cal[rows] = row_thresholds(cal, everything.subset(rows))
        thresholds.append(cal.threshold_for_kappa(1.0))
        if cal.negative is not None:
            negative_thresholds.append(cal.negative.threshold_for_kappa(1.0))
    yield Predicting("overall out-of-fold metrics", len(everything))
    overall = posterior_summary(post, everything, t_cal)
    modes = by_polarity(post, everything, t_cal)
    tmp = out / "oof_posteriors.npz.tmp"
    with open(tmp, "wb") as fh:
        np.savez(
            fh, ids=everything.ids, inchikey14=everything.inchikey14, adduct=everything.adduct,
            license=everything.license, instrument=everything.instrument, fold=fold_of.astype(np.int8),
            posteriors=post.astype(np.float16), bit_offsets=everything.bit_offsets, bits=everything.bits,
            threshold_calibrated=np.asarray(thresholds, dtype=np.float64), n_bits=np.array(n_bits),
            **({"threshold_calibrated_negative": np.asarray(negative_thresholds, dtype=np.float64)}
               if len(negative_thresholds) == config.folds else {}),
        )  # fmt: skip
    os.replace(tmp, out / "oof_posteriors.npz")
    summary = {
        "data": {"mgf": config.mgf, "train_selection": describe_selection(everything), "folds": config.folds,
                 "cv_seed": config.cv_seed},
        "recipe": {k: v for k, v in config.fold_config(0).to_dict().items()
                   if k not in ("mgf", "out_dir", "cv_fold", "resume", "cache_dir")},
        "overall": overall,
        **({"by_polarity": modes} if modes else {}),
        "folds": fold_summaries,
        "reference": reference,
        "notes": [
            "kappa1: threshold density-matched on the scored spectra themselves (training.core.metrics."
            "density_matched_threshold; overall: one threshold over all out-of-fold posteriors)",
            "kappa1_calibrated: each encoder's t_kappa=1 from its own training spectra (calibration.json), "
            "as msgpt-eval's kappa sweep and the app threshold",
            "overall AP/AUROC pool the posteriors of the K encoders into one ranking",
        ],
    }  # fmt: skip
    write_json_atomic(out / "summary.json", summary)
    return summary


# ----------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.calibration.oof_posteriors", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    p.add_argument("--mgf", required=True, help="labelled MGF (.mgf / .mgf.gz)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out (finished folds are kept)")
    p.add_argument("--no-reference", action="store_true", help="do not score the reference encoder")
    p.add_argument("--only-folds", type=int, nargs="+", metavar="K",
                   help="train only these folds (one process per core, same --out); the last to finish assembles")
    OOFConfig.add_arguments(p, skip={"mgf", "out_dir", "resume", "train", "reference_val"})
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    kwargs = {k: v for k, v in vars(args).items() if k not in {"mgf", "out", "no_reference", "only_folds"}}
    try:
        if args.no_reference:
            kwargs["reference"] = None
        config = OOFConfig(mgf=args.mgf, out_dir=args.out, **kwargs)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bar = None

    def say(msg: str) -> None:
        (bar.write if bar is not None else print)(f"{time.strftime('%H:%M:%S')} {msg}")
        sys.stdout.flush()

    try:
        with stop_on_signals(notice=STOP_NOTICE) as stop:
            for item in oof_posteriors(config, stop, args.only_folds):
                fold, event = (item.fold, item.event) if isinstance(item, FoldEvent) else (None, item)
                if isinstance(event, ReadProgress):
                    if event.records % 20000 == 0:
                        say(f"read {event.records} records, kept {event.kept} ({event.elapsed_s:.0f} s)")
                elif isinstance(event, CacheHit):
                    say(f"labelled spectra from cache {event.path}")
                elif isinstance(event, FoldsAssigned):
                    say(f"{event.n_spectra} training spectra of {event.n_structures} structures in "
                        f"{config.folds} folds: "
                        + ", ".join(f"{d['spectra']} ({d['structures']})" for d in event.folds))  # fmt: skip
                elif isinstance(event, ReferenceDone):
                    s = event.summary
                    val = (f", val {s['val']['kappa1_calibrated']['mean_fidelity']} (at its t_κ=1)"
                           if "val" in s else "")
                    say(f"reference {s['reference']}: train (in sample) fidelity κ=1 "
                        f"{s['train']['kappa1']['mean_fidelity']}{val}")  # fmt: skip
                elif isinstance(event, FoldStarted):
                    say(f"fold {event.fold}: {event.state}")
                elif isinstance(event, DataReady):
                    say(f"fold {fold}: train {event.n_train} spectra, {event.steps_per_epoch} steps per epoch, "
                        f"{config.stop_after_epochs} of {config.epochs} epochs")  # fmt: skip
                elif isinstance(event, Resumed):
                    say(f"fold {fold}: resumed at step {event.step} (epoch {event.epoch}, batch {event.batch})")
                elif isinstance(event, StepDone):
                    bar = epoch_bar(bar, event, f"fold {fold} epoch {event.epoch}", mininterval=30)
                    bar.set_postfix(loss=f"{event.loss:.4f}", sps=f"{event.spectra_per_s:.0f}", refresh=False)
                elif isinstance(event, Evaluated):
                    minutes = event.metrics["train_minutes"]
                    say(f"fold {fold}: epoch {event.epoch} done at step {event.step} ({minutes} min)")
                elif isinstance(event, (CheckpointSaved, PosteriorsProgress)):
                    pass
                elif isinstance(event, TrainingFinished):
                    if bar is not None:
                        bar.close()
                        bar = None
                    say(f"fold {fold}: trained ({event.reason})")
                elif isinstance(event, Predicting):
                    say(f"predicting {event.what}: {event.n} spectra")
                elif isinstance(event, FoldDone):
                    s = event.summary
                    say(f"fold {event.fold}: {s['spectra']} held-out spectra, fidelity κ=1 "
                        f"{s['kappa1']['mean_fidelity']} (calibrated t {s['kappa1_calibrated']['mean_fidelity']}), "
                        f"low bin {s['kappa1']['bins']['low']}, AP micro {s['ap_micro']}; {s['timings']}")  # fmt: skip
                elif isinstance(event, FoldsPending):
                    say(f"folds {event.folds} are not done yet; the run that finishes the last one assembles "
                        f"the posteriors (or run again with --resume once they are)")
                elif isinstance(event, OOFStopped):
                    say(f"stopped in fold {event.fold}; resume with --resume (checkpoint {event.checkpoint})")
                    return 130
                elif isinstance(event, OOFFinished):
                    o = event.summary["overall"]
                    say(f"out-of-fold fidelity κ=1 {o['kappa1']['mean_fidelity']} (bins {o['kappa1']['bins']}), "
                        f"calibrated {o['kappa1_calibrated']['mean_fidelity']}, AP micro {o['ap_micro']} macro "
                        f"{o['ap_macro']}; written to {event.out_dir}")  # fmt: skip
    except (ConfigError, InputFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
