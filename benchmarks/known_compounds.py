"""Known compounds on held-out spectra, measured through ``msgpt predict`` as a user runs it (formula not given).

Takes the first ``--positive`` [M+H]+ and ``--negative`` [M-H]- spectra of FOLD=val (structure-disjoint from
everything shipped: no FOLD=val structure is in the bundled structure or spectral library; the script checks)
and runs ``msgpt predict`` on them three times:

* ``off``: ``--no-libraries`` (de novo only);
* ``default``: the bundled structure and spectral libraries (the default);
* ``suspects``: the default plus a suspect list of every selected spectrum's true structure (as a chemist's list
  of compounds expected in a study; the other entries are decoys of other masses or isomers).

For each, by ``feature_rank`` (the rank over all formulas and origins of the spectrum): Top-1, 5 and 10 of the true
structure, spectra whose rank 1 is a spectral-library identification (level 2a: every one is false here), and wall
time. ``default`` against ``off`` is the no-crowding check (issue #36): the bundled libraries must not push de novo
answers down. It is also the confidence check: the confidence model was fitted on predictions alone, so the script
reports, over the spectra whose rank 1 has a ``spectrum_confidence``, the mean confidence against the rate of rank 1
right, the Brier score against always saying that rate, the expected calibration error and the AUROC
(``engine.model.confidence.reliability``, as the confidence model's own check). ``--formula-given`` keeps each
record's formula (one run per spectrum, the setting the confidence model's own check uses).

``--isomers RUN`` makes ``suspects`` issue #36's retrieval target as a user meets it: each true structure among up
to 255 corpus structures of its formula, added to the list from a ``python -m training.studies.retrieval`` run folder
(the formula-track candidates, marked ``fl``, of its first pool of the same true structure; spectra whose truth
has none there are left out, and the script says how many), with the de novo candidates, the bundled libraries
and, unless ``--formula-given``, the formula ranking in the same run.

::

    python benchmarks/known_compounds.py --mgf ../shared/data/massbank_dev.mgf.gz --out runs/known_compounds
    python benchmarks/known_compounds.py --mgf ../shared/data/massbank_dev.mgf.gz \
        --out runs/known_compounds/isomers --configs suspects --isomers runs/retrieval/v10_lib_all
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import platform
import sys
import time
from pathlib import Path

CONFIGS = {
    "off": ["--no-libraries"],
    "default": [],
    "suspects": ["--structure-library", "{suspects}"],
}


def read_records(path: Path):
    """Every MGF record as its lines (BEGIN/END included)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        record: list[str] = []
        for line in fh:
            record.append(line)
            if line.startswith("END IONS"):
                yield record
                record = []


def field(record: list[str], name: str) -> str:
    prefix = name + "="
    return next((line[len(prefix):].strip() for line in record if line.startswith(prefix)), "")


def select(mgf: Path, positive: int, negative: int) -> list[list[str]]:
    """The first FOLD=val records of each ion type with a structure and at least 3 peaks, one per structure."""
    want = {"[M+H]+": positive, "[M-H]-": negative}
    seen, out = set(), []
    for record in read_records(mgf):
        adduct, key = field(record, "ADDUCT"), field(record, "INCHIKEY")[:14]
        peaks = sum(1 for line in record if line[:1].isdigit())
        if field(record, "FOLD") != "val" or want.get(adduct, 0) <= 0 or not key or key in seen or peaks < 3:
            continue
        if not field(record, "SMILES"):
            continue
        want[adduct] -= 1
        seen.add(key)
        out.append(record)
        if not any(want.values()):
            break
    return out


def shipped_keys() -> set[str]:
    """First InChIKey blocks of every structure the bundled structure and spectral libraries hold."""
    from engine.library import load_library
    from engine.library.cache import bundled_library_path
    from engine.spectral_library import load_bundled_spectral_library

    lib = load_library(bundled_library_path(), trust_keys=True)
    keys = {lib.inchikey14(r) for r in range(len(lib))}
    spectra = load_bundled_spectral_library()
    return keys | {k for k in spectra.columns["inchikey14"] if k}


def formula_isomers(run: Path, truths: set[str]) -> dict[str, list[str]]:
    """The formula-track SMILES of each of ``truths`` (first InChIKey blocks) in a ``training.studies.retrieval`` run's
    ``pools.jsonl`` (its first pool of that truth)."""
    out: dict[str, list[str]] = {}
    for line in (run / "pools.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by an interrupted run
        key = rec.get("truth", {}).get("inchikey14")
        if key in truths and key not in out:
            out[key] = [c["s"] for c in rec.get("candidates", []) if c.get("fl") and c.get("k") != key]
    return out


def run_config(name: str, args: list[str], query: Path, out: Path, common: list[str]) -> dict:
    from engine.cli import main

    csv_path = out / f"{name}.csv"
    t0 = time.perf_counter()
    rc = main(["predict", str(query), "-o", str(csv_path), *common, *args])
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"msgpt predict ({name}) exited with {rc}")
    return {"seconds": seconds, **score(csv_path)}


def score(csv_path: Path) -> dict:
    rows = list(csv.DictReader(line for line in open(csv_path, encoding="utf-8") if not line.startswith("#")))
    by_spectrum: dict[str, list[dict]] = {}
    for row in rows:
        by_spectrum.setdefault(row["spectrum_id"], []).append(row)
    top1 = top5 = top10 = identified = in_pool = 0
    rated = []  # (confidence of rank 1, rank 1 right) of the spectra whose rank 1 has a confidence
    origins: dict[str, int] = {}  # how many spectra's rank 1 came from each origin (de_novo;structure_library...)
    for spectrum_rows in by_spectrum.values():
        truth = [int(r["feature_rank"]) for r in spectrum_rows if r["is_reference"] == "yes"]
        best = min(truth) if truth else None
        in_pool += best is not None
        top1 += best == 1
        top5 += best is not None and best <= 5
        top10 += best is not None and best <= 10
        first = min(spectrum_rows, key=lambda r: int(r["feature_rank"]))
        identified += first["identification_level"] == "2a"
        origins[first["origin"]] = origins.get(first["origin"], 0) + 1
        if first["spectrum_confidence"]:
            rated.append((float(first["spectrum_confidence"]), best == 1))
    return {"spectra": len(by_spectrum), "top1": top1, "top5": top5, "top10": top10, "truth_written": in_pool,
            "identified_rank1": identified, "rank1_origin": dict(sorted(origins.items())), "confidence": calibration(rated)}


def calibration(rated: list[tuple[float, bool]]) -> dict:
    """Mean confidence, rate right, Brier score (and that of always saying the rate), expected calibration error
    and AUROC of ``(confidence, right)`` pairs, as the confidence model's own check computes them
    (:func:`engine.model.confidence.reliability`, its probability bins)."""
    from engine.model.confidence import reliability

    if not rated:
        return {"spectra": 0}
    r = reliability([c for c, _ in rated], [right for _, right in rated])
    return {"spectra": r["n"], "mean_confidence": r["mean_predicted"], "rank1_right": r["base_rate"],
            "brier": r["brier"], "brier_base_rate": r["brier_base_rate"], "ece": float(r["ece"]), "auroc": r["auroc"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mgf", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--positive", type=int, default=60)
    p.add_argument("--negative", type=int, default=40)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--formula-given", action="store_true",
                   help="keep each record's formula (one run per spectrum) instead of hiding it")
    p.add_argument("--isomers", type=Path, default=None,
                   help="a training.studies.retrieval run: add each truth's formula-track isomers to the suspect list")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    records = select(a.mgf, a.positive, a.negative)
    isomers = formula_isomers(a.isomers, {field(r, "INCHIKEY")[:14] for r in records}) if a.isomers else {}
    if a.isomers:  # only the spectra whose truth the run has a pool of: each among its formula's isomers
        print(f"{sum(field(r, 'INCHIKEY')[:14] not in isomers for r in records)} of {len(records)} selected spectra "
              f"have no pool of their structure in {a.isomers}: left out", file=sys.stderr)
        records = [r for r in records if field(r, "INCHIKEY")[:14] in isomers]
    keys = {field(r, "INCHIKEY")[:14] for r in records}
    overlap = keys & shipped_keys()
    if overlap:
        raise SystemExit(f"{len(overlap)} selected structures are in a shipped library: not held out")
    query = a.out / "query.mgf"  # the formula hidden, as in a real run; the SMILES stays for is_reference
    hide = () if a.formula_given else ("FORMULA=",)
    query.write_text("".join(line for r in records for line in r if not line.startswith(hide)))
    suspects = a.out / "suspects.csv"
    with open(suspects, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Identifier", "Name", "SMILES"])
        w.writerows((field(r, "TITLE"), field(r, "NAME"), field(r, "SMILES")) for r in records)
        listed = {field(r, "SMILES") for r in records}
        for smiles in (s for key in sorted(isomers) for s in isomers[key]):
            if smiles not in listed:
                listed.add(smiles)
                w.writerow([f"I{len(listed) - len(records)}", "", smiles])
    common = ["-q", "--seed", "0", "--top", "10", "--threads", "1"]
    results = {}
    for name in a.configs.split(","):
        args = [x.format(suspects=suspects) for x in CONFIGS[name]]
        results[name] = run_config(name, args, query, a.out, common)
        print(name, json.dumps(results[name]), file=sys.stderr, flush=True)
    given = "formula given" if a.formula_given else "formula not given"
    report = {"data": f"{a.mgf.name} FOLD=val, first {a.positive} [M+H]+ and {a.negative} [M-H]- spectra "
                      f"(one per structure, {given})", "spectra": len(records),
              "isomers": {"run": str(a.isomers), "suspects": len(listed)} if a.isomers else None,
              "machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}",
              "command": " ".join(sys.argv), "results": results}
    (a.out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
