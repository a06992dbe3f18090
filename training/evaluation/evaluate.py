"""Evaluate a model bundle on labelled spectra: accuracy, similarity, yield, speed and the paper's analyses.

::

    msgpt-eval --model resources/default_model --mgf ../shared/data/massbank_dev.mgf.gz --fold val \\
        --one-per-structure --max-spectra 150 --variants oracle point band band+adapter --out runs/eval

For every selected spectrum (known formula, reference SMILES, an adduct the model supports) each
*variant* draws a pool of B decoder samples through :class:`engine.elucidation.pipeline.SpectrumSession` and ranks
it exactly as the app does; the variants run side by side on the same spectra and seeds:

=================  ===========================================================================================
variant            queries (B samples in all; paper section in brackets)
=================  ===========================================================================================
``oracle``         the reference's true Morgan fingerprint, one query, N = B: the decoder alone
``point``          one query ``1[π > t_κ]`` at κ = 1.00 (density match), N = B [ablation, point-query controls]
``f1``             one query at the global threshold with the best mean per-spectrum F1 of ``1[π > t]``
                   against the true fingerprint, chosen on the evaluated fold's posteriors, N = B
``cosine``         the same for cosine similarity
``outer``          M queries at κ drawn uniformly from ``[0.5, κ_min) ∪ (κ_max, 2.0]`` (outside the band;
                   a fresh draw per spectrum), N = B/M [ablation, outer-band querying]
``band``           the density band ``[κ_min, κ_max]``: M thresholds, N = B/M, adapter off (MS-GPT-Base)
``band+adapter``   the same with the bundle's posterior-aligned LoRA adapter on (MS-GPT)
=================  ===========================================================================================

Every variant but ``band+adapter`` runs with the adapter off, as the paper's ablations do. The
F1/cosine thresholds and the κ sweep use the posteriors of *all* eligible spectra of the evaluated folds,
not only the subsample. Metrics are defined in :mod:`training.core.metrics` (structure level) and
:mod:`training.evaluation.mces`; the analyses (posterior-fidelity bins, the κ diagnostic sweep, candidate-pool
scaling with M fixed) and the report in :mod:`training.evaluation.report`.

Everything per (spectrum, variant) goes to ``results.jsonl`` as soon as it is done, so an interrupted
run continues where it stopped (the same command again) and ``python -m training.evaluation.report OUT`` rebuilds
``metrics.json``, ``report.md`` and ``figures/`` from it without sampling anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import numpy as np

from engine import progress
from engine.chem import molecules as chem
from engine.elucidation.pipeline import EDIT_ROUNDS, QueryParams, SpectrumSession, compute_posterior
from engine.errors import ConfigError, MsgptError
from engine.model.confidence import made_by_edit, result_features
from engine.model.querying import OUTER_KAPPA_RANGE, Calibration, QueryPlan, band_thresholds, build_queries
from engine.model.sampling import DECODING_MODES
from engine.model.scoring import RANKINGS
from engine.progress import run_to_end
from engine.spectra.spectrum import Spectrum

from training.core import metrics as M
from training.evaluation.report import drop_cut_line, read_records, write_report
from training.evaluation.selection import (
    DEFAULT_VARIANTS,
    EncoderOnly,
    EvalConfig,
    EvalResult,
    KAPPA_SWEEP,
    NEEDS_THRESHOLD,
    Progress,
    Reference,
    Selection,
    THRESHOLD_GRID,
    TOP_K,
    VARIANTS,
    load_model,
    precision_of,
    select_spectra,
    spectrum_key,
    split_variant,
    variant_name,
)
from training.evaluation.selection import FORMAT_VERSION, FREE_SUFFIX, _count, fp_bits_of  # noqa: F401  (re-exported)


# -- variants ---------------------------------------------------------------------------------------
def query_for(variant: str, cfg: EvalConfig, model, ref: Reference, thresholds: dict,
              rng: np.random.Generator, polarity: str | None = None) -> tuple[QueryParams, QueryPlan | None]:
    """The parameters (N, seed, adapter) and the query plan of one variant (None: the band)."""
    m, b = cfg.groups, cfg.pool_size
    band = QueryParams(kappa_min=cfg.kappa_min, kappa_max=cfg.kappa_max, groups=m, samples_per_group=b // m,
                       seed=cfg.seed, use_adapter=False, edit_rounds=cfg.edit_rounds)  # a plan gets no edits
    single = replace(band, samples_per_group=b)
    if variant == "oracle":
        return single, QueryPlan.oracle(ref.query_bits)
    if variant == "point":
        return single, QueryPlan.point(thresholds["kappa_1.0"], "point")
    if variant in NEEDS_THRESHOLD:
        return single, QueryPlan.point(thresholds[f"{variant}_threshold"], variant)
    if variant == "outer":
        return band, QueryPlan.outer_band(model.calibration.for_polarity(polarity), rng, m, cfg.kappa_min, cfg.kappa_max, cfg.outer_range)
    if variant == "band":
        return band, None
    if variant == "band+adapter":
        return replace(band, use_adapter=True), None
    raise ConfigError(f"unknown variant {variant!r}")


def spectrum_rng(seed: int, key: str) -> np.random.Generator:
    """The per-spectrum random stream of the outer band (the same on every rerun)."""
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def run_session(session: SpectrumSession, params: QueryParams, plan: QueryPlan | None, cancel):
    return run_to_end(session.run(params, cancel, plan=plan))


def ranked_views(session: SpectrumSession, params: QueryParams, ref: Reference, rankings: Sequence[str]) -> dict:
    """Rank of the reference and top-k Tanimoto under each ranking, from the same pool (nothing drawn)."""
    out = {}
    for name in rankings:
        candidates, _ = session.pool.rank(params.samples_per_group, name)
        out[name] = {"rank": M.reference_rank([c.inchikey14 for c in candidates], ref.inchikey14),
                     "tanimoto": [chem.tanimoto(c.bits, ref.bits) for c in candidates[:TOP_K]]}
    return out


def make_record(spectrum: Spectrum, ref: Reference, variant: str, result, band_fidelity: float,
                posterior_seconds: float, sampling_seconds: float, rankings: dict | None = None) -> dict:
    """One line of results.jsonl: what the metrics need, and the top candidates for reanalysis."""
    top = result.candidates[:TOP_K]
    mols = [chem.mol_from_smiles(c.smiles) for c in top]
    plan = result.plan
    return {
        "spectrum": spectrum_key(spectrum), "id": spectrum.id, "variant": variant,
        "adduct": spectrum.adduct, "reference": ref.smiles, "inchikey14": ref.inchikey14,
        "fidelity": band_fidelity, "query_fidelity": result.fidelity,
        "n_samples": result.n_samples, "n_valid": result.n_valid,
        "n_formula_consistent": result.n_formula_consistent, "n_candidates": len(result.candidates),
        "n_queries": result.n_distinct_queries, "mean_query_bits": result.mean_query_bits,
        "thresholds": [round(float(t), 5) for t in result.thresholds],
        "kappas": list(plan.kappas) if plan is not None and plan.kappas else None,
        "posterior_seconds": posterior_seconds, "sampling_seconds": sampling_seconds,
        "seconds": posterior_seconds + sampling_seconds,
        "rank": M.reference_rank([c.inchikey14 for c in result.candidates], ref.inchikey14),
        "tanimoto": [chem.tanimoto(chem.morgan_bits(m), ref.bits) for m in mols],
        "topological": [chem.topological_tanimoto(m, ref.mol) for m in mols],
        "top_smiles": [c.smiles for c in top], "top_inchikey14": [c.inchikey14 for c in top],
        "top_counts": [c.count for c in top],
        "top_fingerprint_scores": [round(c.fingerprint_score, 3) for c in top],
        "ranking": result.params.ranking, "decoding": result.params.decoding,
        "confidence_features": result_features(result),
        "rank1_edit": bool(result.candidates) and made_by_edit(result.candidates[0]),
        **({"rankings": rankings} if rankings else {}),
    }


# -- the run ---------------------------------------------------------------------------------------
def evaluate(cfg: EvalConfig, cancel: Callable[[], bool] | None = None) -> Iterator[Progress | EvalResult]:
    """Run the evaluation; yields :class:`Progress` events and finally one :class:`EvalResult`."""
    import torch

    def check_cancel():
        progress.check_cancel(cancel, "Evaluation cancelled; run the same command again to continue.")

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    started = time.time()
    model = load_model(cfg.model, cfg.device, cfg.precision)
    variants, skipped = _variants(cfg, model)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    selection = select_spectra(model, cfg)
    if not selection.eligible:
        raise ConfigError(f"no spectrum of {cfg.mgf} is eligible ({selection.info['left_out']}); "
                          "check --fold, --licenses and --adducts")
    posteriors, posterior_seconds = yield from _posteriors(model, cfg, selection, check_cancel)
    thresholds = _thresholds(model, cfg, posteriors, selection.eligible)
    sweep = _kappa_sweeps(model.calibration, cfg, posteriors, selection) if cfg.kappa_sweep else {}

    # resume: keep what results.jsonl holds for this model and these settings
    results_path, run_path = out / "results.jsonl", out / "run.json"
    run_key = cfg.run_key(model)
    done = _results_done(out, results_path, run_path, run_key)
    scaling_base = "band+adapter" if model.has_adapter else "band"
    scaling = [f"{scaling_base}@B={b}" for b in cfg.pool_sizes]
    run_info = _run_info(cfg, model, selection, run_key, variants, skipped, scaling, thresholds, sweep, started)
    run_path.write_text(json.dumps(run_info, indent=1))

    # sampling: every (spectrum, variant) not yet in results.jsonl
    todo_any = variants or scaling
    sampling = _Sampling(cfg, model, variants, scaling_base, scaling, done, thresholds, posteriors, posterior_seconds,
                         cancel, check_cancel)
    yield from _sample(sampling, results_path, selection.chosen if todo_any else [])

    if cfg.mces and todo_any:
        yield from add_mces(results_path, set(run_info["selected"]), cfg.mces_time_limit, check_cancel)
    run_info["seconds_total_last_run"] = time.time() - started
    run_path.write_text(json.dumps(run_info, indent=1))
    metrics = write_report(out)
    yield EvalResult(out, metrics)


def _variants(cfg: EvalConfig, model) -> tuple[list[str], list[str]]:
    """The variants to run, each under every decoding, and those left out (``band+adapter`` for a model without
    an adapter); an encoder folder runs none."""
    variants = list(cfg.variants)
    if isinstance(model, EncoderOnly) and (variants or cfg.pool_sizes):
        raise ConfigError(f"{cfg.model} is an encoder folder without a decoder: it can run the κ sweep only; "
                          "pass --variants with no names and no --pool-sizes, or give a model bundle")
    skipped = [v for v in variants if v == "band+adapter" and not model.has_adapter]
    return [variant_name(v, d) for v in variants if v not in skipped for d in cfg.decodings], skipped


def _posteriors(model, cfg: EvalConfig, selection: Selection,
                check_cancel: Callable[[], None]) -> Generator[Progress, None, tuple[dict, dict]]:
    """The posterior of every eligible spectrum (thresholds and κ sweep use them all) and the seconds it took,
    by spectrum key; yields progress."""
    everything = selection.eligible + ([p for v in selection.sweep_only.values() for p in v] if cfg.kappa_sweep else [])
    posteriors: dict[str, np.ndarray] = {}
    posterior_seconds: dict[str, float] = {}
    for i, (s, _) in enumerate(everything):
        check_cancel()
        t0 = time.perf_counter()
        posteriors[spectrum_key(s)] = compute_posterior(model, s)
        posterior_seconds[spectrum_key(s)] = time.perf_counter() - t0
        if i % 50 == 0 or i + 1 == len(everything):
            yield Progress("posteriors", i + 1, len(everything), s.id)
    return posteriors, posterior_seconds


def _stacked(posteriors: dict[str, np.ndarray], pairs) -> tuple[np.ndarray, list[np.ndarray]]:
    """The posteriors of ``pairs`` (spectrum, reference) as one matrix, and their true query bits."""
    return np.stack([posteriors[spectrum_key(s)] for s, _ in pairs]), [r.query_bits for _, r in pairs]


def _mode_thresholds(model, cfg: EvalConfig, polarity: str) -> dict:
    """The κ thresholds of one ion mode's calibration curve: κ = 1 and the band's."""
    c = model.calibration.for_polarity(polarity)
    return {"kappa_1.0": c.threshold_for_kappa(1.0),
            "band": [float(t) for t in band_thresholds(c, cfg.kappa_min, cfg.kappa_max, cfg.groups)]}


def _thresholds(model, cfg: EvalConfig, posteriors: dict[str, np.ndarray], eligible) -> dict:
    """The thresholds of the variants: each ion mode's κ thresholds, and the F1- and cosine-optimal point-query
    thresholds (with their mean scores) chosen on the eligible spectra."""
    P, truths = _stacked(posteriors, eligible)
    thresholds = _mode_thresholds(model, cfg, "positive")
    if model.calibration.negative is not None:
        thresholds["negative"] = _mode_thresholds(model, cfg, "negative")
    scores = M.threshold_scores(P, truths, THRESHOLD_GRID)  # F1/cosine-optimal point queries, chosen on these
    for score in ("f1", "cosine"):
        means = scores[score].mean(axis=0)
        best = int(np.argmax(means))
        thresholds[f"{score}_threshold"], thresholds[f"{score}_score"] = float(THRESHOLD_GRID[best]), float(means[best])
    return thresholds


def _kappa_sweeps(cal: Calibration, cfg: EvalConfig, posteriors: dict[str, np.ndarray], selection: Selection) -> dict:
    """The κ sweep of the evaluated folds together, and of each sweep-only fold."""
    sweep = {",".join(cfg.folds) or "all": _sweep_of(cal, posteriors, selection.eligible)}
    for fold, pairs in selection.sweep_only.items():
        if pairs:
            sweep[fold] = _sweep_of(cal, posteriors, pairs)
    return sweep


def _sweep_of(cal: Calibration, posteriors: dict[str, np.ndarray], pairs) -> list[dict]:
    """The κ sweep of ``pairs`` (spectrum, reference), each spectrum at its own ion mode's curve."""
    return kappa_sweep(cal, *_stacked(posteriors, pairs), negative=np.array([s.polarity == "negative" for s, _ in pairs]))


def _results_done(out: Path, results_path: Path, run_path: Path, run_key: dict) -> set[tuple[str, str]]:
    """The (spectrum, variant) pairs results.jsonl already holds (a line cut by a crash dropped); results of
    another model or other settings are an error."""
    if not results_path.exists():
        return set()
    old = json.loads(run_path.read_text()).get("run_key") if run_path.exists() else None
    if old != run_key:
        changed = sorted(k for k in set(run_key) | set(old or {}) if (old or {}).get(k) != run_key.get(k))
        raise ConfigError(f"{out} holds results of another model or settings (differs in: {', '.join(changed)}); "
                          "use a new --out, or delete its results.jsonl")
    drop_cut_line(results_path)
    return {(r["spectrum"], r["variant"]) for r in read_records(results_path)}


def _run_info(cfg: EvalConfig, model, selection: Selection, run_key: dict, variants: list[str], skipped: list[str],
              scaling: list[str], thresholds: dict, sweep: dict, started: float) -> dict:
    """What run.json records of the run: model, data, parameters, variants, thresholds, κ sweep, machine."""
    return {
        "run_key": run_key,
        "model": {"name": model.name, "checksum": model.checksum, "path": str(Path(cfg.model).resolve()),
                  "precision": precision_of(model), "device": str(model.device), "has_adapter": model.has_adapter},
        "data": {"mgf": str(cfg.mgf), "folds": list(cfg.folds), "licenses": cfg.licenses, "adducts": cfg.adducts,
                 "one_per_structure": cfg.one_per_structure, "max_spectra": cfg.max_spectra, **selection.info},
        "selected": [spectrum_key(s) for s, _ in selection.chosen],
        "parameters": {"kappa_band": [cfg.kappa_min, cfg.kappa_max], "groups": cfg.groups,
                       "pool_size": cfg.pool_size, "pool_sizes": list(cfg.pool_sizes), "seed": cfg.seed,
                       "edit_rounds": cfg.edit_rounds,
                       "outer_range": list(cfg.outer_range), "temperature": 1.0, "top_k": 50, "top_p": 0.95,
                       "mces": cfg.mces, "mces_time_limit": cfg.mces_time_limit},
        "variants": variants, "skipped_variants": skipped, "scaling": scaling,
        "decodings": list(cfg.decodings), "rankings": list(cfg.rankings),
        "thresholds": thresholds, "threshold_grid": [float(THRESHOLD_GRID[0]), float(THRESHOLD_GRID[-1]), 0.001],
        "kappa_sweep": sweep,
        "machine": machine(model), "command": cfg.command, "code_version": code_version(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
    }


@dataclass
class _Sampling:
    """What the sampling phase shares across spectra: the model and settings, the variants and pool sizes to run,
    those results.jsonl already holds, the thresholds and posteriors, and results.jsonl open for appending."""

    cfg: EvalConfig
    model: Any
    variants: list[str]
    scaling_base: str  # the variant the pool-size scaling runs
    scaling: list[str]  # its records, "<scaling_base>@B=<pool size>"
    done: set[tuple[str, str]]  # (spectrum key, variant) already in results.jsonl
    thresholds: dict
    posteriors: dict[str, np.ndarray]
    posterior_seconds: dict[str, float]
    cancel: Callable[[], bool] | None
    check_cancel: Callable[[], None]
    sink: IO[str] | None = None


def _sample(sampling: _Sampling, results_path: Path, chosen: list[tuple[Spectrum, Reference]]) -> Iterator[Progress]:
    """Sample every (spectrum, variant) of ``chosen`` not yet in results.jsonl, appending each record to it."""
    with open(results_path, "a", encoding="utf-8") as sink:
        sampling.sink = sink
        for i, (s, ref) in enumerate(chosen):
            key = spectrum_key(s)
            todo = [v for v in sampling.variants + sampling.scaling if (key, v) not in sampling.done]
            if todo:
                yield from _sample_spectrum(sampling, i, len(chosen), s, ref, todo)
            yield Progress("sampling", i + 1, len(chosen), s.id)


def _sample_spectrum(sampling: _Sampling, i: int, n: int, s: Spectrum, ref: Reference,
                     todo: list[str]) -> Iterator[Progress]:
    """Run the variants (and pool sizes) ``todo`` of the ``i``-th of ``n`` spectra and write their records."""
    cfg, model, sink = sampling.cfg, sampling.model, sampling.sink
    key = spectrum_key(s)
    post = sampling.posteriors[key]
    thresholds = sampling.thresholds
    mode = {**thresholds, **thresholds.get("negative", {})} if s.polarity == "negative" else thresholds
    band_fid = chem.max_tanimoto(ref.query_bits, [q.bits for q in build_queries(post, mode["band"])])
    rng = spectrum_rng(cfg.seed, key)
    for variant in sampling.variants:
        base, decoding = split_variant(variant)
        params, plan = query_for(base, cfg, model, ref, mode, rng, s.polarity)  # the rng draws for every variant
        if variant not in todo:
            continue
        sampling.check_cancel()
        yield Progress("sampling", i, n, s.id, variant)
        params = replace(params, decoding=decoding, ranking=cfg.rankings[0])
        session = SpectrumSession(model, s, posterior=post)
        result = run_session(session, params, plan, sampling.cancel)
        rec = make_record(s, ref, variant, result, band_fid, sampling.posterior_seconds[key], result.seconds,
                          ranked_views(session, params, ref, cfg.rankings))
        sink.write(json.dumps(rec) + "\n")
        sink.flush()
    if any(v in todo for v in sampling.scaling):
        sampling.check_cancel()
        yield Progress("sampling", i, n, s.id, f"{sampling.scaling_base}@B")
        _sample_pool_sizes(sampling, s, ref, todo, mode, rng, band_fid)


def _sample_pool_sizes(sampling: _Sampling, s: Spectrum, ref: Reference, todo: list[str], mode: dict,
                       rng: np.random.Generator, band_fid: float) -> None:
    """The pool-size scaling records of one spectrum: one growing pool, each B drawing only the samples the
    smaller pools lack, so their seconds add up."""
    cfg, key, sink = sampling.cfg, spectrum_key(s), sampling.sink
    session, spent = SpectrumSession(sampling.model, s, posterior=sampling.posteriors[key]), 0.0
    params, _ = query_for(sampling.scaling_base, cfg, sampling.model, ref, mode, rng, s.polarity)
    params = replace(params, decoding=cfg.decodings[0], ranking=cfg.rankings[0])
    for b in cfg.pool_sizes:
        result = run_session(session, replace(params, samples_per_group=b // cfg.groups), None, sampling.cancel)
        spent += result.seconds
        name = f"{sampling.scaling_base}@B={b}"
        if name in todo:
            rec = make_record(s, ref, name, result, band_fid, sampling.posterior_seconds[key], spent)
            sink.write(json.dumps(rec) + "\n")
    sink.flush()


def add_mces(results_path: Path, keys: set[str], time_limit: float, check_cancel) -> Iterator[Progress]:
    """Top-10 MCES for every record of ``keys`` that lacks it, from its stored top candidates; rewrites
    results.jsonl (atomically) when done."""
    from training.evaluation.mces import require_mces, topk_mces

    require_mces()
    records = read_records(results_path)
    missing = [r for r in records if r["spectrum"] in keys and "mces" not in r]
    for i, r in enumerate(missing):
        check_cancel()
        r["mces"], r["mces_failed"] = topk_mces(r["reference"], r["top_smiles"], TOP_K, time_limit)
        yield Progress("mces", i + 1, len(missing), r["id"], r["variant"])
    if missing:
        tmp = results_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        os.replace(tmp, results_path)


def kappa_sweep(cal: Calibration, posteriors: np.ndarray, truths: Sequence[np.ndarray],
                kappas: Sequence[float] = KAPPA_SWEEP, negative: np.ndarray | None = None) -> list[dict]:
    """The paper's density-ratio diagnostics: for each κ the single query ``1[π > t_κ]`` of every spectrum,
    its Tanimoto to the true fingerprint (fidelity), the fidelity-bin shares and the mean active bits.

    ``negative`` marks the rows of negative-mode spectra: with a two-mode calibration they are cut at
    their own mode's t_κ (as the band queries are), and each row of the result then also carries
    ``threshold_negative``; ``threshold`` is the positive mode's (the negative one's when every row is).
    """
    n = len(posteriors)
    neg = np.zeros(n, dtype=bool) if negative is None or cal.negative is None else np.asarray(negative, dtype=bool)
    if neg.shape != (n,):
        raise ValueError(f"negative marks {neg.shape[0]} rows for {n} posteriors; give one flag per posterior")
    fid = np.zeros((n, len(kappas)))
    bits = np.zeros((n, len(kappas)))
    ts: dict[str, list[float]] = {}
    for mode, rows_of_mode in (("positive", ~neg), ("negative", neg)):
        idx = np.flatnonzero(rows_of_mode)
        if not len(idx):
            continue
        ts[mode] = [cal.for_polarity(mode).threshold_for_kappa(k) for k in kappas]
        scores = M.threshold_scores(posteriors[idx], [truths[i] for i in idx], ts[mode])
        fid[idx], bits[idx] = scores["tanimoto"], scores["active_bits"]
    rows = []
    for j, kappa in enumerate(kappas):
        f = fid[:, j]
        bins = [M.fidelity_bin(float(x)) for x in f]
        thr = {"threshold": ts["positive"][j] if "positive" in ts else ts["negative"][j]}
        if len(ts) == 2:
            thr["threshold_negative"] = ts["negative"][j]
        rows.append({"kappa": kappa, **thr, "n": n, "mean_active_bits": float(bits[:, j].mean()),
                     "mean_fidelity": float(f.mean()),
                     **{f"share_{name}": bins.count(name) / len(bins) for name, *_ in M.FIDELITY_BINS}})
    return rows


def machine(model) -> str:
    """CPU model, cores, torch version and threads (and the GPU when there is one), and the load."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    if str(model.device).startswith("cuda"):
        text += f", GPU {torch.cuda.get_device_name(0)}"
    if hasattr(os, "getloadavg"):
        text += f"; load average {os.getloadavg()[0]:.1f} at the start"
    return text


def code_version() -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        rev = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, check=False,
                             text=True, timeout=5)
        return rev.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# -- command line ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="msgpt-eval", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="variants: " + "; ".join(VARIANTS) + ". Defaults are the paper's settings.")
    p.add_argument("--model", help="model bundle folder (default: the bundled model), or an encoder training "
                   "folder for the κ sweep alone")
    p.add_argument("--mgf", required=True, help="labelled MGF (FORMULA, SMILES, adduct per record; .gz too)")
    p.add_argument("--out", required=True, help="output folder: report.md, metrics.json, results.jsonl, figures/")
    p.add_argument("--fold", nargs="*", default=["val"], help="FOLD values to evaluate (default val; none = all)")
    p.add_argument("--licenses", nargs="*", help="LICENSE values to keep, e.g. CC0 'CC BY' 'CC BY-SA' (default: all)")
    p.add_argument("--adducts", nargs="*", help="adducts to keep, e.g. '[M+H]+' (default: all the model supports)")
    p.add_argument("--max-spectra", type=int, metavar="N", help="seeded random subsample of N spectra")
    p.add_argument("--one-per-structure", action="store_true", help="one random spectrum per structure")
    p.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS), choices=VARIANTS, metavar="VARIANT",
                   help=f"runs to compare, of {', '.join(VARIANTS)} (default: {' '.join(DEFAULT_VARIANTS)}; "
                   "none: the κ sweep alone)")
    p.add_argument("--band", nargs=2, type=float, default=(0.95, 1.50), metavar=("KMIN", "KMAX"),
                   help="density band (default 0.95 1.50)")
    p.add_argument("--groups", type=int, default=20, metavar="M", help="query groups (default 20)")
    p.add_argument("--pool-size", type=int, default=100, metavar="B", help="samples per spectrum (default 100)")
    p.add_argument("--pool-sizes", type=int, nargs="*", default=[], metavar="B",
                   help="candidate-pool scaling: band querying at these B with M fixed, e.g. 100 500 1500")
    p.add_argument("--outer-range", nargs=2, type=float, default=OUTER_KAPPA_RANGE, metavar=("LO", "HI"),
                   help="κ range whose part outside the band the outer variant draws from (default 0.5 2.0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--edit-rounds", type=int, default=EDIT_ROUNDS, metavar="K",
                   help=f"rounds of isomer edits after the band's sampling (default {EDIT_ROUNDS}, as msgpt predict; "
                   "0: none)")
    p.add_argument("--decoding", nargs="+", default=["formula"], choices=DECODING_MODES, metavar="MODE",
                   help="decoding modes, each variant runs with each: formula (constrained, default), free (the "
                        "paper's); free runs are named VARIANT/free")
    p.add_argument("--rankings", nargs="+", default=list(RANKINGS), choices=RANKINGS, metavar="RANKING",
                   help=f"rankings scored on every pool; the first is the headline (default: {' '.join(RANKINGS)})")
    p.add_argument("--mces", action="store_true", help="also Top-k MCES (myopic-mces: pip install 'msgpt-desktop[eval]')")
    p.add_argument("--mces-time-limit", type=float, default=60.0, metavar="S", help="seconds per MCES pair (default 60)")
    p.add_argument("--kappa-sweep", action=argparse.BooleanOptionalAction, default=True,
                   help="the κ diagnostic sweep (encoder only; default on)")
    p.add_argument("--sweep-folds", nargs="*", help="folds of the κ sweep (default: the evaluated ones), e.g. train val")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"), help="decoder precision")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    return p


def config_from_args(args: argparse.Namespace, argv: Sequence[str]) -> EvalConfig:
    from engine.paths import default_model_dir

    return EvalConfig(
        model=args.model or str(default_model_dir()), mgf=args.mgf, out=args.out, folds=tuple(args.fold),
        licenses=tuple(args.licenses) if args.licenses else None,
        adducts=tuple(args.adducts) if args.adducts else None, max_spectra=args.max_spectra,
        one_per_structure=args.one_per_structure, variants=tuple(args.variants), kappa_min=args.band[0],
        kappa_max=args.band[1], groups=args.groups, pool_size=args.pool_size, pool_sizes=tuple(args.pool_sizes),
        outer_range=tuple(args.outer_range), seed=args.seed, edit_rounds=args.edit_rounds,
        decodings=tuple(args.decoding),
        rankings=tuple(args.rankings), mces=args.mces, mces_time_limit=args.mces_time_limit,
        device=args.device, precision=args.precision, threads=args.threads, kappa_sweep=args.kappa_sweep,
        sweep_folds=tuple(args.sweep_folds) if args.sweep_folds else None,
        command="msgpt-eval " + " ".join(_quote(a) for a in argv),
    )


def _quote(arg: str) -> str:
    return arg if arg and all(c.isalnum() or c in "-_./=:+" for c in arg) else "'" + arg.replace("'", "'\\''") + "'"


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    bar = None
    try:
        cfg = config_from_args(args, argv)
        if cfg.mces:
            from training.evaluation.mces import require_mces

            require_mces()
        phase = None
        for event in evaluate(cfg):
            if isinstance(event, Progress):
                if event.phase != phase:
                    if bar is not None:
                        bar.close()
                    phase = event.phase
                    unit = "record" if phase == "mces" else "spectrum"
                    bar = tqdm(total=event.total, desc=phase, unit=unit, file=sys.stderr, dynamic_ncols=True)
                bar.set_postfix_str(f"{event.variant} {event.spectrum_id}".strip()[:50], refresh=False)
                bar.update(event.done - bar.n)  # redraws at most every 0.1 s
            else:
                if bar is not None:
                    bar.close()
                print_summary(event)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        print("interrupted; run the same command again to continue (finished spectra are kept)", file=sys.stderr)
        return 130
    except MsgptError as e:
        if bar is not None:
            bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def print_summary(result: EvalResult) -> None:
    print(f"report: {result.out / 'report.md'}")
    for v, m in result.metrics["variants"].items():
        print(f"  {v:20s} top1 {m['top1_accuracy']:.3f} top10 {m['top10_accuracy']:.3f} "
              f"tanimoto {m['top1_tanimoto']:.3f}/{m['top10_tanimoto']:.3f} "
              f"close {m['top1_close_match']:.3f}/{m['top10_close_match']:.3f} "
              f"valid {m['valid_yield']:.3f} formula-ok {m['formula_consistent_yield']:.3f} "
              f"{m['seconds_per_spectrum']:.2f} s/spectrum (n={m['n']})")
    for fold, rows in result.metrics.get("kappa_sweep", {}).items():
        one = min(rows, key=lambda r: abs(r["kappa"] - 1.0))
        print(f"  κ sweep ({fold}): at κ=1.00 {one['mean_active_bits']:.1f} bits, fidelity low/mid/high "
              f"{one['share_low']:.3f}/{one['share_mid']:.3f}/{one['share_high']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
