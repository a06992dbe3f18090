"""Candidate export to CSV and SDF, written atomically.

Columns follow what chemists' tools already read (SIRIUS de novo summary, MetFrag candidate SDF;
see docs/conventions). Every file says which model (name + checksum), parameters and seed made it:
CSV in leading ``#`` header lines (skip those lines when reading, not every ``#``: SMILES write triple bonds
with it; docs/cli.md, *Output*, has a pandas recipe), SDF as properties of each record.

Writers write to a temporary file beside the target and rename it over the target only when closed
without error, so a cancelled or failed export (disk full, no permission) leaves any earlier file
intact; the error is an :class:`~engine.errors.OutputError` that names the file and the reason.
"""

from __future__ import annotations

import csv
import datetime as _dt
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path

from engine.chem import molecules as chem
from engine.elucidation.pipeline import SpectrumResult
from engine.errors import ConfigError, OutputError
from engine.insight.identification import feature_ranks, identification_level
from engine.insight.novelty import NoveltyMarker
from engine.timing import staged

CSV_COLUMNS = (
    "spectrum_id",
    "rank",
    "feature_rank",
    "smiles",
    "inchikey",
    "InChIkey2D",
    "inchi",
    "formula",
    "monoisotopic_mass",
    "adduct",
    "formula_rank",
    "formula_score",
    "formula_evidence",
    "precursor_mz",
    "retention_time_s",
    "count",
    "frequency",
    "posterior_similarity",
    "fingerprint_score",
    "fragment_score",
    "analog_score",
    "analog_reference",
    "edited_from",
    "score",
    "novelty",
    "is_reference",
    "spectrum_fidelity",
    "spectrum_samples",
    "spectrum_formula_consistent",
    "spectrum_confidence",
    "origin",
    "library",
    "library_id",
    "compound_name",
    "spectral_similarity",
    "matched_peaks",
    "reference_accession",
    "reference_library",
    "reference_license",
    "reference_contributor",
    "identification_level",
    "identification_note",
    "compound_group",
    "abundance",
)
FORMATS = {".csv": "csv", ".sdf": "sdf", ".sd": "sdf"}


def export_format(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"Cannot export to {str(path)!r}: use a .csv or .sdf file name.")
    return FORMATS[suffix]


def provenance(bundle, params, extra: dict | None = None) -> dict[str, str]:
    from engine import __version__

    info = {
        "msgpt_version": __version__,
        "model": bundle.name,
        "model_checksum": bundle.checksum,
        "model_path": str(bundle.path),
        "parameters": params.describe(),
        "seed": str(params.seed),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    info.update(extra or {})
    return info


def parameters_provenance(results: Sequence[SpectrumResult | Sequence[SpectrumResult]], max_ids: int = 5
                          ) -> dict[str, str]:
    """The ``parameters`` and ``seed`` lines of an export's header, each parameter set once: with one set (the
    usual case), its description; with several, each with how many spectra it drew (the spectra of the less
    common sets named, at most ``max_ids`` each). An item that is a sequence holds the results of one spectrum's
    formulas (one spectrum)."""
    groups: dict = {}
    for item in results:
        for r in ([item] if isinstance(item, SpectrumResult) else item):
            groups.setdefault(r.params, {}).setdefault(r.spectrum.id, None)
    if not groups:
        return {}
    if len(groups) == 1:
        (params,) = groups
        return {"parameters": params.describe(), "seed": str(params.seed)}
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    parts = []
    for k, (params, ids) in enumerate(ordered):
        n = len(ids)
        what = f"{n} spectr{'um' if n == 1 else 'a'}"
        if k:
            names = list(ids)[:max_ids]
            what += ": " + ", ".join(names) + (f" and {n - len(names)} more" if n > len(names) else "")
        parts.append(f"{params.describe()} ({what})")
    return {"parameters": " | ".join(parts), "seed": ", ".join(sorted({str(p.seed) for p in groups}))}


def candidate_rows(
    result: SpectrumResult, top: int | None = None, novelty: NoveltyMarker | None = None, rank_offset: int = 0,
    feature_ranks: Sequence[int] | None = None, level: str = "", level_note: str = "",
) -> Iterable[dict]:
    """CSV rows of the candidates; ``novelty`` labels each training corpus / user list / new (else empty).

    ``rank_offset`` continues the ranks of an earlier result of the same spectrum (``msgpt predict``
    runs a spectrum without a formula for its best formula candidates, one after the other);
    ``formula_rank`` / ``formula_score`` are those of the formula candidate, empty for a given formula;
    ``formula_evidence`` what its table's isotopes and fragments showed of the elements (empty: nothing).
    ``feature_ranks``: each shown candidate's rank over the whole feature
    (:func:`engine.insight.identification.feature_ranks`; default: ``rank``); ``level``: the feature's
    identification level (:func:`engine.insight.identification.identification_level`); ``level_note``: its text
    where a reference spectrum decided it (the match, and the isomers it cannot tell apart), else empty.
    """
    s = result.spectrum
    shown = result.candidates[:top]
    labels = novelty.labels([c.inchikey14 for c in shown]) if novelty is not None else [""] * len(shown)
    franks = list(feature_ranks) if feature_ranks is not None else [c.rank + rank_offset for c in shown]
    for c, label, frank in zip(shown, labels, franks, strict=True):
        mol = chem.mol_from_smiles(c.smiles)
        ev = c.spectral
        yield {
            "spectrum_id": s.id,
            "rank": c.rank + rank_offset,
            "feature_rank": frank,
            "smiles": c.smiles,
            "inchikey": c.inchikey or (chem.inchikey(mol) if mol is not None else ""),
            "InChIkey2D": c.inchikey14,
            "inchi": chem.inchi(mol) if mol is not None else "",
            "formula": c.formula,
            "monoisotopic_mass": f"{c.monoisotopic_mass:.5f}",
            "adduct": s.adduct or "",
            "formula_rank": s.metadata.get("formula_rank", ""),
            "formula_score": s.metadata.get("formula_score", ""),
            "formula_evidence": s.metadata.get("formula_evidence", ""),
            "precursor_mz": f"{s.precursor_mz:.5f}",
            "retention_time_s": "" if s.retention_time is None else f"{s.retention_time:.2f}",
            "count": c.count,
            "frequency": f"{c.frequency:.4f}",
            "posterior_similarity": f"{c.posterior_similarity:.4f}",
            "fingerprint_score": _num(c.fingerprint_score, 3),
            "fragment_score": _num(c.fragment_score, 3),
            "analog_score": _num(c.analog_score, 4),
            "analog_reference": c.analog_reference,
            "edited_from": c.edited_from,
            "score": _num(c.score, 3),
            "novelty": label,
            "is_reference": "" if not result.reference_inchikey14 else
            ("yes" if c.inchikey14 == result.reference_inchikey14 else "no"),
            "spectrum_fidelity": "" if result.fidelity is None else f"{result.fidelity:.4f}",
            "spectrum_samples": result.n_samples,
            "spectrum_formula_consistent": result.n_formula_consistent,
            "spectrum_confidence": "" if result.confidence is None else f"{result.confidence:.4f}",
            "origin": c.origin,
            "library": c.library,
            "library_id": c.library_id,
            "compound_name": c.compound_name,
            "spectral_similarity": "" if ev is None else f"{ev.similarity:.4f}",
            "matched_peaks": "" if ev is None else ev.matched_peaks,
            "reference_accession": "" if ev is None else ev.accession,
            "reference_library": "" if ev is None else ev.library,
            "reference_license": "" if ev is None else ev.license,
            "reference_contributor": "" if ev is None else ev.contributor,
            "identification_level": level,
            "identification_note": level_note,
            "compound_group": s.metadata.get("compound_group", ""),  # the feature's adduct group (engine.formulas.groups)
            "abundance": _abundance(s.metadata),
        }


def _abundance(metadata) -> str:
    """The feature's largest abundance (a quant table's peak area, or the intensity a tool's export carries), as the
    hand-off readers keep it (:mod:`engine.spectra.handoff`; per sample in the feature table); empty without one."""
    from engine.spectra.handoff import feature_abundance

    top = feature_abundance(metadata)[0]
    return "" if top is None else f"{top:g}"


def _level_note(level) -> str:
    """The ``identification_note`` of an :class:`engine.insight.identification.IdentificationLevel`: its text when a
    reference spectrum decided it (2a, or 3 with the isomers it cannot tell apart) or a suspect's evidence did (2b),
    else empty."""
    return level.text if level.code in ("2a", "2b") or level.isomers else ""


def _num(x: float, digits: int) -> str:
    return "" if x != x else f"{x:.{digits}f}"  # nan (no posterior) -> empty cell


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every system can open a folder)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _create_hidden_temp(directory: Path, name: str) -> tuple[int, Path]:
    """Create ``.NAME.XXXXXXXX.partial`` in ``directory`` with the permissions of an ordinary new file.

    ``tempfile.mkstemp`` makes files readable by their owner only (0600), and the rename would carry
    that over to the export; opened with mode 0666 here, the system applies the user's umask
    (typically giving 0644), as for any file the user creates.
    """
    for _ in range(100):
        tmp = directory / f".{name}.{secrets.token_hex(4)}.partial"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name for {name} in {directory}")


class CandidateWriter:
    """Stream results into a CSV or SDF file; the target appears only on a clean :meth:`close`.

    Rows go to a temporary file beside the target, renamed over it by :meth:`close`, so a failed or
    cancelled export (or a full disk) leaves an earlier file as it was. By default the temporary file
    is hidden and removed by :meth:`abort`; ``partial`` names it instead (``msgpt predict`` uses
    ``OUT.partial`` so an interrupted run can go on), and ``resume_at`` reopens an existing partial
    file cut back to that many bytes, appending without a new header.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        info: dict[str, str],
        top: int | None = None,
        *,
        partial: str | os.PathLike | None = None,
        resume_at: int | None = None,
        novelty: NoveltyMarker | None = None,
    ):
        self.path = Path(path)
        self.format = export_format(self.path)
        self.info = info
        self.top = top
        self.novelty = novelty
        self.n_rows = 0
        directory = self.path.parent if str(self.path.parent) else Path(".")
        if not directory.is_dir():
            raise ConfigError(f"Cannot write {self.path}: folder {directory} does not exist.")
        self._directory = directory
        self._kept = "An earlier file of that name, if any, is unchanged."
        try:
            if partial is None:
                fd, self._tmp = _create_hidden_temp(directory, self.path.name)
                self._fh = os.fdopen(fd, "w", newline="", encoding="utf-8")
            else:
                self._tmp = Path(partial)
                if resume_at is not None:
                    with open(self._tmp, "r+b") as fh:
                        fh.truncate(resume_at)  # drop the rows of a spectrum that did not finish
                self._fh = open(self._tmp, "a" if resume_at is not None else "w", newline="", encoding="utf-8")
        except OSError as e:
            raise OutputError.from_os_error(self.path, e, self._kept) from e
        self._remove_on_abort = partial is None
        if self.format == "csv":
            self._csv = csv.DictWriter(self._fh, fieldnames=CSV_COLUMNS)
            if resume_at is None:
                try:
                    self._guarded(self._write_csv_header)
                except OutputError:
                    self.abort()
                    raise

    def _guarded(self, write, *args) -> None:
        try:
            write(*args)
        except OSError as e:
            raise OutputError.from_os_error(self.path, e, self._kept) from e

    def _write_csv_header(self) -> None:
        for k, v in self.info.items():
            self._fh.write(f"# {k}: {v}\n")
        self._csv.writeheader()

    def write(self, result: SpectrumResult, rank_offset: int = 0, feature_ranks: Sequence[int] | None = None,
              level=None) -> int:
        """Add the candidates of one spectrum (ranks after ``rank_offset``; ``feature_ranks`` and the feature's
        identification ``level`` when it is one of several formula runs of a feature, see :meth:`write_feature`);
        returns the number of rows written."""
        level = identification_level([result]) if level is None else level
        code, note = (level, "") if isinstance(level, str) else (level.code, _level_note(level))
        rows = list(candidate_rows(result, self.top, self.novelty, rank_offset, feature_ranks, code, note))
        self._guarded(self._write_rows, rows)
        return len(rows)

    @staged("writing")
    def write_feature(self, results: Sequence[SpectrumResult]) -> int:
        """Add the candidates of one feature's results (its formula runs, ranked on in one list, each candidate
        with its rank over the feature); returns the number of rows written."""
        level = identification_level(results)
        written = 0
        for result, franks in zip(results, feature_ranks(results, self.top), strict=True):
            written += self.write(result, rank_offset=written, feature_ranks=franks, level=level)
        return written

    def _write_rows(self, rows: list[dict]) -> None:
        for row in rows:
            if self.format == "csv":
                self._csv.writerow(row)
            else:
                self._write_sdf(row)
            self.n_rows += 1
        self._fh.flush()

    def sync(self) -> int:
        """Push what was written to the disk (flush + fsync); returns the temporary file's size in bytes."""
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            return os.fstat(self._fh.fileno()).st_size
        except OSError as e:
            raise OutputError.from_os_error(self.path, e, self._kept) from e

    def _write_sdf(self, row: dict) -> None:
        from rdkit import Chem

        mol = chem.mol_with_2d_coords(row["smiles"])
        if mol is None:
            return
        mol.SetProp("_Name", f"{row['spectrum_id']} rank {row['rank']}")
        props = {
            "Identifier": f"{row['spectrum_id']}#{row['rank']}",
            "spectrum_id": row["spectrum_id"],
            "rank": row["rank"],
            "SMILES": row["smiles"],
            "InChIKey": row["inchikey"],
            "InChIKey1": row["InChIkey2D"],
            "INCHI": row["inchi"],
            "MolecularFormula": row["formula"],
            "MonoisotopicMass": row["monoisotopic_mass"],
            "adduct": row["adduct"],
            "formula_rank": row["formula_rank"],
            "formula_score": row["formula_score"],
            "formula_evidence": row["formula_evidence"],
            "precursor_mz": row["precursor_mz"],
            "retention_time_s": row["retention_time_s"],
            "count": row["count"],
            "Score": row["score"],
            "novelty": row["novelty"],
            "frequency": row["frequency"],
            "posterior_similarity": row["posterior_similarity"],
            "fingerprint_score": row["fingerprint_score"],
            "fragment_score": row["fragment_score"],
            "analog_score": row["analog_score"],
            "analog_reference": row["analog_reference"],
            "edited_from": row["edited_from"],
            "is_reference": row["is_reference"],
            "spectrum_fidelity": row["spectrum_fidelity"],
            "spectrum_confidence": row["spectrum_confidence"],
            **{k: row[k] for k in CSV_COLUMNS[CSV_COLUMNS.index("origin"):]},
            "feature_rank": row["feature_rank"],
            **{f"msgpt_{k}": v for k, v in self.info.items()},
        }
        for k, v in props.items():
            mol.SetProp(k, str(v))
        self._fh.write(Chem.SDWriter.GetText(mol))  # one record, ending in $$$$

    def close(self) -> None:
        """Finish the file (flushed to disk) and move it over the target in one rename."""
        try:
            self.sync()
        except OutputError:
            self.abort()
            raise
        try:
            self._fh.close()
            os.replace(self._tmp, self.path)
        except OSError as e:
            self.abort()
            raise OutputError.from_os_error(self.path, e, self._kept) from e
        fsync_directory(self._directory)

    def abort(self) -> None:
        """Close without renaming: an earlier file at the target stays as it was.

        The hidden temporary file is removed; a named ``partial`` file is kept for a later resume.
        """
        try:
            self._fh.close()
        except OSError:
            pass  # a full disk can fail the last flush; the file is dropped or resumed from its journal
        finally:
            if self._remove_on_abort:
                self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> CandidateWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def export_results(
    path: str | os.PathLike, results: Iterable[SpectrumResult], info: dict[str, str], top: int | None = None,
    novelty: NoveltyMarker | None = None,
) -> int:
    """Write finished results to one file atomically; returns the number of candidate rows."""
    with CandidateWriter(path, info, top, novelty=novelty) as w:
        for r in results:
            w.write(r)
    return w.n_rows
