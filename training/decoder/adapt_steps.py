"""The objective and steps of posterior-aligned adaptation: collating examples, the loss, the probability of a
reference sequence under the sampler, validation, the trainer and one step; and writing the adapter into a bundle."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from engine.errors import BundleError, ConfigError
from engine.model.bundle import load_bundle
from engine.model.decoder import PAD_ID, ConditionalDecoder, collate_queries
from engine.model.sampling import filter_probs
from training.core.loop import lr_at, reseed
from training.decoder.adapt_config import AdaptConfig, attach_lora, trainable_parameters
from training.decoder.adapt_examples import Example, batch_indices, draw_thresholds


def collate_examples(examples: Sequence[Example], thresholds: Sequence[float], config) -> dict[str, torch.Tensor]:
    """Teacher-forcing tensors of ``examples``, each queried at its threshold: z_t = 1[pi > t]."""
    fp_bits, fp_mask, formula = collate_queries([e.query(t) for e, t in zip(examples, thresholds)],
                                                np.stack([e.formula for e in examples]), config.max_fp_tokens,
                                                config.fp_bits)
    T = max(len(e.tokens) for e in examples)
    seq = torch.full((len(examples), T), PAD_ID, dtype=torch.long)
    for r, e in enumerate(examples):
        seq[r, : len(e.tokens)] = torch.from_numpy(e.tokens)
    return {"idx": seq[:, :-1], "targets": seq[:, 1:], "fp_bits": fp_bits, "fp_mask": fp_mask, "formula": formula}


def forward_logits(decoder: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    """Teacher-forced logits (B, T, V) of a collated batch (LoRA layers of a peft model included)."""
    ctx, ctx_mask = decoder.encode_context(b["fp_bits"], b["fp_mask"], b["formula"])  # (B, L, C), (B, L)
    logits, _ = decoder(b["idx"], ctx, ctx_mask)
    return logits


def adaptation_loss(student: torch.Tensor, teacher: torch.Tensor, targets: torch.Tensor, ce_weight: torch.Tensor,
                    kl_weight: torch.Tensor, n_tokens: int | None = None) -> tuple[torch.Tensor, dict]:
    """sum over non-padding positions of (alpha_g CE + lambda_g KL(teacher || student)) / n_tokens.

    student, teacher (B, T, V) logits; targets (B, T) with PAD_ID as padding; ce_weight, kl_weight (B,)
    per example. ``n_tokens`` defaults to this batch's non-padding positions (give the whole
    optimizer batch's count when the batch runs in pieces). Also returns the unweighted CE and KL
    sums and the token count, for logging.
    """
    mask = targets != PAD_ID  # (B, T)
    logp = F.log_softmax(student.float(), dim=-1)  # (B, T, V)
    logq = F.log_softmax(teacher.float(), dim=-1)
    ce = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    kl = (logq.exp() * (logq - logp)).sum(-1)  # (B, T) forward KL, teacher to student
    per_token = ce_weight[:, None] * ce + kl_weight[:, None] * kl
    n = int(mask.sum()) if n_tokens is None else n_tokens
    loss = (per_token * mask).sum() / max(n, 1)
    parts = {"ce": float((ce.detach() * mask).sum()), "kl": float((kl.detach() * mask).sum()), "tokens": int(mask.sum())}
    return loss, parts


@torch.no_grad()
def _sequence_probabilities(decoder: nn.Module, rows: Sequence[tuple[Example, float]], amp=nullcontext,
                            micro_batch: int = 32, top_k: int = 50, top_p: float = 0.95) -> dict:
    """Teacher-forced pass over (example, threshold) rows: per row ``p``, the probability that the
    sampler (T=1, ``top_k``, ``top_p``) writes exactly the example's tokens; summed ``nll``, ``correct``
    (argmax = target) and ``count`` over all target tokens."""
    was_training = decoder.training
    decoder.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0].tokens))
    seq_p = np.zeros(len(rows))
    correct = count = 0
    nll = 0.0
    device = next(decoder.parameters()).device
    with torch.no_grad():
        for start in range(0, len(order), micro_batch):
            chunk = order[start : start + micro_batch]
            b = collate_examples([rows[i][0] for i in chunk], [rows[i][1] for i in chunk], decoder.config)
            b = {k: v.to(device) for k, v in b.items()}
            with amp():
                logits = forward_logits(decoder, b)
            logits = logits.float()
            targets, mask = b["targets"], b["targets"] != PAD_ID  # (B, T)
            logp = F.log_softmax(logits, dim=-1)
            nll -= float(logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)[mask].sum())
            correct += int(((logits.argmax(-1) == targets) & mask).sum())
            count += int(mask.sum())
            probs, ids = filter_probs(logits[mask], 1.0, top_k, top_p)  # (n, K): what the sampler draws from
            p = (probs * (ids == targets[mask][:, None])).sum(-1) / probs.sum(-1)  # (n,) 0 when filtered out
            row = torch.arange(len(chunk), device=device)[:, None].expand_as(mask)[mask]
            seq_logp = torch.zeros(len(chunk), dtype=torch.float64, device=device).index_add_(0, row, p.double().log())
            seq_p[chunk] = seq_logp.exp().cpu().numpy()
    decoder.train(was_training)
    return {"p": seq_p, "nll": nll, "correct": correct, "count": count}


def validate(decoder: nn.Module, examples: Sequence[Example], thresholds, amp,
             micro_batch: int = 32, top_k: int = 50, top_p: float = 0.95) -> dict:
    """Token accuracy, NLL per token and ``expected_share`` (module docstring) of ``examples`` x ``thresholds``.

    ``thresholds``: (K,) for every example, or (len(examples), K), each example's own."""
    thresholds = np.asarray(thresholds, np.float64)
    if thresholds.ndim == 1:
        thresholds = np.broadcast_to(thresholds, (len(examples), len(thresholds)))
    rows = [(e, float(t)) for e, ts in zip(examples, thresholds) for t in ts]
    r = _sequence_probabilities(decoder, rows, amp, micro_batch, top_k, top_p)
    n = max(len(rows), 1)
    return {"expected_share": float(r["p"].sum()) / n, "token_accuracy": r["correct"] / max(r["count"], 1),
            "nll": r["nll"] / max(r["count"], 1), "rows": len(rows)}


def make_trainer(decoder: ConditionalDecoder, config: AdaptConfig):
    """LoRA on ``decoder`` (frozen, modified in place; LoRA A initialised from ``config.seed``) and its AdamW."""
    torch.manual_seed(config.seed)
    model = attach_lora(decoder, config)
    optimizer = torch.optim.AdamW([p for _, p in trainable_parameters(model)], lr=config.lr,
                                  betas=(config.beta1, config.beta2), weight_decay=config.weight_decay)
    return model, optimizer


def train_step(model, optimizer, train: Sequence[Example], step: int, t_lo: float, t_hi: float,
               config: AdaptConfig, amp=nullcontext) -> dict:
    """Optimizer update ``step`` (0-based): its batch, thresholds and dropout are functions of (seed, step).

    The batch runs in pieces of ``micro_batch`` examples of similar length; each piece's loss is
    divided by the token count of the whole batch, so the gradient is the batch's. Returns the
    batch loss, the unweighted token-mean CE and KL, the learning rate and the gradient norm.
    """
    decoder = model.get_base_model()
    device = next(decoder.parameters()).device
    reseed(config.seed, 0, step)
    idx = batch_indices(config.seed, step, config.batch_size, len(train))
    bands = np.array([train[i].band_or(t_lo, t_hi) for i in idx])  # (B, 2): each example's own band
    ts = draw_thresholds(config.seed, step, len(idx), bands[:, 0], bands[:, 1])
    weights = torch.tensor([config.group_weights(train[i].group) for i in idx])  # (B, 2): alpha_g, lambda_g
    order = sorted(range(len(idx)), key=lambda j: len(train[idx[j]].tokens))
    n_tokens = sum(len(train[i].tokens) - 1 for i in idx)
    loss_sum = ce_sum = kl_sum = 0.0
    for start in range(0, len(order), config.micro_batch):
        rows = order[start : start + config.micro_batch]
        b = collate_examples([train[i] for i in idx[rows]], ts[rows], decoder.config)
        b = {k: v.to(device) for k, v in b.items()}
        decoder.eval()
        with torch.no_grad(), model.disable_adapter(), amp():
            teacher = forward_logits(decoder, b)  # the frozen model, without dropout
        decoder.train()
        with amp():
            student = forward_logits(decoder, b)
        w = weights[rows].to(device)
        loss, parts = adaptation_loss(student, teacher, b["targets"], w[:, 0], w[:, 1], n_tokens)
        loss.backward()
        loss_sum, ce_sum, kl_sum = loss_sum + loss.item(), ce_sum + parts["ce"], kl_sum + parts["kl"]
    params = [p for _, p in trainable_parameters(model)]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip or float("inf"))
    lr = lr_at(step, lr=config.lr, min_lr=config.min_lr, warmup_steps=config.warmup_steps, max_steps=config.steps)
    for g in optimizer.param_groups:
        g["lr"] = lr
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss": loss_sum, "ce": ce_sum / n_tokens, "kl": kl_sum / n_tokens, "lr": lr,
            "grad_norm": float(grad_norm)}


def write_adapted_bundle(base: str | Path, adapter: str | Path, dest: str | Path, name: str | None = None,
                         info: dict | None = None) -> Path:
    """Copy the base bundle to ``dest`` with ``adapter`` as its ``adapter/``; checks that it loads, merged."""
    base, adapter, dest = Path(base), Path(adapter), Path(dest)
    if not (adapter / "adapter_model.safetensors").is_file():
        raise ConfigError(f"{adapter} holds no adapter_model.safetensors; finish the adaptation run first.")
    if dest.exists() and any(dest.iterdir()):
        raise ConfigError(f"{dest} exists and is not empty; give a new folder for the adapted bundle.")
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(base, tmp, ignore=shutil.ignore_patterns("adapter", ".adapter.tmp"))
    shutil.copytree(adapter, tmp / "adapter")
    config = json.loads((tmp / "config.json").read_text())
    config["name"] = name or f"{config.get('name') or base.name}-pa"
    config["adapter"] = {"method": "posterior-aligned adaptation (LoRA)", "base_bundle": config.get("name"),
                         **(info or {})}
    config["adapter"]["base_bundle"] = json.loads((base / "config.json").read_text()).get("name", base.name)
    (tmp / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    bundle = load_bundle(tmp, device="cpu", precision="fp32")
    if not bundle.has_adapter:
        raise BundleError(f"{tmp}: the adapted bundle does not load its adapter.")
    if dest.exists():
        dest.rmdir()
    tmp.rename(dest)
    return dest
