"""Encoder recipe ablation: train named variants of one recipe and compare them on the validation fold.

Run ``python -m training.studies.encoder_ablation --mgf ../shared/data/massbank_dev.mgf.gz --out runs/enc_abl
[--variants baseline,cosine,...]``. Every variant is one :func:`training.encoder.train_encoder.train_encoder` run
in ``out/<name>`` (resumable: a finished variant is only re-scored, an interrupted one continues from its
checkpoint), calibrated on its own training spectra (:func:`training.calibration.calibrate.calibrate_encoder`, as a
bundle would be) and scored on the licence-clean ``FOLD=val`` spectra with
:func:`training.calibration.oof_posteriors.posterior_summary`:

- ``fidelity``: mean Tanimoto between the true fingerprint and the posterior cut at the encoder's own
  calibrated t(κ=1), i.e. what ``msgpt-eval`` bins spectra by; ``low`` is the share with fidelity < 0.5;
- ``tanimoto_k1``: the same with the threshold density-matched on the val spectra themselves;
- AP micro / macro of the raw posterior; encoder inference throughput (spectra/s, one thread).

The table's columns are positive-mode val spectra (``[M+H]+``, ``[M+Na]+``), the same for every
variant; a variant trained on ``[M-H]-`` too is also scored on the ``[M-H]-`` val spectra (at its
negative-mode calibration), listed under the table.

All variants share :data:`BASE` (the recipe of the shipped encoder and of the out-of-fold encoders)
and select their epoch on val by ``tanimoto_density`` (κ=1 mean Tanimoto), so a loss that shifts
the posterior's scale is not penalised by the selection. ``table.md`` and ``results.json`` in ``out``
hold the comparison.

Its table: docs/evidence/encoder_ablation.md (the variants' table, runs/enc_abl/table.md), with the command above.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import ConfigError, InputFileError
from engine.progress import run_to_end

from training.calibration.calibrate import Calibration, CalibrationDone, calibrate_encoder, load_encoder
from training.core.checkpoint import write_json_atomic
from training.core.loop import torch_threads
from training.calibration.oof_posteriors import posterior_summary
from training.data.spectra import SHIPPABLE_LICENSES, iter_load_labelled_spectra
from training.encoder.train_encoder import (
    EncoderTrainConfig,
    StepDone,
    TrainingFinished,
    TrainingStopped,
    predict_posteriors,
    train_encoder,
    training_split,
)

BASE: dict[str, Any] = dict(
    preset="small", encoder={"dropout": 0.3}, weight_decay=0.1, epochs=7, lr=5e-4, warmup_steps=300,
    select_metric="tanimoto_density", patience=4, seed=0,
)  # fmt: skip

# name -> (what it changes, overrides of BASE; "encoder" entries merge into BASE's)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "baseline": ("BCE, no EMA, flat head, no augmentation", {}),
    "cosine": ("cosine loss instead of BCE", dict(bce_weight=0.0, cosine_weight=1.0)),
    "bce+cosine": ("BCE + cosine loss", dict(cosine_weight=1.0)),
    "ema": ("EMA of the weights, decay 0.995", dict(ema_decay=0.995)),
    "grow": ("MIST growing head, 256 -> 4096 bits (4 levels)", dict(encoder={"grow_levels": 4})),
    "augment": ("peak dropout 0.2 + intensity noise 0.3", dict(peak_dropout=0.2, intensity_noise=0.3)),
    "wide": ("d_model 512, d_ff 1024, head 512", dict(encoder={"d_model": 512, "d_ff": 1024, "head_hidden": 512})),
    "all-licences": ("train on every licence (val stays licence-clean)", dict(licenses=None)),
    "+negative": ("also [M-H]- spectra (negative mode), one encoder for both modes",
                  dict(adducts=("[M+H]+", "[M+Na]+", "[M-H]-"))),
    "grow+negative": ("the growing head and the [M-H]- spectra together",
                      dict(encoder={"grow_levels": 4}, adducts=("[M+H]+", "[M+Na]+", "[M-H]-"))),
    "substructure": ("MIST's substructure task: each peak predicts its fragment's fingerprint (512 bits, weight 0.5)",
                     dict(encoder={"fragment_bits": 512}, substructure_weight=0.5)),
    "grow+negative+substructure": ("grow+negative with the substructure task",
                                   dict(encoder={"grow_levels": 4, "fragment_bits": 512}, substructure_weight=0.5,
                                        adducts=("[M+H]+", "[M+Na]+", "[M-H]-"))),
}
# The val spectra every variant is scored on: positive mode (the table's columns) and [M-H]- (its own
# columns, for the variants that train on it).
SCORED_ADDUCTS = ("[M+H]+", "[M+Na]+", "[M-H]-")


def variant_config(name: str, mgf: str, out: Path, *, extra: dict[str, Any] | None = None,
                   threads: int = 1, cache_dir: str | None = None) -> EncoderTrainConfig:  # fmt: skip
    """The :class:`EncoderTrainConfig` of variant ``name`` (``extra`` overrides it further)."""
    if name not in VARIANTS and extra is None:
        raise ConfigError(f"Unknown variant {name!r}; choose from {', '.join(VARIANTS)} (or give --extra).")
    overrides = {**(VARIANTS[name][1] if name in VARIANTS else {}), **(extra or {})}
    encoder = {**BASE["encoder"], **overrides.pop("encoder", {})}
    folder = out / name
    resume = (folder / "checkpoint").exists()
    return EncoderTrainConfig(mgf=mgf, out_dir=str(folder), **{**BASE, **overrides, "encoder": encoder},
                              threads=threads, cache_dir=cache_dir, resume=resume)  # fmt: skip


def _finished(folder: Path) -> bool:
    return (folder / "encoder.safetensors").is_file() and (folder / "metrics.json").is_file()


def run_variant(config: EncoderTrainConfig) -> Iterator[Any]:
    """Train (or resume, or skip when done), calibrate; yields training events then the Calibration."""
    folder = Path(config.out_dir)
    if not _finished(folder):
        gen = train_encoder(config)
        try:
            for event in gen:
                yield event
                if isinstance(event, TrainingStopped):
                    return None
        finally:
            gen.close()
    cal_path = folder / "calibration.json"
    if not cal_path.is_file():
        for event in calibrate_encoder(folder, cache_dir=config.cache_dir, threads=config.threads):
            if isinstance(event, CalibrationDone):
                event.calibration.save(cal_path)
    return Calibration.load(cal_path)


def _scores(posteriors, val, cal: Calibration) -> dict[str, Any]:
    s = posterior_summary(posteriors, val, cal.threshold_for_kappa(1.0))
    return {
        "fidelity": s["kappa1_calibrated"]["mean_fidelity"],
        "low": s["kappa1_calibrated"]["bins"]["low"],
        "tanimoto_k1": s["kappa1"]["mean_fidelity"],
        "low_k1": s["kappa1"]["bins"]["low"],
        "ap_micro": s["ap_micro"],
        "ap_macro": s["ap_macro"],
        "t_kappa1": round(cal.threshold_for_kappa(1.0), 5),
        "val_spectra": s["spectra"],
        "val_structures": s["structures"],
    }


def score_variant(folder: Path, val, threads: int = 1) -> dict[str, Any]:
    """Val metrics of the encoder in ``folder`` (see the module docstring) on the positive-mode spectra of
    ``val``, and under ``negative`` on its ``[M-H]-`` spectra when the encoder was trained on them."""
    cal = Calibration.load(folder / "calibration.json")
    model = load_encoder(folder)
    trained_on = json.loads((folder / "train_config.json").read_text()).get("adducts") or ["[M+H]+", "[M+Na]+"]
    positive = val.subset(np.flatnonzero(val.polarity > 0))
    with torch_threads(threads):
        t0 = time.perf_counter()
        post = predict_posteriors(model, positive, 256)
        seconds = time.perf_counter() - t0
    metrics = json.loads((folder / "metrics.json").read_text())
    out = {
        **_scores(post, positive, cal.for_polarity("positive")),
        "spectra_per_s": round(len(positive) / seconds, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_minutes": metrics.get("train_minutes"),
        "best_epoch": metrics.get("best_epoch"),
        "train_spectra": metrics["data"]["train"]["spectra"],
    }
    negative = val.subset(np.flatnonzero((val.polarity < 0) & np.isin(val.adduct, trained_on)))
    if len(negative):
        with torch_threads(threads):
            post = predict_posteriors(model, negative, 256)
        out["negative"] = _scores(post, negative, cal.for_polarity("negative"))
    return out


def score_ensemble(folders: Sequence[Path], data, val, threads: int = 1) -> dict[str, Any]:
    """Val metrics (as :func:`score_variant`) of the mean posterior of the encoders in ``folders``.

    The ensemble is calibrated like one encoder: per ion mode, on the training spectra of its members'
    recipe (the first member's ``train_config.json`` without cross-fitting or subsetting, so the five
    out-of-fold encoders of ``training.calibration.oof_posteriors`` are calibrated on all of ``FOLD=train``).
    ``spectra/s`` is the whole ensemble's, one thread.
    """
    if not folders:
        raise ConfigError("An ensemble needs at least one encoder folder.")
    recipe = json.loads((folders[0] / "train_config.json").read_text())
    config = EncoderTrainConfig.from_dict(
        {**recipe, "resume": False, "cv_folds": None, "cv_fold": None, "max_train_spectra": None}
    )
    train = training_split(config, data).train
    train = train.subset(np.flatnonzero(np.isin(train.adduct, config.adducts)))
    scored = val.subset(np.flatnonzero(np.isin(val.adduct, config.adducts)))
    train_sum = val_sum = None
    seconds = 0.0
    parameters = 0
    minutes = 0.0
    for folder in folders:
        model = load_encoder(folder)
        parameters += sum(p.numel() for p in model.parameters())
        minutes += json.loads((folder / "metrics.json").read_text()).get("train_minutes") or 0.0
        with torch_threads(threads):
            pt = predict_posteriors(model, train, 256)
            t0 = time.perf_counter()
            pv = predict_posteriors(model, scored, 256)
            seconds += time.perf_counter() - t0
        train_sum = pt if train_sum is None else train_sum + pt
        val_sum = pv if val_sum is None else val_sum + pv
    pt, pv = train_sum / len(folders), val_sum / len(folders)
    cals = {}
    for mode, rows in (("positive", train.polarity > 0), ("negative", train.polarity < 0)):
        if rows.any():
            cals[mode] = Calibration.from_posteriors(pt[rows], train.n_true_bits[rows], source=f"ensemble {mode}")
    out: dict[str, Any] = {}
    for mode in ("positive", "negative"):
        rows = np.flatnonzero(scored.polarity > 0 if mode == "positive" else scored.polarity < 0)
        if len(rows) and mode in cals:
            out[mode] = _scores(pv[rows], scored.subset(rows), cals[mode])
    if "positive" not in out:
        raise ConfigError(f"The ensemble of {[str(f) for f in folders]} scores no positive-mode val spectrum; "
                          "the table's columns are positive mode.")  # fmt: skip
    return {**out["positive"], **({"negative": out["negative"]} if "negative" in out else {}),
            "spectra_per_s": round(len(scored) / seconds, 1), "parameters": parameters,
            "train_minutes": round(minutes, 2), "members": [str(f) for f in folders],
            "train_spectra": len(train)}  # fmt: skip


def format_table(results: dict[str, dict[str, Any]]) -> str:
    head = ("| variant | what changes | val fidelity (t_κ=1) | low bin | Tanimoto κ=1 (density) | AP micro | "
            "AP macro | params | spectra/s | train min |")  # fmt: skip
    rows = [head, "|" + " --- |" * 10]
    base = results.get("baseline")
    negatives = []
    for name, r in results.items():
        if r.get("negative"):
            n = r["negative"]
            negatives.append(f"- {name}, `[M-H]-` val ({n['val_spectra']} spectra of {n['val_structures']} "
                             f"structures): fidelity {n['fidelity']:.3f}, low bin {100 * n['low']:.0f}%, Tanimoto κ=1 "
                             f"{n['tanimoto_k1']:.3f}, AP micro {n['ap_micro']:.3f} / macro {n['ap_macro']:.3f}")
        delta = f" ({r['fidelity'] - base['fidelity']:+.3f})" if base and name != "baseline" else ""
        rows.append(
            f"| {name} | {r.get('description', '')} | {r['fidelity']:.3f}{delta} | {100 * r['low']:.0f}% | "
            f"{r['tanimoto_k1']:.3f} | {r['ap_micro']:.3f} | {r['ap_macro']:.3f} | {r['parameters'] / 1e6:.1f}M | "
            f"{r['spectra_per_s']:.0f} | {r['train_minutes']} |"
        )
    return "\n".join(rows + ([""] + negatives if negatives else [])) + "\n"


def parse_ensembles(specs: Sequence[str]) -> dict[str, list[Path]]:
    """``["NAME=DIR,DIR"]`` -> ``{NAME: [DIR, DIR]}``; every folder must hold a finished encoder."""
    out: dict[str, list[Path]] = {}
    for spec in specs:
        name, eq, dirs = spec.partition("=")
        folders = [Path(d.strip()) for d in dirs.split(",") if d.strip()]
        if not eq or not name.strip() or not folders:
            raise ConfigError(f"--ensemble {spec!r}: write NAME=DIR,DIR,... (a row name, then encoder folders).")
        for f in folders:
            if not _finished(f):
                raise ConfigError(f"--ensemble {name}: {f} holds no finished encoder (encoder.safetensors and "
                                  "metrics.json); train it first or fix the path.")  # fmt: skip
        out[name.strip()] = folders
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.studies.encoder_ablation", description=__doc__.split("\n\n")[0])
    p.add_argument("--mgf", required=True, help="labelled MGF (the shared massbank_dev.mgf.gz)")
    p.add_argument("--out", required=True, help="folder of the variants' runs, table.md and results.json")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated, from: {', '.join(VARIANTS)} ('' = none, e.g. to score only --ensemble rows)")
    p.add_argument("--name", help="a new variant's name (with --extra)")
    p.add_argument("--extra", type=json.loads, help="JSON overrides of the base recipe for --name, e.g. "
                   "'{\"ema_decay\": 0.995, \"cosine_weight\": 1.0}'")  # fmt: skip
    p.add_argument("--ensemble", action="append", default=[], metavar="NAME=DIR,DIR,...",
                   help="also score the mean posterior of these finished encoder folders as row NAME (repeatable), "
                        "e.g. the out-of-fold encoders: 'oof5=runs/oof_gn/fold_0,...'")  # fmt: skip
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache-dir")
    p.add_argument("--score-only", action="store_true", help="only (re)score the finished variants")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [args.name] if args.name else [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        ensembles = parse_ensembles(args.ensemble)
        configs = {n: variant_config(n, args.mgf, out, extra=args.extra if args.name else None,
                                     threads=args.threads, cache_dir=args.cache_dir) for n in names}  # fmt: skip
        for name, config in configs.items():
            if args.score_only:
                continue
            if name not in VARIANTS:
                Path(config.out_dir).mkdir(parents=True, exist_ok=True)
                write_json_atomic(Path(config.out_dir) / "ablation.json", {"description": json.dumps(args.extra)})
            print(f"== {name}: {json.dumps({k: v for k, v in config.to_dict().items() if k in _SHOWN})}", flush=True)
            last = 0.0
            for event in run_variant(config):
                if isinstance(event, StepDone) and time.monotonic() - last > 60:
                    last = time.monotonic()
                    print(f"{name} step {event.step} epoch {event.epoch} loss {event.loss:.4f}", flush=True)
                elif isinstance(event, TrainingFinished):
                    print(f"{name} finished ({event.reason})", flush=True)
        loaded: dict[str, Any] = {}

        def val_and_data():  # read once, with the feature settings every variant shares
            if not loaded:
                base = variant_config("baseline", args.mgf, out, threads=args.threads, cache_dir=args.cache_dir)
                settings = replace(base.feature_settings(), adducts=SCORED_ADDUCTS)
                loaded["data"] = run_to_end(iter_load_labelled_spectra(args.mgf, settings, cache_dir=args.cache_dir))
                loaded["val"] = loaded["data"].select(
                    ("val",), licenses=SHIPPABLE_LICENSES, exclude_unit_resolution=True
                )
            return loaded["val"], loaded["data"]

        results_path = out / "results.json"
        results = json.loads(results_path.read_text()) if results_path.is_file() else {}
        for name in dict.fromkeys([*VARIANTS, *names, *results]):
            folder = out / name
            if name in results and not args.score_only and name not in names:
                continue
            if not (_finished(folder) and (folder / "calibration.json").is_file()):
                continue
            r = score_variant(folder, val_and_data()[0], args.threads)
            desc_path = folder / "ablation.json"
            desc = VARIANTS[name][0] if name in VARIANTS else (
                json.loads(desc_path.read_text())["description"] if desc_path.is_file() else "")
            results[name] = {"description": desc, **r}
            print(f"{name}: fidelity {r['fidelity']:.4f} low {r['low']:.3f} AP micro {r['ap_micro']:.4f}", flush=True)
        for name, folders in ensembles.items():
            r = score_ensemble(folders, val_and_data()[1], val_and_data()[0], args.threads)
            results[name] = {"description": f"mean posterior of {len(folders)} encoders", **r}
            print(f"{name}: fidelity {r['fidelity']:.4f} low {r['low']:.3f} AP micro {r['ap_micro']:.4f}", flush=True)
        order = [n for n in VARIANTS if n in results] + [n for n in results if n not in VARIANTS]
        results = {n: results[n] for n in order}
        write_json_atomic(results_path, results)
        (out / "table.md").write_text(format_table(results))
        print(format_table(results))
    except (ConfigError, InputFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


_SHOWN = {"encoder", "bce_weight", "cosine_weight", "ema_decay", "peak_dropout", "intensity_noise", "licenses",
          "epochs", "select_metric", "substructure_weight", "adducts", "simulated"}


if __name__ == "__main__":
    sys.exit(main())
