"""The structures a model was trained on (or any set of known structures), as a bundle stores them.

Structures are compared by the first block of their InChIKey (the 2D skeleton; stereochemistry
and charge layers ignored), as candidates are grouped. A set of known structures is stored as the
sorted, distinct 64-bit hashes of those blocks (:func:`key_hashes`: BLAKE2b with an 8-byte digest of
the 14 ASCII letters, read little-endian): 8 bytes a structure, looked up by binary search. Two
different blocks share a hash with probability 2⁻⁶⁴, so among a million known structures a new
candidate is mistaken for a known one about once in 10¹³ look-ups.

``known_structures.npz`` (a bundle's optional file, built by ``python -m training.bundle.known_structures``;
:data:`FORMAT` version :data:`FORMAT_VERSION`, plain arrays, no pickles)::

    format          str    "msgpt-known-structures"
    format_version  int64  1
    hashes          uint64 (n,) sorted, distinct
    info            str    JSON: {"source": what the structures are, "n": n, "hash": the rule above}

The novelty marks built on it (and users' own lists) live in :mod:`engine.insight.novelty`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import BundleError, ConfigError

FORMAT = "msgpt-known-structures"
FORMAT_VERSION = 1
FILE_NAME = "known_structures.npz"
HASH_RULE = "blake2b(digest_size=8) of the ASCII InChIKey first block, little-endian uint64"


def key_hashes(keys: Iterable[str]) -> np.ndarray:
    """64-bit hashes (``uint64``) of InChIKey first blocks, in the order given (see the module docstring)."""
    out = [int.from_bytes(hashlib.blake2b(k[:14].encode("ascii"), digest_size=8).digest(), "little") for k in keys]
    return np.array(out, dtype=np.uint64)


@dataclass(frozen=True)
class KnownStructures:
    """A set of structures (InChIKey first blocks, stored as 64-bit hashes), with what it is."""

    hashes: np.ndarray = field(metadata={"help": "sorted distinct uint64 hashes (key_hashes)"})
    source: str = field(default="", metadata={"help": "what the structures are, for exports and the app"})

    def __post_init__(self):
        h = np.asarray(self.hashes)
        if h.ndim != 1 or h.dtype != np.uint64:
            raise ConfigError(f"`hashes` must be a 1-D uint64 array, got {h.dtype} of shape {h.shape}.")
        if h.size > 1 and not np.all(h[1:] > h[:-1]):
            raise ConfigError("`hashes` must be sorted and distinct; build the set with KnownStructures.from_keys.")
        object.__setattr__(self, "hashes", h)

    @classmethod
    def from_keys(cls, keys: Iterable[str], source: str = "") -> KnownStructures:
        """The set of these InChIKey first blocks (full InChIKeys are cut to their first block)."""
        return cls(np.unique(key_hashes(keys)), source)

    def __len__(self) -> int:
        return int(self.hashes.size)

    def contains(self, keys: Sequence[str | None]) -> np.ndarray:
        """For each InChIKey first block: is it in the set? (``None`` or empty: False)."""
        valid = [bool(k) for k in keys]
        found = np.zeros(len(keys), dtype=bool)
        if not any(valid) or not len(self):
            return found
        h = key_hashes([k for k in keys if k])
        pos = np.minimum(np.searchsorted(self.hashes, h), len(self) - 1)
        found[np.flatnonzero(valid)] = self.hashes[pos] == h
        return found

    def __contains__(self, key: str) -> bool:
        return bool(self.contains([key])[0])

    def save(self, path: str | os.PathLike) -> Path:
        """Write the ``.npz`` (see the module docstring) atomically."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        info = json.dumps({"source": self.source, "n": len(self), "hash": HASH_RULE})
        with open(tmp, "wb") as fh:
            np.savez(fh, format=np.array(FORMAT), format_version=np.array(FORMAT_VERSION, dtype=np.int64),
                     hashes=self.hashes, info=np.array(info))
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> KnownStructures:
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                fmt, version = str(z["format"]), int(z["format_version"])
                if fmt != FORMAT:
                    raise BundleError(f"{path} is not a set of known structures (format {fmt!r}, expected {FORMAT!r}).")
                if version > FORMAT_VERSION:
                    raise BundleError(f"{path} has format_version {version}, newer than this msgpt reads "
                                      f"({FORMAT_VERSION}); upgrade msgpt.")
                info = json.loads(str(z["info"]))
                return cls(np.asarray(z["hashes"]), str(info.get("source", "")))
        except BundleError:
            raise
        except (OSError, KeyError, ValueError, TypeError, json.JSONDecodeError) as e:
            raise BundleError(f"Cannot read the known structures {path} ({type(e).__name__}: {e}); copy the bundle "
                              "again or rebuild the file with python -m training.bundle.known_structures.") from e
