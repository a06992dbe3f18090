"""Where the encoder's val error lies: checks of levers that work outside its ranking of bits (issue #14).

Every row scores the same licence-clean ``FOLD=val`` spectra (one ion mode at a time) by the mean
Tanimoto between the true fingerprint and a binary query. So that rows compare posteriors, not
thresholds, every posterior other than the encoder's own is cut at the threshold that gives its queries
as many bits on average as the bundle's query (the encoder at its calibrated t(κ=1)) has:

* **encoder, calibrated t(κ=1)**: the query a bundle makes (its ``calibration.json``);
* **encoder, density-matched t**: the same posterior at the threshold that gives the true mean bit count
  (the "Tanimoto κ=1 (density)" column of ``docs/encoder_ablation.md``);
* **encoder, top-n with the true n**: each spectrum's n most probable bits, n its true number of active
  bits. No threshold rule can pick the count better, so this bounds what a better density rule gains;
  and the same with n predicted from the formula (least squares on element counts and heavy-atom size
  over the corpus), a rule one could ship;
* **formula prior**: the mean fingerprint of the corpus's isomers of the spectrum's formula (the molecule
  corpus excludes every ``FOLD=val`` structure), smoothed towards the corpus's bit rates with ``alpha``
  pseudo-records: what the formula alone says, from 562k structures instead of the encoder's 4k;
* **encoder + prior**: ``logit π + w · (logit prior − logit base rate)`` for each ``w`` given (a product of
  experts that counts the prior's evidence beyond the base rate once);
* **isomer retrieval**: the fingerprints of the formula's corpus isomers weighted by ``exp(log-likelihood
  under π / T)``, mixed into π with share ``a``; and, as a bound for any method that picks a corpus
  structure, the mean Tanimoto of each spectrum's closest isomer (spectra with one).

    python -m training.studies.encoder_headroom --mgf ../shared/data/massbank_dev.mgf.gz \\
        --encoder runs/enc_abl/grow+negative+substructure+simulated24k --corpus runs/corpus_full \\
        --out runs/encoder_headroom.json

Diagnostics, not a recipe: the weights are a short fixed grid, all reported, none chosen for shipping.

Its table: docs/evidence/encoder_ablation.md, "What is left outside the encoder's ranking of bits", with the command
above.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.chem.formula import ELEMENT_INDEX
from engine.errors import ConfigError, InputFileError, MsgptError
from engine.progress import run_to_end

from training.calibration.calibrate import Calibration, load_encoder
from training.core.checkpoint import write_json_atomic
from training.data.dataset import CorpusDataset
from training.core.loop import torch_threads
from training.core.metrics import density_matched_threshold
from training.data.spectra import SHIPPABLE_LICENSES, FeatureSettings, LabelledSpectra, iter_load_labelled_spectra
from training.encoder.train_encoder import predict_posteriors

SCORED_ADDUCTS = ("[M+H]+", "[M+Na]+", "[M-H]-")
_EPS = 1e-6


def _row_keys(formulas: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(formulas, dtype=np.int64))
    return a.view(np.dtype((np.void, 8 * a.shape[1]))).ravel()


class IsomerIndex:
    """Corpus records by exact formula: ``rows(formula)`` -> the indices of its isomers."""

    def __init__(self, formulas: np.ndarray):
        keys = _row_keys(formulas)
        self.order = np.argsort(keys, kind="stable")
        self._sorted = keys[self.order]

    def rows(self, formula: np.ndarray) -> np.ndarray:
        key = _row_keys(np.asarray(formula, dtype=np.int64)[None, :])
        lo, hi = np.searchsorted(self._sorted, key, "left")[0], np.searchsorted(self._sorted, key, "right")[0]
        return self.order[lo:hi]


def dense_rows(bits: np.ndarray, offsets: np.ndarray, rows: np.ndarray, n_bits: int) -> np.ndarray:
    """``(len(rows), n_bits)`` float32 0/1 fingerprints of the records ``rows`` of flat bit arrays."""
    out = np.zeros((len(rows), n_bits), dtype=np.float32)
    for r, j in enumerate(rows):
        out[r, bits[offsets[j] : offsets[j + 1]]] = 1.0
    return out


def base_rates(bits: np.ndarray, n_records: int, n_bits: int) -> np.ndarray:
    """Share of records with each bit on (``(n_bits,)`` float64)."""
    if n_records < 1:
        raise ConfigError("The corpus has no records; a prior needs at least one.")
    return np.bincount(np.asarray(bits, dtype=np.int64), minlength=n_bits)[:n_bits] / n_records


def smoothed_mean(mean: np.ndarray, n: int, base: np.ndarray, alpha: float) -> np.ndarray:
    """``(n * mean + alpha * base) / (n + alpha)``: a mean over ``n`` isomers shrunk towards the base rates
    (the base rates themselves when there is no isomer)."""
    if alpha <= 0:
        raise ConfigError(f"`alpha` must be > 0 (pseudo-records of the base rates), got {alpha!r}.")
    return (n * np.asarray(mean, dtype=np.float64) + alpha * base) / (n + alpha) if n else np.asarray(base, float)


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, _EPS, 1 - _EPS)
    return np.log(p) - np.log1p(-p)


def combine(posteriors: np.ndarray, prior: np.ndarray, base: np.ndarray, weight: float) -> np.ndarray:
    """``σ(logit π + weight · (logit prior − logit base))`` (weight 0 gives π back, up to the clip)."""
    z = _logit(posteriors) + weight * (_logit(prior) - _logit(np.asarray(base)[None, :]))
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def retrieval_mean(posterior: np.ndarray, fingerprints: np.ndarray, temperature: float) -> np.ndarray:
    """The isomers' fingerprints weighted by ``exp(log-likelihood under posterior / temperature)``."""
    if temperature <= 0:
        raise ConfigError(f"`temperature` must be > 0, got {temperature!r}.")
    p = np.clip(posterior.astype(np.float64), 1e-4, 1 - 1e-4)
    ll = fingerprints @ (np.log(p) - np.log1p(-p))
    w = np.exp((ll - ll.max()) / temperature)
    return (w / w.sum()) @ fingerprints


def tanimoto_rows(queries: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Row-wise Tanimoto of two boolean matrices (0 where both rows are empty)."""
    inter = (queries & targets).sum(1)
    union = (queries | targets).sum(1)
    return np.where(union > 0, inter / np.maximum(union, 1), 0.0)


def top_n(posteriors: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Boolean queries with each row's ``n[i]`` most probable bits (at least one)."""
    order = np.argsort(-posteriors, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(posteriors.shape[1])[None, :].repeat(len(posteriors), 0), axis=1)
    return ranks < np.maximum(np.asarray(n), 1)[:, None]


def density_fidelity(posteriors: np.ndarray, targets: np.ndarray, mean_bits: float | None = None) -> float:
    """Mean Tanimoto at the threshold that gives these rows ``mean_bits`` active bits on average (default:
    the mean active-bit count of ``targets``)."""
    mean_bits = float(targets.sum(1).mean()) if mean_bits is None else mean_bits
    t = density_matched_threshold(posteriors, mean_bits)
    return float(tanimoto_rows(posteriors > t, targets).mean())


def _count_features(formulas: np.ndarray) -> np.ndarray:
    f = np.asarray(formulas, dtype=np.float64)
    heavy = f.sum(1) - f[:, ELEMENT_INDEX["H"]]  # every element but hydrogen
    return np.column_stack([np.ones(len(f)), f, heavy, np.sqrt(heavy), np.log1p(heavy)])


def fit_bit_count(formulas: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Least-squares weights predicting a structure's number of active bits from its formula."""
    w, *_ = np.linalg.lstsq(_count_features(formulas), np.asarray(counts, dtype=np.float64), rcond=None)
    return w


def predict_bit_count(weights: np.ndarray, formulas: np.ndarray) -> np.ndarray:
    return np.maximum(np.rint(_count_features(formulas) @ weights), 1).astype(np.int64)


def roots(data: LabelledSpectra) -> np.ndarray:
    """Each spectrum's root formula (the precursor's neutral formula), ``(n, 14)`` int64."""
    return np.asarray(data.formulas, dtype=np.int64)[np.asarray(data.token_offsets[:-1])]


def headroom(posteriors: np.ndarray, data: LabelledSpectra, thresholds: np.ndarray, corpus: dict[str, np.ndarray],
             *, weights: Sequence[float] = (0.25, 0.5), alpha: float = 2.0, temperature: float = 30.0,
             mixes: Sequence[float] = (0.25, 0.5), max_isomers: int = 3000,
             seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """The rows of the module docstring for the spectra ``data`` (one ion mode) and their posteriors."""
    n_bits = posteriors.shape[1]
    n = len(posteriors)
    targets = data.targets(np.arange(n)).astype(bool)
    bits, offsets, formulas = corpus["bits"], corpus["offsets"], corpus["formula"]
    base = base_rates(bits, len(formulas), n_bits)
    index = IsomerIndex(formulas)
    root_formulas = roots(data)
    n_predicted = predict_bit_count(fit_bit_count(formulas, np.diff(offsets)), root_formulas)
    rng = np.random.default_rng(seed)
    prior = np.empty_like(posteriors, dtype=np.float32)
    retrieved = np.empty_like(prior)
    best = np.full(n, np.nan)
    n_isomers = np.zeros(n, dtype=np.int64)
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
    for i, formula in enumerate(root_formulas):
        key = formula.tobytes()
        if key not in cache:
            members = index.rows(formula)
            if len(members) > max_isomers:
                members = np.sort(rng.choice(members, max_isomers, replace=False))
            fps = dense_rows(bits, offsets, members, n_bits)
            mean = fps.mean(0) if len(fps) else base
            cache[key] = (fps, smoothed_mean(mean, len(fps), base, alpha).astype(np.float32))
        fps, prior[i] = cache[key]
        n_isomers[i] = len(fps)
        retrieved[i] = prior[i]
        if len(fps):
            inter = fps @ targets[i].astype(np.float32)
            best[i] = float((inter / (fps.sum(1) + targets[i].sum() - inter)).max())
            retrieved[i] = smoothed_mean(retrieval_mean(posteriors[i], fps, temperature), len(fps), base, alpha)
    query = posteriors > thresholds[:, None]
    query_bits = float(query.sum(1).mean())

    def at_query_density(p: np.ndarray) -> float:
        return density_fidelity(p, targets, query_bits)

    rows: dict[str, float] = {
        "encoder, calibrated t(κ=1)": float(tanimoto_rows(query, targets).mean()),
        "encoder, density-matched t": density_fidelity(posteriors, targets),
        "encoder, top-n with the true n": float(tanimoto_rows(top_n(posteriors, targets.sum(1)), targets).mean()),
        "encoder, top-n with n predicted from the formula": float(tanimoto_rows(top_n(posteriors, n_predicted),
                                                                                targets).mean()),
        "formula prior alone": at_query_density(prior),
    }
    for w in weights:
        rows[f"encoder + prior, w={w:g}"] = at_query_density(combine(posteriors, prior, base, w))
    rows[f"isomer retrieval alone, T={temperature:g}"] = at_query_density(retrieved)
    for a in mixes:
        mixed = (1 - a) * posteriors + a * retrieved
        rows[f"(1-a)·encoder + a·retrieval, a={a:g}"] = at_query_density(mixed)
    has = n_isomers > 0
    return {
        "spectra": n,
        "query_bits": round(query_bits, 2),
        "true_bits": round(float(targets.sum(1).mean()), 2),
        "structures": int(len(np.unique(data.inchikey14))),
        "rows": {k: round(v, 4) for k, v in rows.items()},
        "with_isomer": round(float(has.mean()), 4),
        "median_isomers": float(np.median(n_isomers)),
        "closest_isomer_tanimoto": round(float(best[has].mean()), 4) if has.any() else None,
    }


def load_corpus(corpus_dir: str | Path, exclude_keys: Sequence[str]) -> tuple[dict[str, np.ndarray], int]:
    """The corpus's fingerprint arrays without the records of ``exclude_keys`` (InChIKey blocks), and how
    many records were dropped (the shipped corpus drops every ``FOLD=val`` structure already: 0)."""
    ds = CorpusDataset(corpus_dir)
    bits, offsets, formulas = ds.fingerprint_arrays()
    blocks = ds.inchikey_blocks().view("S14").ravel()
    keep = ~np.isin(blocks, np.array([k.encode("ascii") for k in exclude_keys], dtype="S14"))
    counts = np.diff(offsets)
    new_offsets = np.concatenate([[0], np.cumsum(counts[keep])]).astype(np.int64)
    bit_mask = np.repeat(keep, counts)  # each record's keep flag on each of its bits
    return {"bits": bits[bit_mask], "offsets": new_offsets, "formula": formulas[keep]}, int((~keep).sum())


def format_table(results: dict[str, Any]) -> str:
    modes = [m for m in ("positive", "negative") if m in results["modes"]]
    head = "| query | " + " | ".join(f"{m} val fidelity" for m in modes) + " |"
    lines = [head, "| --- |" + " ---: |" * len(modes)]
    for name in results["modes"][modes[0]]["rows"]:
        lines.append(f"| {name} | " + " | ".join(f"{results['modes'][m]['rows'][name]:.3f}" for m in modes) + " |")
    for m in modes:
        r = results["modes"][m]
        lines.append(f"\n{m}: {r['spectra']} spectra of {r['structures']} structures; the bundle's queries have "
                     f"{r['query_bits']:.1f} bits on average (true fingerprints {r['true_bits']:.1f}); "
                     f"{100 * r['with_isomer']:.1f}% "
                     f"have an isomer in the corpus (median {r['median_isomers']:g}); the closest isomer's "
                     f"Tanimoto, mean over those: {r['closest_isomer_tanimoto']}")  # fmt: skip
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.studies.encoder_headroom", description=__doc__.split("\n\n")[0])
    p.add_argument("--mgf", required=True, help="labelled MGF (the shared massbank_dev.mgf.gz)")
    p.add_argument("--encoder", required=True, help="a finished encoder run (with calibration.json)")
    p.add_argument("--corpus", required=True, help="a prepared molecule corpus (python -m training.data.corpus prepare)")
    p.add_argument("--out", required=True, help="JSON file of the results (a .md table is written beside it)")
    p.add_argument("--weights", type=float, nargs="+", default=[0.25, 0.5], help="prior weights w")
    p.add_argument("--alpha", type=float, default=2.0, help="pseudo-records of the base rates in the means")
    p.add_argument("--temperature", type=float, default=30.0, help="T of the retrieval weights")
    p.add_argument("--mixes", type=float, nargs="+", default=[0.25, 0.5], help="shares a of the retrieval mean")
    p.add_argument("--max-isomers", type=int, default=3000, help="isomers read per formula (a seeded sample)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache-dir")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        folder = Path(args.encoder)
        if not (folder / "calibration.json").is_file():
            raise ConfigError(f"{folder} has no calibration.json; run `python -m training.calibration.calibrate` on it first.")
        model = load_encoder(folder)
        cal = Calibration.load(folder / "calibration.json")
        settings = replace(FeatureSettings.for_encoder(model.config), adducts=SCORED_ADDUCTS)
        data = run_to_end(iter_load_labelled_spectra(args.mgf, settings, cache_dir=args.cache_dir))
        val = data.select(("val",), licenses=SHIPPABLE_LICENSES, exclude_unit_resolution=True)
        if not len(val):
            raise InputFileError(f"{args.mgf} has no licence-clean FOLD=val spectrum of {', '.join(SCORED_ADDUCTS)}.")
        corpus, dropped = load_corpus(args.corpus, np.unique(data.inchikey14[data.fold == "val"]).tolist())
        with torch_threads(args.threads):
            posteriors = predict_posteriors(model, val, 256)
        results: dict[str, Any] = {"encoder": str(folder), "corpus": str(args.corpus), "mgf": str(args.mgf),
                                   "corpus_records": len(corpus["formula"]), "dropped_val_structures": dropped,
                                   "settings": {k: getattr(args, k) for k in ("weights", "alpha", "temperature",
                                                                               "mixes", "max_isomers")},
                                   "modes": {}}  # fmt: skip
        for mode, rows in (("positive", val.polarity > 0), ("negative", val.polarity < 0)):
            idx = np.flatnonzero(rows)
            if not len(idx):
                continue
            t = np.full(len(idx), cal.for_polarity(mode).threshold_for_kappa(1.0))
            results["modes"][mode] = headroom(
                posteriors[idx], val.subset(idx), t, corpus, weights=args.weights, alpha=args.alpha,
                temperature=args.temperature, mixes=args.mixes, max_isomers=args.max_isomers,
            )
            print(f"{mode}: {json.dumps(results['modes'][mode]['rows'])}", flush=True)
        out = Path(args.out)
        write_json_atomic(out, results)
        out.with_suffix(".md").write_text(format_table(results))
        print(format_table(results))
    except (MsgptError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
