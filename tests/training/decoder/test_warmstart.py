"""Warm start from a SAFE-GPT-style Hugging Face GPT-2 checkpoint (training.decoder.warmstart), built in the test."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from engine.errors import BundleError, ConfigError
from engine.model.decoder import ConditionalDecoder, DecoderConfig
from engine.model.tokenizer import SPECIAL_TOKENS, SafeTokenizer
from training.decoder.warmstart import warm_start_from_safe_gpt

# SAFE-GPT-like vocabulary: its own special tokens and order; ours differs in order and has '<', '>'
HF_VOCAB = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "C", "c", "1", "(", ")", "=", "O", "N", "n", "[C@H]", "Cl"]
OUR_TOKENS = ["c", "C", "(", ")", "1", "O", "=", "N", "Br", "<", ">"]  # 'Br', '<', '>' are not in HF_VOCAB
N_EMBD, N_LAYER, N_HEAD, N_POS = 32, 2, 2, 48


@pytest.fixture(scope="module")
def safe_gpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("safe-gpt")
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(HF_VOCAB), n_positions=N_POS, n_embd=N_EMBD, n_layer=N_LAYER, n_head=N_HEAD,
                     bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # non-trivial LayerNorm parameters, so a missed copy shows
        for name, p in model.named_parameters():
            if "ln" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(d, safe_serialization=True)
    vocab = {t: i for i, t in enumerate(HF_VOCAB)}
    tokenizer = {"model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}
    (d / "tokenizer.json").write_text(json.dumps(tokenizer))
    (d / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "[CLS]", "eos_token": {"content": "[SEP]"}, "pad_token": "[PAD]", "unk_token": "[UNK]"}
    ))  # fmt: skip
    return d, model


def our_decoder(**overrides) -> tuple[ConditionalDecoder, SafeTokenizer]:
    tok = SafeTokenizer([*SPECIAL_TOKENS, *OUR_TOKENS])
    shape = dict(n_embd=N_EMBD, n_layer=N_LAYER, n_head=N_HEAD, block_size=16)
    cfg = DecoderConfig.preset("tiny", vocab_size=tok.vocab_size, **{**shape, **overrides})
    torch.manual_seed(1)
    return ConditionalDecoder(cfg).eval(), tok


def test_copies_rows_by_token_string_and_transposes_conv1d(safe_gpt):
    src, hf = safe_gpt
    model, tok = our_decoder()
    new_before = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith(("transformer.", "lm_head."))}
    untouched = model.transformer.wte.weight[[tok.vocab.index(t) for t in ("Br", "<", ">")]].clone()
    report = warm_start_from_safe_gpt(model, src, tok)

    assert report.rows_matched == 4 + 8 and report.unmatched_tokens == ["Br", "<", ">"]
    assert "12/15 token rows matched" in report.summary()
    hs, ours = hf.state_dict(), model.state_dict()
    for i, token in enumerate(tok.vocab):  # special tokens by role, the others by string
        role = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 4}
        j = role.get(token, HF_VOCAB.index(token) if token in HF_VOCAB else None)
        if j is not None:
            assert torch.equal(ours["transformer.wte.weight"][i], hs["transformer.wte.weight"][j]), token
    assert torch.equal(model.transformer.wte.weight[[tok.vocab.index(t) for t in ("Br", "<", ">")]], untouched)
    assert torch.equal(model.lm_head.weight, model.transformer.wte.weight)  # still tied
    assert torch.equal(ours["transformer.wpe.weight"], hs["transformer.wpe.weight"][:16])
    for layer in range(N_LAYER):
        for t in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):  # HF Conv1D: (in, out)
            name = f"transformer.h.{layer}.{t}"
            assert torch.equal(ours[f"{name}.weight"], hs[f"{name}.weight"].t()), name
            assert torch.equal(ours[f"{name}.bias"], hs[f"{name}.bias"]), name
        for t in ("ln_1", "ln_2"):
            assert torch.equal(ours[f"transformer.h.{layer}.{t}.weight"], hs[f"transformer.h.{layer}.{t}.weight"])
    assert torch.equal(ours["transformer.ln_f.bias"], hs["transformer.ln_f.bias"])
    for k, v in new_before.items():  # fingerprint / formula encoders, context projection, cross blocks: at init
        assert torch.equal(model.state_dict()[k], v), k


def test_backbone_then_computes_what_safe_gpt_computes(safe_gpt):
    """With the conditioning blocks' residual branches zeroed, our logits equal SAFE-GPT's on shared tokens."""
    src, hf = safe_gpt
    model, tok = our_decoder()
    warm_start_from_safe_gpt(model, src, tok)
    with torch.no_grad():
        for blk in model.cross:
            for lin in (blk.attn.out_proj, blk.mlp.c_proj):
                lin.weight.zero_()
                lin.bias.zero_()
    text = ["<bos>", "C", "c", "1", "(", "O", ")", "=", "N", "c", "1"]
    ours_ids = torch.tensor([[tok.vocab.index(t) for t in text]])
    hf_ids = torch.tensor([[HF_VOCAB.index({"<bos>": "[CLS]"}.get(t, t)) for t in text]])
    bits, bits_mask = torch.tensor([[5, 9]]), torch.tensor([[True, True]])
    formula = torch.zeros(1, 14, dtype=torch.long)
    ctx, mask = model.encode_context(bits, bits_mask, formula)
    with torch.no_grad():
        logits, _ = model(ours_ids, ctx, mask)
        ref = hf(hf_ids).logits
    shared = [t for t in tok.vocab if t in HF_VOCAB or t in ("<bos>", "<eos>", "<pad>", "<unk>")]
    role = {"<pad>": "[PAD]", "<bos>": "[CLS]", "<eos>": "[SEP]", "<unk>": "[UNK]"}
    ours_cols = [tok.vocab.index(t) for t in shared]
    hf_cols = [HF_VOCAB.index(role.get(t, t)) for t in shared]
    torch.testing.assert_close(logits[..., ours_cols], ref[..., hf_cols], rtol=1e-4, atol=1e-5)


def test_refuses_pickles_and_other_shapes(safe_gpt, tmp_path):
    src, _ = safe_gpt
    (tmp_path / "config.json").write_text((src / "config.json").read_text())
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    model, tok = our_decoder()
    with pytest.raises(BundleError, match="pytorch_model.bin: a PyTorch pickle"):
        warm_start_from_safe_gpt(model, tmp_path, tok)
    wider, tok = our_decoder(n_embd=64, n_head=2)
    with pytest.raises(ConfigError, match="`n_embd` is 32 but the decoder's `n_embd` is 64"):
        warm_start_from_safe_gpt(wider, src, tok)
    long, tok = our_decoder(block_size=64)
    with pytest.raises(BundleError, match="fewer than the decoder's `block_size`"):
        warm_start_from_safe_gpt(long, src, tok)


def test_pretrain_warm_starts_from_init_from(safe_gpt, tmp_path):
    from tiny_corpus import tiny_config, write_synthetic_corpus

    from training.decoder.pretrain import Started, pretrain

    src, _ = safe_gpt
    corpus = write_synthetic_corpus(tmp_path / "corpus")
    cfg = tiny_config(corpus, tmp_path / "run", max_steps=1, block_size=16, init_from=str(src))
    started = next(e for e in pretrain(cfg) if isinstance(e, Started))
    assert "4/32 token rows matched" in started.warm_start  # the synthetic corpus shares only the special tokens
    assert json.loads((tmp_path / "run" / "warm_start.json").read_text())["rows_matched"] == 4
