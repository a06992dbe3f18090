"""``msgpt predict``'s libraries: the structure and spectral libraries of a run (the bundled ones and those given),
opened with a progress bar that names the step under way, and the analog fingerprints a deep search borrows.
:mod:`engine.cli.predict` calls :func:`_open_libraries`; this module imports :mod:`engine.cli.common` and the
engine's libraries (no other ``engine.cli`` module)."""

from __future__ import annotations

import argparse
import sys

from engine.cli.common import err


def _open_libraries(args: argparse.Namespace) -> list:
    """The structure and spectral libraries of the run: the bundled ones (unless ``--no-bundled-libraries``) and
    those of ``--structure-library`` / ``--spectral-library`` (none with ``--no-libraries``), indexed into the
    data folder on first use with a progress bar. A library that cannot be read is reported and left out."""
    from engine.library import StructureLibrary, open_bundled_library, open_library
    from engine.library.read import LibraryError
    from engine.spectral_library import SpectralLibraryError, open_bundled_spectral_library, open_spectral_library

    if args.no_libraries:
        _open_bundled_analogs(args)
        return []
    bundled = [] if args.no_bundled_libraries else ["bundled"]
    libraries = []
    for source in dict.fromkeys(bundled + args.structure_library):
        lib = _open_one(open_bundled_library() if source == "bundled" else open_library(source),
                        "Structure library", source, LibraryError, args.quiet)
        if lib is not None:
            lib.suspect = source != "bundled"  # a library the user gives is a suspect list: its structures first
            problems = f", {lib.n_problems} rows unreadable (first: {lib.problems[0]})" if lib.n_problems else ""
            err(f"Structure library {lib.name}: {len(lib):,} structures{problems}.")
            libraries.append(lib)
            if args.effort == "deep":  # deep search borrows analogs' fragments: their bits, computed once
                from engine.elucidation.analogs import open_analog_index

                _open_one(open_analog_index(lib), "Analog fingerprints", source, ValueError, args.quiet,
                          unit="structure")
    for source in dict.fromkeys(bundled + args.spectral_library):
        lib = _open_one(open_bundled_spectral_library() if source == "bundled" else open_spectral_library(source),
                        "Spectral library", source, SpectralLibraryError, args.quiet)
        if lib is not None:
            err(f"Spectral library {lib.summary()}")
            libraries.append(lib)
    if not any(isinstance(lib, StructureLibrary) for lib in libraries):
        _open_bundled_analogs(args)
    return libraries


def _open_bundled_analogs(args: argparse.Namespace) -> None:
    """Deep search without structure libraries borrows fragments from the bundled one
    (:func:`engine.elucidation.deep.bundled_analogs`): its bits are computed once, here, with a progress bar."""
    if args.effort != "deep":
        return
    from engine.elucidation.analogs import open_analog_index
    from engine.library import open_bundled_library
    from engine.library.read import LibraryError

    lib = _open_one(open_bundled_library(), "Structure library", "bundled", LibraryError, args.quiet)
    if lib is not None:
        _open_one(open_analog_index(lib), "Analog fingerprints", "bundled", ValueError, args.quiet, unit="structure")


def _open_one(job, kind: str, source: str, error: type[Exception], quiet: bool, unit: str = "B"):
    """Run a library's opening generator with a progress bar that names the step under way (checking the file,
    indexing it, saving the index); ``None`` (reported) when it cannot be read."""
    from tqdm import tqdm

    with tqdm(total=None, unit=unit, unit_scale=True, desc=f"{kind} {source}", disable=quiet, file=sys.stderr,
              leave=False) as bar:
        try:
            while True:
                ev = next(job)
                if getattr(ev, "text", None):  # each step starts again from 0: say which one it is
                    bar.set_description_str(f"{kind}: {ev.text}", refresh=False)
                bar.total = ev.total
                bar.n = ev.done
                bar.refresh()
        except StopIteration as stop:
            return stop.value
        except error as e:
            err(f"{kind} left out: {e}")
            return None
