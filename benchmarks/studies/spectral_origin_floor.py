"""When does a spectral-library hit carry evidence about a spectrum's structure? The floor of ``spectral_library``
in a candidate's origin (issue #54, docs/evidence/spectral_origin.md).

Every identity-search hit of a spectrum (:func:`engine.elucidation.libraries.search_spectrum`: precursor within
0.01 Da, entropy similarity, the first five hits, as ``msgpt predict`` searches) whose structure has the spectrum's
formula joins its candidate pool with the match as evidence (:func:`~engine.elucidation.libraries.spectral_structures`);
this script asks at what similarity and matched-peak count such a hit starts to say something about the truth.

Data: a random sample (``--n``, seed 0) of the FOLD=val high-resolution spectra with ion mode of ``--mgf``
(:func:`training.bundle.spectral_library.held_out_queries`, as the identity threshold's calibration reads them),
each searched twice: *truth absent*, in the bundled spectral library (FOLD=train records: it holds none of these
structures, so every hit is of another structure); *truth's records added*, in the bundled library plus the other
FOLD=val records of the sampled spectra's structures (the sampled records left out), the library
``benchmarks/suspect_ranking.py --references loso`` builds (:func:`~benchmarks.suspect_ranking.reference_spectra`),
so that true hits exist. Only the hits whose structure has the truth's formula count (a pool keeps those of its
formula). By similarity band and by matched peaks, the tables give: truth absent, the number of hits, the mean
Tanimoto (Morgan bits, the candidates' fingerprint) of the hit's structure to the truth, the baseline (the mean
Tanimoto to the truth of the bundled structure library's other structures of the formula: a random library
structure of that formula) and the lift (the mean difference, 95% interval); truth's records added, the number of
hits, the share of them that are the truth (first InChIKey block) and the share of all true hits in the band. The
last table gives what each candidate floor (similarity ≥ S and matched peaks ≥ P; an identification always counts)
drops: false hits (truth absent) and true hits. Prints those markdown tables (docs/evidence/spectral_origin.md) and
the runtime (about 100 s for 2,000 spectra, one thread)::

    python benchmarks/studies/spectral_origin_floor.py --mgf ../shared/data/massbank_dev.mgf.gz --n 2000
"""

from __future__ import annotations

import argparse
import itertools
import platform
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.suspect_ranking import reference_spectra
from engine.chem import molecules as chem
from engine.chem.formula import normalize_formula
from engine.elucidation.libraries import search_spectrum, spectral_structures
from engine.elucidation.ranking import SPECTRAL_ORIGIN_FLOOR
from engine.errors import MsgptError
from engine.library import load_library
from engine.library.cache import bundled_library_path
from engine.spectral_library import load_bundled_spectral_library
from training.bundle.spectral_library import held_out_queries

SIMILARITY_BANDS = (0.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.675, 1.01)  # 0.675: the shipped identity threshold
PEAK_BANDS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 10**9))
FLOORS = [(s, p) for s in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5) for p in (1, 2, 3)]


def hits_of(queries, libraries, structures, baseline_of: dict) -> tuple[list[dict], int]:
    """One row per hit of the truth's formula (:func:`search_spectrum` in ``libraries``): similarity, matched
    peaks, identified, truth or not, Tanimoto to the truth and the baseline (``baseline_of``, filled here: the mean
    Tanimoto to the truth of the other structures of its formula in ``structures``; nan without any); and how many
    hits of another formula were left out."""
    rows, other_formula = [], 0
    for q in queries:
        truth_bits = chem.morgan_bits_from_smiles(q.smiles)
        try:
            formula = normalize_formula(q.formula)
        except MsgptError:
            continue
        if truth_bits is None:
            continue
        if q.inchikey14 not in baseline_of:
            others = [structures.bits(int(r)) for r in structures.rows_of_formula(formula)
                      if structures.inchikey14(int(r)) != q.inchikey14]
            baseline_of[q.inchikey14] = float(np.mean(chem.tanimoto_many(truth_bits, others))) if others else np.nan
        for known in spectral_structures(search_spectrum(libraries, q), q.adduct):
            if known.formula != formula:
                other_formula += 1
                continue
            ev = known.spectral
            rows.append({"similarity": ev.similarity, "peaks": ev.matched_peaks, "identified": ev.identified,
                         "truth": known.inchikey14 == q.inchikey14,
                         "tanimoto": float(chem.tanimoto_many(truth_bits, [known.bits])[0]),
                         "baseline": baseline_of[q.inchikey14]})
    return rows, other_formula


def cells(absent: list[dict], added: list[dict], n_true: int) -> str:
    """A band's cells: truth absent (the bundled library alone: hits, mean Tanimoto to the truth, baseline,
    lift) and the truth's records added (hits, of the truth, and the share of all true hits that fall here)."""
    true = sum(r["truth"] for r in added)
    return " | ".join([str(len(absent)), *tanimoto(absent), str(len(added)),
                       f"{100 * true / len(added):.0f}" if added else "–", f"{100 * true / max(n_true, 1):.1f}"])


def tanimoto(rows: list[dict]) -> list[str]:
    """Mean Tanimoto of the hits' structures to the truth, the baseline's, and the lift: the mean of their
    differences (hits whose formula has a baseline) with its 95% interval (normal approximation)."""
    if not rows:
        return ["–"] * 3
    tan = np.array([r["tanimoto"] for r in rows])
    base = np.array([r["baseline"] for r in rows])
    diff = (tan - base)[np.isfinite(base)]
    if not diff.size:
        return [f"{tan.mean():.2f}", "–", "–"]
    half = 1.96 * diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else float("nan")
    return [f"{tan.mean():.2f}", f"{np.nanmean(base):.2f}",
            f"{diff.mean():+.2f} ({diff.mean() - half:+.2f} … {diff.mean() + half:+.2f})"]


HEADER = ("| truth absent: hits | mean Tanimoto to the truth | baseline | lift (95% CI) | truth's records added: hits "
          "| of the truth (%) | of all true hits (%) |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mgf", type=Path, default=ROOT.parent / "shared/data/massbank_dev.mgf.gz")
    p.add_argument("--n", type=int, default=2000, help="FOLD=val spectra sampled (seed 0)")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    t_start = time.perf_counter()
    queries = [q for q in held_out_queries(a.mgf) if q.smiles and q.inchikey14 and q.formula]
    n_all = len(queries)
    queries = random.Random(0).sample(queries, min(a.n, n_all))
    sets = [(SimpleNamespace(id=q.accession), q.inchikey14, ()) for q in queries]
    bundled = load_bundled_spectral_library()
    others = reference_spectra(a.mgf, sets, "loso")
    structures = load_library(bundled_library_path(), trust_keys=True)
    t_search = time.perf_counter()
    baseline_of: dict[str, float] = {}
    absent, _ = hits_of(queries, [bundled], structures, baseline_of)
    added, other_formula = hits_of(queries, [bundled, others], structures, baseline_of)
    t_end = time.perf_counter()
    if any(r["truth"] for r in absent):
        raise SystemExit("the bundled spectral library holds a FOLD=val structure: not held out")
    n_true = sum(r["truth"] for r in added)

    print(f"machine: {platform.processor() or platform.machine()}, one thread; {len(queries)} of {n_all} FOLD=val "
          f"spectra (seed 0) of {len({q.inchikey14 for q in queries})} structures; bundled library "
          f"{len(bundled):,} spectra, the truths' other FOLD=val records {len(others):,}")
    print(f"hits of the truth's formula: truth absent {len(absent)}; truth's records added {len(added)} ({n_true} "
          f"of the truth; {other_formula} of another formula left out); identifications: "
          f"{sum(r['identified'] for r in absent)} / {sum(r['identified'] for r in added)} "
          f"({sum(r['identified'] and r['truth'] for r in added)} of the truth)")
    print(f"runtime: {t_end - t_start:.0f} s ({t_search - t_start:.0f} s reading and indexing, "
          f"{t_end - t_search:.0f} s searching and scoring)")
    print("\n**By similarity** (entropy similarity; 0.675 is the shipped identity threshold)\n")
    print("| similarity " + HEADER)
    print("| --- |" + " ---: |" * 7)
    for lo, hi in itertools.pairwise(SIMILARITY_BANDS):
        def band(rows, lo=lo, hi=hi):
            return [r for r in rows if lo <= r["similarity"] < hi]
        print(f"| {lo:.3g}–{min(hi, 1.0):.3g} | {cells(band(absent), band(added), n_true)} |")
    cut = SIMILARITY_BANDS[-2]
    print(f"\n**By matched peaks** (hits under the identity threshold, similarity < {cut})\n")
    print("| matched peaks " + HEADER)
    print("| --- |" + " ---: |" * 7)
    for lo, hi in PEAK_BANDS:
        def band(rows, lo=lo, hi=hi):
            return [r for r in rows if r["similarity"] < cut and lo <= r["peaks"] <= hi]
        name = str(lo) if lo == hi else (f"{lo}+" if hi > 100 else f"{lo}–{hi}")
        print(f"| {name} | {cells(band(absent), band(added), n_true)} |")
    print("\n**What a floor drops** (similarity ≥ S and matched peaks ≥ P; identifications never are): the false "
          "hits (truth absent) and the true hits (truth's records added) under it\n")
    print("| floor S, P | false hits dropped | of all (%) | mean Tanimoto to the truth | baseline | lift (95% CI) "
          "| true hits dropped | of all (%) |")
    print("| --- |" + " ---: |" * 7)
    for s, pk in FLOORS:
        def below(rows, s=s, pk=pk):
            return [r for r in rows if not r["identified"] and (r["similarity"] < s or r["peaks"] < pk)]
        mark = " (chosen)" if (s, pk) == SPECTRAL_ORIGIN_FLOOR else ""
        true = sum(r["truth"] for r in below(added))
        print(f"| {s:g}, {pk}{mark} | {len(below(absent))} | {100 * len(below(absent)) / max(len(absent), 1):.0f} | "
              + " | ".join(tanimoto(below(absent))) + f" | {true} | {100 * true / max(n_true, 1):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
