"""Spectral-library identifications on real LC-MS/MS runs: every precursor feature of each mzML file searched in
the bundled MassBank subset (identity search), with the rank-1 hits that pass the shipped threshold, and whether
``msgpt predict`` can make each an identification.

No reference structure is known for these runs, so this shows what a user sees (how many features get a hit,
how many an identification, and which compounds), not an accuracy. ::

    python benchmarks/run_identifications.py ../shared/data/mzml/qexactive_dda_msv000084630.mzML \\
        ../shared/data/mzml/qexactive_dda_qc_pool.mzML

A hit passing the threshold is an identification only in a run of its reference's formula and ion type
(:func:`engine.elucidation.libraries.is_identification`: a ``[M]+`` reference at the m/z of a query run as
``[M+H]+`` is another ion). ``msgpt predict`` adds that run for a feature of unknown formula
(:func:`engine.elucidation.libraries.identified_formula_spectra`) when the model can run the reference's ion type;
the column ``identified as`` says under which ion type each hit becomes an identification with the model's
native ion types alone (``native``) and with those it runs by mapping too (``runnable``,
``ModelBundle.runnable_adducts``), or ``-`` when it cannot (issue #56: the QC pool's ``[M]+`` cations).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.elucidation.libraries import (
    identified_formula_spectra,
    search_spectrum,
    spectral_structures,
)
from engine.model.bundle import load_bundle
from engine.paths import default_model_dir
from engine.spectra.features import FeatureConfig
from engine.spectra.run_features import iter_features
from engine.spectral_library import load_bundled_spectral_library


def identified_as(spectrum, matches, ion_types) -> str:
    """The ion type under which the run ``msgpt predict`` adds for the hit's formula makes it an identification
    (``-``: no such run, the model cannot run the reference's ion type)."""
    for run in identified_formula_spectra(spectrum, matches, [], ion_types):
        if any(k.spectral.identified and k.formula == run.formula for k in spectral_structures(matches, run.adduct)):
            return run.adduct
    return "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--model", type=Path, default=default_model_dir(), help="the model whose ion types count")
    a = p.parse_args(argv)
    library = load_bundled_spectral_library()
    bundle = load_bundle(a.model, device="cpu")
    native, runnable = bundle.supported_adducts, bundle.runnable_adducts
    print(f"model {bundle.name}: native {', '.join(native)}; runnable {', '.join(runnable)}")
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
                answers.append((spectrum, matches, answer))
        made = {name: [identified_as(s, m, kinds) for s, m, _ in answers]
                for name, kinds in (("native", native), ("runnable", runnable))}
        print(f"{run.name}: {features} features, {hits} with an identity hit, {len(answers)} passing the threshold; "
              f"identifications with the native ion types {sum(x != '-' for x in made['native'])}, with the "
              f"runnable ones {sum(x != '-' for x in made['runnable'])}")
        print("  m/z | reference | its ion type | similarity, peaks | identified as: native / runnable")
        for (spectrum, _, hit), old, new in zip(answers, made["native"], made["runnable"], strict=True):
            ref = hit.reference
            print(f"  {spectrum.precursor_mz:.4f} | {ref.name} ({ref.accession}) | {ref.adduct or '?'} | "
                  f"{hit.similarity:.3f}, {hit.matched_peaks} | {old} / {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
