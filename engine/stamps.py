"""Files indexed once into the data folder and reused while unchanged: the SHA-256 of a file's bytes, and the
stamp kept per source path (size, modification time and SHA-256 when last opened) that makes reopening an
unchanged file cost one ``stat``. Shared by the structure libraries (:mod:`engine.library.cache`) and the
spectral libraries (:mod:`engine.spectral_library.cache`). Imports only :mod:`engine.progress`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Generator
from pathlib import Path

from engine.progress import CancelFn, check_cancel

log = logging.getLogger(__name__)


def sha256_chunks(path: str | os.PathLike, cancel: CancelFn | None = None,
                  chunk: int = 1 << 22) -> Generator[int, None, str]:
    """SHA-256 (hex) of a file's bytes, as a generator that yields the bytes read so far every ``chunk`` (and
    checks ``cancel`` there). An unreadable file raises :class:`OSError`: the caller names it in its own error."""
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            check_cancel(cancel)
            h.update(block)
            done += len(block)
            yield done
    return h.hexdigest()


def stamp_path(folder: Path, source: Path) -> Path:
    digest = hashlib.sha256(str(source).encode("utf-8", errors="surrogateescape")).hexdigest()[:24]
    return folder / "stamps" / f"{digest}.json"


def read_stamp(folder: Path, source: Path) -> dict:
    """The stamp kept for ``source`` in ``folder`` (``{}`` without one)."""
    try:
        stamp = json.loads(stamp_path(folder, source).read_text(encoding="utf-8"))
        return stamp if isinstance(stamp, dict) and stamp.get("path") == str(source) else {}
    except (OSError, ValueError):
        return {}


def write_stamp(folder: Path, source: Path, stat: os.stat_result, sha256: str) -> None:
    """Keep ``source``'s size, modification time and SHA-256 (atomically; a failure only costs a hash next time)."""
    path = stamp_path(folder, source)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"path": str(source), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                                   "sha256": sha256}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:  # only a shortcut for next time: the file is hashed again then
        log.warning("cannot write %s (%s)", path, e)
    finally:
        tmp.unlink(missing_ok=True)


def unchanged(stamp: dict, stat: os.stat_result) -> bool:
    """The stamp's size and modification time are those of ``stat``."""
    return stamp.get("size") == stat.st_size and stamp.get("mtime_ns") == stat.st_mtime_ns


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns


def still_stamped(folder: Path, sha256: str) -> bool:
    """Some stamp in ``folder`` still points to an index of these bytes (so it must be kept)."""
    for stamp_file in (folder / "stamps").glob("*.json"):
        try:
            if json.loads(stamp_file.read_text(encoding="utf-8")).get("sha256") == sha256:
                return True
        except (OSError, ValueError, AttributeError):
            continue
    return False
