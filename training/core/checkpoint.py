"""Pretraining checkpoints: safetensors + JSON, written atomically; nothing is ever unpickled.

A run directory (``--out``) holds::

    pretrain_config.json            the PretrainConfig of the run
    metrics.jsonl                   one JSON object per line: train / val / checkpoint records
    checkpoints/
      step_00001000/
        model.safetensors           decoder state_dict (the tied wte / lm_head weight under both
                                    names, as engine.model.bundle stores it)
        optimizer.safetensors       AdamW state by parameter *name*: ``<name>.exp_avg``,
                                    ``<name>.exp_avg_sq``, ``<name>.step``
        trainer_state.json          step, data position (sampler epoch + batches consumed), the
                                    optimizer's param groups (hyperparameters + parameter names),
                                    the run config, the decoder config, metrics at save time
        decoder_config.json         DecoderConfig.to_dict()
        tokenizer.json              the corpus tokenizer

A checkpoint is written into ``checkpoints/.step_XXXXXXXX.tmp`` and renamed into place, so a
directory named ``step_*`` is always complete; only the newest ``keep`` are kept. The learning rate
schedule is a pure function of the step, and the random streams are re-seeded from
``(seed, rank, step)`` at every step (see training.core.loop), so step + data position + weights +
optimizer moments are the whole training state.

The writing helpers (:func:`write_json_atomic`, :func:`atomic_folder`, :func:`complete_folder`,
:func:`module_weights`, :func:`optimizer_tensors` / :func:`load_optimizer_state`, :func:`log_metrics`)
serve the checkpoints of encoder training and adaptation too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from engine.errors import BundleError
from engine.model.decoder import ConditionalDecoder, DecoderConfig
from engine.model.tokenizer import SafeTokenizer

FORMAT = "msgpt-pretrain-checkpoint"
FORMAT_VERSION = 1
CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"step_(\d{8})")


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


@contextmanager
def atomic_folder(final: Path, tmp: Path | None = None) -> Iterator[Path]:
    """Write a folder whole or not at all: yields an empty scratch folder (``tmp``, default ``<final>.tmp``)
    that replaces ``final`` when the block ends without an error (an error leaves ``final`` as it was).

    The previous ``final`` is renamed ``<final>.old`` for the moment of the swap, so a crash there leaves
    one complete folder: :func:`complete_folder` finds it.
    """
    tmp = final.with_name(final.name + ".tmp") if tmp is None else tmp
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def complete_folder(final: Path, marker: str) -> Path | None:
    """``final`` if it holds ``marker`` (the file written last), else the ``<final>.old`` a crash in
    :func:`atomic_folder`'s swap left, else None."""
    for folder in (final, final.with_name(final.name + ".old")):
        if (folder / marker).is_file():
            return folder
    return None


def module_weights(module: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """CPU copies of a state_dict for safetensors (shared tensors cloned per name; floats cast to ``dtype``)."""
    return {
        k: v.detach().to("cpu", dtype if dtype is not None and v.is_floating_point() else v.dtype).contiguous().clone()
        for k, v in module.state_dict().items()
    }


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.fullmatch(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = checkpoint_dirs(run_dir)
    return found[-1] if found else None


def save_checkpoint(
    run_dir: str | Path,
    *,
    model: ConditionalDecoder,
    optimizer: torch.optim.Optimizer,
    param_names: list[str],
    tokenizer: SafeTokenizer,
    state: dict,
    keep: int,
) -> Path:
    """Write ``checkpoints/step_<state['step']>`` atomically, then delete all but the newest ``keep``."""
    from safetensors.torch import save_file

    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{int(state['step']):08d}"
    final = root / name  # the same step may be saved again (e.g. a stop right after an interval save)
    with atomic_folder(final, tmp=root / f".{name}.tmp") as tmp:
        save_file(module_weights(model), str(tmp / "model.safetensors"))
        tensors, groups = optimizer_tensors(optimizer, param_names)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "decoder_config.json").write_text(json.dumps(model.config.to_dict(), indent=1) + "\n")
        tokenizer.save(tmp / "tokenizer.json")
        full_state = {"format": FORMAT, "version": FORMAT_VERSION, **state, "optimizer_param_groups": groups}
        (tmp / STATE_FILE).write_text(json.dumps(full_state, indent=1) + "\n")  # last: marks the directory complete
    for old in checkpoint_dirs(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def optimizer_tensors(optimizer: torch.optim.Optimizer, param_names: list[str]) -> tuple[dict, list[dict]]:
    """The optimizer's per-parameter state as ``{"<name>.<key>": tensor}`` and its groups as JSON.

    ``param_names`` names the parameters in the optimizer's order (group after group).
    """
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for index, values in sd["state"].items():
        for key, value in values.items():
            t = value if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"{param_names[index]}.{key}"] = t.detach().to("cpu").contiguous().clone()
    groups = []
    for g in sd["param_groups"]:
        group = {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
        group["param_names"] = [param_names[i] for i in g["params"]]
        groups.append(group)
    return tensors, groups


def load_checkpoint(
    path: str | Path,
    *,
    model: ConditionalDecoder,
    optimizer: torch.optim.Optimizer | None,
    param_names: list[str],
) -> dict:
    """Load weights (and optimizer state) of a checkpoint directory into ``model`` / ``optimizer``;
    returns its trainer state."""
    path = Path(path)
    state = read_state(path)
    weights = _load_safetensors(path / "model.safetensors")
    expected = model.state_dict()
    if set(weights) != set(expected) or any(weights[k].shape != v.shape for k, v in expected.items()):
        raise BundleError(
            f"{path}: model.safetensors does not match this decoder (different preset or vocabulary?); "
            "resume with the settings the run was started with."
        )
    model.load_state_dict(weights)
    if optimizer is None:
        return state

    groups = state["optimizer_param_groups"]
    saved_names = [n for g in groups for n in g["param_names"]]
    if saved_names != param_names:
        raise BundleError(f"{path}: the optimizer's parameters are not this decoder's; it is of another model.")
    load_optimizer_state(optimizer, _load_safetensors(path / "optimizer.safetensors"), groups, param_names)
    return state


def load_optimizer_state(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], groups: list[dict], param_names: list[str]
) -> None:
    """The inverse of :func:`optimizer_tensors`: load its tensors and groups into ``optimizer``, whose
    parameters ``param_names`` names in optimizer order."""
    per_param: dict[int, dict] = {}
    for i, name in enumerate(param_names):
        values = {k[len(name) + 1 :]: t for k, t in tensors.items() if k.rsplit(".", 1)[0] == name}
        if values:
            per_param[i] = values
    param_groups, start = [], 0
    for g in groups:
        n = len(g["param_names"])
        hyper = {k: (tuple(v) if k == "betas" else v) for k, v in g.items() if k != "param_names"}
        param_groups.append({**hyper, "params": list(range(start, start + n))})
        start += n
    optimizer.load_state_dict({"state": per_param, "param_groups": param_groups})


def read_state(path: str | Path) -> dict:
    path = Path(path)
    try:
        state = json.loads((path / STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BundleError(f"{path}: not a readable pretraining checkpoint ({e}).") from e
    if state.get("format") != FORMAT or state.get("version") != FORMAT_VERSION:
        raise BundleError(
            f"{path}: not a checkpoint of format {FORMAT!r} version {FORMAT_VERSION} "
            f"(found {state.get('format')!r} version {state.get('version')!r})."
        )
    return state


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise BundleError(f"{path} is truncated or corrupt ({e}).") from e


def load_decoder(path: str | Path) -> tuple[ConditionalDecoder, SafeTokenizer]:
    """The decoder and tokenizer of a checkpoint directory, an exported decoder directory or a model
    bundle (its ``config.json`` holds the decoder configuration; weights are read in fp32)."""
    path = Path(path)
    if (path / "decoder_config.json").is_file():
        config = DecoderConfig.from_dict(json.loads((path / "decoder_config.json").read_text()))
    else:
        config = DecoderConfig.from_dict(json.loads((path / "config.json").read_text())["decoder"])
    model = ConditionalDecoder(config)
    weights_file = path / ("model.safetensors" if (path / "model.safetensors").is_file() else "decoder.safetensors")
    weights = _load_safetensors(weights_file)
    expected = model.state_dict()
    model.load_state_dict({k: weights[k].to(v.dtype) for k, v in expected.items()})
    return model, SafeTokenizer.load(path / "tokenizer.json")


def export_decoder(src: str | Path, dest: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """Write ``decoder.safetensors`` + ``decoder_config.json`` + ``tokenizer.json`` of a checkpoint.

    ``src`` is a checkpoint directory or a run directory (its newest checkpoint). The files are what
    ``engine.model.bundle.save_bundle`` needs for the decoder part of a bundle (see :func:`load_decoder`).
    """
    src = Path(src)
    if not (src / STATE_FILE).is_file():
        found = latest_checkpoint(src)
        if found is None:
            raise BundleError(f"{src}: neither a checkpoint directory nor a run directory with checkpoints.")
        src = found
    from safetensors.torch import save_file

    model, tokenizer = load_decoder(src)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    save_file(module_weights(model, dtype), str(dest / "decoder.safetensors"))
    (dest / "decoder_config.json").write_text(json.dumps(model.config.to_dict(), indent=1) + "\n")
    tokenizer.save(dest / "tokenizer.json")
    return dest


def log_metrics(path: Path, record: dict) -> None:
    """Append one JSON line (with the wall-clock ``time``) to a run's ``metrics.jsonl``."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({**record, "time": round(time.time(), 3)}) + "\n")


def truncate_metrics(path: Path, step: int) -> None:
    """Keep the records up to ``step`` of a ``metrics.jsonl`` (a fresh run, step 0, keeps none): a resumed
    run rewrites what a crash left after its last checkpoint."""
    if not path.exists():
        return
    keep = []
    if step > 0:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    keep.append(line)
            except json.JSONDecodeError:  # a line cut by a crash
                continue
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
    os.replace(tmp, path)
