"""Molecule corpus for conditional pretraining: SMILES in, memory-mappable token / fingerprint / formula shards out.

Run ``python -m training.data.corpus prepare --out DIR molecules.tsv.gz [--mgf spectra.mgf.gz ...]``.

Per molecule (:func:`convert_smiles`, first failing step names the drop reason):
RDKit parse -> only the 14 supported elements -> stereochemistry removed, canonical SMILES ->
InChIKey first block -> exclusion list -> SAFE (``safe.encode(canonical=True, allow_empty=True)``:
molecules without a BRICS-cuttable bond stay one unfragmented block, which is exactly what the
``SAFEFragmentationError`` fallback would give, without encoding twice) -> at most ``max_tokens``
tokens incl. ``<bos>``/``<eos>`` -> SAFE decodes back to the same canonical SMILES -> formula
(14-vector) and active Morgan bits. Records then keep the first occurrence of each InChIKey first
block, in input order.

Inputs are streamed in order: the SMILES files as given, then the structures of the selected MGF
records (fold and license filters; unique SMILES in order of first appearance). The MGF files are
read with :func:`read_mgf_headers`, a line scanner that only looks at ``KEY=value`` header lines,
because peaks are not needed here (several times faster than parsing spectra).

On-disk layout of a corpus directory::

    corpus_config.json          settings of stage 1; a rerun with other settings is refused
    stage1.json                 shard list, written when stage 1 has finished
    shard_00000/                one per chunk of ``chunk_size`` input records, written atomically
        smiles.txt safe.txt formula.txt inchikey14.txt    one record per line
        bits.npy (uint16, concatenated sorted active bits)  bit_offsets.npy (int64, n+1)
        formula.npy (uint16, n x 14, engine.chem.formula.ELEMENTS order)
        stats.json                per-chunk input / kept / dropped counts
        DONE                      stage 1 marker (the directory is renamed into place with it)
        tokens.npy (uint16, concatenated ids incl. <bos>/<eos>)  tok_offsets.npy (int64, n+1)
        TOKENS_DONE               stage 2 marker: JSON with the tokenizer fingerprint
    tokenizer.json              engine.model.tokenizer.SafeTokenizer
    manifest.json               shards and counts; written last, what CorpusDataset reads
    report.json                 every drop by reason, inputs, throughput

Chunking depends only on the inputs and ``chunk_size`` (never on ``--workers``), and shards are
deduplicated in input order against the keys of all finished shards, so a rerun skips finished
shards and reproduces identical output. The set of seen InChIKey blocks is held in memory
(roughly 100 bytes per kept record).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import rdkit
import safe

from engine.chem.formula import ELEMENTS
from engine.errors import ConfigError, InputFileError
from engine.model.tokenizer import SafeTokenizer

from training.data.corpus_format import FORMAT, FORMAT_VERSION, MAX_CONTEXT_BITS  # noqa: F401  (re-exported)
from training.data.corpus_convert import ChunkResult, ConvertSettings, DropCounter, _convert_chunk, _init_worker
from training.data.corpus_inputs import (
    DEFAULT_MGF_LICENSES,
    iter_smiles_file,
    read_exclusion_file,
    select_mgf_structures,
)
from training.data.corpus_inputs import open_text, read_mgf_headers  # noqa: F401  (re-exported)
from training.data.corpus_shards import (
    Chunk,
    _executor,
    _offsets,
    _save_npy_atomic,
    dedupe,
    is_done,
    iter_chunks,
    load_seen_keys,
    ordered_map,
    read_lines,
    shard_name,
    write_shard,
)

log = logging.getLogger(__name__)

TOKENS_MARKER = "TOKENS_DONE"


# ----------------------------------------------------------------------------------------------
# Drop bookkeeping


_worker_settings: ConvertSettings | None = None


# ----------------------------------------------------------------------------------------------
# Stage 1


@dataclass(frozen=True)
class PrepareConfig:
    """Everything that determines the content of a corpus directory (``--workers`` does not)."""

    inputs: tuple[str, ...] = ()
    mgf: tuple[str, ...] = ()
    mgf_folds: tuple[str, ...] = ("train",)
    mgf_licenses: tuple[str, ...] = DEFAULT_MGF_LICENSES
    exclude: tuple[str, ...] = ()
    exclude_mgf: tuple[str, ...] = ()  # besides the --mgf files
    exclude_mgf_folds: tuple[str, ...] = ()
    chunk_size: int = 5000
    max_tokens: int = 256
    n_bits: int = 4096
    radius: int = 2

    def __post_init__(self) -> None:
        if not self.inputs and not self.mgf:
            raise ConfigError("Give at least one SMILES file in `inputs` or an MGF file in `mgf`.")
        if self.chunk_size < 1:
            raise ConfigError(f"`chunk_size` must be >= 1, got {self.chunk_size}.")
        if self.max_tokens < 3:
            raise ConfigError(f"`max_tokens` counts <bos> and <eos> and must be >= 3, got {self.max_tokens}.")
        if not 1 <= self.n_bits <= 65536:
            raise ConfigError(f"`n_bits` must be in [1, 65536] (bits are stored as uint16), got {self.n_bits}.")


def _file_identity(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p, "no such file.")
    return {"path": str(p.resolve()), "bytes": p.stat().st_size}


def _settings_fingerprint(config: PrepareConfig, exclude: set[str]) -> dict:
    d = asdict(config)
    for key in ("inputs", "mgf", "exclude", "exclude_mgf"):
        d[key] = [_file_identity(p) for p in d[key]]
    d["exclude_keys_sha256"] = hashlib.sha256("\n".join(sorted(exclude)).encode()).hexdigest()
    d["versions"] = {"format": FORMAT_VERSION, "rdkit": rdkit.__version__, "safe": safe.__version__}
    return d


def _check_or_write_config(out: Path, settings: dict) -> None:
    path = out / "corpus_config.json"
    settings = json.loads(json.dumps(settings))  # tuples become lists, as in the saved file
    if path.exists():
        old = json.loads(path.read_text())
        diff = sorted(k for k in settings.keys() | old.keys() if settings.get(k) != old.get(k))
        if diff:
            raise ConfigError(
                f"{out} holds a corpus prepared with other settings ({', '.join(diff)} differ); "
                "use a new --out directory or delete this one."
            )
        return
    path.write_text(json.dumps(settings, indent=1) + "\n")


def _stage1_complete(out: Path) -> list[str] | None:
    path = out / "stage1.json"
    if not path.exists():
        return None
    names = json.loads(path.read_text())["shards"]
    return names if all(is_done(out / n) for n in names) else None


def run_stage1(config: PrepareConfig, out: Path, workers: int = 1) -> dict:
    """Convert every input into shards (skipping finished ones); returns the stage-1 summary."""
    out.mkdir(parents=True, exist_ok=True)
    exclude: set[str] = set()
    for path in config.exclude:
        exclude |= read_exclusion_file(path)
    mgf = select_mgf_structures(
        config.mgf, config.mgf_folds, config.mgf_licenses, config.exclude_mgf, config.exclude_mgf_folds
    )
    exclude |= mgf.exclude_keys
    _check_or_write_config(out, _settings_fingerprint(config, exclude))
    names = _stage1_complete(out)
    if names is not None:
        log.info("stage 1: all %d shards already done", len(names))
        return json.loads((out / "stage1.json").read_text())

    for stale in out.glob("shard_*.tmp"):
        shutil.rmtree(stale)
    (out / "stage1.json").unlink(missing_ok=True)
    seen = load_seen_keys(out)
    sources = [(p, iter_smiles_file(p)) for p in config.inputs]
    sources += [(f"{', '.join(config.mgf)} (MGF structures)", mgf.smiles)] if mgf.smiles else []
    names = []

    def todo() -> Iterator[Chunk]:
        for chunk in iter_chunks(sources, config.chunk_size):
            names.append(shard_name(chunk.index))
            if not is_done(out / names[-1]):
                yield chunk

    settings = ConvertSettings(config.max_tokens, config.n_bits, config.radius, frozenset(exclude))
    t0, n_in, n_kept = time.perf_counter(), 0, 0
    executor = _executor(workers, _init_worker, (settings,))
    try:
        for chunk, result in ordered_map(_chunk_task, todo(), executor, window=2 * workers):
            kept = dedupe(result.records, seen, result.drops)
            stats = write_shard(out, chunk, kept, result.drops)
            n_in, n_kept = n_in + stats["n_input"], n_kept + stats["n_kept"]
            rate = n_in / max(time.perf_counter() - t0, 1e-9)
            log.info(
                "%s: %d in, %d kept | this run: %d in, %d kept, %.0f molecules/s",
                shard_name(chunk.index), stats["n_input"], stats["n_kept"], n_in, n_kept, rate,
            )
    finally:
        if executor is not None:
            executor.shutdown(cancel_futures=True)
    seconds = time.perf_counter() - t0
    summary = {
        "shards": names,
        "mgf": mgf.stats,
        "n_exclusion_keys": len(exclude),
        "last_run": {
            "molecules": n_in,
            "seconds": round(seconds, 2),
            "molecules_per_s": round(n_in / max(seconds, 1e-9), 1),
        },
    }
    (out / "stage1.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _chunk_task(chunk: Chunk) -> ChunkResult:
    return _convert_chunk(chunk.smiles)


# ----------------------------------------------------------------------------------------------
# Stage 2: tokenizer and token arrays


def iter_safe_strings(out: Path, names: Sequence[str]) -> Iterator[str]:
    for name in names:
        with open(out / name / "safe.txt", encoding="utf-8") as fh:
            yield from (line.rstrip("\n") for line in fh)


def encode_shard(shard: Path, tokenizer_path: Path) -> dict:
    """Write ``tokens.npy``/``tok_offsets.npy`` of one shard (skipped when already done with this tokenizer)."""
    tok = SafeTokenizer.load(tokenizer_path)
    marker = shard / TOKENS_MARKER
    if marker.exists():
        info = json.loads(marker.read_text())
        if info.get("fingerprint") == tok.fingerprint():
            return info
    ids = [tok.encode(s) for s in read_lines(shard / "safe.txt")]
    _save_npy_atomic(shard / "tokens.npy", np.fromiter((t for seq in ids for t in seq), np.uint16))
    _save_npy_atomic(shard / "tok_offsets.npy", _offsets([len(seq) for seq in ids]))
    info = {
        "fingerprint": tok.fingerprint(),
        "n_tokens": sum(map(len, ids)),
        "n_with_unk": sum(tok.unk_id in seq for seq in ids),
    }
    marker.write_text(json.dumps(info) + "\n")
    return info


def build_tokenizer(
    out: str | Path,
    *,
    tokenizer: str | Path | None = None,
    min_freq: int = 1,
    max_vocab: int | None = None,
    workers: int = 1,
) -> SafeTokenizer:
    """Stage 2: build (or copy ``tokenizer``) ``tokenizer.json`` over all shards' SAFE strings, encode every
    shard, then write ``manifest.json``."""
    out = Path(out)
    names = _stage1_complete(out)
    if names is None:
        raise ConfigError(f"{out}: stage 1 has not finished; run `python -m training.data.corpus prepare` first.")
    t0 = time.perf_counter()
    if tokenizer is not None:
        tok = SafeTokenizer.load(tokenizer)
    else:
        tok = SafeTokenizer.build(iter_safe_strings(out, names), min_freq=min_freq, max_size=max_vocab)
    if tok.vocab_size > 65536:
        raise ConfigError(f"vocabulary of {tok.vocab_size} tokens does not fit uint16; set `max_vocab` <= 65536.")
    tmp = tok.save(out / "tokenizer.json.tmp")
    os.replace(tmp, out / "tokenizer.json")
    log.info("tokenizer: %d tokens (%.1f s)", tok.vocab_size, time.perf_counter() - t0)
    executor = _executor(workers)
    try:
        task = _EncodeTask(out, out / "tokenizer.json")
        infos = [info for _, info in ordered_map(task, names, executor, window=2 * workers)]
    finally:
        if executor is not None:
            executor.shutdown()
    _write_manifest(out, names, tok, infos)
    log.info("stage 2 done: %d shards encoded (%.1f s)", len(names), time.perf_counter() - t0)
    return tok


@dataclass(frozen=True)
class _EncodeTask:
    out: Path
    tokenizer_path: Path

    def __call__(self, name: str) -> dict:
        return encode_shard(self.out / name, self.tokenizer_path)


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def _write_manifest(out: Path, names: Sequence[str], tok: SafeTokenizer, infos: Sequence[dict]) -> None:
    config = json.loads((out / "corpus_config.json").read_text())
    shards = []
    for name, info in zip(names, infos):
        stats = json.loads((out / name / "stats.json").read_text())
        n_bits = int(np.load(out / name / "bit_offsets.npy", mmap_mode="r")[-1])
        shards.append({"name": name, "n": stats["n_kept"], "n_tokens": info["n_tokens"], "n_bits": n_bits})
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "n_records": sum(s["n"] for s in shards),
        "n_tokens": sum(s["n_tokens"] for s in shards),
        "max_tokens": config["max_tokens"],
        "n_bits": config["n_bits"],
        "radius": config["radius"],
        "elements": list(ELEMENTS),
        "tokenizer": {"file": "tokenizer.json", "fingerprint": tok.fingerprint(), "vocab_size": tok.vocab_size},
        "shards": shards,
    }
    _write_json_atomic(out / "manifest.json", manifest)


def prepare_corpus(
    config: PrepareConfig,
    out: str | Path,
    *,
    workers: int = 1,
    stage2: bool = True,
    tokenizer: str | Path | None = None,
    min_freq: int = 1,
    max_vocab: int | None = None,
) -> dict:
    """Stage 1 then (unless ``stage2=False``) stage 2; resumable; returns the report (also in ``report.json``)."""
    out = Path(out)
    summary = run_stage1(config, out, workers=workers)
    log.info("stage 1: %s", summary["last_run"])
    if stage2:
        build_tokenizer(out, tokenizer=tokenizer, min_freq=min_freq, max_vocab=max_vocab, workers=workers)
    return write_report(out)


# ----------------------------------------------------------------------------------------------
# Report


def build_report(out: Path) -> dict:
    """Inputs, kept and dropped records by reason, aggregated over the shards of stage 1."""
    stage1 = json.loads((out / "stage1.json").read_text())
    drops = DropCounter()
    by_source: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for name in stage1["shards"]:
        stats = json.loads((out / name / "stats.json").read_text())
        by_source[stats["source"]] += stats["n_input"]
        for key in ("n_input", "n_kept", "n_unfragmented_safe", "n_bits_over_256"):
            totals[key] += stats[key]
        drops.merge(DropCounter.from_json(stats["dropped"]))
    report = {
        "n_input": totals["n_input"],
        "n_kept": totals["n_kept"],
        "n_dropped": sum(drops.counts.values()),
        **drops.to_json(),
        "inputs": dict(by_source),
        "mgf": stage1["mgf"],
        "n_exclusion_keys": stage1["n_exclusion_keys"],
        "n_unfragmented_safe": totals["n_unfragmented_safe"],
        "n_bits_over_256": totals["n_bits_over_256"],
        "last_stage1_run": stage1["last_run"],
    }
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        report["tokenizer"] = manifest["tokenizer"]
        report["n_tokens"] = manifest["n_tokens"]
        report["n_with_unk"] = sum(
            json.loads((out / s["name"] / TOKENS_MARKER).read_text())["n_with_unk"] for s in manifest["shards"]
        )
    return report


def write_report(out: Path) -> dict:
    """:func:`build_report` saved as ``report.json``."""
    report = build_report(out)
    _write_json_atomic(out / "report.json", report)
    return report


def format_report(report: dict) -> str:
    """The drop table as aligned text."""
    rows = [("input records", report["n_input"], "")]
    for reason, n in sorted(report["counts"].items(), key=lambda kv: -kv[1]):
        detail = ", ".join(f"{d}: {k}" for d, k in report["details"].get(reason, {}).items())
        rows.append((f"dropped: {reason}", n, detail))
    rows.append(("kept", report["n_kept"], ""))
    rows.append(("  of which unfragmented SAFE", report["n_unfragmented_safe"], "no BRICS-cuttable bond"))
    rows.append(("  of which > 256 active bits", report["n_bits_over_256"], "model reads the first 256"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name:<{width}}  {n:>10,}  {detail}".rstrip() for name, n, detail in rows)


# ----------------------------------------------------------------------------------------------
# Command line


def _csv_list(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.data.corpus", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="convert SMILES files / MGF structures into corpus shards, then stage 2")
    prep.add_argument("inputs", nargs="*", help="SMILES files (.smi/.tsv/.csv, optionally .gz)")
    prep.add_argument("--out", required=True, type=Path, help="corpus directory (created; resumable)")
    prep.add_argument("--mgf", action="append", default=[], help="MGF file whose selected records' SMILES are added")
    prep.add_argument("--mgf-fold", type=_csv_list, default=("train",), help="FOLD values to take (default: train)")
    prep.add_argument(
        "--mgf-license", type=_csv_list, default=DEFAULT_MGF_LICENSES, help="LICENSE values to take, comma-separated"
    )
    prep.add_argument("--exclude", action="append", default=[], help="file of InChIKey first blocks to exclude")
    prep.add_argument("--exclude-mgf-fold", type=_csv_list, default=(), help="exclude every structure of these folds")
    prep.add_argument("--exclude-mgf", action="append", default=[], help="more MGF files for --exclude-mgf-fold")
    prep.add_argument("--workers", type=int, default=1)
    prep.add_argument("--chunk-size", type=int, default=5000, help="input records per shard (default 5000)")
    prep.add_argument("--max-tokens", type=int, default=256, help="max tokens incl. <bos>/<eos> (default 256)")
    prep.add_argument("--no-tokenizer", action="store_true", help="stop after stage 1")
    tok = sub.add_parser("build-tokenizer", help="stage 2 on a finished stage 1")
    for q in (prep, tok):
        q.add_argument("--tokenizer", type=Path, help="use this tokenizer.json instead of building one")
        q.add_argument("--min-freq", type=int, default=1)
        q.add_argument("--max-vocab", type=int, default=None)
    tok.add_argument("corpus_dir", type=Path)
    tok.add_argument("--workers", type=int, default=1)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    stage2 = {"tokenizer": args.tokenizer, "min_freq": args.min_freq, "max_vocab": args.max_vocab}
    try:
        if args.command == "prepare":
            config = PrepareConfig(
                inputs=tuple(args.inputs),
                mgf=tuple(args.mgf),
                mgf_folds=args.mgf_fold,
                mgf_licenses=args.mgf_license,
                exclude=tuple(args.exclude),
                exclude_mgf=tuple(args.exclude_mgf),
                exclude_mgf_folds=args.exclude_mgf_fold,
                chunk_size=args.chunk_size,
                max_tokens=args.max_tokens,
            )
            report = prepare_corpus(config, args.out, workers=args.workers, stage2=not args.no_tokenizer, **stage2)
        else:
            build_tokenizer(args.corpus_dir, workers=args.workers, **stage2)
            report = write_report(args.corpus_dir)
    except (ConfigError, InputFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
