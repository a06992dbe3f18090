"""How well does the shipped model elucidate ion types it runs by a chemical mapping (:mod:`engine.model.ion_mapping`)?

For every mapped ion type (``[M+NH4]+``, ``[M-H2O+H]+``, ``[M+K]+``, ``[M]+``, ``[M+HCOO]-``, ``[M+CH3COO]-``,
``[M+Cl]-``, ``[M-H2O-H]-``), FOLD=val MassBank spectra (formula given) run through the pipeline as the app and
``msgpt predict`` run them (:class:`engine.elucidation.pipeline.SpectrumSession`: standard effort, B = 100, seed 0,
libraries off, one thread). Spectra are chosen stratified by structure (first InChIKey block): structures in a
fixed hashed order, one spectrum of each per pass, until ``--per-type`` spectra (all when fewer). Reported per ion
type: Top-1 / Top-10 and truth-in-pool of the true structure (first InChIKey block), and, on the same molecules,
the same of their native ``[M+H]+`` / ``[M-H]-`` spectra (one per molecule, FOLD=val) where MassBank has one. The
alternatives in :data:`engine.model.ion_mapping.ALTERNATIVES` (``[M+K]+`` as ``[M+Na]+``; ``[M]+`` drawn as the
neutral ``F − H``) run on the same spectra.

MassBank writes an ``[M]+`` record's FORMULA as the cation's with its charge (RDKit: ``C5H14NO+``); the study
strips the sign, as the app takes an ``[M]+`` ion's formula as the cation's composition. ``[M]+`` records of a
neutral formula (radical cations ``M+•``) are counted apart: the model cannot run them.

::

    python -m training.studies.ion_mapping --mgf ../shared/data/massbank_dev.mgf.gz --per-type 20 \\
        --cache /tmp/ion_mapping.jsonl

Resumable (one JSON line per run in ``--cache``); ``--table-only`` prints the table from the cache. Its table:
docs/ion_types.md.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import platform
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NATIVE_OF = {"positive": "[M+H]+", "negative": "[M-H]-"}


def _records(path: Path, fold: str):
    """The raw MGF records of ``fold`` (dicts of fields, peak lines under ``_peaks``)."""
    rec: dict = {}
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line == "BEGIN IONS":
                rec = {"_peaks": []}
            elif line == "END IONS":
                if rec.get("FOLD") == fold:
                    yield rec
            elif line and (line[0].isdigit()):
                rec["_peaks"].append(line)
            elif "=" in line:
                k, v = line.split("=", 1)
                rec[k] = v


def _ion_type(rec: dict) -> str | None:
    from engine.chem.adducts import parse_adduct_or_none
    from engine.errors import MsgptError

    try:
        a = parse_adduct_or_none(rec.get("ADDUCT"))
    except MsgptError:
        return None
    return a.name if a is not None else None


def _stratified(records: list[dict], cap: int) -> list[dict]:
    """Round-robin over structures (first InChIKey block, in hashed order), one spectrum each per pass."""
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_key[r.get("INCHIKEY", "")[:14]].append(r)
    keys = sorted(by_key, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
    out, depth = [], 0
    while len(out) < cap and any(depth < len(by_key[k]) for k in keys):
        for k in keys:
            if depth < len(by_key[k]) and len(out) < cap:
                out.append(by_key[k][depth])
        depth += 1
    return out


def select(mgf: Path, per_type: int, fold: str = "val") -> tuple[dict[str, list[dict]], dict[str, dict], dict]:
    """The chosen spectra of each mapped ion type, the native spectrum of each of their molecules, and counts."""
    from engine.model.ion_mapping import MAPPINGS, is_even_electron_cation

    by_type: dict[str, list[dict]] = defaultdict(list)
    native: dict[tuple[str, str], dict] = {}
    counts: dict = defaultdict(int)
    for rec in _records(mgf, fold):
        ion = _ion_type(rec)
        if ion is None or not rec.get("FORMULA") or not rec.get("INCHIKEY"):
            continue
        if ion in MAPPINGS:
            if ion == "[M]+":
                formula = rec["FORMULA"]
                if formula.endswith("+"):
                    rec = {**rec, "FORMULA": formula[:-1]}
                elif not formula[-1:].isalnum() or not is_even_electron_cation(formula):
                    counts["[M]+ radical or neutral formula"] += 1
                    continue
            elif not rec["FORMULA"][-1:].isalnum():
                continue
            counts[ion] += 1
            by_type[ion].append(rec)
        elif ion in NATIVE_OF.values() and rec["FORMULA"][-1:].isalnum():
            native.setdefault((ion, rec["INCHIKEY"][:14]), rec)
    chosen = {ion: _stratified(recs, per_type) for ion, recs in by_type.items()}
    pairs = {}
    for ion, recs in chosen.items():
        target = MAPPINGS[ion].target
        for r in recs:
            n = native.get((target, r["INCHIKEY"][:14]))
            if n is not None:
                pairs[r["TITLE"]] = n
    for ion in MAPPINGS:
        counts[f"{ion} structures"] = len({r["INCHIKEY"][:14] for r in by_type.get(ion, [])})
    return chosen, pairs, dict(counts)


def _write_mgf(records: list[dict], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write("BEGIN IONS\n")
            for k, v in r.items():
                if k != "_peaks":
                    fh.write(f"{k}={v}\n")
            fh.write("\n".join(r["_peaks"]) + "\nEND IONS\n\n")


def _spectra(records: list[dict]) -> dict:
    """The records read by the app's reader, by TITLE (records it refuses are left out, with their reason)."""
    from engine.spectra.io import read_spectra

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chosen.mgf"
        _write_mgf(records, path)
        spectra, skipped = read_spectra(path)
    for s in skipped:
        print(f"  reader skipped {s.spectrum_id}: {s.reason}", file=sys.stderr)
    return {s.id: s for s in spectra}


def _run(bundle, spectrum, mapping, params) -> dict:
    """One spectrum through the pipeline (with ``mapping`` forced when given): rank of the truth, timings."""
    from engine.elucidation.pipeline import SpectrumSession
    from engine.errors import MsgptError
    from engine.progress import run_to_end

    t0 = time.perf_counter()
    try:
        if mapping is None:
            session = SpectrumSession(bundle, spectrum)
        else:
            session = _forced_session(bundle, spectrum, mapping)
        result = run_to_end(session.run(params))
    except MsgptError as e:
        return {"error": str(e)}
    return {"rank": result.reference_rank, "n_valid": result.n_valid, "n_consistent": result.n_formula_consistent,
            "formula": session.formula, "note": result.ion_mapping or getattr(session, "ion_mapping", ""),
            "seconds": round(time.perf_counter() - t0, 2)}


def _forced_session(bundle, spectrum, mapping):
    """A session whose model input is ``mapping``'s (an alternative of :data:`ALTERNATIVES`), not the default."""
    from engine.elucidation.pipeline import SpectrumSession
    from engine.model.ion_mapping import apply_mapping

    session = SpectrumSession(bundle, spectrum)
    mapped = apply_mapping(spectrum, mapping)
    session.model_spectrum = mapped.spectrum
    session.formula = mapped.formula if mapping.draws == "target" else spectrum.formula
    session.ion_mapping = mapped.note
    session._posterior = None
    from engine.elucidation.pipeline import fragment_rerank

    session._fragments = fragment_rerank(bundle, mapped.spectrum)
    return session


def collect(args) -> None:
    import torch

    from engine.elucidation.pipeline import QueryParams
    from engine.model.bundle import load_bundle
    from engine.model.ion_mapping import ALTERNATIVES

    torch.set_num_threads(1)
    chosen, pairs, counts = select(Path(args.mgf), args.per_type, args.fold)
    print(f"FOLD={args.fold} counts: {json.dumps(counts, sort_keys=True)}", flush=True)
    cache = Path(args.cache)
    done = set()
    if cache.is_file():
        for line in cache.read_text().splitlines():
            d = json.loads(line)
            done.add((d["variant"], d["id"]))
    bundle = load_bundle(args.model, device="cpu", precision="fp32")
    params = QueryParams(seed=0)
    records = [r for recs in chosen.values() for r in recs]
    spectra = _spectra(records + list(pairs.values()))
    with open(cache, "a", encoding="utf-8") as out:
        for ion, recs in sorted(chosen.items()):
            for r in recs:
                s = spectra.get(r["TITLE"])
                if s is None:
                    continue
                runs = [("mapped", s, None)]
                runs += [(f"alt:{m.target}:{m.draws}", s, m) for m in ALTERNATIVES.get(ion, ())]
                n = pairs.get(r["TITLE"])
                if n is not None and spectra.get(n["TITLE"]) is not None:
                    runs.append(("native", spectra[n["TITLE"]], None))
                for variant, spectrum, mapping in runs:
                    if (variant, r["TITLE"]) in done:
                        continue
                    row = {"ion_type": ion, "variant": variant, "id": r["TITLE"], "run_id": spectrum.id,
                           "inchikey14": r["INCHIKEY"][:14], **_run(bundle, spectrum, mapping, params)}
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(json.dumps(row), flush=True)


def table(cache: Path) -> str:
    """The per-ion-type table of the runs in ``cache``."""
    rows = [json.loads(line) for line in cache.read_text().splitlines() if line.strip()]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["ion_type"], r["variant"])].append(r)

    def stats(rs):
        ok = [r for r in rs if "error" not in r]
        n = len(ok)
        if not n:
            return f"{len(rs):>3} runs, all refused ({rs[0]['error'][:60]})" if rs else "-"
        top1 = sum(r["rank"] == 1 for r in ok)
        top10 = sum(r["rank"] is not None and r["rank"] <= 10 for r in ok)
        pool = sum(r["rank"] is not None for r in ok)
        structures = len({r["inchikey14"] for r in ok})
        consistent = float(np.median([r["n_consistent"] for r in ok]))
        return (f"{n:>3} ({structures}) | {100 * top1 / n:5.1f} | {100 * top10 / n:5.1f} | {100 * pool / n:5.1f} | "
                f"{consistent:g}")

    def how(rs):  # the note, without the molecule's own formula
        note = next((r.get("note") for r in rs if r.get("note")), "") or "-"
        return re.sub(r"(run as \S+) of [A-Z][A-Za-z0-9]*", r"\1 of F − H", note)

    header = "| ion type | run as | n (structures) | Top-1 % | Top-10 % | in pool % | formula-consistent samples of 100 (median) |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    for ion in sorted({i for i, _ in groups}):
        mapped = groups.get((ion, "mapped"), [])
        lines.append(f"| {ion} | {how(mapped)} | {stats(mapped)} |")
        for variant in sorted(v for i, v in groups if i == ion and v.startswith("alt:")):
            lines.append(f"| {ion} | alternative: {how(groups[(ion, variant)])} | {stats(groups[(ion, variant)])} |")
        natives = groups.get((ion, "native"), [])
        if natives:
            ids = {r["id"] for r in natives}
            paired = [r for r in mapped if r["id"] in ids]
            lines.append(f"| {ion} | mapped, molecules with a native spectrum | {stats(paired)} |")
            lines.append(f"| {ion} | their native {NATIVE_OF['positive' if ion.endswith('+') else 'negative']} "
                         f"spectra | {stats(natives)} |")
    secs = [r["seconds"] for r in rows if "seconds" in r]
    lines.append("")
    lines.append(f"{len(rows)} runs, {sum(secs) / max(len(secs), 1):.1f} s a run on {_machine()}, one thread")
    return "\n".join(lines)


def _machine() -> str:
    """The CPU's model name and core count (Linux), else what platform says."""
    import os

    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0]}, {os.cpu_count()} cores" if names else (platform.processor() or platform.machine())


def main(argv=None) -> None:
    from engine.paths import default_model_dir

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mgf", default=str(ROOT.parent / "shared/data/massbank_dev.mgf.gz"))
    p.add_argument("--model", default=str(default_model_dir()))
    p.add_argument("--fold", default="val")
    p.add_argument("--per-type", type=int, default=20, help="spectra per mapped ion type (stratified by structure)")
    p.add_argument("--cache", default="/tmp/ion_mapping.jsonl")
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args(argv)
    if not args.table_only:
        collect(args)
    print(table(Path(args.cache)))


if __name__ == "__main__":
    main()
