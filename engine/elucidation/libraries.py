"""Known compounds in a spectrum's search: which structures of structure libraries and which reference spectra
of spectral libraries join its candidate pool, and the prior that ranks them beside the de novo candidates.

A run's ``libraries`` is one sequence holding :class:`~engine.library.StructureLibrary` and
:class:`~engine.spectral_library.SpectralLibrary` objects alike (:func:`split_libraries` tells them apart).

* A spectrum gets every structure of its formula from every structure library (:func:`library_structures`);
  a spectrum without a given formula also gets, for each formula a library holds within the tolerance of its
  precursor that the formula ranking did not propose, a run of those structures alone (the mass track,
  :func:`mass_track_spectra`), under every common ion type of its polarity the model can run (natively or by
  mapping, :func:`library_ion_types`). A structure's charge decides its ion types (:func:`charge_fits`): a
  permanent cation (choline, a quaternary ammonium) is ``[M]+`` only, at its own m/z, and a neutral molecule is
  never ``[M]+``. Structures of a suspect list (``StructureLibrary.suspect``) rank before the predictions.
* Its MS/MS spectrum is searched in every spectral library (:func:`search_spectrum`, identity search: precursor
  within 0.01 Da, entropy similarity). The structure of each hit of the pool's formula joins the pool with the
  match as evidence (:func:`spectral_structures`) when the match reaches the origin floor
  (``ranking.SPECTRAL_ORIGIN_FLOOR``; a weaker one stays on a candidate drawn or held anyway); a rank-1 hit that
  passes the shipped, calibrated threshold (:func:`engine.spectral_library.default_threshold`) and was measured as
  the query's ion type (spellings normalised by :func:`~engine.chem.adducts.parse_adduct`) is an identification: it
  ranks first, or, when a suspect list's analog term weighs its match, with the suspects by score
  (:func:`engine.elucidation.ranking.rank_group`). :func:`identified_formulas` gives the formulas of such hits,
  so a caller that ranks formula candidates can make sure the identified structure's formula is among those run.
* Its spectrum is also searched for analogs (:func:`search_analogs`, Flash entropy's hybrid search: fragments
  and neutral losses, any precursor). The structures of the first hits (:func:`analog_references`) order the
  suspect lists' structures: one like the compounds whose spectra resemble the query's ranks higher
  (:class:`~engine.elucidation.ranking.AnalogRerank`).

All of them join the pool's one ranking (:meth:`CandidatePool.add_known`), scored by the same fingerprint score
as the samples plus :data:`LIBRARY_PRIOR`, the log-odds that a structure someone has catalogued is the answer
rather than a look-alike the decoder made up to match the predicted fingerprint. It is 0: measured on FOLD=train
spectra the encoder never saw (``training/studies/retrieval.py``, docs/known_compounds.md), every positive prior that raised
the library's Hit@1 also pushed de novo answers of structures in no library down (crowding). Even at 0 the bundled
libraries' structures that no sample drew pushed some down; such a structure therefore also gets
:data:`UNDRAWN_PRIOR` (−16 nats): of the penalties that left no crowding on FOLD=train spectra the encoder never
saw, the one that kept most library structures that are the answer at rank 1 (``training/studies/library_prior.py``). A
suspect list's structures and identifications rank before the rest, in their own order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engine.chem import molecules as chem
from engine.chem.formula import normalize_formula
from engine.elucidation.ranking import AnalogReference, AnalogRerank, KnownStructure, SpectralEvidence
from engine.library import StructureLibrary
from engine.spectral_library import SpectralLibrary, SpectralMatches, search
from engine.spectral_library.search import AnswerThreshold, SearchParams, SpectralHit
from engine.timing import staged

#: Log-odds bonus of a library structure in the fingerprint rankings (QueryParams.library_prior).
LIBRARY_PRIOR = 0.0
#: Added to it for a library structure no sample drew, unless a suspect list holds it or a reference spectrum
#: identifies it (QueryParams.undrawn_prior): such a structure ranks above a prediction only when its fingerprint
#: score beats it by this many nats. Chosen by ``training/studies/library_prior.py`` (docs/known_compounds.md).
UNDRAWN_PRIOR = -16.0
#: How many reference hits of a spectrum are offered to its pool.
SPECTRAL_HITS = 5


def split_libraries(libraries: Sequence) -> tuple[tuple[StructureLibrary, ...], tuple[SpectralLibrary, ...]]:
    """The structure libraries and the spectral libraries of a run's ``libraries``."""
    structures = tuple(lib for lib in libraries if isinstance(lib, StructureLibrary))
    spectra = tuple(lib for lib in libraries if isinstance(lib, SpectralLibrary))
    other = [lib for lib in libraries if not isinstance(lib, StructureLibrary | SpectralLibrary)]
    if other:
        raise TypeError(f"not a structure or spectral library: {other[0]!r}")
    return structures, spectra


def charge_fits(charge: int, adduct) -> bool:
    """Whether a structure of net formal charge ``charge`` can be seen as ``adduct``: an ion type that adds and
    removes nothing (``[M]+``, ``[M]-``) is the molecule's own charge, so only a structure of that charge
    (a permanent cation for ``[M]+``); every other ion type (``[M+H]+``, ``[M+NH4]+``, ``[M+HCOO]-``, the radical
    ``[M]+*``) charges a neutral molecule (zwitterions included)."""
    from engine.chem.adducts import parse_adduct

    a = parse_adduct(adduct)
    intrinsic = a.n_molecules == 1 and not a.net_counts and not a.name.endswith("*")
    return charge == (a.charge if intrinsic else 0)


def library_ion_types(polarity: str | None, runnable: Sequence[str], allowed: Sequence[str] = ()) -> tuple[str, ...]:
    """The ion types the structure libraries are matched under for a spectrum of ``polarity`` (``None`` or
    unknown: both): every common electrospray ion type (:data:`engine.chem.adducts.COMMON_ION_TYPES`), then any
    other of ``runnable``, kept when the model can run it (``runnable``: the caller's model's native and mapped
    ion types) and the run allows it (``allowed``; empty: all). Names are normalised."""
    from engine.chem.adducts import COMMON_ION_TYPES, parse_adduct

    modes = (polarity,) if polarity in COMMON_ION_TYPES else tuple(COMMON_ION_TYPES)
    can = {parse_adduct(a).name for a in runnable}
    ok = {parse_adduct(a).name for a in allowed}
    names = [a for mode in modes for a in COMMON_ION_TYPES[mode]]
    names += [parse_adduct(a).name for a in runnable if parse_adduct(a).polarity in modes]
    return tuple(a for a in dict.fromkeys(names) if a in can and (not ok or a in ok))


@staged("library look-ups")
def library_structures(libraries: Sequence, formula: str, adduct: str | None = None) -> list[KnownStructure]:
    """Every structure of ``formula`` the structure libraries among ``libraries`` hold, in library order (a
    structure in several libraries comes once per library; the pool keeps one candidate of it). With ``adduct``,
    only the structures whose charge can form that ion type (:func:`charge_fits`: a permanent cation for ``[M]+``,
    a neutral molecule for the rest)."""
    formula = normalize_formula(formula)
    out = []
    for lib in split_libraries(libraries)[0]:
        for row in lib.rows_of_formula(formula):
            rec = lib.record(int(row))
            if adduct and not charge_fits(rec.charge, adduct):
                continue
            out.append(KnownStructure(smiles=rec.smiles, inchikey14=rec.inchikey14, formula=formula,
                                      bits=lib.bits(int(row)), library=lib.name, identifier=rec.identifier,
                                      name=rec.name, suspect=lib.suspect))
    return out


def general_ion_types(polarity: str | None) -> tuple[str, ...]:
    """The ion types under which every structure library is matched by mass when the run names none: those the
    formula ranking tries by default (:data:`engine.formulas.candidates.DEFAULT_ION_TYPES`, left out of which are
    ``[M-H2O+H]+``, which cost formula accuracy, see docs/ion_types.md) and ``[M]+`` (only a library's permanent
    cations can be it). The rest of the common ion types search the suspect lists only."""
    from engine.formulas.candidates import DEFAULT_ION_TYPES

    modes = (polarity,) if polarity in DEFAULT_ION_TYPES else tuple(DEFAULT_ION_TYPES)
    names = [a for mode in modes for a in DEFAULT_ION_TYPES[mode]]
    if "positive" in modes:
        names.append("[M]+")
    return tuple(dict.fromkeys(names))


#: ``formula_source`` of a spectrum run for the library structures of its mass alone (no de novo samples).
MASS_TRACK = "structure library (mass)"


@staged("library look-ups")
def mass_track_spectra(libraries: Sequence, spectrum, have: Sequence, ion_types: Sequence[str],
                       ppm: float, precision_da: float = 0.0, general_ion_types: Sequence[str] | None = None) -> list:
    """Copies of ``spectrum`` (of unknown formula) for each formula and ion type under which a structure library
    holds structures within ``ppm`` of its precursor m/z, and that ``have`` (the formula candidates a caller is
    about to run) lacks: those structures are ranked on their own (:meth:`SpectrumSession.rank_known`, no
    samples drawn), so a library structure of the right mass is not lost when the formula ranking missed its
    formula. ``ion_types`` are tried in their order (those of the spectrum's polarity;
    :func:`library_ion_types` gives a run's); a structure counts under an ion type its charge can form
    (:func:`charge_fits`: choline, ``C5H14NO`` as drawn, only as ``[M]+`` at m/z 104.1070). Each copy carries the
    real ion type: a caller runs an ion type the model does not run natively through its mapping.

    ``precision_da``: the precursor is written to this many Da, too coarse to rank formulas (a record of 2
    decimals): the window is that wide, and only suspect lists are searched, as suspect screening matches a
    list by m/z. The bundled library holds tens of formulas in such a window, which the fingerprint score alone,
    without the predictions, could not tell apart.

    ``general_ion_types``: the ion types under which the libraries that are not suspect lists (the bundled
    structure library) are matched; the others of ``ion_types`` search the suspect lists only (None: every library
    under every ion type). A suspect list is a short list a chemist expects in the sample, worth its rarer ion types;
    the bundled library's tens of thousands of structures under an in-source water loss would add runs of
    structures 18 Da heavier than the precursor to every feature (see :func:`general_ion_types`)."""
    from engine.chem.adducts import neutral_mass_from_precursor, parse_adduct
    from engine.chem.formula import parse_formula
    from engine.errors import MsgptError

    structures = split_libraries(libraries)[0]
    if precision_da > 0:
        structures = [lib for lib in structures if lib.suspect]
    if not structures or spectrum.formula:
        return []
    seen = {(s.formula, _ion_type(s.adduct) if s.adduct else s.adduct) for s in have}
    general = None if general_ion_types is None else {parse_adduct(a).name for a in general_ion_types}
    out = []
    for adduct in ion_types:
        a = parse_adduct(adduct)
        if spectrum.polarity and (a.charge > 0) != (spectrum.polarity == "positive"):
            continue
        mass = neutral_mass_from_precursor(spectrum.precursor_mz, a)
        if mass <= 0:
            continue
        window = max(ppm, 1e6 * precision_da / mass)
        searched = structures if general is None or a.name in general else [lib for lib in structures if lib.suspect]
        formulas = sorted({lib.record(int(r)).formula for lib in searched for r in lib.rows_near_mass(mass, window)
                           if charge_fits(lib.charge(int(r)), a)})
        for formula in formulas:
            if (formula, a.name) in seen:
                continue
            seen.add((formula, a.name))
            try:
                a.ion_counts(parse_formula(formula))  # a formula that cannot form the ion (C4F8 as [M-H]-)
                new = spectrum.with_adduct(a.name, check=False).with_formula(formula)
            except MsgptError:
                continue
            out.append(replace(new, metadata={**new.metadata, "formula_rank": "", "formula_score": "",
                                              "formula_source": MASS_TRACK}))
    return out


@staged("spectral search")
def search_spectrum(libraries: Sequence, spectrum) -> SpectralMatches | None:
    """Identity search of ``spectrum`` in the spectral libraries among ``libraries`` (``None`` without any)."""
    spectral = split_libraries(libraries)[1]
    if not spectral:
        return None
    return search(spectral, spectrum, SearchParams(mode="identity", top_k=SPECTRAL_HITS))


@staged("analog search")
def search_analogs(libraries: Sequence, spectrum, hits: int) -> SpectralMatches | None:
    """Analog search of ``spectrum`` (hybrid: fragments and neutral losses, any precursor) in the spectral libraries
    among ``libraries``, its first ``hits`` hits (``None`` without any library)."""
    spectral = split_libraries(libraries)[1]
    if not spectral:
        return None
    return search(spectral, spectrum, SearchParams(mode="hybrid", top_k=hits))


def analog_references(hits: Sequence[SpectralHit]) -> tuple[AnalogReference, ...]:
    """The analog hits whose reference gives a readable structure, with its Morgan bits, in their order."""
    out = []
    for hit in hits:
        bits = chem.morgan_bits_from_smiles(hit.reference.smiles) if hit.reference.smiles else None
        if bits is not None:
            out.append(AnalogReference(float(hit.similarity), bits, hit.reference.accession, hit.reference.name))
    return tuple(out)


def analog_weights(bundle, suspects: bool = True) -> bool:
    """Whether the model bundle ``bundle`` chose an analog term for a pool (with or without ``suspects``)."""
    ranking = bundle.forward.ranking if bundle.forward is not None else None
    return ranking is not None and (ranking.analog_weight_others > 0 or ranking.analog_weight_de_novo > 0
                                    or (suspects and ranking.analog_weight > 0))


def analog_rerank(bundle, libraries: Sequence, spectrum) -> AnalogRerank | None:
    """The analog score of ``spectrum`` as a ranking term (:class:`AnalogRerank`): its analog hits in the spectral
    libraries among ``libraries``, at the bundle's chosen weights; None when the bundle chose none or no hit gives
    a structure."""
    if not analog_weights(bundle):
        return None
    ranking = bundle.forward.ranking
    matches = search_analogs(libraries, spectrum, ranking.analog_hits)
    references = analog_references(matches.hits) if matches is not None else ()
    if not references:
        return None
    return AnalogRerank(references, ranking.analog_weight, ranking.analog_weight_others, ranking.analog_weight_de_novo)


def is_identification(matches: SpectralMatches, hit: SpectralHit, adduct: str | None,
                      threshold: AnswerThreshold | None = None) -> bool:
    """``hit`` identifies the query: it is the rank-1 identity hit, passes the calibrated ``threshold`` and, when
    both say, its reference was measured as the query's ion type (a [M+Na]+ reference at the m/z of an [M+H]+
    query is another molecule)."""
    if matches.answer(threshold) is not hit:
        return False
    return not (adduct and hit.reference.adduct and _ion_type(hit.reference.adduct) != _ion_type(adduct))


def _ion_type(text: str) -> str:
    """An ion type's canonical name (``M+H`` and ``[M+H]1+`` are ``[M+H]+``); the text itself when unreadable."""
    from engine.chem.adducts import parse_adduct_or_none
    from engine.errors import MsgptError

    try:
        parsed = parse_adduct_or_none(text)
    except MsgptError:
        return text
    return parsed.name if parsed is not None else text


def _structure(hit: SpectralHit) -> tuple[str, str, str] | None:
    """``(smiles, inchikey14, formula)`` of a reference's structure as candidates have it; ``None`` without one."""
    ref = hit.reference
    mol = chem.mol_from_smiles(ref.smiles) if ref.smiles else None
    if mol is None:
        return None
    chem.remove_stereo(mol)
    key = chem.inchikey14(mol)
    return None if key is None else (chem.canonical_smiles(mol), key, chem.mol_formula(mol))


def spectral_structures(matches: SpectralMatches | None, adduct: str | None,
                        threshold: AnswerThreshold | None = None) -> list[KnownStructure]:
    """The structures of the hits of ``matches`` (those whose reference gives a SMILES), each with its match as
    evidence; the pool keeps those of its formula."""
    if matches is None:
        return []
    out = []
    for hit in matches.hits:
        structure = _structure(hit)
        if structure is None:
            continue
        smiles, key, formula = structure
        ref = hit.reference
        evidence = SpectralEvidence(
            similarity=float(hit.similarity), matched_peaks=int(hit.matched_peaks), accession=ref.accession,
            library=ref.library, identified=is_identification(matches, hit, adduct, threshold),
            reference_name=ref.name, adduct=ref.adduct, collision_energy=ref.collision_energy,
            instrument_type=ref.instrument_type, license=ref.license, contributor=ref.contributor)
        out.append(KnownStructure(smiles=smiles, inchikey14=key, formula=formula,
                                  bits=chem.morgan_bits_from_smiles(smiles), library=ref.library,
                                  identifier=ref.accession, name=ref.name, spectral=evidence))
    return out


def identified_formulas(matches: SpectralMatches | None, threshold: AnswerThreshold | None = None
                        ) -> list[tuple[str, str]]:
    """``(formula, adduct)`` of the identity answer of ``matches`` (at most one), for a caller that ranks formula
    candidates: the identified structure can only join the pool of its own formula. The adduct is the
    reference's (empty when it does not say)."""
    if matches is None:
        return []
    hit = matches.answer(threshold)
    structure = None if hit is None else _structure(hit)
    if structure is None:
        return []
    return [(structure[2], _ion_type(hit.reference.adduct) if hit.reference.adduct else "")]


def library_formula_spectra(libraries: Sequence, spectrum, have: Sequence, supported_adducts: Sequence[str],
                            ppm: float, ion_types: Sequence[str] = (), precision_da: float = 0.0) -> list:
    """What the libraries add to the runs of a spectrum of unknown formula beside ``have`` (its formula candidates
    about to run): the formula of a spectral identification (:func:`identified_formula_spectra`) and the mass
    track (:func:`mass_track_spectra`, within ``ppm``) under every common ion type of the spectrum's polarity
    that the model runs (``supported_adducts``: the ion types the caller's model runs, natively or by mapping,
    ``ModelBundle.runnable_adducts``) and ``ion_types`` allows (the ion types the run allows; empty: all;
    :func:`library_ion_types`). ``precision_da``: the precursor is too coarse for formula candidates (``have`` is
    empty); the mass track searches the suspect lists within it, and its runs carry a warning saying there are no
    predictions and how to get them. ``msgpt predict`` and the app's Run both use it."""
    from engine.spectra.spectrum import with_warning

    allowed = library_ion_types(spectrum.polarity, supported_adducts, ion_types)
    out = identified_formula_spectra(spectrum, search_spectrum(libraries, spectrum), have, allowed)
    track = mass_track_spectra(libraries, spectrum, [*have, *out], allowed, ppm, precision_da=precision_da,
                               general_ion_types=None if ion_types else general_ion_types(spectrum.polarity))
    if precision_da > 0:
        why = (f"the precursor m/z {spectrum.precursor_mz:g} is written to {precision_da:g} Da, too coarse for "
               f"formulas: the suspect-list structures within {precision_da:g} Da were ranked, without de novo "
               f"candidates (give the formula, FORMULA= or --formula, for those)")
        track = [with_warning(s, why) for s in track]
    return out + track


def identified_formula_spectra(spectrum, matches: SpectralMatches | None, have: Sequence,
                               supported_adducts: Sequence[str]) -> list:
    """Copies of ``spectrum`` with the formula and ion type of its spectral identification (at most one), when
    ``have`` (the formula candidates a caller is about to run) lacks it: the identified structure can only join
    the pool of its own formula, whatever the formula ranking said. ``supported_adducts``: the ion types the
    caller can run (natively or by mapping; a ``[M]+`` reference of a permanent cation is run as ``[M]+`` when it
    is among them). Nothing when the reference's ion type is not among them, or its formula does not fit the
    precursor m/z."""
    from engine.errors import MsgptError

    runnable = {_ion_type(a) for a in supported_adducts}
    out = []
    for formula, adduct in identified_formulas(matches):
        adduct = _ion_type(adduct or spectrum.adduct or "")
        if not adduct or adduct not in runnable:
            continue
        if any(s.formula == formula and s.adduct and _ion_type(s.adduct) == adduct for s in have):
            continue
        try:
            new = spectrum.with_adduct(adduct, check=False).with_formula(formula)
        except MsgptError:
            continue
        metadata = {**new.metadata, "formula_rank": "", "formula_score": "",
                    "formula_source": "spectral library identification"}
        out.append(replace(new, metadata=metadata))
    return out


__all__ = ["LIBRARY_PRIOR", "MASS_TRACK", "SPECTRAL_HITS", "UNDRAWN_PRIOR", "analog_references", "analog_rerank",
           "analog_weights", "charge_fits",
           "general_ion_types", "identified_formula_spectra", "identified_formulas", "is_identification",
           "library_formula_spectra", "library_ion_types", "library_structures", "mass_track_spectra", "search_analogs", "search_spectrum",
           "spectral_structures", "split_libraries"]
