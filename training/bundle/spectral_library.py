"""Build the bundled spectral library (``resources/spectral_library/``) from MassBank, and calibrate when a
spectral hit is an answer.

::

    python -m training.bundle.spectral_library build --mgf ../shared/data/massbank_dev.mgf.gz \\
        --out resources/spectral_library/
    python -m training.bundle.spectral_library calibrate --mgf ../shared/data/massbank_dev.mgf.gz \\
        --library resources/spectral_library/massbank_open.mgf.gz --out resources/spectral_library/calibration.json

**build** keeps the records of ``FOLD=train`` whose ``LICENSE`` allows redistribution (:data:`LICENSES`: CC0,
CC BY, CC BY-SA, dl-de/by-2-0; never the NC ones) and that are high-resolution MS2 spectra with a precursor
(an instrument type with TOF or FT in it: QTOF, ITFT, QFT/Orbitrap, ...). ``FOLD=val`` is left out: it is the
model-selection set, and its structures must stay unanswered by the library so the calibration below measures
what users get on structures the library does not hold. Each spectrum keeps its accession, licence, contributor
(the lab code of the MassBank accession, ``MSBNK-<lab>-...``) and source, and at most ``--top`` peaks of at
least ``--min-rel`` % of the base peak, m/z to 4 decimals, relative intensities (base peak 100) to 3
significant digits. Writes ``massbank_open.mgf.gz`` (gzip without a timestamp: a rebuild gives the same bytes,
so users' indexes stay valid) and ``ATTRIBUTION.md``.

**calibrate** measures, over a grid of thresholds on the rank-1 identity hit (entropy similarity and matched
peaks): (a) the *false answer rate*: ``FOLD=val`` spectra (structure-disjoint from the library) searched against
the library, where every answer is false; (b) the *true answer rate*: leave-one-spectrum-out, each library
spectrum of a structure with several spectra searched against the library without it (and, stricter, without
any spectrum of its structure from the same lab). It picks the threshold with the most true answers from other
labs whose false answer rate's 95% upper bound (Wilson) is at most ``--max-false`` (5%), and writes it with the
table (and prints the table of docs/spectral_library.md).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import logging
import math
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import MsgptError
from engine.progress import run_to_end
from engine.spectral_library.index import (
    PRECURSOR_REMOVAL_DA,
    SpectralLibrary,
    build_library,
    clean_peaks,
)
from engine.spectral_library.read import ReadReport, iter_references
from engine.spectral_library.records import ReferenceSpectrum
from engine.spectral_library.search import SearchParams, matched_peaks

log = logging.getLogger(__name__)

LIBRARY = "massbank_open.mgf.gz"
ATTRIBUTION = "ATTRIBUTION.md"
LICENSES = ("CC0", "CC BY", "CC BY-SA", "dl-de/by-2-0")
HIGH_RES = re.compile(r"TOF|FT|ORBITRAP", re.IGNORECASE)
SIMILARITIES = tuple(round(0.40 + 0.025 * i, 3) for i in range(24))  # 0.400 ... 0.975
MATCHED = (1, 2, 3, 4, 5, 6, 8)
DEFAULT_TOP = 100
DEFAULT_MIN_REL = 1.0


# ----------------------------------------------------------------------------------------------
# build
# ----------------------------------------------------------------------------------------------


def exclusion(ref: ReferenceSpectrum, folds: Sequence[str], licenses: Sequence[str] = LICENSES) -> str:
    """Why a MassBank record stays out of the bundle (``""``: it goes in)."""
    if ref.extra.get("fold", "") not in folds:
        return f"fold {ref.extra.get('fold', '?')}"
    if ref.license not in licenses:
        return f"licence {ref.license or '?'}"
    if not HIGH_RES.search(ref.instrument_type):
        return "not high resolution"
    if not ref.polarity:
        return "no ion mode"
    return ""


def compact_peaks(mz: np.ndarray, intensity: np.ndarray, precursor_mz: float, top: int,
                  min_rel: float) -> tuple[np.ndarray, np.ndarray]:
    """At most ``top`` fragments of at least ``min_rel`` % of the largest fragment, and the peaks near the
    precursor (within 1.6 Da or above it: the search does not compare them, a mirror plot shows them) of at
    least ``min_rel`` % of the base peak; as (m/z, % of the base peak), m/z ascending. Fragments are measured
    against the largest fragment, as the search's cleaning does once the precursor is removed."""
    rel = 100.0 * intensity / intensity.max()
    fragment = mz <= precursor_mz - PRECURSOR_REMOVAL_DA
    keep = np.flatnonzero(~fragment & (rel >= min_rel))
    if fragment.any():
        frag = np.flatnonzero(fragment)
        frag_rel = 100.0 * intensity[frag] / intensity[frag].max()
        frag = frag[frag_rel >= min_rel]
        if frag.size > top:
            frag = frag[np.argsort(-intensity[frag], kind="stable")[:top]]
        keep = np.concatenate([keep, frag])
    keep.sort()
    return mz[keep], rel[keep]


def mgf_block(ref: ReferenceSpectrum, top: int, min_rel: float) -> tuple[str, int]:
    """The record as the bundle writes it, and its number of peaks."""
    mz, rel = compact_peaks(ref.mz, ref.intensity, ref.precursor_mz, top, min_rel)
    charge = f"{abs(ref.charge)}{'+' if ref.charge > 0 else '-'}" if ref.charge else ""
    fields = [("TITLE", ref.accession), ("PEPMASS", f"{ref.precursor_mz:.4f}"), ("CHARGE", charge),
              ("IONMODE", ref.polarity), ("ADDUCT", ref.adduct), ("NAME", ref.name), ("FORMULA", ref.formula),
              ("SMILES", ref.smiles), ("INCHIKEY", ref.inchikey), ("INSTRUMENT_TYPE", ref.instrument_type),
              ("FRAGMENTATION_MODE", ref.extra.get("fragmentationmode", "")),
              ("COLLISION_ENERGY", ref.collision_energy), ("LICENSE", ref.license),
              ("CONTRIBUTOR", ref.contributor), ("SOURCE", ref.source or f"MassBank {ref.accession}")]
    lines = ["BEGIN IONS"] + [f"{k}={v}" for k, v in fields if v]
    lines += [f"{m:.4f} {format(r, '.3g')}" for m, r in zip(mz, rel)]
    return "\n".join(lines + ["END IONS", ""]), int(mz.size)


@dataclass
class BuildStats:
    """What :func:`build` kept and left out."""

    records: int = 0
    kept: int = 0
    excluded: Counter = field(default_factory=Counter)
    by_license: Counter = field(default_factory=Counter)
    by_contributor: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    by_polarity: Counter = field(default_factory=Counter)
    structures: set[str] = field(default_factory=set)
    peaks: int = 0
    size: int = 0
    skipped_records: int = 0
    folds: tuple[str, ...] = ("train",)
    targets: dict[str, int] = field(default_factory=dict)


TARGETS = {"UFNOUKDBUJZYDE": "cyproconazole", "ZCJPOPBZHLUFHF": "fenamiphos"}


def build(mgf: str | Path, out: str | Path, top: int = DEFAULT_TOP, min_rel: float = DEFAULT_MIN_REL,
          folds: Sequence[str] = ("train",)) -> BuildStats:
    """Write ``massbank_open.mgf.gz`` and ``ATTRIBUTION.md`` into ``out``; returns what was kept."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stats = BuildStats(folds=tuple(folds), targets={name: 0 for name in TARGETS.values()})
    report = ReadReport(str(mgf))
    buffer = io.StringIO()
    for ref in iter_references(mgf, report):
        why = exclusion(ref, folds)
        if why:
            stats.excluded[why.split(" ")[0] if why.startswith(("fold", "licence")) else why] += 1
            continue
        block, n_peaks = mgf_block(ref, top, min_rel)
        buffer.write(block + "\n")
        stats.kept += 1
        stats.peaks += n_peaks
        stats.by_license[ref.license] += 1
        stats.by_contributor[ref.contributor][ref.license] += 1
        stats.by_polarity[ref.polarity] += 1
        stats.structures.add(ref.inchikey14)
        if ref.inchikey14 in TARGETS:
            stats.targets[TARGETS[ref.inchikey14]] += 1
    stats.records, stats.skipped_records = report.records, report.skipped
    data = gzip.compress(buffer.getvalue().encode("utf-8"), compresslevel=9, mtime=0)
    tmp = out / f".{LIBRARY}.tmp"
    tmp.write_bytes(data)
    tmp.replace(out / LIBRARY)
    stats.size = len(data)
    (out / ATTRIBUTION).write_text(attribution(stats, top, min_rel), encoding="utf-8")
    return stats


def attribution(stats: BuildStats, top: int, min_rel: float) -> str:
    """The text of ``ATTRIBUTION.md``."""
    lic_rows = "\n".join(f"| {lic} | {n:,} |" for lic, n in sorted(stats.by_license.items()))
    contrib_rows = "\n".join(
        f"| {name} | {sum(c.values()):,} | {', '.join(f'{lic} ({n:,})' for lic, n in sorted(c.items()))} |"
        for name, c in sorted(stats.by_contributor.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])))
    share_alike = stats.by_license.get("CC BY-SA", 0)
    excluded = ", ".join(f"{why}: {n:,}" for why, n in stats.excluded.most_common())
    return f"""# Bundled spectral library: sources and licences

`massbank_open.mgf.gz` holds {stats.kept:,} MS/MS reference spectra of {len(stats.structures):,} structures
(first InChIKey block; {stats.by_polarity.get('positive', 0):,} positive and {stats.by_polarity.get('negative', 0):,}
negative ion mode; {stats.size / 1e6:.1f} MB compressed), taken from MassBank (MassBank-data release 2025.05.1,
records of many contributing laboratories) by `python -m training.bundle.spectral_library build`. Each record keeps
its MassBank accession (`TITLE`), its licence (`LICENSE`), its contributor (`CONTRIBUTOR`: the laboratory code
of the accession, `MSBNK-<lab>-...`, which is also the folder of that laboratory's records in MassBank-data) and
its source (`SOURCE`). The records' pages are at `https://massbank.eu/MassBank/RecordDisplay?id=<accession>`.

Kept: records under the open licences {', '.join(LICENSES)} (never the non-commercial CC BY-NC, CC BY-NC-SA or
CC BY-NC-ND ones), high-resolution MS2 spectra with a precursor (instrument types with TOF or FT: QTOF, ITFT,
QFT/Orbitrap, ...), of the project's training fold only ({', '.join(stats.folds)}): the validation fold's
structures are held out of every library the app ships, so the false-answer rate measured on them
(docs/spectral_library.md) is what users get on structures the library does not hold. Left out of
{stats.records:,} records: {excluded or 'none'}.

Processing: at most {top} peaks a spectrum of at least {min_rel:g}% of the base peak, m/z rounded to 4 decimals,
intensities relative to the base peak (100) to 3 significant digits; metadata as in the record (name, formula,
SMILES and InChIKey computed by RDKit from the record's structure, adduct, instrument type, fragmentation mode,
collision energy).

## Licence of the library

{share_alike:,} spectra are under CC BY-SA 4.0, which makes the library as a whole available under **CC BY-SA
4.0**: share it under the same licence and keep this file with it. Each spectrum's own licence (below) still
applies to it. Spectra under `dl-de/by-2-0` (Datenlizenz Deutschland – Namensnennung – Version 2.0,
https://www.govdata.de/dl-de/by-2-0) are credited to their contributor and source as that licence asks.

## Spectra by licence

| licence | spectra |
| --- | ---: |
{lic_rows}

## Contributors (MassBank laboratory codes)

| contributor | spectra | licences |
| --- | ---: | --- |
{contrib_rows}

Credit: MassBank consortium (MassBank Europe, MassBank/MassBank-data on GitHub) and the contributing
laboratories above; each record names its authors in MassBank.
"""


# ----------------------------------------------------------------------------------------------
# calibrate
# ----------------------------------------------------------------------------------------------


@dataclass
class Rank1:
    """Rank-1 identity hits of a set of queries: similarity, matched peaks, and whether it is the query's
    structure (``None`` where no reference scored)."""

    similarity: list[float] = field(default_factory=list)
    matched: list[int] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    queries: int = 0

    def add(self, similarity: float, matched: int, correct: bool) -> None:
        self.similarity.append(similarity)
        self.matched.append(matched)
        self.correct.append(correct)

    def rates(self, min_similarity: float, min_matched: int) -> tuple[float, float]:
        """(answers, correct answers) as shares of all queries, at this threshold."""
        s, m, c = np.array(self.similarity), np.array(self.matched), np.array(self.correct, dtype=bool)
        ok = (s >= min_similarity) & (m >= min_matched) if s.size else np.zeros(0, dtype=bool)
        n = max(self.queries, 1)
        return float(ok.sum()) / n, float((ok & c).sum()) / n


def rank1(library: SpectralLibrary, precursor_mz: float, peaks: np.ndarray, polarity: str,
          exclude: set[int], params: SearchParams) -> tuple[int, float, int] | None:
    """(row, similarity, matched peaks) of the best identity hit whose row is not in ``exclude``."""
    best: tuple[int, float] | None = None
    for name in (polarity, "unknown"):
        group = library.groups.get(name)
        if group is None:
            continue
        lo, hi = group.range_of(precursor_mz, params.precursor_tol_da)
        if lo >= hi:
            continue
        scores = group.core.search(method="open", peaks=peaks, ms2_tolerance_in_da=params.fragment_tol_da,
                                   search_type=1, search_spectra_idx_min=lo, search_spectra_idx_max=hi)[lo:hi]
        rows = group.rows[lo:hi]
        if exclude:
            scores = np.where(np.isin(rows, list(exclude)), 0.0, scores)
        i = int(np.argmax(scores))
        if scores[i] > 0 and (best is None or scores[i] > best[1]):
            best = (int(rows[i]), float(scores[i]))
    if best is None:
        return None
    ref_mz, _ = library.peaks(best[0])
    fragments, _ = matched_peaks(peaks[:, 0], precursor_mz, ref_mz, float(library.precursor_mz[best[0]]),
                                 params.fragment_tol_da, "identity")
    return best[0], min(best[1], 1.0), len(fragments)


def held_out_queries(mgf: str | Path) -> Iterator[ReferenceSpectrum]:
    """``FOLD=val`` high-resolution spectra with ion mode (any licence: they are queries, not shipped)."""
    for ref in iter_references(mgf):
        if not exclusion(ref, ("val",), licenses=(ref.license,)):
            yield ref


def calibrate_false(library: SpectralLibrary, queries: Iterable[ReferenceSpectrum], params: SearchParams) -> Rank1:
    """(a) Structure-disjoint queries: any rank-1 answer is false."""
    keys = set(library.columns["inchikey14"])
    out = Rank1()
    for ref in queries:
        if ref.inchikey14 in keys:
            raise MsgptError(f"{ref.accession}: its structure {ref.inchikey14} is in the library; the queries must "
                             "be structure-disjoint from it (use FOLD=val against a library of FOLD=train).")
        out.queries += 1
        peaks = clean_peaks(ref.precursor_mz, ref.mz, ref.intensity)
        hit = rank1(library, ref.precursor_mz, peaks, ref.polarity, set(), params) if peaks.shape[0] else None
        if hit is not None:
            out.add(hit[1], hit[2], False)
    return out


def calibrate_true(library: SpectralLibrary, params: SearchParams) -> tuple[Rank1, Rank1]:
    """(b) Leave-one-spectrum-out over structures with several spectra: (without the spectrum itself, without
    any spectrum of its structure from the same contributor)."""
    keys, labs = library.columns["inchikey14"], library.columns["contributor"]
    by_key: dict[str, list[int]] = defaultdict(list)
    for row, key in enumerate(keys):
        if key:
            by_key[key].append(row)
    loso, other_lab = Rank1(), Rank1()
    for key, rows in by_key.items():
        if len(rows) < 2:
            continue
        for row in rows:
            mz, intensity = library.peaks(row)
            if mz.size == 0:
                continue
            peaks = np.column_stack([mz, intensity])
            polarity = library.columns["polarity"][row]
            same_lab = {r for r in rows if labs[r] == labs[row]}
            for result, exclude in ((loso, {row}), (other_lab, same_lab)):
                if len(exclude) == len(rows):
                    continue  # no other spectrum of the structure to find
                result.queries += 1
                hit = rank1(library, float(library.precursor_mz[row]), peaks, polarity, exclude, params)
                if hit is not None:
                    result.add(hit[1], hit[2], keys[hit[0]] == key)
    return loso, other_lab


def wilson_upper(rate: float, n: int, z: float = 1.96) -> float:
    """Upper end of the Wilson 95% interval of a proportion."""
    if n == 0:
        return 1.0
    centre = rate + z * z / (2 * n)
    spread = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return (centre + spread) / (1 + z * z / n)


def table(false: Rank1, loso: Rank1, other_lab: Rank1) -> list[dict]:
    """Rates at every threshold of the grid (exact; :func:`rounded` for writing)."""
    rows = []
    for s in SIMILARITIES:
        for m in MATCHED:
            f, _ = false.rates(s, m)
            answered, correct = loso.rates(s, m)
            answered_lab, correct_lab = other_lab.rates(s, m)
            rows.append({"min_similarity": s, "min_matched_peaks": m, "false_answer_rate": f,
                         "false_answer_rate_upper95": wilson_upper(f, false.queries),
                         "true_answer_rate": correct, "wrong_structure_rate": answered - correct,
                         "true_answer_rate_other_lab": correct_lab,
                         "wrong_structure_rate_other_lab": answered_lab - correct_lab})
    return rows


def rounded(row: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def choose(rows: list[dict], max_false: float) -> dict:
    """The threshold with the most true answers from other labs (the user's spectrum is never the library's)
    whose false answer rate's upper bound is <= ``max_false`` (ties: more leave-one-out true answers, the
    stricter similarity, more matched peaks)."""
    ok = [r for r in rows if r["false_answer_rate_upper95"] <= max_false]
    if not ok:
        raise MsgptError(f"no threshold of the grid keeps the false answer rate under {max_false:.0%}")
    return max(ok, key=lambda r: (r["true_answer_rate_other_lab"], r["true_answer_rate"], r["min_similarity"],
                                  r["min_matched_peaks"]))


def markdown(result: dict, similarities: Sequence[float] = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
             matched: Sequence[int] = (1, 2, 3, 4, 6)) -> str:
    """The table of docs/spectral_library.md: rates in % at a subset of the grid (the chosen row in bold)."""
    chosen = result["chosen"]
    similarities = {*similarities, chosen["min_similarity"]}
    matched = {*matched, chosen["min_matched_peaks"]}
    lines = [("| similarity >= | matched peaks >= | false answers (a) | upper 95% | true answers (b) | wrong structure "
              "(b) | true answers, other lab (b') | wrong structure, other lab (b') |"),
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["table"]:
        if r["min_similarity"] not in similarities or r["min_matched_peaks"] not in matched:
            continue
        cells = [f"{r['min_similarity']:g}", str(r["min_matched_peaks"])] + [
            f"{100 * r[k]:.1f}" for k in ("false_answer_rate", "false_answer_rate_upper95", "true_answer_rate",
                                          "wrong_structure_rate", "true_answer_rate_other_lab",
                                          "wrong_structure_rate_other_lab")]
        same = all(r[k] == chosen[k] for k in ("min_similarity", "min_matched_peaks"))
        lines.append("| " + " | ".join(f"**{c}**" if same else c for c in cells) + " |")
    return "\n".join(lines)


def calibrate(mgf: str | Path, library_path: str | Path, out: str | Path, max_false: float = 0.05) -> dict:
    """Run (a) and (b), choose the threshold and write the calibration JSON; returns it."""
    params = SearchParams()
    t0 = time.perf_counter()
    library = run_to_end(build_library(library_path, "calibration"))
    log.info("library: %s (%.0f s)", library.summary(), time.perf_counter() - t0)
    false = calibrate_false(library, held_out_queries(mgf), params)
    log.info("(a) %d structure-disjoint queries, %d with a rank-1 hit", false.queries, len(false.similarity))
    loso, other_lab = calibrate_true(library, params)
    log.info("(b) %d leave-one-out queries, %d other-lab queries", loso.queries, other_lab.queries)
    rows = table(false, loso, other_lab)
    chosen = choose(rows, max_false)
    result = {
        "what": "rank-1 identity hit thresholds of the bundled spectral library; see docs/spectral_library.md",
        "library": Path(library_path).name, "library_spectra": len(library), "queries_false": false.queries,
        "queries_true": loso.queries, "queries_true_other_lab": other_lab.queries,
        "search": {"mode": params.mode, "precursor_tol_da": params.precursor_tol_da,
                   "fragment_tol_da": params.fragment_tol_da},
        "max_false_answer_rate": max_false, "chosen": rounded(chosen), "table": [rounded(r) for r in rows],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    Path(out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.bundle.spectral_library", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write massbank_open.mgf.gz and ATTRIBUTION.md")
    b.add_argument("--mgf", required=True, help="MassBank MGF with LICENSE and FOLD (massbank_dev.mgf.gz)")
    b.add_argument("--out", required=True, help="folder to write (resources/spectral_library/)")
    b.add_argument("--top", type=int, default=DEFAULT_TOP, help=f"peaks kept a spectrum (default {DEFAULT_TOP})")
    b.add_argument("--min-rel", type=float, default=DEFAULT_MIN_REL,
                   help=f"least peak height kept, %% of the base peak (default {DEFAULT_MIN_REL})")
    c = sub.add_parser("calibrate", help="measure answer rates and write calibration.json")
    c.add_argument("--mgf", required=True, help="MassBank MGF with FOLD (its FOLD=val spectra are the queries)")
    c.add_argument("--library", required=True, help="the bundled library (massbank_open.mgf.gz)")
    c.add_argument("--out", required=True, help="calibration JSON to write")
    c.add_argument("--max-false", type=float, default=0.05, help="largest false answer rate (default 0.05)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        if args.command == "build":
            stats = build(args.mgf, args.out, args.top, args.min_rel)
            log.info("%d spectra of %d structures, %d peaks, %.2f MB; targets: %s", stats.kept,
                     len(stats.structures), stats.peaks, stats.size / 1e6, stats.targets)
            for lic, n in sorted(stats.by_license.items()):
                log.info("%-14s %7d", lic, n)
        else:
            result = calibrate(args.mgf, args.library, args.out, args.max_false)
            log.info("chosen: %s", result["chosen"])
            print(markdown(result))
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
