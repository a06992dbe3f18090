"""Fingerprint posteriors, band thresholds and queries of many spectra in one ``.npz`` file.

``msgpt predict ... --posteriors OUT.npz`` and the app's File ▸ Export posteriors write it; numpy
reads it back without unpickling anything (``np.load(path)`` with the default ``allow_pickle=False``),
and :func:`read_posteriors` checks the format. Arrays (:data:`FORMAT` version :data:`FORMAT_VERSION`;
n spectra, F fingerprint bits, M thresholds per spectrum)::

    format          str               "msgpt-posteriors"
    format_version  int64             1
    info            str               JSON: model, model_checksum, parameters, created, msgpt_version,
                                      fingerprint {type, radius, n_bits, generator}, band, query_rule
    ids             str (n,)          spectrum ids (TITLE, scan id, ...)
    sources         str (n,)          input file of each spectrum
    record_index    int64 (n,)        record number in that file (0-based)
    formula         str (n,)          molecular formula used (Hill)
    adduct          str (n,)          precursor ion type, e.g. "[M+H]+"
    precursor_mz    float64 (n,)
    inchikey14      str (n,)          reference structure's first InChIKey block, "" when none
    posteriors      float32 (n, F)    bit probabilities π of the spectrum encoder
    thresholds      float64 (n, M)    band thresholds t_1..t_M (dense to sparse)
    query_indptr    int64 (n·M + 1,)  queries as CSR rows: row s·M + i holds the active bits of
    query_indices   int32 (nnz,)      1[π_s > t_i], sorted (query_indices[indptr[r]:indptr[r+1]])

With scipy: ``csr_matrix((np.ones(len(ind), bool), ind, ptr), shape=(n * M, F))``. The queries
are exactly what the decoder was given (identical queries of neighbouring thresholds are listed
once per threshold here). The writer streams: the posteriors go to a temporary file beside the
target as they come, and the ``.npz`` appears in one rename when it is closed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import ConfigError, InputFileError, OutputError
from engine.model.querying import threshold_query

FORMAT = "msgpt-posteriors"
FORMAT_VERSION = 1
QUERY_RULE = "query (s, i) = bits b with posteriors[s, b] > thresholds[s, i]: CSR row s*M + i"
_TEXT_FIELDS = ("ids", "sources", "formula", "adduct", "inchikey14")


@dataclass(frozen=True, eq=False)
class PosteriorRecord:
    """One spectrum's posterior and band thresholds (its queries follow from both)."""

    spectrum_id: str
    posterior: np.ndarray  # float32 (F,)
    thresholds: np.ndarray  # float64 (M,)
    formula: str = ""
    adduct: str = ""
    precursor_mz: float = float("nan")
    source: str = ""
    record_index: int = -1
    inchikey14: str = ""

    def __post_init__(self):
        p = np.asarray(self.posterior, dtype=np.float32)
        t = np.asarray(self.thresholds, dtype=np.float64).ravel()
        if p.ndim != 1 or p.size == 0:
            raise ConfigError(f"`posterior` must be a non-empty 1-D array of bit probabilities, got shape {p.shape}.")
        if not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1:
            raise ConfigError(f"`posterior` of {self.spectrum_id!r} must hold probabilities in [0, 1].")
        object.__setattr__(self, "posterior", p)
        object.__setattr__(self, "thresholds", t)

    @classmethod
    def of(cls, spectrum, posterior: np.ndarray, thresholds: np.ndarray, inchikey14: str | None = None) -> PosteriorRecord:
        """The record of an :class:`~engine.spectra.spectrum.Spectrum`."""
        return cls(spectrum.id, posterior, thresholds, spectrum.formula or "", spectrum.adduct or "",
                   float(spectrum.precursor_mz), str(spectrum.source or ""), int(spectrum.index),
                   inchikey14 or (spectrum.inchikey or "")[:14])

    def queries(self) -> list[np.ndarray]:
        return [threshold_query(self.posterior, float(t)) for t in self.thresholds]


def posterior_info(bundle, params) -> dict:
    """The ``info`` of a file written with ``bundle`` and band ``params``: provenance, fingerprint, band."""
    from engine.files.export import provenance
    from engine.model.bitlegend import fingerprint_definition

    info = dict(provenance(bundle, params))
    info["fingerprint"] = fingerprint_definition(n_bits=bundle.decoder.config.fp_bits)
    info["band"] = {"kappa_min": params.kappa_min, "kappa_max": params.kappa_max, "groups": params.groups,
                    "d_enc": bundle.calibration.d_enc}
    return info


def record_for_spectrum(bundle, spectrum, params) -> PosteriorRecord:
    """Compute the posterior and band thresholds of one spectrum (the encoder only, nothing sampled).

    Raises :class:`~engine.errors.MsgptError` (SpectrumError, ...) when the model cannot run on it.
    """
    from engine.chem import molecules as chem
    from engine.elucidation.pipeline import compute_posterior, require_usable
    from engine.model.querying import band_thresholds

    require_usable(bundle, spectrum)
    posterior = compute_posterior(bundle, spectrum)
    cal = bundle.calibration.for_polarity(spectrum.polarity)
    thresholds = band_thresholds(cal, params.kappa_min, params.kappa_max, params.groups)
    key = chem.inchikey14(spectrum.smiles) if spectrum.smiles else None
    return PosteriorRecord.of(spectrum, posterior, thresholds, key)


def record_for_result(result) -> PosteriorRecord:
    """The record of a finished :class:`~engine.elucidation.pipeline.SpectrumResult` (its posterior and thresholds)."""
    if result.posterior is None:
        raise ConfigError(f"The result of {result.spectrum.id!r} carries no posterior.")
    return PosteriorRecord.of(result.spectrum, result.posterior, result.thresholds, result.reference_inchikey14)


class PosteriorWriter:
    """Stream :class:`PosteriorRecord` s into an ``.npz``; the target appears only on a clean :meth:`close`."""

    def __init__(self, path: str | os.PathLike, info: dict | None = None):
        self.path = Path(path)
        if self.path.suffix.lower() != ".npz":
            raise ConfigError(f"Cannot write posteriors to {str(path)!r}: use a file name ending in .npz.")
        directory = self.path.parent if str(self.path.parent) else Path(".")
        if not directory.is_dir():
            raise ConfigError(f"Cannot write {self.path}: folder {directory} does not exist.")
        self.info = dict(info or {})
        self.n = 0
        self.n_bits: int | None = None
        self.n_thresholds: int | None = None
        self._text: dict[str, list[str]] = {k: [] for k in _TEXT_FIELDS}
        self._record_index: list[int] = []
        self._precursor: list[float] = []
        self._thresholds: list[np.ndarray] = []
        self._indptr: list[int] = [0]
        self._tmp = [directory / f".{self.path.name}.{part}.tmp" for part in ("posteriors", "queries", "npz")]
        self._kept = "An earlier file of that name, if any, is unchanged."
        try:
            self._post = open(self._tmp[0], "wb")
            self._query = open(self._tmp[1], "wb")
        except OSError as e:
            self.abort()
            raise OutputError.from_os_error(self.path, e, self._kept) from e

    def write(self, record: PosteriorRecord) -> None:
        if self.n_bits is None:
            self.n_bits, self.n_thresholds = record.posterior.size, record.thresholds.size
        if record.posterior.size != self.n_bits or record.thresholds.size != self.n_thresholds:
            raise ConfigError(
                f"Spectrum {record.spectrum_id!r} has {record.posterior.size} bits and {record.thresholds.size} "
                f"thresholds, the file's first one {self.n_bits} and {self.n_thresholds}: one file holds one "
                "model's posteriors with one band."
            )
        queries = record.queries()
        try:
            self._post.write(record.posterior.astype("<f4").tobytes())
            for q in queries:
                self._query.write(q.astype("<i4").tobytes())
        except OSError as e:
            self.abort()
            raise OutputError.from_os_error(self.path, e, self._kept) from e
        for q in queries:
            self._indptr.append(self._indptr[-1] + len(q))
        for name, value in zip(_TEXT_FIELDS, (record.spectrum_id, record.source, record.formula, record.adduct,
                                              record.inchikey14)):
            self._text[name].append(value)
        self._record_index.append(record.record_index)
        self._precursor.append(record.precursor_mz)
        self._thresholds.append(record.thresholds)
        self.n += 1

    def close(self) -> None:
        """Assemble the ``.npz`` beside the target and rename it into place."""
        try:
            self._post.close()
            self._query.close()
            n_bits, m = self.n_bits or int(self.info.get("fingerprint", {}).get("n_bits", 0)), self.n_thresholds or 0
            post = (np.memmap(self._tmp[0], dtype="<f4", mode="r", shape=(self.n, n_bits)) if self.n
                    else np.zeros((0, n_bits), np.float32))
            nnz = self._indptr[-1]
            idx = np.memmap(self._tmp[1], dtype="<i4", mode="r", shape=(nnz,)) if nnz else np.zeros(0, np.int32)
            info = {**self.info, "query_rule": QUERY_RULE}
            arrays = dict(
                format=np.array(FORMAT), format_version=np.array(FORMAT_VERSION, dtype=np.int64),
                info=np.array(json.dumps(info)),
                **{k: np.array(v, dtype=str) for k, v in self._text.items()},
                record_index=np.array(self._record_index, dtype=np.int64),
                precursor_mz=np.array(self._precursor, dtype=np.float64),
                posteriors=post,
                thresholds=np.array(self._thresholds, dtype=np.float64).reshape(self.n, m),
                query_indptr=np.array(self._indptr, dtype=np.int64),
                query_indices=idx,
            )
            with open(self._tmp[2], "wb") as fh:
                np.savez(fh, **arrays)
                fh.flush()
                os.fsync(fh.fileno())
            del post, idx, arrays
            os.replace(self._tmp[2], self.path)
        except OSError as e:
            raise OutputError.from_os_error(self.path, e, self._kept) from e
        finally:
            self.abort()

    def abort(self) -> None:
        """Close and remove the temporary files; an earlier file at the target stays as it was."""
        for fh in (getattr(self, "_post", None), getattr(self, "_query", None)):
            if fh is not None:
                try:
                    fh.close()
                except OSError:
                    pass
        for tmp in self._tmp:
            tmp.unlink(missing_ok=True)

    def __enter__(self) -> PosteriorWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_posteriors(path: str | os.PathLike, records: Iterable[PosteriorRecord], info: dict | None = None) -> int:
    """Write records to one ``.npz`` atomically; returns how many."""
    with PosteriorWriter(path, info) as w:
        for r in records:
            w.write(r)
    return w.n


@dataclass(frozen=True, eq=False)
class PosteriorSet:
    """What :func:`read_posteriors` returns: the file's arrays (see the module docstring)."""

    info: dict
    ids: np.ndarray
    sources: np.ndarray
    record_index: np.ndarray
    formula: np.ndarray
    adduct: np.ndarray
    precursor_mz: np.ndarray
    inchikey14: np.ndarray
    posteriors: np.ndarray
    thresholds: np.ndarray
    query_indptr: np.ndarray
    query_indices: np.ndarray
    format_version: int = FORMAT_VERSION

    def __len__(self) -> int:
        return int(self.posteriors.shape[0])

    @property
    def n_thresholds(self) -> int:
        return int(self.thresholds.shape[1])

    def queries(self, s: int) -> list[np.ndarray]:
        """The M queries of spectrum ``s`` (sorted active bits, ``int64``)."""
        m = self.n_thresholds
        ptr = self.query_indptr
        return [self.query_indices[ptr[s * m + i]: ptr[s * m + i + 1]].astype(np.int64) for i in range(m)]

    def record(self, s: int) -> PosteriorRecord:
        return PosteriorRecord(str(self.ids[s]), self.posteriors[s], self.thresholds[s], str(self.formula[s]),
                               str(self.adduct[s]), float(self.precursor_mz[s]), str(self.sources[s]),
                               int(self.record_index[s]), str(self.inchikey14[s]))


def read_posteriors(path: str | os.PathLike) -> PosteriorSet:
    """Read a posteriors ``.npz`` (no pickles), checking its format and shapes."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            fmt = str(z["format"]) if "format" in z.files else ""
            if fmt != FORMAT:
                raise InputFileError(path, f"not an msgpt posteriors file (format {fmt!r}, expected {FORMAT!r}).")
            version = int(z["format_version"])
            if version > FORMAT_VERSION:
                raise InputFileError(path, f"format_version {version} is newer than this msgpt reads "
                                     f"({FORMAT_VERSION}); upgrade msgpt.")
            arrays = {k: z[k] for k in z.files if k not in ("format", "format_version", "info")}
            info = json.loads(str(z["info"]))
    except InputFileError:
        raise
    except (OSError, KeyError, ValueError, EOFError, json.JSONDecodeError) as e:
        raise InputFileError(path, f"cannot be read as a posteriors file ({type(e).__name__}: {e}).") from e
    try:
        out = PosteriorSet(info=info, format_version=version, **arrays)
    except TypeError as e:
        raise InputFileError(path, f"has unexpected arrays ({e}).") from e
    n, m = len(out), out.thresholds.shape[1] if out.thresholds.ndim == 2 else -1
    if (out.thresholds.shape[0] != n or out.ids.shape != (n,) or out.query_indptr.shape != (n * m + 1,)
            or out.query_indptr[-1] != out.query_indices.size):
        raise InputFileError(path, "its arrays disagree in length; the file is damaged, write it again.")
    return out
