import numpy as np
import pytest
import torch

from engine.chem.formula import ELEMENTS
from engine.errors import ConfigError
from engine.model.decoder import (
    PAD_ID,
    ConditionalDecoder,
    DecoderConfig,
    collate_queries,
    parameter_counts,
)
from engine.model.tokenizer import SPECIAL_TOKENS, SafeTokenizer

FORMULA = np.array([20, 25, 3, 2] + [0] * 10)  # C20H25N3O2
QUERIES = [np.array([3, 17, 40, 1023, 4000]), np.array([5, 6]), np.arange(0, 4096, 97)]  # 5, 2, 43 bits


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ConditionalDecoder(DecoderConfig.preset("tiny")).eval()


def test_shapes(model):
    cfg = model.config
    bits, mask, formula = collate_queries(QUERIES, FORMULA, cfg.max_fp_tokens)
    assert bits.shape == mask.shape == (3, cfg.max_fp_tokens)  # 43 bits truncated to 32
    assert formula.shape == (3, len(ELEMENTS))
    ctx, ctx_mask = model.encode_context(bits, mask, formula)
    assert ctx.shape == (3, cfg.max_fp_tokens + 14, cfg.n_embd) and ctx_mask.shape == (3, cfg.max_fp_tokens + 14)
    assert ctx_mask[:, -14:].all() and ctx_mask[1, :cfg.max_fp_tokens].sum() == 2
    idx = torch.randint(4, cfg.vocab_size, (3, 7))
    logits, loss = model(idx, ctx, ctx_mask)
    assert logits.shape == (3, 7, cfg.vocab_size) and loss is None


def test_collate_keeps_lowest_bits_and_validates():
    bits, mask, _ = collate_queries([np.arange(300)], FORMULA, max_fp_tokens=256)
    assert bits.shape == (1, 256) and bits[0, -1] == 255 and mask.all()
    bits, mask, _ = collate_queries([np.array([], dtype=np.int64)], FORMULA)
    assert bits.shape == (1, 1) and not mask.any()
    for bad in ([5, 3], [1, 1], [-1], [4096]):
        with pytest.raises(ConfigError, match="sorted distinct bit indices"):
            collate_queries([np.array(bad)], FORMULA)


def test_padding_does_not_change_output(model):
    """Padded fingerprint tokens are masked: padding length and pad values leave the logits unchanged."""
    idx = torch.randint(4, model.config.vocab_size, (3, 6))
    short = collate_queries(QUERIES[:2], FORMULA)  # padded to 5
    full = collate_queries(QUERIES[:2], FORMULA, pad_to=model.config.max_fp_tokens)  # padded to 32
    garbage = (full[0].masked_fill(~full[1], 4095), full[1], full[2])
    outs = [model(idx[:2], *model.encode_context(*t))[0] for t in (short, full, garbage)]
    torch.testing.assert_close(outs[0], outs[1])
    torch.testing.assert_close(outs[0], outs[2])


def test_empty_query_is_finite(model):
    ctx, ctx_mask = model.encode_context(*collate_queries([np.array([], dtype=np.int64)], FORMULA))
    logits, _ = model(torch.tensor([[1, 5]]), ctx, ctx_mask)
    assert torch.isfinite(logits).all()


def test_conditioning_matters(model):
    idx = torch.randint(4, model.config.vocab_size, (1, 5))
    a = model(idx, *model.encode_context(*collate_queries(QUERIES[:1], FORMULA)))[0]
    b = model(idx, *model.encode_context(*collate_queries(QUERIES[1:2], FORMULA)))[0]
    c = model(idx, *model.encode_context(*collate_queries(QUERIES[:1], FORMULA * 2)))[0]
    assert not torch.allclose(a, b) and not torch.allclose(a, c)


def test_loss_ignores_pad(model):
    ctx, ctx_mask = model.encode_context(*collate_queries(QUERIES[:2], FORMULA))
    idx = torch.randint(4, model.config.vocab_size, (2, 6))
    targets = torch.randint(4, model.config.vocab_size, (2, 6))
    targets[1, 3:] = PAD_ID
    logits, loss = model(idx, ctx, ctx_mask, targets)
    keep = targets != PAD_ID
    expected = torch.nn.functional.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(loss, expected)
    assert PAD_ID == SafeTokenizer(list(SPECIAL_TOKENS) + ["C"]).pad_id


def test_shared_contexts_equal_per_row_contexts(model):
    """Rows reading a shared context through the (G, slots) layout get what per-row contexts give."""
    bits, mask, formula = collate_queries(QUERIES[:2], FORMULA)
    ctx, ctx_mask = model.encode_context(bits, mask, formula)
    group = torch.tensor([0, 0, 0, 1])  # 3 rows of query 0, 1 row of query 1
    idx = torch.randint(4, model.config.vocab_size, (4, 5))
    shared = model.context_kv(ctx, ctx_mask).for_rows(group)
    assert shared.slots == 3 and shared.slot.tolist() == [0, 1, 2, 3]
    shared = model.decode(idx, shared)
    per_row = model.decode(idx, model.context_kv(ctx[group], ctx_mask[group]))
    torch.testing.assert_close(shared, per_row)
    even = torch.tensor([0, 0, 1, 1])  # equal shares: the rows are the grid, no scatter
    torch.testing.assert_close(model.decode(idx, model.context_kv(ctx, ctx_mask).for_rows(even)),
                               model.decode(idx, model.context_kv(ctx[even], ctx_mask[even])))
    only_second = model.context_kv(ctx, ctx_mask).for_rows(torch.tensor([1, 1]))  # equal shares: no scatter
    assert only_second.kv[0][0].size(0) == 1 and only_second.slots == 2 and only_second.slot is None
    torch.testing.assert_close(model.decode(idx[[3, 3]], only_second), per_row[[3, 3]])


def test_tied_head(model):
    assert model.lm_head.weight is model.transformer.wte.weight


def test_parameter_counts_tiny():
    cfg = DecoderConfig.preset("tiny")
    C, V, P, L = cfg.n_embd, cfg.vocab_size, cfg.block_size, cfg.n_layer
    lin = lambda i, o: i * o + o  # noqa: E731  Linear with bias
    ln = 2 * C
    gpt2_block = 2 * ln + lin(C, 3 * C) + lin(C, C) + lin(C, 4 * C) + lin(4 * C, C)
    attn = 4 * lin(C, C)
    expected = {
        "backbone": V * C + P * C + L * gpt2_block + ln,  # tied head counted once
        "fingerprint_encoder": cfg.fp_bits * C + cfg.fp_layers * (2 * ln + attn + lin(C, cfg.fp_ffn) + lin(cfg.fp_ffn, C)) + ln,
        "formula_encoder": 14 * C + lin(1, cfg.count_hidden) + lin(cfg.count_hidden, C) + lin(2 * C, C) + ln,
        "cross_attention": (L // 2) * (2 * ln + attn + lin(C, cfg.cross_ffn) + lin(cfg.cross_ffn, C)),
        "context_projection": lin(C, C),
    }
    expected["total"] = sum(expected.values())
    assert parameter_counts(ConditionalDecoder(cfg)) == expected


def test_paper_preset_layout():
    cfg = DecoderConfig.preset("paper")
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, cfg.block_size) == (12, 768, 12, 1882, 256)
    assert cfg.n_cross == 6 and cfg.context_size == 270


def test_config_round_trip_and_unknown_keys():
    cfg = DecoderConfig.preset("small")
    assert DecoderConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.warns(UserWarning, match="future_field"):
        assert DecoderConfig.from_dict({**cfg.to_dict(), "future_field": 1}) == cfg


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(n_head=5), "`n_embd` \\(768\\) must be divisible by `n_head` \\(5\\)"),
        (dict(cross_heads=7), "`cross_heads`"),
        (dict(dropout=1.0), "`dropout`"),
        (dict(n_layer=0), "`n_layer` must be a positive integer"),
        (dict(n_layer="12"), "`n_layer`"),
        (dict(bias="yes"), "`bias` must be true or false"),
        (dict(max_fp_tokens=5000), "`max_fp_tokens`"),
        (dict(n_elements=13), "`n_elements` must be 14"),
        (dict(cross_every=13), "`cross_every`"),
        (dict(vocab_size=4), "`vocab_size`"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ConfigError, match=match):
        DecoderConfig.from_dict({**DecoderConfig().to_dict(), **changes})


def test_unknown_preset():
    with pytest.raises(ConfigError, match="Unknown decoder preset 'huge'.*paper, small, tiny"):
        DecoderConfig.preset("huge")


def test_block_size_enforced(model):
    ctx, ctx_mask = model.encode_context(*collate_queries(QUERIES[:1], FORMULA))
    with pytest.raises(ConfigError, match="`block_size`"):
        model(torch.ones(1, model.config.block_size + 1, dtype=torch.long), ctx, ctx_mask)
