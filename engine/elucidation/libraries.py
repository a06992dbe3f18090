"""Structure libraries in a spectrum's search: which library structures join its candidate pool, and the
prior that ranks them beside the de novo candidates.

A spectrum of known formula gets every structure of that formula from every library
(:func:`library_structures`); they join the pool's one ranking (:meth:`CandidatePool.add_known`), scored by
the same fingerprint score as the samples plus :data:`LIBRARY_PRIOR`, the log-odds that a structure someone
has catalogued is the answer rather than a look-alike the decoder made up to match the predicted fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.chem.formula import normalize_formula
from engine.elucidation.ranking import KnownStructure
from engine.library import StructureLibrary

#: Log-odds bonus of a library structure in the fingerprint rankings (QueryParams.library_prior).
LIBRARY_PRIOR = 0.0


def library_structures(libraries: Sequence[StructureLibrary], formula: str) -> list[KnownStructure]:
    """Every structure of ``formula`` the ``libraries`` hold, in library order (a structure in several
    libraries comes once per library; the pool keeps one candidate of it)."""
    formula = normalize_formula(formula)
    out = []
    for lib in libraries:
        for row in lib.rows_of_formula(formula):
            rec = lib.record(int(row))
            out.append(KnownStructure(smiles=rec.smiles, inchikey14=rec.inchikey14, formula=formula,
                                      bits=lib.bits(int(row)), library=lib.name, identifier=rec.identifier,
                                      name=rec.name))
    return out
