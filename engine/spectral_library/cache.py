"""Spectral library indexes kept in the user's data folder: indexed once, opened in a moment afterwards.

The index of a library file (:mod:`engine.spectral_library.index`) is kept as
``<data>/spectral_libraries/<sha256>.npz`` and ``<sha256>.json``, named by the SHA-256 of the file's bytes, so
the same file at two places shares one index and an edited file gets a new one. A stamp per source path
(``<data>/spectral_libraries/stamps/<hash of the path>.json``: size, modification time and SHA-256 when last
opened) makes reopening an unchanged file cost one ``stat``: the file is hashed again only when its size or
time changed, and indexed again only when its hash did (a file touched but not changed is reused). ``<data>``
is :func:`engine.paths.data_dir` (``MSGPT_HOME`` overrides it), the same conventions as the structure
libraries (``engine.library.cache``).

Opening is a generator of :class:`~engine.spectral_library.index.SpectralLibraryProgress` events that returns
the library (:func:`open_spectral_library`; :func:`load_spectral_library` for callers that show no progress).
The index is written atomically after the whole file was read; cancelling leaves nothing behind. An index that
cannot be written (a read-only data folder) does not lose the library: it is returned all the same.

The bundled library (``resources/spectral_library/massbank_open.mgf.gz``, see its ``ATTRIBUTION.md``) is
opened the same way by :func:`open_bundled_spectral_library`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator, Sequence
from pathlib import Path

from engine import paths
from engine.progress import CancelFn, run_to_end
from engine.stamps import read_stamp, same_file, sha256_chunks, still_stamped, unchanged, write_stamp

from .index import (
    IndexMismatch,
    SpectralLibrary,
    SpectralLibraryProgress,
    build_library,
)
from .read import SpectralLibraryError

log = logging.getLogger(__name__)

FOLDER = "spectral_libraries"
BUNDLED_FOLDER = "spectral_library"
BUNDLED_FILE = "massbank_open.mgf.gz"
BUNDLED_NAME = "MS-GPT bundled spectra (MassBank)"


def spectral_cache_dir() -> Path:
    """Where spectral library indexes are kept: ``<data>/spectral_libraries``."""
    return paths.data_dir() / FOLDER


def bundled_spectral_library_path() -> Path:
    """The reference spectra shipped with the app (``resources/spectral_library/massbank_open.mgf.gz``)."""
    return paths.resources_dir() / BUNDLED_FOLDER / BUNDLED_FILE


def index_paths(sha256: str, folder: Path | None = None) -> tuple[Path, Path]:
    """The (arrays, metadata) files of the index of a library file whose bytes have this SHA-256."""
    folder = folder or spectral_cache_dir()
    return folder / f"{sha256}.npz", folder / f"{sha256}.json"


def hash_file(path: Path, cancel: CancelFn | None = None, chunk: int = 1 << 22) -> Generator[int, None, str]:
    """SHA-256 (hex) of a file's bytes, as a generator of the bytes read so far (checking ``cancel``)."""
    try:
        return (yield from sha256_chunks(path, cancel, chunk))
    except OSError as e:
        raise SpectralLibraryError(path, f"cannot be read ({e.strerror or e}); check that it exists and may be "
                                         "read.") from e


def _forget_index(folder: Path, sha256: str) -> None:
    """Delete an index no stamp points to any more (its source was edited)."""
    if not still_stamped(folder, sha256):
        for path in index_paths(sha256, folder):
            path.unlink(missing_ok=True)


def _checksum(source: Path, stat: os.stat_result, stamp: dict, label: str, cancel: CancelFn | None,
              ) -> Generator[SpectralLibraryProgress, None, str]:
    if unchanged(stamp, stat) and stamp.get("sha256"):
        return str(stamp["sha256"])
    hashing = hash_file(source, cancel)
    while True:
        try:
            done = next(hashing)
        except StopIteration as stop:
            return stop.value
        yield SpectralLibraryProgress(done, stat.st_size, f"Checking {label}")


def open_spectral_library(path: str | os.PathLike, name: str | None = None, *, cancel: CancelFn | None = None,
                          folder: str | os.PathLike | None = None,
                          ) -> Generator[SpectralLibraryProgress, None, SpectralLibrary]:
    """The spectral library of an MSP or MGF file, from its kept index when the file is unchanged, else indexed
    now and kept (see the module docstring). ``name`` is what the app shows (default: the file's name);
    ``folder`` replaces :func:`spectral_cache_dir`. Raises
    :class:`~engine.spectral_library.read.SpectralLibraryError` when the file cannot be used and
    :class:`~engine.errors.Cancelled` when cancelled."""
    source = Path(path).expanduser().resolve()
    folder = Path(folder) if folder is not None else spectral_cache_dir()
    label = name or source.name
    try:
        stat = source.stat()
    except OSError as e:
        raise SpectralLibraryError(source, f"cannot be opened ({e.strerror or e}); check the path.") from e
    if not source.is_file():
        raise SpectralLibraryError(source, "is not a file; choose an MSP or MGF file.")
    stamp = read_stamp(folder, source)
    sha256 = yield from _checksum(source, stat, stamp, label, cancel)
    npz, meta = index_paths(sha256, folder)
    if npz.is_file() and meta.is_file():
        try:
            library = SpectralLibrary.load(npz, meta)
        except IndexMismatch as e:
            log.warning("%s; indexing %s again", e, source)
        else:
            if library.checksum == sha256:
                if stamp.get("sha256") != sha256 or not unchanged(stamp, stat):
                    write_stamp(folder, source, stat, sha256)
                library.name = label
                return library
    library = yield from build_library(source, label, sha256, cancel)
    yield from _keep(library, source, stat, folder, stamp)
    return library


def _keep(library: SpectralLibrary, source: Path, stat: os.stat_result, folder: Path,
          stamp: dict) -> Generator[SpectralLibraryProgress, None, None]:
    """Write a freshly built index and its stamp, unless the source changed while it was read."""
    try:
        changed = not same_file(stat, source.stat())
    except OSError:
        changed = True
    if changed:
        log.warning("%s changed while it was indexed; its index is not kept", source)
        return
    yield SpectralLibraryProgress(stat.st_size, stat.st_size, f"Saving the index of {library.name}")
    npz, meta = index_paths(library.checksum, folder)
    try:
        library.save(npz, meta)
    except OSError as e:
        library.info["cache_error"] = f"cannot write {npz} ({e.strerror or e})"
        log.warning("%s; the library is indexed again next time", library.info["cache_error"])
        return
    write_stamp(folder, source, stat, library.checksum)
    old = stamp.get("sha256")
    if old and old != library.checksum:
        _forget_index(folder, str(old))


def load_spectral_library(path: str | os.PathLike, name: str | None = None, **kwargs) -> SpectralLibrary:
    """:func:`open_spectral_library` for callers that show no progress."""
    return run_to_end(open_spectral_library(path, name, **kwargs))


def open_bundled_spectral_library(cancel: CancelFn | None = None, folder: str | os.PathLike | None = None,
                                  ) -> Generator[SpectralLibraryProgress, None, SpectralLibrary]:
    """The reference spectra shipped with the app (indexed into the data folder on first use)."""
    path = bundled_spectral_library_path()
    if not path.is_file():
        raise SpectralLibraryError(path, "the bundled spectral library is missing; reinstall MS-GPT Desktop.")
    return (yield from open_spectral_library(path, BUNDLED_NAME, cancel=cancel, folder=folder))


def load_bundled_spectral_library(**kwargs) -> SpectralLibrary:
    """:func:`open_bundled_spectral_library` for callers that show no progress."""
    return run_to_end(open_bundled_spectral_library(**kwargs))


def open_spectral_libraries(sources: Sequence[str | os.PathLike], cancel: CancelFn | None = None,
                            folder: str | os.PathLike | None = None,
                            ) -> Generator[SpectralLibraryProgress, None,
                                           tuple[list[SpectralLibrary], list[SpectralLibraryError]]]:
    """Open several library files; one that fails is reported (in the second list), not fatal to the others.
    Cancelling still stops them all."""
    libraries: list[SpectralLibrary] = []
    failures: list[SpectralLibraryError] = []
    for source in sources:
        try:
            libraries.append((yield from open_spectral_library(source, cancel=cancel, folder=folder)))
        except SpectralLibraryError as e:
            failures.append(e)
    return libraries, failures
