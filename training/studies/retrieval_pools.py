"""The retrieval study's measurement of a pool: the merged score of library and de novo candidates (prior, count,
decoder and fragment weights, shortlists), its variants, the hits of each setting (library alone, joint, de novo,
crowded) and the sweep that chooses the weights. :mod:`training.studies.retrieval` runs it and writes the tables."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.errors import ConfigError

LIBRARY_SIZE = 256  # the truth plus up to 255 corpus structures
MASS_PPM = 10.0
HIT_KS = (1, 5, 20)
CROWDING_KS = (1, 10)
QUERY_POSITIONS = (0.5, 0.15, 0.85)  # places in the band (0 = sparse end); the first alone is the 1-query score
TRACKS = ("formula", "mass")
SHORTLIST = 20  # candidates the decoder re-ranks (Hit@20 needs no more)
FORMAT_VERSION = 1


# -- the merged score ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MergedScore:
    """One ranking of library and de novo candidates alike, in two stages (higher first):

    1. every candidate by ``fingerprint score + library_prior · [a known structure] + count_weight ·
       ln(max(de novo samples, 1))``;
    2. with a ``decoder_weight``, the first ``shortlist`` of them re-ranked by that plus ``decoder_weight ·
       decoder log-prob``, above the rest (which keep their stage-1 order).

    ``library_prior`` (nats) is the log-odds that a known structure is the answer rather than a de novo one of
    the same fingerprint score; the count term lets the decoder's own evidence (how often the search drew a
    structure) defend a de novo answer against a library's look-alikes (a structure drawn once or never adds
    nothing). The decoder log-probability is that of the structure's canonical SAFE tokens (teacher-forced,
    conditioned on its own formula) averaged over the band queries at ``query_positions`` (0 = the band's
    sparse end, 1 = its dense end); a shortlisted structure the decoder cannot score (a token outside its
    vocabulary, too long) takes the shortlist's lowest. Chosen by ``python -m training.studies.retrieval``
    (docs/known_compounds.md).
    """

    library_prior: float = 0.0
    count_weight: float = 0.0
    decoder_weight: float = 0.0
    query_positions: tuple[float, ...] = (0.5,)
    shortlist: int = SHORTLIST

    def scores(self, fingerprint: np.ndarray, in_library: np.ndarray, count: np.ndarray | None = None,
               decoder_logp: Callable[[np.ndarray], np.ndarray] | np.ndarray | None = None) -> np.ndarray:
        """Scores whose descending order is the ranking. ``count``: de novo samples of each candidate (0 for a
        library structure the search did not draw); ``decoder_logp``: the (mean) log-probabilities of all
        candidates, or a function giving those of the candidates at the indices it is passed (the shortlist)."""
        stage1 = np.asarray(fingerprint, dtype=np.float64) + self.library_prior * np.asarray(in_library, dtype=np.float64)
        if self.count_weight and count is not None:
            stage1 = stage1 + self.count_weight * np.log(np.maximum(np.asarray(count, dtype=np.float64), 1.0))
        if not self.decoder_weight or decoder_logp is None:
            return stage1
        short = shortlist_mask(stage1, self.shortlist)
        idx = np.flatnonzero(short)
        dec = decoder_logp(idx) if callable(decoder_logp) else np.asarray(decoder_logp, dtype=np.float64)[idx]
        return two_stage(stage1, short, stage1[idx] + self.decoder_weight * fill_missing(dec))


# Chosen on FOLD=train spectra of structures the encoder of msgpt-small-v10 never trained on, reported on
# FOLD=val (docs/known_compounds.md has the tables and the command).
CHOSEN = MergedScore(library_prior=0.0, count_weight=0.0, decoder_weight=0.0, query_positions=(0.5,), shortlist=20)


def fill_missing(values: np.ndarray) -> np.ndarray:
    """``nan`` (no decoder score) replaced by the lowest finite value (0 when there is none)."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    if finite.all():
        return values
    low = float(values[finite].min()) if finite.any() else 0.0
    return np.where(finite, values, low)


def shortlist_mask(stage1: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` best by ``stage1`` (ties: the lower index first)."""
    order = np.lexsort((np.arange(len(stage1)), -np.asarray(stage1, dtype=np.float64)))
    mask = np.zeros(len(stage1), dtype=bool)
    mask[order[:size]] = True
    return mask


def two_stage(stage1: np.ndarray, short: np.ndarray, stage2: np.ndarray) -> np.ndarray:
    """Scores that put the shortlisted rows first, in ``stage2`` order (``stage2``: (..., n_short), values of
    the shortlisted rows; a leading axis scores several weightings at once), and the rest after them in
    ``stage1`` order; ties stay ties."""
    stage1 = np.asarray(stage1, dtype=np.float64)
    stage2 = np.asarray(stage2, dtype=np.float64)
    out = np.broadcast_to(stage1, stage2.shape[:-1] + stage1.shape).copy()
    if not short.any():
        return out
    floor = stage1[~short].max() + 1.0 if (~short).any() else 0.0
    out[..., short] = stage2 - stage2.min(axis=-1, keepdims=True) + floor
    return out


# -- ranking metrics ------------------------------------------------------------------------------------
def expected_hits(scores: np.ndarray, truth: int | None, ks: Sequence[int] = HIT_KS) -> dict[int, float]:
    """P(the truth is among the first k) for each k, ties broken uniformly at random: with g candidates
    scored above the truth and t others tied with it, the truth's place is uniform on g+1 … g+t+1.
    ``truth`` is its index in ``scores``; None (absent from the pool) is a miss for every k."""
    if truth is None:
        return {k: 0.0 for k in ks}
    h = hits_matrix(np.asarray(scores, dtype=np.float64)[None, :], truth, ks)[0]
    return {k: float(x) for k, x in zip(ks, h)}


def hits_matrix(scores: np.ndarray, truth: int, ks: Sequence[int]) -> np.ndarray:
    """:func:`expected_hits` of each row of ``scores`` (m, n): (m, len(ks))."""
    k = np.asarray(ks, dtype=np.float64)[None, :]
    st = scores[:, truth : truth + 1]
    above = (scores > st).sum(1, keepdims=True)
    tied = (scores == st).sum(1, keepdims=True) - 1
    return np.clip(k - above, 0, tied + 1) / (tied + 1)


@dataclass
class Pool:
    """One spectrum's candidates as arrays (library of both tracks and de novo; one row per structure)."""

    key: str
    truth: int  # row of the true structure (it is always a library row: both tracks hold it)
    fingerprint: np.ndarray  # (n,)
    decoder: np.ndarray  # (n, Q) log-probability under each stored query; nan: not scorable or not computed
    scored: np.ndarray  # (n,) bool: decoder (and fragments) computed (every candidate a shortlist can hold)
    in_track: dict[str, np.ndarray]  # track -> (n,) bool: in that track's library
    count: np.ndarray  # (n,) de novo samples of the structure (0: library only)
    fragments: np.ndarray | None = None  # (n,) explained intensity share, when computed

    @classmethod
    def from_record(cls, rec: dict, fragments: Sequence[float | None] | None = None) -> Pool:
        """A pool from a ``pools.jsonl`` record (and its ``fragments.jsonl`` shares, when computed)."""
        cands = rec["candidates"]
        keys = [c["k"] for c in cands]
        n_q = len(rec["queries"])
        dec = np.array([[np.nan if v is None else v for v in (c.get("dec") or [None] * n_q)] for c in cands],
                       dtype=np.float64).reshape(len(cands), n_q)
        frag = None
        if fragments is not None:
            frag = np.array([np.nan if f is None else f for f in fragments], dtype=np.float64)
        return cls(rec["key"], keys.index(rec["truth"]["inchikey14"]),
                   np.array([c["fp"] for c in cands], dtype=np.float64), dec,
                   np.array(["dec" in c for c in cands]),
                   {t: np.array([bool(c.get(t[0] + "l")) for c in cands]) for t in TRACKS},
                   np.array([c.get("n", 0) for c in cands], dtype=np.int64), frag)

    def decoder_mean(self, query_indices: Sequence[int]) -> np.ndarray:
        """Mean decoder log-probability over the stored queries ``query_indices`` (nan: none stored, as in
        library-only pools)."""
        if self.decoder.shape[1] == 0:
            return np.full(len(self.decoder), np.nan)
        return self.decoder[:, list(query_indices)].mean(axis=1)


SETTINGS = ("library", "joint", "denovo", "crowded")
SETTING_KS = {"library": HIT_KS, "joint": HIT_KS, "denovo": CROWDING_KS, "crowded": CROWDING_KS}


def setting_rows(pool: Pool, track: str, setting: str) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Which candidates are ranked, which of them are known (library) structures, and where the truth is
    among them (None: absent). ``library``: the track's library alone; ``joint``: library + de novo in one
    ranking; ``denovo``: the de novo candidates alone (library off); ``crowded``: the library without the
    truth + de novo (the truth reachable de novo only)."""
    lib, gen = pool.in_track[track], pool.count > 0
    if setting == "library":
        keep, known = lib, lib
    elif setting == "joint":
        keep, known = lib | gen, lib
    elif setting == "denovo":
        keep, known = gen, np.zeros_like(lib)
    elif setting == "crowded":
        lib = lib.copy()
        lib[pool.truth] = False
        keep, known = lib | gen, lib
    else:
        raise ConfigError(f"unknown setting {setting!r}")
    rows = np.flatnonzero(keep)
    where = np.flatnonzero(rows == pool.truth)
    return rows, known[rows], (int(where[0]) if len(where) else None)


@dataclass(frozen=True)
class Variant:
    """A merged score to measure (:class:`MergedScore` and more). Stage 1: fingerprint + ``prior``·known +
    ``count_weight``·ln(max(count, 1)) (``sized_prior``: the prior less ln(known structures in the ranking),
    one prior shared by a library's structures); without decoder and fragment weights that is the ranking.
    Else the first ``shortlist`` are re-ranked by stage 1 with the fingerprint weighted ``fp_weight``, plus
    ``decoder_weight``·decoder mean over ``queries`` (stored query indices) + ``fragment_weight``·fragment
    share. ``random``: a seeded random order."""

    name: str
    prior: float = 0.0
    count_weight: float = 0.0
    decoder_weight: float = 0.0
    queries: tuple[int, ...] = (0,)
    fp_weight: float = 1.0
    fragment_weight: float = 0.0
    sized_prior: bool = False
    shortlist: int = SHORTLIST
    random: bool = False

    def stage1(self, pool: Pool, rows: np.ndarray, known: np.ndarray, prior: float | None = None) -> np.ndarray:
        b = self.prior if prior is None else prior
        if self.sized_prior:
            b = b - math.log(max(int(known.sum()), 1))
        s = pool.fingerprint[rows] + b * known
        if self.count_weight:
            s = s + self.count_weight * np.log(np.maximum(pool.count[rows], 1))
        return s

    def scores(self, pool: Pool, rows: np.ndarray, known: np.ndarray, seed: int = 0) -> np.ndarray:
        if self.random:
            return np.random.default_rng([seed, zlib.crc32(pool.key.encode())]).random(len(pool.fingerprint))[rows]
        return self.scores_many(pool, rows, known, "decoder_weight", [self.decoder_weight])[0]

    def scores_many(self, pool: Pool, rows: np.ndarray, known: np.ndarray, field_name: str,
                    weights: Sequence[float], prior: float | None = None) -> np.ndarray:
        """Scores (len(weights), n) with ``field_name`` (``decoder_weight``, ``fragment_weight`` or
        ``count_weight``) set to each of ``weights`` (and the prior to ``prior`` when given)."""
        if field_name == "count_weight":
            return np.stack([replace(self, count_weight=float(w)).scores_many(
                pool, rows, known, "decoder_weight", [self.decoder_weight], prior)[0] for w in weights])
        stage1 = self.stage1(pool, rows, known, prior)
        w = {"decoder_weight": self.decoder_weight, "fragment_weight": self.fragment_weight}
        if not any(w.values()) and not any(weights) and self.fp_weight == 1.0:
            return np.broadcast_to(stage1, (len(weights), len(stage1)))
        short = shortlist_mask(stage1, self.shortlist)
        sel = rows[short]
        if not pool.scored[sel].all():
            raise ConfigError(f"{pool.key}: a shortlisted candidate has no decoder score (shortlist too long?)")
        base = self.fp_weight * pool.fingerprint[sel] + (stage1[short] - pool.fingerprint[sel])
        terms = {"decoder_weight": fill_missing(pool.decoder_mean(self.queries)[sel]),
                 "fragment_weight": (np.nan_to_num(pool.fragments[sel], nan=0.0) if pool.fragments is not None
                                     else np.zeros(len(sel)))}
        fixed = sum(w[f] * terms[f] for f in w if f != field_name)
        stage2 = base + fixed + np.asarray(weights, dtype=np.float64)[:, None] * terms[field_name][None, :]
        return two_stage(stage1, short, stage2)


def pool_hits(variant: Variant, pool: Pool, track: str, setting: str) -> dict[int, float]:
    rows, known, truth = setting_rows(pool, track, setting)
    return expected_hits(variant.scores(pool, rows, known), truth, SETTING_KS[setting])


def evaluate_pools(variant: Variant, pools: Sequence[Pool]) -> dict:
    """Mean Hit@k of ``variant`` per track and setting (and each spectrum's Top-1, as ``_top1``)."""
    out: dict = {}
    for track in TRACKS:
        res = {}
        for setting in SETTINGS:
            hits = [pool_hits(variant, p, track, setting) for p in pools]
            res[setting] = {f"hit{k}": float(np.mean([h[k] for h in hits])) if hits else float("nan")
                            for k in SETTING_KS[setting]}
            res[setting]["_top1"] = [h[1] for h in hits]
        out[track] = res
    return out


def crowding_summary(result: dict, today: dict) -> dict:
    """What the library does to de novo answers (truth removed from it), per track: Top-1/Top-10 with the
    library off under today's ranking and under the variant, with the library on, and how many spectra
    whose truth the variant ranks first with the library off lose that place with it on."""
    out = {}
    for track in TRACKS:
        off, on, base = result[track]["denovo"], result[track]["crowded"], today[track]["denovo"]
        pushed = sum(max(a - b, 0.0) for a, b in zip(off["_top1"], on["_top1"]))
        out[track] = {"today_top1": base["hit1"], "today_top10": base["hit10"], "off_top1": off["hit1"],
                      "off_top10": off["hit10"], "on_top1": on["hit1"], "on_top10": on["hit10"],
                      "pushed_down": pushed}
    return out


def strip_private(result: dict) -> dict:
    return {t: {s: {k: v for k, v in m.items() if not k.startswith("_")} for s, m in r.items()}
            for t, r in result.items()}


# -- choosing weights ----------------------------------------------------------------------------------
PRIORS = tuple(float(x) for x in np.arange(-10.0, 60.01, 2.0))
DECODER_WEIGHTS = tuple(round(float(x), 2) for x in np.arange(0.0, 2.001, 0.1))
FRAGMENT_WEIGHTS = tuple(float(x) for x in range(0, 41, 4))


def sweep(template: Variant, field_name: str, pools: Sequence[Pool], priors: Sequence[float],
          weights: Sequence[float]) -> dict:
    """Mean Hit@k of ``template`` at every (prior, ``field_name`` weight), per track and setting: arrays
    (len(priors), len(weights), len(ks))."""
    out: dict = {}
    for track in TRACKS:
        out[track] = {}
        for setting in SETTINGS:
            ks = SETTING_KS[setting]
            total = np.zeros((len(priors), len(weights), len(ks)))
            for pool in pools:
                rows, known, truth = setting_rows(pool, track, setting)
                if truth is None:
                    continue
                for i, b in enumerate(priors):
                    total[i] += hits_matrix(template.scores_many(pool, rows, known, field_name, weights, b), truth, ks)
            out[track][setting] = total / max(len(pools), 1)
    return out


def choose(template: Variant, field_name: str, pools: Sequence[Pool], priors: Sequence[float],
           weights: Sequence[float], tolerance: float | None = 0.0) -> tuple[Variant, dict]:
    """The (prior, ``field_name`` weight) of ``template`` with the best joint Hit@1 (mean over the tracks;
    then Hit@5) among those whose de novo Top-1 and Top-10 with the library on (truth removed from it) lose
    at most ``tolerance`` (a share of spectra) against today's ranking (fingerprint score, no library) on
    every track; ``None``: no crowding limit. Ties go to the smallest weights."""
    today = evaluate_pools(Variant("fingerprint"), pools)
    grid = sweep(template, field_name, pools, priors, weights)
    h1 = np.mean([grid[t]["joint"][..., 0] for t in TRACKS], axis=0)  # (P, W)
    h5 = np.mean([grid[t]["joint"][..., 1] for t in TRACKS], axis=0)
    base = np.array([[today[t]["denovo"][f"hit{k}"] for k in CROWDING_KS] for t in TRACKS])  # (T, 2)
    loss = np.max(base[:, None, None, :] - np.stack([grid[t]["crowded"] for t in TRACKS]), axis=(0, 3))  # (P, W)
    ok = np.ones_like(h1, dtype=bool) if tolerance is None else loss <= tolerance + 1e-9
    best_key, best = None, (0, 0)
    for i, b in enumerate(priors):
        for j, w in enumerate(weights):
            key = (bool(ok[i, j]), round(float(h1[i, j]), 9), round(float(h5[i, j]), 9), -abs(w), -abs(b))
            if best_key is None or key > best_key:
                best_key, best = key, (i, j)
    i, j = best
    chosen = replace(template, prior=float(priors[i]), **{field_name: float(weights[j])})
    return chosen, {"crowding_ok": best_key[0], "crowding_loss": float(loss[i, j]), "joint_hit1": best_key[1],
                    "joint_hit5": best_key[2]}


# -- libraries ------------------------------------------------------------------------------------------
def track_rows(library, truth_key: str, formula: str, mass: float, rng: np.random.Generator,
               size: int = LIBRARY_SIZE - 1, ppm: float = MASS_PPM) -> tuple[np.ndarray, np.ndarray]:
    """Library rows of the formula track (up to ``size`` structures of ``formula``) and of the mass track (up
    to ``size`` within ``ppm`` of ``mass``), never the truth's key. The mass track is a uniform sample of the
    window whose rows of the truth's formula are the formula track's first draws (so the tracks overlap)."""
    truth_row = library.row_of_key(truth_key)
    same = library.rows_of_formula(formula)
    same = rng.permutation(same[same != truth_row]) if truth_row is not None else rng.permutation(same)
    window = library.rows_near_mass(mass, ppm)
    window = window[window != truth_row] if truth_row is not None else window
    in_formula = np.isin(window, same)
    same_in, other = window[in_formula], window[~in_formula]
    formula_track = same[:size]
    n = min(size, len(window))
    if n and len(other) and len(same_in):
        k = int(rng.hypergeometric(len(same_in), len(other), n))  # same-formula rows in a uniform sample
    else:
        k = n if len(same_in) else 0
    same_order = same[np.isin(same, same_in)]  # the formula track's draw order, restricted to the window
    mass_track = np.concatenate([same_order[:k], rng.permutation(other)[: n - k]]).astype(np.int64)
    return np.sort(formula_track), np.sort(mass_track)
