"""Random access to a prepared molecule corpus (see :mod:`training.data.corpus`) for conditional pretraining.

Every shard array is opened with ``np.load(..., mmap_mode="r")``, so memory use does not grow with
the corpus; only the small per-shard start offsets live in RAM.

A batch from :meth:`CorpusDataset.collate` is a dict of tensors::

    idx      (B, T) int64   tokens <bos> ... (last token dropped), right-padded with the pad id
    targets  (B, T) int64   the same sequence shifted left by one (... <eos>); padding is IGNORE_INDEX (-1),
                            so ``F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)``
    fp_bits  (B, 256) int64 the first (lowest) 256 active Morgan bits ascending, padded with 0
    fp_mask  (B, 256) bool  True where fp_bits holds a real bit
    formula  (B, 14) int64  element counts in engine.chem.formula.ELEMENTS order

with ``T = max sequence length in the batch - 1``. Either call ``ds.collate(indices)`` on the
batches of a :class:`training.data.batching.FormulaGroupedBatchSampler`, or let a DataLoader do it:
``DataLoader(ds, batch_sampler=sampler, collate_fn=ds.collate_items, num_workers=k)`` (the dataset
pickles as its directory name, so workers reopen the maps instead of copying them).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from engine.errors import BundleError
from engine.model.tokenizer import SafeTokenizer

from training.data.corpus_format import FORMAT, FORMAT_VERSION, MAX_CONTEXT_BITS

IGNORE_INDEX = -1


def _load(path: Path) -> np.ndarray:
    """Memory-mapped array (an array without data cannot be mapped and is read normally)."""
    try:
        return np.load(path, mmap_mode="r")
    except ValueError:  # numpy refuses to mmap zero bytes of data
        return np.load(path)


class _Shard:
    """The arrays of one shard directory."""

    def __init__(self, path: Path):
        self.tokens = _load(path / "tokens.npy")
        self.tok_offsets = _load(path / "tok_offsets.npy")
        self.bits = _load(path / "bits.npy")
        self.bit_offsets = _load(path / "bit_offsets.npy")
        self.formula = _load(path / "formula.npy")

    def item(self, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Views (uint16) of record ``j``'s tokens, active bits and formula row."""
        t0, t1 = self.tok_offsets[j], self.tok_offsets[j + 1]
        b0, b1 = self.bit_offsets[j], self.bit_offsets[j + 1]
        return self.tokens[t0:t1], self.bits[b0:b1], self.formula[j]


class CorpusDataset:
    """Records of a corpus directory by global index (shards in manifest order)."""

    def __init__(self, corpus_dir: str | Path):
        self.corpus_dir = Path(corpus_dir)
        self.manifest = _read_manifest(self.corpus_dir)
        self.tokenizer = SafeTokenizer.load(self.corpus_dir / self.manifest["tokenizer"]["file"])
        if self.tokenizer.fingerprint() != self.manifest["tokenizer"]["fingerprint"]:
            raise BundleError(
                f"{self.corpus_dir}: tokenizer.json does not match manifest.json; rerun "
                "`python -m training.data.corpus build-tokenizer` on this directory."
            )
        self.pad_id = self.tokenizer.pad_id
        entries = [s for s in self.manifest["shards"] if s["n"] > 0]
        self._shards = [_Shard(self.corpus_dir / s["name"]) for s in entries]
        self._starts = [0]
        for s in entries:
            self._starts.append(self._starts[-1] + s["n"])
        self._formula_keys: np.ndarray | None = None

    def __len__(self) -> int:
        return self._starts[-1]

    def _locate(self, i: int) -> tuple[_Shard, int]:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} is out of range for a corpus of {n} records")
        s = bisect.bisect_right(self._starts, i) - 1
        return self._shards[s], i - self._starts[s]

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(token ids incl. <bos>/<eos>, sorted active bits, formula (14,))``, all int64."""
        shard, j = self._locate(int(i))
        tokens, bits, formula = shard.item(j)
        return np.array(tokens, np.int64), np.array(bits, np.int64), np.array(formula, np.int64)

    def formula_keys(self) -> np.ndarray:
        """One int64 per record, equal exactly when the formulas are equal (dense ids of the distinct
        formula rows in byte order; computed shard by shard, cached)."""
        if self._formula_keys is None:
            uniques, inverses = [], []
            for shard in self._shards:
                u, inv = np.unique(_rows_as_bytes(shard.formula), return_inverse=True)
                uniques.append(u)
                inverses.append(inv.ravel())
            if not uniques:
                return np.zeros(0, np.int64)
            _, global_inv = np.unique(np.concatenate(uniques), return_inverse=True)
            global_inv = global_inv.ravel().astype(np.int64)
            parts, offset = [], 0
            for u, inv in zip(uniques, inverses):
                parts.append(global_inv[offset : offset + len(u)][inv])
                offset += len(u)
            self._formula_keys = np.concatenate(parts)
        return self._formula_keys

    def inchikey_blocks(self) -> np.ndarray:
        """Every record's InChIKey block as ``(n, 14)`` uint8 ASCII, from the shards' ``inchikey14.txt``."""
        blocks = []
        for shard in self.manifest["shards"]:
            if shard["n"] == 0:
                continue
            path = self.corpus_dir / shard["name"] / "inchikey14.txt"
            try:
                raw = np.fromfile(path, dtype=np.uint8)
            except OSError as e:
                raise BundleError(f"{path}: cannot read the shard's InChIKey blocks ({e}).") from e
            if raw.size != 15 * shard["n"] or np.any(raw[14::15] != ord("\n")):
                raise BundleError(f"{path}: expected {shard['n']} lines of 14-letter InChIKey blocks; shard damaged.")
            blocks.append(raw.reshape(-1, 15)[:, :14])
        return np.concatenate(blocks) if blocks else np.zeros((0, 14), np.uint8)

    def fingerprint_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All records' active bits as flat arrays: ``bits`` (uint16, record ``i`` owns
        ``bits[offsets[i]:offsets[i+1]]``), ``offsets`` (int64, n + 1) and ``formula`` ((n, 14) int64)."""
        bits, offsets, formulas, start = [], [np.zeros(1, np.int64)], [], 0
        for shard in self._shards:
            bits.append(np.asarray(shard.bits))
            offsets.append(np.asarray(shard.bit_offsets[1:], np.int64) + start)
            start += int(shard.bit_offsets[-1])
            formulas.append(np.asarray(shard.formula, np.int64))
        if not formulas:
            return np.zeros(0, np.uint16), np.zeros(1, np.int64), np.zeros((0, 14), np.int64)
        return np.concatenate(bits), np.concatenate(offsets), np.concatenate(formulas)

    def collate(self, indices: Sequence[int] | np.ndarray) -> dict[str, torch.Tensor]:
        """Padded batch tensors of the records ``indices`` (see the module docstring)."""
        located = (self._locate(int(i)) for i in indices)
        return self.collate_items([shard.item(j) for shard, j in located])

    def collate_items(self, items: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, torch.Tensor]:
        """The same from ``self[i]`` tuples: ``DataLoader(ds, batch_sampler=s, collate_fn=ds.collate_items)``."""
        B, T = len(items), max(len(t) for t, _, _ in items) - 1
        idx = np.full((B, T), self.pad_id, dtype=np.int64)
        targets = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
        fp_bits = np.zeros((B, MAX_CONTEXT_BITS), dtype=np.int64)
        fp_mask = np.zeros((B, MAX_CONTEXT_BITS), dtype=bool)
        formula = np.empty((B, len(items[0][2])), dtype=np.int64)
        for b, (tokens, bits, form) in enumerate(items):
            n, k = len(tokens) - 1, min(len(bits), MAX_CONTEXT_BITS)
            idx[b, :n] = tokens[:-1]
            targets[b, :n] = tokens[1:]
            fp_bits[b, :k] = bits[:k]
            fp_mask[b, :k] = True
            formula[b] = form
        return {
            "idx": torch.from_numpy(idx),
            "targets": torch.from_numpy(targets),
            "fp_bits": torch.from_numpy(fp_bits),
            "fp_mask": torch.from_numpy(fp_mask),
            "formula": torch.from_numpy(formula),
        }

    def __getstate__(self) -> dict:
        """Pickle (e.g. to DataLoader worker processes) without the mapped arrays; they are reopened."""
        return {"corpus_dir": self.corpus_dir}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["corpus_dir"])


def _rows_as_bytes(a: np.ndarray) -> np.ndarray:
    """Each row of a 2-D array as one opaque bytes value (so np.unique compares whole rows)."""
    a = np.ascontiguousarray(a)
    return a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()


def _read_manifest(corpus_dir: Path) -> dict:
    path = corpus_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BundleError(
            f"{path}: cannot read the corpus manifest ({e}); prepare the corpus with "
            "`python -m training.data.corpus prepare` (the manifest is written when stage 2 finishes)."
        ) from e
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise BundleError(
            f"{path}: not a corpus of format {FORMAT!r} version {FORMAT_VERSION} "
            f"(found {manifest.get('format')!r} version {manifest.get('version')!r})."
        )
    return manifest
