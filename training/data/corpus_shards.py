"""The corpus's shards on disk: chunks of input rows mapped in order over worker processes, shard folders written
atomically (arrays and text lines), the structures already seen (deduplication across shards and resumption)."""

from __future__ import annotations

import json
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from engine.chem.formula import ELEMENTS
from training.data.corpus_convert import DropCounter, Dropped, Record
from training.data.corpus_format import MAX_CONTEXT_BITS

DONE_MARKER = "DONE"
TEXT_FIELDS: tuple[str, ...] = ("smiles", "safe", "formula", "inchikey14")
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Chunk:
    index: int
    source: str
    smiles: list[str]


def iter_chunks(sources: Sequence[tuple[str, Iterable[str]]], chunk_size: int) -> Iterator[Chunk]:
    """Consecutive runs of ``chunk_size`` SMILES per source (a chunk never spans two sources), numbered globally."""
    index = 0
    for label, items in sources:
        buf: list[str] = []
        for s in items:
            buf.append(s)
            if len(buf) == chunk_size:
                yield Chunk(index, label, buf)
                index, buf = index + 1, []
        if buf:
            yield Chunk(index, label, buf)
            index += 1


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], executor: Executor | None, window: int
) -> Iterator[tuple[T, R]]:
    """``(item, fn(item))`` in input order, at most ``window`` tasks in flight (items are read lazily)."""
    if executor is None:
        yield from ((item, fn(item)) for item in items)
        return
    pending: deque[tuple[T, Future[R]]] = deque()
    for item in items:
        pending.append((item, executor.submit(fn, item)))
        if len(pending) >= window:
            done, fut = pending.popleft()
            yield done, fut.result()
    while pending:
        done, fut = pending.popleft()
        yield done, fut.result()


def _executor(workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = ()) -> Executor | None:
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        return None
    return ProcessPoolExecutor(workers, initializer=initializer, initargs=initargs)


def shard_name(index: int) -> str:
    return f"shard_{index:05d}"


def is_done(shard_dir: Path) -> bool:
    return (shard_dir / DONE_MARKER).is_file()


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for line in lines:
            fh.write(line + "\n")


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [line.rstrip("\n") for line in fh]


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _save_npy_atomic(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, arr)
    os.replace(tmp, path)


def write_shard(out: Path, chunk: Chunk, records: list[Record], drops: DropCounter) -> dict:
    """Write one stage-1 shard into a temporary directory and rename it into place; returns its stats."""
    final = out / shard_name(chunk.index)
    tmp = out / (final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for i, name in enumerate(TEXT_FIELDS):
        _write_lines(tmp / f"{name}.txt", (r[i] for r in records))
    bits = [r.bits for r in records]
    np.save(tmp / "bits.npy", np.concatenate(bits) if bits else np.zeros(0, np.uint16))
    np.save(tmp / "bit_offsets.npy", _offsets([len(b) for b in bits]))
    formula = np.stack([r.formula_vec for r in records]) if records else np.zeros((0, len(ELEMENTS)), np.uint16)
    np.save(tmp / "formula.npy", formula)
    stats = {
        "index": chunk.index,
        "source": chunk.source,
        "n_input": len(chunk.smiles),
        "n_kept": len(records),
        "n_unfragmented_safe": sum(r.safe == r.smiles for r in records),  # no BRICS-cuttable bond
        "n_bits_over_256": sum(len(r.bits) > MAX_CONTEXT_BITS for r in records),  # kept; model reads 256
        "dropped": drops.to_json(),
    }
    (tmp / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    (tmp / DONE_MARKER).write_text("")
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    return stats


def dedupe(records: list[Record], seen: set[str], drops: DropCounter) -> list[Record]:
    """Keep the first record of each InChIKey first block (``seen`` is updated); later ones are counted."""
    kept = []
    for r in records:
        if r.inchikey14 in seen:
            drops.add(Dropped("duplicate"), r.smiles)
        else:
            seen.add(r.inchikey14)
            kept.append(r)
    return kept


def done_shards(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("shard_*") if p.is_dir() and not p.name.endswith(".tmp") and is_done(p))


def load_seen_keys(out: Path) -> set[str]:
    seen: set[str] = set()
    for shard in done_shards(out):
        seen.update(read_lines(shard / "inchikey14.txt"))
    return seen
