"""A suspect list's own order through the app's pipeline: the truth among its formula's isomers, by each term of it.

Issue #36's retrieval target ranks each held-out spectrum's true structure among up to 255 corpus structures
of its formula. A library a user gives is a suspect list: its structures rank before every prediction, so
what decides the answer is the order within the list. This script measures that order the way ``msgpt
predict --structure-library`` produces it (:class:`engine.elucidation.pipeline.SpectrumSession` with the
list as a suspect library and the bundled spectral library, as ``msgpt predict`` has it by default;
:meth:`~engine.elucidation.pipeline.SpectrumSession.rank_known`, since drawn candidates rank after the suspects
and cannot change their order): by the fingerprint score alone, with the bundle's fragment score
(``QueryParams.fragment_score``), and with its analog score too (``QueryParams.analog_score``: likeness to the
compounds of the spectrum's analog hits in the spectral library; both settings in the bundle's
``forward.json``), and prints Hit@1/5/20 of the truth. FOLD=val structures have no spectrum
in the bundled spectral library (FOLD=train spectra); the script counts any identity or analog hit of a truth.

An identification ranks with the suspects by this score (:func:`engine.elucidation.ranking.rank_group`); the last
row puts it first instead, the rule before. ``--references`` says whether any identification can be right: with
``none`` every one is false (the bundled library holds no FOLD=val structure); ``loso`` adds the other FOLD=val
records of the spectra's structures (``--mgf``; high resolution, with ion mode) as a second spectral library, all
but each query's own record; ``other_lab`` only those from another lab than the query's (MassBank accession
``MSBNK-<lab>-...``), the case of a user's own instrument. The truth's rank is over all ranked candidates.

Spectra and isomers come from a ``python -m training.studies.retrieval`` run folder: its FOLD=val spectra
(``selection.json``) and each one's formula-track library (the truth plus up to 255 corpus structures of its
formula, ``pools.jsonl``, the candidates marked ``fl``). All of them go into one suspect CSV, indexed once, so
a spectrum whose formula another spectrum shares has that spectrum's isomers in its list too (the script says
how many)::

    python benchmarks/suspect_ranking.py --pools runs/retrieval/v10_c600 [--n 150] [--references loso]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.elucidation.libraries import search_analogs
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.model.bundle import load_bundle
from engine.paths import default_model_dir
from engine.spectra.spectrum import Spectrum
from engine.spectral_library import load_bundled_spectral_library
from training.evaluation.report import bootstrap_ci

KS = (1, 5, 20)


def val_sets(pools: Path, n: int) -> list[tuple[Spectrum, str, list[str]]]:
    """(spectrum, truth InChIKey first block, formula-track SMILES) of the run's first ``n`` FOLD=val pools."""
    sel = json.loads((pools / "selection.json").read_text(encoding="utf-8"))
    spectra = {f"{Path(d['source']).name}#{d['index']}:{d['id']}": Spectrum(**d) for d in sel["report"]}
    out = []
    for line in (pools / "pools.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by an interrupted run
        if rec.get("fold") != "val" or rec["key"] not in spectra:
            continue
        isomers = [c["s"] for c in rec["candidates"] if c.get("fl")]
        out.append((spectra[rec["key"]], rec["truth"]["inchikey14"], isomers))
        if len(out) == n:
            break
    return out


def truth_rank(candidates, truth: str) -> int | None:
    return next((i + 1 for i, c in enumerate(candidates) if c.inchikey14 == truth), None)


def identification_first(candidates) -> list:
    """``candidates`` with the identification (if any) moved to rank 1: the rule before ranking it with the
    suspects (its fragment shortlist aside, the same order)."""
    first = [c for c in candidates if c.identified]
    return first + [c for c in candidates if not c.identified]


def lab(accession: str) -> str:
    """The contributing lab of a MassBank accession ``MSBNK-<lab>-<id>``."""
    parts = accession.split("-")
    return parts[1] if len(parts) >= 3 else accession


def reference_spectra(mgf: Path, sets: list, how: str):
    """A spectral library of the FOLD=val records of the spectra's structures (``how``: ``loso``, all but each
    query's own record; ``other_lab``, only those from another lab), or None for ``none``."""
    if how == "none":
        return None
    from engine.spectral_library.index import library_from_references
    from training.bundle.spectral_library import held_out_queries

    queries = {spectrum.id for spectrum, _, _ in sets}
    truths = {truth for _, truth, _ in sets}
    query_labs = {(truth, lab(spectrum.id)) for spectrum, truth, _ in sets}
    kept = [ref for ref in held_out_queries(mgf)
            if ref.inchikey14 in truths and ref.accession not in queries
            and (how == "loso" or (ref.inchikey14, lab(ref.accession)) not in query_labs)]
    return library_from_references(kept, f"val_{how}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pools", required=True, type=Path, help="a training.studies.retrieval output folder")
    p.add_argument("--n", type=int, default=150, help="FOLD=val spectra (the run's first N)")
    p.add_argument("--model", type=Path, default=None, help="model bundle (default: the bundled model)")
    p.add_argument("--references", choices=("none", "loso", "other_lab"), default="none",
                   help="other FOLD=val spectra of the truths as a second spectral library (module docstring)")
    p.add_argument("--mgf", type=Path, default=ROOT.parent / "shared/data/massbank_dev.mgf.gz",
                   help="where --references reads them")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    bundle = load_bundle(a.model or default_model_dir(), device="cpu")
    fw = bundle.forward
    if fw is None or fw.ranking.weight <= 0:
        print("this bundle has no fragment score (forward.json); both runs would be the same", file=sys.stderr)
        return 2
    sets = val_sets(a.pools, a.n)
    from engine.library import load_library

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MSGPT_HOME"] = tmp
        table = Path(tmp) / "suspects.csv"
        with open(table, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["Identifier", "SMILES"])
            seen: set[str] = set()
            for _, _, isomers in sets:
                for smiles in isomers:
                    if smiles not in seen:
                        seen.add(smiles)
                        w.writerow([f"S{len(seen)}", smiles])
        t0 = time.perf_counter()
        suspects = load_library(table)
        suspects.suspect = True
        print(f"suspect list: {len(suspects):,} structures indexed in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
        t0 = time.perf_counter()
        spectral = [load_bundled_spectral_library()]
        others = reference_spectra(a.mgf, sets, a.references)
        spectral += [others] if others is not None else []
        print(f"spectral libraries: {' + '.join(f'{len(s):,}' for s in spectral)} spectra indexed in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
        runs = {"fingerprint score": QueryParams(fragment_score=False, analog_score=False),
                "+ fragment score": QueryParams(analog_score=False),
                "+ fragment and analog scores (shipped)": QueryParams()}
        before = "shipped, the identification first (the rule before)"
        ranks: dict[str, list[int | None]] = {name: [] for name in [*runs, before]}
        seconds = {name: 0.0 for name in ranks}
        sizes = []
        truths_found = 0
        identified = right = 0
        for spectrum, truth, isomers in sets:
            first = SpectrumSession(bundle, spectrum, libraries=[suspects, *spectral])
            posterior, matches = first.posterior, first.spectral_matches  # shared: each run times its ranking
            for name, params in runs.items():
                session = SpectrumSession(bundle, spectrum, posterior=posterior, libraries=[suspects, *spectral],
                                          spectral_matches=matches)
                t0 = time.perf_counter()
                result = session.rank_known(params)
                seconds[name] += time.perf_counter() - t0
                ranks[name].append(truth_rank(result.candidates, truth))
            ranks[before].append(truth_rank(identification_first(result.candidates), truth))
            sizes.append(sum(c.suspect for c in result.candidates))
            hit = next((c for c in result.candidates if c.identified), None)
            identified += hit is not None
            right += hit is not None and hit.inchikey14 == truth
            analogs = search_analogs(spectral, spectrum, fw.ranking.analog_hits)
            truths_found += (any(c.inchikey14 == truth and c.spectral is not None for c in result.candidates)
                             or any(h.reference.inchikey14 == truth for h in analogs.hits))
    seconds[before] = seconds["+ fragment and analog scores (shipped)"]  # the same ranking, reordered
    n = len(sets)
    print(f"machine: {platform.processor() or platform.machine()}, one thread; bundle {bundle.describe()}")
    print(f"suspect order: {fw.ranking}; references: {a.references}; truths with a spectral-library hit: "
          f"{truths_found}; spectra with an identification: {identified} (of the truth: {right})")
    print(f"spectra: the first {n} FOLD=val pools of {a.pools} ({sum(s > len(i) for s, (_, _, i) in zip(sizes, sets))} "
          f"with more suspects of their formula than their own track; median list {sorted(sizes)[n // 2]})")
    print("| ranking of the suspects | " + " | ".join(f"Hit@{k}" for k in KS) + " | s / spectrum |")
    print("| --- |" + " ---: |" * (len(KS) + 1))
    for name, r in ranks.items():
        hits = [100 * sum(x is not None and x <= k for x in r) / n for k in KS]
        print(f"| {name} | " + " | ".join(f"{h:.1f}" for h in hits) + f" | {seconds[name] / n:.3f} |")
    shipped = [x == 1 for x in ranks["+ fragment and analog scores (shipped)"]]
    old = [x == 1 for x in ranks[before]]
    low, high = bootstrap_ci(np.array(shipped, dtype=float) - np.array(old, dtype=float))
    won, lost = sum(s and not o for s, o in zip(shipped, old)), sum(o and not s for s, o in zip(shipped, old))
    print(f"an identification ranked with the suspects, against first: the truth at rank 1 for {won} spectra more "
          f"and {lost} fewer; Hit@1 {100 * (sum(shipped) - sum(old)) / n:+.1f} points (paired bootstrap 95%: "
          f"{100 * low:+.1f} … {100 * high:+.1f})")
    missing = sum(x is None for x in ranks["fingerprint score"])
    if missing:
        print(f"{missing} truths were not among the ranked suspects (a structure the library could not read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
