"""The corpus format's identifiers, apart from :mod:`training.data.corpus` (which needs RDKit and safe-mol to
build a corpus): reading a prepared corpus (:mod:`training.data.dataset`, pretraining) needs neither, so
pretraining runs on a machine that has only torch and numpy (docs/accelerator.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from engine.errors import ConfigError

FORMAT = "msgpt-corpus"
FORMAT_VERSION = 1
MAX_CONTEXT_BITS = 256  # the decoder's fingerprint encoder reads at most this many active bits


def corpus_lines(corpus_dir: str | Path, file_name: str) -> Iterator[str]:
    """The non-empty lines (stripped) of one per-record text file of every shard of a finished prepared
    corpus (``smiles.txt``, ``inchikey14.txt``), shard by shard in manifest order."""
    corpus_dir = Path(corpus_dir)
    manifest = corpus_dir / "manifest.json"
    if not manifest.is_file():
        raise ConfigError(f"{corpus_dir} is not a finished prepared corpus: manifest.json is missing "
                          "(wait for python -m training.data.corpus prepare to finish).")
    for shard in json.loads(manifest.read_text())["shards"]:
        with open(corpus_dir / shard["name"] / file_name, encoding="utf-8") as fh:
            yield from (line.strip() for line in fh if line.strip())
