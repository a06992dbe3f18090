"""Queries that know what similar spectra were: the posterior blended with its spectral analogs' fingerprints
(issue #59, item 1).

A spectrum's analog hits in a spectral library (hybrid search: fragments and neutral losses, any precursor) are
compounds whose spectra look like it; their structures often share its substructures. This study draws the standard
pool (today's defaults, edits on, libraries off in the pool) from

    π_w = (1 − w) · π + w · Σ_i s_i · fp_i / Σ_i s_i

where π is the encoder's posterior, fp_i the Morgan bits (0/1) of the structure of the i-th of the first ``--hits``
analog hits in the bundled spectral library and s_i its similarity; the truth's own records are left out (by
InChIKey first block), so the measure is that of a compound no library holds. ``w = 0`` is today. The band
queries and the fingerprint score both read π_w::

    python -m training.studies.analog_posterior --mgf ../shared/data/massbank_dev.mgf.gz --out runs/analog_posterior/tu \\
        --set train-unseen --max-spectra 120 --weights 0 0.2 0.4

Choose on ``train-unseen``, report on ``val``. Output: ``<out>/results.jsonl`` (spectrum, w, the truth's rank, seconds;
the same command again continues) and the table printed (truth in pool, Top-1, Top-10, s / spectrum).

May import: ``engine``, ``training`` (never Qt).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def analog_fingerprint(matches, truth: str | None, hits: int, n_bits: int) -> np.ndarray | None:
    """The similarity-weighted mean Morgan fingerprint (n_bits, 0-1) of the first ``hits`` analog hits whose structure
    is not ``truth`` (InChIKey first block); None when no hit gives a structure."""
    from engine.chem import molecules as chem

    total = np.zeros(n_bits, dtype=np.float64)
    weight = 0.0
    kept = 0
    for hit in matches.hits if matches is not None else ():
        ref = hit.reference
        if not ref.smiles:
            continue
        key = ref.inchikey14 or chem.inchikey14(ref.smiles)
        bits = chem.morgan_bits_from_smiles(ref.smiles, n_bits)
        if key == truth or bits is None or hit.similarity <= 0:
            continue
        total[bits] += float(hit.similarity)
        weight += float(hit.similarity)
        kept += 1
        if kept == hits:
            break
    return None if weight == 0 else total / weight


def blend(posterior: np.ndarray, analog: np.ndarray | None, w: float) -> np.ndarray:
    """(1 − w) · π + w · analog (π itself without analogs or at w = 0), float32 as the encoder gives it."""
    if analog is None or w == 0:
        return posterior
    return ((1.0 - w) * posterior.astype(np.float64) + w * analog).astype(np.float32)


def table(rows: list[dict], weights) -> str:
    by: dict[str, dict[float, dict]] = {}
    for r in rows:
        by.setdefault(r["spectrum"], {})[r["w"]] = r
    keys = [k for k, v in by.items() if all(w in v for w in weights)]
    lines = [f"{len(keys)} spectra", "", "| w | truth in pool | Top-1 | Top-10 | s / spectrum |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for w in weights:
        ranks = [by[k][w]["rank"] for k in keys]
        sec = sum(by[k][w]["seconds"] for k in keys) / max(len(keys), 1)
        lines.append(f"| {w:g} | {sum(r is not None for r in ranks)} | {sum(r == 1 for r in ranks)} | "
                     f"{sum(r is not None and r <= 10 for r in ranks)} | {sec:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from training.studies.deep_search_eval import open_selection, selection_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    selection_arguments(p)
    p.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.2, 0.4])
    p.add_argument("--hits", type=int, default=30, help="analog hits blended (default 30)")
    args = p.parse_args(argv)

    from engine.elucidation.libraries import search_analogs
    from engine.elucidation.pipeline import QueryParams, SpectrumSession, compute_posterior
    from engine.progress import run_to_end
    from engine.spectral_library import load_bundled_spectral_library
    from training.evaluation.evaluate import spectrum_key

    model, pairs, out = open_selection(args)
    library = load_bundled_spectral_library()
    path = out / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []
    done = {(r["spectrum"], r["w"]) for r in rows}
    n_bits = model.decoder.config.fp_bits
    with path.open("a") as fh:
        for n, (spectrum, ref) in enumerate(pairs):
            key = spectrum_key(spectrum)
            todo = [w for w in args.weights if (key, w) not in done]
            if not todo:
                continue
            t = time.perf_counter()
            posterior = compute_posterior(model, spectrum)
            analog = analog_fingerprint(search_analogs([library], spectrum, args.hits + 20), ref.inchikey14,
                                        args.hits, n_bits)
            shared = time.perf_counter() - t
            for w in todo:
                t = time.perf_counter()
                session = SpectrumSession(model, spectrum, posterior=blend(posterior, analog, w))
                result = run_to_end(session.run(QueryParams()))
                row = {"spectrum": key, "w": w, "rank": result.reference_rank, "analogs": analog is not None,
                       "seconds": round(time.perf_counter() - t + shared, 3)}
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                rows.append(row)
            print(f"{n + 1}/{len(pairs)} {spectrum.id}: " + ", ".join(
                f"w={r['w']:g} rank {r['rank']}" for r in rows if r["spectrum"] == key), file=sys.stderr, flush=True)
    text = table(rows, args.weights)
    (out / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
