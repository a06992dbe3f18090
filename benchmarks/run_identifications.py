"""Spectral-library identifications on real LC-MS/MS runs: every precursor feature of each mzML file searched in
the bundled MassBank subset (identity search), with the rank-1 hits that pass the shipped threshold.

No reference structure is known for these runs, so this shows what a user sees (how many features get a hit,
how many an identification, and which compounds), not an accuracy. ::

    python benchmarks/run_identifications.py ../shared/data/mzml/qexactive_dda_msv000084630.mzML \\
        ../shared/data/mzml/qexactive_dda_qc_pool.mzML
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.elucidation.libraries import search_spectrum  # noqa: E402
from engine.spectra.features import FeatureConfig, iter_features  # noqa: E402
from engine.spectral_library import load_bundled_spectral_library  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    a = p.parse_args(argv)
    library = load_bundled_spectral_library()
    for run in a.runs:
        features = hits = 0
        answers = []
        for item in iter_features(run, FeatureConfig()):
            spectrum = getattr(item, "spectrum", None)
            if spectrum is None:
                continue
            features += 1
            matches = search_spectrum([library], spectrum)
            hits += bool(matches.hits)
            answer = matches.answer()
            if answer is not None:
                answers.append((spectrum.precursor_mz, answer))
        print(f"{run.name}: {features} features, {hits} with an identity hit, {len(answers)} identified")
        for mz, hit in answers:
            ref = hit.reference
            print(f"  m/z {mz:.4f}  {ref.name}  {ref.adduct}  similarity {hit.similarity:.3f}, "
                  f"{hit.matched_peaks} peaks  ({ref.accession})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
