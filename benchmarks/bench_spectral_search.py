"""How fast spectral library search (engine/spectral_library, ms-entropy's Flash entropy search) is, against
matchms' CosineGreedy on the same queries in the same run, over the bundled library and a synthetic library of
``--synthetic`` spectra (default 1,000,000: the bundled spectra plus random ones around them).

Times, per query (mean, median, 95th percentile):

- ``flash identity``: :func:`engine.spectral_library.search_peaks` in identity mode (cleaning the query,
  searching, top 5 hits with their matched peaks and metadata);
- ``flash open``: the same in open mode (fragments only, every spectrum of the query's ion mode): what
  ``matchms all`` computes;
- ``flash hybrid``: the same in hybrid (analog) mode, fragments and neutral losses;
- ``matchms identity``: CosineGreedy (tolerance 0.02 Da) over the references within 0.01 Da of the precursor
  (found with a sorted precursor array; not timed: building the matchms spectra);
- ``matchms all``: CosineGreedy over every reference of the query's ion mode (``--matchms-all`` queries
  only: it is slow).

and the index's memory (the arrays the search holds: Flash index, cleaned peaks, precursors). Queries are the
``FOLD=val`` spectra of ``--queries`` (structure-disjoint from the bundled library) when given, else bundled
spectra with their m/z and intensities jittered. Prints ratios against the targets (10 ms a query over the
bundled library, 50 ms over 1M); no assertion. matchms is optional (``pip install -e .[bench]``). ::

    python benchmarks/bench_spectral_search.py --queries ../shared/data/massbank_dev.mgf.gz
    python benchmarks/bench_spectral_search.py --synthetic 200000 --n-queries 100
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.progress import run_to_end
from engine.spectral_library import (
    SearchParams,
    SpectralLibrary,
    iter_references,
    search_peaks,
)
from engine.spectral_library.cache import bundled_spectral_library_path
from engine.spectral_library.index import (
    MIN_PEAK_DISTANCE_DA,
    PRECURSOR_REMOVAL_DA,
    build_library,
    library_from_cleaned,
)

TARGETS_MS = {"bundled": 10.0, "synthetic": 50.0}


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def index_mb(library: SpectralLibrary) -> float:
    """Megabytes of the arrays a search holds (Flash index of every group, cleaned peaks, precursors)."""
    total = sum(a.nbytes for a in library.arrays().values())
    return total / 1e6


def load_queries(path: str | None, library: SpectralLibrary, n: int, seed: int) -> list[tuple]:
    """(precursor m/z, m/z, intensity, polarity) of ``n`` queries."""
    rng = np.random.default_rng(seed)
    if path:
        queries = []
        for ref in iter_references(path):
            if ref.extra.get("fold") == "val" and ref.polarity and "TOF" in ref.instrument_type + "FT":
                queries.append((ref.precursor_mz, ref.mz, ref.intensity, ref.polarity))
        picks = rng.choice(len(queries), size=min(n, len(queries)), replace=False)
        return [queries[i] for i in sorted(picks)]
    rows = rng.choice(len(library), size=n, replace=False)
    out = []
    for row in rows:
        mz, intensity = library.peaks(int(row))
        if mz.size == 0:
            continue
        out.append((float(library.precursor_mz[row]) + rng.uniform(-0.003, 0.003),
                    mz + rng.uniform(-0.003, 0.003, mz.size), intensity * rng.uniform(0.8, 1.2, mz.size),
                    library.columns["polarity"][row] or None))
    return out


def stats(times: list[float]) -> tuple[float, float, float]:
    ms = np.array(times) * 1e3
    return float(ms.mean()), float(np.median(ms)), float(np.percentile(ms, 95))


def time_flash(library: SpectralLibrary, queries: list[tuple], mode: str) -> tuple[list[float], float]:
    params = SearchParams(mode=mode)
    times, answered = [], 0
    for q in queries:
        t = time.perf_counter()
        matches = search_peaks(library, *q, params=params)
        times.append(time.perf_counter() - t)
        answered += bool(matches.hits)
    return times, answered / max(len(queries), 1)


def matchms_spectra(library: SpectralLibrary) -> list:
    from matchms import Spectrum

    out = []
    for row in range(len(library)):
        mz, intensity = library.peaks(row)
        out.append(Spectrum(mz=mz.astype(np.float64), intensities=intensity.astype(np.float64),
                            metadata={"precursor_mz": float(library.precursor_mz[row])},
                            metadata_harmonization=False))
    return out


def time_matchms(library: SpectralLibrary, refs: list, queries: list[tuple], every: bool) -> list[float]:
    """Per-query seconds of CosineGreedy over the references within 0.01 Da (or all of the query's ion mode)."""
    from matchms import Spectrum
    from matchms.similarity import CosineGreedy

    from engine.spectral_library import clean_peaks

    cosine = CosineGreedy(tolerance=0.02)
    order = np.argsort(library.precursor_mz, kind="stable")
    sorted_mz = library.precursor_mz[order]
    spectra = []
    for precursor, mz, intensity, _ in queries:
        peaks = clean_peaks(precursor, mz, intensity)  # the same peaks the Flash search compares
        spectra.append(Spectrum(mz=peaks[:, 0].astype(np.float64), intensities=peaks[:, 1].astype(np.float64),
                                metadata={"precursor_mz": precursor}, metadata_harmonization=False))
    for query in spectra[:3]:  # numba compiles here, not in the timings
        cosine.matrix([query], refs[:50] + [query], progress_bar=False)

    def identity(precursor, query):
        lo, hi = np.searchsorted(sorted_mz, [precursor - 0.01, precursor + 0.01])
        for i in order[lo:hi]:
            cosine.pair(query, refs[i])

    polarity = library.columns["polarity"]
    same_mode = {mode: [refs[i] for i in range(len(refs)) if polarity[i] in (mode, "")]
                 for mode in ("positive", "negative")} if every else {}
    precursors = [q[0] for q in queries]
    for precursor, query in zip(precursors, spectra):  # a first pass compiles the paths the data take (seconds)
        identity(precursor, query)
    times = []
    for (precursor, *_, mode), query in zip(queries, spectra):
        t = time.perf_counter()
        if every:  # the references of the query's ion mode, as the Flash search does
            cosine.matrix([query], same_mode.get(mode, refs), progress_bar=False)
        else:
            identity(precursor, query)
        times.append(time.perf_counter() - t)
    return times


def synthetic_library(base: SpectralLibrary, n: int, seed: int) -> SpectralLibrary:
    """``base``'s spectra plus random ones up to ``n`` spectra: precursors 100-1000, peak counts drawn from the
    base library's, m/z on a grid wider than the peak-merge distance, intensities summing to 1."""
    rng = np.random.default_rng(seed)
    counts = np.diff(base.peak_offsets)
    counts = counts[counts > 0]
    extra = max(n - len(base), 0)
    precursors = rng.uniform(100.0, 1000.0, extra)
    n_peaks = rng.choice(counts, size=extra)
    peaks = []
    step = MIN_PEAK_DISTANCE_DA + 0.01
    for precursor, k in zip(precursors, n_peaks):
        slots = int((precursor - PRECURSOR_REMOVAL_DA - 50.0) / step)
        mz = 50.0 + step * np.sort(rng.choice(slots, size=min(int(k), slots), replace=False))
        mz = mz + rng.uniform(0, 0.005, mz.size)
        intensity = rng.exponential(1.0, mz.size)
        peaks.append(np.column_stack([mz, intensity / intensity.sum()]).astype(np.float32))
    polarities = np.where(rng.random(extra) < 0.7, "positive", "negative")
    base_peaks = [np.column_stack(base.peaks(r)) for r in range(len(base))]
    return library_from_cleaned(
        f"synthetic {len(base) + extra:,}",
        np.concatenate([base.precursor_mz, precursors]), base_peaks + peaks,
        list(base.columns["polarity"]) + polarities.tolist())


def report(name: str, size: int, results: dict[str, list[float]], target: float) -> None:
    print(f"\n{name} ({size:,} spectra): ms a query (mean / median / p95), n")
    flash = stats(results["flash identity"])[0]
    for label, times in results.items():
        if not times:
            continue
        mean, median, p95 = stats(times)
        base = "flash open" if label == "matchms all" else "flash identity"
        ratio = f"  {mean / stats(results[base])[0]:8.1f} x {base}" if label != base else ""
        print(f"  {label:18s} {mean:9.2f} {median:9.2f} {p95:9.2f}  n={len(times):4d}{ratio}")
    print(f"  target {target:g} ms: flash identity mean is {flash / target:.2f} of it "
          f"({'met' if flash <= target else 'NOT met'})")


def run_set(name: str, library: SpectralLibrary, queries: list[tuple], args, target: float) -> None:
    results: dict[str, list[float]] = {}
    results["flash identity"], hit_rate = time_flash(library, queries, "identity")
    results["flash open"], _ = time_flash(library, queries, "open")
    results["flash hybrid"], _ = time_flash(library, queries, "hybrid")
    print(f"{name}: index {index_mb(library):.0f} MB of arrays; identity hits for {hit_rate:.0%} of the queries")
    try:
        refs = matchms_spectra(library)
    except ImportError:
        print("matchms is not installed (pip install -e .[bench]): no comparison")
    else:
        results["matchms identity"] = time_matchms(library, refs, queries, every=False)
        if args.matchms_all:
            results["matchms all"] = time_matchms(library, refs, queries[: args.matchms_all], every=True)
        del refs
    report(name, len(library), results, target)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", default=str(bundled_spectral_library_path()), help="MSP/MGF (default: bundled)")
    p.add_argument("--queries", help="MGF with FOLD=val spectra (../shared/data/massbank_dev.mgf.gz)")
    p.add_argument("--n-queries", type=int, default=300)
    p.add_argument("--synthetic", type=int, default=1_000_000, help="spectra of the large library (0: skip)")
    p.add_argument("--matchms-all", type=int, default=20, help="queries for matchms over every reference")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"Python {platform.python_version()}")
    t = time.perf_counter()
    library = run_to_end(build_library(args.library, "bundled"))
    print(f"bundled: built in {time.perf_counter() - t:.1f} s; {library.summary()}")
    queries = load_queries(args.queries, library, args.n_queries, args.seed)
    run_set("bundled", library, queries, args, TARGETS_MS["bundled"])
    if args.synthetic:
        t = time.perf_counter()
        rss = rss_mb()
        big = synthetic_library(library, args.synthetic, args.seed)
        print(f"\nsynthetic: built in {time.perf_counter() - t:.0f} s; peak RSS {rss:.0f} -> {rss_mb():.0f} MB")
        args.matchms_all = min(args.matchms_all, 2)  # about a minute a query over 1M
        run_set("synthetic", big, queries, args, TARGETS_MS["synthetic"])
    print(f"\npeak RSS {rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
