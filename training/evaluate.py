"""Evaluate a model bundle on labelled spectra: accuracy, similarity, yield, speed and the paper's analyses.

::

    msgpt-eval --model resources/default_model --mgf ../shared/data/massbank_dev.mgf.gz --fold val \\
        --max-spectra 150 --one-per-structure --variants oracle point band band+adapter --out eval/

For every selected spectrum (known formula, reference SMILES, an adduct the model supports) each
*variant* draws a candidate pool of B samples and ranks it as the app does; the report compares the
variants side by side on the same spectra and seeds:

=================  ===========================================================================
variant            queries (B = pool size samples in all of them)
=================  ===========================================================================
``oracle``         the true Morgan fingerprint of the reference (M=1): the decoder alone
``point``          one query at κ = 1.00 (density match): the point-query baseline
``f1``             one query at the threshold maximising mean F1 of ``1[π>t]`` vs the truth
``cosine``         one query at the threshold maximising mean cosine similarity to the truth
``outer``          M queries at κ drawn uniformly outside the band, from [0.5, κ_min) ∪ (κ_max, 2.5]
``band``           the density band (M queries, N = B/M each), adapter off
``band+adapter``   the same with the bundle's LoRA adapter on
=================  ===========================================================================

The F1- and cosine-optimal thresholds, and the κ sweep, use the posteriors of *all* eligible spectra
of the evaluated fold (the paper chooses the thresholds on its validation set), not only the subsample.

Metrics (paper, "Evaluation"): Top-k accuracy — a top-k candidate has the reference's first InChIKey
block; Top-k Tanimoto — the highest Morgan (r=2, 4096 bits) Tanimoto of a top-k candidate to the
reference (0 without candidates); Top-k %close match — a top-k candidate has RDKit topological-
fingerprint Tanimoto ≥ 0.675; Top-k MCES (``--mces``, myopic-mces, threshold 100, per-pair time limit;
failures score the bond-count sum, spectra without candidates 100); valid and formula-consistent
yield (share of the B samples); seconds per spectrum (sampling + ranking, posterior included).

Analyses: posterior fidelity T_c (max Tanimoto between the reference fingerprint and the band's
queries) in bins low (<0.5), mid, high (≥0.7) with Top-1/Top-10 per bin; the κ diagnostic sweep
(κ = 0.5…2.0: fidelity-bin shares of the single query at t_κ and its mean active bits; encoder
only); candidate-pool scaling (``--pool-sizes``, M fixed, one growing pool per spectrum so each B
reuses the smaller pools' samples). Everything per spectrum goes to ``results.jsonl`` (a rerun
skips what is there), the summary to ``metrics.json``, and ``report.md`` + ``figures/*.png``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine import chem
from engine.bundle import ModelBundle, load_bundle
from engine.errors import Cancelled, ConfigError, MsgptError
from engine.formula import formula_vector, parse_formula
from engine.io import iter_spectra
from engine.pipeline import compute_posterior, require_usable
from engine.querying import Query, band_thresholds, build_queries, threshold_query
from engine.ranking import Candidate, CandidatePool, reference_rank
from engine.sampling import QueryRequest, sample_queries
from engine.spectrum import Spectrum

VARIANTS = ("oracle", "point", "f1", "cosine", "outer", "band", "band+adapter")
DEFAULT_VARIANTS = ("oracle", "point", "band", "band+adapter")
CLOSE_MATCH = 0.675  # RDKit topological-fingerprint Tanimoto (paper, after FRIGID)
FIDELITY_BINS = (("low", 0.0, 0.5), ("mid", 0.5, 0.7), ("high", 0.7, 1.0 + 1e-9))
KAPPA_SWEEP = tuple(round(k, 2) for k in np.arange(0.5, 2.0001, 0.1))
OUTER_RANGE = (0.5, 2.5)
MCES_FAILED = 100.0


# -- metrics (pure) ------------------------------------------------------------------------------------
def fidelity_bin(fidelity: float) -> str:
    """'low' (< 0.5), 'mid' (0.5 ≤ T_c < 0.7) or 'high' (≥ 0.7), the paper's posterior-fidelity bins."""
    for name, lo, hi in FIDELITY_BINS:
        if lo <= fidelity < hi:
            return name
    raise ConfigError(f"fidelity must be in [0, 1], got {fidelity!r}")


def topk_hit(rank: int | None, k: int) -> bool:
    """The reference is among the top-k candidates (rank is 1-based; None = absent)."""
    return rank is not None and rank <= k


def topk_max(scores: Sequence[float], k: int) -> float:
    """Best score among the first k candidates; 0.0 without candidates."""
    return max(scores[:k], default=0.0)


def optimal_threshold(posteriors: np.ndarray, truths: Sequence[np.ndarray], grid: np.ndarray, score: str) -> tuple[float, float]:
    """The global threshold t of ``grid`` maximising the mean per-spectrum ``score`` ('f1' or 'cosine')
    of the query ``1[π > t]`` against the true active bits. Returns (t, mean score); an empty query
    or truth scores 0."""
    if score not in ("f1", "cosine"):
        raise ConfigError(f"score must be 'f1' or 'cosine', got {score!r}")
    truth = np.zeros(posteriors.shape, dtype=bool)
    for i, bits in enumerate(truths):
        truth[i, np.asarray(bits, dtype=np.int64)] = True
    n_true = truth.sum(1).astype(np.float64)
    best = (float(grid[0]), -1.0)
    for t in grid:
        pred = posteriors > t
        inter = (pred & truth).sum(1).astype(np.float64)
        n_pred = pred.sum(1).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            if score == "f1":
                s = np.where(n_pred + n_true > 0, 2 * inter / (n_pred + n_true), 0.0)
            else:
                s = np.where(n_pred * n_true > 0, inter / np.sqrt(n_pred * n_true), 0.0)
        if s.mean() > best[1]:
            best = (float(t), float(s.mean()))
    return best


def outer_kappas(rng: np.random.Generator, m: int, kappa_min: float, kappa_max: float) -> np.ndarray:
    """M density ratios drawn uniformly from [0.5, κ_min) ∪ (κ_max, 2.5] (the outside of the band)."""
    lo, hi = OUTER_RANGE
    below, above = max(kappa_min - lo, 0.0), max(hi - kappa_max, 0.0)
    if below + above <= 0:
        raise ConfigError(f"the band [{kappa_min}, {kappa_max}] leaves nothing of [{lo}, {hi}] outside it")
    u = rng.random(m) * (below + above)
    return np.sort(np.where(u < below, lo + u, kappa_max + (u - below)))


def summarize(records: Sequence[dict], ks: Sequence[int] = (1, 10)) -> dict:
    """Mean metrics of per-spectrum records of one variant."""
    n = len(records)
    if n == 0:
        return {"n": 0}
    out: dict = {"n": n}
    for k in ks:
        out[f"top{k}_accuracy"] = float(np.mean([topk_hit(r["rank"], k) for r in records]))
        out[f"top{k}_tanimoto"] = float(np.mean([topk_max(r["tanimoto"], k) for r in records]))
        out[f"top{k}_close_match"] = float(np.mean([topk_max(r["topological"], k) >= CLOSE_MATCH for r in records]))
        if all("mces" in r for r in records):
            out[f"top{k}_mces"] = float(np.mean([min(r["mces"][:k], default=MCES_FAILED) for r in records]))
    samples = sum(r["n_samples"] for r in records)
    out["valid_yield"] = sum(r["n_valid"] for r in records) / max(samples, 1)
    out["formula_consistent_yield"] = sum(r["n_formula_consistent"] for r in records) / max(samples, 1)
    out["no_candidate_share"] = float(np.mean([r["n_candidates"] == 0 for r in records]))
    out["seconds_per_spectrum"] = float(np.mean([r["seconds"] for r in records]))
    out["mean_query_bits"] = float(np.mean([r["mean_query_bits"] for r in records]))
    return out


# -- selection ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reference:
    """The reference structure of a labelled spectrum."""

    smiles: str
    inchikey14: str
    bits: np.ndarray  # Morgan r=2, 4096 bits: the Tanimoto metric
    query_bits: np.ndarray  # the same in the model's fingerprint space (oracle query, fidelity)
    mol: object  # RDKit Mol, stereo removed

    @classmethod
    def of(cls, spectrum: Spectrum, n_bits: int = chem.N_BITS) -> Reference | None:
        mol = chem.mol_from_smiles(spectrum.smiles) if spectrum.smiles else None
        if mol is None:
            return None
        chem.remove_stereo(mol)
        smiles = chem.canonical_smiles(mol)
        return cls(smiles, chem.inchikey14(mol), chem.morgan_bits(mol), chem.morgan_bits(mol, n_bits), mol)


def spectrum_key(s: Spectrum) -> str:
    return f"{Path(s.source).name}#{s.index}:{s.id}"


def select_spectra(
    bundle: ModelBundle, mgf: str | Path, folds: Sequence[str] | None, licenses: Sequence[str] | None,
    max_spectra: int | None, one_per_structure: bool, seed: int,
) -> tuple[list[Spectrum], list[Spectrum], dict]:
    """Eligible labelled spectra, a seeded subsample of them, and counts of why others were left out."""
    left_out: dict[str, int] = defaultdict(int)
    eligible: list[Spectrum] = []
    for item in iter_spectra(mgf):
        if not isinstance(item, Spectrum):
            left_out["unreadable record"] += 1
            continue
        if folds and item.metadata.get("fold") not in folds:
            left_out["other fold"] += 1
            continue
        if licenses and item.metadata.get("license") not in licenses:
            left_out["license not selected"] += 1
            continue
        if not item.smiles:
            left_out["no reference SMILES"] += 1
            continue
        try:
            require_usable(bundle, item)
        except MsgptError:
            left_out["not usable by the model (formula/adduct)"] += 1
            continue
        eligible.append(item)
    rng = random.Random(seed)
    chosen = list(eligible)
    if one_per_structure:
        by_structure: dict[str, list[Spectrum]] = defaultdict(list)
        for s in eligible:
            by_structure[(s.inchikey or s.smiles)[:14]].append(s)
        chosen = [rng.choice(group) for _, group in sorted(by_structure.items())]
    rng.shuffle(chosen)
    if max_spectra is not None:
        chosen = chosen[:max_spectra]
    info = {"eligible": len(eligible), "selected": len(chosen), "left_out": dict(left_out)}
    return eligible, chosen, info


# -- drawing and ranking ------------------------------------------------------------------------------
def draw_pool(
    bundle: ModelBundle, formula: str, queries: Sequence[Query], n_per_group: int, *, seed: int,
    pool: CandidatePool | None = None, cancel: Callable[[], bool] | None = None,
) -> CandidatePool:
    """Sample N per threshold index of ``queries`` (only the samples the pool lacks) and add them."""
    pool = pool or CandidatePool(formula, [q.bits for q in queries])
    requests = []
    for q in queries:
        ids = tuple((i, j) for i in q.threshold_indices for j in range(n_per_group) if not pool.has((i, j)))
        if ids:
            requests.append(QueryRequest(fp_bits=q.bits, sample_ids=ids))
    if requests:
        fvec = formula_vector(parse_formula(formula))
        for r, strings in sample_queries(bundle.decoder, bundle.tokenizer, fvec, requests, seed=seed, cancel=cancel):
            pool.add(requests[r].sample_ids, strings)
    return pool


def score_candidates(candidates: Sequence[Candidate], ref: Reference, k_max: int = 10) -> dict:
    """Reference rank, and Morgan and topological Tanimoto of the top ``k_max`` candidates to it."""
    mols = [chem.mol_from_smiles(c.smiles) for c in candidates[:k_max]]
    return {"rank": reference_rank(candidates, ref.inchikey14),
            "tanimoto": [chem.tanimoto(chem.morgan_bits(m), ref.bits) for m in mols],
            "topological": [chem.topological_tanimoto(m, ref.mol) for m in mols],
            "top_smiles": [c.smiles for c in candidates[:3]]}


def mces_distances(candidates: Sequence[Candidate], ref: Reference, k_max: int, time_limit: float) -> list[float]:
    """MCES distance of each top-k candidate to the reference (myopic-mces, threshold 100): failures
    (solver error or time limit without a solution) score the bond-count sum; no candidates, [100]."""
    from myopic_mces import MCES

    if not candidates:
        return [MCES_FAILED]
    ref_bonds = chem.mol_from_smiles(ref.smiles).GetNumBonds()
    out = []
    for c in candidates[:k_max]:
        bonds = ref_bonds + chem.mol_from_smiles(c.smiles).GetNumBonds()
        try:
            _, dist, _, kind = MCES(ref.smiles, c.smiles, threshold=100, always_stronger_bound=False,
                                    solver="PULP_CBC_CMD", solver_options={"timeLimit": time_limit, "msg": False})
            out.append(float(bonds) if kind == 6 or dist < 0 else float(dist))
        except Exception:  # noqa: BLE001 - the solver fails in many ways; the paper scores failures
            out.append(float(bonds))
    return out


# -- the run ---------------------------------------------------------------------------------------------
@dataclass
class EvalConfig:
    model: str
    mgf: str
    out: str
    folds: tuple[str, ...] = ("val",)
    licenses: tuple[str, ...] | None = None
    max_spectra: int | None = None
    one_per_structure: bool = False
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    kappa_min: float = 0.95
    kappa_max: float = 1.50
    groups: int = 20
    pool_size: int = 100
    pool_sizes: tuple[int, ...] = ()
    seed: int = 0
    mces: bool = False
    mces_time_limit: float = 10.0
    device: str = "auto"
    precision: str = "auto"
    threads: int | None = None
    kappa_sweep: bool = True

    def __post_init__(self):
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ConfigError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
        for b in (self.pool_size, *self.pool_sizes):
            if b < self.groups or b % self.groups:
                raise ConfigError(f"pool size {b} must be a positive multiple of M={self.groups} (B = M × N)")

    def run_key(self) -> dict:
        """What decides the per-spectrum results: a results.jsonl of another key is not reused."""
        keep = ("mgf", "folds", "kappa_min", "kappa_max", "groups", "pool_size", "seed", "precision")
        return {k: getattr(self, k) for k in keep}


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    spectrum_id: str
    stage: str


@dataclass
class EvalResult:
    out: Path
    metrics: dict = field(default_factory=dict)


def _queries_for(variant: str, cfg: EvalConfig, bundle: ModelBundle, posterior: np.ndarray, ref: Reference,
                 special: dict, rng: np.random.Generator) -> tuple[list[Query], int]:
    """The queries of a variant and N (samples per threshold index)."""
    cal, b = bundle.calibration, cfg.pool_size
    if variant == "oracle":
        return [Query(ref.query_bits, (0,))], b
    if variant == "point":
        return build_queries(posterior, [cal.threshold_for_kappa(1.0)]), b
    if variant in ("f1", "cosine"):
        return build_queries(posterior, [special[f"{variant}_threshold"]]), b
    if variant == "outer":
        kappas = outer_kappas(rng, cfg.groups, cfg.kappa_min, cfg.kappa_max)
        return build_queries(posterior, [cal.threshold_for_kappa(float(k)) for k in kappas]), b // cfg.groups
    thresholds = band_thresholds(cal, cfg.kappa_min, cfg.kappa_max, cfg.groups)
    return build_queries(posterior, thresholds), b // cfg.groups


def _record(spectrum: Spectrum, variant: str, pool: CandidatePool, n: int, queries, ref, fidelity, seconds, cfg) -> dict:
    candidates, counts = pool.rank(n)
    rec = {"spectrum": spectrum_key(spectrum), "id": spectrum.id, "variant": variant,
           "reference": ref.smiles, "fidelity": fidelity,
           "query_fidelity": chem.max_tanimoto(ref.query_bits, [q.bits for q in queries]),
           "n_samples": counts["samples"], "n_valid": counts["valid"],
           "n_formula_consistent": counts["formula_consistent"], "n_candidates": len(candidates),
           "mean_query_bits": float(np.mean([len(q.bits) for q in queries for _ in q.threshold_indices])),
           "seconds": seconds, **score_candidates(candidates, ref)}
    if cfg.mces:
        rec["mces"] = mces_distances(candidates, ref, 10, cfg.mces_time_limit)
    return rec


def evaluate(cfg: EvalConfig, cancel: Callable[[], bool] | None = None) -> Iterator[Progress | EvalResult]:
    """Run the evaluation; yields :class:`Progress` events and finally an :class:`EvalResult`."""
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    bundle = load_bundle(cfg.model, device=cfg.device, precision=cfg.precision)
    variants = [v for v in cfg.variants if v != "band+adapter" or bundle.has_adapter]
    skipped_variants = [v for v in cfg.variants if v not in variants]
    eligible, spectra, selection = select_spectra(bundle, cfg.mgf, cfg.folds, cfg.licenses, cfg.max_spectra,
                                                  cfg.one_per_structure, cfg.seed)
    if not spectra:
        raise ConfigError(f"no spectrum of {cfg.mgf} is eligible ({selection['left_out']}); check --fold/--licenses")

    # posteriors of every eligible spectrum: the F1/cosine-optimal thresholds and the κ sweep use them all
    refs, posteriors = {}, {}
    for i, s in enumerate(eligible):
        if cancel and cancel():
            raise Cancelled("Evaluation cancelled.")
        ref = Reference.of(s, bundle.decoder.config.fp_bits)
        if ref is not None:
            refs[spectrum_key(s)] = ref
            posteriors[spectrum_key(s)] = compute_posterior(bundle, s)
        if i % 50 == 0 or i + 1 == len(eligible):
            yield Progress(i + 1, len(eligible), s.id, "posteriors")
    spectra = [s for s in spectra if spectrum_key(s) in refs]
    all_keys = list(posteriors)
    P = np.stack([posteriors[k] for k in all_keys])
    truths = [refs[k].query_bits for k in all_keys]
    grid = np.unique(np.concatenate([bundle.calibration.thresholds, np.linspace(0.01, 0.9, 90)]))
    special = {}
    for score in ("f1", "cosine"):
        special[f"{score}_threshold"], special[f"{score}_score"] = optimal_threshold(P, truths, grid, score)

    results_path = out / "results.jsonl"
    done = set()
    meta_path = out / "run.json"
    run_meta = json.loads(json.dumps({"run_key": cfg.run_key(), "checksum": bundle.checksum, "special": special}))
    if results_path.exists() and meta_path.exists():
        old = json.loads(meta_path.read_text())
        if old.get("run_key") != run_meta["run_key"] or old.get("checksum") != bundle.checksum:
            raise ConfigError(f"{out} holds results of another model or settings; use a new --out or delete it")
        for line in results_path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done.add((r["spectrum"], r["variant"]))
    meta_path.write_text(json.dumps(run_meta, indent=1))

    band_thr = band_thresholds(bundle.calibration, cfg.kappa_min, cfg.kappa_max, cfg.groups)
    with open(results_path, "a", encoding="utf-8") as sink:
        for i, s in enumerate(spectra):
            key, ref, post = spectrum_key(s), refs[spectrum_key(s)], posteriors[spectrum_key(s)]
            fidelity = chem.max_tanimoto(ref.query_bits, [q.bits for q in build_queries(post, band_thr)])
            rng = np.random.default_rng([cfg.seed, int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)])
            todo = [v for v in variants if (key, v) not in done]
            scaling = [f"band@B={b}" for b in cfg.pool_sizes]
            todo += [v for v in scaling if (key, v) not in done]
            for variant in todo:
                if cancel and cancel():
                    raise Cancelled("Evaluation cancelled.")
                yield Progress(i, len(spectra), s.id, variant)
                if variant.startswith("band@B="):
                    continue  # below, one growing pool
                if bundle.has_adapter:
                    bundle.set_adapter(variant == "band+adapter")
                queries, n = _queries_for(variant, cfg, bundle, post, ref, special, rng)
                t0 = time.perf_counter()
                pool = draw_pool(bundle, s.formula, queries, n, seed=cfg.seed, cancel=cancel)
                rec = _record(s, variant, pool, n, queries, ref, fidelity, time.perf_counter() - t0, cfg)
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
            if any(v.startswith("band@B=") for v in todo):
                if bundle.has_adapter:
                    bundle.set_adapter(True)
                queries = build_queries(post, band_thr)
                pool, t0 = None, time.perf_counter()
                for b in sorted(cfg.pool_sizes):
                    n = b // cfg.groups
                    pool = draw_pool(bundle, s.formula, queries, n, seed=cfg.seed, pool=pool, cancel=cancel)
                    rec = _record(s, f"band@B={b}", pool, n, queries, ref, fidelity, time.perf_counter() - t0, cfg)
                    if (key, rec["variant"]) not in done:
                        sink.write(json.dumps(rec) + "\n")
                sink.flush()
            yield Progress(i + 1, len(spectra), s.id, "done")

    records = [json.loads(line) for line in results_path.read_text().splitlines() if line.strip()]
    chosen = {spectrum_key(s) for s in spectra}
    records = [r for r in records if r["spectrum"] in chosen]
    sweep = kappa_sweep(bundle, P, truths) if cfg.kappa_sweep else []
    metrics = build_metrics(cfg, bundle, records, selection, special, sweep, skipped_variants)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    from .report import write_report

    write_report(out, metrics)
    yield EvalResult(out, metrics)


def kappa_sweep(bundle: ModelBundle, posteriors: np.ndarray, truths: Sequence[np.ndarray]) -> list[dict]:
    """Fidelity-bin shares and mean active bits of the single query at t_κ, κ = 0.5…2.0."""
    rows = []
    for kappa in KAPPA_SWEEP:
        t = bundle.calibration.threshold_for_kappa(kappa)
        fids, bits = [], []
        for p, truth in zip(posteriors, truths):
            q = threshold_query(p, t)
            fids.append(chem.tanimoto(q, truth))
            bits.append(len(q))
        shares = {name: float(np.mean([fidelity_bin(f) == name for f in fids])) for name, *_ in FIDELITY_BINS}
        rows.append({"kappa": kappa, "threshold": t, "mean_active_bits": float(np.mean(bits)),
                     "mean_fidelity": float(np.mean(fids)), **{f"share_{k}": v for k, v in shares.items()}})
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"


def build_metrics(cfg, bundle, records, selection, special, sweep, skipped_variants) -> dict:
    by_variant: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_variant[r["variant"]].append(r)
    order = [v for v in VARIANTS if v in by_variant] + sorted(
        (v for v in by_variant if v.startswith("band@B=")), key=lambda v: int(v.split("=")[1]))
    variants = {v: summarize(by_variant[v]) for v in order}
    bins = {}
    for v in order:
        if v == "oracle":
            continue
        per_bin = {}
        for name, *_ in FIDELITY_BINS:
            rs = [r for r in by_variant[v] if fidelity_bin(r["fidelity"]) == name]
            per_bin[name] = {"share": len(rs) / max(len(by_variant[v]), 1), **summarize(rs)}
        bins[v] = per_bin
    return {
        "model": {"name": bundle.name, "checksum": bundle.checksum, "path": str(bundle.path),
                  "precision": "bf16" if str(bundle.dtype) == "torch.bfloat16" else "fp32"},
        "data": {"mgf": str(cfg.mgf), "folds": list(cfg.folds), "licenses": cfg.licenses,
                 "one_per_structure": cfg.one_per_structure, "max_spectra": cfg.max_spectra, **selection},
        "parameters": {"kappa_band": [cfg.kappa_min, cfg.kappa_max], "groups": cfg.groups,
                       "pool_size": cfg.pool_size, "pool_sizes": list(cfg.pool_sizes), "seed": cfg.seed,
                       "temperature": 1.0, "top_k": 50, "top_p": 0.95},
        "point_thresholds": {"kappa_1.0": bundle.calibration.threshold_for_kappa(1.0), **special},
        "machine": machine(),
        "variants": variants,
        "fidelity_bins": bins,
        "kappa_sweep": sweep,
        "skipped_variants": skipped_variants,
    }


# -- command line ---------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="msgpt-eval", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model bundle folder (default: the bundled model)")
    p.add_argument("--mgf", required=True, help="labelled MGF (FORMULA, SMILES, adduct per record; .gz too)")
    p.add_argument("--out", required=True, help="output folder: report.md, metrics.json, results.jsonl, figures/")
    p.add_argument("--fold", nargs="*", default=["val"], help="FOLD values to evaluate (default val; none = all)")
    p.add_argument("--licenses", nargs="*", help="LICENSE values to keep, e.g. 'CC0' 'CC BY' (default: all)")
    p.add_argument("--max-spectra", type=int, help="seeded random subsample of this many spectra")
    p.add_argument("--one-per-structure", action="store_true", help="one random spectrum per structure")
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=VARIANTS,
                   help=f"runs to compare (default: {' '.join(DEFAULT_VARIANTS)})")
    p.add_argument("--band", nargs=2, type=float, default=(0.95, 1.50), metavar=("KMIN", "KMAX"))
    p.add_argument("--groups", type=int, default=20, metavar="M")
    p.add_argument("--pool-size", type=int, default=100, metavar="B")
    p.add_argument("--pool-sizes", type=int, nargs="*", default=[], metavar="B",
                   help="candidate-pool scaling: band querying at these B (M fixed), e.g. 100 500 1500")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mces", action="store_true", help="also Top-k MCES (myopic-mces; pip install msgpt-desktop[eval])")
    p.add_argument("--mces-time-limit", type=float, default=10.0, help="seconds per MCES pair (default 10)")
    p.add_argument("--no-kappa-sweep", action="store_true", help="skip the κ diagnostic sweep")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"))
    p.add_argument("--threads", type=int, help="torch CPU threads")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    from engine.paths import default_model_dir

    args = build_parser().parse_args(argv)
    try:
        if args.mces:
            try:
                import myopic_mces  # noqa: F401
            except ImportError:
                raise ConfigError("--mces needs myopic-mces: pip install 'msgpt-desktop[eval]'") from None
        cfg = EvalConfig(
            model=args.model or str(default_model_dir()), mgf=args.mgf, out=args.out, folds=tuple(args.fold),
            licenses=tuple(args.licenses) if args.licenses else None, max_spectra=args.max_spectra,
            one_per_structure=args.one_per_structure, variants=tuple(args.variants), kappa_min=args.band[0],
            kappa_max=args.band[1], groups=args.groups, pool_size=args.pool_size, pool_sizes=tuple(args.pool_sizes),
            seed=args.seed, mces=args.mces, mces_time_limit=args.mces_time_limit, device=args.device,
            precision=args.precision, threads=args.threads, kappa_sweep=not args.no_kappa_sweep,
        )
        bar = tqdm(unit="spectrum", file=sys.stderr)
        for event in evaluate(cfg):
            if isinstance(event, Progress):
                bar.total, bar.n = event.total, event.done
                bar.set_postfix_str(f"{event.stage} {event.spectrum_id}"[:60], refresh=True)
            else:
                bar.close()
                print(f"report: {event.out / 'report.md'}")
                for v, m in event.metrics["variants"].items():
                    print(f"  {v:14s} top1 {m['top1_accuracy']:.3f} top10 {m['top10_accuracy']:.3f} "
                          f"tanimoto {m['top1_tanimoto']:.3f}/{m['top10_tanimoto']:.3f} "
                          f"formula-consistent {m['formula_consistent_yield']:.3f} {m['seconds_per_spectrum']:.2f} s")
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to continue (finished spectra are kept)", file=sys.stderr)
        return 130
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
