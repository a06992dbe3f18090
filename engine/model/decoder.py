"""Conditional SAFE decoder p(y | z, C): a GPT-2 backbone reading a fingerprint + formula context.

The paper's Appendix "Model Architecture", module by module:

- backbone: GPT-2 (token + learned position embeddings, pre-LN blocks, fused QKV ``c_attn``, tied LM
  head). Module names follow Hugging Face ``GPT2LMHeadModel`` (``transformer.wte/wpe/h.i/ln_f``,
  ``attn.c_attn/c_proj``, ``mlp.c_fc/c_proj``, GELU-tanh as GPT-2's ``gelu_new``), so a SAFE-GPT
  checkpoint maps in by name; only HF's ``Conv1D`` weights need a transpose.
- fingerprint encoder: an embedding per active bit index (<= 256 tokens, ascending, padded, with a
  validity mask), a 2-layer pre-norm transformer encoder (GELU), final LayerNorm.
- formula encoder: per element, a learned element embedding concatenated with a 2-layer MLP encoding
  of its count, projected to d and layer-normed: 14 tokens.
- context: fingerprint tokens + formula tokens (+ mask), through ONE shared linear projection.
- conditioning blocks after layers ``cross_every, 2*cross_every, ...``: pre-norm cross-attention to
  the context, then a pre-norm FFN, residuals around both.

Every non-backbone attention (fingerprint encoder and cross-attention) has separate ``q_proj``,
``k_proj``, ``v_proj`` and ``out_proj`` linears, so the LoRA targets of posterior-aligned adaptation
exist without splitting a fused projection (training/decoder/adapt.py:
``fp_encoder.layers.*.attn.{v,out}_proj``, ``ctx_proj``, ``cross.*.attn.{q,k,v,out}_proj`` and
``cross.*.mlp.{c_fc,c_proj}``); the backbone stays as is.

Inference support: ``decode`` takes a self-attention ``cache`` with Hugging Face's ``Cache``
interface (``update(k, v, layer_idx)``, ``get_seq_length()``), and a :class:`ContextKV` holding the
cross-attention keys/values of each distinct context, computed once (``context_kv``) and shared by
all rows that read it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

from engine.chem.formula import ELEMENTS
from engine.errors import ConfigError

PAD_ID = 0  # engine.model.tokenizer puts <pad> at id 0; the loss ignores it


@dataclass
class DecoderConfig:
    vocab_size: int = field(default=1882, metadata={"help": "SAFE vocabulary size (tokenizer.vocab_size)"})
    block_size: int = field(default=256, metadata={"help": "maximum SAFE tokens per sequence, <bos> included"})
    n_layer: int = field(default=12, metadata={"help": "GPT-2 blocks"})
    n_head: int = field(default=12, metadata={"help": "self-attention heads"})
    n_embd: int = field(default=768, metadata={"help": "model width d (also of the context)"})
    dropout: float = field(default=0.1, metadata={"help": "dropout in backbone, fingerprint encoder, cross blocks"})
    bias: bool = field(default=True, metadata={"help": "biases in Linear layers (GPT-2 has them)"})
    fp_bits: int = field(default=4096, metadata={"help": "fingerprint length (bit index vocabulary)"})
    max_fp_tokens: int = field(default=256, metadata={"help": "active bits kept per query (lowest indices)"})
    fp_layers: int = field(default=2, metadata={"help": "fingerprint transformer encoder layers"})
    fp_heads: int = field(default=12, metadata={"help": "fingerprint encoder attention heads"})
    fp_ffn: int = field(default=3072, metadata={"help": "fingerprint encoder feed-forward width"})
    n_elements: int = field(default=len(ELEMENTS), metadata={"help": "formula elements (engine.chem.formula.ELEMENTS)"})
    count_hidden: int = field(default=768, metadata={"help": "hidden width of the atom-count MLP"})
    cross_every: int = field(default=2, metadata={"help": "a conditioning block after every k-th GPT-2 block"})
    cross_heads: int = field(default=12, metadata={"help": "cross-attention heads"})
    cross_ffn: int = field(default=3072, metadata={"help": "conditioning block feed-forward width"})

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "bool" and not isinstance(v, bool):
                raise ConfigError(f"`{f.name}` must be true or false, got {v!r}.")
            if f.type == "int" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"`{f.name}` must be a positive integer, got {v!r}.")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ConfigError(f"`dropout` must be a number in [0, 1), got {self.dropout!r}.")
        for heads in ("n_head", "fp_heads", "cross_heads"):
            if self.n_embd % getattr(self, heads):
                raise ConfigError(f"`n_embd` ({self.n_embd}) must be divisible by `{heads}` ({getattr(self, heads)}).")
        if self.max_fp_tokens > self.fp_bits:
            raise ConfigError(f"`max_fp_tokens` ({self.max_fp_tokens}) cannot exceed `fp_bits` ({self.fp_bits}).")
        if self.n_elements != len(ELEMENTS):
            raise ConfigError(f"`n_elements` must be {len(ELEMENTS)} (engine.chem.formula.ELEMENTS), got {self.n_elements}.")
        if self.cross_every > self.n_layer:
            raise ConfigError(f"`cross_every` ({self.cross_every}) cannot exceed `n_layer` ({self.n_layer}).")
        if self.vocab_size <= 4:
            raise ConfigError(f"`vocab_size` must exceed the 4 special tokens, got {self.vocab_size}.")
        if self.block_size < 2:
            raise ConfigError(f"`block_size` must be at least 2 (<bos> and one token), got {self.block_size}.")

    @property
    def n_cross(self) -> int:
        return self.n_layer // self.cross_every

    @property
    def context_size(self) -> int:
        return self.max_fp_tokens + self.n_elements

    @classmethod
    def preset(cls, name: str, **overrides) -> DecoderConfig:
        """``paper`` (the paper's 150M model), ``small`` (fast on 2 CPU cores) or ``tiny`` (tests)."""
        if name not in PRESETS:
            raise ConfigError(f"Unknown decoder preset {name!r}; choose one of {', '.join(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> DecoderConfig:
        """Rebuild a saved config; unknown keys warn (a newer program wrote them), bad values raise ConfigError."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            warnings.warn(f"Ignoring unknown decoder config keys: {', '.join(unknown)}.", stacklevel=2)
        return cls(**{k: v for k, v in d.items() if k in names})


PRESETS: dict[str, dict] = {
    "paper": {},
    # CPU preset, chosen with benchmarks/bench_sampling.py --small-candidates: B=100 x 60 new tokens in
    # ~0.7 s on 2 cores with bf16 weights (6 x 384 took ~0.9 s: self-attention over the KV cache is
    # memory-bound at B=100, so width costs more than the FLOPs suggest). Heads stay 64 wide.
    "small": dict(n_layer=6, n_head=4, n_embd=256, fp_heads=4, fp_ffn=1024, count_hidden=256,
                  cross_heads=4, cross_ffn=1024),
    "tiny": dict(vocab_size=64, block_size=64, n_layer=2, n_head=2, n_embd=32, dropout=0.0, fp_bits=4096,
                 max_fp_tokens=32, fp_layers=1, fp_heads=2, fp_ffn=64, count_hidden=16, cross_heads=2, cross_ffn=64),
}


def attend(q, k, v, mask, dropout: float = 0.0):
    """softmax(q k^T / sqrt(hs)) v; ``mask`` is boolean, True where attention is allowed.

    Plain matmul + softmax: on CPU it beat ``scaled_dot_product_attention`` for one-token decoding
    (see benchmarks/bench_sampling.py --attention).
    """
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (..., Tq, Tk)
    att = att.masked_fill(~mask, float("-inf"))
    att = F.dropout(att.softmax(dim=-1), dropout)
    return att @ v  # (..., Tq, hs)


class MLP(nn.Module):
    def __init__(self, d: int, hidden: int, config: DecoderConfig, approximate: str = "none"):
        super().__init__()
        self.c_fc = nn.Linear(d, hidden, bias=config.bias)
        self.gelu = nn.GELU(approximate=approximate)
        self.c_proj = nn.Linear(hidden, d, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class CausalSelfAttention(nn.Module):
    """GPT-2 self-attention with a fused ``c_attn``; ``cache`` holds past keys/values (HF ``Cache`` interface)."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.n_head, self.dropout = config.n_head, config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x, cache=None, layer_idx: int = 0):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        past = 0
        if cache is not None:
            past = cache.get_seq_length(layer_idx)
            k, v = cache.update(k, v, layer_idx)  # (B, nh, S, hs), S >= past + T (a cache may return spare slots)
        pos = torch.arange(k.size(2), device=x.device)
        mask = pos <= past + torch.arange(T, device=x.device)[:, None]  # (T, S) causal, spare slots masked
        y = attend(q, k, v, mask, self.dropout if self.training else 0.0)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    """GPT-2 pre-LN block."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config.n_embd, 4 * config.n_embd, config, approximate="tanh")

    def forward(self, x, cache=None, layer_idx: int = 0):
        x = x + self.attn(self.ln_1(x), cache, layer_idx)
        return x + self.mlp(self.ln_2(x))


class Attention(nn.Module):
    """Multi-head attention with separate q/k/v/out projections (the LoRA targets), for context reads."""

    def __init__(self, n_head: int, config: DecoderConfig):
        super().__init__()
        d = config.n_embd
        self.n_head, self.dropout = n_head, config.dropout
        self.q_proj = nn.Linear(d, d, bias=config.bias)
        self.k_proj = nn.Linear(d, d, bias=config.bias)
        self.v_proj = nn.Linear(d, d, bias=config.bias)
        self.out_proj = nn.Linear(d, d, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)

    def kv(self, ctx):
        """Keys and values of a context (G, L, C) -> two (G, nh, L, hs)."""
        G, L, C = ctx.size()
        return tuple(p(ctx).view(G, L, self.n_head, C // self.n_head).transpose(1, 2).contiguous()  # (G, nh, L, hs)
                     for p in (self.k_proj, self.v_proj))

    def forward(self, x, k, v, mask, slot=None, slots: int = 1):
        """Attend from x (B, T, C) to k, v (G, nh, L, hs) under ``mask`` (broadcastable to (G, nh, slots*T, L)).

        Rows are read as a (G, slots) grid, so the K/V of each context is read once for all its rows:
        without ``slot``, row b is cell b (B == G * slots; G == B is one context per row); with it, row b
        sits at flat position slot[b] and empty cells stay zero.
        """
        B, T, C = x.size()
        G, nh = k.size(0), self.n_head
        q = self.q_proj(x).view(B, T, nh, C // nh)
        if slot is not None:
            q = q.new_zeros(G * slots, T, nh, C // nh).index_copy_(0, slot, q)  # (G*slots, T, nh, hs)
        q = q.view(G, -1, nh, C // nh).transpose(1, 2)  # (G, nh, slots*T, hs)
        y = attend(q, k, v, mask, self.dropout if self.training else 0.0)  # (G, nh, slots*T, hs)
        y = y.transpose(1, 2).reshape(-1, T, C)  # (G*slots, T, C)
        if slot is not None:
            y = y[slot]  # (B, T, C)
        return self.resid_dropout(self.out_proj(y))


class EncoderLayer(nn.Module):
    """Pre-norm transformer encoder layer of the fingerprint encoder."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = Attention(config.fp_heads, config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config.n_embd, config.fp_ffn, config)

    def forward(self, x, mask):
        h = self.ln_1(x)
        x = x + self.attn(h, *self.attn.kv(h), mask)
        return x + self.mlp(self.ln_2(x))


class FingerprintEncoder(nn.Module):
    """Active-bit indices (B, F) + validity mask -> contextualised bit tokens (B, F, C)."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.bit_emb = nn.Embedding(config.fp_bits, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.fp_layers))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)

    def forward(self, bits, mask):
        n = bits.size(1)
        # valid bits attend to valid bits; padding attends to itself only, so no softmax row is empty
        attn_mask = (mask[:, None, :] | torch.eye(n, dtype=torch.bool, device=bits.device))[:, None]  # (B, 1, F, F)
        x = self.drop(self.bit_emb(bits))  # (B, F, C)
        for layer in self.layers:
            x = layer(x, attn_mask)
        return self.ln_f(x)


class FormulaEncoder(nn.Module):
    """Element counts (B, 14) -> 14 tokens: [element embedding ; MLP(count)] -> Linear -> LayerNorm."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        d = config.n_embd
        self.element = nn.Embedding(config.n_elements, d)
        self.count_mlp = nn.Sequential(nn.Linear(1, config.count_hidden), nn.GELU(), nn.Linear(config.count_hidden, d))
        self.proj = nn.Linear(2 * d, d, bias=config.bias)
        self.ln = nn.LayerNorm(d, bias=config.bias)

    def forward(self, counts):
        B = counts.size(0)
        c = self.count_mlp(counts.unsqueeze(-1).to(self.proj.weight.dtype))  # (B, 14, C), raw counts in
        e = self.element.weight.expand(B, -1, -1)  # (B, 14, C)
        return self.ln(self.proj(torch.cat([e, c], dim=-1)))  # (B, 14, C)


class CrossBlock(nn.Module):
    """Conditioning block: pre-norm cross-attention to the context, then a pre-norm FFN, residuals."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = Attention(config.cross_heads, config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config.n_embd, config.cross_ffn, config)

    def forward(self, x, k, v, context: ContextKV):
        mask = context.mask[:, None, None, :]  # (G, 1, 1, L)
        x = x + self.attn(self.ln_1(x), k, v, mask, context.slot, context.slots)
        return x + self.mlp(self.ln_2(x))


@dataclass
class ContextKV:
    """Cross-attention keys/values of G contexts (one (k, v) per conditioning block), computed once.

    Decoder rows read them as a (G, slots) grid, so each context's K/V is read once for all the rows
    that share it: row b is cell b (by default slots=1: row b reads context b), or sits at flat
    position ``slot[b]`` when contexts are shared by unequal numbers of rows.
    """

    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per conditioning block: k, v (G, nh, L, hs)
    mask: torch.Tensor  # (G, L) bool, True = valid context position
    slot: torch.Tensor | None = None  # (B,)
    slots: int = 1

    def for_rows(self, group: torch.Tensor) -> ContextKV:
        """The contexts read by rows whose context index is ``group`` (B,), in any order; unread ones dropped."""
        used, g = torch.unique(group, return_inverse=True)  # (G',), (B,)
        counts = torch.bincount(g)
        slots = int(counts.max())
        kv = [(k[used], v[used]) for k, v in self.kv]
        order = torch.argsort(g, stable=True)
        rank = torch.empty_like(g)
        rank[order] = torch.arange(len(g), device=g.device) - (counts.cumsum(0) - counts)[g[order]]  # place in group
        slot = g * slots + rank
        if len(group) == len(used) * slots and bool((slot == torch.arange(len(g), device=g.device)).all()):
            return ContextKV(kv, self.mask[used], None, slots)  # rows already form the grid
        return ContextKV(kv, self.mask[used], slot, slots)


class ConditionalDecoder(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.fp_encoder = FingerprintEncoder(config)
        self.formula_encoder = FormulaEncoder(config)
        self.ctx_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.cross = nn.ModuleList(CrossBlock(config) for _ in range(config.n_cross))
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scaled init of projections into the residual stream
            if name.endswith(("c_proj.weight", "out_proj.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def encode_context(self, fp_bits, fp_mask, formula):
        """fp_bits (B, F) long, fp_mask (B, F) bool, formula (B, 14) long -> ctx (B, F+14, C), ctx_mask (B, F+14)."""
        fp = self.fp_encoder(fp_bits, fp_mask)  # (B, F, C)
        fo = self.formula_encoder(formula)  # (B, 14, C)
        ctx = self.ctx_proj(torch.cat([fp, fo], dim=1))  # (B, L, C)
        ctx_mask = torch.cat([fp_mask, fp_mask.new_ones(fo.shape[:2])], dim=1)  # (B, L)
        return ctx, ctx_mask

    def context_kv(self, ctx, ctx_mask) -> ContextKV:
        """Keys/values of every conditioning block for ctx (G, L, C): compute once per distinct context."""
        return ContextKV([blk.attn.kv(ctx) for blk in self.cross], ctx_mask)

    def decode(self, idx, context: ContextKV, cache=None):
        """Logits (B, T, V) for tokens idx (B, T) following the ``cache``'s past tokens."""
        B, T = idx.size()
        past = cache.get_seq_length(0) if cache is not None else 0
        if past + T > self.config.block_size:
            raise ConfigError(f"Sequence length {past + T} exceeds `block_size` ({self.config.block_size}).")
        pos = torch.arange(past, past + T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)
        for i, block in enumerate(self.transformer.h):
            x = block(x, cache, i)
            if (i + 1) % self.config.cross_every == 0:
                c = (i + 1) // self.config.cross_every - 1
                x = self.cross[c](x, *context.kv[c], context)
        return self.lm_head(self.transformer.ln_f(x))  # (B, T, V)

    def forward(self, idx, ctx, ctx_mask, targets=None):
        """Teacher forcing: idx (B, T), ctx (B, L, C), ctx_mask (B, L) -> logits (B, T, V), loss (pad ignored)."""
        logits = self.decode(idx, self.context_kv(ctx, ctx_mask))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=PAD_ID)
        return logits, loss


def collate_queries(bit_arrays, formula_vectors, max_fp_tokens: int = 256, fp_bits: int = 4096, pad_to: int | None = None):
    """Fingerprint queries (sorted active-bit arrays) + formula vectors -> (fp_bits, fp_mask, formula) tensors.

    Keeps the ``max_fp_tokens`` lowest bits of each query. Pads to the longest query (at least 1) unless
    ``pad_to`` is given (the paper pads to 256): padding is masked, so the decoder's output is the same,
    and a shorter context is cheaper to attend to. ``formula_vectors`` is (B, 14) or one (14,) for all.
    """
    rows = [np.asarray(b, dtype=np.int64)[:max_fp_tokens] for b in bit_arrays]
    for b in rows:
        if b.size and (b.min() < 0 or b.max() >= fp_bits or np.any(np.diff(b) <= 0)):
            raise ConfigError(f"A fingerprint query must hold sorted distinct bit indices in [0, {fp_bits}).")
    n = pad_to or max(1, max((len(b) for b in rows), default=1))
    bits = torch.zeros(len(rows), n, dtype=torch.long)
    mask = torch.zeros(len(rows), n, dtype=torch.bool)
    for r, b in enumerate(rows):
        bits[r, : len(b)] = torch.from_numpy(b)
        mask[r, : len(b)] = True
    formula = torch.as_tensor(np.asarray(formula_vectors, dtype=np.int64))
    formula = formula.expand(len(rows), -1) if formula.ndim == 1 else formula
    return bits, mask, formula.contiguous()


COMPONENTS = {
    "backbone": ("transformer.", "lm_head."),
    "fingerprint_encoder": ("fp_encoder.",),
    "formula_encoder": ("formula_encoder.",),
    "cross_attention": ("cross.",),
    "context_projection": ("ctx_proj.",),
}


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Parameters per component and ``total`` (unique: the tied LM head counts once, in the backbone)."""
    counts = dict.fromkeys([*COMPONENTS, "other"], 0)
    for name, p in model.named_parameters():  # yields each shared tensor once
        part = next((c for c, prefixes in COMPONENTS.items() if name.startswith(prefixes)), "other")
        counts[part] += p.numel()
    if not counts["other"]:
        del counts["other"]
    counts["total"] = sum(counts.values())
    return counts

