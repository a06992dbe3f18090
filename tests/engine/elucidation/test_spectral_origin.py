"""The floor of spectral evidence (issue #54): a reference-spectrum match puts ``spectral_library`` in a candidate's
origin only at or above SPECTRAL_ORIGIN_FLOOR, or as an identification; a weaker one stays on the candidate as its
evidence and brings no structure into the pool by itself."""

from __future__ import annotations

import numpy as np

from engine.chem import molecules as chem
from engine.elucidation.ranking import (
    SPECTRAL_ORIGIN_FLOOR,
    CandidatePool,
    KnownStructure,
    SpectralEvidence,
)

PROPANOL, ISOPROPANOL, METHOXYETHANE = "CCCO", "CC(C)O", "CCOC"
FLOOR_SIMILARITY, FLOOR_PEAKS = SPECTRAL_ORIGIN_FLOOR


def key(smiles: str) -> str:
    return chem.inchikey(chem.mol_from_smiles(smiles))[:14]


def bits(smiles: str) -> np.ndarray:
    return chem.morgan_bits(chem.mol_from_smiles(smiles))


def evidence(similarity: float, peaks: int, identified: bool = False, accession: str = "REF1") -> SpectralEvidence:
    return SpectralEvidence(similarity, peaks, accession, "refs", identified=identified, reference_name="a name")


WEAK = evidence(FLOOR_SIMILARITY / 2, FLOOR_PEAKS + 1)  # under the floor's similarity
FEW_PEAKS = evidence(min(FLOOR_SIMILARITY + 0.1, 0.99), FLOOR_PEAKS - 1)  # under the floor's matched peaks
STRONG = evidence(FLOOR_SIMILARITY, FLOOR_PEAKS)  # at the floor: counts
IDENTIFIED_WEAK = evidence(FLOOR_SIMILARITY / 2, 1, identified=True)  # a user's own, looser identity threshold


def hit(smiles: str, ev: SpectralEvidence) -> KnownStructure:
    return KnownStructure(smiles, key(smiles), "C3H8O", bits(smiles), "refs", identifier=ev.accession,
                          name=ev.reference_name, spectral=ev)


def held(smiles: str) -> KnownStructure:
    return KnownStructure(smiles, key(smiles), "C3H8O", bits(smiles), "bundled", identifier="L1", name="held")


def ranked(known, samples=()) -> dict[str, object]:
    p = CandidatePool("C3H8O", [bits(PROPANOL)])
    p.add_known(known)
    p.add([(0, j) for j in range(len(samples))], list(samples))
    return {c.smiles: c for c in p.rank()[0]}


def test_the_floor_is_a_similarity_and_a_matched_peak_count_and_an_identification_always_passes():
    assert 0 < FLOOR_SIMILARITY < 0.675 and 1 <= FLOOR_PEAKS <= 3  # under the shipped identity threshold
    assert STRONG.in_origin and not WEAK.in_origin and IDENTIFIED_WEAK.in_origin
    assert not FEW_PEAKS.in_origin


def test_a_weak_hit_leaves_spectral_library_out_of_the_origin_and_keeps_its_evidence():
    by = ranked([held(ISOPROPANOL), hit(ISOPROPANOL, WEAK), hit(PROPANOL, WEAK)], samples=[PROPANOL])
    assert by[ISOPROPANOL].origin == "structure_library" and by[ISOPROPANOL].spectral == WEAK
    assert by[ISOPROPANOL].library == "bundled" and by[ISOPROPANOL].compound_name == "held"
    assert by[PROPANOL].origin == "de_novo" and by[PROPANOL].spectral == WEAK  # drawn: the match stays on it
    assert by[PROPANOL].compound_name == "a name" and not by[PROPANOL].identified


def test_a_structure_only_a_weak_hit_offers_does_not_join_the_pool():
    by = ranked([hit(METHOXYETHANE, WEAK)], samples=[PROPANOL])
    assert set(by) == {PROPANOL} and by[PROPANOL].spectral is None
    assert METHOXYETHANE not in ranked([hit(METHOXYETHANE, FEW_PEAKS)])


def test_a_hit_at_the_floor_puts_spectral_library_in_the_origin():
    by = ranked([hit(METHOXYETHANE, STRONG), held(ISOPROPANOL), hit(ISOPROPANOL, STRONG), hit(PROPANOL, STRONG)],
                samples=[PROPANOL])
    assert by[METHOXYETHANE].origin == "spectral_library" and by[METHOXYETHANE].spectral == STRONG
    better = evidence(0.99, FLOOR_PEAKS, accession="REF3")  # both over it: the more similar, as before
    assert ranked([hit(METHOXYETHANE, STRONG), hit(METHOXYETHANE, better)])[METHOXYETHANE].spectral == better
    assert by[ISOPROPANOL].origin == "structure_library;spectral_library"
    assert by[PROPANOL].origin == "de_novo;spectral_library"


def test_an_identification_always_counts_and_ranks_first():
    by = ranked([hit(METHOXYETHANE, IDENTIFIED_WEAK)], samples=[PROPANOL, PROPANOL])
    c = by[METHOXYETHANE]
    assert c.origin == "spectral_library" and c.identified and c.rank == 1 and c.spectral == IDENTIFIED_WEAK


def test_a_structure_keeps_its_match_over_the_floor_before_a_more_similar_one_under_it():
    under = evidence(0.99, FLOOR_PEAKS - 1, accession="REF2")
    by = ranked([hit(METHOXYETHANE, under), hit(METHOXYETHANE, STRONG)])
    assert by[METHOXYETHANE].origin == "spectral_library" and by[METHOXYETHANE].spectral == STRONG
    better = evidence(0.99, FLOOR_PEAKS, accession="REF3")  # both over it: the more similar, as before
    assert ranked([hit(METHOXYETHANE, STRONG), hit(METHOXYETHANE, better)])[METHOXYETHANE].spectral == better
