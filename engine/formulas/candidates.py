"""Molecular formula and ion type candidates for a precursor whose formula is not known.

Real LC-MS/MS runs carry no formula. For a spectrum (or a run's feature) this module lists the
formulas and ion types its precursor m/z allows and ranks them, as SIRIUS and BUDDY do, offline:

1. **Ion types**: the record's adduct when it has one; else :data:`DEFAULT_ION_TYPES`: ``[M+H]+``, ``[M+Na]+``,
   ``[M+NH4]+``, ``[M+K]+`` (positive) or ``[M-H]-``, ``[M+HCOO]-``, ``[M+CH3COO]-``, ``[M+Cl]-``,
   ``[M-H2O-H]-`` (negative), or those asked for (``[M-H2O+H]+``, ``[M]+``). The neutral mass of each follows from
   the precursor m/z; an ``[M]+`` formula is an even-electron cation's (:func:`cation_decompositions`).
2. **Formulas**: :func:`engine.formulas.decompose.decompose_mass` within ``max(ppm, da)`` of the neutral
   mass (default 10 ppm or 1 mDa), over C, H, N, O, P, S, F, Cl, Br, I, Si with element limits,
   LEWIS/SENIOR and the Seven Golden Rules' ratios.
3. **Score** of a (formula, ion type), a log-odds sum of terms (the ``terms`` of a candidate):

   ``mass``       the precursor's mass error (``-w * ppm^2``);
   ``prior``      how ordinary the formula is in the molecule corpus (562k structures): the
                  frequency of its pattern of elements beyond CHNO, of its element counts at its
                  mass, of its H/C, N/C, O/C and RDBE/C, and the number of corpus structures with
                  exactly this formula (isomers; the structures themselves are not needed);
   ``fragments``  how well subformulas of the formula explain the fragment peaks
                  (:func:`engine.spectra.annotate.annotate_peaks`): the explained share of the (square-root)
                  fragment intensity and of the fragment peaks, the mass errors of the explained
                  peaks, and, against chance, the share the same peaks shifted by ±23 mDa would have
                  explained (large formulas explain anything);
   ``ion_type``   the ion type's frequency (log prior);
   ``isotopes``   with a survey scan: the precursor's isotope pattern M..M+5 against the formula's
                  (:mod:`engine.spectra.isotopes`; Cl/Br/S signatures), weight ``isotope_weight``; one
                  detector factor on all ratios is allowed (``isotope_ratio_sd``: a saturated M, weak M+1),
                  so the pattern's shape decides more than the M+1 level; the ratios' absolute error
                  follows the scan's detection limit; no isotope term when the scan has no M+1 peak
                  or an overlapped one (the table's notes say so);
   ``adducts``    with a survey scan: ``adduct_weight`` for each other ion type of the same
                  molecule seen in it (an ``[M+Na]+`` beside an ``[M+H]+`` 21.98 Da lower).

   The weights of ``mass``, ``prior`` and ``fragments`` were learned by a conditional logit on
   FOLD=train MassBank spectra (``python -m training.calibration.formula_scorer``; never FOLD=val) and ship in
   ``resources/formula_scorer.json``, with the corpus statistics. Ranking runs in two stages: all
   formulas by mass, prior and ion type, then the best ``max_scored`` per ion type
   (default 100; 60 before issue #56 lost thiophosphates such as guthion whose precursor read 6 ppm off) also
   by their fragments (and MS1); the table holds the latter. Its notes say what the
   isotopes and diagnostic fragments show (:mod:`engine.formulas.elements`: Cl or Br present or absent; an
   HCl loss, a PO3- ion).
4. The candidates' probabilities are a softmax of the total scores over the table.

:func:`rank_formulas` gives a :class:`FormulaTable` (what the app shows and the CLI runs the top
``k`` of); :func:`isotope_comparison` the observed and theoretical MS1 isotope peaks of one candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.chem.adducts import (
    COMMON_ION_TYPES,
    neutral_mass_from_precursor,
    parse_adduct,
    precursor_mz_from_neutral,
)
from engine.chem.formula import (
    ELEMENTS,
    format_formula,
    formula_vector,
    parse_formula,
    vector_to_counts,
)
from engine.errors import AdductError, Cancelled, ConfigError, SpectrumError
from engine.formulas.decompose import (
    DecompositionConfig,
    decompose_mass,
    rdbe_of,
)
from engine.formulas.elements import ElementEvidence, combine, fragment_elements, isotope_elements
from engine.formulas.evidence import fragment_features_many, fragment_peaks
from engine.formulas.prior import element_mass_array, pattern_codes
from engine.formulas.scorer import FormulaScorer, default_scorer, fragment_terms
from engine.spectra.annotate import DEFAULT_TOL_DA as FRAGMENT_TOL_DA
from engine.spectra.annotate import DEFAULT_TOL_PPM as FRAGMENT_TOL_PPM
from engine.spectra.annotate import ION_TYPES, get_ion_type
from engine.spectra.isotopes import (
    IsotopeMatch,
    isotope_envelope,
    isotope_patterns_many,
    isotope_scores_many,
    match_isotopes,
    observed_isotopes,
    observed_pattern,
)
from engine.spectra.spectrum import Spectrum, precursor_precision_da
from engine.timing import staged

#: Ion types ranked for a precursor without one: every common ion type (COMMON_ION_TYPES) but two. The in-source water
#: loss [M-H2O+H]+ put a wrong formula first for 1 of 150 FOLD=val [M+H]+ structures on simulated runs
#: (benchmarks/formula_benchmark_runs.py, QTOF and Orbitrap; the others changed no Top-1, docs/ion_types.md). A
#: permanent cation [M]+ of formula F is the same ion as [M'+H]+ of F - H (only the prior tells them apart): its twin
#: of every [M+H]+ formula took one of the formulas run and ~5% of the probability, which kept precursors from the
#: run recalibration; give it (--ion-types, ADDUCT=) where cations are expected.
DEFAULT_ION_TYPES = {
    "positive": tuple(a for a in COMMON_ION_TYPES["positive"] if a not in ("[M-H2O+H]+", "[M]+")),
    "negative": COMMON_ION_TYPES["negative"],
}
#: Ion types whose formula is the ion's own (a permanently charged cation): decomposed as ``[M'+H]+`` plus one H.
CATION_ION_TYPES = ("[M]+",)
#: Other ion types of the same molecule looked for in a survey scan (co-detected adducts).
PARTNER_ION_TYPES = {
    "positive": ("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M+K]+"),
    "negative": ("[M-H]-", "[M+Cl]-", "[M+HCOO]-", "[M+CH3COO]-"),
}
#: The precursor scatter (ppm) the shipped scorer's mass weight was learned with (training.calibration.formula_scorer).
SCORER_SIGMA_PPM = 3.0
TERMS = ("mass", "prior", "fragments", "ion_type", "isotopes", "adducts")


@dataclass(frozen=True)
class FormulaConfig:
    """How formula candidates are found and scored (see the module notes)."""

    ppm: float = field(default=10.0, metadata={"help": "precursor mass tolerance, ppm"})
    mass_sigma_ppm: float = field(default=SCORER_SIGMA_PPM, metadata={
        "help": "precursor m/z scatter the mass term assumes, ppm (the shipped weights were learned at 3 ppm)"})
    da: float = field(default=0.001, metadata={"help": "precursor mass tolerance, Da (the larger wins)"})
    ion_types: tuple[str, ...] | None = field(default=None, metadata={
        "help": "ion types to consider when the record has none (None: DEFAULT_ION_TYPES of the spectrum's polarity)"})
    decomposition: DecompositionConfig = field(default_factory=DecompositionConfig)
    max_scored: int = field(default=100, metadata={"help": "formulas per ion type scored by their fragments"})
    per_pattern: int = field(default=0, metadata={
        "help": "also scored by their fragments: the best formulas of each element pattern beyond CHNO, per ion type"})
    max_mass: float = field(default=1000.0, metadata={
        "help": "largest neutral mass decomposed, Da (above it formulas are too many to rank: give the formula)"})
    fragment_tol_ppm: float = FRAGMENT_TOL_PPM
    fragment_tol_da: float = FRAGMENT_TOL_DA
    ms1_tol_ppm: float = field(default=10.0, metadata={"help": "survey peaks (isotopes, adducts), ppm"})
    ms1_tol_da: float = field(default=0.005, metadata={"help": "survey peaks (isotopes, adducts), Da"})
    isotope_peaks: int = field(default=6, metadata={"help": "isotope peaks compared (M .. M+5: Cl3 and Br2 show at M+4)"})
    isotope_weight: float = field(default=1.0, metadata={"help": "weight of the isotope pattern score"})
    isotope_abs_error: float = field(default=0.0, metadata={
        "help": "absolute error of the isotope ratios (0: from the survey scan's detection limit)"})
    isotope_ratio_sd: float = field(default=0.25, metadata={
        "help": "log-sd of one detector factor on all isotope ratios (0: ratios taken as measured)"})
    adduct_weight: float = field(default=2.0, metadata={"help": "score per co-detected ion type of the molecule"})
    element_evidence: bool = field(default=True, metadata={
        "help": "note what the isotope pattern and diagnostic fragments show about Cl, Br, F, P, S and I"})

    def __post_init__(self):
        for name in ("ppm", "da", "fragment_tol_ppm", "fragment_tol_da", "ms1_tol_ppm", "ms1_tol_da",
                     "isotope_weight", "adduct_weight", "max_mass", "mass_sigma_ppm", "isotope_ratio_sd",
                     "isotope_abs_error"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ConfigError(f"`{name}` must be a number >= 0, got {value!r}.")
        if not self.mass_sigma_ppm > 0:
            raise ConfigError(f"`mass_sigma_ppm` must be > 0, got {self.mass_sigma_ppm!r}.")
        if self.ppm == 0 and self.da == 0:
            raise ConfigError("`ppm` and `da` are both 0; give a precursor mass tolerance > 0.")
        if isinstance(self.per_pattern, bool) or not isinstance(self.per_pattern, int) or self.per_pattern < 0:
            raise ConfigError(f"`per_pattern` must be a whole number >= 0, got {self.per_pattern!r}.")
        for name in ("max_scored", "isotope_peaks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a whole number >= 1, got {value!r}.")
        if self.ion_types is not None:
            names = []
            for ion in self.ion_types:
                try:
                    name = get_ion_type(ion).name
                except AdductError as e:
                    raise ConfigError(f"`ion_types`: {e}") from None
                names.append(name)
            if not names:
                raise ConfigError("`ion_types` is empty; give at least one, e.g. [M+H]+.")
            object.__setattr__(self, "ion_types", tuple(dict.fromkeys(names)))

    def tolerance(self, mz: float) -> float:
        return max(self.ppm * 1e-6 * mz, self.da)


@dataclass(frozen=True)
class FormulaCandidate:
    """One (formula, ion type) for a precursor, with its score terms."""

    rank: int
    formula: str  # neutral molecular formula (Hill)
    ion_type: str
    neutral_mass: float
    theoretical_mz: float
    ppm_error: float  # (observed - theoretical) / theoretical * 1e6
    rdbe: float
    terms: Mapping[str, float]  # TERMS -> value; they add up to `score`
    score: float
    probability: float  # softmax of the scores over the table
    explained_intensity: float  # share of the (square-root) fragment intensity explained
    n_explained: int  # fragment peaks explained
    isomers: int  # structures of the molecule corpus with this formula
    supported: bool | None = None  # whether the model can run this ion type (None: not asked)


@dataclass(frozen=True)
class FormulaTable:
    """Ranked formula candidates of one precursor."""

    spectrum_id: str
    precursor_mz: float
    ion_types: tuple[str, ...]
    candidates: tuple[FormulaCandidate, ...]
    n_decompositions: int  # formulas found before the fragment stage
    has_ms1: bool
    n_fragment_peaks: int
    notes: tuple[str, ...] = ()
    elements: ElementEvidence = field(default_factory=ElementEvidence)  # what isotopes and fragments show (engine.formulas.elements)

    def runnable(self, k: int, supported_adducts: Sequence[str] | None = None) -> tuple[FormulaCandidate, ...]:
        """The ``k`` best candidates of ion types the model can run: those of ``supported_adducts`` when given, else
        those the table did not mark unsupported (every one of a table ranked without ``supported_adducts``).
        ``msgpt predict``, the app's Run and the evaluations elucidate these."""
        if supported_adducts is not None:
            pool = [c for c in self.candidates if c.ion_type in supported_adducts]
        else:
            pool = [c for c in self.candidates if c.supported is not False]
        return tuple(pool[:k])

    def why_none_runnable(self, supported_adducts: Sequence[str], ppm: float) -> str:
        """Why :meth:`runnable` gives nothing, in words a user can act on (``ppm``: the precursor tolerance used)."""
        tried = ", ".join(self.ion_types)
        if self.candidates:
            return (f"no formula candidate of an ion type the model supports ({', '.join(supported_adducts)}; "
                    f"tried {tried})")
        why = [note for note in self.notes if not note.startswith("no fragments")]
        if why:
            return f"no formula candidate: {'; '.join(why)}"
        return f"no formula candidate within {ppm:g} ppm for {tried}"


def default_ion_types(spectrum: Spectrum, config: FormulaConfig = FormulaConfig()) -> tuple[str, ...]:
    """The ion types to consider for ``spectrum`` (its own adduct, else ``config``'s, else by polarity)."""
    if spectrum.adduct:
        return (get_ion_type(spectrum.adduct).name,)
    polarity = spectrum.polarity or "positive"
    if config.ion_types is not None:
        chosen = tuple(a for a in config.ion_types if ION_TYPES[a].charge * (1 if polarity == "positive" else -1) > 0)
        if not chosen:
            raise SpectrumError(f"none of the ion types {', '.join(config.ion_types)} is {polarity}; "
                                f"the spectrum is {polarity} mode")
        return chosen
    return DEFAULT_ION_TYPES[polarity]


def _ion_counts(neutral: Mapping[str, int], ion_type: str) -> dict[str, int]:
    return parse_adduct(ion_type).ion_counts(neutral)


def _partners(neutral_mass: float, ion_type: str, polarity: str, ms1, config: FormulaConfig) -> int:
    """Other ion types of the molecule seen in the survey peaks."""
    if ms1 is None or not len(ms1.mz):
        return 0
    found = 0
    for other in PARTNER_ION_TYPES[polarity]:
        if other == ion_type:
            continue
        target = precursor_mz_from_neutral(neutral_mass, other)
        tol = max(config.ms1_tol_ppm * 1e-6 * target, config.ms1_tol_da)
        lo, hi = np.searchsorted(ms1.mz, [target - tol, target + tol])
        found += int(hi > lo)
    return found


@dataclass(frozen=True, eq=False)
class _Stage1:
    """One ion type's formulas within tolerance, their mass + prior score and (for the element notes) isotope score."""

    ion_type: str
    vectors: np.ndarray  # (N, 14)
    masses: np.ndarray
    theo_mz: np.ndarray
    ppm: np.ndarray
    features: dict
    stage1: np.ndarray
    isotopes: np.ndarray | None  # the isotope score of each formula (unweighted)


def _stage1(spectrum: Spectrum, ion_type: str, neutral: float, tol: float, config: FormulaConfig, scorer: FormulaScorer,
            observed) -> _Stage1:
    """Every formula of ``ion_type`` (the spectrum's own, or the decompositions of ``neutral``) scored by mass and
    prior, and by its isotopes when a usable survey pattern is ``observed`` (what :mod:`engine.formulas.elements`
    reads the elements from)."""
    if spectrum.formula:
        v = formula_vector(parse_formula(spectrum.formula))[None, :]
        masses = v @ element_mass_array()
        keep = np.abs(masses - neutral) <= tol
        vectors, masses = v[keep], masses[keep]
    elif ion_type in CATION_ION_TYPES:
        vectors, masses = cation_decompositions(neutral, tol, config)
    else:
        vectors, masses = decompose_mass(neutral, tol, config.decomposition)
    adduct = parse_adduct(ion_type)
    theo_mz = (adduct.n_molecules * masses + adduct.mass_delta) / abs(adduct.charge)  # precursor_mz_from_neutral
    ppm = (spectrum.precursor_mz - theo_mz) / theo_mz * 1e6
    features = scorer.prior.features(vectors, masses)
    features["mass_error"] = (ppm / 10.0 * SCORER_SIGMA_PPM / config.mass_sigma_ppm) ** 2
    terms = scorer.linear(scorer.stage1, features, len(vectors))
    stage1 = terms["mass"] + terms["prior"]
    isotopes = None
    if observed is not None and len(vectors):
        isotopes = isotope_scores_many(isotope_patterns_many(vectors, ion_type, config.isotope_peaks), observed,
                                       config.isotope_ratio_sd)
    return _Stage1(ion_type, vectors, masses, theo_mz, ppm, features, stage1, isotopes)


def cation_decompositions(mass: float, tol: float, config: FormulaConfig) -> tuple[np.ndarray, np.ndarray]:
    """Formulas ``F`` of an even-electron cation (``[M]+``: quaternary ammonium, phosphonium, flavylium) of mass
    ``mass``: the decompositions ``M'`` of ``mass - H`` that obey the neutral rules, plus one H (``F = M' + H``, the
    same atoms as the ``[M'+H]+`` ion). Decomposing ``mass`` itself would give radical cations ``M+•``, which
    electrospray rarely makes and the model does not run (:mod:`engine.model.ion_mapping`)."""
    h = element_mass_array()[ELEMENTS.index("H")]
    if mass - h <= 0:
        return np.zeros((0, len(ELEMENTS)), dtype=np.int64), np.zeros(0)
    vectors, masses = decompose_mass(mass - h, tol, config.decomposition)
    vectors = vectors.copy()
    vectors[:, ELEMENTS.index("H")] += 1
    return vectors, masses + h


def shortlist(stage1: np.ndarray, vectors: np.ndarray, max_scored: int, per_pattern: int = 0) -> np.ndarray:
    """Indices of the formulas the fragment stage scores, best stage-1 score first: the ``max_scored`` best, and the
    ``per_pattern`` best of each element pattern beyond C, H, N, O (:func:`engine.formulas.prior.pattern_codes`), so
    that the corpus prior cannot push a whole composition out (thiophosphates: P and S; issue #56)."""
    order = np.argsort(-np.asarray(stage1), kind="stable")
    keep = np.zeros(len(order), dtype=bool)
    keep[:max_scored] = True
    if per_pattern > 0 and len(order):
        codes = pattern_codes(np.asarray(vectors)[order])
        by_code = np.argsort(codes, kind="stable")  # positions grouped by pattern, best first within each
        sorted_codes = codes[by_code]
        starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        within = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
        keep[by_code[within < per_pattern]] = True
    return order[keep]


class PrecursorPrecisionError(SpectrumError):
    """The precursor m/z is written to fewer decimals (``precision`` Da) than ranking formulas needs."""

    def __init__(self, message: str, precision: float):
        super().__init__(message)
        self.precision = precision


@staged("formula ranking")
def rank_formulas(
    spectrum: Spectrum,
    *,
    ms1=None,
    config: FormulaConfig = FormulaConfig(),
    supported_adducts: Iterable[str] | None = None,
    scorer: FormulaScorer | None = None,
    cancel: Callable[[], bool] | None = None,
) -> FormulaTable:
    """Formula and ion type candidates of a precursor, best first (module notes).

    ``ms1`` is the precursor's :class:`~engine.spectra.features.MS1Evidence` (isotopes, co-detected
    adducts), when the run has survey scans. A spectrum with a formula keeps it: only the ion
    types are ranked (those whose m/z fits). ``supported_adducts`` marks each candidate
    ``supported`` or not (the ion types a model can run).
    """
    scorer = scorer or default_scorer()
    notes = []
    precision = precursor_precision_da(spectrum)
    if precision > config.tolerance(spectrum.precursor_mz) and not spectrum.formula:
        raise PrecursorPrecisionError(
            f"the precursor m/z {spectrum.precursor_mz:g} is written to {precision:g} Da; formulas need it to "
            f"{config.ppm:g} ppm: give the molecular formula (FORMULA=, or --formula)", precision)
    ion_types = default_ion_types(spectrum, config)
    polarity = "positive" if ION_TYPES[ion_types[0]].charge > 0 else "negative"
    supported = None if supported_adducts is None else set(supported_adducts)
    tol = max(config.tolerance(spectrum.precursor_mz), precision)
    frag_mz, frag_w = fragment_peaks(spectrum)
    if frag_mz.size == 0:
        notes.append("no fragments: formulas ranked by mass, prior and MS1 only")
    isotope_problem = None if ms1 is None else unusable_isotopes(ms1, spectrum.precursor_mz, config)
    if isotope_problem:
        notes.append(f"isotopes not used: {isotope_problem}")
    shown = ElementEvidence()
    if config.element_evidence:
        shown = fragment_elements(spectrum.mz, spectrum.intensity, spectrum.precursor_mz, polarity,
                                  config.fragment_tol_ppm, config.fragment_tol_da)
    observed = None
    if config.element_evidence and ms1 is not None and not isotope_problem:
        observed = observed_isotopes(ms1, spectrum.precursor_mz, 1 if polarity == "positive" else -1,
                                     config.isotope_peaks, config.ms1_tol_ppm, config.ms1_tol_da, config.isotope_abs_error)
    too_heavy: list[str] = []
    stages = []
    for ion_type in ion_types:
        neutral = neutral_mass_from_precursor(spectrum.precursor_mz, ion_type)
        if not spectrum.formula and neutral > config.max_mass:
            too_heavy.append(f"{neutral:.1f} Da as {ion_type}")
        elif spectrum.formula or neutral > 0:
            stages.append(_stage1(spectrum, ion_type, neutral, tol, config, scorer, observed))
    n_decompositions = sum(len(st.vectors) for st in stages)
    with_iso = [st for st in stages if st.isotopes is not None]
    if with_iso:
        shown = combine(isotope_elements(np.vstack([st.vectors for st in with_iso]),
                                         np.concatenate([st.isotopes for st in with_iso]), observed), shown)
    rows = []  # (ion_type, vector, mass, theoretical m/z, ppm, stage-1 features)
    for st in stages:
        for i in shortlist(st.stage1, st.vectors, config.max_scored, config.per_pattern):
            rows.append((st.ion_type, st.vectors[i], float(st.masses[i]), float(st.theo_mz[i]), float(st.ppm[i]),
                         {k: float(np.asarray(f)[i]) for k, f in st.features.items()}))
    notes.extend(shown.notes)
    if too_heavy:
        notes.append(f"neutral mass above {config.max_mass:g} Da ({', '.join(too_heavy)}), where formulas are too many "
                     f"to rank; give the formula")
    if cancel is not None and cancel():
        raise Cancelled("Cancelled by the user.")
    fragments = fragment_features_many(frag_mz, frag_w, np.array([r[1] for r in rows]).reshape(-1, len(ELEMENTS)),
                                       [r[0] for r in rows], config.fragment_tol_ppm, config.fragment_tol_da)
    stage2 = fragment_terms(fragments, np.array([r[2] for r in rows]))
    candidates = []
    for k, (ion_type, vector, mass, theo_mz, ppm, feats) in enumerate(rows):
        if cancel is not None and cancel():
            raise Cancelled("Cancelled by the user.")
        counts = vector_to_counts(vector)
        frag = {name: values[k] for name, values in fragments.items()}
        feats = {**feats, **{name: values[k] for name, values in stage2.items()}}
        t = scorer.linear(scorer.stage2, {name: np.array([value]) for name, value in feats.items()}, 1)
        terms = {"mass": float(t["mass"][0]), "prior": float(t["prior"][0]), "fragments": float(t["fragments"][0]),
                 "ion_type": scorer.ion_prior(ion_type), "isotopes": 0.0, "adducts": 0.0}
        if ms1 is not None:
            match = None if isotope_problem else _isotopes(counts, ion_type, spectrum.precursor_mz, ms1, config)
            if match is not None:
                terms["isotopes"] = config.isotope_weight * match.score
            terms["adducts"] = config.adduct_weight * _partners(mass, ion_type, polarity, ms1, config)
        candidates.append(dict(
            formula=format_formula(counts), ion_type=ion_type, neutral_mass=mass, theoretical_mz=theo_mz,
            ppm_error=ppm, rdbe=float(rdbe_of(vector[None, :])[0]), terms=terms, score=sum(terms.values()),
            explained_intensity=float(frag["frag_intensity"]), n_explained=int(frag["n_explained"]),
            isomers=int(scorer.prior.isomers(vector[None, :])[0]),
            supported=None if supported is None else ion_type in supported,
        ))
    candidates.sort(key=lambda c: (-c["score"], abs(c["ppm_error"]), c["formula"], c["ion_type"]))
    scores = np.array([c["score"] for c in candidates])
    probs = np.exp(scores - scores.max()) if len(scores) else scores
    probs = probs / probs.sum() if len(scores) else probs
    table = tuple(FormulaCandidate(rank=i + 1, probability=float(p), **c) for i, (c, p) in enumerate(zip(candidates, probs)))
    if not table and not too_heavy:
        notes.append(f"no formula within {tol:.4g} Da of the neutral mass for {', '.join(ion_types)}")
    return FormulaTable(spectrum_id=spectrum.id, precursor_mz=spectrum.precursor_mz, ion_types=ion_types,
                        candidates=table, n_decompositions=n_decompositions, has_ms1=ms1 is not None,
                        n_fragment_peaks=int(frag_mz.size), notes=tuple(notes), elements=shown)


def unusable_isotopes(ms1, precursor_mz: float, config: FormulaConfig = FormulaConfig()) -> str | None:
    """Why the survey scan's isotope pattern of the precursor cannot be scored, or None when it can.

    Without an M+1 peak (a weak precursor, or MS1 centroided and trimmed) the ratios say nothing reliable;
    an M+1 above 80% of M (no formula below 1000 Da has one) means another ion overlaps.
    """
    anchor_mz, anchor = observed_pattern(ms1.mz, ms1.intensity, np.array([precursor_mz]), config.ms1_tol_ppm,
                                         config.ms1_tol_da)
    if not anchor[0] > 0:
        return "the survey scan holds no precursor peak"
    _, envelope = isotope_envelope(ms1.mz, ms1.intensity, float(anchor_mz[0]), 2)
    ratio = envelope[1] / anchor[0]
    if ratio <= 0:
        return "no M+1 peak in the survey scan (a weak precursor, or MS1 centroided and trimmed)"
    if ratio > 0.8:
        return f"M+1 at {ratio:.0%} of M: another ion overlaps the pattern"
    return None


def _isotopes(counts: Mapping[str, int], ion_type: str, precursor_mz: float, ms1, config: FormulaConfig) -> IsotopeMatch | None:
    try:
        ion = _ion_counts(counts, ion_type)
    except AdductError:
        return None
    return match_isotopes(ion, parse_adduct(ion_type).charge, ms1.mz, ms1.intensity, precursor_mz,
                          n_peaks=config.isotope_peaks, tol_ppm=config.ms1_tol_ppm, tol_da=config.ms1_tol_da,
                          ratio_sd=config.isotope_ratio_sd, abs_error=config.isotope_abs_error)


def isotope_comparison(
    candidate: FormulaCandidate | tuple[str, str], ms1, precursor_mz: float | None = None,
    config: FormulaConfig = FormulaConfig(),
) -> IsotopeMatch | None:
    """Observed vs theoretical MS1 isotope peaks of a candidate (or ``(formula, ion type)``).

    ``None`` without survey peaks or when they hold no precursor peak.
    """
    if ms1 is None:
        return None
    formula, ion_type = (candidate.formula, candidate.ion_type) if isinstance(candidate, FormulaCandidate) else candidate
    mz = precursor_mz if precursor_mz is not None else ms1.precursor_mz
    return _isotopes(parse_formula(formula), get_ion_type(ion_type).name, mz, ms1, config)


def with_formula_candidate(spectrum: Spectrum, candidate: FormulaCandidate,
                           elements: ElementEvidence | None = None) -> Spectrum:
    """A copy of ``spectrum`` with the candidate's formula and ion type, and its rank and score noted (and what the
    table's isotopes and fragments showed of the elements, ``formula_evidence``, when ``elements`` is given)."""
    import dataclasses

    metadata = {**spectrum.metadata, "formula_rank": str(candidate.rank),
                "formula_score": f"{candidate.probability:.4f}", "formula_source": "ranked candidates"}
    if elements is not None and elements.notes:
        metadata["formula_evidence"] = "; ".join(elements.notes)
    new = dataclasses.replace(spectrum, metadata=metadata).with_adduct(candidate.ion_type, check=False)
    return new.with_formula(candidate.formula, check=False)
