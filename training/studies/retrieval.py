"""Known structures ranked together with de novo candidates: the measurement that chooses the merged score.

A structure library adds known structures to a spectrum's candidate pool (issue #36); they must be ranked in
ONE ranking with the decoder's de novo candidates. The de novo candidates were generated to match the
predicted fingerprint, so under the fingerprint score alone their look-alikes outscore a known true
structure; a prior that lifts every known structure lets a library's hundreds of isomers crowd out a correct
de novo answer. This module measures candidate merged scores and chooses one (:class:`MergedScore`)::

    python -m training.studies.retrieval --mgf ../shared/data/massbank_dev.mgf.gz \\
        --corpus ../shared/data/molecules.tsv.gz --out runs/retrieval/v10 \\
        --choose-spectra 150 --report-spectra 200

**Sets.** One seeded spectrum per structure (:func:`training.evaluation.evaluate.select_spectra`, as ``msgpt-eval
--one-per-structure``; adducts the model supports): weights are chosen on ``FOLD=train`` spectra of
structures the bundle's encoder never trained on (:func:`training.encoder.noise.unseen_structures` with the licences
its ``config.json`` records), and reported on ``FOLD=val``.

**Libraries** (two tracks, as MassSpecGym's retrieval): the *formula* track is the true structure plus up to
255 corpus structures of its formula, the *mass* track the truth plus up to 255 corpus structures within
10 ppm of its neutral mass (a uniform sample of the window that reuses the formula track's draws, so the two
share most structures); corpus structures with the truth's InChIKey first block are left out first. The
corpus is indexed once as an :mod:`engine.library` structure library (kept in ``$MSGPT_HOME``).

**Pools.** Each spectrum's de novo search runs as the app runs it (:class:`~engine.elucidation.pipeline.
SpectrumSession`, default :class:`~engine.elucidation.pipeline.QueryParams`: B=100, seed 0); every candidate
(library or de novo; a structure in both is one candidate) gets its fingerprint score
(:class:`~engine.model.scoring.FingerprintScorer` of the spectrum's posterior, as the app's), its decoder
log-probability under a few band queries (teacher-forced, conditioned on its own formula, as
:func:`engine.insight.structure_score.decoder_log_probs`; each query timed apart) and, for the first
``--fragment-spectra`` spectra, the share of intensity its fragments explain
(:func:`engine.spectra.fragments.explain_peaks`). Pools are cached in ``<out>/pools.jsonl`` as they are done,
so a rerun (or a larger ``--*-spectra``) costs only what is new. ``--library-only`` pools hold the library
tracks alone (the encoder runs, nothing is drawn or decoder-scored, nothing is analysed): what
:mod:`training.studies.retrieval_forward`'s suspect-list rule needs, in seconds.

**Rankings** (:func:`evaluate_pools`): Hit@1/5/20 of the truth ranked among the library alone and among the
library plus the de novo candidates, per track; ties are broken at random in expectation
(:func:`expected_hits`). The crowding check removes the truth from the library (it is then reachable de
novo only) and compares de novo Top-1/Top-10 with the library on and off.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from engine.chem import molecules as chem
from engine.errors import ConfigError, MsgptError

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
    (docs/retrieval.md).
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
# FOLD=val (docs/retrieval.md has the tables and the command).
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


def open_corpus(path: str | os.PathLike, home: str | os.PathLike | None = None):
    """The corpus (smiles, inchikey14, source) as a structure library, indexed once into ``$MSGPT_HOME``
    (``home`` sets it: the first time takes ~15 minutes for 562k structures on one core)."""
    from engine.library import load_library

    if home:
        os.environ["MSGPT_HOME"] = str(home)
    return load_library(path, trust_keys=True)


def corpus_fingerprint_bits(library) -> int:
    return int(library.info.get("fingerprint", {}).get("n_bits", chem.N_BITS))


# -- scoring candidates ----------------------------------------------------------------------------------
def query_indices(queries, n_thresholds: int, positions: Sequence[float] = QUERY_POSITIONS) -> list[int]:
    """The band query (index into ``queries``, :func:`engine.model.querying.build_queries`) holding the
    threshold at each of ``positions`` (0 = first threshold, 1 = last)."""
    out = []
    for p in positions:
        t = round(float(p) * (n_thresholds - 1))
        out.append(next(i for i, q in enumerate(queries) if t in q.threshold_indices))
    return out


def safe_ids(tokenizer, smiles: str, block_size: int) -> list[int] | None:
    """Token ids of the canonical SAFE string of ``smiles``; None when SAFE cannot cut it, a token is outside
    the vocabulary or it is longer than the decoder's block (no decoder score then)."""
    from engine.insight.structure_score import canonical_safe

    text = canonical_safe(smiles)
    if text is None:
        return None
    ids = tokenizer.encode(text)
    if len(ids) > block_size or any(i == tokenizer.unk_id for i in ids[1:-1]):
        return None
    return ids


def decoder_scores(decoder, token_ids: Sequence[list[int] | None], formulas: Sequence[str],
                   query_bits: np.ndarray, batch_size: int = 128) -> np.ndarray:
    """log p(tokens | query, formula) of each structure (summed over its tokens, nats) under one query, each
    conditioned on its own formula; nan where ``token_ids`` is None. Rows are batched by formula and length."""
    import torch

    from engine.chem.formula import formula_vector, parse_formula
    from engine.model.decoder import PAD_ID, collate_queries

    cfg = decoder.config
    device = next(decoder.parameters()).device
    out = np.full(len(token_ids), np.nan)
    todo = [i for i, ids in enumerate(token_ids) if ids is not None]
    if not todo:
        return out
    names = sorted({formulas[i] for i in todo})
    group = {f: g for g, f in enumerate(names)}
    vecs = np.stack([formula_vector(parse_formula(f)) for f in names])
    with torch.inference_mode():
        bits, mask, form = collate_queries([query_bits] * len(names), vecs, cfg.max_fp_tokens, cfg.fp_bits)
        context = decoder.context_kv(*decoder.encode_context(bits.to(device), mask.to(device), form.to(device)))
        todo.sort(key=lambda i: (group[formulas[i]], len(token_ids[i])))
        for lo in range(0, len(todo), batch_size):
            rows = todo[lo : lo + batch_size]
            width = max(len(token_ids[i]) for i in rows)
            ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
            for r, i in enumerate(rows):
                ids[r, : len(token_ids[i])] = torch.tensor(token_ids[i])
            ids = ids.to(device)
            groups = torch.tensor([group[formulas[i]] for i in rows], device=device)
            logits = decoder.decode(ids[:, :-1], context.for_rows(groups))
            logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
            valid = ids[:, 1:] != PAD_ID
            out[rows] = (logp * valid).sum(-1).double().cpu().numpy()
    return out


def fragment_share(smiles: str, spectrum) -> float | None:
    """Share of the spectrum's intensity the structure's bond-cleavage fragments explain."""
    from engine.spectra.fragments import explain_peaks

    mol = chem.mol_from_smiles(smiles)
    if mol is None:
        return None
    try:
        return float(explain_peaks(mol, spectrum.mz, spectrum.intensity, spectrum.adduct).explained_intensity)
    except MsgptError:
        return None


@dataclass
class _Entry:
    smiles: str
    formula: str
    bits: np.ndarray
    fl: bool = False  # in the formula track's library
    ml: bool = False  # in the mass track's library
    count: int = 0  # de novo samples
    fp: float = float("nan")


def _entries(library, spectrum, ref, result, formula_rows, mass_rows, n_bits: int) -> dict[str, _Entry]:
    """Every candidate of one spectrum by InChIKey first block: the truth, both tracks' rows, the de novo
    candidates (a structure in both keeps the library's SMILES and gets the de novo count)."""
    truth_formula = chem.mol_formula(ref.mol)
    entries = {ref.inchikey14: _Entry(ref.smiles, truth_formula, chem.morgan_bits(ref.mol, n_bits), True, True)}
    for row in sorted(set(formula_rows.tolist()) | set(mass_rows.tolist())):
        key = library.inchikey14(row)
        entries[key] = _Entry(library.smiles(row), library.record(row).formula, library.bits(row))
    for row in formula_rows:
        entries[library.inchikey14(row)].fl = True
    for row in mass_rows:
        entries[library.inchikey14(row)].ml = True
    for c in [] if result is None else result.candidates:
        if c.inchikey14 in entries:
            entries[c.inchikey14].count = c.count
        else:
            entries[c.inchikey14] = _Entry(c.smiles, c.formula, np.asarray(c.bits), count=c.count)
    return entries


def rescore_keys(entries: dict[str, _Entry], truth_key: str, size: int = SHORTLIST) -> list[str]:
    """The candidates any shortlist of ``size`` can hold, for any library prior and count weight, track and
    setting (see :func:`setting_rows`): the truth, the best ``size`` + 1 by fingerprint score of each track's
    library (the truth may leave it) and every de novo candidate."""
    keys = list(entries)
    fp = np.array([entries[k].fp for k in keys])
    chosen = {truth_key} | {k for k, e in entries.items() if e.count > 0}
    for mask in ([e.fl for e in entries.values()], [e.ml for e in entries.values()]):
        idx = np.flatnonzero(mask)
        chosen.update(keys[i] for i in idx[np.lexsort((idx, -fp[idx]))][: size + 1])
    return [k for k in keys if k in chosen]


def score_pool(model, spectrum, ref, library, params, *, seed: int = 0,
               positions: Sequence[float] = QUERY_POSITIONS, library_only: bool = False) -> dict:
    """One spectrum: the de novo search as the app runs it, both library tracks, every candidate's
    fingerprint score and the decoder scores of those a shortlist can hold (:func:`rescore_keys`); a
    JSON-ready record with the seconds each part took. ``library_only``: both tracks alone (the encoder runs,
    no de novo search and no decoder scores), for measures of the library's own order."""
    from engine.elucidation.pipeline import SpectrumSession
    from engine.library.build import neutral_mass
    from engine.model.querying import band_thresholds, build_queries
    from engine.model.scoring import FingerprintScorer
    from engine.progress import run_to_end

    from training.evaluation.evaluate import spectrum_key

    key = spectrum_key(spectrum)
    t0 = time.perf_counter()
    session = SpectrumSession(model, spectrum)
    result = None if library_only else run_to_end(session.run(params))
    seconds = {"denovo": time.perf_counter() - t0}
    cal = model.calibration.for_polarity(spectrum.polarity)
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    mass = neutral_mass(ref.mol)
    formula_rows, mass_rows = track_rows(library, ref.inchikey14, chem.mol_formula(ref.mol), mass, rng)
    entries = _entries(library, spectrum, ref, result, formula_rows, mass_rows, model.decoder.config.fp_bits)
    t = time.perf_counter()
    scorer = FingerprintScorer(session.posterior, cal.bits)
    for e in entries.values():
        e.fp = scorer.score(e.bits)
    seconds["fingerprint"] = time.perf_counter() - t
    rescored = [] if library_only else rescore_keys(entries, ref.inchikey14)
    t = time.perf_counter()
    tok_ids = [safe_ids(model.tokenizer, entries[k].smiles, model.decoder.config.block_size) for k in rescored]
    seconds["safe"] = time.perf_counter() - t
    queries, chosen = [], []  # library-only pools: no decoder scores, so no queries
    if not library_only:
        thresholds = band_thresholds(cal, params.kappa_min, params.kappa_max, params.groups)
        queries = build_queries(session.posterior, thresholds)
        chosen = query_indices(queries, len(thresholds), positions)
    dec, seconds["decoder"] = {}, []
    for qi in chosen:
        t = time.perf_counter()
        values = decoder_scores(model.decoder, tok_ids, [entries[k].formula for k in rescored], queries[qi].bits)
        seconds["decoder"].append(time.perf_counter() - t)
        for k, v in zip(rescored, values):
            dec.setdefault(k, []).append(None if not math.isfinite(v) else round(float(v), 4))
    cands = []
    for k, e in entries.items():
        c = {"k": k, "s": e.smiles, "fp": round(float(e.fp), 4)}
        c.update({"fl": int(e.fl), "ml": int(e.ml)} if e.fl or e.ml else {})
        if e.count:
            c["n"] = e.count
        if k in dec:
            c["dec"] = dec[k]
        cands.append(c)
    return {
        "key": key, "id": spectrum.id, "fold": spectrum.metadata.get("fold", ""), "adduct": spectrum.adduct,
        "formula": spectrum.formula, "mass": mass, "truth": {"smiles": ref.smiles, "inchikey14": ref.inchikey14},
        "queries": [{"position": p, "query": qi, "bits": len(queries[qi].bits)} for p, qi in zip(positions, chosen)],
        "n_formula_track": len(formula_rows) + 1, "n_mass_track": len(mass_rows) + 1,
        "n_denovo": 0 if result is None else len(result.candidates),
        "denovo_rank": None if result is None else result.reference_rank, "n_rescored": len(rescored),
        "n_decoder_scorable": sum(i is not None for i in tok_ids), "seconds": seconds, "candidates": cands,
    }


def add_fragments(record: dict, spectrum) -> dict:
    """The fragment share of every rescored candidate of ``record`` (None for the others), and the seconds."""
    t = time.perf_counter()
    shares = [fragment_share(c["s"], spectrum) if "dec" in c else None for c in record["candidates"]]
    return {"key": record["key"], "fr": [None if x is None else round(x, 4) for x in shares],
            "n": sum("dec" in c for c in record["candidates"]), "seconds": time.perf_counter() - t}


# -- the spectra ---------------------------------------------------------------------------------------
def mgf_labels(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FOLD, LICENSE and InChIKey first block of every record of an MGF (a plain text scan, no peaks read;
    the key from SMILES when a record has no INCHIKEY)."""
    folds, licenses, keys = [], [], []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        rec: dict[str, str] = {}
        for line in fh:
            line = line.strip()
            if line == "BEGIN IONS":
                rec = {}
            elif line == "END IONS":
                key = rec.get("INCHIKEY", "")[:14]
                if not key and rec.get("SMILES"):
                    key = chem.inchikey14(rec["SMILES"]) or ""
                folds.append(rec.get("FOLD", ""))
                licenses.append(rec.get("LICENSE", ""))
                keys.append(key)
            elif "=" in line and not line[0].isdigit():
                name, value = line.split("=", 1)
                rec[name.upper()] = value
    return np.array(folds), np.array(licenses), np.array(keys)


@dataclass
class Sets:
    choose: list  # (Spectrum, Reference): FOLD=train, structures the encoder never trained on
    report: list  # FOLD=val
    info: dict


def select_sets(model, mgf: str, n_choose: int, n_report: int, seed: int = 0,
                licenses: Sequence[str] | None = None, exclude: Callable[[str], bool] | None = None) -> Sets:
    """One seeded spectrum per structure (``msgpt-eval --one-per-structure``): the first ``n_report`` of
    FOLD=val, and the first ``n_choose`` of FOLD=train whose structure no FOLD=train record of the encoder's
    training licences holds (``licenses`` overrides the licences the bundle records) and that ``exclude``
    (called with the InChIKey first block) does not exclude."""
    from training.evaluation.evaluate import EvalConfig, select_spectra
    from training.encoder.noise import encoder_licenses, unseen_structures

    trained = list(licenses) if licenses else encoder_licenses(model.config, str(model.path))
    common = {"model": str(model.path), "mgf": str(mgf), "out": "", "one_per_structure": True, "seed": seed,
              "variants": (), "kappa_sweep": False}
    report = select_spectra(model, EvalConfig(folds=("val",), max_spectra=n_report or None, **common))
    train = select_spectra(model, EvalConfig(folds=("train",), **common))
    fold, lic, keys = mgf_labels(mgf)
    unseen = set(keys[unseen_structures(fold, lic, keys, trained)].tolist())
    candidates = [(s, r) for s, r in train.chosen if r.inchikey14 in unseen]
    kept = [(s, r) for s, r in candidates if exclude is None or not exclude(r.inchikey14)]
    info = {"trained_licenses": trained, "report": report.info,
            "choose": {"eligible_structures": train.info["eligible_structures"],
                       "unseen_structures": len(candidates), "not_excluded": len(kept),
                       "selected": min(n_choose, len(kept))}}
    candidates = kept
    return Sets(candidates[:n_choose], report.chosen[: n_report] if n_report else [], info)


def _spectrum_dict(s) -> dict:
    from dataclasses import fields

    d = {f.name: getattr(s, f.name) for f in fields(s)}
    d["mz"], d["intensity"] = s.mz.tolist(), s.intensity.tolist()
    return d


def cached_sets(model, mgf: str, n_choose: int, n_report: int, seed: int, licenses: Sequence[str] | None,
                path: Path, exclude: Callable[[str], bool] | None = None, exclude_name: str = "") -> Sets:
    """:func:`select_sets`, kept in ``path`` (JSON: the selected spectra, peaks included) for reruns with the
    same file, model adducts, counts, seed and licences (reading the MGF twice takes minutes)."""
    from engine.spectra.spectrum import Spectrum

    from training.evaluation.evaluate import Reference

    stat = Path(mgf).stat()
    key = {"mgf": str(Path(mgf).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "seed": seed,
           "choose": n_choose, "report": n_report, "licenses": list(licenses or []),
           "adducts": list(model.supported_adducts), "exclude": exclude_name, "format_version": FORMAT_VERSION}
    n_bits = model.decoder.config.fp_bits
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            def pairs(items):
                return [(s, Reference.of(s, n_bits)) for s in (Spectrum(**d) for d in items)]

            return Sets(pairs(saved["choose"]), pairs(saved["report"]), saved["info"])
    sets = select_sets(model, mgf, n_choose, n_report, seed, licenses, exclude)
    path.write_text(json.dumps({"key": key, "info": sets.info, "choose": [_spectrum_dict(s) for s, _ in sets.choose],
                                "report": [_spectrum_dict(s) for s, _ in sets.report]}), encoding="utf-8")
    return sets


# -- the run -------------------------------------------------------------------------------------------
@dataclass
class RetrievalConfig:
    mgf: str
    corpus: str
    out: str
    model: str = ""
    choose_spectra: int = 150
    report_spectra: int = 200
    fragment_spectra: int = 0
    seed: int = 0
    threads: int | None = 1
    device: str = "cpu"
    precision: str = "auto"
    home: str | None = None
    licenses: tuple[str, ...] | None = None
    tolerance: float = 0.0
    choose_outside_corpus: bool = False  # True: as FOLD=val, the decoder never saw the truth (only the decoys)
    library_only: bool = False  # pools of the library tracks alone, no analysis (see build_parser)
    command: str = ""

    def run_key(self, model, library) -> dict:
        from engine.elucidation.pipeline import QueryParams

        return {"mgf": str(Path(self.mgf).resolve()), "corpus_sha256": library.checksum, "seed": self.seed,
                "model_checksum": model.checksum, "params": QueryParams().describe(), "library_size": LIBRARY_SIZE,
                "mass_ppm": MASS_PPM, "query_positions": list(QUERY_POSITIONS), "shortlist": SHORTLIST,
                "format_version": FORMAT_VERSION,
                "precision": str(model.dtype), **({"library_only": True} if self.library_only else {})}


def read_jsonl(path: Path) -> dict[str, dict]:
    """Records by key; a line cut by an interrupted run is dropped."""
    out = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[rec["key"]] = rec
    return out


def _append(path: Path, rec: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")


def compute_pools(cfg: RetrievalConfig, model, library, sets: Sets, out: Path) -> tuple[dict, dict]:
    """Every selected spectrum's pool (``pools.jsonl``) and fragment shares (``fragments.jsonl``, the first
    ``fragment_spectra`` of each set), computing only what the files lack."""
    from tqdm import tqdm

    from engine.elucidation.pipeline import QueryParams

    from training.evaluation.evaluate import spectrum_key

    pools_path, frag_path = out / "pools.jsonl", out / "fragments.jsonl"
    pools, frags = read_jsonl(pools_path), read_jsonl(frag_path)
    params = QueryParams()
    for name, pairs in (("choose", sets.choose), ("report", sets.report)):
        todo = [(s, r) for s, r in pairs if spectrum_key(s) not in pools]
        for s, ref in tqdm(todo, desc=f"pools ({name})", unit="spectrum", file=sys.stderr, dynamic_ncols=True):
            rec = score_pool(model, s, ref, library, params, seed=cfg.seed, library_only=cfg.library_only)
            pools[rec["key"]] = rec
            _append(pools_path, rec)
        todo = [(s, r) for s, r in pairs[: cfg.fragment_spectra] if spectrum_key(s) not in frags]
        for s, _ in tqdm(todo, desc=f"fragments ({name})", unit="spectrum", file=sys.stderr, dynamic_ncols=True):
            rec = add_fragments(pools[spectrum_key(s)], s)
            frags[rec["key"]] = rec
            _append(frag_path, rec)
    return pools, frags


def _pools_of(pairs, pools: dict, frags: dict, fragments_only: bool = False) -> list[Pool]:
    from training.evaluation.evaluate import spectrum_key

    keys = [spectrum_key(s) for s, _ in pairs]
    if fragments_only:
        keys = [k for k in keys if k in frags]
    return [Pool.from_record(pools[k], frags[k]["fr"] if k in frags else None) for k in keys]


# -- the analysis --------------------------------------------------------------------------------------
DEC, COUNT = "decoder_weight", "count_weight"
COUNT_WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
COUNT_FAMILY = "fingerprint + prior + count"
FAMILIES = (  # (template, swept weight, priors, weights, crowding limit)
    (Variant("fingerprint + prior"), DEC, PRIORS, (0.0,), True),
    (Variant("fingerprint + decoder (1 query)"), DEC, (0.0,), DECODER_WEIGHTS, True),
    (Variant("fingerprint + prior + decoder (1 query)"), DEC, PRIORS, DECODER_WEIGHTS, True),
    (Variant("fingerprint + prior + decoder (3 queries)", queries=(0, 1, 2)), DEC, PRIORS, DECODER_WEIGHTS, True),
    (Variant("fingerprint + sized prior + decoder (1 query)", sized_prior=True), DEC, PRIORS, DECODER_WEIGHTS, True),
    (Variant(COUNT_FAMILY), COUNT, PRIORS, COUNT_WEIGHTS, True),
    (Variant("fingerprint + prior, no crowding limit"), DEC, PRIORS, (0.0,), False),
    (Variant(COUNT_FAMILY + ", no crowding limit"), COUNT, PRIORS, COUNT_WEIGHTS, False),
)
# built on the count family's chosen weights: (name, swept weight, its grid)
ON_COUNT = ((COUNT_FAMILY + " + decoder (1 query)", DEC, DECODER_WEIGHTS),)
FRAGMENTS = (COUNT_FAMILY + " + fragments", "fragment_weight", FRAGMENT_WEIGHTS)
FIXED = (Variant("random", random=True), Variant("fingerprint (today)"),
         Variant("decoder re-ranks fingerprint top 20 (1 query)", fp_weight=0.0, decoder_weight=1.0),
         Variant("decoder re-ranks fingerprint top 20 (3 queries)", fp_weight=0.0, decoder_weight=1.0,
                 queries=(0, 1, 2)))
TRADEOFF_PRIORS = (-4.0, 0.0, 2.0, 4.0, 6.0, 10.0, 20.0, 60.0)


def ci95(values: Sequence[float], seed: int = 0, n: int = 2000) -> list[float]:
    """Bootstrap 95% interval of the mean."""
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return [float("nan"), float("nan")]
    means = v[np.random.default_rng(seed).integers(0, len(v), (n, len(v)))].mean(1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def describe_variant(v: Variant) -> dict:
    return {k: val for k, val in asdict(v).items() if k != "name"}


def _measure(v: Variant, sets: dict[str, list[Pool]], today: dict[str, dict]) -> dict:
    out = {"weights": describe_variant(v)}
    for name, pools in sets.items():
        res = evaluate_pools(v, pools)
        out[name] = strip_private(res)
        out[name]["crowding"] = crowding_summary(res, today[name])
        out[name]["n"] = len(pools)
        for t in TRACKS:
            for s in ("library", "joint"):
                out[name][t][s]["hit1_ci95"] = ci95(res[t][s]["_top1"])
    return out


def analyse(choose_pools: list[Pool], report_pools: list[Pool], frag_choose: list[Pool], frag_report: list[Pool],
            tolerance: float, progress: Callable[[str], None] | None = None) -> dict:
    """Every fixed variant, and every family with its weights chosen on ``choose_pools``, measured on both
    sets; the trade-off of the prior; the fragment score on the spectra that have it."""
    sets = {"choose": choose_pools, "report": report_pools}
    today = {k: evaluate_pools(Variant("fingerprint"), p) for k, p in sets.items()}
    variants = {v.name: _measure(v, sets, today) for v in FIXED}
    chosen = {}

    def run_family(template, field_name, pools, priors, weights, limit):
        if progress:
            progress(template.name)
        v, info = choose(template, field_name, pools, priors, weights, limit)
        chosen[template.name] = v
        return v, info

    for template, field_name, priors, weights, limited in FAMILIES:
        v, info = run_family(template, field_name, choose_pools, priors, weights, tolerance if limited else None)
        variants[v.name] = {**_measure(v, sets, today), "choice": info}
    for name, field_name, weights in ON_COUNT:
        v, info = run_family(replace(chosen[COUNT_FAMILY], name=name), field_name, choose_pools, PRIORS, weights,
                             tolerance)
        variants[v.name] = {**_measure(v, sets, today), "choice": info}
    out = {"variants": variants, "tradeoff": tradeoff(sets, chosen[COUNT_FAMILY].count_weight)}
    if frag_choose and frag_report:
        name, field_name, weights = FRAGMENTS
        v, info = run_family(replace(chosen[COUNT_FAMILY], name=name), field_name, frag_choose, PRIORS, weights,
                             tolerance)
        fsets = {"choose": frag_choose, "report": frag_report}
        ftoday = {k: evaluate_pools(Variant("fingerprint"), p) for k, p in fsets.items()}
        shown = (Variant("fingerprint (today)"), chosen[COUNT_FAMILY])
        out["fragment_subset"] = {"variants": {x.name: _measure(x, fsets, ftoday) for x in shown}}
        out["fragment_subset"]["variants"][v.name] = {**_measure(v, fsets, ftoday), "choice": info}
    return out


def tradeoff(sets: dict[str, list[Pool]], count_weight: float) -> list[dict]:
    """Joint Hit@1/5 and the crowding check (truth out of the library) along the prior, without and with
    the count term, per set and track."""
    rows = []
    for c in sorted({0.0, float(count_weight)}):
        for b in TRADEOFF_PRIORS:
            row = {"prior": b, "count_weight": c}
            for name, pools in sets.items():
                res = evaluate_pools(Variant("t", prior=b, count_weight=c), pools)
                for t in TRACKS:
                    row[f"{name}_{t}"] = {"joint_hit1": res[t]["joint"]["hit1"], "joint_hit5": res[t]["joint"]["hit5"],
                                          "crowded_top1": res[t]["crowded"]["hit1"],
                                          "crowded_top10": res[t]["crowded"]["hit10"]}
            rows.append(row)
    return rows


def timing_summary(records: Iterable[dict], frags: Iterable[dict]) -> dict:
    """Median seconds per spectrum: the de novo search; the fingerprint score of a 256-structure library;
    SAFE encoding, each decoder query and the fragments of a shortlist of :data:`SHORTLIST`; and the share of
    the de novo time that scoring a 256-structure library takes with 1 and with every query."""
    records = list(records)
    if not records:
        return {}
    lib = np.array([LIBRARY_SIZE / max(len(r["candidates"]), 1) for r in records])
    short = np.array([SHORTLIST / max(r["n_rescored"], 1) for r in records])
    denovo = np.array([r["seconds"]["denovo"] for r in records])
    fp = np.array([r["seconds"]["fingerprint"] for r in records]) * lib
    safe = np.array([r["seconds"]["safe"] for r in records]) * short
    dec = np.array([r["seconds"]["decoder"] for r in records]) * short[:, None]
    out = {"spectra": len(records), "denovo_s": float(np.median(denovo)),
           "fingerprint_s_per_256": float(np.median(fp)), "safe_s_per_shortlist": float(np.median(safe)),
           "decoder_s_per_shortlist_per_query": [float(np.median(dec[:, q])) for q in range(dec.shape[1])],
           "decoder_s_per_256_per_query": float(np.median(dec[:, 0] / short * LIBRARY_SIZE
                                                          / np.array([max(r["n_rescored"], 1) for r in records]))),
           "candidates_per_spectrum": float(np.median([len(r["candidates"]) for r in records])),
           "rescored_per_spectrum": float(np.median([r["n_rescored"] for r in records]))}
    for k in (1, dec.shape[1]):
        out[f"library_scoring_share_{k}_queries"] = float(np.median((fp + safe + dec[:, :k].sum(1)) / denovo))
    n = {r["key"]: r["n_rescored"] for r in records}
    frags = [f for f in frags if f["key"] in n]
    if frags:
        out["fragments_s_per_shortlist"] = float(np.median([f["seconds"] * SHORTLIST / max(n[f["key"]], 1)
                                                            for f in frags]))
    return out


def recommend(result: dict, timings: dict, budget: float = 0.2) -> tuple[str, MergedScore]:
    """The family with the best joint Hit@1 (then Hit@5, then fewer decoder queries) on the choose set among
    those within the crowding limit (any, if none is) whose library scoring fits ``budget`` (share of the
    de novo time; a family without the decoder always does), as a :class:`MergedScore` (a sized prior and
    the fragment score are not part of one: they are reported, not recommended)."""
    best, best_key = None, None
    for name, m in result["variants"].items():
        choice, w = m.get("choice"), m["weights"]
        if not choice or "no crowding limit" in name or w["sized_prior"] or w["fragment_weight"]:
            continue
        k = len(w["queries"]) if w["decoder_weight"] else 0
        if k and timings.get(f"library_scoring_share_{k}_queries", 0.0) > budget:
            continue
        key = (choice["crowding_ok"], round(choice["joint_hit1"], 9), round(choice["joint_hit5"], 9), -k)
        if best_key is None or key > best_key:
            best, best_key = name, key
    w = result["variants"][best]["weights"]
    positions = tuple(QUERY_POSITIONS[q] for q in w["queries"]) if w["decoder_weight"] else (QUERY_POSITIONS[0],)
    return best, MergedScore(library_prior=w["prior"], count_weight=w["count_weight"],
                             decoder_weight=w["decoder_weight"], query_positions=positions, shortlist=w["shortlist"])


# -- the report ----------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _weights_text(w: dict) -> str:
    if w.get("random"):
        return "–"
    parts = []
    if w["prior"] or w["sized_prior"]:
        parts.append(f"b={w['prior']:g}" + (" − ln n" if w["sized_prior"] else ""))
    if w["count_weight"]:
        parts.append(f"c={w['count_weight']:g}")
    if w["decoder_weight"]:
        q = len(w["queries"])
        parts.append(("decoder only" if w["fp_weight"] == 0 else f"a={w['decoder_weight']:g}")
                     + f", {q} quer{'y' if q == 1 else 'ies'}, top {w['shortlist']}")
    if w["fragment_weight"]:
        parts.append(f"fragments {w['fragment_weight']:g}")
    return "; ".join(parts) or "–"


def markdown_tables(variants: dict, set_name: str) -> str:
    """Hit@1/5/20 per variant, track and setting, and the crowding check, of one set."""
    lines = ["| variant | weights | formula: library | formula: + de novo | mass: library | mass: + de novo |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, m in variants.items():
        r = m[set_name]
        cells = [" / ".join(_pct(r[t][s][f"hit{k}"]) for k in HIT_KS) for t in TRACKS for s in ("library", "joint")]
        lines.append(f"| {name} | {_weights_text(m['weights'])} | " + " | ".join(cells) + " |")
    lines += ["", ("Crowding check, truth removed from the library (reachable de novo only): de novo Top-1 / Top-10 "
                   "today (fingerprint score, no library) → the variant with the library off → with it on; "
                   "*pushed down*: spectra whose truth the variant ranks first with the library off but not on."),
              "", "| variant | formula track | pushed down | mass track | pushed down |",
              "| --- | --- | --- | --- | --- |"]
    for name, m in variants.items():
        c = m[set_name]["crowding"]
        cells = []
        for t in TRACKS:
            x = c[t]
            cells += [" → ".join(f"{_pct(x[a + '_top1'])} / {_pct(x[a + '_top10'])}" for a in ("today", "off", "on")),
                      f"{x['pushed_down']:g}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tradeoff_table(rows: list[dict]) -> str:
    """Joint Hit@1 / Hit@5 and de novo Top-1 / Top-10 with the library on (truth out of it) along the prior."""
    head = ["prior b", "count c"] + [f"{s} {t}: joint H1 / H5; crowded Top-1 / Top-10"
                                     for s in ("val", "train-unseen") for t in TRACKS]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [f"{r['prior']:g}", f"{r['count_weight']:g}"]
        for s in ("report", "choose"):
            for t in TRACKS:
                x = r[f"{s}_{t}"]
                cells.append(f"{_pct(x['joint_hit1'])} / {_pct(x['joint_hit5'])}; "
                             f"{_pct(x['crowded_top1'])} / {_pct(x['crowded_top10'])}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_text(t: dict) -> str:
    if not t:
        return ""
    dec = ", ".join(f"{x:.3f}" for x in t["decoder_s_per_shortlist_per_query"])
    shares = ", ".join(f"{k.split('_')[3]} quer{'y' if k.split('_')[3] == '1' else 'ies'} {100 * v:.0f}%"
                       for k, v in t.items() if k.startswith("library_scoring_share"))
    return (f"Median per spectrum ({t['spectra']} spectra): de novo search {t['denovo_s']:.2f} s; fingerprint score "
            f"of 256 structures {t['fingerprint_s_per_256']:.4f} s; for a shortlist of {SHORTLIST}: SAFE encoding "
            f"{t['safe_s_per_shortlist']:.3f} s, decoder {dec} s per query (all 256 would take "
            f"{t['decoder_s_per_256_per_query']:.2f} s per query)"
            + (f", fragments {t['fragments_s_per_shortlist']:.2f} s" if "fragments_s_per_shortlist" in t else "")
            + f". Scoring a 256-structure library / de novo time: {shares}.")


def report_text(metrics: dict) -> str:
    res = metrics["result"]
    n = {k: next(iter(res["variants"].values()))[k]["n"] for k in ("choose", "report")}
    parts = [f"# Library + de novo ranking ({metrics['run']['model']})", "",
             (f"Hit@1 / Hit@5 / Hit@20 (%) of the truth ranked among its library track (truth + up to "
              f"{LIBRARY_SIZE - 1} corpus structures) alone, and together with the de novo candidates."), "",
             f"## FOLD=val, {n['report']} spectra (reported)", "", markdown_tables(res["variants"], "report"), "",
             f"## FOLD=train, structures the encoder never trained on, {n['choose']} spectra (weights chosen here)",
             "", markdown_tables(res["variants"], "choose"), ""]
    if "tradeoff" in res:
        parts += ["## The prior's trade-off", "", tradeoff_table(res["tradeoff"]), ""]
    if "fragment_subset" in res:
        fv = res["fragment_subset"]["variants"]
        m = next(iter(fv.values()))
        title = (f"## Fragment score: the first {m['report']['n']} val spectra (weights on the first "
                 f"{m['choose']['n']} train-unseen)")
        parts += [title, "", markdown_tables(fv, "report"), ""]
    parts += ["## Time", "", timing_text(metrics["timings"]), "",
              f"Chosen: `{metrics['recommended']['merged_score']}` ({metrics['recommended']['variant']})", ""]
    return "\n".join(parts)


# -- command line --------------------------------------------------------------------------------------
def run(cfg: RetrievalConfig) -> dict:
    """Pools (cached), the analysis, ``metrics.json`` and ``report.md`` in ``cfg.out``; returns the metrics."""
    import torch

    from engine.model.bundle import load_bundle
    from engine.paths import default_model_dir

    from training.evaluation.evaluate import code_version, machine

    started = time.time()
    if cfg.library_only and cfg.fragment_spectra:
        raise ConfigError("--library-only pools have no decoder shortlist to give fragment shares to; "
                          "leave out --fragment-spectra")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    model = load_bundle(cfg.model or default_model_dir(), device=cfg.device, precision=cfg.precision)
    library = open_corpus(cfg.corpus, cfg.home)
    if corpus_fingerprint_bits(library) != model.decoder.config.fp_bits:
        raise ConfigError(f"the corpus library has {corpus_fingerprint_bits(library)}-bit fingerprints, the model "
                          f"{model.decoder.config.fp_bits}")
    run_key = cfg.run_key(model, library)
    run_path = out / "run.json"
    old = json.loads(run_path.read_text()).get("run_key") if run_path.exists() else None
    if old is not None and old != run_key and (out / "pools.jsonl").exists():
        changed = sorted(k for k in run_key if old.get(k) != run_key[k])
        raise ConfigError(f"{out} holds pools of another model or settings ({', '.join(changed)}); use a new --out")
    run_path.write_text(json.dumps({"run_key": run_key, "command": cfg.command}, indent=1))
    in_corpus = (lambda key: library.row_of_key(key) is not None) if cfg.choose_outside_corpus else None
    sets = cached_sets(model, cfg.mgf, cfg.choose_spectra, cfg.report_spectra, cfg.seed, cfg.licenses,
                       out / "selection.json", in_corpus, "in corpus" if in_corpus else "")
    pools, frags = compute_pools(cfg, model, library, sets, out)
    if cfg.library_only:
        print(f"library-only pools of {len(pools)} spectra in {out / 'pools.jsonl'}; rank them with "
              f"`python -m training.studies.retrieval_forward --pools {out}` (no analysis: it needs de novo pools)",
              file=sys.stderr)
        return {"run": {"library_only": True, "pools": len(pools), "seconds": time.time() - started}}
    choose_p, report_p = _pools_of(sets.choose, pools, frags), _pools_of(sets.report, pools, frags)
    fc, fr = (_pools_of(sets.choose, pools, frags, True), _pools_of(sets.report, pools, frags, True))
    print("choosing weights ...", file=sys.stderr)
    result = analyse(choose_p, report_p, fc, fr, cfg.tolerance,
                     progress=lambda name: print(f"  {name}", file=sys.stderr))
    keys = {p.key for p in choose_p + report_p}
    timings = timing_summary([pools[k] for k in keys], frags.values())
    name, merged = recommend(result, timings)
    metrics = {
        "run": {"model": f"{model.name} [{model.checksum[:12]}]", "mgf": cfg.mgf, "corpus": cfg.corpus,
                "corpus_structures": len(library), "seed": cfg.seed, "machine": machine(model),
                "code_version": code_version(), "command": cfg.command, "run_key": run_key,
                "seconds": time.time() - started, "sets": sets.info,
                "truth_in_corpus": {"choose": sum(library.row_of_key(r.inchikey14) is not None for _, r in sets.choose),
                                    "report": sum(library.row_of_key(r.inchikey14) is not None for _, r in sets.report)}},
        "timings": timings, "result": result,
        "recommended": {"variant": name, "merged_score": repr(merged), **asdict(merged)},
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    (out / "report.md").write_text(report_text(metrics))
    return metrics


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.studies.retrieval", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model bundle folder (default: the bundled model)")
    p.add_argument("--mgf", required=True, help="labelled MGF with FOLD and LICENSE (massbank_dev.mgf.gz)")
    p.add_argument("--corpus", required=True, help="structure table (smiles, inchikey14, source): the decoys")
    p.add_argument("--out", default="runs/retrieval/default", help="output folder (pools are cached there)")
    p.add_argument("--choose-spectra", type=int, default=150, metavar="N",
                   help="FOLD=train spectra of structures the encoder never trained on, to choose weights on")
    p.add_argument("--report-spectra", type=int, default=200, metavar="N", help="FOLD=val spectra to report on")
    p.add_argument("--fragment-spectra", type=int, default=0, metavar="N",
                   help="also the fragment explanation score, on the first N spectra of each set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"))
    p.add_argument("--home", help="MSGPT_HOME for the corpus index (default: the environment's)")
    p.add_argument("--trained-licenses", nargs="+", metavar="LICENSE",
                   help="licences the encoder trained on (default: as the bundle's config.json records them)")
    p.add_argument("--choose-outside-corpus", action=argparse.BooleanOptionalAction, default=False,
                   help="choose on structures outside the corpus only, as FOLD=val's (the decoder pretrained on "
                        "the corpus: it saw the decoys, not the truth); default off: the de novo search almost "
                        "never finds those, so the crowding limit would not bind")
    p.add_argument("--crowding-tolerance", type=float, default=0.0, metavar="SHARE",
                   help="allowed loss of de novo Top-1/Top-10 against today's ranking when choosing (default 0)")
    p.add_argument("--library-only", action="store_true",
                   help="pools of the library tracks alone: the encoder runs, the de novo search and the decoder "
                        "scores do not (750 pools in seconds instead of hours), and nothing is analysed; for "
                        "measures of a library's own order, such as training.studies.retrieval_forward's suspect-list rule")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    cfg = RetrievalConfig(
        mgf=args.mgf, corpus=args.corpus, out=args.out, model=args.model or "", choose_spectra=args.choose_spectra,
        report_spectra=args.report_spectra, fragment_spectra=args.fragment_spectra, seed=args.seed,
        threads=args.threads, device=args.device, precision=args.precision, home=args.home,
        licenses=tuple(args.trained_licenses) if args.trained_licenses else None, tolerance=args.crowding_tolerance,
        choose_outside_corpus=args.choose_outside_corpus, library_only=args.library_only,
        command="python -m training.studies.retrieval " + " ".join(argv))
    try:
        metrics = run(cfg)
    except KeyboardInterrupt:
        print("interrupted; run the same command again to continue (finished pools are kept)", file=sys.stderr)
        return 130
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not cfg.library_only:
        print(report_text(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
