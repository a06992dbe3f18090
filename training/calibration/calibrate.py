"""Active-bit density calibration of a trained encoder: ``D_enc`` and ``A(t)`` on its training split.

Run ``python -m training.calibration.calibrate --encoder DIR --mgf spectra.mgf.gz --out calibration.json``, or call
:func:`calibrate_encoder` (a generator of progress events) / :func:`calibrate`.

Paper, "Active-bit density band calibration": ``D_enc`` is the mean number of active Morgan bits of the
true structures over the spectra of the encoder's *training* set and ``A(t)`` the mean number of
posterior bits above ``t`` on the same spectra; ``t_κ = A⁻¹(κ·D_enc)``. The training spectra are
selected exactly as :mod:`training.encoder.train_encoder` selected them: the settings come from the encoder
directory's ``train_config.json`` (folds, licences, instrument rule, annotation tolerances), so the
reference density is the one the posterior was shaped on. Posteriors are computed in eval mode.

An encoder trained on both ion modes gets one curve per mode (positive in the main fields, negative in
``negative``; see :meth:`engine.model.querying.Calibration.for_polarity`): its posteriors differ between the
modes in how many bits pass a threshold.

A bundle may store the encoder's weights in half precision (``build_bundle --encoder-dtype fp16``, half
the size): ``round_weights`` ("fp16"/"bf16") then calibrates the weights as they will be stored, rounded
and read back to float32, and says so in the calibration's ``source``, which ``build_bundle`` checks.

With ``val_folds`` (default: the training run's), the output also reports the validation Tanimoto and
active bits at ``t_κ`` for the κ of :data:`REPORT_KAPPAS`, to see what the band does to the queries.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from engine.errors import ConfigError, InputFileError
from engine.model.encoder import EncoderConfig, SpectrumEncoder
from engine.model.querying import Calibration

from training.core.loop import torch_threads
from training.core.metrics import mean_active_bits, mean_tanimoto
from training.data.spectra import CacheHit, FeatureSettings, LabelledSpectra, ReadProgress, iter_load_labelled_spectra
from training.encoder.train_encoder import EncoderTrainConfig, load_weights, predict_posteriors, training_split

log = logging.getLogger(__name__)

REPORT_KAPPAS: tuple[float, ...] = (0.95, 1.0, 1.5)


def calibration_summary(cal: Calibration, kappas: Sequence[float] = REPORT_KAPPAS) -> dict:
    """``D_enc``, the number of spectra and ``t_κ`` (with ``A(t_κ)``) for each κ."""
    return {
        "d_enc": round(cal.d_enc, 4),
        "n_spectra": cal.n_spectra,
        "thresholds": {f"{k:g}": round(cal.threshold_for_kappa(k), 4) for k in kappas},
        "active_bits_at_threshold": {
            f"{k:g}": round(cal.active_bits_at(cal.threshold_for_kappa(k)), 3) for k in kappas
        },
    }




ROUNDINGS = {"fp16": "float16", "bf16": "bfloat16"}


def rounded_note(dtype: str) -> str:
    """What a calibration's ``source`` says when it was computed on weights rounded to ``dtype``."""
    return f"(weights rounded to {dtype})"


def round_weights(model: SpectrumEncoder, dtype: str) -> SpectrumEncoder:
    """``model`` with every floating-point weight rounded to ``dtype`` and read back as float32 (in place)."""
    import torch

    if dtype not in ROUNDINGS:
        raise ConfigError(f"Cannot round weights to {dtype!r}; use one of {', '.join(ROUNDINGS)}.")
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.to(getattr(torch, ROUNDINGS[dtype])).float())
    return model


def load_encoder(encoder_dir: str | Path) -> SpectrumEncoder:
    """The encoder of a training output directory (``encoder_config.json`` + ``encoder.safetensors``)."""
    folder = Path(encoder_dir)
    for name in ("encoder_config.json", "encoder.safetensors"):
        if not (folder / name).is_file():
            raise ConfigError(f"{folder} has no {name}; give the --out directory of a finished training run.")
    model = SpectrumEncoder(EncoderConfig.from_dict(json.loads((folder / "encoder_config.json").read_text())))
    load_weights(model, folder / "encoder.safetensors")
    return model.eval()


@dataclass(frozen=True)
class PosteriorsProgress:
    done: int
    total: int


@dataclass(frozen=True)
class CalibrationDone:
    calibration: Calibration
    summary: dict = field(default_factory=dict)


def calibrate_encoder(
    encoder_dir: str | Path,
    mgf: str | Path | None = None,
    *,
    folds: Sequence[str] | None = None,
    val_folds: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    grid: np.ndarray | None = None,
    batch_size: int = 256,
    threads: int = 1,
    rounding: str | None = None,
) -> Iterator[ReadProgress | CacheHit | PosteriorsProgress | CalibrationDone]:
    """Calibrate the encoder in ``encoder_dir`` on its training split; the last event holds the result.

    ``mgf``, ``folds`` and ``val_folds`` default to the training run's ``train_config.json``; ``rounding``
    ("fp16"/"bf16") calibrates the weights as a bundle storing them in that type will hold them.
    """
    with torch_threads(threads):
        yield from _calibrate(encoder_dir, mgf, folds, val_folds, cache_dir, grid, batch_size, rounding)


def _calibrate(encoder_dir, mgf, folds, val_folds, cache_dir, grid, batch_size, rounding=None) -> Iterator:
    folder = Path(encoder_dir)
    config_path = folder / "train_config.json"
    if not config_path.is_file():
        raise ConfigError(f"{config_path} is missing: calibration reads the training data selection from it.")
    train_config = EncoderTrainConfig.from_dict({**json.loads(config_path.read_text()), "resume": False})
    model = load_encoder(folder)
    if rounding is not None:
        round_weights(model, rounding)
    settings = FeatureSettings.for_encoder(
        model.config, precursor_tol_ppm=train_config.precursor_tol_ppm, precursor_tol_da=train_config.precursor_tol_da,
        adducts=train_config.adducts,
    )
    mgf = mgf if mgf is not None else train_config.mgf
    data = yield from iter_load_labelled_spectra(
        mgf, settings, cache_dir=cache_dir if cache_dir is not None else train_config.cache_dir,
        min_annotated_peaks=train_config.min_annotated_peaks,
    )  # fmt: skip
    pick = dict(licenses=train_config.licenses, exclude_unit_resolution=train_config.exclude_unit_resolution)
    if folds is None:  # the spectra train_encoder trained on (cross-fitting fold and subset included)
        train = training_split(train_config, data).train
    else:
        train = data.select(tuple(folds), **pick)
    if len(train) == 0:
        raise ConfigError(f"No training spectra selected in {mgf}; check the folds and licences.")
    posteriors = yield from _posteriors(model, train, batch_size)
    positive = train.polarity > 0
    both = bool(positive.any() and (~positive).any())  # one curve per ion mode (Calibration.for_polarity)
    parts = {"positive": positive, "negative": ~positive} if both else {"all": np.ones(len(train), dtype=bool)}
    cals = {}
    for mode, rows in parts.items():
        what = f" {mode}-mode" if both else ""
        source = f"{Path(mgf).name}: {int(rows.sum())}{what} training spectra of {folder.name}" + (
            f" {rounded_note(rounding)}" if rounding else "")
        cals[mode] = Calibration.from_posteriors(posteriors[rows], train.n_true_bits[rows], grid=grid, source=source)
    cal = replace(cals["positive"], negative=cals["negative"]) if both else cals["all"]
    summary = calibration_summary(cal)
    summary["mean_true_bits_check"] = round(float(train.n_true_bits[positive if both else slice(None)].mean()), 4)
    if both:
        summary["negative"] = calibration_summary(cal.negative)
    val_folds = tuple(val_folds) if val_folds is not None else train_config.val_folds
    val = data.select(val_folds, **pick) if val_folds else data.subset(np.zeros(0, dtype=np.int64))
    if len(val):
        val_post = yield from _posteriors(model, val, batch_size)
        for mode in ("positive", "negative") if both else ("all",):
            rows = np.flatnonzero(val.polarity > 0 if mode == "positive" else val.polarity < 0) if both \
                else np.arange(len(val))  # fmt: skip
            entry = summary if mode != "negative" else summary["negative"]
            if len(rows):
                entry["val"] = _val_summary(val_post[rows], val.subset(rows), entry["thresholds"])
    yield CalibrationDone(cal, summary)


def _val_summary(posteriors: np.ndarray, val: LabelledSpectra, thresholds: dict[str, float]) -> dict:
    targets = val.targets(np.arange(len(val)))
    out: dict = {"n_spectra": len(val), "active_bits_true": round(float(val.n_true_bits.mean()), 3)}
    for k, t in thresholds.items():
        out[f"kappa_{k}"] = {
            "tanimoto": round(mean_tanimoto(posteriors, targets, t), 4),
            "active_bits": round(mean_active_bits(posteriors, t), 3),
        }
    return out


def _posteriors(model: SpectrumEncoder, data: LabelledSpectra, batch_size: int) -> Iterator[PosteriorsProgress]:
    chunk = 20 * batch_size
    out = np.empty((len(data), model.config.fp_bits), dtype=np.float32)  # 31k x 4096: 0.5 GB
    for start in range(0, len(data), chunk):
        stop = min(start + chunk, len(data))
        out[start:stop] = predict_posteriors(model, data.subset(np.arange(start, stop)), batch_size)
        yield PosteriorsProgress(stop, len(data))
    return out


def calibrate(encoder_dir: str | Path, mgf: str | Path | None = None, **kwargs) -> tuple[Calibration, dict]:
    """:func:`calibrate_encoder` run to the end: ``(calibration, summary)``."""
    done = None
    for event in calibrate_encoder(encoder_dir, mgf, **kwargs):
        if isinstance(event, CalibrationDone):
            done = event
    assert done is not None
    return done.calibration, done.summary


# ----------------------------------------------------------------------------------------------
# Command line


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.calibration.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--encoder", required=True, help="training output directory (encoder.safetensors, ...)")
    p.add_argument("--mgf", help="labelled MGF (default: the one in train_config.json)")
    p.add_argument("--out", required=True, help="calibration.json to write")
    p.add_argument("--cache-dir", help="labelled-spectra cache folder (default: the training run's)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--round-weights", choices=sorted(ROUNDINGS),
                   help="calibrate the weights rounded to this type, for a bundle built with --encoder-dtype")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    try:
        for event in calibrate_encoder(args.encoder, args.mgf, cache_dir=args.cache_dir, threads=args.threads,
                                       rounding=args.round_weights):
            if isinstance(event, ReadProgress):
                print(f"read {event.records} records, kept {event.kept}", flush=True)
            elif isinstance(event, CacheHit):
                print(f"labelled spectra from cache {event.path}", flush=True)
            elif isinstance(event, PosteriorsProgress):
                print(f"posteriors {event.done}/{event.total}", flush=True)
            elif isinstance(event, CalibrationDone):
                out = Path(args.out)
                out.parent.mkdir(parents=True, exist_ok=True)
                event.calibration.save(out)
                s = event.summary
                t = s["thresholds"]
                print(f"D_enc = {s['d_enc']:.2f} active bits over {s['n_spectra']} training spectra")
                print(f"t_0.95 = {t['0.95']:.4f}   t_1.0 = {t['1']:.4f}   t_1.50 = {t['1.5']:.4f}")
                if "val" in s:
                    print(f"validation at t_κ: {json.dumps(s['val'])}")
                out.with_name(out.stem + "_summary.json").write_text(json.dumps(s, indent=1) + "\n")
                print(f"written {out}")
    except (ConfigError, InputFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
