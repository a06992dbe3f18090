"""The local side of an accelerator run before it leaves: the recipe, the corpus packed as arrays, what travels with
the working tree (and what is parked out of it), the pack and the one command the device runs.
:mod:`training.decoder.accelerator` is the command over both sides."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from engine.errors import ConfigError
from engine.model.bundle import sha256_file

PACK_FORMAT = "msgpt-accelerator-pack"
PACK_VERSION = 1
REPORT = "remote_report.json"
PART_BYTES = 15 * 1024 * 1024  # under the 16 MiB a returned file may have
TRAVEL_LIMIT = 64 * 1024 * 1024
DEFAULT_MODEL = "resources/default_model"
PARKED = "resources"  # the bundled model and libraries: on disk, out of what travels (the remote step needs none)
DEFAULT_PACK = ".carry/accel"
RUN_CHARS = 2000  # the device tool's longest command


@dataclass
class Recipe:
    """What the remote step trains (docs/accelerator.md says why these values)."""

    minutes: float = field(default=8.0, metadata={"help": "wall-clock budget of the whole remote step"})
    batch_size: int = field(default=512, metadata={"help": "records per optimizer step"})
    lr: float = field(default=6e-4, metadata={"help": "peak learning rate"})
    min_lr: float = field(default=6e-5, metadata={"help": "floor of the cosine decay"})
    warmup_steps: int = field(default=300, metadata={"help": "linear warm-up steps"})
    noise_fraction: float = field(default=0.5, metadata={"help": "share of records conditioned on a simulated query"})
    oversample: int = field(default=2, metadata={"help": "extra copies of the balanced part (metabolites, natural "
                                                         "products, MS/MS standards) in the corpus"})
    seed: int = field(default=5, metadata={"help": "seed of the data order, noise draws and dropout"})
    prefetch: int = field(default=4, metadata={"help": "steps prepared ahead by a thread"})
    forward_tokens: int = field(default=65536, metadata={"help": "padded positions per forward pass (length-sorted "
                                                          "pieces; on an H200 65,536 trained 3,800 records/s, 8,192 "
                                                          "2,140: fewer, larger passes win despite 57%% padding)"})
    eval_every: int = field(default=1000, metadata={"help": "validate every N steps (and at the end)"})
    reserve_s: float = field(default=60.0, metadata={"help": "seconds of the budget kept for start-up, the last "
                                                     "validation and the export (a safety stop comes at a quarter of it)"})

    @classmethod
    def from_dict(cls, d: dict) -> Recipe:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mib(n: int) -> float:
    return n / (1024 * 1024)


class Log:
    """Lines to stdout and to a file (the remote log that comes back)."""

    def __init__(self, path: Path | None):
        self.fh = open(path, "a", encoding="utf-8") if path else None

    def __call__(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        print(line, flush=True)
        if self.fh:
            self.fh.write(line + "\n")
            self.fh.flush()


def corpus_arrays(corpus_dir: str | Path) -> dict[str, np.ndarray]:
    """Every record of a prepared corpus as flat arrays: what pretraining reads, nothing else."""
    from training.data.dataset import CorpusDataset

    ds = CorpusDataset(corpus_dir)
    tokens, tok_len = [], []
    for shard in ds._shards:
        tokens.append(np.asarray(shard.tokens, np.uint16))
        tok_len.append(np.diff(np.asarray(shard.tok_offsets)))
    tok_len = np.concatenate(tok_len)
    bits, bit_offsets, formula = ds.fingerprint_arrays()
    bit_len = np.diff(bit_offsets)
    if tok_len.max(initial=0) > np.iinfo(np.uint16).max or bit_len.max(initial=0) > np.iinfo(np.uint16).max:
        raise ConfigError(f"{corpus_dir}: a record is longer than 65535 tokens or bits; not a corpus of molecules.")
    return {
        "tokens": np.concatenate(tokens),
        "tok_len": tok_len.astype(np.uint16),
        "bits": bits.astype(np.uint16),
        "bit_len": bit_len.astype(np.uint16),
        "formula": formula.astype(np.uint16),
        "keys": ds.inchikey_blocks(),
    }


def balanced_rows(keys: np.ndarray, molecules: str | Path, sources: list[str]) -> np.ndarray:
    """Rows whose structure a molecules TSV lists under one of ``sources``, or that the TSV does not hold
    at all (the MGF's own training structures, which a corpus adds after the TSV: MS/MS standards)."""
    import gzip

    wanted, listed = set(), set()
    opener = gzip.open if str(molecules).endswith(".gz") else open
    with opener(molecules, "rt", encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n").split("\t")
        try:
            k_col, s_col = header.index("inchikey14"), header.index("source")
        except ValueError as e:
            raise ConfigError(f"{molecules}: needs the columns inchikey14 and source (found {header}).") from e
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            listed.add(parts[k_col])
            if set(parts[s_col].split(";")) & set(sources):
                wanted.add(parts[k_col])
    as_text = [bytes(k).decode("ascii") for k in keys]
    return np.array([i for i, k in enumerate(as_text) if k in wanted or k not in listed], dtype=np.int64)


def write_corpus_pack(arrays: dict[str, np.ndarray], oversample_rows: np.ndarray, path: Path, preset: int = 6) -> Path:
    buf = io.BytesIO()
    np.savez(buf, oversample_rows=oversample_rows.astype(np.int32), **arrays)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(lzma.compress(buf.getvalue(), preset=preset))
    tmp.replace(path)
    return path


def materialize_corpus(pack_dir: Path, dest: Path, oversample: int) -> dict:
    """Write the packed corpus as a one-shard corpus directory (:mod:`training.data.dataset`'s format), the
    ``oversample_rows`` repeated ``oversample`` more times. Returns its manifest."""
    from engine.chem.formula import ELEMENTS
    from engine.model.tokenizer import SafeTokenizer
    from training.data.corpus_format import FORMAT, FORMAT_VERSION

    with np.load(io.BytesIO(lzma.decompress((pack_dir / "corpus.npz.xz").read_bytes())), allow_pickle=False) as z:
        a = {k: z[k] for k in z.files}
    n = len(a["tok_len"])
    rows = np.concatenate([np.arange(n), *([a["oversample_rows"].astype(np.int64)] * oversample)])
    tok_off = np.concatenate([[0], np.cumsum(a["tok_len"], dtype=np.int64)])
    bit_off = np.concatenate([[0], np.cumsum(a["bit_len"], dtype=np.int64)])

    def gather(values, offsets, lengths):
        starts = offsets[rows]
        lens = lengths[rows].astype(np.int64)
        idx = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
        return values[idx], np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)

    tokens, tok_offsets = gather(a["tokens"], tok_off, a["tok_len"])
    bits, bit_offsets = gather(a["bits"], bit_off, a["bit_len"])
    shard = dest / "shard_00000"
    if dest.exists():
        shutil.rmtree(dest)
    shard.mkdir(parents=True)
    np.save(shard / "tokens.npy", tokens.astype(np.uint16))
    np.save(shard / "tok_offsets.npy", tok_offsets)
    np.save(shard / "bits.npy", bits.astype(np.uint16))
    np.save(shard / "bit_offsets.npy", bit_offsets)
    np.save(shard / "formula.npy", a["formula"][rows])
    keys = np.concatenate([a["keys"][rows], np.full((len(rows), 1), ord("\n"), np.uint8)], axis=1)
    (shard / "inchikey14.txt").write_bytes(keys.tobytes())
    shutil.copy(pack_dir / "tokenizer.json", dest / "tokenizer.json")
    tok = SafeTokenizer.load(dest / "tokenizer.json")
    pack = json.loads((pack_dir / "pack.json").read_text())
    manifest = {
        "format": FORMAT, "version": FORMAT_VERSION, "n_records": int(len(rows)), "n_tokens": int(len(tokens)),
        "max_tokens": pack["corpus"]["max_tokens"], "n_bits": pack["corpus"]["n_bits"],
        "radius": pack["corpus"]["radius"], "elements": list(ELEMENTS),
        "tokenizer": {"file": "tokenizer.json", "fingerprint": tok.fingerprint(), "vocab_size": tok.vocab_size},
        "shards": [{"name": shard.name, "n": int(len(rows)), "n_tokens": int(len(tokens)), "n_bits": int(len(bits))}],
        "packed_from": {"corpus": pack["corpus"]["source"], "distinct_records": int(n),
                        "oversampled_rows": int(len(a["oversample_rows"])), "oversample": oversample},
    }  # fmt: skip
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode:
        raise ConfigError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()}")
    return done.stdout


def travelling_files(repo: Path, without: str | None = PARKED) -> list[Path]:
    """The files the device tool copies: tracked ones and untracked ones git does not ignore (optionally
    leaving out a folder about to be parked)."""
    names = _git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    prefix = (without.rstrip("/") + "/") if without else None
    out = []
    for name in dict.fromkeys(n for n in names if n):
        if prefix and name.startswith(prefix):
            continue
        path = repo / name
        if path.is_file():
            out.append(path)
    return out


def travel_bytes(repo: Path, carried: list[Path], without: str | None = PARKED) -> int:
    tree = sum(p.stat().st_size for p in travelling_files(repo, without))
    extra = sum(f.stat().st_size for c in carried for f in ([c] if c.is_file() else c.rglob("*")) if f.is_file())
    return tree + extra


class _Exclude:
    """The repository's ``.git/info/exclude`` lines (what git ignores beside .gitignore)."""

    def __init__(self, repo: Path):
        p = Path(_git(repo, "rev-parse", "--git-path", "info/exclude").strip())
        self.path = p if p.is_absolute() else repo / p
        self.lines = self.path.read_text().splitlines() if self.path.is_file() else []

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(x + "\n" for x in self.lines))


def _folder_line(folder: str) -> str:
    return "/" + folder.strip("/") + "/"


def ensure_ignored(repo: Path, folder: str) -> None:
    """Have git ignore ``folder`` (a carried folder must be ignored, or it would travel twice)."""
    if subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", folder + "/"]).returncode == 0:
        return
    exclude = _Exclude(repo)
    exclude.lines.append(_folder_line(folder))
    exclude.write()


def park(repo: Path, folder: str = PARKED) -> bool:
    """Take ``folder`` out of what travels: out of git's index (files stay on disk) and ignored. Returns
    False when it was parked already."""
    exclude = _Exclude(repo)
    if _folder_line(folder) in exclude.lines:
        return False
    _git(repo, "rm", "-r", "-q", "--cached", "--", folder)
    exclude.lines.append(_folder_line(folder))
    exclude.write()
    return True


def unpark(repo: Path, folder: str = PARKED) -> bool:
    """Undo :func:`park`: the folder back in the index as committed, no longer ignored."""
    exclude = _Exclude(repo)
    if _folder_line(folder) not in exclude.lines:
        return False
    exclude.lines.remove(_folder_line(folder))
    exclude.write()
    _git(repo, "reset", "-q", "--", folder)
    return True


def pack(corpus: str | Path, init: str | Path, noise: str | Path, out: str | Path, *, recipe: Recipe,
         molecules: str | Path | None = None, sources: list[str] | None = None, repo: Path | None = None,
         park_model: bool = True, preset: int = 6) -> dict:
    """Write the carried folder; returns pack.json's content plus ``travels`` (bytes) and ``command``."""
    import torch
    from safetensors.torch import save_file

    from engine.model.tokenizer import SafeTokenizer
    from training.core.checkpoint import load_decoder, module_weights
    from training.data.dataset import _read_manifest
    from training.encoder.noise import FingerprintNoise

    out, corpus, init = Path(out), Path(corpus), Path(init)
    repo = (repo or Path.cwd()).resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "decoder").mkdir(parents=True)
    manifest = _read_manifest(corpus)
    decoder, tokenizer = load_decoder(init)
    corpus_tok = SafeTokenizer.load(corpus / manifest["tokenizer"]["file"])
    if corpus_tok.fingerprint() != tokenizer.fingerprint():
        raise ConfigError(f"{corpus} was tokenized with another tokenizer than the decoder of {init}; prepare it "
                          f"with --tokenizer {init}/tokenizer.json.")
    noise_model = FingerprintNoise.load(noise)
    if noise_model.n_bits != decoder.config.fp_bits:
        raise ConfigError(f"{noise} has {noise_model.n_bits} bits; the decoder reads {decoder.config.fp_bits}.")

    arrays = corpus_arrays(corpus)
    rows = (balanced_rows(arrays["keys"], molecules, sources or []) if molecules
            else np.zeros(0, np.int64))  # fmt: skip
    write_corpus_pack(arrays, rows, out / "corpus.npz.xz", preset=preset)
    tokenizer.save(out / "tokenizer.json")
    # the decoder to continue from, as bf16 weights (what the bundle stores) + its config
    save_file(module_weights(decoder, torch.bfloat16), str(out / "decoder" / "decoder.safetensors"))
    (out / "decoder" / "decoder_config.json").write_text(json.dumps(decoder.config.to_dict(), indent=1) + "\n")
    tokenizer.save(out / "decoder" / "tokenizer.json")
    shutil.copy(noise, out / "noise.npz")

    init_config = json.loads((init / "config.json").read_text()) if (init / "config.json").is_file() else {}
    info = {
        "format": PACK_FORMAT, "version": PACK_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "recipe": asdict(recipe),
        "corpus": {"source": str(corpus), "n_records": int(len(arrays["tok_len"])), "n_tokens": int(len(arrays["tokens"])),
                   "oversample_rows": int(len(rows)), "oversample_sources": sources or [],
                   "molecules": str(molecules) if molecules else None,
                   **{k: manifest[k] for k in ("max_tokens", "n_bits", "radius")}},
        "init": {"path": str(init), "name": init_config.get("name") or init.name},
        "noise": {"path": str(noise), "meta": noise_model.meta},
        "files": {},
    }  # fmt: skip
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        info["files"][f.relative_to(out).as_posix()] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
    (out / "pack.json").write_text(json.dumps(info, indent=1) + "\n")

    carry_root = _carry_root(repo, out)
    if carry_root:
        ensure_ignored(repo, carry_root)
    where = out.resolve().relative_to(repo).as_posix() if carry_root else str(out.resolve())
    info["command"] = remote_command(where)
    info["carry"] = carry_root
    info["travels"] = travel_bytes(repo, [repo / carry_root] if carry_root else [out],
                                   without=PARKED if park_model else None)
    if park_model:
        info["parked"] = park(repo) or "already parked"
    return info


def _carry_root(repo: Path, out: Path) -> str | None:
    try:
        rel = out.resolve().relative_to(repo)
    except ValueError:
        return None
    return rel.parts[0]


def remote_command(pack_rel: str) -> str:
    cmd = (f"set -o pipefail; PYTHONUNBUFFERED=1 python3 -m training.decoder.accelerator remote --pack {pack_rel} "
           "--out $OUT")
    if len(cmd) > RUN_CHARS:
        raise ConfigError(f"the remote command is {len(cmd)} characters; the device tool takes {RUN_CHARS}.")
    return cmd
