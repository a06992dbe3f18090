"""Spectral libraries: reference MS/MS spectra (a user's MSP or MGF export of NIST, MoNA, MS-DIAL, GNPS or
MassBank, or the bundled MassBank subset) read, cleaned, indexed with ms-entropy's Flash entropy search, kept in
the data folder, and searched by identity (precursor within a tolerance) or as analogs (open, neutral-loss,
hybrid).

Layer between ``library`` and ``model``: imports only :mod:`engine.errors`, :mod:`engine.progress`,
:mod:`engine.paths`, :mod:`engine.chem`, :mod:`engine.spectra`, numpy, ms-entropy and pyteomics (RDKit through
``engine.chem``); matchms only in ``benchmarks/bench_spectral_search.py``, never here.

============  ======================================================================================
``records``   one reference spectrum (:class:`ReferenceSpectrum`) and the rules that make it from a
              record's fields: precursor, ion mode, adduct, structure keys, accession, contributor
``read``      MSP and MGF files split into records (bad records skipped, reported by line), the
              :class:`ReadReport`, :class:`SpectralLibraryError`
``index``     :class:`SpectralLibrary`: cleaned peaks, one Flash entropy index per ion mode, the
              metadata columns, the ``.npz`` + ``.json`` files; building as a generator of progress
``search``    :func:`search`: identity / open / neutral-loss / hybrid hits with their matched peaks,
              :class:`AnswerThreshold` (the shipped calibration) deciding a spectral answer
``cache``     indexes kept in the user's data folder by the file's SHA-256; the bundled library
============  ======================================================================================

::

    from engine.spectral_library import load_bundled_spectral_library, load_spectral_library, search
    libraries = [load_bundled_spectral_library(), load_spectral_library("MoNA-export-LC-MS-MS.msp")]
    matches = search(libraries, spectrum)                  # identity search, top 5 hits
    for hit in matches.hits:
        print(hit.rank, hit.similarity, hit.matched_peaks, hit.reference.name, hit.reference.accession)
    answer = matches.answer()                              # rank 1 when it passes the calibrated threshold
    analogs = search(libraries, spectrum, SearchParams(mode="hybrid"))
"""

from .cache import (
    bundled_spectral_library_path,
    load_bundled_spectral_library,
    load_spectral_library,
    open_bundled_spectral_library,
    open_spectral_libraries,
    open_spectral_library,
    spectral_cache_dir,
)
from .index import (
    ReferenceRecord,
    SpectralLibrary,
    SpectralLibraryProgress,
    clean_peaks,
    library_from_references,
)
from .read import ReadReport, SpectralLibraryError, iter_references
from .records import ReferenceSpectrum, SkippedReference
from .search import (
    MODES,
    AnswerThreshold,
    SearchParams,
    SpectralHit,
    SpectralMatches,
    default_threshold,
    search,
    search_peaks,
)

__all__ = [
    "MODES", "AnswerThreshold", "ReadReport", "ReferenceRecord", "ReferenceSpectrum", "SearchParams",
    "SkippedReference", "SpectralHit", "SpectralLibrary", "SpectralLibraryError", "SpectralLibraryProgress",
    "SpectralMatches", "bundled_spectral_library_path", "clean_peaks", "default_threshold", "iter_references",
    "library_from_references", "load_bundled_spectral_library", "load_spectral_library",
    "open_bundled_spectral_library", "open_spectral_libraries", "open_spectral_library", "search",
    "search_peaks", "spectral_cache_dir",
]
