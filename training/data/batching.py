"""Formula-grouped batches for conditional pretraining (paper, Appendix "Formula-grouped batching").

Per epoch, with ``B = batch_size``:

1. Records are grouped by exact formula key and shuffled within each group.
2. A group of ``n >= B`` records gives ``n // B`` complete same-formula ("pure") batches.
3. Its leftover ``n % B`` records join the pool, together with every record of the groups smaller
   than ``B``. (The paper leaves the leftovers of large groups unspecified; pooling them instead of
   discarding them means every record but fewer than ``B`` per epoch is trained on, and which records
   are left over changes from epoch to epoch.)
4. The pool is shuffled and cut into complete mixed-formula batches; with ``drop_last=True`` the
   last ``len(pool) % B`` records are not used this epoch.
5. The list of all batches is shuffled, and rank ``r`` of ``world_size`` takes batches
   ``r, r + W, r + 2W, ...`` of it; every rank gets ``len(batches) // W`` batches (the remainder
   is dropped), so step ``s`` of rank ``r`` is batch ``s * W + r`` of the single-process list.

Randomness comes from ``np.random.default_rng([seed, epoch])`` (a seed sequence of the pair; a
plain ``seed + epoch`` would make ``(seed=1, epoch=0)`` repeat ``(seed=0, epoch=1)``), so the batches
depend only on ``(keys, batch_size, seed, epoch, world_size)`` and are the same on every rank.

``drop_last=False`` is for passes where every record must be seen: the final incomplete mixed
batch is kept, and the batch list is padded by repeating its first batches so that all ranks
still get the same number of batches (then some records occur twice in an epoch).

Resuming mid-epoch: after ``set_epoch(e)``, ``skip(n)`` makes the next iteration start at this
rank's batch ``n``. A ``DataLoader`` reads batches ahead of the training loop, so record the number
of batches the loop has *consumed* and pass that to ``skip`` (or as ``batches_done`` to
:meth:`FormulaGroupedBatchSampler.load_state_dict`); :meth:`state_dict` counts the batches this
sampler has handed out, which is exact only when iterating it directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from engine.errors import ConfigError


@dataclass(frozen=True)
class _EpochPlan:
    epoch: int
    flat: np.ndarray  # record indices, batch after batch
    bounds: np.ndarray  # (n_batches + 1,) offsets into flat
    rank_batches: np.ndarray  # this rank's batch numbers in order


def _index_dtype(n: int) -> type[np.signedinteger]:
    return np.int32 if n < 2**31 else np.int64


class FormulaGroupedBatchSampler:
    """Batch sampler (lists of record indices) for ``DataLoader(batch_sampler=...)`` or direct iteration."""

    def __init__(
        self,
        formula_keys: np.ndarray,
        batch_size: int,
        *,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = True,
    ):
        keys = np.asarray(formula_keys)
        if keys.ndim != 1 or not np.issubdtype(keys.dtype, np.integer):
            raise ConfigError(f"`formula_keys` must be a 1-D integer array, got dtype {keys.dtype} shape {keys.shape}.")
        if batch_size < 1:
            raise ConfigError(f"`batch_size` must be >= 1, got {batch_size}.")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"`rank` must be in [0, world_size) with `world_size` >= 1, got {rank} of {world_size}.")
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.rank, self.world_size, self.drop_last = int(rank), int(world_size), bool(drop_last)
        self.n_records = len(keys)
        self._group_records(keys)
        self.epoch = 0
        self._start = 0  # where the next iteration begins (set by skip / load_state_dict)
        self._done = 0  # batches handed out in this epoch
        self._plan: _EpochPlan | None = None

    def _group_records(self, keys: np.ndarray) -> None:
        """Epoch-independent grouping: records sorted by key, group ids, and which positions form pure batches."""
        n, B = len(keys), self.batch_size
        dt = _index_dtype(n)
        self._order = np.argsort(keys, kind="stable").astype(dt)  # record ids, grouped by key
        sorted_keys = keys[self._order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]) if n else np.zeros(0, np.int64)
        sizes = np.diff(np.r_[starts, n])
        self.n_groups = len(sizes)
        self._group_of = np.repeat(np.arange(self.n_groups, dtype=dt), sizes)  # group of each sorted position
        rank_in_group = np.arange(n, dtype=dt) - starts[self._group_of].astype(dt)
        self._in_pure = rank_in_group < ((sizes // B) * B)[self._group_of]
        self.n_pure_batches = int(np.count_nonzero(self._in_pure)) // B
        n_pool = n - self.n_pure_batches * B
        self.n_mixed_batches = n_pool // B + (0 if self.drop_last or n_pool % B == 0 else 1)

    # -- sizes ---------------------------------------------------------------------------------

    @property
    def n_batches_all_ranks(self) -> int:
        """Batches of one epoch before they are divided among ranks."""
        return self.n_pure_batches + self.n_mixed_batches

    def __len__(self) -> int:
        """Batches this rank yields per epoch (an iteration after ``skip(n)`` yields ``len - n``)."""
        k, W = self.n_batches_all_ranks, self.world_size
        return k // W if self.drop_last else -(-k // W)

    # -- epoch plan ----------------------------------------------------------------------------

    def _make_plan(self, epoch: int) -> _EpochPlan:
        rng = np.random.default_rng([self.seed, epoch])
        B = self.batch_size
        perm = rng.permutation(len(self._order)).astype(self._order.dtype)
        grouped = perm[np.argsort(self._group_of[perm], kind="stable")]  # grouped by key, shuffled within
        records = self._order[grouped]
        pure = records[self._in_pure]
        pool = records[~self._in_pure]
        pool = pool[rng.permutation(len(pool))]
        n_mixed_records = len(pool) if not self.drop_last else (len(pool) // B) * B
        flat = np.concatenate([pure, pool[:n_mixed_records]])
        bounds = np.minimum(np.arange(self.n_batches_all_ranks + 1, dtype=np.int64) * B, len(flat))
        batch_order = rng.permutation(self.n_batches_all_ranks)
        n_rank, W = len(self), self.world_size
        taken = np.resize(batch_order, n_rank * W) if len(batch_order) else batch_order[:0]
        return _EpochPlan(epoch, flat, bounds, taken[self.rank :: W])

    def _plan_for_epoch(self) -> _EpochPlan:
        if self._plan is None or self._plan.epoch != self.epoch:
            self._plan = self._make_plan(self.epoch)
        return self._plan

    def batches(self) -> list[np.ndarray]:
        """All of this rank's batches of the current epoch, as arrays (for inspection and tests)."""
        plan = self._plan_for_epoch()
        return [plan.flat[plan.bounds[b] : plan.bounds[b + 1]] for b in plan.rank_batches]

    # -- iteration and resume --------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches the next iteration yields (from its first batch)."""
        self.epoch, self._start, self._done = int(epoch), 0, 0

    def skip(self, n_batches: int) -> None:
        """Make the next iteration start at this rank's batch ``n_batches`` of the current epoch."""
        if not 0 <= n_batches <= len(self):
            raise ConfigError(f"`n_batches` must be in [0, {len(self)}] (batches per epoch), got {n_batches}.")
        self._start = self._done = int(n_batches)

    def __iter__(self) -> Iterator[list[int]]:
        plan, start = self._plan_for_epoch(), self._start
        self._start, self._done = 0, start
        return self._iterate(plan, start)

    def _iterate(self, plan: _EpochPlan, start: int) -> Iterator[list[int]]:
        for s in range(start, len(plan.rank_batches)):
            b = plan.rank_batches[s]
            self._done = s + 1
            yield plan.flat[plan.bounds[b] : plan.bounds[b + 1]].tolist()

    def state_dict(self) -> dict[str, int]:
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "batches_done": self._done,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "n_records": self.n_records,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at ``state["epoch"]``, batch ``state["batches_done"]``; the other entries must match."""
        for key in ("seed", "batch_size", "world_size", "n_records"):
            if key in state and int(state[key]) != getattr(self, key):
                raise ConfigError(
                    f"cannot resume: the saved sampler has {key}={state[key]}, this one {getattr(self, key)}; "
                    "build the sampler with the saved settings."
                )
        self.set_epoch(int(state["epoch"]))
        self.skip(int(state["batches_done"]))
