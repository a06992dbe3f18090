"""Top-k MCES distances with myopic-mces, configured as the paper's Appendix says (DiffMS settings).

* Both molecules are stereo-free and tautomer-canonical (RDKit ``TautomerEnumerator``) before the
  comparison; threshold 100, the stronger second bound not forced (``always_stronger_bound=False``);
  the first available PuLP solver (CBC).
* A failed pair (the solver raises, or stops at the time limit without a solution) scores the bond-count
  sum ``|E_ref| + |E_cand|``; a spectrum without candidates scores 100
  (:data:`training.core.metrics.MCES_NO_CANDIDATES`).
* The paper sets no time limit; a pair here stops after ``time_limit`` seconds (``--mces-time-limit``)
  so one hard pair cannot stall an evaluation. A pair stopped with a feasible but unproven solution
  keeps that distance (an upper bound); one stopped without a solution is a failure.

Optional: ``pip install 'msgpt-desktop[eval]'`` brings myopic-mces (and PuLP with its CBC solver).
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Sequence
from functools import lru_cache

from engine.chem import molecules as chem
from engine.errors import ConfigError

THRESHOLD = 100
EXACT, TIMEOUT_UNPROVEN, TIMEOUT_NO_SOLUTION = 1, 5, 6  # myopic_mces ComputationMode values


def require_mces() -> None:
    """Raise a ConfigError saying how to install myopic-mces when it is missing."""
    try:
        import myopic_mces  # noqa: F401
    except ImportError:
        raise ConfigError("MCES needs myopic-mces: pip install 'msgpt-desktop[eval]' (or pip install myopic-mces)") from None


@lru_cache(maxsize=1)
def _solver() -> str:
    import pulp

    available = pulp.listSolvers(onlyAvailable=True)
    for name in ("COIN_CMD", "PULP_CBC_CMD"):  # both CBC; PULP_CBC_CMD is deprecated in PuLP 3.3
        if name in available:
            return name
    if not available:
        raise ConfigError("PuLP finds no solver for MCES; install CBC (pip install 'pulp[cbc]').")
    return available[0]


@lru_cache(maxsize=50_000)
def prepare(smiles: str) -> tuple[str, int]:
    """Stereo-free, tautomer-canonical SMILES and its bond count (heavy atoms)."""
    from rdkit.Chem.MolStandardize import rdMolStandardize

    mol = chem.mol_from_smiles(smiles)
    if mol is None:
        raise ConfigError(f"RDKit cannot parse SMILES {smiles!r} for MCES.")
    chem.remove_stereo(mol)
    with contextlib.suppress(Exception):  # the enumerator gives up on some molecules: keep them as they are
        mol = rdMolStandardize.TautomerEnumerator().Canonicalize(mol)
    return chem.canonical_smiles(mol), mol.GetNumBonds()


@lru_cache(maxsize=200_000)
def mces_distance(ref_smiles: str, cand_smiles: str, time_limit: float = 60.0) -> tuple[float, bool]:
    """(distance, failed) of one pair, scored as the module docstring says; cached per pair."""
    from myopic_mces import MCES

    ref, ref_bonds = prepare(ref_smiles)
    cand, cand_bonds = prepare(cand_smiles)
    bond_sum = float(ref_bonds + cand_bonds)
    if ref == cand:
        return 0.0, False
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # myopic-mces prints its own errors
            _, distance, _, mode = MCES(ref, cand, threshold=THRESHOLD, always_stronger_bound=False,
                                        solver=_solver(), solver_options={"timeLimit": time_limit, "msg": False})
    except Exception:  # noqa: BLE001 - the solver fails in many ways; the paper scores every failure the same
        return bond_sum, True
    distance = float(distance)
    if mode == TIMEOUT_NO_SOLUTION or distance < 0 or not math.isfinite(distance):
        return bond_sum, True
    if mode not in (EXACT, TIMEOUT_UNPROVEN) and distance <= THRESHOLD:
        # myopic-mces fell back to a lower bound after the time limit: no solution was found
        return bond_sum, True
    return distance, False


def topk_mces(ref_smiles: str, candidate_smiles: Sequence[str], k: int = 10, time_limit: float = 60.0) -> tuple[list[float], int]:
    """MCES distances of the first ``k`` candidates to the reference, and how many pairs failed.

    Without candidates the list is empty; :func:`training.core.metrics.topk_min` scores that 100.
    """
    if not candidate_smiles:
        return [], 0
    out, failed = [], 0
    for smiles in candidate_smiles[:k]:
        d, f = mces_distance(ref_smiles, smiles, float(time_limit))
        out.append(d)
        failed += f
    return out, failed
