"""Structure libraries kept in the user's data folder: indexed once, opened in a moment afterwards.

The index of a library file (:mod:`engine.library.index`) is kept as ``<data>/libraries/<sha256>.npz``, named
by the SHA-256 of the file's bytes (``<sha256>-k.npz`` when built with ``trust_keys``), so the same file at two
places shares one index and an edited file gets a new one. A stamp per source path
(``<data>/libraries/stamps/<hash of the path>.json``: size, modification time and SHA-256 when last opened)
makes reopening an unchanged file cost one ``stat``: the file is hashed again only when its size or time
changed, and rebuilt only when its hash did (a file touched but not changed is reused). ``<data>`` is
:func:`engine.paths.data_dir` (``MSGPT_HOME`` overrides it).

Opening is a generator of :class:`~engine.library.build.LibraryProgress` events that returns the library
(:func:`open_library`; :func:`load_library` for callers that show no progress). Building writes the index
atomically; cancelling leaves nothing behind. An index that cannot be written (a read-only data folder) does
not lose the library: it is returned all the same and built again next time.

The bundled library (``resources/structure_library/structures.tsv.gz``, see its ``ATTRIBUTION.md``) is
opened the same way by :func:`open_bundled_library`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator, Sequence
from pathlib import Path

from engine import paths
from engine.progress import CancelFn, run_to_end
from engine.stamps import read_stamp, same_file, still_stamped, unchanged, write_stamp

from .build import LibraryProgress, build_library
from .index import StructureLibrary
from .read import LibraryError, hash_file

log = logging.getLogger(__name__)

FOLDER = "libraries"
BUNDLED_FOLDER = "structure_library"
BUNDLED_FILE = "structures.tsv.gz"
BUNDLED_NAME = "MS-GPT bundled structures"


def library_cache_dir() -> Path:
    """Where library indexes are kept: ``<data>/libraries``."""
    return paths.data_dir() / FOLDER


def bundled_library_path() -> Path:
    """The structure table shipped with the app (``resources/structure_library/structures.tsv.gz``)."""
    return paths.resources_dir() / BUNDLED_FOLDER / BUNDLED_FILE


def index_path(sha256: str, trust_keys: bool = False, folder: Path | None = None) -> Path:
    """The index file of a library file whose bytes have this SHA-256."""
    return (folder or library_cache_dir()) / f"{sha256}{'-k' if trust_keys else ''}.npz"


def _forget_index(folder: Path, sha256: str, trust_keys: bool) -> None:
    """Delete an index no stamp points to any more (its source was edited)."""
    if not still_stamped(folder, sha256):
        index_path(sha256, trust_keys, folder).unlink(missing_ok=True)


def open_library(path: str | os.PathLike, name: str | None = None, *, trust_keys: bool = False,
                 cancel: CancelFn | None = None, folder: str | os.PathLike | None = None,
                 ) -> Generator[LibraryProgress, None, StructureLibrary]:
    """The library of a file (see :mod:`engine.library.read` for the formats), from its kept index when the file
    is unchanged, else indexed now and kept (see the module docstring). ``name`` is what the app shows (default:
    the file's name); ``folder`` replaces :func:`library_cache_dir`. Raises :class:`LibraryError` when the file
    cannot be read or holds no structure, :class:`~engine.errors.Cancelled` when cancelled."""
    source = Path(path).expanduser().resolve()
    folder = Path(folder) if folder is not None else library_cache_dir()
    label = name or source.name
    try:
        stat = source.stat()
    except OSError as e:
        raise LibraryError(source, f"cannot be opened ({e.strerror or e}); check the path.") from e
    stamp = read_stamp(folder, source)
    if unchanged(stamp, stat) and stamp.get("sha256"):
        sha256 = str(stamp["sha256"])
    else:
        hashing = hash_file(source, cancel)
        while True:
            try:
                done = next(hashing)
            except StopIteration as stop:
                sha256 = stop.value
                break
            yield LibraryProgress(done, stat.st_size, f"Checking {label}")
    index = index_path(sha256, trust_keys, folder)
    if index.is_file():
        try:
            library = StructureLibrary.load(index)
        except LibraryError as e:
            log.warning("%s; indexing %s again", e, source)
        else:
            if library.checksum == sha256:
                if stamp.get("sha256") != sha256 or not unchanged(stamp, stat):
                    write_stamp(folder, source, stat, sha256)
                library.name = label
                return library
    library = yield from build_library(source, label, trust_keys=trust_keys, checksum=sha256, cancel=cancel)
    yield from _keep(library, source, stat, index, folder, stamp, trust_keys)
    return library


def _keep(library: StructureLibrary, source: Path, stat: os.stat_result, index: Path, folder: Path,
          stamp: dict, trust_keys: bool) -> Generator[LibraryProgress, None, None]:
    """Write a freshly built index and its stamp, unless the source changed while it was read."""
    try:
        changed = not same_file(stat, source.stat())
    except OSError:
        changed = True
    if changed:
        log.warning("%s changed while it was indexed; its index is not kept", source)
        return
    yield LibraryProgress(stat.st_size, stat.st_size, f"Saving the index of {library.name}")
    try:
        library.save(index)
    except OSError as e:
        library.info["cache_error"] = f"cannot write {index} ({e.strerror or e})"
        log.warning("%s; the library is indexed again next time", library.info["cache_error"])
        return
    write_stamp(folder, source, stat, library.checksum)
    old = stamp.get("sha256")
    if old and old != library.checksum:
        _forget_index(folder, str(old), trust_keys)


def load_library(path: str | os.PathLike, name: str | None = None, **kwargs) -> StructureLibrary:
    """:func:`open_library` for callers that show no progress."""
    return run_to_end(open_library(path, name, **kwargs))


def open_bundled_library(cancel: CancelFn | None = None, folder: str | os.PathLike | None = None,
                         ) -> Generator[LibraryProgress, None, StructureLibrary]:
    """The library shipped with the app (indexed into the data folder on first use: a few minutes)."""
    path = bundled_library_path()
    if not path.is_file():
        raise LibraryError(path, "the bundled structure library is missing; reinstall MS-GPT Desktop.")
    return (yield from open_library(path, BUNDLED_NAME, trust_keys=True, cancel=cancel, folder=folder))


def open_libraries(sources: Sequence[str | os.PathLike], cancel: CancelFn | None = None,
                   folder: str | os.PathLike | None = None,
                   ) -> Generator[LibraryProgress, None, tuple[list[StructureLibrary], list[LibraryError]]]:
    """Open several library files; one that fails is reported (in the second list), not fatal to the others.
    Cancelling (:class:`~engine.errors.Cancelled`) still stops them all."""
    libraries: list[StructureLibrary] = []
    failures: list[LibraryError] = []
    for source in sources:
        try:
            libraries.append((yield from open_library(source, cancel=cancel, folder=folder)))
        except LibraryError as e:
            failures.append(e)
    return libraries, failures
