"""What known compounds add to a spectrum's time: library scoring against de novo time, in the same run.

For the first ``--spectra`` FOLD=val spectra of a supported ion type (formula given), one session each at the
default settings times, per spectrum:

- ``de novo``: drawing and ranking the B samples (``SpectrumSession.run`` with no library);
- ``libraries``: what the libraries add to the same run: the structure libraries' structures of the formula
  (index look-up, fingerprints computed on first use), the spectral search and the reference structures, and
  ranking them with the samples (the run again on the drawn pool with the libraries, minus the run without).

Libraries: the bundled structure and spectral libraries, and optionally ``--library FILE`` (e.g. a 500k-row
table: the first ``--library-rows`` rows of ``../shared/data/molecules.tsv.gz``, indexed once into a temporary
data folder before timing). Prints the ratio libraries / de novo (the target is at most 0.20) and the index
memory. No assertion on time: the numbers depend on the machine.

::

    python benchmarks/bench_library_scoring.py --mgf ../shared/data/massbank_dev.mgf.gz --spectra 30
    python benchmarks/bench_library_scoring.py --mgf ../shared/data/massbank_dev.mgf.gz --spectra 30 \\
        --library ../shared/data/molecules.tsv.gz --library-rows 500000 [--as-suspect-list]
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.elucidation.pipeline import QueryParams, SpectrumSession  # noqa: E402
from engine.model.bundle import load_bundle  # noqa: E402
from engine.paths import default_model_dir  # noqa: E402
from engine.progress import run_to_end  # noqa: E402
from engine.spectra.io import read_spectra  # noqa: E402


def held_out(mgf: Path, n: int, adducts) -> list:
    spectra, _ = read_spectra(mgf)
    out, seen = [], set()
    for s in spectra:
        key = (s.inchikey or "")[:14]
        if s.metadata.get("fold") == "val" and s.formula and s.adduct in adducts and key not in seen and len(s.mz) >= 3:
            seen.add(key)
            out.append(s)
            if len(out) == n:
                break
    return out


def user_library(path: Path, rows: int, folder: Path, suspect: bool = False):
    """The first ``rows`` rows of a table (``smiles`` column), indexed in ``folder`` (timed: the one-time cost);
    ``suspect``: taken as a suspect list (its structures rank first, re-ranked by the fragment score when the
    bundle's forward model covers suspects), as ``msgpt predict --structure-library`` takes it."""
    from engine.library import load_library

    table = folder / f"user_{rows}.tsv"
    with gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else open(path) as fh, \
            open(table, "w", encoding="utf-8") as out:
        for i, line in enumerate(fh):
            if i > rows:
                break
            out.write(line)
    t0 = time.perf_counter()
    lib = load_library(table, folder=folder / "index")
    print(f"user library: {len(lib):,} structures indexed in {time.perf_counter() - t0:.0f} s (once)", file=sys.stderr)
    lib.suspect = suspect
    return lib


def time_spectrum(bundle, spectrum, params, libraries) -> tuple[float, float]:
    """(de novo seconds, seconds the libraries add) for one spectrum."""
    session = SpectrumSession(bundle, spectrum)
    t0 = time.perf_counter()
    run_to_end(session.run(params))
    denovo = time.perf_counter() - t0
    drawn = session.drawn_samples(params)
    t0 = time.perf_counter()
    with_libraries = SpectrumSession(bundle, spectrum, posterior=session.posterior, libraries=libraries)
    with_libraries.add_drawn_samples(params, drawn)
    run_to_end(with_libraries.run(params))
    with_time = time.perf_counter() - t0
    t0 = time.perf_counter()
    plain = SpectrumSession(bundle, spectrum, posterior=session.posterior)
    plain.add_drawn_samples(params, drawn)
    run_to_end(plain.run(params))
    rank_time = time.perf_counter() - t0
    return denovo, max(with_time - rank_time, 0.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mgf", required=True, type=Path)
    p.add_argument("--spectra", type=int, default=30)
    p.add_argument("--library", type=Path, help="a table with a smiles column to index as a user library")
    p.add_argument("--library-rows", type=int, default=500_000)
    p.add_argument("--as-suspect-list", action="store_true",
                   help="take --library as a suspect list, as msgpt predict --structure-library does (default: "
                   "ranked with the predictions, as the bundled library)")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    from engine.library import load_library
    from engine.library.cache import bundled_library_path
    from engine.spectral_library import load_bundled_spectral_library

    bundle = load_bundle(default_model_dir(), device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MSGPT_HOME"] = tmp
        t0 = time.perf_counter()
        libraries = [load_library(bundled_library_path(), trust_keys=True), load_bundled_spectral_library()]
        print(f"bundled libraries opened (first time here) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        if a.library:
            libraries.append(user_library(a.library, a.library_rows, Path(tmp), a.as_suspect_list))
        spectra = held_out(a.mgf, a.spectra, bundle.supported_adducts)
        params = QueryParams()
        rows = [time_spectrum(bundle, s, params, libraries) for s in spectra]
    denovo = [r[0] for r in rows]
    extra = [r[1] for r in rows]
    ratio = sum(extra) / sum(denovo)
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, {a.threads} thread(s)")
    print(f"data: {a.mgf.name} FOLD=val, {len(rows)} spectra (formula given), default settings (B=100)")
    print(f"libraries: {', '.join(f'{type(lib).__name__} {lib.name} ({len(lib):,})' for lib in libraries)}"
          + (" (the last as a suspect list)" if a.as_suspect_list and a.library else ""))
    fw = bundle.forward
    print("fragment score: " + (f"{fw.ranking}" if fw is not None and fw.ranking.weight > 0 else "none"))
    print(f"de novo: mean {statistics.mean(denovo):.2f} s/spectrum; libraries add: mean {statistics.mean(extra):.3f} s, "
          f"max {max(extra):.3f} s")
    print(f"ratio libraries / de novo: {ratio:.3f} (target <= 0.20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
