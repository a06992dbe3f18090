"""Do the bundled libraries crowd out new compounds, and which prior for a library structure keeps them from it?

Issue #36's no-crowding target: with default settings, on spectra whose structures are in no library, de novo Top-1
and Top-10 are no lower than with the libraries off. Every ``msgpt predict`` run consults the bundled structure
library (179,040 structures) and spectral library by default; their structures of the spectrum's formula join the
ranking at a log-odds prior (``QueryParams.library_prior``, 0, plus ``undrawn_prior`` for one no sample drew: the
−16 this module chose), and an identification ranks first. A library structure the decoder never drew, but whose
fingerprint score beats the truth's, pushes a new compound down; a prior below 0 keeps such look-alikes under the
predictions unless they beat them clearly, at the price of a library structure that *is* the answer.

This module runs the app's own pipeline (:class:`engine.elucidation.pipeline.SpectrumSession`, formula given,
default settings but no library prior, the bundled libraries) once per spectrum and keeps each candidate's count, fingerprint score
and origin, and the truth's fingerprint score (``collect``). It then ranks those pools again under each prior
(``measure``), in three settings:

* **off**: the drawn candidates alone (``--no-libraries``: same seed, same samples);
* **new**: the truth in no library (a structure library that holds it is made not to; the crowding setting);
* **known**: the truth in the structure library (the issue's default target: a compound the bundled library
  holds is right at rank 1), drawn or not.

and for two scopes of the prior: every structure a library holds (``all``, the engine's rule) or only those the
decoder did not draw (``undrawn``). Identifications rank first in *new* and *known*, as in the app (their false
answers are issue #37's calibrated rate; the reference for crowding is therefore *new* with the libraries'
undrawn structures left out, which the identifications alone give).

**Choice**, on train-unseen (FOLD=train spectra of structures the encoder never trained on), reported on
FOLD=val: among the ``(scope, b)`` whose *new* de novo Top-1 and Top-10 are no lower than the reference, the best
*known* Hit@1, then Hit@5, then the larger ``b``::

    python -m training.studies.library_prior collect --selection runs/retrieval/v10_lib_all --out runs/library_prior/v10 \\
        [--shard 0/2]
    python -m training.studies.library_prior measure --out runs/library_prior/v10

Spectra come from a ``training.studies.retrieval`` run's ``selection.json`` (its ``choose`` and ``report`` lists, each
spectrum with its formula and true structure). Outputs: ``<out>/pools*.jsonl`` (resumable, one line a
spectrum), ``<out>/metrics.json`` and ``<out>/report.md`` (also printed).

Its table: docs/evidence/library_prior.md, "No crowding at scale: the undrawn prior" (``collect`` then ``measure``,
as written there).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

PRIORS = (0.0, -1.0, -2.0, -4.0, -8.0, -16.0, -32.0, -math.inf)
SCOPES = ("all", "undrawn")
SETS = (("train", "train-unseen"), ("val", "FOLD=val"))
KS = (1, 5, 10)


# -- collect ----------------------------------------------------------------------------------------------
def pool_record(result, spectrum, fold: str, truth_fp: float, truth_key: str) -> dict:
    """What the ``measure`` step needs of one spectrum's ranked pool: per candidate its first InChIKey block ``k``,
    count ``n``, fingerprint score ``fp``, whether a library holds it (``lib``) and whether a reference spectrum
    identifies it (``id``)."""
    from engine.elucidation.ranking import SPECTRAL_LIBRARY, STRUCTURE_LIBRARY

    cands = [{"k": c.inchikey14, "n": int(c.count), "fp": round(float(c.fingerprint_score), 4),
              "lib": int(STRUCTURE_LIBRARY in c.origin or SPECTRAL_LIBRARY in c.origin), "id": int(c.identified)}
             for c in result.candidates if math.isfinite(c.fingerprint_score)]
    from training.evaluation.evaluate import spectrum_key

    return {"key": spectrum_key(spectrum), "fold": fold,
            "adduct": spectrum.adduct, "truth": truth_key, "truth_fp": round(truth_fp, 4), "candidates": cands}


def collect(bundle, spectra: Sequence[tuple[str, object]], libraries: Sequence, path: Path) -> int:
    """Run each ``(fold, spectrum)`` through the pipeline with ``libraries`` and append its :func:`pool_record`
    to ``path`` (spectra already there are skipped); returns how many were run."""
    from engine.chem import molecules as chem
    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.model.scoring import FingerprintScorer
    from engine.progress import run_to_end

    from training.evaluation.evaluate import spectrum_key

    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    done = {json.loads(line)["key"] for line in lines}
    params = QueryParams(library_prior=0.0, undrawn_prior=0.0)  # the pool is what matters; measure ranks it again
    n = 0
    t0 = time.perf_counter()
    for fold, spectrum in spectra:
        if spectrum_key(spectrum) in done:
            continue
        session = SpectrumSession(bundle, spectrum, libraries=libraries)
        result = run_to_end(session.run(params))
        cal = bundle.calibration.for_polarity(spectrum.polarity)
        bits = chem.morgan_bits_from_smiles(spectrum.smiles)
        truth_fp = FingerprintScorer(session.posterior, cal.bits).score(bits) if bits is not None else math.nan
        rec = pool_record(result, spectrum, fold, truth_fp, chem.inchikey14(spectrum.smiles) or "")
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
        n += 1
        if n % 50 == 0:
            print(f"{n} spectra ({time.perf_counter() - t0:.0f} s)", flush=True)
    return n


# -- measure ----------------------------------------------------------------------------------------------
def hit(scores: np.ndarray, first: np.ndarray, truth: int, k: int) -> float:
    """Whether row ``truth`` is among the first ``k`` when rows with ``first`` set come first and the rest by
    ``scores`` (higher first), expected over ties."""
    t_first, t = bool(first[truth]), scores[truth]
    if t_first:
        better = int((first & (scores > t)).sum())
        tied = int((first & (scores == t)).sum())
    else:
        better = int(first.sum() + (~first & (scores > t)).sum())
        tied = int((~first & (scores == t)).sum())
    return float(np.clip((k - better) / tied, 0.0, 1.0))


def setting_arrays(rec: dict, setting: str, scope: str, b: float) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``(scores, identified, truth row)`` of ``rec`` in ``setting`` (off, new, known) under the prior ``b`` for
    ``scope``; None when the truth is not in that pool (off and new: the decoder did not draw it)."""
    cands = [dict(c) for c in rec["candidates"]]
    truth = next((i for i, c in enumerate(cands) if c["k"] == rec["truth"]), None)
    if setting == "off":
        cands = [c for c in cands if c["n"] > 0]
        for c in cands:
            c["lib"] = c["id"] = 0
    elif setting == "new":  # the truth held by no library: drawn or absent
        if truth is not None:
            cands[truth]["lib"] = cands[truth]["id"] = 0
            if cands[truth]["n"] == 0:
                cands.pop(truth)
    else:  # known: the truth held by the structure library, whether the decoder drew it or not
        if truth is None:
            cands.append({"k": rec["truth"], "n": 0, "fp": rec["truth_fp"], "lib": 1, "id": 0})
        else:
            cands[truth]["lib"] = 1
    truth = next((i for i, c in enumerate(cands) if c["k"] == rec["truth"]), None)
    if truth is None or not math.isfinite(cands[truth]["fp"]):
        return None
    fp = np.array([c["fp"] for c in cands], dtype=np.float64)
    lib = np.array([bool(c["lib"]) for c in cands])
    drawn = np.array([c["n"] > 0 for c in cands])
    held = lib if scope == "all" else lib & ~drawn
    if math.isinf(b):
        prior = np.where(held, -1e9, 0.0)  # last, in their own fingerprint order
    else:
        prior = np.where(held, b, 0.0)
    return fp + prior, np.array([bool(c["id"]) for c in cands]), truth


def rates(records: Sequence[dict], setting: str, scope: str, b: float) -> np.ndarray:
    """``(len(records), len(KS))`` Hit@k of the truth (0 where it is not in the pool)."""
    out = np.zeros((len(records), len(KS)))
    for i, rec in enumerate(records):
        arrays = setting_arrays(rec, setting, scope, b)
        if arrays is not None:
            scores, first, truth = arrays
            out[i] = [hit(scores, first, truth, k) for k in KS]
    return out


def grid(records: Sequence[dict], priors: Sequence[float]) -> dict:
    """Per ``(scope, b)``: *new* and *known* Hit@k tables; and the *off* table and the crowding reference."""
    out = {"off": rates(records, "off", "all", 0.0), "reference": rates(records, "new", "undrawn", -math.inf)}
    for scope in SCOPES:
        for b in priors:
            out[(scope, b)] = {"new": rates(records, "new", scope, b), "known": rates(records, "known", scope, b)}
    return out


def choose(table: dict, priors: Sequence[float]) -> tuple[str, float] | None:
    """The ``(scope, b)`` whose *new* Top-1 and Top-10 are no lower than the reference's, with the best *known*
    Hit@1, then Hit@5, then the larger ``b`` (``all`` before ``undrawn`` on a tie); None when none qualifies."""
    ref = table["reference"].mean(axis=0)
    ok = []
    for scope in SCOPES:
        for b in priors:
            new = table[(scope, b)]["new"].mean(axis=0)
            if new[0] >= ref[0] - 1e-12 and new[2] >= ref[2] - 1e-12:
                known = table[(scope, b)]["known"].mean(axis=0)
                ok.append(((-round(known[0], 10), -round(known[1], 10), -b, SCOPES.index(scope)), (scope, b)))
    return min(ok)[1] if ok else None


def _pct(a: np.ndarray) -> str:
    return " / ".join(f"{100 * v:.1f}" for v in a.mean(axis=0))


def report(records: dict[str, list[dict]], tables: dict[str, dict], chosen, priors: Sequence[float],
           command: str) -> tuple[dict, str]:
    from training.studies.retrieval import ci95

    lines = ["# Do the bundled libraries crowd out new compounds?", "",
             (f"Spectra: {', '.join(f'{label} {len(recs)}' for label, recs in records.items())} (formula given, "
              f"default settings, the bundled structure and spectral libraries; {platform.machine()})."), "",
             "Chosen on train-unseen: " + (f"**scope {chosen[0]}, b = {chosen[1]:g}**" if chosen else
                                           "nothing keeps the de novo answers"), "",
             "Top-1 / Top-5 / Top-10 (%) of the truth: de novo (the truth in no library) and known (the truth in the "
             "structure library). Libraries off and the crowding reference (identifications only) first:", "",
             "| set | scope | b | new | known |", "| --- | --- | ---: | ---: | ---: |"]
    metrics = {"command": command, "chosen": list(chosen) if chosen else None, "sets": {}}
    for label, table in tables.items():
        lines.append(f"| {label} | libraries off | | {_pct(table['off'])} | |")
        lines.append(f"| {label} | identifications only | | {_pct(table['reference'])} | |")
        m = {"n": len(records[label]), "off": table["off"].mean(axis=0).tolist(),
             "reference": table["reference"].mean(axis=0).tolist(), "grid": []}
        for scope in SCOPES:
            for b in priors:
                cell = table[(scope, b)]
                mark = " (chosen)" if chosen == (scope, b) else ""
                lines.append(f"| {label} | {scope}{mark} | {b:g} | {_pct(cell['new'])} | {_pct(cell['known'])} |")
                m["grid"].append({"scope": scope, "b": b, "new": cell["new"].mean(axis=0).tolist(),
                                  "known": cell["known"].mean(axis=0).tolist()})
        metrics["sets"][label] = m
    if chosen:
        lines += ["", "Chosen against no prior (scope all, b = 0), paired bootstrap 95% interval (points):", ""]
        for label, table in tables.items():
            parts = []
            for name, col in (("new Top-1", 0), ("new Top-10", 2)):
                diff = table[chosen]["new"][:, col] - table[("all", 0.0)]["new"][:, col]
                lo, hi = ci95(diff)
                parts.append(f"{name} {100 * diff.mean():+.1f} ({100 * lo:+.1f} … {100 * hi:+.1f})")
            diff = table[chosen]["known"][:, 0] - table[("all", 0.0)]["known"][:, 0]
            lo, hi = ci95(diff)
            parts.append(f"known Hit@1 {100 * diff.mean():+.1f} ({100 * lo:+.1f} … {100 * hi:+.1f})")
            lines.append(f"- {label}: " + "; ".join(parts))
    lines += ["", f"Command: `{command}`", ""]
    return metrics, "\n".join(lines)


def read_pools(out: Path) -> list[dict]:
    recs: dict[str, dict] = {}
    for path in sorted(out.glob("pools*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interrupted run
            recs[rec["key"]] = rec
    return list(recs.values())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m training.studies.library_prior", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="run the pipeline with the bundled libraries on the run's spectra")
    c.add_argument("--selection", required=True, help="training.studies.retrieval output folder (its selection.json)")
    c.add_argument("--out", required=True)
    c.add_argument("--bundle", default="resources/default_model")
    c.add_argument("--shard", default="0/1", help="I/N: every N-th spectrum from the I-th (parallel processes)")
    m = sub.add_parser("measure", help="rank the collected pools under each prior and choose")
    m.add_argument("--out", required=True)
    m.add_argument("--priors", type=float, nargs="+", default=list(PRIORS))
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.cmd == "collect":
        import torch

        from engine.library import open_bundled_library
        from engine.model.bundle import load_bundle
        from engine.progress import run_to_end
        from engine.spectra.spectrum import Spectrum
        from engine.spectral_library import load_bundled_spectral_library

        torch.set_num_threads(1)
        i, n = (int(x) for x in a.shard.split("/"))
        sel = json.loads((Path(a.selection) / "selection.json").read_text(encoding="utf-8"))
        spectra = [(fold, Spectrum(**d)) for fold, part in (("train", "choose"), ("val", "report"))
                   for d in sel[part]][i::n]
        bundle = load_bundle(a.bundle, device="cpu")
        libraries = [run_to_end(open_bundled_library()), load_bundled_spectral_library()]
        ran = collect(bundle, spectra, libraries, out / f"pools_{i}of{n}.jsonl")
        print(f"collected {ran} spectra into {out}")
        return 0
    records = read_pools(out)
    by_set = {label: [r for r in records if r["fold"] == fold] for fold, label in SETS}
    tables = {label: grid(recs, a.priors) for label, recs in by_set.items() if recs}
    chosen = choose(tables[SETS[0][1]], a.priors) if SETS[0][1] in tables else None
    metrics, text = report(by_set, tables, chosen, a.priors, "python -m training.studies.library_prior " + " ".join(argv))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1), encoding="utf-8")
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
