"""The bit scores of the scorer study (:mod:`training.studies.retrieval_scorer`): candidates' active bits as ragged
rows, a linear score of them, and its per-bit slopes and offsets learned listwise on FOLD=train spectra to rank each
structure above its isomers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Bits:
    """Active bits of many structures (CSR): structure ``i`` has ``idx[off[i]:off[i+1]]``."""

    idx: np.ndarray
    off: np.ndarray

    @classmethod
    def of(cls, bit_lists: Sequence[np.ndarray]) -> Bits:
        off = np.zeros(len(bit_lists) + 1, dtype=np.int64)
        off[1:] = np.cumsum([len(b) for b in bit_lists])
        idx = np.concatenate([np.asarray(b, dtype=np.int32) for b in bit_lists]) if bit_lists else np.zeros(0, np.int32)
        return cls(idx, off)

    def __len__(self) -> int:
        return len(self.off) - 1

    def rows(self, lo: int, hi: int) -> Bits:
        return Bits(self.idx[self.off[lo] : self.off[hi]], self.off[lo : hi + 1] - self.off[lo])

    def sums(self, weights: np.ndarray) -> np.ndarray:
        """Σ over each structure's active bits of ``weights`` (n_bits,); each structure summed on its own, so
        that equal fingerprints get equal sums (ties stay ties)."""
        vals = np.append(np.asarray(weights, dtype=np.float64)[self.idx], 0.0)
        out = np.add.reduceat(vals, self.off[:-1]) if len(self) else np.zeros(0)
        out[self.off[1:] == self.off[:-1]] = 0.0
        return out

    def counts(self) -> np.ndarray:
        return np.diff(self.off).astype(np.float64)


@dataclass
class Context:
    """One spectrum's posterior (raw and recalibrated as the app's score reads it) and candidate bits."""

    post: np.ndarray
    q: np.ndarray
    bits: Bits

    @property
    def gain(self) -> np.ndarray:
        return np.log(self.q) - np.log1p(-self.q)


@dataclass(frozen=True)
class LinearBitScore:
    """``Σ_{b∈y} (slope_b · logit q_b + offset_b)``: the log-likelihood (slope 1, offset 0) up to a constant;
    a price per active bit is a constant offset, a likelihood ratio against bit frequencies an offset
    ``−λ·logit f_b``."""

    slope: np.ndarray | float = 1.0
    offset: np.ndarray | float = 0.0

    def __call__(self, c: Context) -> np.ndarray:
        w = np.asarray(self.slope) * c.gain + np.asarray(self.offset)
        return c.bits.sums(np.broadcast_to(w, c.q.shape))


# -- the learned per-bit score -----------------------------------------------------------------------------
@dataclass
class TrainSet:
    """Training spectra: ``gain`` (n, n_bits) logit q of each; ``struct`` the candidate group of each (truth
    first, then corpus isomers) in ``bits`` (groups of ``group_n`` consecutive rows from ``group_off``)."""

    gain: np.ndarray
    struct: np.ndarray
    bits: Bits
    group_off: np.ndarray

    def batch(self, spectra: np.ndarray):
        """Flattened (nnz) bit index, candidate index, spectrum row; and (candidate → spectrum, position)."""
        idx, cand, spec, cand_spec, cand_pos = [], [], [], [], []
        n_cand = 0
        for j, s in enumerate(spectra):
            g = self.struct[s]
            lo, hi = self.group_off[g], self.group_off[g + 1]
            sub = self.bits.rows(lo, hi)
            k = hi - lo
            idx.append(sub.idx)
            cand.append(np.repeat(np.arange(n_cand, n_cand + k), np.diff(sub.off)))
            spec.append(np.full(len(sub.idx), s))
            cand_spec.append(np.full(k, j))
            cand_pos.append(np.arange(k))
            n_cand += k
        return (np.concatenate(idx).astype(np.int64), np.concatenate(cand), np.concatenate(spec),
                np.concatenate(cand_spec), np.concatenate(cand_pos))


@dataclass
class LearnedBitScore:
    """Trained :class:`LinearBitScore`: slope ``a + δa_b``, offset ``β + γ·g_b + δb_b`` (``g = −logit f``)."""

    slope: np.ndarray
    offset: np.ndarray
    info: dict = field(default_factory=dict)

    def linear(self) -> LinearBitScore:
        return LinearBitScore(self.slope, self.offset)


PER_BIT = ("both", "slope", "offset")  # which per-bit deviations are learned (δa and δb, δa alone, δb alone)


def train_listwise(ts: TrainSet, g: np.ndarray, l2: float, *, per_bit: str = "both", epochs: int = 40,
                   batch: int = 64, lr: float = 0.02, seed: int = 0, log: Callable[[str], None] | None = None
                   ) -> LearnedBitScore:
    """Listwise softmax (truth the positive) of ``Σ_y ((a + δa)·logit q + β + γ·g + δb)`` with
    ``l2``·(‖δa‖² + ‖δb‖²) (summed over the training spectra), Adam. ``per_bit``: ``both``, ``slope`` (δa
    alone: a per-bit reliability of the posterior), ``offset`` (δb alone: a per-bit prior on structures,
    whatever the spectrum), ``none`` (a, β, γ only). Scores are those of the last epoch."""
    import torch

    n_bits = ts.gain.shape[1]
    gain = torch.from_numpy(ts.gain.astype(np.float32))
    gt = torch.from_numpy(g.astype(np.float32))
    a = torch.ones(1, requires_grad=True)
    beta = torch.zeros(1, requires_grad=True)
    gamma = torch.zeros(1, requires_grad=True)
    da = torch.zeros(n_bits, requires_grad=per_bit in ("both", "slope"))
    db = torch.zeros(n_bits, requires_grad=per_bit in ("both", "offset"))
    params = [a, beta, gamma] + [x for x in (da, db) if x.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0 - e / epochs)  # to 0: a quiet last iterate
    rng = np.random.default_rng(seed)
    n = len(ts.struct)
    history = []
    for epoch in range(epochs):
        order = rng.permutation(n)
        total = 0.0
        for lo in range(0, n, batch):
            sel = order[lo : lo + batch]
            idx, cand, spec, cspec, cpos = (torch.from_numpy(x) for x in ts.batch(sel))
            val = (a + da[idx]) * gain[spec, idx] + beta + gamma * gt[idx] + db[idx]
            s = torch.zeros(len(cspec)).index_add(0, cand, val)
            mat = torch.full((len(sel), int(cpos.max()) + 1), -torch.inf)
            mat[cspec, cpos] = s
            ce = -(torch.log_softmax(mat, dim=1)[:, 0]).sum()
            reg = l2 * len(sel) / n * ((da ** 2).sum() + (db ** 2).sum())
            loss = (ce + reg) / len(sel)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(ce.detach())
        sched.step()
        history.append(total / n)
        if log and (epoch % 10 == 0 or epoch == epochs - 1):
            log(f"    epoch {epoch}: listwise loss {total / n:.4f}; a={a.item():.3f} β={beta.item():.3f} "
                f"γ={gamma.item():.3f} |δa|={da.norm().item():.2f} |δb|={db.norm().item():.2f}")
    slope = (a + da).detach().double().numpy()
    offset = (beta + gamma * gt + db).detach().double().numpy()
    info = {"l2": l2, "per_bit": per_bit, "epochs": epochs, "a": a.item(), "beta": beta.item(), "gamma": gamma.item(),
            "delta_a_norm": da.norm().item(), "delta_b_norm": db.norm().item(), "loss": history}
    return LearnedBitScore(slope, offset, info)
