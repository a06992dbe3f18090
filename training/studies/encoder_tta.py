"""Test-time augmentation of the encoder's peaks (issue #59, item 2): does averaging the posteriors of perturbed
copies of a spectrum rank its true structure higher among its formula's isomers?

The cheapest test of a better posterior before any sampling: for each spectrum of a
``training.studies.retrieval --library-only`` run (its sets: train-unseen FOLD=train spectra to choose on, FOLD=val
to report), the truth and up to 63 corpus structures of its formula are scored by the fingerprint score
(:class:`engine.model.scoring.FingerprintScorer`, the bundle's per-bit calibration) under the plain posterior and
under the mean (of probabilities, or of logits) of the posteriors of the spectrum and ``--copies`` perturbed
copies: ``drop`` removes each peak but the base peak with probability 0.15, ``noise`` multiplies intensities by
exp(N(0, 0.3)), ``all`` adds a 2 ppm m/z jitter to both. A variant that does not raise the truth's rank here would
not raise the band pool's truth rate either (the queries are thresholds of the same posterior), so it is not
sampled::

    python -m training.studies.encoder_tta --pools runs/retrieval/lib --set train --n 800

Measured 2026-12-02 (800 train-unseen spectra, 2-core AMD EPYC, one thread, 2 minutes): Hit@1 29.9% plain,
29.4-29.7% with every variant, Hit@5 64.6-65.0% against 64.9%, MRR 0.457-0.459 against 0.460: no gain, so the
engine keeps the plain posterior.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

MODES = ("drop", "noise", "all")


def augment(spectrum, rng: np.random.Generator, mode: str):
    """A perturbed copy of ``spectrum`` (module docstring)."""
    mz, intensity = np.asarray(spectrum.mz, float).copy(), np.asarray(spectrum.intensity, float).copy()
    if mode in ("drop", "all"):
        keep = rng.random(mz.size) > 0.15
        keep[np.argmax(intensity)] = True
        mz, intensity = mz[keep], intensity[keep]
    if mode in ("noise", "all"):
        intensity = intensity * np.exp(rng.normal(0, 0.3, intensity.size))
    if mode == "all":
        mz = mz * (1 + rng.normal(0, 2e-6, mz.size))
    return dataclasses.replace(spectrum, mz=mz, intensity=intensity)


def truth_rank(posterior: np.ndarray, bit_calibration, bits: list[np.ndarray]) -> float:
    """Rank of ``bits[0]`` (the truth) among ``bits`` by the fingerprint score (ties count half)."""
    from engine.model.scoring import FingerprintScorer

    scorer = FingerprintScorer(posterior, bit_calibration)
    v = np.array([scorer.score(b) for b in bits])
    return 1 + float((v[1:] > v[0]).sum()) + 0.5 * float((v[1:] == v[0]).sum())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.studies.encoder_tta", description=__doc__.split("\n\n")[0])
    p.add_argument("--pools", required=True, help="a `training.studies.retrieval --library-only` output folder")
    p.add_argument("--set", choices=("train", "val"), default="train", help="train-unseen (choose) or FOLD=val")
    p.add_argument("--n", type=int, default=800)
    p.add_argument("--copies", type=int, default=8)
    p.add_argument("--model", help="model bundle (default: the bundled model)")
    a = p.parse_args(argv)
    import torch

    from engine.chem import molecules as chem
    from engine.elucidation.pipeline import model_spectrum
    from engine.model.bundle import load_bundle
    from engine.model.featurize import collate, featurize_spectrum
    from engine.paths import default_model_dir
    from training.calibration.suspect_confidence import read_sets

    torch.set_num_threads(1)
    bundle = load_bundle(a.model or default_model_dir(), device="cpu")

    def posteriors(spectra) -> np.ndarray:
        feats = [featurize_spectrum(model_spectrum(bundle, s), bundle.encoder.config) for s in spectra]
        return bundle.encoder.predict_proba(collate(feats)).float().numpy()

    ranks: dict[str, list[float]] = {"plain": []} | {f"{m} ({agg})": [] for m in MODES for agg in ("p", "logit")}
    for e in read_sets(a.pools)[a.set][: a.n]:
        s = e.spectrum
        cal = bundle.calibration.for_polarity(s.polarity).bits
        bits = [chem.morgan_bits(chem.mol_from_smiles(x)) for x in (s.smiles, *e.isomers[:63])]
        ranks["plain"].append(truth_rank(posteriors([s])[0], cal, bits))
        for m in MODES:
            rng = np.random.default_rng(0)
            P = np.clip(posteriors([s] + [augment(s, rng, m) for _ in range(a.copies)]), 1e-6, 1 - 1e-6)
            ranks[f"{m} (p)"].append(truth_rank(P.mean(0), cal, bits))
            logit = (np.log(P) - np.log1p(-P)).mean(0)
            ranks[f"{m} (logit)"].append(truth_rank(1 / (1 + np.exp(-logit)), cal, bits))
    print(f"{a.set}: {len(ranks['plain'])} spectra, the truth among up to 64 structures of its formula")
    print("| posterior | Hit@1 | Hit@5 | MRR |\n| --- | ---: | ---: | ---: |")
    for name, r in ranks.items():
        r = np.array(r)
        print(f"| {name} | {np.mean(r <= 1):.3f} | {np.mean(r <= 5):.3f} | {np.mean(1 / r):.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
