"""One prepared accelerator run: pack here, train there in one command, bring the decoder back, evaluate here.

Some sessions are lent an H100/H200 for 15 minutes of device time (docs/accelerator.md). This module turns
those minutes into a candidate model with one command on each side::

    python -m training.decoder.accelerator pack --corpus runs/corpus_full --noise runs/noise_v9.npz \\
        --molecules ../shared/data/molecules.tsv.gz          # writes .carry/accel, parks resources/,
                                                             # prints the remote command and `travels: N MiB`
    # on the device (the printed command, carry [".carry"]):
    python3 -m training.decoder.accelerator remote --pack .carry/accel --out $OUT
    python -m training.decoder.accelerator unpack --returned DIR     # checks every part, restores the bundled model
    python -m training.decoder.accelerator evaluate --run runs/accel/run --name msgpt-small-v10
    python -m training.decoder.accelerator --dry-run                 # the whole chain on this CPU at toy scale

What travels (at most 64 MiB with the working tree): the corpus as compact arrays (``corpus.npz.xz``: tokens,
active Morgan bits, formulas, InChIKey blocks for the validation split, the rows to oversample), the decoder
to continue from (the bundle's bf16 weights), the fingerprint noise model and ``pack.json`` (recipe and
checksums). The working tree's ``resources/`` (the bundled model, 54 MB, and the structure and spectral
libraries, 9 MB) cannot travel beside them, so ``pack`` *parks* it: its files stay on disk but leave git's index
(staged deletion) and are ignored through ``.git/info/exclude``, so the device tool does not copy them (the
remote step needs none of them); ``unpack`` (or ``unpark``) restores the index. Never commit while parked
(``git status`` then shows them as deleted).

The remote step needs torch, numpy and safetensors only (no RDKit, safe-mol, Qt or pyteomics): it unpacks
the corpus to ``/tmp``, trains with :func:`training.decoder.pretrain.pretrain` (the CPU code, on ``cuda`` with bf16
autocast) for what is left of the wall-clock budget, its cosine decay following the clock
(``budget_minutes``: how many steps fit is not known beforehand), stops at the budget with a checkpoint whatever happens, exports the decoder in
bf16 and splits it into parts of at most 15 MiB. Five files come back: the parts, ``remote_report.json``
(checksums, throughput, loss, the run's config and trainer state, decoder config and tokenizer),
``metrics.jsonl`` and ``remote.log``.

``unpack`` rebuilds a pretraining run directory from them (the same corpus materialized from the pack), so
``training.bundle.build_bundle`` writes the candidate's model card from the run's own record, as for every CPU
stage. ``evaluate`` builds the candidate bundle, runs the ``FOLD=val`` evaluations of docs/model_history.md of the
candidate and of the current default on the same spectra and seeds, and applies the shipping rule of
docs/accelerator.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from engine.errors import BundleError, ConfigError, MsgptError
from engine.model.bundle import sha256_file
from training.decoder.accelerator_pack import (
    DEFAULT_MODEL,
    DEFAULT_PACK,
    Log,
    PACK_FORMAT,
    PACK_VERSION,
    PARKED,
    PART_BYTES,
    REPORT,
    Recipe,
    TRAVEL_LIMIT,
    materialize_corpus,
    mib,
    pack,
    park,
    sha256_bytes,
    travel_bytes,
    unpark,
)
from training.decoder.accelerator_pack import (  # noqa: F401  (re-exported)
    RUN_CHARS,
    _Exclude,
    _carry_root,
    _folder_line,
    _git,
    balanced_rows,
    corpus_arrays,
    ensure_ignored,
    remote_command,
    travelling_files,
    write_corpus_pack,
)


# -----------------------------------------------------------------------------------------------
# remote


def _verify_pack(pack_dir: Path) -> dict:
    info = json.loads((pack_dir / "pack.json").read_text())
    if info.get("format") != PACK_FORMAT or info.get("version") != PACK_VERSION:
        raise BundleError(f"{pack_dir}/pack.json is not a {PACK_FORMAT} v{PACK_VERSION}; run pack again.")
    for name, meta in info["files"].items():
        path = pack_dir / name
        if not path.is_file() or sha256_file(path) != meta["sha256"]:
            raise BundleError(f"{path} is missing or differs from pack.json (sha256); run pack again.")
    return info


def _preset_of(config) -> str:
    from engine.model.decoder import PRESETS, DecoderConfig

    for name in PRESETS:
        try:
            if DecoderConfig.preset(name, vocab_size=config.vocab_size, dropout=config.dropout,
                                    block_size=config.block_size) == config:
                return name
        except (TypeError, ConfigError):
            continue
    raise ConfigError(f"the packed decoder's configuration matches no preset ({config}).")


def remote(pack_dir: str | Path, out: str | Path, *, work: str | Path = "/tmp/msgpt-accel", device: str = "cuda",
           minutes: float | None = None, max_steps: int | None = None) -> dict:
    """The device side: unpack, train within the budget, export in parts. Returns the report."""
    import torch

    from engine.model.decoder import DecoderConfig

    from training.core.checkpoint import latest_checkpoint
    from training.decoder.pretrain import CheckpointSaved, Finished, PretrainConfig, StepDone, Validated, pretrain

    t0 = time.monotonic()
    pack_dir, out, work = Path(pack_dir), Path(out), Path(work)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "remote.log")
    info = _verify_pack(pack_dir)
    recipe = Recipe.from_dict(info["recipe"])
    if minutes is not None:
        recipe.minutes = minutes
    deadline = t0 + 60 * recipe.minutes
    gpu = torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else platform.processor() or "cpu"
    log(f"device {device} ({gpu}), torch {torch.__version__}, python {platform.python_version()}; "
        f"budget {recipe.minutes:.2f} min")
    if work.exists():
        shutil.rmtree(work)
    manifest = materialize_corpus(pack_dir, work / "corpus", recipe.oversample)
    log(f"corpus: {manifest['packed_from']['distinct_records']:,} records + {manifest['packed_from']['oversampled_rows']:,}"
        f" x{recipe.oversample} oversampled = {manifest['n_records']:,} ({manifest['n_tokens']:,} tokens), "
        f"{time.monotonic() - t0:.1f} s")
    dec_config = DecoderConfig.from_dict(json.loads((pack_dir / "decoder" / "decoder_config.json").read_text()))
    base = dict(
        corpus=str(work / "corpus"), preset=_preset_of(dec_config), dropout=dec_config.dropout,
        block_size=dec_config.block_size, batch_size=recipe.batch_size, grad_accum=1, lr=recipe.lr,
        min_lr=recipe.min_lr, warmup_steps=recipe.warmup_steps, device=device, precision="auto", seed=recipe.seed,
        init_decoder=str(pack_dir / "decoder"), noise_model=str(pack_dir / "noise.npz"),
        noise_fraction=recipe.noise_fraction, prefetch=recipe.prefetch, forward_tokens=recipe.forward_tokens,
        log_every=20,
    )  # fmt: skip
    if device == "cpu":
        base["threads"] = max(1, min(4, os.cpu_count() or 1))

    budget = (deadline - time.monotonic() - recipe.reserve_s) / 60
    if budget <= 0:
        raise ConfigError(f"the budget of {recipe.minutes} min is spent before training starts; give more --minutes.")
    config = PretrainConfig(**base, out=str(work / "run"), max_steps=max_steps, budget_minutes=budget,
                            eval_every=recipe.eval_every, checkpoint_every=0, checkpoint_minutes=2,
                            keep_checkpoints=1)  # fmt: skip
    log(f"training: {budget:.2f} min of budget (the cosine decay follows the clock), batch {recipe.batch_size}, "
        f"peak lr {recipe.lr}" + (f", at most {max_steps} steps" if max_steps else ""))
    stop = threading.Event()
    # the clock starts after the model is set up; the safety stop comes after it, before the deadline
    timer = threading.Timer(max(1.0, deadline - recipe.reserve_s / 4 - time.monotonic()), stop.set)
    timer.daemon = True
    timer.start()
    first_loss, last_loss, records, val, finished = None, None, 0, [], None
    t_train = time.monotonic()

    def context() -> dict:
        return {
            "pack": {k: info[k] for k in ("created", "recipe", "corpus", "init", "noise")},
            "pack_sha256": sha256_file(pack_dir / "pack.json"),
            "device": gpu, "torch": torch.__version__, "python": platform.python_version(),
            "finished": finished, "max_steps": max_steps, "budget_minutes": budget,
            "first_loss": first_loss, "last_loss": last_loss, "val": list(val),
            "recipe": recipe, "t0": t0, "t_train": t_train, "n_records": manifest["n_records"],
        }  # fmt: skip

    try:
        for event in pretrain(config, stop):
            if isinstance(event, StepDone):
                records += recipe.batch_size
                first_loss = event.loss if first_loss is None else first_loss
                last_loss = event.loss
                if event.step % 200 == 0 or event.step == max_steps:
                    el = time.monotonic() - t_train
                    log(f"step {event.step:,} loss {event.loss:.4f} lr {event.lr:.2e} "
                        f"{event.tokens_per_s:,.0f} tok/s (step), {records / el:,.0f} records/s (mean), epoch {event.epoch:.2f}")
            elif isinstance(event, Validated):
                val.append(asdict(event))
                log(f"step {event.step:,}: val loss {event.loss:.4f} acc {event.accuracy:.4f}; simulated queries "
                    f"loss {event.noisy_loss} acc {event.noisy_accuracy}")
            elif isinstance(event, CheckpointSaved):
                log(f"step {event.step:,}: checkpoint ({event.reason})")
                if event.reason == "timer" and event.path:  # insurance: what a killed command still returns
                    bring_back(Path(event.path), out, work, context(), final=False)
            elif isinstance(event, Finished):
                finished = asdict(event)
    finally:
        timer.cancel()
    ckpt = latest_checkpoint(work / "run")
    if ckpt is None:
        raise MsgptError("the run wrote no checkpoint; nothing to bring back.")
    report = bring_back(ckpt, out, work, context(), final=True)
    log(f"done: {report['steps']:,} steps, {report['records_per_s']:,.0f} records/s, loss {first_loss} -> {last_loss}, "
        f"{len(report['decoder']['parts'])} parts, {report['wall_seconds']:.0f} s in all")
    return report


def bring_back(ckpt: Path, out: Path, work: Path, ctx: dict, final: bool) -> dict:
    """Export ``ckpt``'s decoder in bf16 into ``out`` as parts of at most 15 MiB, with the report and the
    metrics. Called at every checkpoint too (``final`` False), so a command killed at its limit still
    brings back its newest checkpoint."""
    import torch

    from training.core.checkpoint import export_decoder

    export = export_decoder(ckpt, work / "export", torch.bfloat16)
    weights = (export / "decoder.safetensors").read_bytes()
    parts = []
    for i in range(0, len(weights), PART_BYTES):
        name = f"decoder.safetensors.part{len(parts)}"
        tmp = out / (name + ".tmp")
        tmp.write_bytes(weights[i : i + PART_BYTES])
        tmp.replace(out / name)
        parts.append({"name": name, "sha256": sha256_bytes(weights[i : i + PART_BYTES]),
                      "bytes": len(weights[i : i + PART_BYTES])})
    shutil.copy(work / "run" / "metrics.jsonl", out / "metrics.jsonl")
    state = json.loads((ckpt / "trainer_state.json").read_text())
    batch = ctx["recipe"].batch_size
    report = {
        **{k: v for k, v in ctx.items() if k not in ("recipe", "t0", "t_train", "n_records")},
        "final": final, "steps": state["step"], "records_seen": state["step"] * batch,
        "passes": state["step"] * batch / ctx["n_records"],
        "train_seconds": round(time.monotonic() - ctx["t_train"], 1),
        "records_per_s": round(state["step"] * batch / max(time.monotonic() - ctx["t_train"], 1e-9), 1),
        "decoder": {"sha256": sha256_bytes(weights), "bytes": len(weights), "parts": parts, "dtype": "bf16"},
        "decoder_config": json.loads((export / "decoder_config.json").read_text()),
        "tokenizer": json.loads((export / "tokenizer.json").read_text()),
        "pretrain_config": json.loads((work / "run" / "pretrain_config.json").read_text()),
        "trainer_state": state, "checkpoint": ckpt.name,
        "wall_seconds": round(time.monotonic() - ctx["t0"], 1),
    }  # fmt: skip
    tmp = out / (REPORT + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(out / REPORT)
    return report


# -----------------------------------------------------------------------------------------------
# unpack


def unpack(returned: str | Path, pack_dir: str | Path, dest: str | Path, *, repo: Path | None = None,
           restore: bool = True) -> Path:
    """Reassemble and check the returned decoder; write a pretraining run directory at ``dest/run`` (with
    the corpus materialized at ``dest/corpus``). Restores the parked resources/. Returns the run directory."""
    from engine.model.decoder import DecoderConfig

    from training.core.checkpoint import load_decoder

    returned, pack_dir, dest = Path(returned), Path(pack_dir), Path(dest)
    report_path = returned / REPORT
    if not report_path.is_file():
        raise BundleError(f"{returned} holds no {REPORT}: the remote step did not finish (read remote.log there).")
    report = json.loads(report_path.read_text())
    blob = bytearray()
    for part in report["decoder"]["parts"]:
        path = returned / part["name"]
        if not path.is_file():
            raise BundleError(f"{path} is missing: it did not come back; fetch the run's files again.")
        data = path.read_bytes()
        if sha256_bytes(data) != part["sha256"]:
            raise BundleError(f"{path} differs from the remote report (sha256): a damaged transfer; fetch it again.")
        blob += data
    if sha256_bytes(bytes(blob)) != report["decoder"]["sha256"]:
        raise BundleError("the reassembled decoder.safetensors differs from the remote report (sha256).")
    info = _verify_pack(pack_dir)
    if sha256_file(pack_dir / "pack.json") != report["pack_sha256"]:
        raise BundleError(f"{returned} was trained from another pack than {pack_dir}.")
    for stale in (dest / "run", dest / "corpus"):  # only what unpack writes: dest may hold evaluations
        if stale.exists():
            shutil.rmtree(stale)
    recipe = Recipe.from_dict(report["pack"]["recipe"])
    materialize_corpus(pack_dir, dest / "corpus", recipe.oversample)
    run = dest / "run"
    ckpt = run / "checkpoints" / report["checkpoint"]
    ckpt.mkdir(parents=True)
    (ckpt / "decoder.safetensors").write_bytes(bytes(blob))
    (ckpt / "decoder_config.json").write_text(json.dumps(report["decoder_config"], indent=1) + "\n")
    (ckpt / "tokenizer.json").write_text(json.dumps(report["tokenizer"], indent=1) + "\n")
    (ckpt / "trainer_state.json").write_text(json.dumps(report["trainer_state"], indent=1) + "\n")
    config = dict(report["pretrain_config"])
    config["corpus"] = str((dest / "corpus").resolve())
    config["init_decoder"] = info["init"]["path"]  # the bundle the run started from, here
    config["noise_model"] = info["noise"]["path"]
    config["device_run"] = {k: report[k] for k in ("device", "torch", "records_per_s", "train_seconds", "passes")}
    (run / "pretrain_config.json").write_text(json.dumps(config, indent=1) + "\n")
    shutil.copy(returned / "metrics.jsonl", run / "metrics.jsonl")
    shutil.copy(report_path, dest / REPORT)
    if (returned / "remote.log").is_file():
        shutil.copy(returned / "remote.log", dest / "remote.log")
    decoder, tokenizer = load_decoder(ckpt)  # every tensor's name and shape against the config
    init_decoder, init_tokenizer = load_decoder(pack_dir / "decoder")
    if decoder.config != DecoderConfig.from_dict(init_decoder.config.to_dict()):
        raise BundleError("the returned decoder's configuration differs from the packed one.")
    if tokenizer.fingerprint() != init_tokenizer.fingerprint():
        raise BundleError("the returned decoder's tokenizer differs from the packed one.")
    if restore:
        unpark((repo or Path.cwd()).resolve())
    return run


# -----------------------------------------------------------------------------------------------
# evaluate: the candidate bundle and the val evaluations of docs/model_history.md, both ion modes


EVAL_MODES = {  # the commands of docs/model_history.md: the same spectra and seeds for every model
    "positive": ["--one-per-structure", "--max-spectra", "300", "--adducts", "[M+H]+", "[M+Na]+"],
    "negative": ["--one-per-structure", "--adducts", "[M-H]-"],
}


def eval_command(model: str, mgf: str, mode: str, out: str, threads: int = 1) -> list[str]:
    return [sys.executable, "-m", "training.evaluation.evaluate", "--model", model, "--mgf", mgf, "--fold", "val",
            *EVAL_MODES[mode], "--variants", "oracle", "band", "--decoding", "formula", "--threads", str(threads),
            "--out", out]  # fmt: skip


def band_scores(eval_dir: str | Path) -> dict:
    """Band and oracle Top-1/Top-10 (%) of an evaluation, fingerprint ranking, formula decoding."""
    from training.calibration.confidence import eval_records

    out = {}
    for variant in ("band", "oracle"):
        recs = eval_records(eval_dir, variant=variant)
        if not recs:
            continue
        ranks = [r.get("rank") for r in recs]
        n = len(ranks)
        out[variant] = {"n": n, "top1": 100 * sum(1 for r in ranks if r == 1) / n,
                        "top10": 100 * sum(1 for r in ranks if r is not None and r <= 10) / n}
    return out


def ship_decision(candidate: dict, baseline: dict) -> tuple[bool, list[str]]:
    """docs/accelerator.md's rule, fixed before the run: band Top-10 not below the default's in either ion
    mode, and band Top-1 summed over both modes not below it."""
    lines, ok = [], True
    for mode in ("positive", "negative"):
        c, b = candidate[mode]["band"], baseline[mode]["band"]
        good = c["top10"] >= b["top10"]
        ok &= good
        lines.append(f"{mode}: band Top-1 {b['top1']:.1f} -> {c['top1']:.1f}, Top-10 {b['top10']:.1f} -> "
                     f"{c['top10']:.1f} ({'kept' if good else 'below the default'})")
    top1 = sum(candidate[m]["band"]["top1"] for m in candidate) >= sum(baseline[m]["band"]["top1"] for m in baseline)
    lines.append(f"band Top-1 summed over both modes {'not below' if top1 else 'below'} the default's")
    return ok and top1, lines


def build_candidate(run: str | Path, name: str, out: str | Path, encoder: str = DEFAULT_MODEL, *extra: str) -> Path:
    cmd = [sys.executable, "-m", "training.bundle.build_bundle", "--decoder", str(run), "--encoder", encoder,
           "--name", name, "--out", str(out), "--force", *extra]
    subprocess.run(cmd, check=True)
    return Path(out)


def evaluate(run: str | Path, name: str, out: str | Path, mgf: str, *, baseline: str = DEFAULT_MODEL,
             which: tuple[str, ...] = ("baseline", "candidate"), threads: int = 1) -> dict:
    out = Path(out)
    bundle = out / "bundle"
    if "candidate" in which and not (bundle / "config.json").is_file():
        build_candidate(run, name, bundle, baseline)
    models = {"baseline": baseline, "candidate": str(bundle)}
    for who in which:
        for mode in EVAL_MODES:
            subprocess.run(eval_command(models[who], mgf, mode, str(out / f"eval_{who}_{mode}"), threads), check=True)
    scores = {who: {mode: band_scores(out / f"eval_{who}_{mode}") for mode in EVAL_MODES}
              for who in models if all((out / f"eval_{who}_{m}").is_dir() for m in EVAL_MODES)}
    result = {"scores": scores}
    if len(scores) == 2:
        ship, lines = ship_decision(scores["candidate"], scores["baseline"])
        result.update(ship=ship, lines=lines)
        (out / "decision.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


# -----------------------------------------------------------------------------------------------
# dry run: the whole chain at toy scale on this CPU


TOY_CORES = ["c1ccccc1", "C1CCCCC1", "c1ccncc1", "C1CCOC1", "c1ccoc1", "c1ccsc1", "C1CCNCC1", "c1cnc[nH]1"]
TOY_ENDS = ["", "O", "N", "C(=O)O", "Cl", "F", "C#N", "OC", "C(N)=O", "S"]


def toy_smiles(n: int = 320) -> list[str]:
    """``n`` distinct small molecules built from ring cores, chains and end groups (no data needed)."""
    out = []
    for length in range(0, 8):
        for core in TOY_CORES:
            for end in TOY_ENDS:
                out.append(core + "C" * length + end)
    return out[:n]


BLOCK_ON_DEVICE = ("rdkit", "safe", "datamol", "PySide6", "pyteomics", "platformdirs", "psims", "matchms")


def blocked_python(blocked: tuple[str, ...] = BLOCK_ON_DEVICE) -> list[str]:
    """A python that cannot import what the device machine lacks (``-c`` prelude, then ``-m`` semantics)."""
    prelude = (
        "import sys, importlib.abc, runpy\n"
        "class B(importlib.abc.MetaPathFinder):\n"
        f"    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {tuple(blocked)!r}: raise ImportError(name + ' is not on the device')\n"
        "sys.meta_path.insert(0, B())\n"
        "sys.argv = ['training.decoder.accelerator', *sys.argv[1:]]\n"
        "runpy.run_module('training.decoder.accelerator', run_name='__main__')\n"
    )
    return [sys.executable, "-c", prelude]


def dry_run(workdir: str | Path | None = None, repo: Path | None = None) -> dict:
    """Pack a few hundred records, run the remote step locally (CPU, device-missing imports blocked),
    unpack, build a bundle and load it. Prints ``travels: N MiB``."""
    import gzip
    import tempfile

    from engine.model.bundle import load_bundle

    from training.encoder.noise import FingerprintNoise

    repo = (repo or Path.cwd()).resolve()
    tiny = repo / "tests" / "data" / "tiny_bundle"
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="msgpt-accel-dry-"))
    work.mkdir(parents=True, exist_ok=True)
    mols = work / "molecules.tsv.gz"
    with gzip.open(mols, "wt", encoding="utf-8") as fh:
        fh.write("smiles\tinchikey14\tsource\n")
        for i, s in enumerate(toy_smiles()):
            fh.write(f"{s}\t\t{'npclassifier' if i % 3 == 0 else 'chemxlstm_chembl31'}\n")
    corpus = work / "corpus"
    subprocess.run([sys.executable, "-m", "training.data.corpus", "prepare", "--out", str(corpus), str(mols),
                    "--tokenizer", str(tiny / "tokenizer.json"), "--workers", "1"], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    from training.data.corpus_format import corpus_lines

    keys_by_smiles = dict(zip(corpus_lines(corpus, "smiles.txt"), corpus_lines(corpus, "inchikey14.txt")))
    with gzip.open(mols, "wt", encoding="utf-8") as fh:  # the TSV with its keys, as molecules.tsv.gz has them
        fh.write("smiles\tinchikey14\tsource\n")
        for i, (s, k) in enumerate(keys_by_smiles.items()):
            fh.write(f"{s}\t{k}\t{'npclassifier' if i % 3 == 0 else 'chemxlstm_chembl31'}\n")
    rng = np.random.default_rng(0)
    noise = FingerprintNoise(rng.uniform(0.3, 0.9, (4, 4096)).astype(np.float32),
                             rng.uniform(0, 0.01, (4, 4096)).astype(np.float32), {"source": "toy rates (dry run)"})
    noise.save(work / "noise.npz")
    recipe = Recipe(minutes=2.0, batch_size=16, warmup_steps=2, lr=1e-3, min_lr=1e-4, prefetch=2, reserve_s=5)
    info = pack(corpus, tiny, work / "noise.npz", work / "carry" / "accel", recipe=recipe, molecules=mols,
                sources=["npclassifier"], repo=repo, park_model=False, preset=1)
    travels = travel_bytes(repo, [work / "carry"])
    returned = work / "OUT"
    subprocess.run([*blocked_python(), "remote", "--pack", str(work / "carry" / "accel"), "--out", str(returned),
                    "--device", "cpu", "--max-steps", "6", "--work", str(work / "remote")], check=True, cwd=repo)
    files = sorted(p for p in returned.iterdir() if p.is_file())
    too_big = [p.name for p in files if p.stat().st_size > 16 * 1024 * 1024]
    if len(files) > 8 or too_big:
        raise MsgptError(f"the remote step wrote {len(files)} files ({too_big} over 16 MiB); 8 of 16 MiB come back.")
    run = unpack(returned, work / "carry" / "accel", work / "unpacked", repo=repo, restore=False)
    bundle = build_candidate(run, "msgpt-dry-run", work / "bundle", str(tiny), "--encoder-dtype", "fp32")
    loaded = load_bundle(bundle, device="cpu")
    print(f"travels: {mib(travels):.1f} MiB (working tree without {PARKED}, plus the toy pack of "
          f"{info['corpus']['n_records']} records)")
    print(f"came back: {len(files)} files, {mib(sum(p.stat().st_size for p in files)):.2f} MiB; bundle {loaded.describe()}")
    return {"travels": travels, "files": [p.name for p in files], "bundle": str(bundle), "pack": info}


# -----------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.decoder.accelerator", description=__doc__.split("\n")[0])
    p.add_argument("--dry-run", action="store_true", help="the whole chain at toy scale on this CPU")
    p.add_argument("--workdir", help="with --dry-run: keep its files here")
    sub = p.add_subparsers(dest="cmd")
    k = sub.add_parser("pack", help="write the carried folder, park resources/, print the command")
    k.add_argument("--corpus", required=True, help="prepared corpus (python -m training.data.corpus prepare)")
    k.add_argument("--init", default=DEFAULT_MODEL, help="bundle (or decoder) to continue from (default: the default model)")
    k.add_argument("--noise", required=True, help="noise model (python -m training.encoder.noise fit)")
    k.add_argument("--molecules", help="molecules TSV (inchikey14, source) naming the part to oversample")
    k.add_argument("--oversample-sources", default="massbank_open,repoRT,spectraverse_example,modelseed_metacyc,"
                   "npclassifier,mibig", help="comma-separated sources of the balanced part")
    k.add_argument("--out", default=DEFAULT_PACK, help="carried folder (ignored by git)")
    k.add_argument("--no-park", action="store_true", help="leave resources/ where it is")
    for f in fields(Recipe):
        k.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default, help=f.metadata["help"])
    r = sub.add_parser("remote", help="the device side (the command pack prints)")
    r.add_argument("--pack", required=True)
    r.add_argument("--out", required=True, help="$OUT: what comes back")
    r.add_argument("--work", default="/tmp/msgpt-accel")
    r.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    r.add_argument("--minutes", type=float, help="override the recipe's budget")
    r.add_argument("--max-steps", type=int, help="stop after this many steps even if budget is left (dry run)")
    u = sub.add_parser("unpack", help="reassemble and check what came back; restore the bundled model")
    u.add_argument("--returned", required=True, help="the folder the device tool copied $OUT to")
    u.add_argument("--pack", default=DEFAULT_PACK)
    u.add_argument("--out", default="runs/accel")
    e = sub.add_parser("evaluate", help="candidate bundle + FOLD=val evaluations + the shipping rule")
    e.add_argument("--run", default="runs/accel/run")
    e.add_argument("--name", required=True)
    e.add_argument("--out", default="runs/accel")
    e.add_argument("--mgf", default="../shared/data/massbank_dev.mgf.gz")
    e.add_argument("--which", nargs="*", default=["baseline", "candidate"], choices=["baseline", "candidate"],
                   help="which evaluations to run (two processes can share the work); none: only the verdict")
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--baseline", default=DEFAULT_MODEL, help="the model to beat (default: the default model); its encoder "
                   "and calibrations go into the candidate")
    sub.add_parser("park", help=f"take {PARKED} out of what travels")
    sub.add_parser("unpark", help=f"restore {PARKED} in git's index")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    repo = Path.cwd()
    try:
        if args.dry_run:
            dry_run(args.workdir, repo)
            return 0
        if args.cmd == "pack":
            recipe = Recipe(**{f.name: getattr(args, f.name) for f in fields(Recipe)})
            info = pack(args.corpus, args.init, args.noise, args.out, recipe=recipe, molecules=args.molecules,
                        sources=[s for s in args.oversample_sources.split(",") if s], repo=repo,
                        park_model=not args.no_park)
            print(f"packed {args.out}: {info['corpus']['n_records']:,} records ({info['corpus']['oversample_rows']:,} "
                  f"oversampled x{recipe.oversample}), {len(info['files'])} files")
            if info.get("parked"):
                print(f"parked {PARKED} (out of git's index, ignored): run `python -m training.decoder.accelerator unpack` "
                      "or `unpark` before committing")
            print(f"travels: {mib(info['travels']):.1f} MiB")
            if info["travels"] > TRAVEL_LIMIT:
                print("error: more than 64 MiB would travel; pack fewer records or a smaller decoder", file=sys.stderr)
                return 2
            print(f"carry: [{info['carry']!r}]")
            print(f"command: {info['command']}")
            return 0
        if args.cmd == "remote":
            remote(args.pack, args.out, work=args.work, device=args.device, minutes=args.minutes,
                   max_steps=args.max_steps)
            return 0
        if args.cmd == "unpack":
            run = unpack(args.returned, args.pack, args.out, repo=repo)
            report = json.loads((Path(args.out) / REPORT).read_text())
            print(f"unpacked {run}: {report['steps']:,} steps on {report['device']}, {report['records_per_s']:,.0f} "
                  f"records/s, {report['passes']:.2f} passes, loss {report['first_loss']:.4f} -> {report['last_loss']:.4f}")
            print(f"restored {PARKED}; next: python -m training.decoder.accelerator evaluate --run {run} --name NAME")
            return 0
        if args.cmd == "evaluate":
            result = evaluate(args.run, args.name, args.out, args.mgf, baseline=args.baseline, which=tuple(args.which),
                              threads=args.threads)
            for line in result.get("lines", []):
                print(line)
            if "ship" in result:
                print("ship: the candidate passes the rule" if result["ship"] else "keep the default: the rule fails")
            return 0
        if args.cmd == "park":
            print("parked" if park(repo) else "already parked")
            return 0
        if args.cmd == "unpark":
            print("restored" if unpark(repo) else "not parked")
            return 0
        _parser().print_help()
        return 2
    except (ConfigError, BundleError, MsgptError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
