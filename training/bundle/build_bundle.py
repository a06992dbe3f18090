"""Assemble a model bundle (and its model card) from the outputs of the training stages.

::

    python -m training.bundle.build_bundle \\
        --decoder /work/runs/pt_small            # pretraining run (newest checkpoint), a checkpoint or a bundle
        --encoder /work/runs/encoder_v1          # encoder run: weights, config, calibration.json
        [--adapter /work/runs/adapt_v1/adapter]  # peft LoRA adapter (adapter_config.json + safetensors)
        [--evaluation eval/table.md]             # Markdown put into the card's "Evaluation" section
        [--bit-legend 50000]                     # bit legend from that many molecules of the corpus
        [--interpolate BUNDLE 0.5]               # mix the weights with the decoder the stage started from
        --name msgpt-small-v1 --out resources/default_model

Decoder weights are written in bfloat16 by default (half the size of float32; the engine samples in
bf16 where the CPU supports it anyway, and casts back to float32 elsewhere); the encoder stays float32,
the precision its calibration thresholds were computed in, unless ``--encoder-dtype fp16`` (or bf16)
stores it rounded: the calibration must then have been computed on the rounded weights
(``python -m training.calibration.calibrate --round-weights fp16``), which is checked. An ``--encoder`` bundle's
encoder keeps the storage of its file by default. The card (``MODEL_CARD.md``) is
written from what the runs recorded — data selection, parameter counts, steps, wall time, encoder
metrics, calibration — so it cannot drift from the weights; ``--evaluation`` adds the measured table.
The finished bundle is loaded once with :func:`engine.model.bundle.load_bundle` to prove it is whole.

``--decoder`` may also be a model bundle: its decoder, unchanged, beside a new encoder. The bundle's
record of the decoder's training (``training.decoder_summary`` and ``decoder_stages`` in its
``config.json``) and its ``known_structures.npz`` travel with the weights.

The bundle also gets ``known_structures.npz`` (the novelty flag's training corpus): the structures of
every corpus the decoder's stages were pretrained on, with those of a bundle a stage started from
(:func:`training_structures`); when a stage's corpus cannot be found, none is written and the command
says how to build it by hand (``python -m training.bundle.known_structures``).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from engine.errors import ConfigError, MsgptError
from engine.model.bitlegend import FILE_NAME as LEGEND_FILE
from engine.model.bundle import add_bundle_file, bundle_checksum, load_bundle, save_bundle
from engine.model.decoder import parameter_counts
from engine.model.known import FILE_NAME as KNOWN_FILE
from engine.model.known import KnownStructures
from engine.model.querying import Calibration

from training.bundle.bit_legend import build_legend, corpus_smiles, reservoir_sample
from training.calibration.calibrate import load_encoder, round_weights, rounded_note
from training.core.checkpoint import latest_checkpoint, load_decoder
from training.bundle.known_structures import corpus_keys
from training.data.spectra import DEFAULT_ADDUCTS
from training.bundle.model_card import _curve_text  # noqa: F401  (re-exported)
from training.bundle.model_card import _size_mb, render_card
from training.bundle.model_card import (  # noqa: F401  (re-exported)
    _adduct_words,
    _card_calibration,
    _card_components,
    _card_evaluation,
    _card_files,
    _card_limits,
    _card_title,
    _card_training,
    _card_training_data,
    _card_what_it_does,
    _corpus_line,
    _decoder_stage_line,
    _device_run,
    _earlier_stage_lines,
    _encoder_data_line,
    _encoder_training_lines,
    _modes_of,
    _noise_source,
    _overlap_words,
    _simulated_line,
)

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def resolve_decoder_checkpoint(src: Path) -> Path:
    """A checkpoint directory or a bundle as given, or the newest checkpoint of a run directory."""
    if (src / "decoder_config.json").is_file() or is_bundle(src):
        return src
    found = latest_checkpoint(src)
    if found is None:
        raise ConfigError(
            f"{src} is neither a decoder checkpoint, a pretraining run with checkpoints nor a model bundle.")
    return found


def bundle_decoder_summary(bundle: Path) -> dict:
    """The decoder training record of a bundle whose decoder is reused as it is.

    Bundles since ``decoder_summary`` existed keep the whole summary; older ones keep the stage list, whose
    last entry then stands for the decoder's own stage (steps, batch, lr, tokens, hours).
    """
    config = _json(bundle / "config.json")
    training = config.get("training", {})
    checksum = bundle_checksum(bundle)
    origin = f"the decoder of bundle {config.get('name', bundle.name)} [{checksum[:12]}], unchanged"
    stages = training.get("decoder_stages") or [
        {"source": f"bundle {config.get('name', bundle.name)}", "step": training.get("decoder_step", 0)}]
    if training.get("decoder_summary"):  # the first bundle that reused it stays named
        return {"origin": origin, **training["decoder_summary"], "earlier_stages": stages[:-1]}
    last = stages[-1]
    run, _, checkpoint = last["source"].rpartition("/")
    summary = {"run": run or last["source"], "checkpoint": checkpoint, "step": last["step"],
               "config": {k: last[k] for k in ("batch_size", "lr", "min_lr", "warmup_steps") if k in last},
               "earlier_stages": stages[:-1], "origin": origin}
    summary.update({k: last[k] for k in ("tokens_seen", "epochs", "train_hours") if k in last})
    return summary


def decoder_training_summary(checkpoint: Path) -> dict:
    """Steps, records and tokens seen, wall time and last validation of the pretraining run."""
    if is_bundle(checkpoint):
        return bundle_decoder_summary(checkpoint)
    run = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    config = _json(run / "pretrain_config.json")
    records = _jsonl(run / "metrics.jsonl")
    state = _json(checkpoint / "state.json") or _json(checkpoint / "trainer_state.json")
    step = state.get("step") or max((r["step"] for r in records if r.get("kind") == "train"), default=0)
    train = [r for r in records if r.get("kind") == "train" and r["step"] <= step]
    val = [r for r in records if r.get("kind") == "val" and r["step"] <= step]
    corpus = _json(Path(config.get("corpus", "")) / "manifest.json") if config.get("corpus") else {}
    summary = {"run": run.name, "checkpoint": checkpoint.name, "step": step, "config": config}
    if corpus:
        per_record = corpus["n_tokens"] / max(corpus["n_records"], 1)
        seen = step * config.get("batch_size", 0) * config.get("grad_accum", 1)
        summary.update(corpus_records=corpus["n_records"], corpus_tokens=corpus["n_tokens"],
                       records_seen=seen, tokens_seen=round(seen * per_record), epochs=seen / corpus["n_records"])
        report = _json(Path(config["corpus"]) / "report.json")
        summary["corpus_inputs"] = {Path(k.split(" (")[0]).name + (" (MGF structures)" if "(MGF" in k else ""): v
                                    for k, v in report.get("inputs", {}).items()}
    if len(train) > 1:  # active time: sum of gaps between logs, ignoring pauses (stops and resumes)
        gaps = [b["time"] - a["time"] for a, b in zip(train, train[1:]) if 0 < b["time"] - a["time"] < 600]
        summary["train_hours"] = sum(gaps) / 3600
        summary["tokens_per_s"] = sorted(r["tokens_per_s"] for r in train)[len(train) // 2]
    if val:
        keys = ("step", "loss", "accuracy", "noisy_loss", "noisy_accuracy")
        summary["val"] = {k: val[-1][k] for k in keys if k in val[-1]}
        summary["val_curve"] = [[r["step"], r["loss"], r.get("noisy_loss")] for r in val]
    if config.get("init_decoder"):
        stages = earlier_decoder_stages(Path(config["init_decoder"]))
        # The init source may be a folder rewritten since (resources/default_model replaced by a bundle built
        # from this very run): a stage cannot come before itself, so the list ends before its first mention.
        own = f"{summary['run']}/{summary['checkpoint']}"
        mentions = [i for i, st in enumerate(stages) if st.get("source") == own]
        summary["earlier_stages"] = stages[: mentions[0]] if mentions else stages
    return summary


def stage_record(summary: dict) -> dict:
    """The few numbers of one pretraining stage that a later bundle carries in its config.json."""
    cfg = summary.get("config", {})
    record = {"source": f"{summary['run']}/{summary['checkpoint']}", "step": summary["step"]}
    record.update({k: cfg[k] for k in ("batch_size", "lr", "min_lr", "warmup_steps") if k in cfg})
    record.update({k: summary[k] for k in ("tokens_seen", "epochs", "train_hours", "interpolation") if k in summary})
    return record


def earlier_decoder_stages(src: Path) -> list[dict]:
    """The pretraining stages behind an ``--init-decoder`` source, oldest first.

    A bundle lists them in ``config.json`` (``training.decoder_stages``; bundles written before that
    field existed give their name and step only); a run directory or checkpoint is summarised, with
    the stages behind it.
    """
    bundle = _json(src / "config.json")
    if "decoder" in bundle:
        training = bundle.get("training", {})
        return training.get("decoder_stages") or [
            {"source": f"bundle {bundle.get('name', src.name)}", "step": training.get("decoder_step", 0)}
        ]
    summary = decoder_training_summary(resolve_decoder_checkpoint(src))
    return [*summary.get("earlier_stages", []), stage_record(summary)]


def training_structures(checkpoint: Path) -> tuple[KnownStructures | None, str]:
    """The structures every pretraining stage behind ``checkpoint`` read (None, and why, when a stage's
    corpus is unknown): the union of the stages' corpora and of the known set of a bundle one started from."""
    if is_bundle(checkpoint):  # a decoder reused from a bundle: the set that bundle ships
        if not (checkpoint / KNOWN_FILE).is_file():
            return None, f"bundle {checkpoint}, whose decoder is reused, ships no {KNOWN_FILE}"
        return KnownStructures.load(checkpoint / KNOWN_FILE), ""
    hashes, names = [], []
    run = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    while True:
        config = _json(run / "pretrain_config.json")
        corpus = Path(config["corpus"]) if config.get("corpus") else None
        if corpus is None or not (corpus / "manifest.json").is_file():
            return None, f"the corpus of pretraining run {run} ({corpus}) is not there"
        hashes.append(KnownStructures.from_keys(corpus_keys(corpus)).hashes)
        names.append(corpus.name)
        init = Path(config["init_decoder"]) if config.get("init_decoder") else None
        if init is None:
            break
        if (init / "config.json").is_file():  # a stage started from a bundle: its known set, when it ships one
            if not (init / KNOWN_FILE).is_file():
                return None, f"bundle {init}, which a stage started from, ships no {KNOWN_FILE}"
            known = KnownStructures.load(init / KNOWN_FILE)
            hashes.append(known.hashes)
            names.append(f"bundle {_json(init / 'config.json').get('name') or init.name}")  # not its folder's name
            break
        run = resolve_decoder_checkpoint(init)
        run = run.parent.parent if run.parent.name == "checkpoints" else run.parent
    merged = np.unique(np.concatenate(hashes))
    return KnownStructures(merged, f"{merged.size:,} structures of the decoder's pretraining corpora "
                                   f"({', '.join(dict.fromkeys(names))})"), ""


def stored_dtype(weights: Path) -> str:
    """The DTYPES name of the floating-point tensors in a safetensors file (fp32 when they are mixed)."""
    with safe_open(str(weights), "pt") as f:
        kinds = {f.get_slice(k).get_dtype() for k in f.keys()} & {"F16", "BF16", "F32"}
    return {frozenset({"F16"}): "fp16", frozenset({"BF16"}): "bf16"}.get(frozenset(kinds), "fp32")


def interpolate_decoder(decoder: torch.nn.Module, other_src: Path, alpha: str) -> dict:
    """Replace ``decoder``'s weights by ``(1 - alpha) * other + alpha * decoder`` (weight-space interpolation
    between a fine-tuned model and the one it started from, as in WiSE-FT) and say what was mixed."""
    try:
        a = float(alpha)
    except ValueError:
        a = float("nan")
    if not 0.0 < a < 1.0:
        raise ConfigError(f"--interpolate weight {alpha!r} must be a number between 0 and 1 (the share of --decoder; "
                          "e.g. 0.5 for the midpoint).")
    other, _ = load_decoder(resolve_decoder_checkpoint(other_src))
    if other.config.to_dict() != decoder.config.to_dict():
        raise ConfigError(f"--interpolate {other_src}: its decoder has another configuration than --decoder's; "
                          "only decoders of the same preset and vocabulary can be interpolated.")
    theirs = other.state_dict()  # computed from both whole state dicts first: tied weights appear under two names
    mixed = {name: ((1.0 - a) * theirs[name].float() + a * w.float()).to(w.dtype) if w.is_floating_point() else w
             for name, w in decoder.state_dict().items()}
    decoder.load_state_dict(mixed)
    name = (f"the decoder of bundle {_json(other_src / 'config.json')['name']} [{bundle_checksum(other_src)[:12]}]"
            if is_bundle(other_src) else other_src.name)
    return {"with": name, "alpha": a}


def is_bundle(folder: Path) -> bool:
    """A model bundle (config.json + both weight files), as opposed to a training run directory."""
    return all((folder / f).is_file() for f in ("config.json", "encoder.safetensors", "decoder.safetensors"))


def build(args: argparse.Namespace) -> Path:
    """Write the bundle ``args.out`` from the runs (or bundles) ``args`` names, with its extra files and model
    card; the bundle is loaded once to prove it is whole. Returns its folder."""
    dtype = DTYPES[args.dtype]
    checkpoint = resolve_decoder_checkpoint(Path(args.decoder))
    decoder, tokenizer = load_decoder(checkpoint)
    encoder_dir = Path(args.encoder)
    encoder, enc_summary, adducts = _encoder_source(encoder_dir)
    calibration_file = Path(args.calibration) if args.calibration else encoder_dir / "calibration.json"
    calibration = Calibration.load(calibration_file)
    _round_encoder(args, encoder, encoder_dir, calibration, calibration_file)
    dec_summary = decoder_training_summary(checkpoint)  # before --force removes --out: it may be a stage's source
    if args.interpolate:
        dec_summary["interpolation"] = interpolate_decoder(decoder, Path(args.interpolate[0]), args.interpolate[1])
        if dec_summary.get("origin"):  # a bundle's decoder, no longer as it was
            dec_summary["origin"] = dec_summary["origin"].replace(", unchanged", ", interpolated (below)")
    out = Path(args.out)
    if out.exists():
        if not args.force:
            raise ConfigError(f"{out} exists; pass --force to replace it.")
        shutil.rmtree(out)
    save_bundle(
        out, decoder=decoder.eval(), encoder=encoder, tokenizer=tokenizer, calibration=calibration,
        name=args.name, dtype=dtype, encoder_dtype=DTYPES[args.encoder_dtype], supported_adducts=adducts,
        extra={"training": {"decoder_checkpoint": f"{dec_summary['run']}/{dec_summary['checkpoint']}",
                            "decoder_step": dec_summary["step"], "encoder_run": encoder_dir.name,
                            "encoder_summary": enc_summary,
                            "decoder_summary": {k: v for k, v in dec_summary.items()
                                                if k != "earlier_stages"},
                            "decoder_stages": [*dec_summary.get("earlier_stages", []), stage_record(dec_summary)]}},
    )
    _add_known_structures(out, checkpoint)
    _add_bit_legend(out, args.bit_legend, [encoder_dir, checkpoint], dec_summary)
    adapter_info = _copy_adapter(out, Path(args.adapter)) if args.adapter else None
    cal_summary = _calibration_summary(calibration)
    bundle = load_bundle(out, device="cpu")  # proves the bundle is whole (checksums, shapes, tokenizer)
    info = {
        "decoder": dec_summary, "encoder": enc_summary, "calibration": cal_summary, "adapter": adapter_info,
        "decoder_parameters": parameter_counts(decoder),
        "encoder_parameters": sum(p.numel() for p in encoder.parameters()),
        "checksum": bundle.checksum, "size_mb": _size_mb(out), "dtype": args.dtype,
        "encoder_dtype": args.encoder_dtype,
        "supported_adducts": list(bundle.supported_adducts),
        "built": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
    }
    evaluation = Path(args.evaluation).read_text() if args.evaluation else None
    (out / "MODEL_CARD.md").write_text(render_card(args.name, out, info, evaluation))
    assert bundle_checksum(out) == bundle.checksum  # the card is not part of the checksum
    return out


def _encoder_source(encoder_dir: Path) -> tuple[torch.nn.Module, dict, tuple[str, ...]]:
    """The encoder to ship (inference part only), the record of its training and the ion types it saw, from an
    encoder run or from a bundle whose encoder and calibration are reused beside a new decoder."""
    if is_bundle(encoder_dir):  # a new decoder beside the encoder and calibration of an existing model
        source = load_bundle(encoder_dir, device="cpu", use_adapter=False, precision="fp32")
        encoder = source.encoder.float().eval()
        enc_summary = source.config.get("training", {}).get("encoder_summary") or {
            "metrics": {}, "train_config": {}, "note": f"the encoder of bundle {source.name} [{source.checksum[:12]}]"}
        adducts = source.supported_adducts
    else:
        encoder = load_encoder(encoder_dir)
        enc_summary = {"metrics": _json(encoder_dir / "metrics.json"),
                       "train_config": _json(encoder_dir / "train_config.json")}
        adducts = tuple(enc_summary["train_config"].get("adducts") or DEFAULT_ADDUCTS)  # what the encoder saw
    return encoder.for_inference(), enc_summary, adducts  # a training-only head (the substructure task's) does not ship


def _round_encoder(args: argparse.Namespace, encoder: torch.nn.Module, encoder_dir: Path, calibration: Calibration,
                   calibration_file: Path) -> None:
    """Settle ``args.encoder_dtype`` (default: a bundle's own storage, else fp32) and round the encoder's weights to
    it, after checking that the calibration was computed on weights rounded so."""
    # a bundle's encoder keeps the storage it was calibrated in unless told otherwise
    if args.encoder_dtype is None:
        args.encoder_dtype = stored_dtype(encoder_dir / "encoder.safetensors") if is_bundle(encoder_dir) else "fp32"
    if args.encoder_dtype == "fp32":
        return
    curves = [calibration, *([calibration.negative] if calibration.negative is not None else [])]
    if not all(rounded_note(args.encoder_dtype) in c.source for c in curves):
        raise ConfigError(
            f"--encoder-dtype {args.encoder_dtype} stores rounded encoder weights, but {calibration_file} was "
            f"not computed on them (its source: {calibration.source!r}). Run python -m training.calibration.calibrate "
            f"--encoder {encoder_dir} --round-weights {args.encoder_dtype} --out CAL.json and pass "
            "--calibration CAL.json.")
    round_weights(encoder, args.encoder_dtype)  # what the file will hold, for the proof load below


def _add_known_structures(out: Path, checkpoint: Path) -> None:
    """Add the novelty flag's training corpus to the bundle, or say why there is none and how to build it."""
    known, why = training_structures(checkpoint)
    if known is not None:
        add_bundle_file(out, known.save(out / KNOWN_FILE))
    else:
        print(f"note: no {KNOWN_FILE} (the novelty flag's training corpus): {why}. Build it with "
              f"python -m training.bundle.known_structures --corpus CORPUS --out {out / KNOWN_FILE} --bundle {out}",
              file=sys.stderr)


def _add_bit_legend(out: Path, rows: int, sources: list[Path], dec_summary: dict) -> None:
    """Add a bit legend: built from ``rows`` molecules of the last stage's corpus, else (``rows`` 0) the legend of
    the first source bundle that has one."""
    # the legend describes the fingerprint, not the model: a source bundle's one still holds
    legends = [d / LEGEND_FILE for d in sources if is_bundle(d) and (d / LEGEND_FILE).is_file()]
    if not rows and legends:
        add_bundle_file(out, legends[0])
    if not rows:
        return
    corpus = Path(dec_summary["config"].get("corpus", ""))
    if not (corpus / "manifest.json").is_file():
        raise ConfigError(f"--bit-legend reads the last pretraining stage's corpus ({corpus}), which is not "
                          "there: build the legend where the corpus is, or leave --bit-legend out to keep "
                          "a source bundle's legend.")
    sample = reservoir_sample(corpus_smiles(corpus), rows)
    gen = build_legend(sample, source=f"{len(sample):,} molecules sampled (seed 0) from {corpus.name}")
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            add_bundle_file(out, stop.value.save(out / LEGEND_FILE))
            break


def _copy_adapter(out: Path, src: Path) -> dict:
    """Copy the LoRA adapter folder ``src`` into the bundle's ``adapter/``; returns its training summary."""
    missing = [f for f in ADAPTER_FILES if not (src / f).is_file()]
    if missing:
        raise ConfigError(f"{src} lacks {', '.join(missing)}: give the adapter folder written by training.decoder.adapt.")
    (out / "adapter").mkdir()
    for f in ADAPTER_FILES:
        shutil.copy2(src / f, out / "adapter" / f)
    return _json(src / "adapter_summary.json") or {}


def _calibration_summary(calibration: Calibration) -> dict:
    """D_enc and the thresholds at κ = 0.95, 1.0 and 1.5 for the card, with the negative-mode curve's."""
    summary = {"d_enc": calibration.d_enc,
               "thresholds": {str(k): calibration.threshold_for_kappa(k) for k in (0.95, 1.0, 1.5)}}
    if calibration.negative is not None:
        neg = calibration.negative
        summary["negative"] = {"d_enc": neg.d_enc,
                               "thresholds": {str(k): neg.threshold_for_kappa(k) for k in (0.95, 1.0, 1.5)}}
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--decoder", required=True,
                   help="pretraining run directory, decoder checkpoint, or a model bundle whose decoder to reuse")
    p.add_argument("--encoder", required=True,
                   help="encoder training run directory, or a model bundle whose encoder and calibration to reuse")
    p.add_argument("--calibration", help="calibration.json (default: the encoder run's)")
    p.add_argument("--adapter", help="LoRA adapter folder (adapter_config.json + adapter_model.safetensors)")
    p.add_argument("--evaluation", help="Markdown file with the evaluation table for the model card")
    p.add_argument("--name", required=True, help="bundle name shown to users, e.g. msgpt-small-v1")
    p.add_argument("--out", required=True, help="bundle directory to write")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="weight storage type (default bf16)")
    p.add_argument("--encoder-dtype", choices=sorted(DTYPES), default=None,
                   help="encoder weight storage (default: fp32, or that of an --encoder bundle; fp16 halves it and "
                        "needs a calibration computed on the rounded weights: training.calibration.calibrate --round-weights "
                        "fp16)")
    p.add_argument("--interpolate", nargs=2, metavar=("DECODER", "ALPHA"),
                   help="mix the weights: ALPHA x --decoder + (1 - ALPHA) x this decoder (a run, checkpoint or "
                        "bundle of the same preset), e.g. a new stage with the bundle it started from")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--bit-legend", type=int, default=0, metavar="ROWS",
                   help="also write the bit legend from ROWS molecules of the last stage's corpus (e.g. 50000)")
    args = p.parse_args(argv)
    try:
        out = build(args)
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({_size_mb(out):.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
