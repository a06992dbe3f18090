"""Can another structure score rank a known true structure above its isomers better than the fingerprint score?

Issue #36 asks the truth at rank 1 among its library isomers (and the de novo candidates) for ≥55% of
spectra; the fingerprint score (:class:`engine.model.scoring.FingerprintScorer`, the Bernoulli
log-likelihood of a candidate's 4096 Morgan bits under the recalibrated posterior ``q``) gets 41.6% among the
library alone on FOLD=val (``python -m training.studies.retrieval``, docs/known_compounds.md). This module scores the
same cached candidate pools (``runs/retrieval/v10/pools.jsonl``: 150 FOLD=train spectra of structures the
encoder never trained on, "train-unseen", and 150 FOLD=val spectra) with other scores and measures them with
:mod:`training.studies.retrieval`'s own metrics (:func:`~training.studies.retrieval.evaluate_pools`,
:func:`~training.studies.retrieval.crowding_summary`)::

    python -m training.studies.retrieval_scorer --mgf ../shared/data/massbank_dev.mgf.gz \\
        --corpus ../shared/data/molecules.tsv.gz --pools runs/retrieval/v10 --out runs/retrieval_scorer/v10

Since the fingerprint score of a candidate with active bits ``y`` is ``const + Σ_{b∈y} logit(q_b)``, a
temperature on the logits never changes a ranking; the scores measured are

* closed forms: cosine(q, y), expected Tanimoto Σ_y q / (|y| + Σq − Σ_y q), the mean gain per active bit
  (log-likelihood normalised by |y|), the raw (uncalibrated) posterior's log-likelihood, and two one- and
  two-weight families chosen on train-unseen: ``Σ_y logit q + β·|y|`` (a price per active bit) and
  ``Σ_y (logit q − λ·logit f_b) + β·|y|`` (a likelihood ratio against each bit's frequency ``f`` among
  training structures);
* a learned per-bit score ``Σ_y ((a + δa_b)·logit q_b + β + γ·(−logit f_b) + δb_b)`` trained listwise (softmax
  over a spectrum's candidates, the truth the positive) with an L2 penalty on δa, δb (toward the
  log-likelihood), on FOLD=train spectra of structures the encoder never trained on
  (:func:`training.encoder.noise.unseen_structures`), the 150 pool train-unseen structures left out; negatives are
  corpus structures of the truth's formula (:func:`training.studies.retrieval.track_rows`). Learned three ways: δa
  and δb, δa alone (a per-bit reliability of the posterior), δb alone (a per-bit prior on structures that
  ignores the spectrum); the penalty of each is chosen on the 150 pool train-unseen spectra, never on val.
  The chosen δb prior is also measured alone (slope 0: no spectrum at all), which shows how much of a gain is
  the benchmark's truths (MassBank standards) looking unlike its decoys (a corpus mostly of ChEMBL/ZINC).

Every choice is made on train-unseen: the best mean joint Hit@1 over both tracks among settings that keep de
novo Top-1/Top-10 (library off, and on with the truth removed from it) at least at today's. Posteriors are
recomputed with the bundle's encoder (as :func:`engine.elucidation.pipeline.compute_posterior`); the run
checks that today's score recomputed from them equals the cached one. Outputs: ``<out>/data.npz`` (the cache
of posteriors and candidate bits), ``metrics.json`` and ``report.md``.

Its table: docs/evidence/suspect_order.md, "Is the fingerprint score the limit? Other structure scores (measured,
not adopted)", with the command above.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from engine.chem import molecules as chem

from training.studies.retrieval import (
    CROWDING_KS,
    HIT_KS,
    TRACKS,
    Pool,
    Variant,
    _pct,
    ci95,
    crowding_summary,
    evaluate_pools,
    open_corpus,
    read_jsonl,
    strip_private,
    track_rows,
)
from training.studies.retrieval_bits import Bits, Context, LinearBitScore
from training.studies.retrieval_bits import LearnedBitScore, PER_BIT, TrainSet, train_listwise

TODAY = Variant("fingerprint")


@dataclass
class ScorerConfig:
    mgf: str
    corpus: str
    pools: str = "runs/retrieval/v10"  # a training.studies.retrieval output folder (pools.jsonl, selection.json)
    out: str = "runs/retrieval_scorer/v10"
    model: str = ""
    home: str | None = "runs/retrieval/home"  # MSGPT_HOME holding the corpus index
    seed: int = 0
    per_structure: int = 10  # training spectra per unseen structure
    negatives: int = 127  # corpus isomers per training structure
    threads: int = 1
    l2: tuple[float, ...] = (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0)  # penalty on δa, δb (on the summed loss)
    epochs: int = 40
    command: str = ""


# -- sparse candidate fingerprints ------------------------------------------------------------------------


def smiles_bits(smiles: str, n_bits: int) -> np.ndarray:
    mol = chem.mol_from_smiles(smiles)
    return np.zeros(0, np.int64) if mol is None else chem.morgan_bits(mol, n_bits)


# -- data ------------------------------------------------------------------------------------------------
def posteriors(model, spectra) -> np.ndarray:
    """The encoder's posterior of each spectrum (as the app computes it, one at a time), (n, n_bits) float32."""
    from engine.elucidation.pipeline import compute_posterior

    return np.stack([compute_posterior(model, s) for s in spectra]).astype(np.float32)


def calibrated(model, post: np.ndarray, polarity: str | None) -> np.ndarray:
    """``q`` of :class:`~engine.model.scoring.FingerprintScorer` for one posterior."""
    from engine.model.scoring import EPS

    cal = model.calibration.for_polarity(polarity).bits
    if cal is not None and cal.n_bits == post.size:
        return cal.probabilities(post)
    return np.clip(post.astype(np.float64), EPS, 1 - EPS)


def pool_spectra(pools_dir: Path) -> tuple[dict, dict]:
    """The cached pool records and their spectra (``selection.json`` of the retrieval run), by key."""
    from engine.spectra.spectrum import Spectrum

    from training.evaluation.evaluate import spectrum_key

    records = read_jsonl(pools_dir / "pools.jsonl")
    sel = json.loads((pools_dir / "selection.json").read_text(encoding="utf-8"))
    spectra = {}
    for d in sel["choose"] + sel["report"]:
        s = Spectrum(**d)
        spectra[spectrum_key(s)] = s
    return records, spectra


def training_spectra(model, mgf: str, exclude: set[str], per_structure: int, seed: int) -> list:
    """(Spectrum, Reference) of FOLD=train spectra whose structure the encoder never trained on
    (:func:`training.encoder.noise.unseen_structures`, the licences the bundle records), up to ``per_structure`` per
    structure (seeded), structures in ``exclude`` (InChIKey first blocks) left out."""
    import random

    from training.evaluation.evaluate import EvalConfig, select_spectra
    from training.encoder.noise import encoder_licenses, unseen_structures
    from training.studies.retrieval import mgf_labels

    trained = encoder_licenses(model.config, str(model.path))
    sel = select_spectra(model, EvalConfig(model=str(model.path), mgf=str(mgf), out="", folds=("train",),
                                           variants=(), kappa_sweep=False))
    fold, lic, keys = mgf_labels(mgf)
    unseen = set(keys[unseen_structures(fold, lic, keys, trained)].tolist()) - exclude
    groups: dict[str, list] = defaultdict(list)
    for s, r in sel.eligible:
        if r.inchikey14 in unseen:
            groups[r.inchikey14].append((s, r))
    rng = random.Random(seed)
    out = []
    for key in sorted(groups):
        g = groups[key]
        out += rng.sample(g, min(per_structure, len(g)))
    return out, sel.eligible


def build_data(cfg: ScorerConfig, model, path: Path) -> dict:
    """Posteriors and candidate bits of the pool spectra and of the training spectra, cached in ``path``."""
    from training.evaluation.evaluate import spectrum_key

    key = json.dumps({"pools": str(Path(cfg.pools).resolve()), "mgf": str(Path(cfg.mgf).resolve()),
                      "corpus": str(Path(cfg.corpus).resolve()), "model": model.checksum, "seed": cfg.seed,
                      "per_structure": cfg.per_structure, "negatives": cfg.negatives}, sort_keys=True)
    if path.exists():
        data = dict(np.load(path, allow_pickle=False))
        if str(data.get("key")) == key:
            return data
    n_bits = model.decoder.config.fp_bits
    records, spectra = pool_spectra(Path(cfg.pools))
    keys = list(records)
    t = time.time()
    pool_post = posteriors(model, [spectra[k] for k in keys])
    print(f"pool posteriors: {time.time() - t:.0f} s", file=sys.stderr)
    cand_bits, n_cand = [], []
    for k in keys:
        cands = records[k]["candidates"]
        n_cand.append(len(cands))
        cand_bits += [smiles_bits(c["s"], n_bits) for c in cands]
    pool_b = Bits.of(cand_bits)
    print(f"pool candidate bits: {time.time() - t:.0f} s", file=sys.stderr)

    exclude = {r["truth"]["inchikey14"] for r in records.values()}
    train, eligible = training_spectra(model, cfg.mgf, exclude, cfg.per_structure, cfg.seed)
    print(f"{len(train)} training spectra of {len({r.inchikey14 for _, r in train})} structures "
          f"({time.time() - t:.0f} s)", file=sys.stderr)
    # bit frequency among FOLD=train structures (pool structures left out), for the likelihood-ratio scores
    seen_keys, freq, n_struct = set(), np.zeros(n_bits), 0
    for _, r in eligible:
        if r.inchikey14 not in seen_keys and r.inchikey14 not in exclude:
            seen_keys.add(r.inchikey14)
            freq[r.query_bits] += 1
            n_struct += 1
    library = open_corpus(cfg.corpus, cfg.home)
    struct_index: dict[str, int] = {}
    struct_bits, struct_n = [], []
    for s, r in train:
        if r.inchikey14 in struct_index:
            continue
        rng = np.random.default_rng([cfg.seed, zlib.crc32(r.inchikey14.encode())])
        rows, _ = track_rows(library, r.inchikey14, chem.mol_formula(r.mol), 0.0, rng, size=cfg.negatives, ppm=0.0)
        negs = [library.bits(int(row)) for row in rows]
        struct_index[r.inchikey14] = len(struct_n)
        struct_bits += [r.query_bits] + negs
        struct_n.append(1 + len(negs))
    sb = Bits.of(struct_bits)
    print(f"training candidates: {len(sb)} ({time.time() - t:.0f} s)", file=sys.stderr)
    train_post = posteriors(model, [s for s, _ in train])
    print(f"training posteriors: {time.time() - t:.0f} s", file=sys.stderr)
    data = {"pool_keys": np.array(keys), "pool_post": pool_post, "pool_n": np.array(n_cand),
            "pool_idx": pool_b.idx, "pool_off": pool_b.off,
            "pool_neg": np.array([spectra[k].polarity == "negative" for k in keys]),
            "train_keys": np.array([spectrum_key(s) for s, _ in train]), "train_post": train_post,
            "train_struct": np.array([struct_index[r.inchikey14] for _, r in train]),
            "train_neg": np.array([s.polarity == "negative" for s, _ in train]),
            "struct_n": np.array(struct_n), "struct_idx": sb.idx, "struct_off": sb.off,
            "freq": freq, "n_freq_structures": np.array(n_struct), "key": np.array(key)}
    np.savez_compressed(path, **data)
    return data


# -- scores ----------------------------------------------------------------------------------------------


def _logit(x: np.ndarray) -> np.ndarray:
    return np.log(x) - np.log1p(-x)


def loglik(c: Context) -> np.ndarray:
    """Today's fingerprint score (base included)."""
    return float(np.log1p(-c.q).sum()) + c.bits.sums(c.gain)


def loglik_raw(c: Context) -> np.ndarray:
    from engine.model.scoring import EPS

    p = np.clip(c.post.astype(np.float64), EPS, 1 - EPS)
    return c.bits.sums(_logit(p))


def cosine(c: Context) -> np.ndarray:
    return c.bits.sums(c.q) / (np.linalg.norm(c.q) * np.sqrt(np.maximum(c.bits.counts(), 1.0)))


def expected_tanimoto(c: Context) -> np.ndarray:
    inter = c.bits.sums(c.q)
    return inter / np.maximum(c.bits.counts() + c.q.sum() - inter, 1e-9)


def mean_gain(c: Context) -> np.ndarray:
    return c.bits.sums(c.gain) / np.maximum(c.bits.counts(), 1.0)


# -- measuring -------------------------------------------------------------------------------------------
def rescore(pools: Sequence[Pool], ctxs: Sequence[Context], score: Callable[[Context], np.ndarray]) -> list[Pool]:
    """The pools with ``score`` in place of the fingerprint score (every ranking of training.studies.retrieval reads it)."""
    return [replace(p, fingerprint=np.asarray(score(c), dtype=np.float64)) for p, c in zip(pools, ctxs)]


def measure(pools: Sequence[Pool], today: dict) -> dict:
    """Hit@k per track and setting and the crowding check of rescored pools (``today``: evaluate_pools of the
    fingerprint score on the same pools)."""
    res = evaluate_pools(TODAY, pools)
    out = strip_private(res)
    out["crowding"] = crowding_summary(res, today)
    out["today_crowded"] = {t: {f"top{k}": today[t]["crowded"][f"hit{k}"] for k in CROWDING_KS} for t in TRACKS}
    out["hit1_gain_ci95"] = {t: {s: ci95(np.subtract(res[t][s]["_top1"], today[t][s]["_top1"]))
                                 for s in ("library", "joint")} for t in TRACKS}
    out["n"] = len(pools)
    return out


def selection_key(m: dict, tolerance: float = 0.0) -> tuple:
    """(no de novo loss, mean joint Hit@1, mean joint Hit@5): the loss is the largest drop, on any track, of
    de novo Top-1/Top-10 against the fingerprint score's, with the library off and with it on (truth out)."""
    loss = de_novo_loss(m)
    h1 = float(np.mean([m[t]["joint"]["hit1"] for t in TRACKS]))
    h5 = float(np.mean([m[t]["joint"]["hit5"] for t in TRACKS]))
    return (loss <= tolerance + 1e-9, round(h1, 9), round(h5, 9))


def de_novo_loss(m: dict) -> float:
    losses = []
    for t in TRACKS:
        c = m["crowding"][t]
        for k in CROWDING_KS:
            losses.append(c[f"today_top{k}"] - c[f"off_top{k}"])
            losses.append(m["today_crowded"][t][f"top{k}"] - c[f"on_top{k}"])
    return float(max(losses))


# -- the run ---------------------------------------------------------------------------------------------
PRICES = tuple(float(x) for x in np.arange(-4.0, 4.01, 0.5))
RATIO_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


def contexts(model, data: dict, prefix: str, rows_of: Callable[[int], Bits]) -> list[Context]:
    post, neg = data[f"{prefix}_post"], data[f"{prefix}_neg"]
    return [Context(post[i], calibrated(model, post[i], "negative" if neg[i] else "positive"), rows_of(i))
            for i in range(len(post))]


class _Variants:
    """The measured variants of one run: each score rescored on the same pools, train-unseen and val."""

    def __init__(self, pools: list, ctxs: list, sets: dict[str, list[int]], log: Callable[[str], None]):
        self.pools, self.ctxs, self.sets, self.log = pools, ctxs, sets, log
        self.today = {s: evaluate_pools(TODAY, [pools[i] for i in rows]) for s, rows in sets.items()}
        self.variants: dict[str, dict] = {}

    def measure(self, score, set_name: str) -> dict:
        rows = self.sets[set_name]
        return measure(rescore([self.pools[i] for i in rows], [self.ctxs[i] for i in rows], score),
                       self.today[set_name])

    def add(self, name: str, score, weights: dict | None = None, choice: dict | None = None) -> None:
        self.variants[name] = {"weights": weights or {}, **{s: self.measure(score, s) for s in self.sets},
                               **({"choice": choice} if choice else {})}
        m = self.variants[name]
        self.log(f"  {name}: train-unseen joint H1 "
                 f"{100 * np.mean([m['choose'][t]['joint']['hit1'] for t in TRACKS]):.1f}"
                 f", val {100 * np.mean([m['report'][t]['joint']['hit1'] for t in TRACKS]):.1f}; "
                 f"de novo loss {100 * de_novo_loss(m['choose']):.1f} / {100 * de_novo_loss(m['report']):.1f}")

    def choose_grid(self, name: str, grid: dict[str, Callable], weights: dict[str, dict]) -> None:
        """The grid's score with the best selection key on the train-unseen spectra, added under ``name``."""
        keyed = {}
        for label, score in grid.items():
            m = self.measure(score, "choose")
            keyed[label] = (selection_key(m), m)
        best = max(keyed, key=lambda k: keyed[k][0])
        info = {"chosen": best, "grid": {k: {"key": list(v[0]), "de_novo_loss": de_novo_loss(v[1])}
                                         for k, v in keyed.items()}}
        self.add(name, grid[best], weights[best], info)


def _closed_form_variants(v: _Variants, g: np.ndarray) -> None:
    v.log("closed-form scores")
    v.add("fingerprint score (today)", loglik)
    v.add("raw posterior log-likelihood", loglik_raw)
    v.add("cosine(q, y)", cosine)
    v.add("expected Tanimoto", expected_tanimoto)
    v.add("mean gain per active bit", mean_gain)
    grid = {f"β={b:g}": LinearBitScore(1.0, b) for b in PRICES}
    v.choose_grid("log-likelihood + β·|y|", grid, {f"β={b:g}": {"beta": b} for b in PRICES})
    grid, w = {}, {}
    for lam in RATIO_WEIGHTS:
        for b in PRICES:
            grid[f"λ={lam:g}, β={b:g}"] = LinearBitScore(1.0, b + lam * g)
            w[f"λ={lam:g}, β={b:g}"] = {"lambda": lam, "beta": b}
    v.choose_grid("log-likelihood ratio vs bit frequency + β·|y|", grid, w)


def _learned_variants(v: _Variants, cfg: ScorerConfig, model, data: dict, g: np.ndarray) -> tuple[TrainSet, float]:
    """The listwise-learned per-bit scores (one global, then per-bit by mode and L2); returns the training set and
    the seconds training took."""
    v.log("learned per-bit score")
    gain = np.stack([c.gain for c in contexts(model, data, "train", lambda i: Bits.of([]))]).astype(np.float32)
    ts = TrainSet(gain, data["train_struct"], Bits(data["struct_idx"], data["struct_off"]),
                  np.concatenate([[0], np.cumsum(data["struct_n"])]))
    keep = data["struct_n"][ts.struct] > 1  # a structure alone of its formula teaches nothing
    ts = replace(ts, gain=ts.gain[keep], struct=ts.struct[keep])
    v.log(f"  {len(ts.struct)} training spectra ({int((~keep).sum())} without isomers left out)")
    learned: dict[str, LearnedBitScore] = {}
    t = time.time()
    glob = train_listwise(ts, g, 0.0, per_bit="none", epochs=cfg.epochs, seed=cfg.seed, log=v.log)
    for mode in PER_BIT:
        for l2 in cfg.l2:
            v.log(f"  {mode}, l2={l2:g}")
            learned[f"{mode}, l2={l2:g}"] = train_listwise(ts, g, l2, per_bit=mode, epochs=cfg.epochs, seed=cfg.seed,
                                                          log=v.log)
    train_seconds = time.time() - t

    def info(s: LearnedBitScore) -> dict:
        return {k: x for k, x in s.info.items() if k != "loss"}

    v.add("learned a, β, γ (3 weights, listwise)", glob.linear(), info(glob))
    names = {"both": "δa and δb", "slope": "δa alone (reliability)", "offset": "δb alone (structure prior)"}
    for mode in PER_BIT:
        mine = {k: s for k, s in learned.items() if k.startswith(mode + ",")}
        v.choose_grid(f"learned per-bit {names[mode]}, L2 chosen", {k: s.linear() for k, s in mine.items()},
                      {k: info(s) for k, s in mine.items()})
    prior = learned[v.variants[f"learned per-bit {names['offset']}, L2 chosen"]["choice"]["chosen"]]
    v.add("spectrum-blind: that δb prior alone (slope 0)", LinearBitScore(0.0, prior.offset), info(prior))
    for k, s in learned.items():
        v.add(f"  learned per-bit {k}", s.linear(), info(s))
    return ts, train_seconds


def run(cfg: ScorerConfig, log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict:
    import torch

    from engine.model.bundle import load_bundle
    from engine.paths import default_model_dir

    from training.evaluation.evaluate import code_version, machine

    started = time.time()
    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    model = load_bundle(cfg.model or default_model_dir(), device="cpu", precision="auto")
    data = build_data(cfg, model, out / "data.npz")
    records = read_jsonl(Path(cfg.pools) / "pools.jsonl")
    keys = [str(k) for k in data["pool_keys"]]
    pool_bits = Bits(data["pool_idx"], data["pool_off"])
    starts = np.concatenate([[0], np.cumsum(data["pool_n"])])
    ctxs = contexts(model, data, "pool", lambda i: pool_bits.rows(starts[i], starts[i + 1]))
    pools = [Pool.from_record(records[k]) for k in keys]
    diff = max(float(np.abs(loglik(c) - p.fingerprint).max()) for c, p in zip(ctxs, pools))
    log(f"today's score recomputed from the posteriors: largest difference from the cached {diff:.4f} nats")
    sets = {name: [i for i, k in enumerate(keys) if records[k]["fold"] == fold]
            for name, fold in (("choose", "train"), ("report", "val"))}
    v = _Variants(pools, ctxs, sets, log)
    freq = (data["freq"] + 0.5) / (float(data["n_freq_structures"]) + 1.0)
    g = -_logit(freq)  # large for rare bits
    _closed_form_variants(v, g)
    ts, train_seconds = _learned_variants(v, cfg, model, data, g)

    metrics = {"run": {"model": f"{model.name} [{model.checksum[:12]}]", "pools": cfg.pools, "config": asdict(cfg),
                       "machine": machine(model), "code_version": code_version(), "command": cfg.command,
                       "seconds": time.time() - started, "train_seconds": train_seconds,
                       "training_spectra": len(ts.struct), "training_structures": len(set(ts.struct.tolist())),
                       "recomputed_fingerprint_max_diff": diff,
                       "n": {s: len(r) for s, r in sets.items()}},
               "variants": v.variants}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    (out / "report.md").write_text(report_text(metrics))
    return metrics


# -- the report ------------------------------------------------------------------------------------------
def tables(variants: dict, set_name: str) -> str:
    lines = ["| score | formula: library | formula: + de novo | mass: library | mass: + de novo |",
             "| --- | --- | --- | --- | --- |"]
    for name, m in variants.items():
        r = m[set_name]
        cells = [" / ".join(_pct(r[t][s][f"hit{k}"]) for k in HIT_KS) for t in TRACKS for s in ("library", "joint")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Hit@1 gain over the fingerprint score, paired bootstrap 95% interval (points):", "",
              "| score | formula: library | formula: + de novo | mass: library | mass: + de novo |",
              "| --- | --- | --- | --- | --- |"]
    for name, m in variants.items():
        ci = m[set_name]["hit1_gain_ci95"]
        cells = [f"{100 * ci[t][s][0]:+.1f} … {100 * ci[t][s][1]:+.1f}" for t in TRACKS for s in ("library", "joint")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", ("De novo Top-1 / Top-10: libraries off (the score ranking the de novo candidates alone), and with "
              "the library on with the truth taken out of it (crowding); today's (fingerprint score) in brackets."),
              "", "| score | formula: off | formula: on, truth out | mass: on, truth out |", "| --- | --- | --- | --- |"]
    for name, m in variants.items():
        r = m[set_name]
        c, tc = r["crowding"], r["today_crowded"]
        off = f"{_pct(c['formula']['off_top1'])} / {_pct(c['formula']['off_top10'])} " \
              f"({_pct(c['formula']['today_top1'])} / {_pct(c['formula']['today_top10'])})"
        on = [f"{_pct(c[t]['on_top1'])} / {_pct(c[t]['on_top10'])} ({_pct(tc[t]['top1'])} / {_pct(tc[t]['top10'])})"
              for t in TRACKS]
        lines.append(f"| {name} | {off} | " + " | ".join(on) + " |")
    return "\n".join(lines)


def report_text(metrics: dict) -> str:
    v, n = metrics["variants"], metrics["run"]["n"]
    chosen = [f"- {k}: chosen {m['choice']['chosen']}" for k, m in v.items() if "choice" in m]
    return "\n".join([
        f"# Structure scores on the retrieval pools ({metrics['run']['model']})", "",
        ("Hit@1 / Hit@5 / Hit@20 (%) of the truth among its library track alone and with the de novo candidates "
        f"joined. Learned on {metrics['run']['training_spectra']} FOLD=train spectra of "
        f"{metrics['run']['training_structures']} structures the encoder never trained on (the pool structures "
        "left out); every weight chosen on the train-unseen pools."), "",
        f"## FOLD=val, {n['report']} spectra (reported)", "", tables(v, "report"), "",
        f"## FOLD=train, structures the encoder never trained on, {n['choose']} spectra (choices made here)", "",
        tables(v, "choose"), "", "## Choices", "", *chosen, "",
        f"Command: `{metrics['run']['command']}`; {metrics['run']['seconds']:.0f} s", ""])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.studies.retrieval_scorer", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mgf", required=True, help="labelled MGF with FOLD and LICENSE (massbank_dev.mgf.gz)")
    p.add_argument("--corpus", required=True, help="structure table of training.studies.retrieval (the decoys)")
    p.add_argument("--pools", default=ScorerConfig.pools, help="the training.studies.retrieval output folder to rescore")
    p.add_argument("--out", default=ScorerConfig.out)
    p.add_argument("--model", default="", help="model bundle folder (default: the bundled model)")
    p.add_argument("--home", default=ScorerConfig.home, help="MSGPT_HOME holding the corpus index")
    p.add_argument("--per-structure", type=int, default=ScorerConfig.per_structure)
    p.add_argument("--negatives", type=int, default=ScorerConfig.negatives)
    p.add_argument("--l2", type=float, nargs="+", default=list(ScorerConfig.l2))
    p.add_argument("--epochs", type=int, default=ScorerConfig.epochs)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    cfg = ScorerConfig(mgf=a.mgf, corpus=a.corpus, pools=a.pools, out=a.out, model=a.model, home=a.home,
                       seed=a.seed, per_structure=a.per_structure, negatives=a.negatives, threads=a.threads,
                       l2=tuple(a.l2), epochs=a.epochs, command="python -m training.studies.retrieval_scorer " + " ".join(argv))
    metrics = run(cfg)
    print(report_text(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
