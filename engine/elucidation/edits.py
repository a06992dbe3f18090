"""Formula-preserving structure edits: the isomers one move away from a candidate (standard effort's edit rounds,
deep search's last phase).

Many de novo misses are close isomers of a candidate the fingerprint score already likes: a substituent on the
neighbouring carbon (the triazole of cyproconazole on the carbinol carbon instead of the next one), a methyl on
the other N-alkyl chain, a ring nitrogen one position round. The decoder reaches such an isomer only by chance;
a chemist would simply try the move. :func:`isomer_edits` makes every such move at once, each a new structure of
exactly the same formula:

* **migrate**: cut a single acyclic bond ``a-b`` whose ``b`` side holds at most ``max_group`` heavy atoms and
  bond ``b`` to another atom ``c`` of ``a``'s side that carries a hydrogen (``c`` gives one up, ``a`` takes
  one): a substituent, a methyl or a whole side chain moves to another position. Cutting one bond and
  making one leaves the ring count unchanged, so no new ring (and no strained one) appears;
* **swap**: exchange the elements of two heavy atoms that differ (a ring N walks round the ring, an ether O
  trades places with a CH2, a thioether S with an O).

Every result is sanitised by RDKit (valences the element allows, hydrogens recomputed), must keep the formula
and one connected component, and is returned once, as stereo-free canonical SMILES. Structures that
:func:`engine.chem.plausibility.implausible` flags (textbook unstable motifs) are dropped: the fingerprint
score alone would not stop them.

Pure RDKit, no model: :func:`best_edits` scores the edits with the caller's fingerprint score and keeps the best.
Standard effort makes a few rounds of them after sampling (:class:`engine.elucidation.pipeline.SpectrumSession`,
``QueryParams.edit_rounds``), deep search more (:class:`engine.elucidation.deep.DeepSearch`). May import
:mod:`engine.chem` and :mod:`engine.insight`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import rdMolDescriptors

from engine.chem.formula import parse_formula
from engine.chem.molecules import canonical_smiles, morgan_bits
from engine.chem.plausibility import implausible

MAX_ATOMS = 80  # heavy atoms above which a molecule is not edited (the moves grow as atoms squared)
# an edit round: the best candidates not yet edited, and the new edits kept (those the fingerprint score rates best)
EDIT_PARENTS = 5
EDIT_KEEP = 20
EDIT_MAX_ATOMS = 50  # heavy atoms of a formula above which an edit round is skipped (time grows as atoms squared)


def _editable(smiles: str) -> Chem.Mol | None:
    """A Kekulé form of ``smiles`` whose hydrogens RDKit recomputes after each edit; None when it cannot be."""
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
        if mol is None or mol.GetNumAtoms() > MAX_ATOMS or len(Chem.GetMolFrags(mol)) != 1:
            return None
        Chem.RemoveStereochemistry(mol)
        try:
            Chem.Kekulize(mol, clearAromaticFlags=True)
        except Exception:  # noqa: BLE001 - RDKit raises KekulizeException and others
            return None
    for atom in mol.GetAtoms():
        atom.SetNoImplicit(False)
        atom.SetNumExplicitHs(0)
    with rdBase.BlockLogs():
        if Chem.SanitizeMol(mol, catchErrors=True) != Chem.SanitizeFlags.SANITIZE_NONE:
            return None
    # the hydrogens recomputed must be the molecule's own (a radical or an odd valence would change them)
    if rdMolDescriptors.CalcMolFormula(mol) != rdMolDescriptors.CalcMolFormula(Chem.MolFromSmiles(smiles)):
        return None
    return mol


def _side(mol: Chem.Mol, start: int, blocked: int) -> set[int]:
    """The atoms reached from ``start`` without crossing to ``blocked`` (one side of an acyclic bond)."""
    seen, stack = {start}, [start]
    while stack:
        for nb in mol.GetAtomWithIdx(stack.pop()).GetNeighbors():
            i = nb.GetIdx()
            if i != blocked and i not in seen:
                seen.add(i)
                stack.append(i)
    return seen


def _migrations(mol: Chem.Mol, max_group: int) -> Iterator[Chem.RWMol]:
    hydrogens = [a.GetTotalNumHs() for a in mol.GetAtoms()]
    for bond in mol.GetBonds():
        if bond.IsInRing() or bond.GetBondType() != Chem.BondType.SINGLE:
            continue
        ends = (bond.GetBeginAtomIdx(), bond.GetEndAtomIdx())
        for a, b in (ends, ends[::-1]):
            group = _side(mol, b, a)
            if len(group) > max_group:
                continue
            for c in range(mol.GetNumAtoms()):
                if c == a or c in group or hydrogens[c] == 0:
                    continue
                new = Chem.RWMol(mol)
                new.RemoveBond(a, b)
                new.AddBond(c, b, Chem.BondType.SINGLE)
                yield new


def _swaps(mol: Chem.Mol) -> Iterator[Chem.RWMol]:
    atoms = list(mol.GetAtoms())
    for i, x in enumerate(atoms):
        if x.GetFormalCharge():
            continue
        for y in atoms[i + 1:]:
            if y.GetAtomicNum() == x.GetAtomicNum() or y.GetFormalCharge():
                continue
            new = Chem.RWMol(mol)
            new.GetAtomWithIdx(x.GetIdx()).SetAtomicNum(y.GetAtomicNum())
            new.GetAtomWithIdx(y.GetIdx()).SetAtomicNum(x.GetAtomicNum())
            yield new


def isomer_edits(smiles: str, max_group: int = 8, swaps: bool = True) -> list[str]:
    """Every isomer one move (migrate, swap; module notes) away from ``smiles``, as stereo-free canonical SMILES,
    in a stable order; ``smiles`` itself is not among them. Empty when the structure cannot be edited (it does
    not parse, is disconnected, or has more than :data:`MAX_ATOMS` heavy atoms)."""
    return list(isomer_edit_mols(smiles, max_group, swaps))


def isomer_edit_mols(smiles: str, max_group: int = 8, swaps: bool = True) -> dict[str, Chem.Mol]:
    """:func:`isomer_edits` with each edit's molecule (parsed from its SMILES, as a fresh parse perceives it), so a
    caller that fingerprints every edit parses none again."""
    own = canonical_smiles(smiles)
    written: dict[str, None] = {}
    with rdBase.BlockLogs():
        for new in _sanitized_moves(smiles, max_group, swaps):
            written.setdefault(Chem.MolToSmiles(new), None)
    result: dict[str, Chem.Mol] = {}
    for key in written:
        final = _final(key, own)
        if final is not None:
            result.setdefault(*final)
    return result


def _sanitized_moves(smiles: str, max_group: int = 8, swaps: bool = True) -> Iterator[Chem.Mol]:
    """Every move of ``smiles`` (duplicates included) that RDKit sanitises into a molecule of the same formula,
    in a stable order; :func:`_final` writes one as canonical SMILES. Moves keep the molecule in one piece: a
    migrated group bonds to an atom of the side it left, a swap changes no bond."""
    mol = _editable(smiles)
    if mol is None:
        return
    formula = rdMolDescriptors.CalcMolFormula(mol)
    with rdBase.BlockLogs():
        for new in itertools.chain(_migrations(mol, max_group), _swaps(mol) if swaps else ()):
            if Chem.SanitizeMol(new, catchErrors=True) != Chem.SanitizeFlags.SANITIZE_NONE:
                continue  # the edit broke a valence or an aromatic system
            if rdMolDescriptors.CalcMolFormula(new) == formula:
                yield new


def _final(key: str, own: str) -> tuple[str, Chem.Mol] | None:
    """(canonical SMILES, molecule) of an edit written as ``key``, parsed again so that aromaticity is perceived as
    a fresh parse would (the key that decodes agree on); None when it does not parse, is not one piece, is
    implausible, or is the parent (``own``) itself."""
    with rdBase.BlockLogs():
        m = Chem.MolFromSmiles(key)
    if m is None or "." in key or implausible(m):
        return None
    c = Chem.MolToSmiles(m)
    return None if c == own else (c, m)


def editable_formula(formula: str, max_atoms: int = EDIT_MAX_ATOMS) -> bool:
    """Whether structures of ``formula`` get edit rounds: at most ``max_atoms`` heavy atoms."""
    return sum(n for element, n in parse_formula(formula).items() if element != "H") <= max_atoms


def best_edits(parents: Iterable[str], score: Callable[[np.ndarray], float], have: Collection[str], keep: int
               ) -> dict[str, str]:
    """The ``keep`` new isomer edits of ``parents`` (SMILES, best first) that ``score`` (of an edit's Morgan bits:
    the fingerprint score under the spectrum's posterior) rates best, best first, each with the parent it was made
    from (the first parent that made it); edits whose canonical SMILES are in ``have`` are left out.

    Every move is scored on the molecule RDKit sanitised after it, whose Morgan bits are those of a fresh parse (the
    same for all 64,024 edits of 150 candidates checked), before any SMILES is written; only the best are written,
    parsed again to their canonical SMILES and checked for plausibility (:func:`_final`), in score order (ties in the
    order the moves were made), until ``keep`` distinct new ones remain. This saves most of an edit round's time."""
    if keep <= 0:
        return {}
    scored: list[tuple[float, int, str, str, Chem.Mol]] = []  # (score, order, parent, its canonical SMILES, move)
    for parent in parents:
        own = canonical_smiles(parent)
        for mol in _sanitized_moves(parent):
            scored.append((float(score(morgan_bits(mol))), len(scored), parent, own, mol))
    scored.sort(key=lambda x: (-x[0], x[1]))
    out: dict[str, str] = {}
    seen: set[str] = set()
    for _, _, parent, own, mol in scored:
        key = Chem.MolToSmiles(mol)
        if key in seen:
            continue
        seen.add(key)
        final = _final(key, own)
        if final is None or final[0] in have or final[0] in out:
            continue
        out[final[0]] = parent
        if len(out) == keep:
            break
    return out


def edit_rounds(proposals: Callable[[Mapping[str, str]], list[tuple[str, str, float]]],
                score: Callable[[np.ndarray], float] | None, rounds: int, parents: int, keep: int, stop_top: int
                ) -> tuple[dict[str, str], frozenset[str]]:
    """Up to ``rounds`` edit rounds; returns the edits (SMILES -> the parent's) and the InChIKey blocks of the
    structures edited. ``proposals(edits)`` ranks the structures drawn and those ``edits``, best first, as
    ``(inchikey14, smiles, score)``; each round edits the best ``parents`` not yet edited and keeps the ``keep``
    new edits ``score`` rates best (:func:`best_edits`); a round none of whose edits is among the best ``stop_top``
    proposals is the last. No rounds without a ``score``."""
    edits: dict[str, str] = {}
    edited: set[str] = set()
    if score is None or rounds <= 0:
        return edits, frozenset(edited)
    ranked = proposals(edits)
    for _ in range(rounds):
        chosen = [(k14, smiles) for k14, smiles, _ in ranked if k14 not in edited][:parents]
        if not chosen:
            break
        edited.update(k14 for k14, _ in chosen)
        new = best_edits([smiles for _, smiles in chosen], score, {smiles for _, smiles, _ in ranked}, keep)
        edits.update(new)
        ranked = proposals(edits)  # the next round's ranking, and this round's stop check
        if not set(new) & {smiles for _, smiles, _ in ranked[:stop_top]}:
            break
    return edits, frozenset(edited)
