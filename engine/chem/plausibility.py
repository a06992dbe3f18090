"""Implausible chemistry: a short reason for a candidate structure that no stable compound is known to show.

The decoder writes any structure the formula allows, and now and then ranks one with a motif a chemist would
never expect in a sample: a strained or antiaromatic three-membered ring, an aminal that falls apart in water,
a halogen on a carbon that carries an amine. :func:`implausible` names such motifs, one short reason each, so
the app can mark the candidate; it changes no score, no rank and no export (deep search's edits,
:mod:`engine.elucidation.edits`, never propose a structure it flags).

The rules are few and conservative: each is a SMARTS pattern (RDKit), matched on the structure as written
(implicit hydrogens, no stereo needed), and each fires on textbook unstable motifs while common drugs,
metabolites and pesticides do not fire (tests/engine/chem/test_plausibility.py checks both). A plain
amine nitrogen below is ``[NX3]`` (aliphatic, three connections) that is not bonded to an aromatic atom, to
another N or O, or to a C, S or P doubly bonded to O, S or N (amides, ureas, carbamates, sulfonamides,
amidines, phosphoramides are excluded: they stabilise the motifs).

``2H-azirine``           ``[#6]1=[#7]-[#6]-1``
    A C=N double bond in a three-membered ring: about 45 kcal/mol of ring strain; a few exist (azirinomycin,
    dysidazirine) but they are reactive and rare, so a 2H-azirine among the candidates deserves a second look.
``oxirene / thiirene / 1H-azirine``  ``[#6]1=[#6]-[#8,#16,#7]-1``
    A C=C double bond in a three-membered ring with O, S or N: 4 π electrons, antiaromatic; none has been
    isolated (they are fleeting intermediates). Cyclopropenes (carbon only, e.g. sterculic acid) do not fire.
``acyclic aminal``       ``[CX4;!R](-[N;plain amine])-[N;plain amine]``
    Two amine nitrogens on one open-chain sp3 carbon (a gem-diamine, the adduct of an aldehyde or ketone with
    two amines): it loses an amine to an iminium ion and hydrolyses in water. Ring aminals (hexamine,
    imidazolidines) and N-acyl ones (allantoin, methylene-bis-amides) are stable and do not fire.
``halogen on an aminal carbon``  ``[CX4](-[#7])(-[#7])-[F,Cl,Br,I]``
    A carbon bearing two nitrogens and a halogen: the nitrogens push the halide out (it is an amidinium
    halide in disguise); not a stable covalent compound.
``α-haloamine``          ``[CX4](-[N;plain amine])-[Cl,Br,I]``
    Chlorine, bromine or iodine on the carbon next to an amine nitrogen: it ionises to an iminium halide and
    hydrolyses (nitrogen mustards, N–C–C–Cl, and chloroacetamides, N–C(=O)–C–Cl, do not fire).
``N-halogen``            ``[#7]-[Cl,Br,I]``
    A nitrogen–chlorine, –bromine or –iodine bond (chloramines, N-bromo imides): reactive oxidants and
    halogenating reagents, transient in water and not expected as analytes.
``gem-diol``             ``[CX4;!$(C-C=O);!$(C-C(X)(X)X)](-[OH])-[OH]``
    Two hydroxy groups on one sp3 carbon (a carbonyl hydrate, or an ortho acid with free OH such as
    C(N)(OH)OH): it loses water to the carbonyl. Hydrates next to a carbonyl (ninhydrin, glyoxylate) or a
    trihalomethyl group (chloral hydrate) are stable and do not fire; 1 of 7,649 MassBank structures fires.
``α-haloalcohol``        ``[CX4](-[OH])-[F,Cl,Br,I]``
    A hydroxy group and a halogen on one sp3 carbon (a carbonyl's HX adduct): it loses HX to the carbonyl at once.
    Halogens on a neighbouring carbon (trifluoromethyl carbinols, chlorohydrins) do not fire; none of the 7,649
    MassBank structures fires.

Not flagged on purpose: peroxides (artemisinin and other natural endoperoxides are real), cyclopropenes,
diazirines, azides, hemiaminals and N,O-acetals (common in natural products and drugs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rdkit import Chem

from engine.chem import molecules as chem

# a plain amine nitrogen (see the module notes): aliphatic, three connections, not acylated / sulfonylated /
# amidine-like, not on an aromatic atom, not bonded to N or O
_AMINE = "[NX3;!$(N-a);!$(N-[#7,#8]);!$(N-[#6,#16,#15]=[#8,#16,#7])]"


@dataclass(frozen=True)
class Rule:
    """One implausible motif: its name, SMARTS and the short reason the app shows."""

    name: str
    smarts: str
    reason: str


RULES: tuple[Rule, ...] = (
    Rule("2H-azirine", "[#6]1=[#7]-[#6]-1", "2H-azirine: strained C=N three-membered ring, rarely stable"),
    Rule("oxirene / thiirene / 1H-azirine", "[#6]1=[#6]-[#8,#16,#7]-1",
         "oxirene / thiirene / 1H-azirine: antiaromatic three-membered ring, never isolated"),
    Rule("acyclic aminal", f"[CX4;!R](-{_AMINE})-{_AMINE}",
         "acyclic aminal (gem-diamine): loses an amine and hydrolyses in water"),
    Rule("halogen on an aminal carbon", "[CX4](-[#7])(-[#7])-[F,Cl,Br,I]",
         "halogen on a carbon bearing two nitrogens: expels the halide, not stable"),
    Rule("α-haloamine", f"[CX4](-{_AMINE})-[Cl,Br,I]",
         "α-haloamine (N–C–Cl/Br/I): ionises to an iminium halide, not stable"),
    Rule("N-halogen", "[#7]-[Cl,Br,I]", "N–halogen bond: a reactive oxidant, not expected as an analyte"),
    Rule("gem-diol", "[CX4;!$(C-C=O);!$(C-C([F,Cl,Br,I])([F,Cl,Br,I])[F,Cl,Br,I])](-[OX2H1])-[OX2H1]",
         "gem-diol (two OH on one carbon): loses water to the carbonyl"),
    Rule("α-haloalcohol", "[CX4](-[OX2H1])-[F,Cl,Br,I]",
         "α-haloalcohol (OH and halogen on one carbon): loses HX to the carbonyl"),
)

_PATTERNS = tuple(Chem.MolFromSmarts(r.smarts) for r in RULES)


def implausible(mol_or_smiles: chem.Mol | str | None) -> tuple[str, ...]:
    """The reasons (one per rule that fires, in :data:`RULES` order) why a structure is implausible; ``()``
    when none fires or the SMILES cannot be parsed."""
    mol = mol_or_smiles if isinstance(mol_or_smiles, Chem.Mol) else chem.mol_from_smiles(mol_or_smiles)
    if mol is None:
        return ()
    return tuple(rule.reason for rule, pattern in zip(RULES, _PATTERNS) if mol.HasSubstructMatch(pattern))


@lru_cache(maxsize=8192)
def plausibility_note(smiles: str) -> str:
    """:func:`implausible` of a SMILES as one line ("" when nothing fires); cached, for tables that ask again."""
    return "; ".join(implausible(smiles))
