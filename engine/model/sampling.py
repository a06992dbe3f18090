"""Fast sampler: draws the decoder samples of one spectrum's fingerprint queries.

What makes it fast (see docs/architecture.md, benchmarks/bench_sampling.py):

- a self-attention KV cache, so each step runs one new token per row;
- the cross-attention keys/values of each distinct query computed once and shared by all its rows and
  all steps (rows of one query are laid out so its K/V is read once per step: cross-attention over a
  270-token context is bound by memory reads);
- rows of every request batched together (up to ``max_batch_rows``); finished rows are dropped from
  the batch once a quarter of it has finished;
- rows of one query that drew the same tokens so far are one *sequence* for the decoder (it runs once for them;
  a sequence forks when its rows draw different tokens): a third of the row-steps at B=100 (issue #58).

What makes it reproducible: sample (i, j) draws its random numbers from a generator seeded by
(seed, i, j), one uniform per step, turned into a token by inverse-CDF over the filtered distribution.
A sample's tokens therefore do not depend on which other samples share its batch, nor on the batch
size: growing N draws only the new samples and reproduces the old ones (up to floating-point effects
of batch shape, which change a token only when its uniform lies within ~1e-6 of a CDF boundary).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from engine.errors import Cancelled, ConfigError
from engine.model.constraints import DEAD_END, FormulaConstraint
from engine.model.decoder import ConditionalDecoder, ContextKV, collate_queries
from engine.model.safe_grammar import SafeGrammar
from engine.model.tokenizer import SafeTokenizer

DECODING_MODES = ("formula", "free")

COMPACT_FRACTION = 0.25  # drop finished rows from the batch once they are this share of it


@dataclass(frozen=True)
class QueryRequest:
    fp_bits: np.ndarray  # sorted active bit indices (int64) of one DISTINCT fingerprint query
    sample_ids: tuple[tuple[int, int], ...]  # identities (threshold index i, sample index j) to draw from it
    prefix: tuple[int, ...] = ()  # token ids (no <bos>) every row starts with; the decoder completes them


class KVCache:
    """Self-attention keys/values of every layer, preallocated and written in place.

    Same interface as Hugging Face's ``Cache`` (``update``, ``get_seq_length``) so
    :meth:`ConditionalDecoder.decode` takes either. ``update`` returns the whole buffer, spare slots
    included (zeros, masked by the causal mask): attention then reads contiguous memory, where a
    strided ``[:length]`` view would be copied by every bf16 matmul. Capacity grows 16 positions at a
    time, so little of what attention reads is spare (reading the cache is memory-bound at B=100).

    Rows are preallocated too (``max_rows``, at least the first batch), so :meth:`fork` can give a row a copy
    of another's past without moving the rest; :meth:`select` keeps some rows (in a new order, repeats allowed).
    """

    def __init__(self, n_layer: int, max_len: int, max_rows: int = 0):
        self.max_len = max_len
        self.max_rows = max_rows
        self.rows = 0  # rows in use: the buffers' first ``rows``
        self.k: list[torch.Tensor | None] = [None] * n_layer
        self.v: list[torch.Tensor | None] = [None] * n_layer
        self.lengths = [0] * n_layer

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.lengths[layer_idx]

    def update(self, k, v, layer_idx: int):
        """Append k, v (B, nh, T, hs) to layer ``layer_idx``; returns its buffers (B, nh, capacity, hs)."""
        start = self.lengths[layer_idx]
        end = start + k.size(2)
        n = k.size(0)
        buf = self.k[layer_idx]
        if buf is None or buf.size(2) < end or buf.size(0) < n:
            cap = min(self.max_len, end + 15 - (end - 1) % 16)  # next multiple of 16
            rows = max(n, self.max_rows, 0 if buf is None else buf.size(0))
            for store in (self.k, self.v):
                new = k.new_zeros(rows, k.size(1), cap, k.size(3))
                if store[layer_idx] is not None:
                    old = store[layer_idx]
                    new[: min(rows, old.size(0)), :, :start] = old[: min(rows, old.size(0)), :, :start]
                store[layer_idx] = new
        self.rows = n
        self.k[layer_idx][:n, :, start:end] = k
        self.v[layer_idx][:n, :, start:end] = v
        self.lengths[layer_idx] = end
        return self.k[layer_idx][:n], self.v[layer_idx][:n]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (a bool mask, or indices in their new order, repeats allowed) of the batch."""
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()
        n = len(rows)
        for store in (self.k, self.v):
            for i, t in enumerate(store):
                if t is None:
                    continue
                if n > t.size(0):
                    store[i] = t[rows]
                else:
                    t[:n] = t[rows]  # the right side is gathered into a new tensor first
        self.rows = n

    def fork(self, parents: torch.Tensor) -> None:
        """Append one row per entry of ``parents``: a copy of that row's past (its keys and values so far)."""
        n, start = len(parents), self.rows
        for store in (self.k, self.v):
            for i, t in enumerate(store):
                if t is None:
                    continue
                if start + n > t.size(0):
                    grown = t.new_zeros(start + n, *t.shape[1:])
                    grown[:start] = t[:start]
                    store[i] = t = grown
                t[start : start + n] = t[parents]
        self.rows = start + n


def filter_probs(logits, temperature: float = 1.0, top_k: int = 50, top_p: float = 0.95):
    """Hugging Face's sampling filters, in its order: temperature, then top-k, then top-p (nucleus).

    logits (B, V) -> probabilities (B, K) of the top-k tokens, most likely first, with the tokens that
    top-p removes set to zero (unnormalised), and their token ids (B, K). ``top_k=0`` keeps all.
    """
    logits = logits.float() / temperature
    k = min(top_k, logits.size(-1)) if top_k else logits.size(-1)
    values, ids = logits.topk(k, dim=-1)  # (B, K), sorted descending
    probs = values.softmax(dim=-1)
    if top_p < 1.0:
        more_likely = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each one
        probs = probs.masked_fill(more_likely >= top_p, 0.0)  # = HF: drop where ascending cumsum <= 1 - top_p
    return probs, ids


def draw(probs, ids, u):
    """Inverse-CDF sampling: uniforms u (B,) in [0, 1) pick one token per row from (unnormalised) probs (B, K)."""
    cdf = probs.double().cumsum(dim=-1)  # (B, K)
    pick = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True)  # (B, 1)
    return ids.gather(-1, pick.clamp_(max=ids.size(-1) - 1)).squeeze(-1)  # (B,)


def sample_uniforms(seed: int, sample_ids: Sequence[tuple[int, int]], steps: int) -> np.ndarray:
    """(len(sample_ids), steps) uniforms; row (i, j) comes from a generator seeded by (seed, i, j) alone."""
    return np.stack([np.random.default_rng([seed, i, j]).random(steps) for i, j in sample_ids])


def sample_queries(
    model: ConditionalDecoder,
    tokenizer: SafeTokenizer,
    formula_vec: np.ndarray,
    requests: Sequence[QueryRequest],
    *,
    seed: int,
    temperature: float = 1.0,
    top_k: int = 50,
    top_p: float = 0.95,
    max_new_tokens: int | None = None,
    max_batch_rows: int = 256,
    use_cache: bool = True,
    dtype: torch.dtype | None = None,
    cancel: Callable[[], bool] | None = None,
    min_new_tokens: int = 0,
    decoding: str = "free",
) -> Iterator[tuple[int, list[str]]]:
    """Draw the samples of ``requests`` (distinct queries of one spectrum with formula ``formula_vec``).

    Yields ``(request index, SAFE strings in the order of its sample_ids)`` as soon as all rows of a
    request are done. Rows of all requests share batches of up to ``max_batch_rows``.
    ``max_new_tokens`` defaults to ``block_size - 1``; ``min_new_tokens`` forbids ``<eos>`` before
    that many tokens (as in HF; benchmarks use it for fixed lengths). ``use_cache=False`` recomputes
    the whole prefix every step (a reference for tests; the context K/V is still computed once).
    ``dtype`` (e.g. ``torch.bfloat16``) runs the model under autocast in that dtype, leaving its
    weights alone; a model cast once with ``model.to(torch.bfloat16)`` is ~10% faster still.
    ``cancel()`` is checked between steps and raises :class:`Cancelled`.

    ``decoding="formula"`` masks, before every step, the tokens that cannot lead to a complete string
    with exactly the heavy atoms of ``formula_vec`` (:mod:`engine.model.constraints`); a row left without a
    legal token ends as a failure, its string ending in :data:`~engine.model.constraints.DEAD_END`.
    ``"free"`` is the paper's unconstrained sampling.

    A request's ``prefix`` (token ids) is forced as the first tokens of each of its rows, one per step, and the
    decoder completes it (under the masks with ``decoding="formula"``: a prefix token the masks forbid ends the
    row as a dead end). Requests without a prefix are drawn exactly as before.
    """
    if model.training:
        raise ConfigError("The decoder is in training mode (dropout on); call `model.eval()` before sampling.")
    cfg = model.config
    max_new = min(max_new_tokens or cfg.block_size - 1, cfg.block_size - 1)
    _check_settings(seed, temperature, top_k, top_p, max_new, min_new_tokens, max_batch_rows)
    if decoding not in DECODING_MODES:
        raise ConfigError(f"`decoding` must be one of {', '.join(DECODING_MODES)}, got {decoding!r}.")
    grammar = SafeGrammar.of(tokenizer) if decoding == "formula" else None
    rows = [(r, n, i, j) for r, req in enumerate(requests) for n, (i, j) in enumerate(req.sample_ids)]
    results: list[list[str]] = [[""] * len(req.sample_ids) for req in requests]
    remaining = [len(req.sample_ids) for req in requests]
    yield from ((r, []) for r, n in enumerate(remaining) if n == 0)
    for req in requests:
        if len(req.prefix) >= max_new or any(not 0 <= t < tokenizer.vocab_size for t in req.prefix):
            raise ConfigError(f"a request's `prefix` must be fewer than {max_new} token ids of the tokenizer "
                              f"(0..{tokenizer.vocab_size - 1}), got {list(req.prefix)}")
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p, eos=tokenizer.eos_id,
                    bos=tokenizer.bos_id, min_new=min_new_tokens, use_cache=use_cache, dtype=dtype, grammar=grammar)
    for start in range(0, len(rows), max_batch_rows):
        chunk = rows[start : start + max_batch_rows]
        req_ids = sorted({r for r, *_ in chunk})
        bits, context_of = [], {}  # consecutive requests with the same query (prefixed ones) share its context
        for r in req_ids:
            if not bits or not np.array_equal(requests[r].fp_bits, bits[-1]):
                bits.append(requests[r].fp_bits)
            context_of[r] = len(bits) - 1
        group = torch.tensor([context_of[r] for r, *_ in chunk])  # (B,) row -> its query within the chunk
        u = torch.from_numpy(sample_uniforms(seed, [(i, j) for *_, i, j in chunk], max_new))  # (B, max_new)
        prefixes = [requests[r].prefix for r, *_ in chunk]
        forced = _forced_tokens(prefixes) if any(prefixes) else None
        for finished, tokens, dead in _generate(model, bits, formula_vec, group, u, cancel, forced=forced,
                                                **settings):
            for row, toks, failed in zip(finished.tolist(), tokens.tolist(), dead.tolist()):
                r, n = chunk[row][:2]
                results[r][n] = tokenizer.decode(toks) + (DEAD_END if failed else "")
                remaining[r] -= 1
                if remaining[r] == 0:
                    yield r, results[r]


def _forced_tokens(prefixes: Sequence[tuple[int, ...]]) -> torch.Tensor:
    """(B, P) token ids each row must take at steps 0..P-1, -1 where it samples."""
    forced = torch.full((len(prefixes), max(len(p) for p in prefixes)), -1, dtype=torch.long)
    for row, p in enumerate(prefixes):
        forced[row, : len(p)] = torch.tensor(p, dtype=torch.long)
    return forced


@torch.inference_mode()  # on a generator: entered on each resume, left at each yield
def _generate(model, bits, formula_vec, group, u, cancel, *, bos, eos, min_new, use_cache, dtype, grammar,
              forced=None, **filters):
    """Sample B = len(group) rows; yields (finished row indices, their tokens (n, t), dead-end flags (n,))
    as rows finish. With a ``grammar``, tokens are drawn under :class:`FormulaConstraint` masks; ``forced``
    (B, P) gives tokens rows must take first (-1: sample).

    Rows that read the same query and drew the same tokens so far are in the same state, so the decoder runs once
    for all of them: it runs on *sequences* (distinct query and prefix), each row reads its sequence's logits and
    draws with its own uniforms, and a sequence whose rows draw different tokens forks (the new sequence gets a copy
    of its past keys and values). About a third of a spectrum's row-steps are such repeats at B=100 (issue #58);
    each row's tokens are what it would draw alone."""
    device = next(model.parameters()).device
    group, u = group.to(device), u.to(device)
    forced = None if forced is None else forced.to(device)
    rows = torch.arange(len(group), device=device)  # (b,) original index of each row still in the batch
    alive = torch.ones_like(rows, dtype=torch.bool)  # (b,) not finished yet
    idx = torch.full((len(group), 1), bos, device=device)  # (b, 1 + t) tokens so far
    contexts = _contexts(model, bits, formula_vec, device, dtype)
    # sequences: one per distinct (query, tokens so far); row_seq (b,) is each row's
    seq_group, row_seq = torch.unique(group, return_inverse=True)  # (S,), (b,)
    seq_idx = torch.full((len(seq_group), 1), bos, device=device)  # (S, 1 + t)
    context = contexts.for_rows(seq_group)
    cache = KVCache(model.config.n_layer, model.config.block_size, max_rows=len(group)) if use_cache else None
    constraint = FormulaConstraint(grammar, formula_vec, len(group)) if grammar is not None else None
    dead = torch.zeros_like(alive)  # (b,) rows that ran out of legal tokens
    vocab = model.config.vocab_size
    steps = u.size(1)
    for t in range(steps):
        if cancel is not None and cancel():
            raise Cancelled("Sampling was cancelled.")
        with _autocast(model, dtype):
            out = model.decode(seq_idx if cache is None else seq_idx[:, -1:], context, cache)[:, -1].float()  # (S, V)
        logits = out[row_seq]  # (b, V)
        if t < min_new:
            logits[:, eos] = float("-inf")
        if constraint is not None:
            allowed = constraint.allowed(steps - t).to(device)  # (b, V)
            stuck = ~allowed.any(dim=1)
            allowed[stuck, eos] = True  # a row with no legal token ends here, flagged as a dead end
            dead = dead | (stuck & alive)
            logits = logits.masked_fill(~allowed, float("-inf"))
        tok = draw(*filter_probs(logits, **filters), u[rows, t])  # (b,)
        if forced is not None and t < forced.size(1):
            tok, dead = _force(tok, forced[rows, t], dead, alive, allowed if constraint is not None else None, eos)
        if constraint is not None:
            constraint.advance(tok.tolist())
        idx = torch.cat([idx, tok[:, None]], dim=1)
        done = alive & (tok == eos) if t + 1 < steps else alive
        if done.any():
            failed = dead[done]
            if constraint is not None:  # a constrained row cut at the length limit is a failure too
                failed = failed | (tok[done] != eos)
            yield rows[done], idx[done, 1:], failed
            alive = alive & ~done
        if not alive.any():
            return
        if (~alive).sum() >= COMPACT_FRACTION * len(alive):  # finished rows stop costing compute
            keep = alive
            rows, idx, alive, dead = rows[keep], idx[keep], alive[keep], dead[keep]
            tok, row_seq = tok[keep], row_seq[keep]
            if constraint is not None:
                constraint.select(keep.nonzero().flatten().tolist())
        seq_idx, seq_group, row_seq, context = _next_sequences(seq_idx, seq_group, row_seq, tok, alive, vocab,
                                                               contexts, context, cache)


def _next_sequences(seq_idx, seq_group, row_seq, tok, alive, vocab, contexts, context, cache):
    """The sequences of the next step: each (sequence, token) a live row drew. The first token drawn from a
    sequence continues it in place; each other forks it into a new sequence at the end (a copy of its past); a
    sequence no live row reads is left in place, unread, until they are a quarter of all, then the sequences are
    laid out afresh. Returns the new ``seq_idx, seq_group, row_seq, context``."""
    n_seq = len(seq_group)
    live_rows = alive.nonzero().flatten()
    key = row_seq[live_rows] * vocab + tok[live_rows]
    uniq, inv = torch.unique(key, return_inverse=True)  # sorted: by parent sequence, then token
    parent, token = uniq // vocab, uniq % vocab
    first = torch.ones_like(parent, dtype=torch.bool)
    first[1:] = parent[1:] != parent[:-1]
    n_fork = int((~first).sum())
    unread = n_seq - int(first.sum())
    changed = n_fork > 0  # the contexts follow the sequences' queries, which only a fork or a new layout changes
    if unread and unread >= COMPACT_FRACTION * (n_seq + n_fork):
        # lay the sequences out afresh: child k at slot k
        if cache is not None:
            cache.select(parent)
        slot = torch.arange(len(uniq), device=parent.device)
        seq_idx, seq_group = seq_idx[parent], seq_group[parent]
        changed = True
    else:
        slot = torch.empty_like(parent)
        slot[first] = parent[first]
        forks = parent[~first]
        slot[~first] = torch.arange(n_seq, n_seq + n_fork, device=parent.device)
        if n_fork:
            if cache is not None:
                cache.fork(forks)
            seq_idx = torch.cat([seq_idx, seq_idx[forks]])
            seq_group = torch.cat([seq_group, seq_group[forks]])
    column = torch.full((len(seq_group), 1), 0, dtype=seq_idx.dtype, device=seq_idx.device)
    column[slot, 0] = token
    seq_idx = torch.cat([seq_idx, column], dim=1)
    row_seq = torch.zeros_like(row_seq)
    row_seq[live_rows] = slot[inv]
    if changed:
        context = contexts.for_rows(seq_group)
    return seq_idx, seq_group, row_seq, context


def _force(tok, want, dead, alive, allowed, eos):
    """Rows with a forced token (``want`` >= 0) take it; one the masks forbid ends the row as a dead end."""
    force = want >= 0  # (b,)
    if allowed is not None:
        ok = allowed.gather(1, want.clamp(min=0)[:, None]).squeeze(1)  # (b,)
        bad = force & ~ok
        dead = dead | (bad & alive)
        tok = torch.where(bad, torch.full_like(tok, eos), tok)
        force = force & ok
    return torch.where(force, want, tok), dead


def _autocast(model, dtype):
    if dtype is None or dtype == next(model.parameters()).dtype:
        return nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=dtype)


def _contexts(model, bits, formula_vec, device, dtype) -> ContextKV:
    """Context keys/values of each distinct query, computed once."""
    cfg = model.config
    tensors = collate_queries(bits, formula_vec, cfg.max_fp_tokens, cfg.fp_bits)
    with _autocast(model, dtype):
        return model.context_kv(*model.encode_context(*(t.to(device) for t in tensors)))


def _check_settings(seed, temperature, top_k, top_p, max_new, min_new, max_batch_rows):
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"`seed` must be a non-negative integer, got {seed!r}.")
    if not temperature > 0:
        raise ConfigError(f"`temperature` must be > 0, got {temperature!r}.")
    if top_k < 0:
        raise ConfigError(f"`top_k` must be >= 0 (0 = no top-k filter), got {top_k!r}.")
    if not 0 < top_p <= 1:
        raise ConfigError(f"`top_p` must be in (0, 1], got {top_p!r}.")
    if max_new < 1:
        raise ConfigError(f"`max_new_tokens` must be >= 1, got {max_new!r}.")
    if min_new < 0:
        raise ConfigError(f"`min_new_tokens` must be >= 0, got {min_new!r}.")
    if max_batch_rows < 1:
        raise ConfigError(f"`max_batch_rows` must be >= 1, got {max_batch_rows!r}.")
