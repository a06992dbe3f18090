"""Does the forward model help rank candidates? A re-ranking check on the pools of an ``msgpt-eval`` run.

::

    python benchmarks/studies/forward_rerank.py --mgf ../shared/data/massbank_dev.mgf.gz --forward runs/forward \\
        --results runs/eval_v8/results.jsonl runs/eval_v8_neg/results.jsonl --out runs/forward_rerank.json

For each spectrum and variant of the results (their top 10 candidates, in the run's fingerprint-score
order), every candidate gets a **forward score**: the log-likelihood of the spectrum's peak formulas (the
encoder's peak tokens: annotated neutral subformulas, at most ``max_peaks``) under the forward model of
``training/encoder/forward.py`` (:func:`engine.model.forward.candidates`: bond-cleavage pieces, ±2 H):

    Σ over the candidate's fragment formulas f of [o_f log q_f + (1 − o_f) log(1 − q_f)]
    + (observed peaks no fragment of the candidate explains) · log eps

(``o_f``: the spectrum has a peak of formula f; ``q_f``: the model's probability that f shows as a peak).
The candidates are re-ranked by the fingerprint score, the forward score alone and their sum (weight 1:
two log-likelihoods of independent evidence, not tuned), and the script prints, per variant and ion
mode, how many references each puts at rank 1 among the spectra whose reference is in the top 10, the
mean reciprocal rank, and the forward model's time per candidate (one thread).

The forward model was trained on ``FOLD=train`` spectra: run it on pools of ``FOLD=val`` spectra only.

Its table: docs/how_it_works.md, "The fingerprint score" (a second log-likelihood from the forward model: measured,
not shipped), with the command above.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from engine.chem import molecules as chem
from engine.progress import run_to_end
from engine.model.forward import ForwardModel, candidates, forward_score
from training.encoder.forward import encoder_features
from training.core.loop import torch_threads
from training.data.spectra import iter_load_labelled_spectra

RANKINGS = ("fingerprint", "forward", "fingerprint + forward")


def rank_of(reference: str, keys: list[str], scores: list[float]) -> int | None:
    """1-based rank of ``reference`` when ``keys`` are sorted by descending score (stable), else None."""
    order = sorted(range(len(keys)), key=lambda j: -scores[j])
    ranked = [keys[j] for j in order]
    return ranked.index(reference) + 1 if reference in ranked else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mgf", required=True)
    ap.add_argument("--forward", required=True, help="a forward model folder (python -m training.encoder.forward fit)")
    ap.add_argument("--results", nargs="+", required=True, help="results.jsonl of msgpt-eval runs")
    ap.add_argument("--eps", type=float, default=0.01, help="probability of an observed peak no fragment explains")
    ap.add_argument("--cache-dir")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    model = ForwardModel.load(args.forward)
    settings = model.config.candidate_settings()
    data = run_to_end(iter_load_labelled_spectra(args.mgf, encoder_features(), cache_dir=args.cache_dir))
    val = data.select(("val",), licenses=None, exclude_unit_resolution=False)
    row = {str(t): i for i, t in enumerate(val.ids)}
    groups: dict[str, dict] = {}
    seconds, n_candidates, missing = 0.0, 0, 0
    with torch_threads(1):
        for path in args.results:
            for line in open(path, encoding="utf-8"):
                r = json.loads(line)
                i = row.get(r["id"])
                if i is None or not r.get("top_smiles"):
                    missing += i is None
                    continue
                a, b = int(val.token_offsets[i]) + 1, int(val.token_offsets[i + 1])
                observed = {f.tobytes() for f in np.asarray(val.formulas[a:b], dtype=np.int64)}
                polarity = int(val.polarity[i])
                fwd = []
                t0 = time.perf_counter()
                for smiles in r["top_smiles"]:
                    cand = candidates(chem.remove_stereo(chem.mol_from_smiles(smiles)), polarity, settings)
                    q, _ = model.predict(cand)
                    hit = np.array([f.tobytes() in observed for f in cand.formulas], dtype=np.float64)
                    fwd.append(forward_score(q, hit, len(observed), args.eps))
                seconds += time.perf_counter() - t0
                n_candidates += len(fwd)
                fp = [float(x) for x in r["top_fingerprint_scores"]]
                scores = {"fingerprint": fp, "forward": fwd, "fingerprint + forward": [x + y for x, y in zip(fp, fwd)]}
                g = groups.setdefault(f"{r['variant']} {'positive' if polarity > 0 else 'negative'}",
                                      {"spectra": 0, "in_top": 0, **{k: {"top1": 0, "mrr": 0.0} for k in RANKINGS}})
                g["spectra"] += 1
                if rank_of(r["inchikey14"], r["top_inchikey14"], fp) is None:
                    continue
                g["in_top"] += 1
                for name, s in scores.items():
                    k = rank_of(r["inchikey14"], r["top_inchikey14"], s)
                    g[name]["top1"] += k == 1
                    g[name]["mrr"] += 1.0 / k
    for g in groups.values():
        for name in RANKINGS:
            g[name]["mrr"] = round(g[name]["mrr"] / max(g["in_top"], 1), 4)
    out = {"results": args.results, "forward": args.forward, "eps": args.eps, "groups": groups,
           "spectra_not_in_val": missing, "seconds_per_candidate": round(seconds / max(n_candidates, 1), 4),
           "machine": platform.processor() or platform.machine()}  # fmt: skip
    print("| variant, ion mode | spectra | reference in top 10 | " + " | ".join(f"rank 1: {k}" for k in RANKINGS)
          + " | MRR: " + " / ".join(RANKINGS) + " |")
    print("| --- | ---: | ---: |" + " ---: |" * len(RANKINGS) + " --- |")
    for name, g in groups.items():
        print(f"| {name} | {g['spectra']} | {g['in_top']} | " + " | ".join(str(g[k]["top1"]) for k in RANKINGS)
              + " | " + " / ".join(f"{g[k]['mrr']:.3f}" for k in RANKINGS) + " |")
    print(f"forward model: {out['seconds_per_candidate'] * 1000:.0f} ms per candidate (one thread); "
          f"{missing} result lines not in FOLD=val")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
