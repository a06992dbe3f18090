"""Posterior-aligned adaptation: a LoRA adapter that aligns the decoder with spectrum-derived queries.

Paper, Method "Posterior-Aligned Adaptation" and Appendix "Posterior-Aligned Adaptation"::

    python -m training.decoder.adapt --bundle resources/default_model --mgf massbank_dev.mgf.gz --out runs/adapt \\
        --max-spectra 1000 --steps 500 --warmup-steps 25 --eval-every 50 --write-bundle runs/bundle_pa
    python -m training.decoder.adapt --out runs/adapt --resume                   # continues exactly
    python -m training.decoder.adapt --out runs/adapt --write-bundle runs/bundle_pa  # base bundle + the adapter/
    python -m training.decoder.adapt ... --prepare-only                          # stage 1 alone

**Placement** (:func:`lora_targets`): rank-4 LoRA (α 8, dropout 0.05) on the query-reading pathway
only: the fingerprint encoder's value and output ("combine") projections of every encoder layer, the
shared context projection, and in every cross-attention block the query, key, value and output
projections and both feed-forward projections. Everything else (GPT-2 backbone, LM head, formula
encoder, the rest of the fingerprint encoder) stays frozen. Our attention layers already have
separate q/k/v projections, so nothing needs splitting (the paper splits its fused ones). For the ``paper`` preset that is 41 linear layers and 362,496
trainable parameters, against the paper's 39 layers and 350,212: the paper's fingerprint encoder
has two projections ours lacks (see benchmarks/studies/param_counts.py for the arithmetic).

**Data** (stage 1, cached): FOLD=train spectra (shippable licences, high-resolution, an adduct the
bundle supports, formula and reference SMILES), a seeded subsample of ``max_spectra``. Per spectrum:
the frozen encoder's posterior π (kept above the band's lowest threshold, all that any band query
reads), the oracle fingerprint, the formula and the canonical SAFE target. Its recoverability group
comes from the frozen model's default pool (κ band, M=20, N=5, B=100, adapter off, as the app draws
it): **frozen-hit** if the reference's InChIKey-14 is among the valid, formula-consistent candidates;
else **residual** if the posterior-oracle agreement c = max over the 20 band thresholds of
Tanimoto(1[π>t], z*) is >= 0.40; else **low-coverage**. Every finished spectrum is appended to
``examples.jsonl`` at once, so an interrupted stage continues where it stopped.

**Out-of-fold posteriors** (``--oof runs/oof``, the paper's scale: all train-fold spectra): the shipped
encoder was trained on these spectra, so its in-sample posteriors are far better than what it gives on a
new compound (fidelity at κ=1 0.60 in sample against 0.31 on FOLD=val), and an adapter aligned to them
learns the wrong noise. With ``--oof`` each spectrum's posterior comes from the fold encoder of
:mod:`training.calibration.oof_posteriors` that never saw its structure, and is queried at *that* encoder's band
(``Example.band``; training draws t ~ U over each example's own band). Drawing a pool per spectrum
takes ~1 s, too slow for 31k spectra, and would use the bundle's encoder; ``--grouping expected``
(the default with ``--oof``) decides frozen-hit from forward passes instead: P(reference in the pool)
= 1 - prod_t (1 - p_t)^(B/K) over K = ``group_thresholds`` thresholds spread over the band, p_t the
probability that the sampler writes exactly the reference's SAFE (:func:`pool_hit_probability`);
frozen-hit when P >= 0.5 (about 30 spectra/s on one thread).

    python -m training.decoder.adapt --bundle resources/default_model --mgf massbank_dev.mgf.gz --out runs/adapt_oof \
        --oof runs/oof --all-spectra --steps 3000 --eval-every 250

**Checkpoint selection** uses ``val_spectra`` spectra (one per structure) of FOLD=train structures
held out of adaptation, so FOLD=val stays untouched for the reported numbers (the encoder was trained
on these spectra, as on the adaptation examples, so their posteriors are better than on FOLD=val:
the selection ranks checkpoints, its values are no estimate of accuracy). The metric is
``expected_share``: for each held-out spectrum and 5 thresholds spread over the band, the
probability that the app's sampler (T=1, top-k 50, top-p 0.95) writes exactly the reference's SAFE
token sequence, i.e. the expected share of the pool that is the reference (a lower bound: other
SAFE spellings of the molecule count too). It needs forward passes only (no sampling, no RDKit),
has no sampling noise, and tracks what Top-k measures, since candidates are ranked by how often they
are drawn; teacher-forced token accuracy and NLL are logged beside it. Step 0 (the adapter's
initial B=0, i.e. the frozen model) is evaluated too, so the selected adapter is never worse than
no adapter on this metric.

**Objective** (stage 2), per example: draw t ~ U[t_κmax, t_κmin], z_t = 1[π > t]; loss =
α_g CE(student; y, z_t, C) + λ_g KL(teacher || student) on the same z_t, per token, summed over the
batch's non-padding positions and divided by their number. (α, λ) = (0.05, 2.0) frozen-hit,
(1.0, 1.0) residual, (0.0, 0.5) low-coverage. The teacher is the same model with the adapter
disabled, in eval mode. AdamW (0.9, 0.95), weight decay 0.01, lr 1e-4, linear warm-up then cosine
decay, gradient clipping at 1.0, bf16 autocast where the CPU/GPU computes it natively.

**Resume**: the batch of step s and its thresholds are functions of (seed, s), dropout is re-seeded
from (seed, s), so LoRA weights + AdamW moments + step are the whole state: ``--resume`` continues
bitwise as if never interrupted (tests/test_adapt.py checks it). A checkpoint is written every
``checkpoint_minutes`` and at every evaluation.

Run directory::

    adapt_config.json     the AdaptConfig
    examples_meta.json    what decides the examples (bundle checksum, data selection, band, M, N)
    examples.jsonl        one prepared spectrum per line (or why it was dropped)
    metrics.jsonl         train / val / checkpoint records
    checkpoint/           lora.safetensors, optimizer.safetensors, state.json (for --resume)
    adapter/              the selected adapter (adapter_config.json + adapter_model.safetensors)
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from engine.chem import molecules as chem
from engine.chem.formula import formula_vector, parse_formula
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.errors import BundleError, ConfigError
from engine.model.bundle import ModelBundle, load_bundle, save_adapter
from engine.model.querying import band_thresholds, build_queries
from engine.progress import run_to_end
from engine.spectra.spectrum import Spectrum

from training.core.checkpoint import (
    atomic_folder,
    load_optimizer_state,
    log_metrics,
    optimizer_tensors,
    truncate_metrics,
    write_json_atomic,
)
from training.core.loop import autocast, stop_on_signals, torch_threads
from training.data.oof_data import load_oof
from training.decoder.adapt_config import (
    AdaptConfig,
    CheckpointSaved,
    Finished,
    RESUMABLE_CHANGES,
    SELECT_METRICS,
    Started,
    StepDone,
    Validated,
    lora_targets,
    predicted_lora_parameters,
    trainable_parameters,
)
from training.decoder.adapt_config import FP_TARGET_CHOICES, GROUPINGS, GROUPS, attach_lora  # noqa: F401  (re-exported)
from training.decoder.adapt_examples import (
    Example,
    ExampleDone,
    Prepared,
    Reading,
    Selected,
    _canonical_target,
    _examples_key,
    recoverability_group,
    select_spectra,
)
from training.decoder.adapt_examples import batch_indices, draw_thresholds  # noqa: F401  (re-exported)
from training.decoder.adapt_steps import (
    _sequence_probabilities,
    make_trainer,
    train_step,
    validate,
    write_adapted_bundle,
)
from training.decoder.adapt_steps import adaptation_loss, collate_examples, forward_logits  # noqa: F401  (re-exported)


# -----------------------------------------------------------------------------------------------
# Examples


def prepare_example(bundle: ModelBundle, spectrum: Spectrum, split: str, config: AdaptConfig,
                    thresholds: np.ndarray, posterior: np.ndarray | None = None, amp=nullcontext) -> Example | str:
    """The :class:`Example` of one spectrum, or why it is dropped.

    ``posterior`` (an out-of-fold posterior, queried at ``thresholds``, its encoder's band) replaces
    the bundle encoder's. A train example's group comes from its frozen pool (``grouping`` pool) or
    from :func:`pool_hit_probability` (``expected``).
    """
    target = _canonical_target(spectrum.smiles, bundle.decoder.config.fp_bits)
    if isinstance(target, str):
        return target
    encoded, oracle = target
    if encoded is None:
        return "SAFE encoding failed"
    tokens = np.asarray(bundle.tokenizer.encode(encoded), np.int64)
    if np.any(tokens == bundle.tokenizer.unk_id):
        return "SAFE tokens outside the decoder's vocabulary"
    if len(tokens) > bundle.decoder.config.block_size:
        return "SAFE longer than the decoder's block_size"
    if posterior is None:
        session = SpectrumSession(bundle, spectrum)
        post = session.posterior
    else:
        post = np.asarray(posterior, np.float32)
    keep = np.flatnonzero(post > float(thresholds[0]))
    band = None if posterior is None else (float(thresholds[0]), float(thresholds[-1]))
    group = rank = hit_p = None
    if split == "train" and config.grouping == "pool":
        params = QueryParams(kappa_min=config.kappa_min, kappa_max=config.kappa_max, groups=config.groups,
                             samples_per_group=config.samples_per_group, seed=config.seed, use_adapter=False)
        result = run_to_end(session.run(params))
        coverage, rank = float(result.fidelity), result.reference_rank
        group = recoverability_group(rank is not None, coverage, config.coverage_threshold)
    else:
        coverage = chem.max_tanimoto(oracle, [q.bits for q in build_queries(post, thresholds)])
    example = Example(f"{Path(spectrum.source).name}#{spectrum.index}:{spectrum.id}", split, group, float(coverage),
                      rank, formula_vector(parse_formula(spectrum.formula)).astype(np.int64), tokens, oracle,
                      keep.astype(np.int64), post[keep].astype(np.float32), band)
    if split == "train" and config.grouping == "expected":
        hit_p = pool_hit_probability(bundle.decoder, example, thresholds, config, amp)
        group = recoverability_group(hit_p >= 0.5, coverage, config.coverage_threshold)
        example = replace(example, group=group, hit_p=hit_p)
    return example


def pool_hit_probability(decoder: nn.Module, example: Example, thresholds: np.ndarray, config: AdaptConfig,
                         amp=nullcontext) -> float:
    """P(the reference's SAFE is drawn at least once in the app's B = M x N pool), from forward passes.

    ``group_thresholds`` thresholds spread over the band each stand for B / group_thresholds draws;
    p_t is the probability that the sampler (T=1, top-k 50, top-p 0.95) writes exactly the reference's
    token sequence from query t. P = 1 - prod_t (1 - p_t)^(B / K). A lower bound: other SAFE spellings
    of the molecule count in the app too, and formula-constrained decoding only raises p_t.
    """
    ts = np.linspace(float(thresholds[0]), float(thresholds[-1]), config.group_thresholds)
    p = _sequence_probabilities(decoder, [(example, t) for t in ts], amp)["p"]
    draws = config.groups * config.samples_per_group / config.group_thresholds
    return float(1.0 - np.prod((1.0 - np.clip(p, 0.0, 1.0)) ** draws))


def prepare_examples(config: AdaptConfig, stop: threading.Event | None = None) -> Iterator:
    """Stage 1: select, compute posteriors and groups, append to ``examples.jsonl``; *returns* :class:`Prepared`.

    Resumes from the cache: spectra already in ``examples.jsonl`` are not computed again.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    bundle = load_bundle(config.bundle, device=config.device, use_adapter=False, precision=config.precision)
    thresholds = band_thresholds(bundle.calibration, config.kappa_min, config.kappa_max, config.groups)
    amp, _ = autocast(config.precision, bundle.device)
    oof = oof_rows = None
    if config.oof:
        oof = load_oof(config.oof, kappa_min=config.kappa_min, kappa_max=config.kappa_max, groups=config.groups)
        oof_rows = oof.row_of()
        if oof.posteriors.shape[1] != bundle.decoder.config.fp_bits:
            raise ConfigError(f"{config.oof}: posteriors over {oof.posteriors.shape[1]} bits, the decoder reads "
                              f"{bundle.decoder.config.fp_bits}; use the out-of-fold run of this model's encoder.")
    key = _examples_key(config, bundle)
    meta_path, cache = out / "examples_meta.json", out / "examples.jsonl"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    if meta and meta.get("key") != key:
        changed = sorted(k for k in key if meta.get("key", {}).get(k) != key[k])
        raise ConfigError(f"{out} holds examples made with other settings ({', '.join(changed)}); use a new --out.")
    done: dict[str, dict] = {}
    if cache.is_file():
        for line in cache.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                done[d["key"]] = d
            except (json.JSONDecodeError, KeyError):  # a line cut by a crash: computed again
                continue
    seconds = float(meta.get("seconds", 0.0))
    if not meta.get("complete"):
        train, val = yield from select_spectra(config, bundle)
        todo = [(s, "val") for s in val] + [(s, "train") for s in train]
        keys = [f"{Path(s.source).name}#{s.index}:{s.id}" for s, _ in todo]
        yield Selected(len(train), len(val), sum(k in done for k in keys))
        write_json_atomic(meta_path, {"key": key, "complete": False, "seconds": seconds})
        t0, n_pooled, pooled_s = time.perf_counter(), 0, 0.0
        with open(cache, "a", encoding="utf-8") as sink:
            for i, ((spectrum, split), k) in enumerate(zip(todo, keys)):
                if k in done:
                    continue
                if stop is not None and stop.is_set():
                    write_json_atomic(meta_path, {"key": key, "complete": False,
                                                  "seconds": seconds + time.perf_counter() - t0})
                    return None
                t1 = time.perf_counter()
                if oof is None:
                    ex = prepare_example(bundle, spectrum, split, config, thresholds, amp=amp)
                elif (row := oof_rows.get(spectrum.id)) is None:
                    ex = "no out-of-fold posterior"
                else:
                    ex = prepare_example(bundle, spectrum, split, config, oof.thresholds(row),
                                         oof.posteriors[row].astype(np.float32), amp)
                d = ex.to_json() if isinstance(ex, Example) else {"key": k, "split": split, "dropped": ex}
                sink.write(json.dumps(d) + "\n")
                sink.flush()
                done[k] = d
                if split == "train":
                    n_pooled, pooled_s = n_pooled + 1, pooled_s + time.perf_counter() - t1
                yield ExampleDone(i + 1, len(todo), d.get("group"), n_pooled / max(pooled_s, 1e-9))
        seconds += time.perf_counter() - t0
        write_json_atomic(meta_path, {"key": key, "complete": True, "seconds": seconds, "keys": keys})
        meta = json.loads(meta_path.read_text())
    keys = set(meta.get("keys", done))
    rows = [d for k, d in done.items() if k in keys]
    dropped = Counter(d["dropped"] for d in rows if "dropped" in d)
    examples = [Example.from_json(d) for d in rows if "dropped" not in d]
    return Prepared([e for e in examples if e.split == "train"], [e for e in examples if e.split == "val"],
                    float(thresholds[0]), float(thresholds[-1]), dict(dropped), seconds)


# -----------------------------------------------------------------------------------------------
# Training


def adapt(config: AdaptConfig, stop: threading.Event | None = None, prepared: Prepared | None = None,
          prepare_only: bool = False) -> Iterator:
    """Both stages; yields progress events (set ``stop`` to save and end at the next step or spectrum).

    Stage 1 ends with the :class:`Prepared` examples as an event; ``prepare_only`` stops there (train
    later with ``resume``). ``prepared`` skips stage 1 (tests). torch runs on ``config.threads``
    threads meanwhile.
    """
    with torch_threads(config.threads):
        out = Path(config.out)
        out.mkdir(parents=True, exist_ok=True)
        saved = out / "adapt_config.json"
        if saved.is_file():
            if not config.resume:
                raise ConfigError(f"{out} already holds an adaptation run; pass --resume to continue it or use a new --out.")
            _check_resumable(json.loads(saved.read_text()), config)
        write_json_atomic(saved, config.to_dict())
        if prepared is None:
            prepared = yield from prepare_examples(config, stop)
            if prepared is None:  # stopped
                yield Finished(0, "stopped", None, {}, "")
                return
            yield prepared
        if not prepare_only:
            yield from _train(config, prepared, stop or threading.Event())


def _check_resumable(saved: dict, config: AdaptConfig) -> None:
    now = config.to_dict()
    changed = sorted(k for k in now if k not in RESUMABLE_CHANGES and saved.get(k) != now[k])
    if changed:
        shown = ", ".join(f"`{k}` {saved.get(k)!r} -> {now[k]!r}" for k in changed)
        raise ConfigError(f"cannot resume exactly with changed settings ({shown}); use the saved ones or a new --out.")


def _train(config: AdaptConfig, prepared: Prepared, stop: threading.Event) -> Iterator:
    out = Path(config.out)
    if not prepared.train:
        raise ConfigError(f"No training example survived preparation (dropped: {prepared.dropped}); use more spectra.")
    bundle = load_bundle(config.bundle, device=config.device, use_adapter=False, precision="fp32")
    device = bundle.device
    amp, amp_dtype = autocast(config.precision, device)
    base = bundle.decoder
    targets = lora_targets(base, config.fp_targets)
    predicted = predicted_lora_parameters(base, targets, config.rank)
    model, optimizer = make_trainer(base, config)
    decoder = model.get_base_model()  # the ConditionalDecoder with LoRA layers inside
    named = trainable_parameters(model)
    names = [n for n, _ in named]
    train, val = prepared.train, prepared.val
    val_t = np.array([np.linspace(*e.band_or(prepared.t_lo, prepared.t_hi), config.val_thresholds) for e in val])
    mode = SELECT_METRICS[config.select_metric]

    state = {"step": 0, "best": None, "best_step": None, "best_metrics": {}, "train_seconds": 0.0,
             "data": {"train": len(train), "val": len(val), "groups": dict(Counter(e.group for e in train)),
                      "band_thresholds": [prepared.t_lo, prepared.t_hi], "dropped": prepared.dropped}}
    ckpt = out / "checkpoint"
    resumed = (ckpt / "state.json").is_file()
    if resumed:
        state = _load_checkpoint(ckpt, named, optimizer, names)
    elif (out / "adapter").exists():
        shutil.rmtree(out / "adapter")  # an adapter without a checkpoint is from an abandoned start
    metrics_path = out / "metrics.jsonl"
    truncate_metrics(metrics_path, state["step"])
    n_frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    yield Started(state["step"], config.steps, len(train), len(val), dict(Counter(e.group for e in train)),
                  len(targets), sum(p.numel() for _, p in named), predicted, n_frozen, str(device),
                  "bf16 autocast" if amp_dtype else "fp32", resumed)

    session_start, last_save = time.monotonic(), time.monotonic()
    session_examples, session_seconds = 0, 0.0

    def elapsed() -> float:
        return state["train_seconds"] + time.monotonic() - session_start

    def checkpoint() -> Iterator[CheckpointSaved]:
        nonlocal last_save
        path = _save_checkpoint(ckpt, named, optimizer, names, {**state, "train_seconds": elapsed()})
        last_save = time.monotonic()
        log_metrics(metrics_path, {"kind": "checkpoint", "step": state["step"]})
        yield CheckpointSaved(state["step"], str(path))

    def evaluation() -> Iterator[Validated]:
        m = validate(decoder, val, val_t, amp, micro_batch=max(config.micro_batch, 32)) if val else {}
        value = m.get(config.select_metric)
        improved = value is not None and (state["best"] is None or (value > state["best"] if mode == "max"
                                                                      else value < state["best"]))
        if improved or (not val and state["step"] == config.steps):
            state.update(best=value, best_step=state["step"], best_metrics=m)
            save_adapter(model, out)
        log_metrics(metrics_path, {"kind": "val", "step": state["step"], **m, "improved": improved})
        yield Validated(state["step"], m, improved)

    if state["step"] == 0 and not resumed:
        yield from evaluation()  # the frozen model (the adapter starts as B = 0)
    model.train()
    reason = "completed"
    while state["step"] < config.steps:
        if stop.is_set():
            reason = "stopped"
            break
        if config.max_minutes is not None and elapsed() >= 60 * config.max_minutes:
            reason = "time_limit"
            break
        t0 = time.perf_counter()
        record = train_step(model, optimizer, train, state["step"], prepared.t_lo, prepared.t_hi, config, amp)
        state["step"] += 1
        seconds = time.perf_counter() - t0
        session_examples, session_seconds = session_examples + config.batch_size, session_seconds + seconds
        record["examples_per_s"] = session_examples / session_seconds
        log_metrics(metrics_path, {"kind": "train", "step": state["step"], **record})
        yield StepDone(state["step"], **record)
        last = state["step"] == config.steps
        if state["step"] % config.eval_every == 0 or last:
            yield from evaluation()
            yield from checkpoint()
        elif config.checkpoint_minutes and time.monotonic() - last_save >= 60 * config.checkpoint_minutes:
            yield from checkpoint()
    if reason != "completed" and (not (ckpt / "state.json").is_file() or _saved_step(ckpt) != state["step"]):
        yield from checkpoint()
    if not (out / "adapter" / "adapter_model.safetensors").is_file():
        save_adapter(model, out)  # no validation set: the last adapter
    yield Finished(state["step"], reason, state["best_step"], state["best_metrics"], str(out / "adapter"))


# -- checkpoints (safetensors + JSON, no pickle)
def _save_checkpoint(path: Path, named, optimizer, names: list[str], state: dict) -> Path:
    from safetensors.torch import save_file

    with atomic_folder(path) as tmp:
        save_file({n: p.detach().cpu().contiguous().clone() for n, p in named}, str(tmp / "lora.safetensors"))
        tensors, groups = optimizer_tensors(optimizer, names)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        write_json_atomic(tmp / "state.json", {**state, "optimizer_param_groups": groups})
    return path


def _saved_step(path: Path) -> int:
    return int(json.loads((path / "state.json").read_text())["step"])


def _load_checkpoint(path: Path, named, optimizer, names: list[str]) -> dict:
    from safetensors.torch import load_file

    state = json.loads((path / "state.json").read_text())
    weights = load_file(str(path / "lora.safetensors"))
    if set(weights) != set(names):
        raise BundleError(f"{path}: the saved LoRA weights are not this adapter's (other placement or rank?).")
    with torch.no_grad():
        for n, p in named:
            p.copy_(weights[n])
    load_optimizer_state(optimizer, load_file(str(path / "optimizer.safetensors")), state.pop("optimizer_param_groups"),
                         names)
    return state


# -----------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.decoder.adapt", description=__doc__.split("\n\n")[0])
    AdaptConfig.add_arguments(p, skip={"exclude_unit_resolution"}, given_only=True)
    p.add_argument("--keep-unit-resolution", dest="exclude_unit_resolution", action="store_false", default=None,
                   help="keep QQ / ion-trap spectra")
    p.add_argument("--all-spectra", action="store_true", help="no subsample (same as --max-spectra unset)")
    p.add_argument("--prepare-only", action="store_true", help="stop after stage 1 (examples and groups)")
    p.add_argument("--write-bundle", metavar="DIR", help="write base bundle + the run's adapter to DIR (after training)")
    p.add_argument("--bundle-name", help="name of the written bundle (default: base name + '-pa')")
    p.add_argument("--adapter-step", choices=("selected", "last"), default="selected",
                   help="with --write-bundle: the selected checkpoint's adapter (default) or the last step's, "
                        "to measure what training did when selection kept an earlier step")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    args = vars(_parser().parse_args(argv))
    all_spectra, prepare_only = args.pop("all_spectra"), args.pop("prepare_only")
    write_to, bundle_name, adapter_step = args.pop("write_bundle"), args.pop("bundle_name"), args.pop("adapter_step")
    try:
        given = {k: v for k, v in args.items() if v is not None}
        if "licenses" in given and [s.lower() for s in given["licenses"]] == ["all"]:
            given["licenses"] = None
        if all_spectra:
            given["max_spectra"] = None
        saved = Path(args["out"] or "") / "adapt_config.json"
        base = json.loads(saved.read_text()) if saved.is_file() and (args["resume"] or set(given) <= {"out"}) else {}
        config = AdaptConfig.from_dict({**base, **given})
        state = Path(config.out) / "checkpoint" / "state.json"
        saved_step = _saved_step(state.parent) if state.is_file() else 0
        # a finished run, or a stopped one named by --out alone (no --resume): write its bundle as it stands
        as_it_stands = state.is_file() and not args["resume"] and set(given) <= {"out"}
        if write_to and (saved_step >= config.steps or as_it_stands) and not prepare_only:
            if saved_step < config.steps:
                print(f"note: the run stopped at step {saved_step} of {config.steps}; writing its selected adapter "
                      f"(continue it with --resume)")
            print(f"wrote {_write_bundle(config, write_to, bundle_name, adapter_step)}")
            return 0
    except (ConfigError, BundleError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    bar = None
    try:
        with stop_on_signals(threading.Event()) as stop:
            for event in adapt(config, stop, prepare_only=prepare_only):
                if isinstance(event, Reading):
                    print(f"read {event.records:,} records, {event.eligible:,} eligible", flush=True)
                elif isinstance(event, Selected):
                    print(f"{event.n_train} training spectra (to group) + {event.n_val} held-out; "
                          f"{event.n_done} already cached", flush=True)
                    bar = tqdm(total=event.n_train + event.n_val, initial=event.n_done, unit="spectrum")
                elif isinstance(event, ExampleDone):
                    bar.update(1)
                    bar.set_postfix(spectra_s=f"{event.spectra_per_s:.2f}", refresh=False)
                elif isinstance(event, Prepared):
                    if bar is not None:
                        bar.close()
                    bar = None
                    print(f"examples: {len(event.train)} training {dict(Counter(e.group for e in event.train))}, "
                          f"{len(event.val)} held-out; dropped {event.dropped or 'none'}; groups took "
                          f"{event.seconds:.0f} s", flush=True)
                elif isinstance(event, Started):
                    if bar is not None:
                        bar.close()
                    print(_describe_start(event), flush=True)
                    bar = tqdm(total=event.steps, initial=event.step, unit="step")
                elif isinstance(event, StepDone):
                    bar.update(1)
                    bar.set_postfix(loss=f"{event.loss:.4f}", ce=f"{event.ce:.3f}", kl=f"{event.kl:.4f}",
                                    ex_s=f"{event.examples_per_s:.1f}", refresh=False)
                elif isinstance(event, Validated):
                    m = event.metrics
                    text = (f"step {event.step}: expected share {m.get('expected_share', float('nan')):.5f}, token "
                            f"accuracy {m.get('token_accuracy', float('nan')):.4f}, nll {m.get('nll', float('nan')):.4f}"
                            + (" *" if event.improved else ""))
                    (bar.write if bar is not None else print)(text)
                elif isinstance(event, Finished):
                    if bar is not None:
                        bar.close()
                    if event.reason == "stopped":
                        print(f"stopped at step {event.step}; continue with the same --out and --resume")
                        return 130
                    print(f"{event.reason} at step {event.step}; selected step {event.best_step} "
                          f"({json.dumps(event.best)}); adapter in {event.adapter}")
                    if write_to:
                        print(f"wrote {_write_bundle(config, write_to, bundle_name, adapter_step)}")
    except (ConfigError, BundleError) as e:
        if bar is not None:
            bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _write_bundle(config: AdaptConfig, dest: str, name: str | None, adapter_step: str = "selected") -> Path:
    out = Path(config.out)
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    info = {"run": str(out), "steps": state["step"], "selected_step": state.get("best_step"),
            "selection": {config.select_metric: state.get("best")}, "rank": config.rank, "alpha": config.alpha,
            "data": state.get("data"), "mgf": Path(config.mgf).name, "folds": list(config.folds)}
    adapter = out / "adapter"
    if adapter_step == "last":
        adapter = export_last_adapter(out)
        info["adapter_step"] = state["step"]
    return write_adapted_bundle(config.bundle, adapter, dest, name, info)


def export_last_adapter(out: Path) -> Path:
    """``out/adapter_last/``: the LoRA weights of the run's last training checkpoint as a peft adapter folder
    (the same ``adapter_config.json`` as the selected adapter's; peft's saved names lack the ``.default``
    adapter name that the live model's parameters carry)."""
    from safetensors.torch import load_file, save_file

    weights = load_file(str(out / "checkpoint" / "lora.safetensors"))
    dest = out / "adapter_last"
    dest.mkdir(exist_ok=True)
    save_file({re.sub(r"\.(lora_[AB])\.default\.", r".\1.", k): v for k, v in weights.items()},
              str(dest / "adapter_model.safetensors"))
    shutil.copy2(out / "adapter" / "adapter_config.json", dest / "adapter_config.json")
    return dest


def _describe_start(e: Started) -> str:
    lines = [
        (f"LoRA on {e.targets} linear layers: {e.trainable:,} trainable parameters (placement predicts "
         f"{e.predicted:,}), {e.frozen:,} frozen; {e.device}, {e.precision}"),
        f"{e.n_train} training examples {e.group_counts}, {e.n_val} held-out; {e.steps} steps",
    ]
    if e.resumed:
        lines.append(f"resumed at step {e.step}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
