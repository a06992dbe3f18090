"""How big and how fast project files (engine/files/project.py) are for a session of realistic size.

Builds a project of ``--spectra`` entries from the real spectra of tests/data/fixture.mgf (unique IDs), each with
a result shaped like the default model's at B=100 (README: about 29 distinct candidates a spectrum): ``--candidates``
candidates with SMILES, InChIKey, scores and ~45 Morgan bits, a 4096-bit posterior (mostly near 0, as an
encoder's), M=20 thresholds and B=``--samples`` drawn SAFE strings of ~60 characters. Nothing here is a model's
output; only the sizes are. Then times writing (what an autosave does in the background), reading, and reading
the document alone (what the recovery offer reads), and reports the file size.

    python benchmarks/bench_project.py --spectra 1000
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.elucidation.pipeline import QueryParams, SpectrumResult  # noqa: E402
from engine.elucidation.ranking import Candidate  # noqa: E402
from engine.files.project import ModelRef, Project, ProjectEntry, save_project  # noqa: E402
from engine.files.project_read import load_project, read_summary  # noqa: E402
from engine.spectra.io import read_spectra  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "fixture.mgf"


def synthetic_project(n: int, n_candidates: int, n_samples: int, seed: int = 0) -> Project:
    rng = np.random.default_rng(seed)
    spectra = [s for s in read_spectra(FIXTURE)[0] if s.formula]
    params = QueryParams()
    entries = []
    for i in range(n):
        base = spectra[i % len(spectra)]
        s = type(base)(**{**{k: getattr(base, k) for k in ("precursor_mz", "adduct", "formula", "smiles", "inchikey",
                                                             "retention_time", "mz", "intensity", "metadata",
                                                             "source", "index")}, "id": f"{base.id}-{i}"})
        posterior = rng.beta(0.05, 2.0, 4096).astype(np.float32)
        candidates = tuple(
            Candidate(rank=k + 1, smiles="CC(C)Cc1ccc(cc1)C(C)C(=O)N" + "C" * (k % 7), inchikey="A" * 14 + "-UHFFFAOYSA-N",
                      inchikey14="".join(rng.choice(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"), 14)), formula=s.formula,
                      count=int(rng.integers(1, 10)), frequency=float(rng.random()), posterior_similarity=float(rng.random()),
                      bits=np.sort(rng.choice(4096, 45, replace=False)), fingerprint_score=float(-rng.random() * 100),
                      score=float(-rng.random() * 100))
            for k in range(n_candidates))
        result = SpectrumResult(spectrum=s, params=params, candidates=candidates, n_samples=n_samples, n_valid=80,
                                n_formula_consistent=40, thresholds=np.sort(rng.random(20))[::-1].copy(),
                                n_distinct_queries=20, mean_query_bits=50.0, fidelity=None, reference_inchikey14=None,
                                reference_rank=None, new_samples=n_samples, seconds=1.4, posterior=posterior)
        samples = tuple((k // 5, k % 5, "".join(rng.choice(list("CNOc1()=.2"), 60))) for k in range(n_samples))
        entries.append(ProjectEntry(s, s, status="done", notes="", result=result, model_checksum="0" * 64,
                                    samples=samples))
    return Project(entries=entries, params=params, model=ModelRef("synthetic", "0" * 64))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spectra", type=int, default=1000)
    p.add_argument("--candidates", type=int, default=29)
    p.add_argument("--samples", type=int, default=100)
    args = p.parse_args(argv)
    project = synthetic_project(args.spectra, args.candidates, args.samples)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.msgpt"
        t0 = time.perf_counter()
        size = save_project(path, project)
        t1 = time.perf_counter()
        back = load_project(path)
        t2 = time.perf_counter()
        read_summary(path)
        t3 = time.perf_counter()
    assert len(back.entries) == args.spectra
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}")
    print(f"{args.spectra} spectra x {args.candidates} candidates, B={args.samples}: file {size / 1e6:.1f} MB "
          f"({size / args.spectra / 1e3:.1f} kB a spectrum); write {t1 - t0:.2f} s, read {t2 - t1:.2f} s, "
          f"summary {t3 - t2:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
