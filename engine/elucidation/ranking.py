"""From decoder samples to ranked candidate structures.

Each sample (a SAFE string) is decoded to a molecule; it counts if it is valid (RDKit parses it, one
connected component) and formula-consistent (its neutral formula equals the spectrum's formula).
Valid samples are grouped by the first InChIKey block (2D structure) and ranked by one of
:data:`engine.model.scoring.RANKINGS`: the paper's generation count (ties broken by posterior similarity, the
max Tanimoto between the candidate's Morgan fingerprint and the band's queries), the fingerprint score
of the candidate under the posterior, or both combined; the InChIKey ends ties for a stable order.

:class:`CandidatePool` keeps the outcome of every sample by its identity ``(i, j)`` (threshold
index, sample index), so a pool can be re-ranked for a smaller N without sampling again and grown
by drawing only the missing samples.

Structures a library holds (:class:`KnownStructure`, offered with :meth:`CandidatePool.add_known`) join
the same ranking: one candidate per structure, generated or not, its ``origin`` saying which (``de_novo``,
``structure_library``, ``spectral_library``, several joined by ``;``). They are scored like the samples, plus
the pool's ``library_prior``, a log-odds bonus for being known, and, for one no sample drew (and neither a
suspect nor an identification), the pool's ``undrawn_prior`` (:mod:`engine.elucidation.libraries`). A structure
whose reference spectrum matched the query (:class:`SpectralEvidence`) carries the match; ``spectral_library``
joins its origin only for a match at or above :data:`SPECTRAL_ORIGIN_FLOOR` or an identification, and a weaker
match brings no structure into the pool by itself (it stays on one drawn or held anyway). An identity match that
passes the calibrated threshold (an identification) and the structures of suspect lists (libraries the user gave
as such) rank before every other candidate (:func:`rank_group`), ordered among themselves by score, where the
analog score below carries the identification's own reference match; without that term (no suspect list, or
``analog_score`` off) the identification ranks first outright. Then come the rest by score.

An :class:`AnalogRerank` (the query's analog-search hits in the run's spectral libraries) adds ``weight ·`` each
suspect-list structure's analog score, its highest similarity × Tanimoto to the compounds whose reference spectra
resemble the query's (an identification among them: its own reference gives it about that reference's
similarity), ``de_novo_weight ·`` that of every prediction (drawn or edited) and ``others_weight ·`` that of the
other candidates. A :class:`FragmentRerank` (the bundle's
forward model, :mod:`engine.model.forward`) then adds
a spectrum-based term: within the groups it covers, the first ``shortlist`` candidates by score so far get
``weight ·`` their forward score (how well their fragments explain the spectrum's peaks), and the rest the lowest
forward score of that shortlist, so they stay below it.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from engine.chem import molecules as chem
from engine.errors import ConfigError
from engine.model.constraints import DEAD_END
from engine.model.forward import ForwardRanking
from engine.model.scoring import DEFAULT_RANKING, FingerprintScorer, check_ranking, ranking_score, sort_key
from engine.timing import staged

log = logging.getLogger(__name__)

SampleId = tuple[int, int]
DE_NOVO = "de_novo"  # a candidate's origin: drawn from the decoder
STRUCTURE_LIBRARY = "structure_library"  # a structure a library holds
SPECTRAL_LIBRARY = "spectral_library"  # a structure whose reference spectrum matched the query
ORIGINS = (DE_NOVO, STRUCTURE_LIBRARY, SPECTRAL_LIBRARY)
#: The least reference-spectrum match that puts ``spectral_library`` in a candidate's origin: (entropy similarity,
#: matched peaks), both at least these, or an identification (:attr:`SpectralEvidence.in_origin`); a weaker match
#: stays on the candidate as evidence. Measured by ``benchmarks/studies/spectral_origin_floor.py`` on 2,000 FOLD=val
#: spectra (docs/evidence/spectral_origin.md): a wrong hit under 0.3 is no closer to the truth than a random library
#: structure of the formula (Tanimoto +0.02 to +0.04), one from 0.35 up is (+0.07 to +0.10); 0.3 drops 34% of
#: the hits when the library lacks the truth and 4.7% of the true hits when it has it. Matched peaks add nothing
#: (1: every hit): requiring 2 would drop 12.5% of the true hits for 25% of the false ones.
SPECTRAL_ORIGIN_FLOOR = (0.3, 1)


@dataclass(frozen=True)
class SpectralEvidence:
    """A reference spectrum of a candidate's structure that matched the query
    (:func:`engine.elucidation.libraries.spectral_structures`). ``identified``: an identity match passing the
    calibrated threshold, of the query's ion type: a level-2a identification (Schymanski et al. 2014)."""

    similarity: float  # entropy similarity, 0-1
    matched_peaks: int
    accession: str
    library: str
    identified: bool
    reference_name: str = ""
    adduct: str = ""
    collision_energy: str = ""
    instrument_type: str = ""
    license: str = ""
    contributor: str = ""

    @property
    def in_origin(self) -> bool:
        """The match is evidence enough for ``spectral_library`` in the candidate's origin: an identification, or
        at least :data:`SPECTRAL_ORIGIN_FLOOR`. A weaker one stays on the candidate (its details, the exports'
        spectral columns) but is not an origin, and brings no structure into the pool by itself."""
        min_similarity, min_peaks = SPECTRAL_ORIGIN_FLOOR
        return self.identified or (self.similarity >= min_similarity and self.matched_peaks >= min_peaks)


@dataclass(frozen=True)
class DecodedSample:
    """What one SAFE string decodes to. ``inchikey14`` is None when the sample is not a valid molecule."""

    smiles: str | None
    inchikey14: str | None
    inchikey: str | None
    formula: str | None
    reason: str = ""  # why it is invalid, empty when valid


@dataclass(frozen=True)
class Candidate:
    rank: int
    smiles: str
    inchikey: str
    inchikey14: str
    formula: str
    count: int
    frequency: float  # count / number of samples drawn
    posterior_similarity: float
    bits: np.ndarray  # Morgan active bits (for similarity to references); not exported
    fingerprint_score: float = float("nan")  # log-likelihood of its fingerprint under π (nan: no posterior)
    score: float = float("nan")  # what the ranking sorted by (higher first)
    origin: str = DE_NOVO  # de_novo, structure_library, or both joined by ';'
    library: str = ""  # the libraries that hold it (';'-joined), empty for a de novo structure only
    library_id: str = ""  # its identifier in the (first) library
    compound_name: str = ""  # its name in the (first) library
    spectral: SpectralEvidence | None = None  # its best reference-spectrum match, if any
    suspect: bool = False  # a suspect list holds it: ranked before every prediction, with identifications
    fragment_score: float = float("nan")  # forward score of its fragments against the spectrum (nan: not scored)
    analog_score: float = float("nan")  # highest similarity × Tanimoto to an analog's structure (nan: not scored)
    analog_reference: str = ""  # the reference spectrum giving it: "accession name"
    edited_from: str = ""  # made by an isomer edit of this candidate (SMILES), not drawn (engine.elucidation.edits)

    @property
    def identified(self) -> bool:
        """A reference spectrum of this structure passed the identity threshold (level 2a)."""
        return self.spectral is not None and self.spectral.identified

    @property
    def rank_group(self) -> int:
        """Its :func:`rank_group` (an identification the analog term scored carries an analog score)."""
        return rank_group(self.identified, self.suspect, math.isfinite(self.analog_score))

    @property
    def monoisotopic_mass(self) -> float:
        from engine.chem.formula import formula_mass, parse_formula

        return formula_mass(parse_formula(self.formula))


def rank_group(identified: bool, suspect: bool, analog_scored: bool) -> int:
    """Where a candidate ranks, before its score decides within the group: 0, an identification ranked first
    outright; 1, the structures of suspect lists, with an identification when the analog term weighs its
    reference match (``analog_scored``); 2, every other candidate.

    An identification used to rank first outright whatever the suspects. On the 570 FOLD=val spectra of
    ``benchmarks/suspect_ranking.py`` (a suspect list of each truth and up to 255 isomers) ranking it with the
    suspects by the merged score put the truth first more often whether the identifications were all false
    (no reference spectrum of the truth) or mostly right (the truth's other spectra added to the spectral library):
    docs/known_compounds.md, "Identifications among the suspects"."""
    if identified and not analog_scored:
        return 0
    return 1 if identified or suspect else 2


@dataclass(frozen=True)
class KnownStructure:
    """A structure a library holds, offered to a spectrum's pool beside the de novo samples
    (:func:`engine.elucidation.libraries.library_structures`)."""

    smiles: str
    inchikey14: str
    formula: str
    bits: np.ndarray  # Morgan active bits, as :func:`engine.chem.molecules.morgan_bits` gives them
    library: str  # the library's name
    identifier: str = ""
    name: str = ""
    spectral: SpectralEvidence | None = None  # set when the structure comes from a spectral library hit
    suspect: bool = False  # from a suspect list: ranks before every prediction (with identifications)


@dataclass(frozen=True)
class FragmentRerank:
    """The forward score as a second ranking term (module docstring): ``scorer`` gives a structure's forward
    score from its SMILES (None: it cannot be scored); ``ranking`` the weight, shortlist and scope (``suspects``:
    the structures of suspect lists among themselves, which rank before every prediction, so de novo answers are
    not touched; ``all``: also the predictions and the other library structures)."""

    scorer: Callable[[str], float | None]
    ranking: ForwardRanking

    def groups(self) -> tuple[int, ...]:
        """The rank groups (:func:`rank_group`) it covers (1 suspects and identifications, 2 the rest)."""
        return tuple(g for g in (1, 2) if self.ranking.fragment_weight(g) > 0)

    def __deepcopy__(self, memo) -> FragmentRerank:
        return self  # immutable settings and a scorer whose cache copies (deep search's pool) may share


@dataclass(frozen=True)
class AnalogReference:
    """A reference spectrum the query resembles (an analog-search hit,
    :func:`engine.elucidation.libraries.analog_references`) and its compound's Morgan bits."""

    similarity: float  # entropy similarity of the hybrid (fragment and neutral-loss) search, 0-1
    bits: np.ndarray  # Morgan active bits of its structure
    accession: str = ""
    name: str = ""

    @property
    def label(self) -> str:
        return " ".join(v for v in (self.accession, self.name) if v)


@dataclass(frozen=True)
class AnalogRerank:
    """The analog score as a ranking term: a structure's analog score is its highest ``similarity × Tanimoto`` to
    the structures of ``references`` (a candidate like the compounds whose spectra resemble the query's is
    likelier); ``weight ·`` that joins the score of a suspect-list structure or an identification ranked among
    them, ``others_weight ·`` that of any other candidate, and ``de_novo_weight ·``, when above 0, that of a
    prediction (a candidate a sample drew or an edit made). The weights are those ``training.studies.retrieval_analogs``
    and ``training.studies.pool_rerank`` chose (:class:`engine.model.forward.ForwardRanking`)."""

    references: tuple[AnalogReference, ...]
    weight: float
    others_weight: float = 0.0
    de_novo_weight: float = 0.0

    def weight_of(self, group: int, proposed: bool = False) -> float:
        """The weight in a rank group (:func:`rank_group`: 1 suspects and identifications, 2 the rest); in group 2 a
        ``proposed`` candidate (a sample drew it or an edit made it) has ``de_novo_weight`` when that is above 0."""
        if group == 2 and proposed and self.de_novo_weight > 0:
            return self.de_novo_weight
        return {1: self.weight, 2: self.others_weight}.get(group, 0.0)

    def best(self, bits: np.ndarray) -> tuple[float, AnalogReference | None]:
        """The analog score of a structure's Morgan ``bits`` and the reference that gives it (0, None: none)."""
        if not self.references:
            return 0.0, None
        values = chem.tanimoto_many(bits, [r.bits for r in self.references]) * np.array(
            [r.similarity for r in self.references])
        i = int(np.argmax(values))
        return float(values[i]), self.references[i]

    def __deepcopy__(self, memo) -> AnalogRerank:
        return self  # immutable


@lru_cache(maxsize=200_000)
@staged("SAFE decoding")
def decode_safe(safe_str: str) -> DecodedSample:
    """SAFE → canonical stereo-free SMILES, InChIKey and formula; cached (samples repeat a lot).

    A SAFE string is a SMILES whose ``.``-separated fragments are joined by the ring-closure digits they share, so
    RDKit parses it directly into the molecule (issue #58: one parse instead of safe-mol's parse, dummy check,
    canonical writing and graph comparison, and ours again; the same molecule, SMILES and InChIKey on 2,636 decoder
    samples and 4,838 corpus and mutated strings, checked against ``safe.decode(canonical=True, fix=False)``). No
    fixing: safe-mol's caps unpaired digits with dummy atoms turned into carbons, which makes an invalid string
    "valid" with another formula; here an unpaired digit fails to parse."""
    if not safe_str:
        return DecodedSample(None, None, None, None, "empty")
    if safe_str.endswith(DEAD_END):
        return DecodedSample(None, None, None, None, "no legal token left (formula-constrained decoding)")
    mol = chem.mol_from_smiles(safe_str)
    if mol is None:
        return DecodedSample(None, None, None, None, "not a valid SAFE string")
    chem.remove_stereo(mol)
    smiles = chem.canonical_smiles(mol)
    if "." in smiles:
        return DecodedSample(smiles, None, None, None, "disconnected fragments")
    key = _inchikey(mol)
    if key is None:  # RDKit may hold (and write) an aromatic system it cannot kekulize for InChI: read it back
        mol = chem.mol_from_smiles(smiles)
        if mol is None:
            return DecodedSample(smiles, None, None, None, "RDKit cannot parse the molecule")
        smiles, key = chem.canonical_smiles(mol), _inchikey(mol)
    if not key:
        return DecodedSample(smiles, None, None, None, "no InChIKey")
    return DecodedSample(smiles, key[:14], key, chem.mol_formula(mol))


def _inchikey(mol) -> str | None:
    try:
        return chem.inchikey(mol)
    except Exception:  # RDKit raises KekulizeException (and others) for some sanitized aromatic systems  # noqa: BLE001
        return None


class CandidatePool:
    """Samples of one spectrum, by identity, with the formula they must match."""

    def __init__(self, formula: str, query_bits: Sequence[np.ndarray], scorer: FingerprintScorer | None = None,
                 library_prior: float = 0.0, fragments: FragmentRerank | None = None,
                 analogs: AnalogRerank | None = None, undrawn_prior: float = 0.0):
        """``scorer`` gives fingerprint scores; without one only the ``frequency`` ranking is possible.
        ``library_prior``: the log-odds bonus of a structure a library holds (:meth:`add_known`);
        ``undrawn_prior``: what is added to that for a library structure no sample drew, unless a suspect list
        holds it or a reference spectrum identifies it;
        ``fragments``: the forward score as a second term of the fingerprint rankings (None: none);
        ``analogs``: the analog score as a term of the ranking (None: none)."""
        self.formula = formula
        self.library_prior = float(library_prior)
        self.undrawn_prior = float(undrawn_prior)
        self.fragments = fragments
        self.analogs = analogs
        self._known: dict[str, KnownStructure] = {}
        self._known_libraries: dict[str, list[str]] = {}  # structure libraries holding a structure
        self._spectral: dict[str, SpectralEvidence] = {}  # the best reference-spectrum match of a structure
        self._suspects: set[str] = set()  # structures a suspect list holds
        self.query_bits = [np.asarray(b, dtype=np.int64) for b in query_bits]
        self.scorer = scorer
        self._samples: dict[SampleId, str] = {}
        self._edits: dict[str, str] = {}  # structures made by editing candidates, not drawn -> the candidate edited
        self._bits_cache: dict[str, np.ndarray] = {}
        self._sim_cache: dict[str, float] = {}
        self._score_cache: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._samples)

    def has(self, sample_id: SampleId) -> bool:
        return sample_id in self._samples

    def add(self, sample_ids: Iterable[SampleId], safe_strings: Iterable[str]) -> None:
        for sid, s in zip(sample_ids, safe_strings, strict=True):
            self._samples[sid] = s

    def add_known(self, structures: Iterable[KnownStructure]) -> None:
        """Offer library structures of the pool's formula: each joins the ranking once, generated or not (a
        structure several libraries hold lists them all, and is named by a suspect list's entry first, as the user
        knows it, else by the first library's; a later entry gives a name the first one lacks)."""
        for s in structures:
            if s.formula != self.formula:
                continue
            if s.spectral is not None:
                best = self._spectral.get(s.inchikey14)
                if best is None or _evidence_key(s.spectral) > _evidence_key(best):
                    self._spectral[s.inchikey14] = s.spectral
            else:
                names = self._known_libraries.setdefault(s.inchikey14, [])
                if s.library not in names:
                    names.append(s.library)
            if s.suspect:
                self._suspects.add(s.inchikey14)
            have = self._known.get(s.inchikey14)
            if s.spectral is not None and not s.spectral.in_origin:
                continue  # a match under the floor is no evidence: kept above, for a candidate drawn or held anyway
            if have is None or (have.spectral is not None and s.spectral is None) or (
                    s.suspect and s.spectral is None and not have.suspect):
                self._known[s.inchikey14] = s  # a suspect list's entry names it, then a structure library's, then a reference's
            elif not have.name and s.name:
                self._known[s.inchikey14] = replace(have, name=s.name)

    def add_edits(self, edits: Mapping[str, str] | Iterable[str]) -> None:
        """Offer structures made from candidates rather than drawn (isomer edits, :mod:`engine.elucidation.edits`),
        each with the SMILES of the candidate it was made from (a mapping; an iterable: unknown): each of the pool's
        formula joins the ranking once, with count 0 (no sample drew it), origin ``de_novo`` and ``edited_from``;
        the sample counts are unchanged."""
        items = edits.items() if isinstance(edits, Mapping) else ((x, "") for x in edits)
        for s, parent in items:
            self._edits.setdefault(s, parent)

    def set_edits(self, edits: Mapping[str, str]) -> None:
        """Replace every edit offered so far by ``edits`` (:meth:`add_edits`)."""
        self._edits = {}
        self.add_edits(edits)

    def proposals(self, n_per_group: int | None = None, edits: Iterable[str] = ()) -> list[tuple[str, str, float]]:
        """``(inchikey14, smiles, fingerprint score)`` of every structure drawn (samples with ``j < n_per_group``)
        or among ``edits`` (SMILES), best fingerprint score first (ties by InChIKey block): what edits start from,
        whatever the libraries and the ranking's other terms. Needs a scorer."""
        seen: dict[str, Counter] = {}
        for s in self.select(n_per_group):
            d = decode_safe(s)
            if d.inchikey14 is not None and d.formula == self.formula:
                seen.setdefault(d.inchikey14, Counter())[d.smiles] += 1
        rows = {k14: min(c, key=lambda x: (-c[x], x)) for k14, c in seen.items()}
        for s in edits:
            d = decode_safe(s)
            if d.inchikey14 is not None and d.formula == self.formula:
                rows.setdefault(d.inchikey14, d.smiles)
        out = [(k14, smiles, self._fingerprint_score(smiles, self._bits(smiles))) for k14, smiles in rows.items()]
        return sorted(out, key=lambda r: (-r[2], r[0]))

    @property
    def n_edits(self) -> int:
        return len(self._edits)

    @property
    def n_known(self) -> int:
        return len(self._known)

    @property
    def has_suspects(self) -> bool:
        return bool(self._suspects)

    def items(self) -> list[tuple[SampleId, str]]:
        """Every sample drawn so far: ((i, j), SAFE string), in the order they were added."""
        return list(self._samples.items())

    def select(self, n_per_group: int | None = None) -> list[str]:
        """SAFE strings of the samples with ``j < n_per_group`` (all when None)."""
        return [s for (_, j), s in self._samples.items() if n_per_group is None or j < n_per_group]

    @staged("ranking")
    def rank(self, n_per_group: int | None = None, ranking: str | None = None) -> tuple[list[Candidate], dict[str, int]]:
        """Ranked candidates and counts ``{"samples", "valid", "formula_consistent"}``.

        ``ranking`` defaults to :data:`~engine.model.scoring.DEFAULT_RANKING` with a scorer, else ``frequency``.
        """
        if ranking is None:
            ranking = DEFAULT_RANKING if self.scorer is not None else "frequency"
        check_ranking(ranking)
        if ranking != "frequency" and self.scorer is None:
            raise ConfigError(f"ranking {ranking!r} needs the spectrum's posterior (a FingerprintScorer)")
        samples = self.select(n_per_group)
        groups: dict[str, Counter] = {}
        keys: dict[str, DecodedSample] = {}
        n_valid = n_ok = 0
        for s in samples:
            d = decode_safe(s)
            if d.inchikey14 is None:
                continue
            n_valid += 1
            if d.formula != self.formula:
                continue
            n_ok += 1
            groups.setdefault(d.inchikey14, Counter())[d.smiles] += 1
            keys.setdefault(d.inchikey14, d)
        rows = []
        for k14, smiles_counts in groups.items():
            # the most frequent SMILES of the group represents it (ties: alphabetical)
            smiles = min(smiles_counts, key=lambda s: (-smiles_counts[s], s))
            bits = self._bits(smiles)
            fp_score = self._fingerprint_score(smiles, bits)
            rows.append((sum(smiles_counts.values()), self._similarity(smiles, bits), k14, smiles, bits, fp_score))
        edited: dict[str, str] = {}  # structure made by an edit, no sample drew it -> the candidate edited
        for s, parent in self._edits.items():
            d = decode_safe(s)
            if d.inchikey14 is None or d.formula != self.formula or d.inchikey14 in groups or d.inchikey14 in keys:
                continue
            keys[d.inchikey14] = d
            edited[d.inchikey14] = parent
            if d.inchikey14 not in self._known:  # a library structure is listed below, with its origin
                bits = self._bits(d.smiles)
                rows.append((0, self._similarity(d.smiles, bits), d.inchikey14, d.smiles, bits,
                             self._fingerprint_score(d.smiles, bits)))
        for k14, known in self._known.items():
            if k14 not in groups:
                bits = np.asarray(known.bits, dtype=np.int64)
                rows.append((0, self._similarity(known.smiles, bits), k14, known.smiles, bits,
                             self._fingerprint_score(known.smiles, bits)))
        proposed = set(keys)  # drawn, or made from drawn candidates by deep search's edits
        prior = {k14: self.library_prior + (self.undrawn_prior if self._undrawn_known(k14, proposed) else 0.0)
                 for k14 in self._known}
        # the analog term weighs an identification's reference match among the suspects (rank_group)
        analog_scored = self.analogs is not None and ranking != "frequency" and self.analogs.weight_of(1) > 0
        rows.sort(key=lambda r: (*self._group_key(r[2], analog_scored),
                                 *sort_key(ranking, r[0], r[5], r[1], r[2], prior.get(r[2], 0.0))))
        analog: dict[str, tuple[float, AnalogReference | None]] = {}
        if self.analogs is not None and ranking != "frequency":
            # before the fragment term: its shortlist is the first by fingerprint + analog score, as measured
            for r in rows:
                w = self.analogs.weight_of(self._group_key(r[2], analog_scored)[0], r[2] in proposed)
                if w > 0:
                    analog[r[2]] = self.analogs.best(r[4])
                    prior[r[2]] = prior.get(r[2], 0.0) + w * analog[r[2]][0]
            rows.sort(key=lambda r: (*self._group_key(r[2], analog_scored),
                                     *sort_key(ranking, r[0], r[5], r[1], r[2], prior.get(r[2], 0.0))))
        forward: dict[str, float] = {}
        if self.fragments is not None and self.fragments.groups() and ranking != "frequency":
            forward, terms = self._fragment_terms(rows, analog_scored)
            prior = {k14: prior.get(k14, 0.0) + terms.get(k14, 0.0) for k14 in set(prior) | set(terms)}
            rows.sort(key=lambda r: (*self._group_key(r[2], analog_scored),
                                     *sort_key(ranking, r[0], r[5], r[1], r[2], prior.get(r[2], 0.0))))
        n = max(len(samples), 1)
        candidates = [
            Candidate(
                rank=r + 1,
                smiles=smiles,
                inchikey=keys[k14].inchikey if k14 in keys else "",
                inchikey14=k14,
                formula=keys[k14].formula if k14 in keys else self.formula,
                count=count,
                frequency=count / n,
                posterior_similarity=sim,
                bits=bits,
                fingerprint_score=fp_score,
                score=ranking_score(ranking, count, fp_score, prior.get(k14, 0.0)),
                fragment_score=forward.get(k14, float("nan")),
                analog_score=analog[k14][0] if k14 in analog else float("nan"),
                analog_reference=analog[k14][1].label if analog.get(k14, (0, None))[1] is not None else "",
                edited_from=edited.get(k14, ""),
                **self._origin(k14, count),
            )
            for r, (count, sim, k14, smiles, bits, fp_score) in enumerate(rows)
        ]
        return candidates, {"samples": len(samples), "valid": n_valid, "formula_consistent": n_ok}

    def _undrawn_known(self, k14: str, proposed: set[str]) -> bool:
        """A library structure that no sample (nor deep search's edits) proposed, neither a suspect nor identified:
        the ``undrawn_prior`` applies."""
        spectral = self._spectral.get(k14)
        return (k14 not in proposed and k14 not in self._suspects
                and not (spectral is not None and spectral.identified))

    def _fragment_terms(self, rows: list[tuple], analog_scored: bool) -> tuple[dict[str, float], dict[str, float]]:
        """For ``rows`` in the ranking's order without it: the forward scores of each covered group's shortlist, and
        every covered row's term ``weight · forward`` (outside the shortlist, or not scorable: the shortlist's
        lowest); ``analog_scored`` as for :meth:`_group_key`."""
        frag, settings = self.fragments, self.fragments.ranking
        members: dict[int, list[tuple]] = {}
        for r in rows:
            group = self._group_key(r[2], analog_scored)[0]
            if group in frag.groups():
                members.setdefault(group, []).append(r)
        forward: dict[str, float] = {}
        terms: dict[str, float] = {}
        for group, group_rows in members.items():
            weight = settings.fragment_weight(group)
            scored = {r[2]: frag.scorer(r[3]) for r in group_rows[: settings.fragment_shortlist(group)]}
            finite = [v for v in scored.values() if v is not None and math.isfinite(v)]
            if not finite:
                continue
            low = min(finite)
            for r in group_rows:
                v = scored.get(r[2])
                if v is not None and math.isfinite(v):
                    forward[r[2]] = v
                terms[r[2]] = weight * forward.get(r[2], low)
        return forward, terms

    def _group_key(self, inchikey14: str, analog_scored: bool) -> tuple[int, float]:
        """The structure's :func:`rank_group` (``analog_scored``: the ranking weighs the analog score of group 1);
        in group 0 (identifications ranked first outright) the most similar reference first."""
        evidence = self._spectral.get(inchikey14)
        group = rank_group(evidence is not None and evidence.identified, inchikey14 in self._suspects, analog_scored)
        return (group, -evidence.similarity if group == 0 else 0.0)

    def _origin(self, inchikey14: str, count: int) -> dict:
        """The origin fields of a candidate: de novo, from a structure library, from a spectral library, or
        several (``;``-joined, in :data:`ORIGINS` order)."""
        known = self._known.get(inchikey14)
        spectral = self._spectral.get(inchikey14)
        if known is None:  # drawn only; a reference match under the floor stays on it as evidence, not origin
            return {} if spectral is None else {"compound_name": spectral.reference_name, "spectral": spectral}
        libraries = self._known_libraries.get(inchikey14, [])
        in_origin = spectral is not None and spectral.in_origin
        origin = ";".join(o for o, on in zip(ORIGINS, (count > 0, bool(libraries), in_origin)) if on)
        if libraries:  # the structure library's identifier and name; else the reference spectrum's
            return {"origin": origin, "library": ";".join(libraries), "library_id": known.identifier,
                    "compound_name": known.name or (spectral.reference_name if spectral else ""),
                    "spectral": spectral, "suspect": inchikey14 in self._suspects}
        return {"origin": origin, "library": "", "library_id": "",
                "compound_name": spectral.reference_name if spectral else "", "spectral": spectral}

    def _bits(self, smiles: str) -> np.ndarray:
        if smiles not in self._bits_cache:
            self._bits_cache[smiles] = chem.morgan_bits(chem.mol_from_smiles(smiles))
        return self._bits_cache[smiles]

    def _fingerprint_score(self, smiles: str, bits: np.ndarray) -> float:
        if self.scorer is None:
            return float("nan")
        if smiles not in self._score_cache:
            self._score_cache[smiles] = self.scorer.score(bits)
        return self._score_cache[smiles]

    def _similarity(self, smiles: str, bits: np.ndarray) -> float:
        if smiles not in self._sim_cache:
            self._sim_cache[smiles] = chem.max_tanimoto(bits, self.query_bits)
        return self._sim_cache[smiles]


def _evidence_key(evidence: SpectralEvidence) -> tuple[bool, bool, float]:
    """Which of a structure's reference matches it keeps: an identification, then one over the origin floor,
    then the most similar."""
    return evidence.identified, evidence.in_origin, evidence.similarity


def reference_rank(candidates: Sequence[Candidate], reference_inchikey14: str | None) -> int | None:
    """1-based rank of the reference structure among the candidates, None when absent."""
    if not reference_inchikey14:
        return None
    return next((c.rank for c in candidates if c.inchikey14 == reference_inchikey14), None)
