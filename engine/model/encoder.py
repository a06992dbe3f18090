"""MIST-style spectrum encoder: annotated peaks -> posterior over 4096 Morgan fingerprint bits.

The input is the token set built by :mod:`engine.model.featurize` (root = precursor formula, then the
annotated peaks). Each token's 14 element counts get fixed Fourier features (sin/cos over a few
periods, plus ``log1p``), a linear map and learned root / adduct / polarity embeddings. A
pre-LayerNorm transformer runs over the set with no positional encoding, so it is invariant to
the order of peaks. Every attention logit gets an additive per-head, per-layer bias from an MLP over
the signed formula difference between the two tokens (and whether one is a subformula of the
other, i.e. could be its fragment): this is how MIST lets neutral losses steer attention. The root
token's output goes through an MLP to ``fp_bits`` logits; ``predict_proba`` applies the sigmoid
and gives the posterior ``pi`` of the paper.

Batches are the dicts of :func:`engine.model.featurize.collate`; the model follows the batch's device.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.chem.formula import ELEMENTS
from engine.errors import ConfigError
from engine.spectra.annotate import DEFAULT_MIN_RDBE, DEFAULT_TOL_DA, DEFAULT_TOL_PPM

N_ELEMENTS = len(ELEMENTS)
DEFAULT_MAX_PEAKS = 60  # why 60: see engine/model/featurize.py
# Typical share of set bits in a 4096-bit Morgan r=2 fingerprint (~45 of 4096); the output bias
# starts at its logit so the first steps do not spend themselves on learning sparsity.
_PRIOR_BIT_DENSITY = 0.011


@dataclass
class EncoderConfig:
    d_model: int = field(default=256, metadata={"help": "Width of token embeddings and the transformer."})
    n_layers: int = field(default=4, metadata={"help": "Number of transformer blocks."})
    n_heads: int = field(default=8, metadata={"help": "Attention heads; must divide `d_model`."})
    d_ff: int = field(default=512, metadata={"help": "Hidden width of each block's feed-forward MLP."})
    dropout: float = field(default=0.1, metadata={"help": "Dropout in attention, MLPs and head, in [0, 1)."})
    max_peaks: int = field(
        default=DEFAULT_MAX_PEAKS, metadata={"help": "Most peak tokens per spectrum (root not counted)."}
    )
    tol_ppm: float = field(default=DEFAULT_TOL_PPM, metadata={"help": "Peak annotation tolerance in ppm."})
    tol_da: float = field(
        default=DEFAULT_TOL_DA, metadata={"help": "Absolute floor of the annotation tolerance (Da)."}
    )
    min_rdbe: float | None = field(
        default=DEFAULT_MIN_RDBE, metadata={"help": "RDBE filter of candidate subformulas; None = off."}
    )
    fp_bits: int = field(default=4096, metadata={"help": "Fingerprint length (output logits)."})
    count_periods: tuple[float, ...] = field(
        default=(2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0),
        metadata={"help": "Periods (in atoms) of the sin/cos features of element counts."},
    )
    pair_hidden: int = field(
        default=32, metadata={"help": "Hidden width of the pairwise-bias MLP; 0 turns the bias off."}
    )
    head_hidden: int = field(default=256, metadata={"help": "Hidden width of the fingerprint head MLP."})
    grow_levels: int = field(
        default=0,
        metadata={"help": "MIST's growing head: predict the fingerprint folded to fp_bits / 2**grow_levels bits "
                  "first, then double it level by level, each level reading the previous one; 0 = one flat layer."},
    )
    fragment_bits: int = field(
        default=0,
        metadata={"help": "Training aid (MIST's MAGMa task): a per-peak head predicting the fingerprint, folded to "
                  "this many bits, of the fragment each peak is (training.encoder.substructures); 0 = none. Inference never "
                  "uses it."},
    )

    def __post_init__(self) -> None:
        if not isinstance(self.count_periods, (list, tuple)) or not all(map(_is_number, self.count_periods)):
            raise ConfigError(f"`count_periods` must be a list of numbers, got {self.count_periods!r}.")
        self.count_periods = tuple(float(p) for p in self.count_periods)
        for name in ("d_model", "n_layers", "n_heads", "d_ff", "max_peaks", "fp_bits", "head_hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {value!r}.")
        if self.d_model % self.n_heads:
            raise ConfigError(f"`d_model` ({self.d_model}) must be divisible by `n_heads` ({self.n_heads}).")
        tolerances = (self.tol_ppm, self.tol_da)
        if not all(_is_number(t) and t >= 0 for t in tolerances) or sum(tolerances) == 0:
            raise ConfigError(
                f"`tol_ppm` and `tol_da` must be numbers >= 0, not both 0; got {self.tol_ppm!r} and "
                f"{self.tol_da!r}."
            )
        if self.min_rdbe is not None and not _is_number(self.min_rdbe):
            raise ConfigError(f"`min_rdbe` must be a number or None (no filter), got {self.min_rdbe!r}.")
        if not (_is_number(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise ConfigError(f"`dropout` must be in [0, 1), got {self.dropout!r}.")
        if not isinstance(self.pair_hidden, int) or isinstance(self.pair_hidden, bool) or self.pair_hidden < 0:
            raise ConfigError(
                f"`pair_hidden` must be a non-negative integer (0 = off), got {self.pair_hidden!r}."
            )
        if not isinstance(self.grow_levels, int) or isinstance(self.grow_levels, bool) or not (
            0 <= self.grow_levels and self.fp_bits % (2**self.grow_levels) == 0 and self.fp_bits >> self.grow_levels >= 8
        ):
            raise ConfigError(
                f"`grow_levels` must be an integer >= 0 with `fp_bits` ({self.fp_bits}) divisible by 2**grow_levels "
                f"into at least 8 bits, got {self.grow_levels!r}."
            )
        if not isinstance(self.fragment_bits, int) or isinstance(self.fragment_bits, bool) or not (
            self.fragment_bits == 0 or self.fragment_bits >= 8
        ):
            raise ConfigError(
                f"`fragment_bits` must be 0 (no fragment head) or an integer >= 8, got {self.fragment_bits!r}."
            )
        if not self.count_periods or any(not p > 0 for p in self.count_periods):
            raise ConfigError(
                f"`count_periods` must be a non-empty list of positive numbers, got {self.count_periods!r}."
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["count_periods"] = list(self.count_periods)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EncoderConfig:
        """Build from a saved dict; unknown keys warn (a newer file) instead of failing."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            warnings.warn(f"EncoderConfig ignores unknown keys {unknown}.", stacklevel=2)
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> EncoderConfig:
        if name not in ENCODER_PRESETS:
            raise ConfigError(
                f"Unknown encoder preset {name!r}; choose one of {', '.join(ENCODER_PRESETS)}."
            )
        return cls(**{**ENCODER_PRESETS[name], **overrides})


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


ENCODER_PRESETS: dict[str, dict[str, Any]] = {
    # CPU-trainable: 3.3 M parameters; forward + backward + AdamW on a batch of 64 spectra padded to
    # 61 tokens takes ~1.6 s on one (shared) CPU thread, i.e. ~12 min per epoch of 30k spectra, ~3 min
    # with batches bucketed by token count (mean 16 tokens on MassBank).
    "small": dict(d_model=256, n_layers=4, n_heads=8, d_ff=512, dropout=0.1, pair_hidden=32, head_hidden=256),
    # For tests: 26k parameters.
    "tiny": dict(
        d_model=32, n_layers=2, n_heads=4, d_ff=64, dropout=0.0, max_peaks=16, fp_bits=128,
        count_periods=(2.0, 8.0, 32.0), pair_hidden=8, head_hidden=32,
    ),
}


def count_features(counts: torch.Tensor, periods: torch.Tensor) -> torch.Tensor:
    """Fixed features of (signed) atom counts: sin/cos over ``periods`` and signed ``log1p``.

    ``counts`` (..., E) -> (..., E * (2 * len(periods) + 1)).
    """
    angles = 2 * math.pi * counts.unsqueeze(-1) / periods  # (..., E, T)
    log = torch.sign(counts) * torch.log1p(counts.abs())  # (..., E)
    feats = torch.cat([torch.sin(angles), torch.cos(angles), log.unsqueeze(-1)], dim=-1)  # (..., E, 2T+1)
    return feats.flatten(-2)


class PairwiseBias(nn.Module):
    """Additive attention bias per layer and head from the formula difference of two tokens."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.n_layers, self.n_heads = config.n_layers, config.n_heads
        self.mlp = nn.Sequential(
            nn.Linear(N_ELEMENTS + 2, config.pair_hidden),
            nn.GELU(),
            nn.Linear(config.pair_hidden, config.n_layers * config.n_heads),
        )

    def forward(self, formulas: torch.Tensor) -> torch.Tensor:
        b, p, _ = formulas.shape
        diff = formulas[:, :, None, :] - formulas[:, None, :, :]  # (B, P, P, E): query minus key
        feats = torch.cat(
            [
                torch.sign(diff) * torch.log1p(diff.abs()),
                (diff >= 0).all(-1, keepdim=True).float(),  # key is a subformula of query
                (diff <= 0).all(-1, keepdim=True).float(),  # query is a subformula of key
            ],
            dim=-1,
        )  # (B, P, P, E + 2)
        bias = self.mlp(feats).view(b, p, p, self.n_layers, self.n_heads)
        return bias.permute(3, 0, 4, 1, 2)  # (L, B, H, P, P)


class Block(nn.Module):
    """Pre-LayerNorm transformer block whose attention takes an additive float mask."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.dropout = config.dropout
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            nn.GELU(),
            nn.Linear(config.d_ff, config.d_model),
            nn.Dropout(config.dropout),
        )
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor) -> torch.Tensor:
        b, p, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=-1)  # 3 x (B, P, C)
        q, k, v = (t.view(b, p, self.n_heads, c // self.n_heads).transpose(1, 2) for t in (q, k, v))
        # q, k, v: (B, H, P, C/H)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_bias, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, P, C/H)
        x = x + self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, p, c)))
        return x + self.mlp(self.ln_2(x))


def fold_bits(targets: torch.Tensor, n_bits: int) -> torch.Tensor:
    """Fold ``(..., F)`` 0/1 fingerprints to ``n_bits`` by OR over ``i mod n_bits`` (``F`` a multiple of it).

    RDKit's Morgan bit of an environment is its hash modulo the length, so this is exactly the Morgan
    fingerprint of that shorter length.
    """
    f = targets.shape[-1]
    return targets.reshape(*targets.shape[:-1], f // n_bits, n_bits).amax(dim=-2)


class GrowingHead(nn.Module):
    """MIST's "growing" fingerprint head over the head's hidden layer ``h`` (B, head_hidden).

    Level 0 predicts the fingerprint folded to ``fp_bits / 2**L`` bits from ``h``; level ``l`` predicts
    the fingerprint folded to twice as many bits from ``h`` plus a linear read of level ``l-1``'s
    probabilities, so the long fingerprint is refined from a dense, easier short one (each level has
    its own loss in training; see :func:`fold_bits`).
    """

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dims = [config.fp_bits >> (config.grow_levels - i) for i in range(config.grow_levels + 1)]
        self.base = nn.ModuleList(nn.Linear(config.head_hidden, d) for d in self.dims)
        self.cond = nn.ModuleList(nn.Linear(a, b) for a, b in zip(self.dims[:-1], self.dims[1:]))
        prior = math.log(_PRIOR_BIT_DENSITY / (1 - _PRIOR_BIT_DENSITY))
        for i, layer in enumerate(self.base):  # a folded bit is set more often: density ~ 1-(1-p)^(2^k)
            density = 1 - (1 - _PRIOR_BIT_DENSITY) ** (2 ** (len(self.dims) - 1 - i))
            nn.init.constant_(layer.bias, math.log(density / (1 - density)) if i < len(self.dims) - 1 else prior)

    def forward(self, h: torch.Tensor) -> list[torch.Tensor]:
        logits = [self.base[0](h)]  # (B, dims[0])
        for base, cond in zip(self.base[1:], self.cond):
            logits.append(base(h) + cond(torch.sigmoid(logits[-1])))  # (B, dims[l])
        return logits


class SpectrumEncoder(nn.Module):
    """Peak-set transformer from :func:`engine.model.featurize.collate` batches to fingerprint logits."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.register_buffer("periods", torch.tensor(config.count_periods), persistent=False)
        n_count_feats = N_ELEMENTS * (2 * len(config.count_periods) + 1)
        self.formula_proj = nn.Linear(n_count_feats, config.d_model)
        self.peak_proj = nn.Linear(2, config.d_model)  # sqrt intensity, adduct retained
        self.root_emb = nn.Parameter(torch.zeros(config.d_model))
        self.polarity_emb = nn.Embedding(2, config.d_model)  # 0 negative, 1 positive
        self.pair_bias = PairwiseBias(config) if config.pair_hidden > 0 else None
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Sequential(
            nn.Linear(config.d_model, config.head_hidden),
            nn.GELU(),
            nn.Dropout(config.dropout),
        )
        # the flat output layer keeps its name head.3 (bundles before the growing head have it)
        self.grow = GrowingHead(config) if config.grow_levels else None
        if self.grow is None:
            self.head.append(nn.Linear(config.head_hidden, config.fp_bits))
            nn.init.constant_(self.head[-1].bias, math.log(_PRIOR_BIT_DENSITY / (1 - _PRIOR_BIT_DENSITY)))
        self.fragment_head = nn.Linear(config.d_model, config.fragment_bits) if config.fragment_bits else None

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def for_inference(self) -> SpectrumEncoder:
        """This encoder without its training-only fragment head (``fragment_bits`` 0), in eval mode: what a
        bundle ships. The posterior is the same; self is returned when there is no head to drop."""
        if self.fragment_head is None:
            return self.eval()
        plain = SpectrumEncoder(replace(self.config, fragment_bits=0))
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("fragment_head.")}
        plain.load_state_dict(state)  # strict: every other weight is carried
        return plain.to(next(self.parameters()).device).eval()

    def forward(self, batch: dict[str, torch.Tensor], return_levels: bool = False, return_fragments: bool = False):
        """Fingerprint logits (B, fp_bits) for a batch from :func:`engine.model.featurize.collate`.

        ``return_levels``: a list of logits, coarsest first and the full fingerprint last (with the growing
        head the folded levels ``fp_bits / 2**grow_levels, ..., fp_bits``; else just the one).
        ``return_fragments`` (a model with ``fragment_bits``): ``(that, fragment logits (B, P, fragment_bits))``,
        one fragment fingerprint per token (the root's and padding's are meaningless).
        """
        if return_fragments and self.fragment_head is None:
            raise ConfigError(
                "This encoder has no fragment head (`fragment_bits` is 0); build it with fragment_bits > 0."
            )
        formulas = batch["formulas"].float()  # (B, P, E); token 0 is the root
        mask = batch["mask"]  # (B, P) True on real tokens
        b, p, _ = formulas.shape
        if p > self.config.max_peaks + 1:
            raise ConfigError(
                f"Batch has {p - 1} peak tokens per spectrum but `max_peaks` is {self.config.max_peaks}; "
                f"featurize with max_peaks <= {self.config.max_peaks}."
            )
        peak = torch.stack([batch["intensities"], batch["adduct_retained"]], dim=-1).float()  # (B, P, 2)
        x = self.formula_proj(count_features(formulas, self.periods)) + self.peak_proj(peak)  # (B, P, C)
        is_root = torch.zeros(p, 1, device=x.device, dtype=x.dtype)
        is_root[0] = 1.0
        x = x + is_root * self.root_emb  # (B, P, C)
        x = x + self.polarity_emb((batch["polarity"] > 0).long())[:, None, :]  # (B, P, C)

        # Padded keys get -inf; the root is always a real key, so no row is fully masked.
        key_mask = torch.zeros(b, 1, 1, p, device=x.device, dtype=x.dtype)
        key_mask = key_mask.masked_fill(~mask[:, None, None, :], float("-inf"))  # (B, 1, 1, P)
        biases = self.pair_bias(formulas) if self.pair_bias is not None else None  # (L, B, H, P, P)
        for i, block in enumerate(self.blocks):
            x = block(x, key_mask if biases is None else biases[i] + key_mask)
        if return_fragments:
            x = self.ln_f(x)  # (B, P, C)
            root = x[:, 0]
        else:
            root = self.ln_f(x[:, 0])  # (B, C)
        if self.grow is None:
            logits = self.head(root)  # (B, fp_bits)
            out = [logits] if return_levels else logits
        else:
            levels = self.grow(self.head(root))  # logits (B, fp_bits / 2**L), ..., (B, fp_bits)
            out = levels if return_levels else levels[-1]
        return (out, self.fragment_head(x)) if return_fragments else out  # (B, P, fragment_bits)

    @torch.no_grad()
    def predict_proba(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Posterior ``pi`` (B, fp_bits) in [0, 1]; call ``eval()`` first to switch dropout off."""
        return torch.sigmoid(self(batch))
