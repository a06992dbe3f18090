"""Results keyed by feature (issue #60): one row per feature of the inputs, to join back to the source tool's table.

A row holds the feature as its tool wrote it (``feature_id``, the input file, m/z, retention time in minutes and
seconds, the ion type it was given) and MS-GPT's answer for it: the feature's rank-1 candidate over all its formula
runs (:func:`engine.insight.identification.feature_ranks`; SMILES, InChIKey, name where a library named it,
formula, ion type run, score), its identification level (:func:`engine.insight.identification.identification_level`),
the model's confidence that rank 1 is right, the number of candidates, a status (``annotated``, ``no candidates`` or
``skipped: <reason>``), and its abundance (largest sample and one column per sample, ``abundance:<sample>``,
from a quantification table or the file: :mod:`engine.spectra.handoff`). Every feature read gets a row, skipped or
not, so a join on ``feature_id`` loses none of the source tool's rows that reached MS-GPT.

Three styles: ``msgpt`` (the columns above); ``gnps``: the same rows under the column names of a GNPS library
search result table (``#Scan#`` = feature ID, ``SpectrumFile``, ``CompoundName``, ``Smiles``, ``InChIKey``,
``MQScore``, ``SpecMZ``, ``Charge``, ``LibraryName``), which GNPS and Cytoscape (``shared name`` = ``#Scan#``) key
by feature ID; ``mzmine``: the annotated rows only, under the default column names of MZmine 3's local compound
database (CSV) search (``internal_id``, ``mz``, ``rt`` in minutes, ``adduct``, ``inchi_key``, ``name``,
``formula``, ``smiles``), which annotates MZmine's feature list by m/z and RT. TSV for ``.tsv``/``.txt``, CSV
for ``.csv``; written atomically (a failed write leaves an earlier file as it was).

:class:`FeatureTableSink` collects the rows as ``msgpt predict`` computes each feature (``--feature-table``);
:func:`rows_from_candidate_csv` reads the rank-1 rows of a finished candidate CSV (the features an interrupted run
finished before ``--resume``, :meth:`FeatureTableSink.add_earlier`). May import :mod:`engine.insight`, :mod:`engine.spectra` and the standard library;
never Qt.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ConfigError, OutputError

STYLES = ("msgpt", "gnps", "mzmine")
COLUMNS = ("feature_id", "source_file", "mz", "rt_min", "rt_s", "ion_type", "formula", "smiles", "inchikey", "name",
           "identification_level", "confidence", "score", "origin", "n_candidates", "status", "abundance")
GNPS_COLUMNS = {"feature_id": "#Scan#", "source_file": "SpectrumFile", "name": "CompoundName", "smiles": "Smiles",
                "inchikey": "InChIKey", "confidence": "MQScore", "mz": "SpecMZ", "abundance": "Abundance"}
#: MZmine 3's "Local compound database (CSV) search" default column names (mzmine_documentation,
#: docs/module_docs/id_prec_local_cmpd_db/local-cmpd-db-search.md): rt in minutes, matched by m/z and RT.
MZMINE_COLUMNS = {"feature_id": "internal_id", "rt_min": "rt", "ion_type": "adduct", "inchikey": "inchi_key"}
SAMPLE_PREFIX = "abundance:"


@dataclass
class FeatureRow:
    """One feature's row (see the module notes); ``samples``: abundance per sample, in the table's order."""

    feature_id: str
    source_file: str
    mz: float | None
    rt_s: float | None
    ion_type: str = ""
    formula: str = ""
    smiles: str = ""
    inchikey: str = ""
    name: str = ""
    identification_level: str = ""
    confidence: str = ""
    score: str = ""
    origin: str = ""
    n_candidates: int = 0
    status: str = ""
    abundance: float | None = None
    samples: dict[str, float] = field(default_factory=dict)

    def cells(self) -> dict[str, str]:
        return {
            "feature_id": self.feature_id, "source_file": self.source_file,
            "mz": "" if self.mz is None else f"{self.mz:.5f}",
            "rt_min": "" if self.rt_s is None else f"{self.rt_s / 60.0:.4f}",
            "rt_s": "" if self.rt_s is None else f"{self.rt_s:.2f}",
            "ion_type": self.ion_type, "formula": self.formula, "smiles": self.smiles, "inchikey": self.inchikey,
            "name": self.name, "identification_level": self.identification_level, "confidence": self.confidence,
            "score": self.score, "origin": self.origin, "n_candidates": str(self.n_candidates), "status": self.status,
            "abundance": _num(self.abundance),
        }


def _feature_fields(item, source: str) -> dict:
    """What the feature (or skipped record) itself says: ID, file, m/z, RT, given ion type, abundance."""
    from engine.spectra.handoff import feature_abundance
    from engine.spectra.spectrum import SkippedRecord

    if isinstance(item, SkippedRecord):
        return {"feature_id": item.spectrum_id, "source_file": Path(source).name, "mz": None,
                "rt_s": item.retention_time}
    spectrum = getattr(item, "spectrum", item)  # a Feature, or a Spectrum (an MGF record) as its own feature
    top, samples = feature_abundance(spectrum.metadata)
    return {"feature_id": item.id, "source_file": Path(source).name, "mz": item.precursor_mz,
            "rt_s": item.retention_time, "ion_type": spectrum.adduct or "", "abundance": top, "samples": samples}


def feature_row(item, outcomes: Sequence, source: str) -> FeatureRow:
    """The row of one feature (a ``Feature``, a ``Spectrum`` or a ``SkippedRecord``) from its outcomes
    (``SpectrumResult`` per formula run, or ``SkippedRecord``; none: ``not run``)."""
    from engine.insight.identification import feature_ranks, identification_level
    from engine.spectra.spectrum import SkippedRecord

    row = FeatureRow(**_feature_fields(item, source))
    results = [o for o in outcomes if not isinstance(o, SkippedRecord)]
    if not results:
        reason = outcomes[0].reason if outcomes else (item.reason if isinstance(item, SkippedRecord) else "")
        row.status = f"skipped: {reason}" if reason else "not run"
        return row
    row.identification_level = identification_level(results).code
    row.n_candidates = sum(len(r.candidates) for r in results)
    best = next(((r, r.candidates[j]) for r, ranks in zip(results, feature_ranks(results), strict=True)
                 for j, k in enumerate(ranks) if k == 1), None)
    if best is None:
        row.status = "no candidates"
        row.formula = results[0].spectrum.formula or ""
        row.ion_type = results[0].spectrum.adduct or row.ion_type
        return row
    result, c = best
    row.status = "annotated"
    row.ion_type = result.spectrum.adduct or row.ion_type
    row.formula, row.smiles, row.inchikey, row.origin = c.formula, c.smiles, c.inchikey or "", c.origin
    row.name = c.compound_name or ""
    row.score = "" if c.score != c.score else f"{c.score:.3f}"
    row.confidence = "" if result.confidence is None else f"{result.confidence:.4f}"
    return row


def rows_from_candidate_csv(path: str | os.PathLike) -> dict[str, FeatureRow]:
    """The rank-1 (``feature_rank`` 1) rows of a candidate CSV written by ``msgpt predict``, by ``spectrum_id``."""
    p = Path(path)
    with open(p, encoding="utf-8", newline="") as fh:
        lines = list(fh)
    body = [line for k, line in enumerate(lines) if not (line.startswith("# ") and all(x.startswith("# ") for x in lines[:k]))]
    rows: dict[str, FeatureRow] = {}
    counts: dict[str, int] = {}
    for r in csv.DictReader(body):
        sid = r.get("spectrum_id", "")
        counts[sid] = counts.get(sid, 0) + 1
        if r.get("feature_rank") != "1":
            continue
        rt = r.get("retention_time_s") or ""
        rows[sid] = FeatureRow(
            feature_id=sid, source_file="", mz=float(r["precursor_mz"]) if r.get("precursor_mz") else None,
            rt_s=float(rt) if rt else None, ion_type=r.get("adduct", ""), formula=r.get("formula", ""),
            smiles=r.get("smiles", ""), inchikey=r.get("inchikey", ""), name=r.get("compound_name", ""),
            identification_level=r.get("identification_level", ""), confidence=r.get("spectrum_confidence", ""),
            score=r.get("score", ""), origin=r.get("origin", ""), status="annotated")
    for sid, row in rows.items():
        row.n_candidates = counts[sid]
    return rows


def write_feature_table(path: str | os.PathLike, rows: Iterable[FeatureRow], style: str = "msgpt") -> int:
    """Write the rows (TSV for .tsv/.txt, CSV for .csv) atomically; returns the number of rows."""
    if style not in STYLES:
        raise ConfigError(f"feature table style must be one of {', '.join(STYLES)}, got {style!r}.")
    p = Path(path)
    delimiter = table_delimiter(p)
    rows = list(rows)
    samples = list(dict.fromkeys(s for r in rows for s in r.samples))
    columns = list(COLUMNS) + [SAMPLE_PREFIX + s for s in samples]
    renamed = {"gnps": GNPS_COLUMNS, "mzmine": MZMINE_COLUMNS}.get(style, {})
    header = [renamed.get(c, c) for c in columns]
    if style == "mzmine":
        rows = [r for r in rows if r.status == "annotated"]  # an empty annotation would name every matched feature
    if style == "gnps":
        header += ["Charge", "LibraryName"]
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, delimiter=delimiter, lineterminator="\n")
            writer.writerow(header)
            for r in rows:
                cells = r.cells()
                line = [cells[c] for c in COLUMNS] + [_num(r.samples.get(s)) for s in samples]
                if style == "gnps":
                    line += ["1", "MS-GPT"]
                writer.writerow(line)
        os.replace(tmp, p)
    except OSError as e:
        raise OutputError(f"Cannot write the feature table {p}: {e.strerror or e}; choose another folder.") from e
    return len(rows)


def table_delimiter(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".txt", ".tab"):
        return "\t"
    if suffix == ".csv":
        return ","
    raise ConfigError(f"Cannot write a feature table to {str(path)!r}: use a .tsv or .csv file name.")


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.10g}"


class FeatureTableSink:
    """Collects one :class:`FeatureRow` per feature as a run computes it; :meth:`write` writes them in input order."""

    def __init__(self, path: str | os.PathLike, inputs: Sequence[str], style: str = "msgpt"):
        table_delimiter(Path(path))  # fail on a bad name before the run
        if style not in STYLES:
            raise ConfigError(f"feature table style must be one of {', '.join(STYLES)}, got {style!r}.")
        self.path, self.inputs, self.style = Path(path), list(inputs), style
        self.rows: list[tuple[int, int, FeatureRow]] = []  # (input position, record index in the file, row)

    def add(self, position: int, item, outcomes: Sequence) -> None:
        self.rows.append((position, item.index, feature_row(item, outcomes, self.inputs[position])))

    def add_earlier(self, candidates_csv: str | os.PathLike, features: Iterable[tuple[int, object]],
                    journal: Iterable[dict] = ()) -> None:
        """Rows for the features an interrupted run finished (``--resume``): ``features`` are ``(input position,
        Feature or SkippedRecord)`` of the inputs read again; those not collected in this run take their status from
        the interrupted run's ``journal`` entries (``input``, ``id``, ``status``, ``rows``, ``reason``) and their
        answer from the output's rank-1 rows (by ID)."""
        from engine.spectra.spectrum import SkippedRecord

        seen = {(position, row.feature_id) for position, _, row in self.rows}
        answers = rows_from_candidate_csv(candidates_csv)
        done = {(e.get("input"), e.get("id")): e for e in journal if e.get("status") in ("done", "skipped")}
        for position, item in features:
            fid = item.spectrum_id if isinstance(item, SkippedRecord) else item.id
            if (position, fid) in seen:
                continue
            row = feature_row(item, [], self.inputs[position])
            entry, answer = done.get((position, fid)), answers.get(fid)
            if entry is not None and entry["status"] == "skipped":
                row.status = f"skipped: {entry.get('reason', '')}"
            elif answer is not None:
                for name in ("ion_type", "formula", "smiles", "inchikey", "name", "identification_level", "confidence",
                             "score", "origin", "n_candidates", "status"):
                    setattr(row, name, getattr(answer, name))
            elif entry is not None:
                row.status = "no candidates"
            self.rows.append((position, item.index, row))

    def write(self) -> int:
        """Write the rows in input order, each input's in file order; returns the number written."""
        return write_feature_table(self.path, [r for _, _, r in sorted(self.rows, key=lambda t: t[:2])], self.style)
