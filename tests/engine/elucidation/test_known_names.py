"""How a structure several libraries hold is named (issue #54: a suspect's name was missing when the bundled library
offered it first): a suspect list's entry names it, as the user knows it; a later entry gives a name the first one
lacks; every library that holds it is listed."""

from __future__ import annotations

from engine.chem import molecules as chem
from engine.elucidation.ranking import CandidatePool, KnownStructure

PROPANOL = "CCCO"


def known(library: str, name: str = "", identifier: str = "", suspect: bool = False) -> KnownStructure:
    mol = chem.mol_from_smiles(PROPANOL)
    return KnownStructure(PROPANOL, chem.inchikey(mol)[:14], "C3H8O", chem.morgan_bits(mol), library,
                          identifier=identifier, name=name, suspect=suspect)


def first(*structures: KnownStructure):
    pool = CandidatePool("C3H8O", [chem.morgan_bits(chem.mol_from_smiles(PROPANOL))])
    pool.add_known(structures)
    (c,) = pool.rank()[0]
    return c


def test_a_suspect_lists_entry_names_the_structure_whoever_offered_it_first():
    c = first(known("MS-GPT bundled structures", identifier="B1"), known("my suspects", "propan-1-ol", "S7", True))
    assert (c.compound_name, c.library_id, c.suspect) == ("propan-1-ol", "S7", True)
    assert c.library == "MS-GPT bundled structures;my suspects"


def test_a_later_entry_gives_the_name_the_first_lacks_and_a_named_first_entry_stays():
    assert first(known("lib A", identifier="A1"), known("lib B", "n-propanol", "B1")).compound_name == "n-propanol"
    c = first(known("lib A", "propanol", "A1"), known("lib B", "n-propanol", "B1"))
    assert (c.compound_name, c.library_id) == ("propanol", "A1")
