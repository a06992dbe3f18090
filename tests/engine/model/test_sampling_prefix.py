"""Prefix completion in the sampler (deep search, issue #39): forced first tokens, nothing else changed."""

import numpy as np
import pytest
import torch

from engine.errors import ConfigError
from engine.model.constraints import DEAD_END
from engine.model.decoder import ConditionalDecoder, DecoderConfig
from engine.model.sampling import QueryRequest, sample_queries
from engine.model.tokenizer import SafeTokenizer

SAFE = ["c1ccccc1.CO1", "CC(=O)O", "C1CCN1.[nH]1cc2cccc2c1", "OC1CC(O)C(O)C1.P(=O)(O)(O)O"]
FORMULA = np.array([20, 25, 3, 2] + [0] * 10)
Q0, Q1 = np.array([3, 17, 40]), np.array([5, 6, 900])


@pytest.fixture(scope="module")
def tok():
    return SafeTokenizer.build(SAFE)


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    return ConditionalDecoder(DecoderConfig.preset("tiny", vocab_size=tok.vocab_size)).eval()


def by_id(reqs, out):
    return {sid: s for r, req in enumerate(reqs) for sid, s in zip(req.sample_ids, out[r])}


def test_prefix_rows_start_with_the_prefix_and_leave_other_rows_alone(model, tok):
    plain = [QueryRequest(Q0, tuple((0, j) for j in range(6)))]
    prefix = tuple(tok.encode("c1ccccc1.", add_special=False))
    mixed = plain + [QueryRequest(Q1, tuple((1000, j) for j in range(6)), prefix=prefix)]
    alone = by_id(plain, dict(sample_queries(model, tok, FORMULA, plain, seed=3, max_new_tokens=30)))
    both = by_id(mixed, dict(sample_queries(model, tok, FORMULA, mixed, seed=3, max_new_tokens=30)))
    assert all(both[sid] == s for sid, s in alone.items())  # unprefixed samples are drawn exactly as before
    completed = [both[(1000, j)] for j in range(6)]
    assert all(s.startswith("c1ccccc1.") for s in completed)
    assert len(set(completed)) > 1  # the rest is sampled, not copied


def test_prefix_is_completed_under_the_formula_mask(tiny_bundle):
    from tiny_bundle import fixture_spectra, reference_safes

    from engine.chem.formula import formula_vector, parse_formula

    spectrum = fixture_spectra()[0]
    safe = reference_safes([spectrum.smiles])[0]
    tok = tiny_bundle.tokenizer
    frags = safe.split(".")
    keep = (".".join(frags[:-1]) + ".") if len(frags) > 1 else safe[: len(safe) // 2]
    vec = formula_vector(parse_formula(spectrum.formula))
    ok = QueryRequest(np.array([1, 2, 3]), tuple((0, j) for j in range(4)),
                      prefix=tuple(tok.encode(keep, add_special=False)))
    # a prefix with more carbons than the formula holds: the masks forbid it, every row is a dead end
    too_many = QueryRequest(np.array([1, 2, 3]), tuple((1, j) for j in range(2)),
                            prefix=tuple(tok.encode("C" * (int(vec[0]) + 1), add_special=False)))
    out = dict(sample_queries(tiny_bundle.decoder, tok, vec, [ok, too_many], seed=0, decoding="formula"))
    assert all(s.startswith(keep) and not s.endswith(DEAD_END) for s in out[0])
    assert all(s.endswith(DEAD_END) for s in out[1])


def test_bad_prefix_is_refused(model, tok):
    bad = [QueryRequest(Q0, ((0, 0),), prefix=(tok.vocab_size + 5,))]
    with pytest.raises(ConfigError, match="prefix"):
        list(sample_queries(model, tok, FORMULA, bad, seed=0, max_new_tokens=30))
