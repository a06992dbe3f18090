"""The elucidation pipeline: spectrum → posterior π → band queries → decoder samples → ranking.

Long work is a generator of progress events that ends with its result (``return`` value of the
generator); the CLI shows the events with tqdm, the GUI with a progress bar. A ``cancel`` callable
is checked between steps and raises :class:`~engine.errors.Cancelled`; a cancelled spectrum
produces no result.

:class:`SpectrumSession` keeps one spectrum's posterior and every sample drawn so far (by its
identity ``(i, j)``), so the GUI can grow the pool (only the new samples are drawn), shrink it
(re-rank a subset, nothing drawn) or change the band (re-query). ``run(params, plan=...)`` draws from
a :class:`~engine.model.querying.QueryPlan` instead of the band (explicit thresholds, outer-band density
ratios or one fixed fingerprint); ``msgpt-eval`` runs the paper's ablations and the oracle that way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

import numpy as np
import torch

from engine.chem import molecules as chem
from engine.chem.formula import formula_vector, parse_formula
from engine.elucidation.edits import EDIT_KEEP, EDIT_PARENTS, edit_rounds, editable_formula
from engine.elucidation.libraries import (
    LIBRARY_PRIOR,
    UNDRAWN_PRIOR,
    analog_rerank,
    analog_weights,
    library_structures,
    search_spectrum,
    spectral_structures,
)
from engine.elucidation.ranking import (
    AnalogRerank,
    Candidate,
    CandidatePool,
    FragmentRerank,
    reference_rank,
)
from engine.errors import ConfigError, MsgptError, SpectrumError
from engine.model.bundle import ModelBundle
from engine.model.confidence import with_confidence
from engine.model.featurize import collate, featurize_spectrum
from engine.model.forward import ForwardScorer, PeakSettings
from engine.model.ion_mapping import MappedSpectrum, map_spectrum, runnable_ion_types
from engine.model.querying import QueryPlan, band_thresholds, build_queries, check_kappa
from engine.model.sampling import DECODING_MODES, QueryRequest, sample_queries
from engine.model.scoring import DEFAULT_RANKING, FingerprintScorer, check_ranking
from engine.model.suspect_confidence import PRESENT_DEFAULT, check_present
from engine.progress import CancelFn, check_cancel
from engine.spectra.spectrum import (
    SkippedRecord,
    Spectrum,
    check_formula_matches_precursor,
    with_warning,
)
from engine.spectral_library import SpectralMatches
from engine.timing import staged, timed

# settings that never change the samples
RANKING_ONLY = ("ranking", "library_prior", "undrawn_prior", "effort", "fragment_score", "analog_score", "edit_rounds",
                "suspects_present")  # the last changes only the confidence
MAX_EDIT_ROUNDS = 10
EFFORTS = ("standard", "deep")  # deep: engine.elucidation.deep refines the standard pool (about 3.4x the time)
EDIT_ROUNDS = 3  # standard effort's rounds of isomer edits (measured: docs/evidence/standard_edits.md)
EDIT_STOP_TOP = 10  # an edit round none of whose edits enters the best this many proposals ends the rounds
# heavy atoms of a formula above which standard effort makes no edits: on 120 train-unseen spectra, edits put 12 of
# their 13 truths into pools of formulas of at most 25 heavy atoms, and above that cost more than the sampling
STANDARD_EDIT_MAX_ATOMS = 25


@dataclass(frozen=True)
class QueryParams:
    """How candidates are drawn. Defaults are the paper's: κ ∈ [0.95, 1.50], M=20, N=5 (B=100)."""

    kappa_min: float = field(default=0.95, metadata={"help": "sparse end of the density band"})
    kappa_max: float = field(default=1.50, metadata={"help": "dense end of the density band"})
    groups: int = field(default=20, metadata={"help": "M, number of thresholds (query groups)"})
    samples_per_group: int = field(default=5, metadata={"help": "N, samples drawn per query group"})
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 0.95
    seed: int = 0
    max_new_tokens: int | None = None
    use_adapter: bool = True
    ranking: str = field(default=DEFAULT_RANKING, metadata={
        "help": "fingerprint: fingerprint score; combined: + log count; frequency: the paper's generation count"})
    decoding: str = field(default="formula", metadata={
        "help": "formula: only strings with exactly the formula's heavy atoms are drawn; free: the paper's sampling"})
    library_prior: float = field(default=LIBRARY_PRIOR, metadata={
        "help": "log-odds bonus of a structure a library holds in the fingerprint rankings"})
    undrawn_prior: float = field(default=UNDRAWN_PRIOR, metadata={
        "help": "added to that for a library structure no sample drew (not a suspect, not identified): how much "
                "better than the predictions it must score to rank above them"})
    effort: str = field(default="standard", metadata={
        "help": "standard: B samples; deep: then refine the best candidates (engine.elucidation.deep)"})
    fragment_score: bool = field(default=True, metadata={
        "help": "add the bundle's forward-model fragment score to the ranking, as its measurement chose"})
    analog_score: bool = field(default=True, metadata={
        "help": "add the analog score (likeness to the compounds of the spectrum's analog hits in the spectral "
                "libraries) to the ranking, as the bundle's measurement chose"})
    edit_rounds: int = field(default=EDIT_ROUNDS, metadata={
        "help": "rounds of isomer edits after sampling: the best drawn candidates' isomers one move away (a "
                "substituent moved, two atoms swapped) whose fingerprints score best join the pool "
                "(engine.elucidation.edits; 0: none)"})
    suspects_present: float = field(default=PRESENT_DEFAULT, metadata={
        "help": "the share of your suspect lists' formula matches that are their compounds (a suspect rank 1's "
                "confidence follows it, engine.model.suspect_confidence)"})

    def __post_init__(self):
        check_kappa(self.kappa_min, "kappa_min")
        check_kappa(self.kappa_max, "kappa_max")
        if self.kappa_min > self.kappa_max:
            raise ConfigError(f"`kappa_min` ({self.kappa_min}) must not exceed `kappa_max` ({self.kappa_max}).")
        for name in ("groups", "samples_per_group", "top_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {v!r}.")
        if self.groups == 1 and self.kappa_min != self.kappa_max:
            raise ConfigError(
                f"One query group (M=1) is a point query at a single κ, but the band is "
                f"[{self.kappa_min}, {self.kappa_max}]; give the same κ twice (e.g. --band 1.0 1.0)."
            )
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError(f"`temperature` must be > 0, got {self.temperature!r}.")
        if not (0 < self.top_p <= 1):
            raise ConfigError(f"`top_p` must be in (0, 1], got {self.top_p!r}.")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"`seed` must be a non-negative integer, got {self.seed!r}.")
        check_ranking(self.ranking)
        if self.decoding not in DECODING_MODES:
            raise ConfigError(f"`decoding` must be one of {', '.join(DECODING_MODES)}, got {self.decoding!r}.")
        if not isinstance(self.edit_rounds, int) or isinstance(self.edit_rounds, bool) or not (
                0 <= self.edit_rounds <= MAX_EDIT_ROUNDS):
            raise ConfigError(f"`edit_rounds` must be an integer from 0 to {MAX_EDIT_ROUNDS}, "
                              f"got {self.edit_rounds!r}.")
        check_present(self.suspects_present)
        if self.effort not in EFFORTS:
            raise ConfigError(f"`effort` must be one of {', '.join(EFFORTS)}, got {self.effort!r}.")
        for name in ("library_prior", "undrawn_prior"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"`{name}` must be a finite number, got {getattr(self, name)!r}.")

    @property
    def pool_size(self) -> int:
        """B = M × N."""
        return self.groups * self.samples_per_group

    @staticmethod
    def samples_for_pool_size(pool_size: int, groups: int) -> int:
        """N for a requested B; B must be a multiple of M."""
        if not isinstance(pool_size, int) or pool_size < groups:
            raise ConfigError(f"Pool size B={pool_size!r} must be an integer ≥ M={groups}.")
        if pool_size % groups:
            lo = pool_size // groups * groups
            raise ConfigError(
                f"Pool size B={pool_size} is not a multiple of M={groups} query groups (B = M × N); "
                f"use {lo} or {lo + groups}."
            )
        return pool_size // groups

    def sampling_key(self) -> tuple:
        """Everything that decides which samples exist, except N: equal keys share samples."""
        d = asdict(self)
        for name in ("samples_per_group", *RANKING_ONLY):
            d.pop(name)
        return tuple(sorted(d.items()))

    def plan_sampling_key(self, plan: QueryPlan) -> tuple:
        """The same for samples drawn from ``plan`` (the band settings do not matter then)."""
        d = asdict(self)
        for name in ("samples_per_group", "kappa_min", "kappa_max", "groups", *RANKING_ONLY):
            d.pop(name)
        return ("plan", plan.key(), tuple(sorted(d.items())))

    def describe(self) -> str:
        return (
            f"kappa=[{self.kappa_min}, {self.kappa_max}] M={self.groups} N={self.samples_per_group} "
            f"B={self.pool_size} T={self.temperature} top_k={self.top_k} top_p={self.top_p} "
            f"seed={self.seed} adapter={'on' if self.use_adapter else 'off'} decoding={self.decoding} "
            f"ranking={self.ranking}" + (f" library_prior={self.library_prior:g}" if self.library_prior else "")
            + (f" undrawn_prior={self.undrawn_prior:g}" if self.undrawn_prior != UNDRAWN_PRIOR else "")
            + (f" effort={self.effort}" if self.effort != "standard" else "")
            + ("" if self.fragment_score else " fragment_score=off")
            + ("" if self.analog_score else " analog_score=off")
            + (f" edit_rounds={self.edit_rounds}" if self.edit_rounds != EDIT_ROUNDS else "")
            + (f" suspects_present={self.suspects_present:g}" if self.suspects_present != PRESENT_DEFAULT else "")
        )


# -- events ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpectrumStarted:
    index: int
    spectrum: Spectrum


@dataclass(frozen=True)
class SamplesDrawn:
    index: int
    done: int  # samples drawn so far for this spectrum in this run
    total: int  # samples to draw in this run


@dataclass(frozen=True)
class RankingUpdated:
    """The ranking so far (``result.partial`` while samples are still being drawn). ``ranking`` is the result or a
    function that ranks the pool when ``result`` is first read, before the run goes on: a consumer that only
    follows the progress (``msgpt predict``) ranks nothing until the end."""

    index: int
    ranking: SpectrumResult | Callable[[], SpectrumResult] = field(repr=False)

    @cached_property
    def result(self) -> SpectrumResult:
        return self.ranking() if callable(self.ranking) else self.ranking


@dataclass(frozen=True)
class SpectrumFinished:
    index: int
    result: SpectrumResult


@dataclass(frozen=True)
class SpectrumSkipped:
    index: int
    record: SkippedRecord


Event = SpectrumStarted | SamplesDrawn | RankingUpdated | SpectrumFinished | SpectrumSkipped


@dataclass(frozen=True)
class SpectrumResult:
    spectrum: Spectrum
    params: QueryParams
    candidates: tuple[Candidate, ...]
    n_samples: int
    n_valid: int
    n_formula_consistent: int
    thresholds: np.ndarray
    n_distinct_queries: int
    mean_query_bits: float
    fidelity: float | None  # max Tanimoto of the reference fingerprint to the queries (the band's, or the plan's)
    reference_inchikey14: str | None
    reference_rank: int | None  # None: absent (or no reference)
    new_samples: int  # samples drawn by the run that produced this result
    seconds: float
    partial: bool = False
    plan: QueryPlan | None = None  # the queries, when not the band of ``params``
    posterior: np.ndarray | None = field(default=None, repr=False, compare=False)  # π (float32, n_bits)
    confidence: float | None = None  # P(rank 1 is right) (engine.model.confidence); None: partial, or no model for it
    spectral_matches: SpectralMatches | None = field(default=None, repr=False, compare=False)  # reference hits
    ion_mapping: str = ""  # how a mapped ion type was run ("run as [M+H]+ after NH3 loss (mapping)"); "" native
    level_2b: bool = False  # a suspect-list rank 1 whose confidence reaches level 2b (engine.model.suspect_confidence)

    @property
    def identified(self) -> Candidate | None:
        """The candidate a reference spectrum identifies (rank 1, level 2a), if any."""
        return self.candidates[0] if self.candidates and self.candidates[0].identified else None

    @property
    def reference_status(self) -> str:
        """'exact' (rank 1), '#k', 'absent', or '' without a reference (as in the paper's case studies)."""
        if not self.reference_inchikey14:
            return ""
        if self.reference_rank is None:
            return "absent"
        return "exact" if self.reference_rank == 1 else f"#{self.reference_rank}"


@dataclass
class RunSummary:
    n_done: int = 0
    skipped: list[SkippedRecord] = field(default_factory=list)
    seconds: float = 0.0




def require_usable(bundle: ModelBundle, spectrum: Spectrum, mapped: bool = True) -> MappedSpectrum:
    """Raise SpectrumError saying why this model cannot run on ``spectrum`` (and how to fix it); else what the model
    runs for it: the spectrum itself, or its chemical mapping onto an ion type the model runs natively
    (:func:`engine.model.ion_mapping.map_spectrum`: ``[M+NH4]+`` as ``[M+H]+`` after NH3 loss, ...).

    ``mapped=False`` accepts the native ion types only (``bundle.supported_adducts``): what training and evaluation
    select their spectra with, so that their data stay those the model was trained and measured on. ``bundle`` needs
    ``name`` and ``supported_adducts`` only (an encoder training folder passes too).
    """
    native = tuple(bundle.supported_adducts)
    runnable = runnable_ion_types(native) if mapped else native
    if not spectrum.formula:
        raise SpectrumError(
            "no molecular formula: MS-GPT elucidates structures for a known formula; add FORMULA= "
            "to the record, give one (--formula, or the formula box in the app), or let msgpt predict "
            "rank formula candidates (--formulas K)"
        )
    if not spectrum.adduct:
        raise SpectrumError(
            f"no adduct: give the precursor ion type (--adduct, or ADDUCT= in the file); this model "
            f"runs {', '.join(runnable)}"
        )
    if spectrum.adduct not in runnable:
        raise SpectrumError(
            f"adduct {spectrum.adduct} is not supported by the model {bundle.name}: it runs "
            f"{', '.join(native)} natively (it was trained on them)"
            + (f" and {', '.join(runnable[len(native):])} by mapping" if len(runnable) > len(native) else "")
        )
    check_formula_matches_precursor(spectrum)
    return map_spectrum(spectrum, native)


def model_spectrum(bundle: ModelBundle, spectrum: Spectrum) -> Spectrum:
    """The spectrum the model runs for ``spectrum``: itself for a native ion type, else its mapping
    (:mod:`engine.model.ion_mapping`); without formula or adduct, itself (the encoder then says what is missing)."""
    if not spectrum.formula or not spectrum.adduct or spectrum.adduct in bundle.supported_adducts:
        return spectrum
    return map_spectrum(spectrum, bundle.supported_adducts).spectrum


@torch.inference_mode()
@staged("encoder")
def compute_posterior(bundle: ModelBundle, spectrum: Spectrum) -> np.ndarray:
    """The encoder's fingerprint posterior π (float32, n_bits) for one spectrum (of a mapped ion type: of its
    mapping, :func:`model_spectrum`)."""
    features = featurize_spectrum(model_spectrum(bundle, spectrum), bundle.encoder.config)
    batch = {k: v.to(bundle.device) for k, v in collate([features]).items()}
    return bundle.encoder.predict_proba(batch)[0].float().cpu().numpy()


class SpectrumSession:
    """One spectrum's posterior and sample pool; :meth:`run` draws only what is missing."""

    def __init__(self, bundle: ModelBundle, spectrum: Spectrum, index: int = 0, posterior: np.ndarray | None = None,
                 libraries: Sequence = (), spectral_matches: SpectralMatches | None = None):
        """``posterior``: π of this spectrum if already computed (e.g. by an evaluation), else computed once.
        ``libraries``: structure libraries (their structures of the spectrum's formula join the ranking) and
        spectral libraries (the spectrum is searched in them; the structures of its hits join the ranking,
        :mod:`engine.elucidation.libraries`); ``spectral_matches``: that search, when the caller has done it."""
        mapped = require_usable(bundle, spectrum)
        self.bundle = bundle
        self.model_spectrum = mapped.spectrum  # what the encoder and the forward model read (the mapping's spectrum)
        self.ion_mapping = mapped.note  # "run as [M+H]+ after NH3 loss (mapping)"; "" for a native ion type
        self.libraries = tuple(libraries)
        self.spectral_matches = spectral_matches if spectral_matches is not None else search_spectrum(
            self.libraries, spectrum)
        self.spectrum = spectrum  # what the user sees: the original ion type, formula and precursor (the results' too)
        self.index = index
        self.formula = mapped.formula  # whose structures are drawn (the spectrum's, but for a mapped [M]+: see there)
        self.reference_bits, self.reference_inchikey14 = _reference(spectrum, bundle.decoder.config.fp_bits)
        self._posterior: np.ndarray | None = None if posterior is None else np.asarray(posterior, dtype=np.float32)
        self._key: tuple | None = None
        self._queries = []
        self._thresholds = np.zeros(0)
        self._plan: QueryPlan | None = None
        self.pool: CandidatePool | None = None
        self._fragments = fragment_rerank(bundle, self.model_spectrum)
        self._analogs: AnalogRerank | None | bool = False  # False: not searched yet
        self._edits: dict[tuple[int, int], tuple[dict[str, str], frozenset[str]]] = {}  # (N, rounds) -> edits, parents

    @property
    def posterior(self) -> np.ndarray:
        if self._posterior is None:
            self._posterior = compute_posterior(self.bundle, self.model_spectrum)
        return self._posterior

    def _prepare(self, params: QueryParams, plan: QueryPlan | None) -> None:
        key = params.sampling_key() if plan is None else params.plan_sampling_key(plan)
        if key == self._key:
            return
        if plan is None:
            cal = self.bundle.calibration.for_polarity(self.spectrum.polarity)
            self._thresholds = band_thresholds(cal, params.kappa_min, params.kappa_max, params.groups)
            self._queries = build_queries(self.posterior, self._thresholds)
        else:
            self._thresholds = np.asarray(plan.thresholds, dtype=np.float64)
            self._queries = plan.queries(self.posterior)
        scorer = FingerprintScorer(self.posterior, self.bundle.calibration.for_polarity(self.spectrum.polarity).bits)
        self.pool = CandidatePool(self.formula, [q.bits for q in self._queries], scorer)
        if self.libraries:
            self.pool.add_known(library_structures(self.libraries, self.formula))
            self.pool.add_known(spectral_structures(self.spectral_matches, self.spectrum.adduct))
        self._key = key
        self._plan = plan
        self._edits = {}

    def drawn_samples(self, params: QueryParams) -> list[tuple[int, int, str]]:
        """The samples drawn so far for the band of ``params`` (any N): ``(i, j, SAFE string)``; empty when
        the pool holds samples of other settings (another band, seed, decoding...) or none."""
        if self.pool is None or self._plan is not None or self._key != params.sampling_key():
            return []
        return [(i, j, s) for (i, j), s in self.pool.items()]

    def add_drawn_samples(self, params: QueryParams, samples: Iterable[tuple[int, int, str]]) -> None:
        """Put samples drawn earlier for the band of ``params`` back into the pool (a project file keeps
        them, see :mod:`engine.files.project`); a later :meth:`run` with these settings draws only what they lack.

        The samples must come from this model and spectrum: a sample's identity ``(i, j)`` decides its
        random numbers, so drawing them again would give the same strings.
        """
        self._prepare(params, None)
        samples = list(samples)
        self.pool.add([(int(i), int(j)) for i, j, _ in samples], [str(s) for _, _, s in samples])

    def run(
        self, params: QueryParams, cancel: CancelFn | None = None, plan: QueryPlan | None = None
    ) -> Generator[Event, None, SpectrumResult]:
        """Draw the samples ``params`` needs that the pool lacks, yielding progress and live rankings.

        With a ``plan``, its queries replace the band of ``params`` (whose κ range and M are then
        unused); N, seed, sampling settings and the adapter switch still come from ``params``.
        """
        t0 = time.perf_counter()
        check_cancel(cancel)
        if self.bundle.has_adapter:
            self.bundle.set_adapter(params.use_adapter)
        elif params.use_adapter and self.bundle.config.get("require_adapter"):
            raise ConfigError("This bundle requires its adapter, which is missing.")
        self._prepare(params, plan)
        n = params.samples_per_group
        requests = []
        for q in self._queries:
            ids = tuple((i, j) for i in q.threshold_indices for j in range(n) if not self.pool.has((i, j)))
            if ids:
                requests.append(QueryRequest(fp_bits=q.bits, sample_ids=ids))
        total = sum(len(r.sample_ids) for r in requests)
        done = 0
        if requests:
            self.pool.set_edits({})  # the live rankings show what is drawn; the edits follow the last sample
            sampler = sample_queries(
                self.bundle.decoder,
                self.bundle.tokenizer,
                formula_vector(parse_formula(self.formula)),
                requests,
                seed=params.seed,
                temperature=params.temperature,
                top_k=params.top_k,
                top_p=params.top_p,
                max_new_tokens=params.max_new_tokens,
                cancel=cancel,
                decoding=params.decoding,
            )
            for req_index, strings in timed("sampling", sampler):
                self.pool.add(requests[req_index].sample_ids, strings)
                done += len(strings)
                yield SamplesDrawn(self.index, done, total)
                yield RankingUpdated(self.index, lambda done=done: self._result(params, done, t0, partial=done < total))
        check_cancel(cancel)
        self.pool.set_edits(self.edits(params)[0])
        return self._result(params, done, t0, partial=False)

    @staged("edits")
    def edits(self, params: QueryParams) -> tuple[dict[str, str], frozenset[str]]:
        """Standard effort's isomer edits of the drawn candidates (:mod:`engine.elucidation.edits`) and the InChIKey
        blocks of the candidates edited. ``params.edit_rounds`` rounds; each edits the best
        :data:`~engine.elucidation.edits.EDIT_PARENTS` structures drawn or edited so far that are not yet edited
        (by fingerprint score, :meth:`CandidatePool.proposals`: the libraries do not change them) and keeps the
        :data:`~engine.elucidation.edits.EDIT_KEEP` new edits that score best; a round none of whose edits enters
        the best :data:`EDIT_STOP_TOP` ends them. Worked out once per (N, rounds); none for a plan's queries (what
        the decoder alone draws), without samples, or for a formula of more than :data:`STANDARD_EDIT_MAX_ATOMS`
        heavy atoms (deep search edits larger ones)."""
        key = (params.samples_per_group, params.edit_rounds)
        if key not in self._edits:
            pool = self.pool
            on = (self._plan is None and params.edit_rounds and pool.scorer is not None and len(pool)
                  and editable_formula(self.formula, STANDARD_EDIT_MAX_ATOMS))
            self._edits[key] = edit_rounds(lambda edits: pool.proposals(params.samples_per_group, edits),
                                           pool.scorer.score if on else None, params.edit_rounds if on else 0,
                                           EDIT_PARENTS, EDIT_KEEP, EDIT_STOP_TOP)
        return self._edits[key]

    def rank_known(self, params: QueryParams) -> SpectrumResult:
        """The library structures of the spectrum's formula ranked alone, no sample drawn (the encoder runs once):
        for a formula only a library proposes (:func:`engine.elucidation.libraries.mass_track_spectra`)."""
        t0 = time.perf_counter()
        self._prepare(params, None)
        return self._result(params, 0, t0, partial=False)

    def configure_ranking(self, pool: CandidatePool, params: QueryParams, partial: bool = False) -> None:
        """Give ``pool`` the ranking settings of ``params`` (the library prior, the analog and fragment scores). A
        partial ranking (shown while samples are drawn) goes without the fragment score: its shortlist changes with
        every batch, and each newcomer would be fragmented; the final ranking has it. The analog score is in both
        (one analog search per spectrum, then a Tanimoto per candidate)."""
        pool.library_prior = params.library_prior
        pool.undrawn_prior = params.undrawn_prior
        pool.fragments = self._fragments if params.fragment_score and not partial else None
        pool.analogs = None
        if params.analog_score and analog_weights(self.bundle, pool.has_suspects):
            if self._analogs is False:  # searched once, when a ranking first needs it
                self._analogs = analog_rerank(self.bundle, self.libraries, self.spectrum)
            pool.analogs = self._analogs

    def _result(self, params: QueryParams, new_samples: int, t0: float, partial: bool) -> SpectrumResult:
        self.configure_ranking(self.pool, params, partial)
        candidates, counts = self.pool.rank(params.samples_per_group, params.ranking)
        fidelity = None
        if self.reference_bits is not None:
            fidelity = chem.max_tanimoto(self.reference_bits, [q.bits for q in self._queries])
        result = SpectrumResult(
            spectrum=self.spectrum,
            params=params,
            candidates=tuple(candidates),
            n_samples=counts["samples"],
            n_valid=counts["valid"],
            n_formula_consistent=counts["formula_consistent"],
            thresholds=self._thresholds,
            n_distinct_queries=len(self._queries),
            mean_query_bits=float(np.mean([len(q.bits) for q in self._queries for _ in q.threshold_indices])),
            fidelity=fidelity,
            reference_inchikey14=self.reference_inchikey14,
            reference_rank=reference_rank(candidates, self.reference_inchikey14),
            new_samples=new_samples,
            seconds=time.perf_counter() - t0,
            partial=partial,
            plan=self._plan,
            posterior=self._posterior,
            spectral_matches=self.spectral_matches,
            ion_mapping=self.ion_mapping,
        )
        return with_confidence(self.bundle, result)


def fragment_rerank(bundle: ModelBundle, spectrum: Spectrum) -> FragmentRerank | None:
    """The bundle's forward score of ``spectrum`` as a ranking term (:class:`FragmentRerank`), None when the bundle
    has no forward model or its measurement chose weight 0."""
    model = bundle.forward
    if model is None or not model.ranking.fragments_on:
        return None
    scorer = ForwardScorer(model, spectrum, PeakSettings.of_encoder(bundle.encoder.config),
                           intensity_weight=model.ranking.intensity_weight)
    return FragmentRerank(scorer.score, model.ranking)


def _reference(spectrum: Spectrum, n_bits: int = chem.N_BITS) -> tuple[np.ndarray | None, str | None]:
    """Reference fingerprint (in the model's ``n_bits``) and InChIKey-14 from the record's SMILES (or
    just the InChIKey)."""
    if spectrum.smiles:
        mol = chem.mol_from_smiles(spectrum.smiles)
        if mol is not None:
            chem.remove_stereo(mol)
            return chem.morgan_bits(mol, n_bits), chem.inchikey14(mol)
    if spectrum.inchikey:
        return None, spectrum.inchikey[:14]
    return None, None


def elucidate(bundle: ModelBundle, spectra: Iterable[Spectrum | SkippedRecord], params: QueryParams = QueryParams(),
              cancel: CancelFn | None = None, libraries: Sequence = (),
              run_session: Callable[[SpectrumSession, QueryParams, CancelFn | None], Generator] | None = None,
              ) -> Generator[Event, None, RunSummary]:
    """Elucidate many spectra, one after the other. Yields events; returns a :class:`RunSummary`.

    A spectrum of an ion type the model runs by a mapping finishes with the mapping's note in its ``warnings``.
    Records the reader skipped, and spectra this model cannot run (no formula, unsupported adduct),
    come out as :class:`SpectrumSkipped` with the reason; the rest go on. ``run_session(session, params,
    cancel)`` searches one spectrum (default :meth:`SpectrumSession.run`; ``params.effort="deep"`` needs
    :func:`engine.elucidation.deep.run_session`, which builds on this module).
    """
    if params.effort != "standard" and run_session is None:
        raise ConfigError(f"effort={params.effort!r} needs its search: pass "
                          "run_session=engine.elucidation.deep.run_session to elucidate()")
    t0 = time.perf_counter()
    summary = RunSummary()
    for index, item in enumerate(spectra):
        check_cancel(cancel)
        if isinstance(item, SkippedRecord):
            summary.skipped.append(item)
            yield SpectrumSkipped(index, item)
            continue
        try:
            session = SpectrumSession(bundle, item, index, libraries=libraries)
        except MsgptError as e:
            record = SkippedRecord(item.source, item.index, item.id, str(e))
            summary.skipped.append(record)
            yield SpectrumSkipped(index, record)
            continue
        yield SpectrumStarted(index, item)
        result = yield from (session.run(params, cancel) if run_session is None else
                             run_session(session, params, cancel))
        summary.n_done += 1
        if result.ion_mapping:  # the run's notes (msgpt predict) say how a mapped ion type was run
            result = replace(result, spectrum=with_warning(result.spectrum, result.ion_mapping))
        yield SpectrumFinished(index, result)
    summary.seconds = time.perf_counter() - t0
    return summary


def apply_overrides(spectrum: Spectrum, formula: str | None = None, adduct: str | None = None) -> Spectrum:
    """Force a formula and/or adduct on a spectrum (validated); used by ``--formula`` / ``--adduct``."""
    if adduct:
        spectrum = spectrum.with_adduct(adduct)
    if formula:
        spectrum = spectrum.with_formula(formula)
    return spectrum
