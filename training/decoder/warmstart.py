"""Warm start of the decoder backbone from a local SAFE-GPT checkpoint (paper, Appendix "Model Architecture").

The checkpoint is a Hugging Face GPT-2 directory (``config.json`` + ``model.safetensors``, or
sharded ``model.safetensors.index.json``, + its tokenizer files). Nothing is downloaded, and a
``pytorch_model.bin`` pickle is refused. What is copied, as in the paper:

- token embeddings, row by row *by token string*: our vocabulary is built from the corpus and its
  ids differ from SAFE-GPT's; the special tokens map by role (``<bos>`` <- SAFE-GPT's bos token,
  ``[CLS]`` by default; ``<eos>`` <- ``[SEP]``; ``<pad>`` <- ``[PAD]``; ``<unk>`` <- ``[UNK]``).
  Our tokens that SAFE-GPT lacks keep their initialisation (the paper's ``<`` and ``>``). The LM
  head is tied to these embeddings, so it follows;
- every transformer block (``ln_1``, ``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``,
  ``mlp.c_proj``): HF's ``Conv1D`` stores weights as (in, out), ``nn.Linear`` as (out, in), so those
  four weights are transposed (by name: the square ``attn.c_proj`` would fit either way);
- the final layer norm ``ln_f`` and the first ``block_size`` rows of the position embeddings.

The fingerprint encoder, formula encoder, context projection and conditioning blocks stay at their
initialisation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.errors import BundleError, ConfigError
from engine.model.decoder import ConditionalDecoder
from engine.model.tokenizer import BOS, EOS, PAD, UNK, SafeTokenizer

# SAFE-GPT's special tokens (safe.tokenizer: bos = [CLS], eos = [SEP]); a tokenizer_config.json or
# special_tokens_map.json in the checkpoint directory overrides them.
DEFAULT_SPECIAL = {PAD: "[PAD]", BOS: "[CLS]", EOS: "[SEP]", UNK: "[UNK]"}
_ROLE_KEYS = {PAD: "pad_token", BOS: "bos_token", EOS: "eos_token", UNK: "unk_token"}
CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
BLOCK_TENSORS = (
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
)  # fmt: skip
_IGNORED_SUFFIXES = ("attn.bias", "attn.masked_bias")  # causal-mask buffers of older GPT-2 checkpoints


@dataclass
class WarmStartReport:
    source: str
    rows_matched: int  # token-embedding rows copied
    vocab_size: int  # our vocabulary
    source_vocab_size: int
    unmatched_tokens: list[str]  # our tokens SAFE-GPT lacks (rows left at init)
    positions_copied: int
    tensors_copied: list[str]  # our parameter names that received weights
    ignored: list[str] = field(default_factory=list)  # checkpoint tensors not used
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        shown = ", ".join(repr(t) for t in self.unmatched_tokens[:10])
        more = f" (+{len(self.unmatched_tokens) - 10} more)" if len(self.unmatched_tokens) > 10 else ""
        text = (
            f"warm start from {self.source}: {self.rows_matched}/{self.vocab_size} token rows matched by string "
            f"(SAFE-GPT has {self.source_vocab_size}), {self.positions_copied} position rows, "
            f"{len(self.tensors_copied)} tensors copied"
        )
        if self.unmatched_tokens:
            text += f"; left at init: {shown}{more}"
        return text

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def warm_start_from_safe_gpt(
    model: ConditionalDecoder, checkpoint_dir: str | Path, tokenizer: SafeTokenizer
) -> WarmStartReport:
    """Copy the SAFE-GPT backbone in ``checkpoint_dir`` into ``model`` (in place); see the module docstring."""
    src = Path(checkpoint_dir)
    hf_config = _read_json(src / "config.json", "its config.json")
    warnings = check_compatible(hf_config, model)
    weights = load_hf_weights(src)
    source_vocab = read_hf_vocab(src)
    special = special_token_names(src)
    cfg = model.config

    def get(name: str) -> torch.Tensor:
        for key in (f"transformer.{name}", name):
            if key in weights:
                return weights[key]
        raise BundleError(f"{src}: the checkpoint lacks the tensor `transformer.{name}`; is it a GPT-2 model?")

    ours = dict(model.named_parameters())
    copied: list[str] = []
    used: set[str] = set()

    def copy(our_name: str, src_name: str, value: torch.Tensor) -> None:
        target = ours[our_name]
        if tuple(value.shape) != tuple(target.shape):
            raise BundleError(
                f"{src}: `{src_name}` has shape {tuple(value.shape)} but the decoder's `{our_name}` has "
                f"{tuple(target.shape)}."
            )
        with torch.no_grad():
            target.copy_(value.to(target.dtype))
        copied.append(our_name)
        used.update((src_name, f"transformer.{src_name}"))

    # token embeddings by token string
    wte = get("wte.weight")
    if wte.shape[1] != cfg.n_embd:
        raise BundleError(f"{src}: token embeddings have width {wte.shape[1]}, the decoder {cfg.n_embd}.")
    rows_ours, rows_src, unmatched = [], [], []
    for i, token in enumerate(tokenizer.vocab):
        j = source_vocab.get(special.get(token, token))
        if j is None or j >= wte.shape[0]:
            unmatched.append(token)
        else:
            rows_ours.append(i)
            rows_src.append(j)
    with torch.no_grad():
        emb = ours["transformer.wte.weight"]
        emb[rows_ours] = wte[rows_src].to(emb.dtype)
    copied.append("transformer.wte.weight")
    used.update(("wte.weight", "transformer.wte.weight", "lm_head.weight"))

    wpe = get("wpe.weight")
    if wpe.shape[0] < cfg.block_size:
        raise BundleError(
            f"{src}: SAFE-GPT has {wpe.shape[0]} positions, fewer than the decoder's `block_size` ({cfg.block_size})."
        )
    copy("transformer.wpe.weight", "wpe.weight", wpe[: cfg.block_size])
    for i in range(cfg.n_layer):
        for t in BLOCK_TENSORS:
            name = f"h.{i}.{t}"
            value = get(name)
            copy(f"transformer.{name}", name, value.t() if t in CONV1D_WEIGHTS else value)
    for t in ("ln_f.weight", "ln_f.bias"):
        copy(f"transformer.{t}", t, get(t))

    ignored = sorted(k for k in weights if k not in used and not k.endswith(_IGNORED_SUFFIXES))
    return WarmStartReport(
        source=str(src),
        rows_matched=len(rows_ours),
        vocab_size=tokenizer.vocab_size,
        source_vocab_size=len(source_vocab),
        unmatched_tokens=unmatched,
        positions_copied=cfg.block_size,
        tensors_copied=copied,
        ignored=ignored,
        warnings=warnings,
    )


def check_compatible(hf_config: dict, model: ConditionalDecoder) -> list[str]:
    """Raise ConfigError where the GPT-2 shapes differ from the decoder's; return warnings for the rest."""
    cfg = model.config
    if hf_config.get("model_type") != "gpt2":
        got = hf_config.get("model_type")
        raise ConfigError(f"warm start needs a GPT-2 checkpoint (`model_type` \"gpt2\"), got {got!r}.")
    for ours, theirs in (("n_embd", "n_embd"), ("n_layer", "n_layer"), ("n_head", "n_head")):
        if hf_config.get(theirs) != getattr(cfg, ours):
            raise ConfigError(
                f"SAFE-GPT's `{theirs}` is {hf_config.get(theirs)} but the decoder's `{ours}` is {getattr(cfg, ours)}; "
                "warm start needs the same backbone shape (the `paper` preset matches datamol-io/safe-gpt)."
            )
    n_inner = hf_config.get("n_inner") or 4 * hf_config["n_embd"]
    if n_inner != 4 * cfg.n_embd:
        raise ConfigError(f"SAFE-GPT's `n_inner` is {n_inner}; the decoder's blocks use 4 * n_embd = {4 * cfg.n_embd}.")
    if not cfg.bias:
        raise ConfigError("warm start needs `bias` = true: GPT-2 blocks have biases.")
    warnings = []
    if hf_config.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        warnings.append(f"SAFE-GPT uses activation {hf_config['activation_function']!r}; the decoder uses tanh-GELU.")
    if abs(hf_config.get("layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12:
        warnings.append(f"SAFE-GPT's layer_norm_epsilon is {hf_config['layer_norm_epsilon']}; the decoder uses 1e-5.")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if hf_config.get(flag):
            warnings.append(f"SAFE-GPT sets `{flag}`; the decoder does not, so its attention differs slightly.")
    if hf_config.get("tie_word_embeddings") is False:
        warnings.append("SAFE-GPT's LM head is not tied to its embeddings; the decoder ties them to the embeddings.")
    return warnings


def load_hf_weights(src: Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model.safetensors`` (or the shards of ``model.safetensors.index.json``), on CPU."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not src.is_dir():
        raise BundleError(f"{src}: no such directory; give a local SAFE-GPT checkpoint directory (no downloads).")
    single, index = src / "model.safetensors", src / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        shards = sorted(set(_read_json(index, "its safetensors index")["weight_map"].values()))
        files = [src / s for s in shards]
    else:
        pickles = sorted(p.name for p in src.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        hint = (
            f" It holds {', '.join(pickles)}: a PyTorch pickle, which this program never loads (unpickling can run "
            "code hidden in the file). Convert it once, in an environment you trust, with "
            "`GPT2LMHeadModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)`."
            if pickles
            else ""
        )
        raise BundleError(f"{src}: no model.safetensors.{hint}")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            weights.update(load_file(str(f), device="cpu"))
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise BundleError(f"{f} is truncated or corrupt ({e}).") from e
    return weights


def read_hf_vocab(src: Path) -> dict[str, int]:
    """Token string -> id of a Hugging Face tokenizer (``tokenizer.json``, else ``vocab.json``)."""
    path = src / "tokenizer.json"
    if path.is_file():
        data = _read_json(path, "its tokenizer.json")
        model_vocab = (data.get("model") or {}).get("vocab")
        if isinstance(model_vocab, list):  # Unigram: [[token, score], ...]
            vocab = {entry[0]: i for i, entry in enumerate(model_vocab)}
        elif isinstance(model_vocab, dict):
            vocab = dict(model_vocab)
        else:
            raise BundleError(f"{path}: no vocabulary under \"model\" -> \"vocab\".")
        for added in data.get("added_tokens") or []:
            vocab[added["content"]] = int(added["id"])
        return vocab
    path = src / "vocab.json"
    if path.is_file():
        return dict(_read_json(path, "its vocab.json"))
    raise BundleError(
        f"{src}: no tokenizer.json or vocab.json; token embeddings are copied by token string, so the "
        "SAFE-GPT tokenizer files must sit beside its weights."
    )


def special_token_names(src: Path) -> dict[str, str]:
    """Our special token -> SAFE-GPT's token string of the same role."""
    names = dict(DEFAULT_SPECIAL)
    for file in ("tokenizer_config.json", "special_tokens_map.json"):  # the latter wins
        path = src / file
        if not path.is_file():
            continue
        data = _read_json(path, f"its {file}")
        for ours, key in _ROLE_KEYS.items():
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str) and value:
                names[ours] = value
    return names


def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise BundleError(f"{path.parent}: the SAFE-GPT checkpoint lacks {what} ({path.name}).") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{path}: cannot read {what} ({e}).") from e
