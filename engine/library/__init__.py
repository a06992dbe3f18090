"""Structure libraries: sets of known structures (a PubChemLite or NORMAN export, an SDF, a SMILES list, the
bundled library) read, standardised and indexed by formula, mass and InChIKey, with Morgan fingerprints.

Layer between ``formulas`` and ``model``: imports only :mod:`engine.errors`, :mod:`engine.progress`,
:mod:`engine.paths`, :mod:`engine.chem`, numpy and RDKit.

=============  ====================================================================================
``read``       library files (CSV/TSV with a SMILES or InChI column, SDF, one SMILES a line): rows of
               text, which columns mean what, :class:`LibraryError`
``build``      rows through RDKit (standardised, deduplicated by InChIKey first block), bad rows
               reported by line, as a generator of :class:`LibraryProgress`
``index``      :class:`StructureLibrary`: the arrays, queries by formula, mass and key, fingerprints,
               the ``.npz`` file
``cache``      indexes kept in the user's data folder by the file's SHA-256; the bundled library
=============  ====================================================================================

::

    from engine.library import load_library
    lib = load_library("PubChemLite_exposomics.csv")          # indexed once, then opened from the data folder
    for row in lib.rows_of_formula("C9H10O3"):
        print(lib.record(row).name, lib.bits(row))
    rows = lib.rows_near_mass(166.06299, ppm=5)
"""

from .build import STANDARDISATION, LibraryProgress, build_library
from .cache import (
    bundled_library_path,
    library_cache_dir,
    load_library,
    open_bundled_library,
    open_libraries,
    open_library,
)
from .index import LibraryRecord, StructureLibrary
from .read import LibraryError, LibraryFile, RawStructure

__all__ = [
    "STANDARDISATION", "LibraryError", "LibraryFile", "LibraryProgress", "LibraryRecord", "RawStructure",
    "StructureLibrary", "build_library", "bundled_library_path", "library_cache_dir", "load_library",
    "open_bundled_library", "open_libraries", "open_library",
]
