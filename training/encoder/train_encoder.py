"""Train the spectrum encoder: annotated peaks -> posterior over 4096 Morgan bits.

Run ``python -m training.encoder.train_encoder --mgf spectra.mgf.gz --out DIR [--preset small]``; or call
:func:`train_encoder`, a generator of progress events (stop iterating, or set ``stop``, to cancel; a
checkpoint is saved and ``--resume`` continues from it).

Data (:mod:`training.data.spectra`): ``FOLD=train`` records for training, ``FOLD=val`` for early stopping
and the reported metrics; positive-mode ``[M+H]+`` / ``[M+Na]+`` with a formula and a parseable
SMILES, licences ``CC0, CC BY, CC BY-SA, dl-de/by-2-0`` by default (what the shipped model may use),
unit-resolution instruments excluded; precursor tolerance 10 ppm / 0.01 Da when reading, peak
annotation with the encoder config's ``tol_ppm`` / ``tol_da`` (10 ppm, 2 mDa floor). Targets: Morgan
radius-2 bits of the stereo-free reference structure.

Training: ``bce_weight`` * BCE over bits (mean) + ``cosine_weight`` * (1 - cos(sigmoid(logits), target));
with the growing head (encoder ``grow_levels``) plus ``level_loss_weight`` times the mean loss of the
folded levels; optional augmentation of the training batches (``peak_dropout``, ``intensity_noise``,
seeded by step); optional EMA of the weights (``ema_decay``), which is then what is evaluated and kept;
AdamW (weight decay on matrices only, as nanoGPT); linear warm-up then cosine decay to
``min_lr_ratio * lr`` over ``epochs``; batches of ``batch_size`` spectra grouped by token count
(:func:`length_grouped_batches`); gradients clipped at ``grad_clip``. After every epoch the model is
evaluated on the validation fold; the best weights by ``select_metric`` (default micro AP: the quality
of a single global threshold on the posterior, which is how density-band querying uses it) are kept,
and training stops after ``patience`` evaluations without improvement, after ``epochs``, or when
``max_minutes`` of training time have been spent.

Without a validation fold (``val_folds=()``, ``--no-val``) nothing is evaluated or selected: the last
weights are kept, and ``stop_after_epochs`` stops at a fixed epoch of the ``epochs``-long cosine (to
repeat a run whose selection on val kept an earlier epoch). Cross-fitting: ``cv_folds=K, cv_fold=k``
splits the selected training spectra into K folds by structure (:func:`training.data.spectra.structure_folds`,
seeded by ``cv_seed``) and trains on the other K-1 (``python -m training.calibration.oof_posteriors`` runs all K).

Output directory::

    encoder.safetensors, encoder_config.json   best weights (what engine.model.bundle.save_bundle takes)
    metrics.json                               validation metrics of those weights, history, throughput
    train_config.json                          this run's EncoderTrainConfig
    best.safetensors                           best weights so far (during training)
    checkpoint/                                the latest training state, for --resume:
        model.safetensors  optimizer.safetensors  rng.safetensors  state.json  [ema.safetensors]

Checkpoints hold no pickle: the AdamW state tensors go to ``optimizer.safetensors`` under
``state.<param index>.<name>``, its hyper-parameters to ``state.json``, the torch RNG state (dropout)
to ``rng.safetensors``; the data order of every epoch is a function of ``(seed, epoch)``. Resuming
therefore reproduces the uninterrupted run exactly (on the same machine and thread count).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.optim.swa_utils import AveragedModel

from engine.errors import ConfigError, InputFileError
from engine.model.encoder import ENCODER_PRESETS, EncoderConfig, SpectrumEncoder

from training.core.checkpoint import write_json_atomic
from training.core.loop import lr_at, stop_on_signals, torch_threads
from training.data.spectra import SHIPPABLE_LICENSES, CacheHit, LabelledSpectra, ReadProgress, describe_selection
from training.encoder.substructures import FragmentLabels, LabelProgress
from training.encoder.encoder_config import (
    CheckpointSaved,
    DataReady,
    EncoderTrainConfig,
    Evaluated,
    Event,
    Resumed,
    SELECT_METRICS,
    StepDone,
    TrainingFinished,
    TrainingStopped,
)
from training.encoder.encoder_config import _RESUMABLE_CHANGES  # noqa: F401  (re-exported)
from training.encoder.encoder_steps import (
    _better,
    _check_resumable,
    _load_data,
    augment_batch,
    evaluate,
    length_grouped_batches,
    levels_loss,
    load_checkpoint,
    load_weights,
    make_ema,
    make_optimizer,
    predict_posteriors,
    save_checkpoint,
    save_weights,
    split_simulated,
    substructure_loss,
)
from training.encoder.encoder_steps import (  # noqa: F401  (re-exported)
    CHECKPOINT_FORMAT_VERSION,
    TrainingSplit,
    _optimizer_from_files,
    _optimizer_to_files,
    add_simulated,
    encoder_loss,
    simulated_summary,
    training_split,
)

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Training


def train_encoder(config: EncoderTrainConfig, stop: threading.Event | None = None) -> Iterator[Event]:
    """Train (or resume) an encoder; yields progress events, ends with :class:`TrainingFinished`.

    Setting ``stop`` or closing the generator saves a checkpoint first; ``resume=True`` continues it.
    torch runs on ``config.threads`` threads meanwhile (the caller's setting is restored afterwards).
    """
    with torch_threads(config.threads):
        yield from _train(config, stop)


def _train(config: EncoderTrainConfig, stop: threading.Event | None) -> Iterator[Event]:
    """Train in this process: prepare the run folder, load the data, then epochs of steps, each epoch ending with
    an evaluation and a checkpoint, until a limit, early stopping or ``stop``."""
    out_dir = Path(config.out_dir)
    _prepare_out_dir(config, out_dir)
    all_data, train, val, held_out, labels = yield from _load_data(config)
    enc_config = config.encoder_config()
    mode = SELECT_METRICS[config.select_metric]
    n_batches = len(length_grouped_batches(train.n_tokens, config.batch_size, seed=0, epoch=0,
                                           bucket_batches=config.bucket_batches))  # fmt: skip
    total_steps = n_batches * config.epochs
    yield DataReady(len(train), len(val), n_batches, describe_selection(train), describe_selection(val))

    session = yield from _start_session(config, out_dir, enc_config, mode)
    state = session.state
    reason = None
    try:
        while reason is None:
            batches = length_grouped_batches(train.n_tokens, config.batch_size, seed=config.seed,
                                             epoch=state["epoch"], bucket_batches=config.bucket_batches)  # fmt: skip
            while state["batch"] < len(batches):
                yield session.step(train, labels, batches[state["batch"]], len(batches), total_steps)
                if stop is not None and stop.is_set():
                    path = session.checkpoint()
                    yield TrainingStopped(state["step"], str(path))
                    return
                reason = _limit_reached(config, session)
                if reason is not None:
                    break
                if session.checkpoint_due():
                    yield CheckpointSaved(state["step"], str(session.checkpoint()))
            evaluated = session.evaluate(val)
            if state["batch"] >= len(batches):  # before the yield, so a checkpoint taken there is consistent
                state["epoch"] += 1
                state["batch"] = 0
            yield evaluated
            if reason is None:
                reason = _end_of_epoch_reason(config, state, len(val))
            yield CheckpointSaved(state["step"], str(session.checkpoint()))
    except GeneratorExit:  # the caller stopped iterating: keep what was done for --resume
        if state["step"]:
            session.checkpoint()
        raise

    state["train_seconds"] = session.elapsed()
    metrics = _finish(out_dir, config, session.scored, train, val, held_out, all_data, state, reason,
                      session.throughput(), n_batches)
    yield TrainingFinished(reason, str(out_dir), metrics)


def _prepare_out_dir(config: EncoderTrainConfig, out_dir: Path) -> None:
    """Create the run folder and write train_config.json there: a new run needs a folder without a run, ``resume``
    one whose saved settings it may continue."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / "train_config.json"
    if config.resume:
        if not config_path.is_file():
            raise ConfigError(f"Cannot resume: {config_path} does not exist; start without --resume.")
        _check_resumable(json.loads(config_path.read_text()), config)
    elif (out_dir / "checkpoint").exists():
        raise ConfigError(f"{out_dir} already holds a training run; pass --resume to continue it or use a new --out.")
    config_path.write_text(json.dumps(config.to_dict(), indent=1) + "\n")


def _start_session(config: EncoderTrainConfig, out_dir: Path, enc_config: EncoderConfig,
                   mode: str) -> Generator[Event, None, _Session]:
    """Build the model, its optimizer and EMA, loading them and the run's state from the checkpoint when
    resuming (which yields :class:`Resumed`)."""
    torch.manual_seed(config.seed)
    model = SpectrumEncoder(enc_config)
    optimizer = make_optimizer(model, config)
    ema = make_ema(model, config.ema_decay)
    state: dict[str, Any] = {
        "step": 0, "epoch": 0, "batch": 0, "train_seconds": 0.0, "spectra_seen": 0,
        "best": None, "best_step": None, "best_epoch": None, "bad_evals": 0, "history": [],
    }  # fmt: skip
    if config.resume:
        state.update(load_checkpoint(out_dir, model, optimizer, ema))
        yield Resumed(state["step"], state["epoch"], state["batch"])
    model.train()
    return _Session(config, out_dir, model, optimizer, ema, state, mode)


class _Session:
    """This process's part of a training run: the model, its optimizer and EMA, the run's state (what a checkpoint
    saves), and this session's clock and throughput (the training time adds up over resumed sessions)."""

    def __init__(self, config: EncoderTrainConfig, out_dir: Path, model: SpectrumEncoder,
                 optimizer: torch.optim.Optimizer, ema: AveragedModel | None, state: dict[str, Any], mode: str):
        self.config, self.out_dir, self.mode = config, out_dir, mode
        self.model, self.optimizer, self.ema = model, optimizer, ema
        self.scored = ema.module if ema is not None else model  # what is evaluated, selected and saved
        self.state = state
        self.start = time.monotonic()
        self.steps_time, self.spectra = 0.0, 0  # this session's seconds in steps, and the spectra they took
        self.last_checkpoint = time.monotonic()

    def elapsed(self) -> float:
        """Training seconds of the run: those of the sessions before this one, plus this one's so far."""
        return self.state["train_seconds"] + (time.monotonic() - self.start)

    def throughput(self) -> float:
        """Spectra per second of this session's steps."""
        return self.spectra / max(self.steps_time, 1e-9)

    def step(self, train: LabelledSpectra, labels: FragmentLabels | None, idx: np.ndarray, n_batches: int,
             total_steps: int) -> StepDone:
        """One optimizer step on the batch ``idx`` of ``train`` (the EMA follows); the state moves on by one."""
        config, state = self.config, self.state
        t0 = time.monotonic()
        lr = config.lr * lr_at(state["step"], lr=1.0, min_lr=config.min_lr_ratio,
                               warmup_steps=config.warmup_steps, max_steps=total_steps)  # fmt: skip
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch, targets = train.batch(idx)
        if config.peak_dropout or config.intensity_noise:  # seeded by (seed, step): resumes exactly
            gen = torch.Generator().manual_seed(config.seed * 1_000_003 + state["step"])
            batch = augment_batch(batch, gen, peak_dropout=config.peak_dropout,
                                  intensity_noise=config.intensity_noise)  # fmt: skip
        loss = _step_loss(self.model, config, train, labels, idx, batch, targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        state["step"] += 1
        state["batch"] += 1
        state["spectra_seen"] += len(idx)
        self.steps_time += time.monotonic() - t0
        self.spectra += len(idx)
        return StepDone(state["step"], state["epoch"], state["batch"], n_batches, loss.item(), lr, self.throughput())

    def checkpoint(self) -> Path:
        """Save a checkpoint of the run (``resume`` continues from it); returns its folder."""
        saved = {**self.state, "train_seconds": self.elapsed()}
        path = save_checkpoint(self.out_dir, self.model, self.optimizer, saved, self.ema)
        self.last_checkpoint = time.monotonic()
        return path

    def checkpoint_due(self) -> bool:
        """Is a checkpoint due: ``checkpoint_minutes`` since the last, or a multiple of ``checkpoint_every_steps``?"""
        config = self.config
        due = time.monotonic() - self.last_checkpoint >= config.checkpoint_minutes * 60
        return bool(due or (config.checkpoint_every_steps and self.state["step"] % config.checkpoint_every_steps == 0))

    def evaluate(self, val: LabelledSpectra) -> Evaluated:
        """Evaluate the scored weights on ``val``; keep them as best.safetensors when they improve the selection
        metric (always without validation spectra), and add the evaluation to the run's history."""
        state, config = self.state, self.config
        t0 = time.monotonic()
        metrics = evaluate(predict_posteriors(self.scored, val, config.eval_batch_size), val) if len(val) else {}
        value = metrics.get(config.select_metric, float("nan"))
        improved = bool(len(val)) and _better(value, state["best"], self.mode)
        if improved or not len(val):
            state.update(best=value if len(val) else None, best_step=state["step"], best_epoch=state["epoch"])
            state["bad_evals"] = 0
            save_weights(self.scored, self.out_dir / "best.safetensors")
        else:
            state["bad_evals"] += 1
        entry = {"step": state["step"], "epoch": state["epoch"], "batch": state["batch"],
                 "train_minutes": round(self.elapsed() / 60, 2), "eval_seconds": round(time.monotonic() - t0, 1),
                 **{k: (round(v, 5) if isinstance(v, float) else v) for k, v in metrics.items()}}  # fmt: skip
        state["history"].append(entry)
        return Evaluated(state["step"], state["epoch"], entry, improved, state["best"])


def _step_loss(model: SpectrumEncoder, config: EncoderTrainConfig, train: LabelledSpectra,
               labels: FragmentLabels | None, idx: np.ndarray, batch: dict, targets: torch.Tensor) -> torch.Tensor:
    """The loss of one batch: the fingerprint levels' loss, plus the weighted substructure loss when the run
    labels fragments."""
    if labels is None:
        return levels_loss(model(batch, return_levels=True), targets, config)  # scalar
    levels, fragments = model(batch, return_levels=True, return_fragments=True)
    frag_targets, labelled = labels.targets(train, idx, batch["mask"].shape[1])
    labelled &= batch["mask"]  # a peak hidden by augmentation is not asked about
    return levels_loss(levels, targets, config) + config.substructure_weight * substructure_loss(
        fragments, frag_targets, labelled)


def _limit_reached(config: EncoderTrainConfig, session: _Session) -> str | None:
    """``"time_limit"`` or ``"max_steps"`` when the run has reached that limit, else None."""
    if config.max_minutes is not None and session.elapsed() >= config.max_minutes * 60:
        return "time_limit"
    if config.max_steps is not None and session.state["step"] >= config.max_steps:
        return "max_steps"
    return None


def _end_of_epoch_reason(config: EncoderTrainConfig, state: dict, n_val: int) -> str | None:
    """Why the run ends after this epoch's evaluation (``"early_stopping"``, ``"epochs"``), or None."""
    if n_val and state["bad_evals"] >= config.patience:
        return "early_stopping"
    if state["epoch"] >= (config.stop_after_epochs or config.epochs):
        return "epochs"
    return None


def _finish(out_dir, config, model, train, val, held_out, all_data, state, reason, throughput, n_batches) -> dict:
    """Write encoder.safetensors (best weights), encoder_config.json and metrics.json."""
    measured, simulated = split_simulated(train)
    load_weights(model, out_dir / "best.safetensors")
    final = evaluate(predict_posteriors(model, val, config.eval_batch_size), val, macro=True) if len(val) else {}
    save_weights(model, out_dir / "encoder.safetensors")
    (out_dir / "encoder_config.json").write_text(json.dumps(model.config.to_dict(), indent=1) + "\n")
    doc = {
        "val": final,
        "selected_by": config.select_metric,
        "best_step": state["best_step"],
        "best_epoch": state["best_epoch"],
        "stop_reason": reason,
        "steps": state["step"],
        "epochs_done": round(state["epoch"] + state["batch"] / n_batches, 3),
        "train_minutes": round(state["train_seconds"] / 60, 2),
        "train_spectra_per_s": round(throughput, 1),  # training steps only, this session
        "threads": config.threads,
        "parameters": model.num_parameters(),
        "annotation": {"tol_ppm": model.config.tol_ppm, "tol_da": model.config.tol_da,
                       "min_rdbe": model.config.min_rdbe, "max_peaks": model.config.max_peaks},
        "data": {"train": describe_selection(measured), "val": describe_selection(val), "file": all_data.report,
                 **({"simulated": simulated} if simulated else {}),
                 **({"held_out": {**describe_selection(held_out), "cv_folds": config.cv_folds,
                                  "cv_fold": config.cv_fold, "cv_seed": config.cv_seed}}
                    if held_out is not None else {})},
        "history": state["history"],
    }  # fmt: skip
    write_json_atomic(out_dir / "metrics.json", doc)
    return final


# ----------------------------------------------------------------------------------------------
# Command line


STOP_NOTICE = "saving a checkpoint after this step..."  # printed after the signal's name (SIGINT, SIGTERM)


def epoch_bar(bar, event: StepDone, desc: str, mininterval: float):
    """The tqdm bar of ``event``'s epoch, advanced to its batch: ``bar`` or, at a new epoch, a new one."""
    from tqdm import tqdm

    if bar is None or bar.total != event.n_batches or event.batch == 1 or bar.n > event.batch:
        if bar is not None:
            bar.close()
        bar = tqdm(total=event.n_batches, initial=event.batch - 1, desc=desc, file=sys.stdout,
                   mininterval=mininterval, dynamic_ncols=False, ncols=110)  # fmt: skip
    bar.update(event.batch - bar.n)
    return bar


def _csv_list(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.encoder.train_encoder",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--mgf", required=True, help="labelled MGF (.mgf / .mgf.gz)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--preset", default="small", choices=sorted(ENCODER_PRESETS))
    p.add_argument(
        "--licenses", type=_csv_list, default=SHIPPABLE_LICENSES,
        help=f"LICENSE values to train on, comma-separated, or 'all' (default: {','.join(SHIPPABLE_LICENSES)})",
    )  # fmt: skip
    p.add_argument("--keep-unit-resolution", action="store_true", help="keep QQ / ion-trap spectra")
    p.add_argument("--max-peaks", type=int, help="encoder max_peaks (default: the preset's)")
    p.add_argument("--dropout", type=float, help="encoder dropout (default: the preset's)")
    p.add_argument("--grow-levels", type=int, help="encoder grow_levels: MIST's growing head (the shipped encoder: 4)")
    p.add_argument("--fragment-bits", type=int,
                   help="encoder fragment_bits: the per-peak fragment head of --substructure-weight (e.g. 512)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--no-val", action="store_true",
                   help="no validation fold: nothing is evaluated or selected, the last weights are kept")
    EncoderTrainConfig.add_arguments(p, skip={"mgf", "out_dir", "preset", "encoder", "licenses",
                                              "exclude_unit_resolution", "resume", "train_folds", "val_folds"})
    return p


def config_from_args(args: argparse.Namespace) -> EncoderTrainConfig:
    encoder_args = ("max_peaks", "dropout", "grow_levels", "fragment_bits")
    skip = {"mgf", "out", "licenses", "keep_unit_resolution", "resume", "preset", "no_val", *encoder_args}
    kwargs = {k: v for k, v in vars(args).items() if k not in skip}
    licenses = None if [s.lower() for s in args.licenses] == ["all"] else args.licenses
    encoder = {k: getattr(args, k) for k in encoder_args if getattr(args, k) is not None}
    return EncoderTrainConfig(
        mgf=args.mgf, out_dir=args.out, preset=args.preset, encoder=encoder, licenses=licenses,
        exclude_unit_resolution=not args.keep_unit_resolution, resume=args.resume,
        **({"val_folds": ()} if args.no_val else {}), **kwargs,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    try:
        config = config_from_args(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bar = None
    try:
        with stop_on_signals(notice=STOP_NOTICE) as stop:
            for event in train_encoder(config, stop):
                if isinstance(event, ReadProgress):
                    print(f"read {event.records} records, kept {event.kept} ({event.elapsed_s:.0f} s)",
                          flush=True)
                elif isinstance(event, CacheHit):
                    print(f"labelled spectra from cache {event.path}", flush=True)
                elif isinstance(event, LabelProgress):
                    print(f"substructure labels: {event.structures_done}/{event.structures} structures "
                          f"({event.elapsed_s:.0f} s)", flush=True)
                elif isinstance(event, DataReady):
                    print(f"train {json.dumps(event.train)}\nval   {json.dumps(event.val)}\n"
                          f"{event.steps_per_epoch} steps per epoch", flush=True)  # fmt: skip
                elif isinstance(event, Resumed):
                    print(f"resumed at step {event.step} (epoch {event.epoch}, batch {event.batch})",
                          flush=True)
                elif isinstance(event, StepDone):
                    bar = epoch_bar(bar, event, f"epoch {event.epoch}", mininterval=10)
                    bar.set_postfix(loss=f"{event.loss:.4f}", lr=f"{event.lr:.2e}",
                                    sps=f"{event.spectra_per_s:.0f}", refresh=False)  # fmt: skip
                elif isinstance(event, Evaluated):
                    m = {k: v for k, v in event.metrics.items() if isinstance(v, float)}
                    keys = ("bce", "tanimoto", "tanimoto_density", "ap_micro", "auroc_micro",
                            "active_bits_pred")
                    shown = " ".join(f"{k} {m[k]:.4f}" for k in keys if k in m)
                    minutes, mark = event.metrics["train_minutes"], " *" if event.improved else ""
                    msg = f"eval step {event.step} epoch {event.epoch}: {shown} ({minutes} min){mark}"
                    (bar.write if bar is not None else print)(msg)
                    sys.stdout.flush()
                elif isinstance(event, CheckpointSaved):
                    log.debug("checkpoint at step %d", event.step)
                elif isinstance(event, TrainingStopped):
                    print(f"stopped at step {event.step}; resume with --resume "
                          f"(checkpoint {event.checkpoint})")
                    return 130
                elif isinstance(event, TrainingFinished):
                    if bar is not None:
                        bar.close()
                    print(f"finished ({event.reason}); val metrics of the kept weights:\n"
                          f"{json.dumps(event.metrics, indent=1)}\nwritten to {event.out_dir}")  # fmt: skip
    except (ConfigError, InputFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
