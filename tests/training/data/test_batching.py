"""FormulaGroupedBatchSampler: batch invariants, rank split, determinism and mid-epoch resume."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.errors import ConfigError
from training.data.batching import FormulaGroupedBatchSampler

B = 8


@pytest.fixture(scope="module")
def keys() -> np.ndarray:
    """Formula keys of 40 groups: sizes 1..30, several >= B (with leftovers) and many below B."""
    rng = np.random.default_rng(0)
    sizes = np.r_[rng.integers(1, 8, size=30), [8, 16, 9, 17, 23, 31, 40, 12, 15, 64]]
    ids = rng.choice(10_000, size=len(sizes), replace=False)  # arbitrary, non-contiguous key values
    k = np.repeat(ids, sizes)
    return k[rng.permutation(len(k))]


def batches(keys: np.ndarray, epoch: int = 0, **kw) -> list[np.ndarray]:
    s = FormulaGroupedBatchSampler(keys, B, seed=kw.pop("seed", 1), **kw)
    s.set_epoch(epoch)
    out = [np.asarray(b) for b in s]
    assert len(out) == len(s)
    return out


def test_every_batch_is_complete_and_no_record_repeats(keys):
    bs = batches(keys)
    assert bs and all(len(b) == B for b in bs)
    used = np.concatenate(bs)
    assert len(np.unique(used)) == len(used)
    assert len(keys) - len(used) < B  # only the pool's incomplete tail is unused


def test_large_groups_fill_pure_batches_and_mixed_batches_take_the_rest(keys):
    sizes = Counter(keys.tolist())
    in_pure, in_mixed = Counter(), Counter()
    for b in batches(keys):
        ks = keys[b]
        target = in_pure if (ks == ks[0]).all() else in_mixed
        target.update(ks.tolist())
    for k, n in sizes.items():
        assert in_pure[k] == (n // B) * B  # pure batches: exactly the complete part of large groups
        assert in_mixed[k] <= (n % B)  # mixed batches: small groups, or a large group's leftovers
    assert sum(in_mixed.values()) > 0


def test_ranks_are_disjoint_equal_and_interleave_the_single_rank_list(keys):
    single = batches(keys)
    per_rank = [batches(keys, rank=r, world_size=3) for r in range(3)]
    n = len(single) // 3
    assert all(len(p) == n for p in per_rank)
    used = np.concatenate([np.concatenate(p) for p in per_rank])
    assert len(np.unique(used)) == len(used)
    interleaved = [per_rank[s % 3][s // 3] for s in range(3 * n)]
    assert all(np.array_equal(a, b) for a, b in zip(interleaved, single[: 3 * n]))


def test_deterministic_per_seed_and_epoch(keys):
    a, b = batches(keys, epoch=3), batches(keys, epoch=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    c = batches(keys, epoch=4)
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    d = batches(keys, epoch=3, seed=2)
    assert not all(np.array_equal(x, y) for x, y in zip(a, d))


def test_skip_and_state_dict_resume_exactly(keys):
    full = batches(keys, epoch=2, rank=1, world_size=2)
    s = FormulaGroupedBatchSampler(keys, B, seed=1, rank=1, world_size=2)
    s.set_epoch(2)
    s.skip(3)
    assert [list(b) for b in full[3:]] == list(s)

    it = iter(s)
    for _ in range(5):
        next(it)
    state = s.state_dict()
    assert state["batches_done"] == 5 and state["epoch"] == 2
    resumed = FormulaGroupedBatchSampler(keys, B, seed=1, rank=1, world_size=2)
    resumed.load_state_dict(state)
    assert [list(b) for b in full[5:]] == list(resumed)
    assert len(list(resumed)) == len(full)  # a resume skips once; the next pass is the whole epoch


def test_drop_last_false_covers_every_record(keys):
    per_rank = [batches(keys, rank=r, world_size=3, drop_last=False) for r in range(3)]
    assert len({len(p) for p in per_rank}) == 1
    used = np.concatenate([np.concatenate(p) for p in per_rank])
    assert set(used.tolist()) == set(range(len(keys)))


def test_bad_arguments_name_the_field(keys):
    with pytest.raises(ConfigError, match="batch_size"):
        FormulaGroupedBatchSampler(keys, 0, seed=0)
    with pytest.raises(ConfigError, match="rank"):
        FormulaGroupedBatchSampler(keys, B, seed=0, rank=2, world_size=2)
    with pytest.raises(ConfigError, match="formula_keys"):
        FormulaGroupedBatchSampler(keys.astype(float), B, seed=0)
    s = FormulaGroupedBatchSampler(keys, B, seed=0)
    with pytest.raises(ConfigError, match="batch_size=16"):
        s.load_state_dict({**s.state_dict(), "batch_size": 16})
