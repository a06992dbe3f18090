"""Deep search: spend a bounded extra budget on putting the true structure into a spectrum's pool (issue #39).

Standard effort draws B blind samples from the band's queries. Most misses are close isomers of candidates
that the fingerprint score already likes, so deep search starts from the standard pool and refines it:

1. **Adaptive allocation.** The queries whose candidates score best get extra blind samples (the same
   identities ``(i, j)``, ``j >= N``, that a larger B would draw).
2. **Refinement rounds.** The best candidates not yet refined are cut into their SAFE fragments
   (:func:`fragmentations`); each *kept fragment set* (every fragment but one, then every fragment but two)
   becomes a prefix ``kept.`` that the decoder completes under the formula mask, conditioned on the query
   that drew the candidate. SAFE fragments can stand in any order, so any subset of them is a valid prefix;
   the decoder regenerates the rest (a substituent moved, a ring rebuilt, a linker changed). A candidate
   the slicer cannot cut keeps the first part of its string instead.
3. **Analog seeding** (with an :class:`~engine.elucidation.analogs.AnalogIndex` of each of the run's structure
   libraries; of the bundled one when the run has none): the ``analogs`` library structures of other formulas
   whose fingerprints the posterior scores best are cut the same way, and their kept fragment sets (and each
   fragment alone, largest first) that the formula still allows become prefixes too, drawn with the first
   allocation. A relative in a library (the same scaffold, another substituent) thus lends its fragments to the
   spectrum's own formula; a structure of that formula itself would be an answer, not an analog.
4. Rounds stop when the sample budget is spent or a round puts no new candidate among the ``stop_top`` best
   (``stop_top`` 0: adds no new candidate at all).
5. **Edits** (:mod:`engine.elucidation.edits`, no decoder): the best candidates not yet edited give every isomer
   one formula-preserving move away (a substituent moved to another atom, two atoms of different elements
   swapped); the fingerprint score picks the best few, which join the pool (with count 0: no sample drew
   them), and the next round edits the new best, so two or three moves compound (a methyl walked from one
   N-alkyl chain to the other). The same stop rule ends the edit rounds; a formula of more than
   ``edit_max_atoms`` heavy atoms gets none (the moves grow as the atoms squared).

:attr:`DeepSearch.seconds` keeps the time of each phase (:data:`PHASES`) and :meth:`DeepSearch.sources_of` the
phases that drew a structure, for the evaluation's profile (``training.studies.deep_search_eval``).

The search works on a copy of the session's pool, so the session (and standard effort) is unchanged; deep
samples get identities ``(i, j)`` with ``i >= DEEP_ID_BASE``, so their random numbers never collide with
band samples. The whole search is seeded: the same spectrum, settings and seed give the same pool.
"""

from __future__ import annotations

import copy
import itertools
import logging
import time
from collections.abc import Generator
from dataclasses import dataclass, field, replace

from engine.chem.formula import formula_vector, parse_formula
from engine.elucidation.analogs import AnalogIndex
from engine.elucidation.edits import (
    EDIT_KEEP,
    EDIT_MAX_ATOMS,
    EDIT_PARENTS,
    best_edits,
    editable_formula,
)
from engine.elucidation.pipeline import (
    QueryParams,
    RankingUpdated,
    SamplesDrawn,
    SpectrumResult,
    SpectrumSession,
)
from engine.elucidation.ranking import CandidatePool, decode_safe, reference_rank
from engine.errors import ConfigError
from engine.model.confidence import with_confidence
from engine.model.constraints import FormulaConstraint
from engine.model.safe_grammar import SafeGrammar
from engine.model.sampling import QueryRequest, sample_queries
from engine.progress import CancelFn, check_cancel

log = logging.getLogger(__name__)

DEEP_ID_BASE = 1_000_000  # threshold index of the first deep sample identity (band indices are < M)
ANALOG_PHASE = 9  # the identities of analog-seeded samples: DEEP_ID_BASE + 9 * 100_000 + ... (rounds are 1..8)
# where a deep pool's structures come from (DeepSearch.sources_of) and where its time goes (DeepSearch.seconds)
PHASES = ("standard", "allocation", "analogs", *(f"round {k}" for k in range(1, ANALOG_PHASE)), "edits",
          "final ranking")


def sample_phase(sample_id: tuple[int, int], samples_per_group: int = 0) -> str:
    """The phase of deep search that drew sample ``(i, j)``: ``standard`` (a band sample, ``i < DEEP_ID_BASE``; with
    ``samples_per_group``, only ``j`` below it, the rest ``allocation``), ``allocation`` (a band query's extra
    samples), ``analogs`` or ``round k`` (the identities :class:`DeepSearch` gives its prefixes)."""
    i, j = sample_id
    if i < DEEP_ID_BASE:
        return "allocation" if samples_per_group and j >= samples_per_group else "standard"
    phase = (i - DEEP_ID_BASE) // 100_000
    return "analogs" if phase == ANALOG_PHASE else f"round {phase}"


@dataclass(frozen=True)
class DeepConfig:
    """How deep search spends its budget (defaults: at most 320 samples beyond B=100, chosen for issue #58 on
    train-unseen spectra; docs/deep_search.md)."""

    extra_queries: int = field(default=5, metadata={"help": "queries whose best candidates score highest that get extra blind samples"})
    extra_per_query: int = field(default=10, metadata={"help": "extra blind samples per such query (j = N, N+1, ...)"})
    rounds: int = field(default=2, metadata={"help": "refinement rounds at most"})
    parents: int = field(default=5, metadata={"help": "best not-yet-refined candidates refined per round"})
    prefixes_per_parent: int = field(default=6, metadata={"help": "kept-fragment prefixes per refined candidate"})
    samples_per_prefix: int = field(default=4, metadata={"help": "completions drawn per prefix"})
    max_new_samples: int = field(default=320, metadata={"help": "budget: samples drawn beyond the standard pool"})
    analogs: int = field(default=5, metadata={
        "help": "library structures the posterior scores best (any formula but the spectrum's) whose fragments seed "
                "prefixes (0: none)"})
    truncate_fractions: tuple[float, ...] = field(default=(0.5, 0.7), metadata={
        "help": "share of the tokens kept from a candidate the slicer cannot cut into fragments"})
    edit_rounds: int = field(default=3, metadata={
        "help": "rounds of formula-preserving edits (a substituent moved, two atoms swapped) of the best candidates "
                "(0: none)"})
    edit_parents: int = field(default=EDIT_PARENTS, metadata={
        "help": "best not-yet-edited candidates edited per round"})
    edit_keep: int = field(default=EDIT_KEEP, metadata={
        "help": "edits per round that join the pool: those the fingerprint score ranks best"})
    edit_max_atoms: int = field(default=EDIT_MAX_ATOMS, metadata={
        "help": "heavy atoms of the spectrum's formula above which nothing is edited (the moves grow as atoms squared)"})
    stop_top: int = field(default=10, metadata={
        "help": "a refinement (edit) round that puts no new candidate among the best stop_top ends the refinement "
                "(edit) rounds (0: one that adds no new candidate at all)"})

    def __post_init__(self):
        for name in ("extra_queries", "extra_per_query", "rounds", "parents", "prefixes_per_parent",
                     "samples_per_prefix", "max_new_samples", "analogs", "edit_rounds", "edit_parents", "edit_keep", "edit_max_atoms", "stop_top"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"`{name}` must be a non-negative integer, got {v!r}.")
        for name in ("parents", "prefixes_per_parent", "samples_per_prefix"):
            if getattr(self, name) < 1:
                raise ConfigError(f"`{name}` must be at least 1, got {getattr(self, name)!r}.")
        if self.rounds >= ANALOG_PHASE:
            raise ConfigError(f"`rounds` must be below {ANALOG_PHASE}, got {self.rounds!r}.")
        if self.parents > 1000 or self.prefixes_per_parent > 100 or self.analogs > 1000:
            raise ConfigError("`parents` and `analogs` must be at most 1000 and `prefixes_per_parent` at most 100 "
                              "(sample identities are numbered by them).")
        if any(not 0 < f < 1 for f in self.truncate_fractions):
            raise ConfigError(f"`truncate_fractions` must lie in (0, 1), got {self.truncate_fractions!r}.")


def fragmentations(smiles: str, sampled: list[str]) -> list[list[str]]:
    """Distinct SAFE fragment lists of a candidate: its canonical SAFE (BRICS cuts, as the training corpus), then
    the strings the decoder drew for it (other cuts and fragment orders)."""
    import safe as sf

    out: list[list[str]] = []
    try:
        canonical = sf.encode(smiles, canonical=True, allow_empty=True)
    except Exception:  # safe-mol raises many types for molecules it cannot slice  # noqa: BLE001
        canonical = None
    for s in ([canonical] if canonical else []) + sampled:
        frags = s.split(".")
        if frags not in out and all(frags):
            out.append(frags)
    return out


def prefixes_of(frag_lists: list[list[str]], tokenize, limit: int, fractions: tuple[float, ...]) -> list[str]:
    """Up to ``limit`` distinct prefixes: every fragment but one (of each fragmentation in turn), then every
    fragment but two; a candidate of one fragment keeps ``fractions`` of its tokens."""
    out: list[str] = []
    for drop in (1, 2):
        per_list = []
        for frags in frag_lists:
            if len(frags) > drop:
                per_list.append([".".join(f for k, f in enumerate(frags) if k not in gone) + "."
                                 for gone in itertools.combinations(range(len(frags)), drop)])
        for p in itertools.chain.from_iterable(itertools.zip_longest(*per_list)):  # alternate fragmentations
            if p is not None and p not in out:
                out.append(p)
    if not out and frag_lists:
        tokens = tokenize(frag_lists[0][0])
        for f in fractions:
            p = "".join(tokens[: max(1, int(len(tokens) * f))])
            if p not in out:
                out.append(p)
    return out[:limit]


def prefix_fits(grammar: SafeGrammar, formula_vec, prefix: tuple[int, ...], max_new_tokens: int) -> bool:
    """Whether the formula masks let a row start with ``prefix`` (as :func:`engine.model.sampling.sample_queries`
    forces it): a prefix with more atoms of an element than the formula holds would end every row at once."""
    if len(prefix) >= max_new_tokens:
        return False
    constraint = FormulaConstraint(grammar, formula_vec, 1)
    for step, token in enumerate(prefix):
        if not bool(constraint.allowed(max_new_tokens - step)[0, token]):
            return False
        constraint.advance([token])
    return True


def analog_prefixes(smiles: str, tokenize, limit: int) -> list[str]:
    """Prefixes from an analog: its kept fragment sets (:func:`prefixes_of`), then each fragment alone, largest
    first (an analog may share one scaffold and nothing else); the caller keeps those the formula allows."""
    frag_lists = fragmentations(smiles, [])
    out = prefixes_of(frag_lists, tokenize, 4 * limit, ())
    singles = sorted({f for frags in frag_lists if len(frags) > 1 for f in frags}, key=lambda f: (-len(f), f))
    return list(dict.fromkeys(out + [f + "." for f in singles]))


def analog_sources(libraries) -> list[AnalogIndex]:
    """The :class:`AnalogIndex` of each structure library among ``libraries`` (opened once per library: a lazy
    library's bits are computed on first use, about a minute for the bundled one, and cached in the data folder)."""
    from engine.elucidation.analogs import analog_index_of
    from engine.library.index import StructureLibrary

    return [analog_index_of(lib) for lib in libraries if isinstance(lib, StructureLibrary) and len(lib)]


_BUNDLED: dict = {}  # "index": the bundled structure library's AnalogIndex once opened (None: it cannot be)


def bundled_analogs() -> AnalogIndex | None:
    """The bundled structure library's :class:`AnalogIndex`, for a run without structure libraries
    (``--no-libraries``): its structures still lend fragments, and since no analog has the spectrum's own
    formula, none of them becomes a candidate. None when the bundled library is missing or unreadable."""
    from engine.progress import run_to_end

    return _BUNDLED["index"] if "index" in _BUNDLED else run_to_end(open_bundled_analogs())


def open_bundled_analogs(cancel: CancelFn | None = None) -> Generator[object, None, AnalogIndex | None]:
    """:func:`bundled_analogs` as a job: the library's and the bits' progress events (their first opening indexes the
    library and computes its bits, a minute or more); opened once per process."""
    from engine.elucidation.analogs import open_analog_index
    from engine.library.cache import open_bundled_library
    from engine.library.read import LibraryError

    if "index" not in _BUNDLED:
        try:
            library = yield from open_bundled_library(cancel=cancel)
            _BUNDLED["index"] = yield from open_analog_index(library, cancel=cancel)
        except (LibraryError, OSError, ValueError) as e:
            log.warning("deep search runs without analogs: the bundled structure library cannot be opened (%s)", e)
            _BUNDLED["index"] = None
    return _BUNDLED["index"]


@dataclass(frozen=True)
class DeepProgress:
    """What deep search of spectrum ``index`` does now (``phase``, in a few words) and how far: ``done`` of ``total``
    (samples drawn, structures of a library indexed, edit rounds; 0 of 0 when it cannot say)."""

    index: int
    phase: str
    done: int = 0
    total: int = 0


def open_analog_sources(session: SpectrumSession, cancel: CancelFn | None = None
                        ) -> Generator[DeepProgress, None, None]:
    """Open what deep search of ``session`` borrows analogs from (its structure libraries' bits, else the bundled
    library's), with progress, so that :class:`DeepSearch` finds them open (the app runs this first: the first
    opening takes a minute or more)."""
    from engine.elucidation.analogs import _OPENED, open_analog_index
    from engine.library.index import StructureLibrary

    libraries = [lib for lib in session.libraries if isinstance(lib, StructureLibrary) and len(lib)]
    jobs = [(open_analog_index(lib, cancel=cancel), lib.name) for lib in libraries if lib not in _OPENED]
    if not libraries and "index" not in _BUNDLED:
        jobs.append((open_bundled_analogs(cancel), "the bundled library"))
    for job, name in jobs:
        phase = f"deep search: opening the analogs of {name}"
        yield DeepProgress(session.index, phase)
        while True:
            try:
                event = next(job)
            except StopIteration:
                break
            done, total = getattr(event, "done", 0), getattr(event, "total", 0)
            text = getattr(event, "text", "")
            yield DeepProgress(session.index, f"{phase}{f' ({text})' if text else ''}", done, total)


def run_session(session: SpectrumSession, params: QueryParams, cancel: CancelFn | None = None,
                config: DeepConfig | None = None) -> Generator[object, None, SpectrumResult]:
    """One spectrum at ``params.effort``: :meth:`SpectrumSession.run` (standard) or :class:`DeepSearch` (deep); the
    ``run_session`` of :func:`engine.elucidation.pipeline.elucidate`."""
    if params.effort == "deep":
        return DeepSearch(session, config or DeepConfig()).run(params, cancel)
    return session.run(params, cancel)


class DeepSearch:
    """The deep search of one :class:`SpectrumSession` (its standard pool is drawn first if missing)."""

    def __init__(self, session: SpectrumSession, config: DeepConfig = DeepConfig(),
                 analogs: list[AnalogIndex] | None = None, exclude: frozenset[str] = frozenset()):
        """``analogs``: where analogs are looked for (default: the session's structure libraries); ``exclude``:
        InChIKey first blocks never taken as analogs (an evaluation leaves out the true structure)."""
        self.session = session
        self.config = config
        self.analogs = analogs
        self.exclude = frozenset(exclude)
        self.pool: CandidatePool | None = None
        self.refined: set[str] = set()  # InChIKey first blocks already refined
        self.edited: set[str] = set()  # InChIKey first blocks already edited
        self.edit_keys: set[str] = set()  # InChIKey first blocks of the edits offered to the pool
        self.query_of: dict[tuple[int, int], int] = {}  # sample identity -> index of its query
        self.seconds: dict[str, float] = {}  # phase (PHASES) -> seconds spent in it, for profiles and the evaluation
        self._clock = 0.0
        self._per_group = 0  # the standard pool's samples per query (N): a band sample with j >= N is an extra one

    def _spent(self, phase: str) -> None:
        """Adds the time since the last phase ended to ``phase`` (``seconds``)."""
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._clock
        self._clock = now

    def sources_of(self, inchikey14: str) -> list[str]:
        """The phases whose samples drew the structure (:func:`sample_phase`), ``"edits"`` when an edit made it and no
        sample drew it; empty when it is not in the pool."""
        phases = {sample_phase(sid, self._per_group) for sid, _ in self._strings_of(inchikey14)} if self.pool is not None else set()
        if not phases and inchikey14 in self.edit_keys:
            phases.add("edits")
        return sorted(phases, key=PHASES.index)

    def run(self, params: QueryParams, cancel: CancelFn | None = None) -> Generator[object, None, SpectrumResult]:
        """Standard pool first (events as :meth:`SpectrumSession.run`), then the deep rounds, each begun by a
        :class:`DeepProgress` that names it; returns the result ranked over every sample drawn."""
        t0 = self._clock = time.perf_counter()
        self._per_group = params.samples_per_group
        base = yield from self.session.run(params, cancel)
        self._spent("standard")
        s, cfg = self.session, self.config
        self.pool = copy.deepcopy(s.pool)
        edits, edited = s.edits(params)  # standard effort's edit rounds: deep search's go on from them
        self.edited.update(edited)
        self.edit_keys.update(decode_safe(x).inchikey14 for x in edits)
        self.pool.fragments = None  # the search chooses by the fingerprint score; the final ranking adds fragments
        queries = s._queries
        for qi, q in enumerate(queries):
            for i in q.threshold_indices:
                for j in range(params.samples_per_group):
                    self.query_of[(i, j)] = qi
        budget, done = cfg.max_new_samples, 0
        index = s.index
        # 1. adaptive allocation: extra blind samples for the queries that drew the best candidates
        requests = self._extra_requests(params, min(budget, cfg.extra_queries * cfg.extra_per_query))
        used = sum(len(r.sample_ids) for r, _ in requests)
        yield DeepProgress(index, "deep search: choosing analogs", base.new_samples, base.new_samples + budget)
        self._spent("allocation")
        requests += self._analog_requests(params, requests, budget - used)
        self._spent("analogs")
        keys = {c.inchikey14 for c in self.pool.rank(None, params.ranking)[0]}  # the pool's structures so far
        for phase in range(cfg.rounds + 1):
            name = f"round {phase}" if phase else "allocation"  # round 0: the extra and the analogs' samples
            if phase > 0:
                requests = self._refine_requests(params, phase, budget - done)
            if not requests:
                break
            total = done + sum(len(r.sample_ids) for r, _ in requests)
            yield DeepProgress(index, f"deep search: round {phase} of {cfg.rounds}" if phase else
                               "deep search: extra samples", base.new_samples + done,
                               base.new_samples + max(total, budget))
            for req_index, strings in self._sample(params, [r for r, _ in requests], cancel):
                req, qi = requests[req_index]
                self.pool.add(req.sample_ids, strings)
                for sid in req.sample_ids:
                    self.query_of[sid] = qi
                done += len(strings)
                # counted on from the standard pool's samples, so a progress bar never runs backwards
                yield SamplesDrawn(index, base.new_samples + done, base.new_samples + max(total, budget))
            partial = self._result(base, params, done, t0, partial=True)
            self._spent(name)
            yield RankingUpdated(index, partial)
            paid, keys = self._round_paid(keys, partial.candidates), {c.inchikey14 for c in partial.candidates}
            if phase > 0 and not paid:
                break  # the round added no candidate (with stop_top: none among the best stop_top)
            if done >= budget:
                break
        # 5. edits: the isomers one move away from the best candidates, the best of them by fingerprint score
        for k in range(cfg.edit_rounds):
            yield DeepProgress(index, f"deep search: edits {k + 1} of {cfg.edit_rounds}")
            added = self._edit_round(params, cancel)
            if not added:
                self._spent("edits")
                break
            partial = self._result(base, params, done, t0, partial=True)
            self._spent("edits")
            yield RankingUpdated(index, partial)
            paid, keys = self._round_paid(keys, partial.candidates), {c.inchikey14 for c in partial.candidates}
            if cfg.stop_top and not paid:
                break  # no edit among the best stop_top: the next round's parents would be the same
        check_cancel(cancel)
        yield DeepProgress(index, "deep search: final ranking")
        result = self._result(base, params, done, t0, partial=False)
        self._spent("final ranking")
        return result

    def _round_paid(self, before: set[str], ranked: list) -> bool:
        """Whether a refinement or edit round earned the next one: it added a candidate to the pool (``stop_top`` 0),
        or one among the ``stop_top`` best by the search's ranking (module notes, 4 and 5)."""
        new = [c.inchikey14 not in before for c in ranked]
        return any(new[: self.config.stop_top] if self.config.stop_top else new)

    def _edit_round(self, params: QueryParams, cancel: CancelFn | None) -> int:
        """Offers the pool the ``edit_keep`` best-scoring new edits of the best ``edit_parents`` not-yet-edited
        candidates (:meth:`CandidatePool.add_edits`: count 0, no sample); returns how many."""
        cfg = self.config
        if self.pool.scorer is None or not editable_formula(self.session.formula, cfg.edit_max_atoms):
            return 0  # no posterior to score edits by, or too many atoms
        candidates, _ = self.pool.rank(None, params.ranking)
        parents = [c for c in candidates if c.inchikey14 not in self.edited][: cfg.edit_parents]
        self.edited.update(c.inchikey14 for c in parents)
        best = best_edits([c.smiles for c in parents], self.pool.scorer.score, {c.smiles for c in candidates},
                          cfg.edit_keep)
        check_cancel(cancel)
        self.pool.add_edits(best)
        self.edit_keys.update(decode_safe(x).inchikey14 for x in best)
        return len(best)

    # -- requests -----------------------------------------------------------------------------------------
    def _extra_requests(self, params: QueryParams, n: int) -> list[tuple[QueryRequest, int]]:
        cfg, queries = self.config, self.session._queries
        if n <= 0 or cfg.extra_queries == 0:
            return []
        best: dict[int, float] = {}
        candidates, _ = self.pool.rank(None, params.ranking)
        for c in candidates:
            for qi in self._queries_of(c.inchikey14):
                best[qi] = max(best.get(qi, float("-inf")), c.score)
        order = sorted(best, key=lambda qi: (-best[qi], qi))[: cfg.extra_queries]
        out = []
        per = max(1, n // max(len(order), 1))
        for qi in order:
            q = queries[qi]
            i = q.threshold_indices[0]
            ids = tuple((i, j) for j in range(params.samples_per_group, params.samples_per_group + per))
            out.append((QueryRequest(fp_bits=q.bits, sample_ids=ids), qi))
        return out

    def _analog_requests(self, params: QueryParams, first: list[tuple[QueryRequest, int]],
                         left: int) -> list[tuple[QueryRequest, int]]:
        """Prefixes from the library analogs the posterior scores best, under the best query (module notes)."""
        cfg, s = self.config, self.session
        if cfg.analogs == 0 or left <= 0:
            return []
        sources = self.analogs
        if sources is None:  # the run's structure libraries; with none, the bundled one (fragments only)
            sources = analog_sources(s.libraries) or [x for x in (bundled_analogs(),) if x is not None]
        if not sources:
            return []
        scorer = self.pool.scorer
        found = []  # (score, smiles, key) over every source
        for index in sources:
            for row, score in index.nearest(scorer, cfg.analogs, self.exclude, formula=s.formula):
                found.append((score, index.library.smiles(row), index.library.inchikey14(row)))
        seen, analogs = set(), []
        for _, smiles, key in sorted(found, key=lambda f: -f[0]):
            if key not in seen:
                seen.add(key)
                analogs.append(smiles)
        qi = first[0][1] if first else 0
        tok = s.bundle.tokenizer
        grammar = SafeGrammar.of(tok) if params.decoding == "formula" else None
        formula_vec = formula_vector(parse_formula(s.formula))
        block = s.bundle.decoder.config.block_size - 1
        max_new = min(params.max_new_tokens or block, block)  # as engine.model.sampling.sample_queries
        out: list[tuple[QueryRequest, int]] = []
        for slot, smiles in enumerate(analogs[: cfg.analogs]):
            kept = 0
            for p in analog_prefixes(smiles, tok.tokenize, cfg.prefixes_per_parent):
                if kept == cfg.prefixes_per_parent:
                    break
                n = min(cfg.samples_per_prefix, left)
                if n <= 0:
                    return out
                ptoks = tuple(tok.encode(p, add_special=False))
                if tok.unk_id in ptoks or len(ptoks) >= max_new or (
                        grammar is not None and not prefix_fits(grammar, formula_vec, ptoks, max_new)):
                    continue
                ids = tuple((DEEP_ID_BASE + ANALOG_PHASE * 100_000 + slot * 100 + kept, j) for j in range(n))
                out.append((QueryRequest(fp_bits=s._queries[qi].bits, sample_ids=ids, prefix=ptoks), qi))
                kept += 1
                left -= n
        return out

    def _refine_requests(self, params: QueryParams, phase: int, left: int) -> list[tuple[QueryRequest, int]]:
        cfg, s = self.config, self.session
        tok = s.bundle.tokenizer
        candidates, _ = self.pool.rank(None, params.ranking)
        parents = [c for c in candidates if c.inchikey14 not in self.refined][: cfg.parents]
        out: list[tuple[QueryRequest, int]] = []
        for slot, c in enumerate(parents):
            self.refined.add(c.inchikey14)
            sampled = self._strings_of(c.inchikey14)
            prefixes = prefixes_of(fragmentations(c.smiles, [s_ for _, s_ in sampled]), tok.tokenize,
                                   cfg.prefixes_per_parent, cfg.truncate_fractions)
            qis = [self.query_of[sid] for sid, _ in sampled if sid in self.query_of]
            qi = min(qis) if qis else 0
            for k, p in enumerate(prefixes):
                n = min(cfg.samples_per_prefix, left)
                if n <= 0:
                    return sorted(out, key=lambda rq: rq[1])
                ids = tuple((DEEP_ID_BASE + phase * 100_000 + slot * 100 + k, j) for j in range(n))
                ptoks = tuple(tok.encode(p, add_special=False))
                if tok.unk_id in ptoks:
                    continue
                out.append((QueryRequest(fp_bits=s._queries[qi].bits, sample_ids=ids, prefix=ptoks), qi))
                left -= n
        return sorted(out, key=lambda rq: rq[1])  # requests of one query side by side share its context

    def _strings_of(self, inchikey14: str) -> list[tuple[tuple[int, int], str]]:
        return [(sid, x) for sid, x in self.pool.items() if decode_safe(x).inchikey14 == inchikey14]

    def _queries_of(self, inchikey14: str) -> set[int]:
        return {self.query_of[sid] for sid, _ in self._strings_of(inchikey14) if sid in self.query_of}

    def _sample(self, params: QueryParams, requests: list[QueryRequest], cancel):
        s = self.session
        return sample_queries(
            s.bundle.decoder, s.bundle.tokenizer, formula_vector(parse_formula(s.formula)), requests,
            seed=params.seed, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
            max_new_tokens=params.max_new_tokens, cancel=cancel, decoding=params.decoding)

    # -- result -------------------------------------------------------------------------------------------
    def _result(self, base: SpectrumResult, params: QueryParams, new: int, t0: float, partial: bool) -> SpectrumResult:
        self.session.configure_ranking(self.pool, params, partial)
        candidates, counts = self.pool.rank(None, params.ranking)
        result = replace(
            base, candidates=tuple(candidates), n_samples=counts["samples"], n_valid=counts["valid"],
            n_formula_consistent=counts["formula_consistent"],
            reference_rank=reference_rank(candidates, self.session.reference_inchikey14),
            new_samples=base.new_samples + new, seconds=time.perf_counter() - t0, partial=partial, confidence=None)
        if partial:
            return result
        return with_confidence(self.session.bundle, result)
