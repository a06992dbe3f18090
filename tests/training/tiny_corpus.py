"""A tiny synthetic molecule corpus in training.data.corpus's format and a tiny pretraining config, for the tests
of pretraining and of what builds on it (tests/training/decoder, encoder, bundle)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.chem.formula import ELEMENTS
from engine.model.tokenizer import SPECIAL_TOKENS, SafeTokenizer
from training.data.corpus import FORMAT, FORMAT_VERSION
from training.decoder.pretrain import PretrainConfig, StepDone

N_GROUPS = 4  # distinct formulas of the synthetic corpus


def write_synthetic_corpus(path: Path, n_records: int = 96, n_shards: int = 2, seed: int = 0) -> Path:
    """A corpus directory in training.data.corpus's format whose token sequences follow from the formula.

    Record i has formula group g = i % 4; its tokens are a run of consecutive ids starting at a
    group-dependent id, of length 3 + i % 5, so a conditioned model can learn them quickly.
    """
    rng = np.random.default_rng(seed)
    vocab = [*SPECIAL_TOKENS, *(f"T{i}" for i in range(28))]
    tok = SafeTokenizer(vocab)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(path / "tokenizer.json")
    letters = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", np.uint8)
    per_shard = np.array_split(np.arange(n_records), n_shards)
    shards = []
    for s, ids in enumerate(per_shard):
        seqs, bits, formulas = [], [], []
        for i in ids:
            g = i % N_GROUPS
            body = [4 + (3 * g + j) % (len(vocab) - 4) for j in range(3 + i % 5)]
            seqs.append([tok.bos_id, *body, tok.eos_id])
            bits.append(np.unique(rng.integers(0, 4096, 5 + i % 7)).astype(np.uint16))
            f = np.zeros(len(ELEMENTS), np.uint16)
            f[0], f[1], f[3] = 6 + g, 12, g % 2  # C, H, O
            formulas.append(f)
        d = path / f"shard_{s:05d}"
        d.mkdir()
        np.save(d / "tokens.npy", np.concatenate(seqs).astype(np.uint16))
        np.save(d / "tok_offsets.npy", np.r_[0, np.cumsum([len(x) for x in seqs])].astype(np.int64))
        np.save(d / "bits.npy", np.concatenate(bits))
        np.save(d / "bit_offsets.npy", np.r_[0, np.cumsum([len(b) for b in bits])].astype(np.int64))
        np.save(d / "formula.npy", np.stack(formulas))
        keys = rng.choice(letters, size=(len(ids), 14))
        (d / "inchikey14.txt").write_bytes(b"".join(k.tobytes() + b"\n" for k in keys))
        shards.append({"name": d.name, "n": len(ids), "n_tokens": sum(map(len, seqs)), "n_bits": sum(map(len, bits))})
    manifest = {
        "format": FORMAT, "version": FORMAT_VERSION, "n_records": n_records,
        "n_tokens": sum(s["n_tokens"] for s in shards), "max_tokens": 16, "n_bits": 4096, "radius": 2,
        "elements": list(ELEMENTS),
        "tokenizer": {"file": "tokenizer.json", "fingerprint": tok.fingerprint(), "vocab_size": tok.vocab_size},
        "shards": shards,
    }  # fmt: skip
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus") / "c")


def tiny_config(corpus: Path, out: Path, **overrides) -> PretrainConfig:
    settings = dict(
        corpus=str(corpus), out=str(out), preset="tiny", batch_size=8, grad_accum=2, max_steps=6, lr=3e-3,
        min_lr=3e-4, warmup_steps=2, precision="fp32", device="cpu", val_fraction=0.1, eval_every=3,
        checkpoint_every=0, checkpoint_minutes=0, log_every=1, threads=1,
    )  # fmt: skip
    return PretrainConfig(**{**settings, **overrides})


def losses(events) -> list[float]:
    return [e.loss for e in events if isinstance(e, StepDone)]
