import copy

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from engine.errors import Cancelled, ConfigError
from engine.model.decoder import ConditionalDecoder, DecoderConfig
from engine.model.sampling import COMPACT_FRACTION, KVCache, QueryRequest, draw, filter_probs, sample_queries
from engine.model.tokenizer import SafeTokenizer

SAFE = [
    "c15cc2c(c3oc(=O)c4c(c13)CCC4=O)C1C=COC1O2.CO5",
    "c1ccccc1.CO1",
    "CC(=O)O",
    "C1CCN1.[nH]1cc2cccc2c1",
    "FC(F)(F)c1ccc2c(c1)Cl.Br2",
    "O=S(=O)(N)c1ccc%10cc1.C%10",
    "[O-][N+](=O)c1ccccc1",
    "OC1CC(O)C(O)C1.P(=O)(O)(O)O",
]
FORMULA = np.array([20, 25, 3, 2] + [0] * 10)
Q0, Q1, Q2 = np.array([3, 17, 40, 1023, 4000]), np.array([5, 6, 900]), np.array([12])


@pytest.fixture(scope="module")
def tok():
    return SafeTokenizer.build(SAFE)


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    return ConditionalDecoder(DecoderConfig.preset("tiny", vocab_size=tok.vocab_size)).eval()


def requests():
    """Three distinct queries; the first stands for thresholds 0 and 1 (deduplicated), 4 samples each."""
    return [
        QueryRequest(Q0, tuple((i, j) for i in (0, 1) for j in range(4))),
        QueryRequest(Q1, tuple((2, j) for j in range(4))),
        QueryRequest(Q2, tuple((3, j) for j in range(4))),
    ]


def run(model, tok, reqs, **kw):
    kw = {"seed": 7, "max_new_tokens": 40, **kw}
    return dict(sample_queries(model, tok, FORMULA, reqs, **kw))


def by_id(reqs, out):
    return {sid: s for r, req in enumerate(reqs) for sid, s in zip(req.sample_ids, out[r])}


def test_yields_every_request_once_in_sample_order(model, tok):
    reqs = [*requests(), QueryRequest(Q1, ())]
    got = list(sample_queries(model, tok, FORMULA, reqs, seed=7, max_new_tokens=40))
    assert sorted(r for r, _ in got) == [0, 1, 2, 3]
    assert all(len(s) == len(reqs[r].sample_ids) for r, s in got)
    lengths = {len(s) for _, strings in got for s in strings}
    assert len(lengths) > 3  # rows finished at different steps: the batch shrank on the way


def test_cache_equals_full_recompute(model, tok):
    reqs = requests()
    assert run(model, tok, reqs) == run(model, tok, reqs, use_cache=False)


def test_subset_and_batching_reproduce_samples(model, tok):
    """A sample's tokens depend on (seed, i, j) only, not on what else shares its batch."""
    reqs = requests()
    full = by_id(reqs, run(model, tok, reqs))
    subset = [QueryRequest(Q1, ((2, 3), (2, 1))), QueryRequest(Q0, ((1, 2),))]
    assert by_id(subset, run(model, tok, subset)) == {k: full[k] for k in [(2, 3), (2, 1), (1, 2)]}
    assert by_id(reqs, run(model, tok, reqs, max_batch_rows=3)) == full


def test_dedup_friendly(model, tok):
    """One request standing for two thresholds draws what two requests of the same query would."""
    reqs = requests()
    full = by_id(reqs, run(model, tok, reqs))
    split = [QueryRequest(Q0, tuple((0, j) for j in range(4))), QueryRequest(Q0, tuple((1, j) for j in range(4)))]
    assert by_id(split, run(model, tok, split)) == {k: v for k, v in full.items() if k[0] in (0, 1)}


def test_seed_changes_samples(model, tok):
    reqs = requests()
    assert run(model, tok, reqs, seed=7) != run(model, tok, reqs, seed=8)


class IdTokenizer(SafeTokenizer):
    """Decodes to the raw token ids, so tests can see exactly what was sampled."""

    def decode(self, ids):
        return ",".join(map(str, ids))


def test_min_new_tokens_and_max_new_tokens(model, tok):
    eager = copy.deepcopy(model)  # a model that wants to stop at once: a large <eos> logit
    eager.lm_head = torch.nn.Linear(eager.config.n_embd, eager.config.vocab_size)
    eager.lm_head.weight = eager.transformer.wte.weight
    with torch.no_grad():
        eager.lm_head.bias.zero_()[tok.eos_id] = 30.0
    ids = IdTokenizer(tok.vocab)
    eos = str(tok.eos_id)
    out = run(eager, ids, requests())
    assert {s for strings in out.values() for s in strings} == {eos}
    out = run(eager, ids, requests(), min_new_tokens=3)
    assert all(s.split(",")[3:] == [eos] and eos not in s.split(",")[:3] for v in out.values() for s in v)
    out = run(model, ids, requests(), max_new_tokens=5)
    assert max(len(s.split(",")) for v in out.values() for s in v) == 5


def test_bf16_runs(model, tok):
    out = run(model, tok, requests(), dtype=torch.bfloat16)
    assert {r: len(v) for r, v in out.items()} == {0: 8, 1: 4, 2: 4}
    assert next(model.parameters()).dtype == torch.float32  # the caller's model is left as it was


def test_cancel_raises(model, tok):
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(Cancelled):
        run(model, tok, requests(), cancel=cancel)
    assert len(calls) == 4


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(temperature=0), "`temperature`"),
        (dict(top_p=0), "`top_p`"),
        (dict(top_k=-1), "`top_k`"),
        (dict(seed=-1), "`seed`"),
        (dict(max_batch_rows=0), "`max_batch_rows`"),
        (dict(min_new_tokens=-1), "`min_new_tokens`"),
    ],
)
def test_bad_settings(model, tok, kw, match):
    with pytest.raises(ConfigError, match=match):
        run(model, tok, requests(), **kw)


def test_training_mode_is_refused(model, tok):
    model.train()
    try:
        with pytest.raises(ConfigError, match="model.eval"):
            run(model, tok, requests())
    finally:
        model.eval()


def test_filter_hand_case():
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.1, 0.2, 0.15]]))
    probs, ids = filter_probs(logits, top_k=3, top_p=0.6)
    # top-3 renormalised: 0.5/0.85, 0.2/0.85, 0.15/0.85 = .588, .235, .176; mass above each: 0, .588, .824
    assert ids.tolist() == [[1, 3, 4]]
    torch.testing.assert_close(probs, torch.tensor([[0.5 / 0.85, 0.2 / 0.85, 0.0]]))
    probs, ids = filter_probs(logits, top_k=0, top_p=1.0)
    torch.testing.assert_close(probs.sum(), torch.tensor(1.0))
    assert ids.shape == (1, 5)


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 50, 0.95), (0.7, 10, 0.9), (1.5, 0, 0.5), (1.0, 5, 1.0)])
def test_filter_matches_hugging_face(temperature, top_k, top_p):
    torch.manual_seed(0)
    logits = torch.randn(6, 300) * 3
    probs, ids = filter_probs(logits, temperature, top_k, top_p)
    ours = torch.zeros_like(logits).scatter_(1, ids, probs / probs.sum(-1, keepdim=True))
    hf = logits.clone()
    for warper in (TemperatureLogitsWarper(temperature), top_k and TopKLogitsWarper(top_k), top_p < 1 and TopPLogitsWarper(top_p)):
        if warper:
            hf = warper(None, hf)
    torch.testing.assert_close(ours, hf.softmax(-1))


def test_draw_inverse_cdf():
    probs = torch.tensor([[0.5, 0.3, 0.2, 0.0]]).expand(5, -1)
    ids = torch.tensor([[7, 8, 9, 10]]).expand(5, -1)
    u = torch.tensor([0.0, 0.49, 0.5, 0.85, 1 - 1e-12], dtype=torch.float64)
    assert draw(probs, ids, u).tolist() == [7, 7, 8, 9, 9]
    unnormalised = torch.tensor([[2.0, 2.0, 0.0]])
    assert draw(unnormalised, torch.tensor([[4, 5, 6]]), torch.tensor([0.75], dtype=torch.float64)).tolist() == [5]


def test_kv_cache_grows_and_selects():
    cache = KVCache(n_layer=1, max_len=100)
    ks = [torch.randn(3, 2, 1, 4) for _ in range(40)]
    for k in ks:
        out_k, out_v = cache.update(k, -k, 0)
    assert cache.get_seq_length() == 40 and out_k.size(2) >= 40
    torch.testing.assert_close(out_k[:, :, :40], torch.cat(ks, dim=2))
    torch.testing.assert_close(out_v[:, :, :40], -torch.cat(ks, dim=2))
    assert not out_k[:, :, 40:].any()  # spare slots are zeros
    cache.select(torch.tensor([True, False, True]))
    out_k, _ = cache.update(ks[0][[0, 2]], ks[0][[0, 2]], 0)
    torch.testing.assert_close(out_k[:, :, :41], torch.cat([*ks, ks[0]], dim=2)[[0, 2]])
    assert cache.get_seq_length() == 41


def test_rows_in_the_same_state_run_once(model, tok, monkeypatch):
    """The decoder runs on distinct (query, prefix) sequences: at the first step one per query, then at most the rows
    and the sequences no row reads any more (under a quarter of all); the samples are those each row draws alone
    (max_batch_rows=1: one row a batch)."""
    reqs = requests()
    sizes = []
    real = model.decode

    def spy(idx, context, cache=None):
        sizes.append(idx.size(0))
        return real(idx, context, cache)

    monkeypatch.setattr(model, "decode", spy)
    together = by_id(reqs, run(model, tok, reqs))
    assert sizes[0] == 3 and max(sizes) < 12 / (1 - COMPACT_FRACTION) + 1
    sizes.clear()
    alone = by_id(reqs, run(model, tok, reqs, max_batch_rows=1))
    assert alone == together and set(sizes) == {1}


def test_kv_cache_forks_rows_in_place():
    cache = KVCache(n_layer=1, max_len=64, max_rows=4)
    k = torch.randn(2, 2, 3, 4)
    cache.update(k, -k, 0)
    cache.fork(torch.tensor([1, 1]))  # two copies of row 1's past, appended
    assert cache.rows == 4
    step = torch.randn(4, 2, 1, 4)
    out_k, out_v = cache.update(step, step, 0)
    torch.testing.assert_close(out_k[:, :, :3], k[[0, 1, 1, 1]])
    torch.testing.assert_close(out_k[:, :, 3:4], step)
    cache.select(torch.tensor([3, 0]))  # a new order
    torch.testing.assert_close(cache.k[0][:2, :, :4], torch.cat([k[[1, 0]], step[[3, 0]]], dim=2))
    cache.fork(torch.tensor([0, 1, 1]))  # beyond the rows allocated: the buffers grow
    assert cache.rows == 5 and cache.k[0].size(0) >= 5
