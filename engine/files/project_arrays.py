"""The numeric side tables of a project file (:mod:`engine.files.project` describes the format): ragged tables whose
row r is ``values[offsets[r]:offsets[r + 1]]`` (peaks, thresholds, candidate bits, recalibration points) and the
posteriors, gathered while the document is written; and numbers as the document writes them."""

from __future__ import annotations

import hashlib
import math

import numpy as np

from engine.errors import ConfigError

RAGGED = {"peaks": ("peaks_mz", "peaks_intensity"), "thresholds": ("thresholds",),
          "candidate_bits": ("candidate_bits",),
          "recal_points": ("recal_points_mz", "recal_points_ppm", "recal_points_precursor")}
DTYPES = {"peaks_mz": np.float64, "peaks_intensity": np.float64, "thresholds": np.float64, "candidate_bits": np.int32,
          "recal_points_mz": np.float64, "recal_points_ppm": np.float64, "recal_points_precursor": np.bool_}


def number(x) -> float | str | None:
    """``x`` as the document writes a number: a float, or "nan", "inf", "-inf" (JSON has none of them); None stays."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


class Arrays:
    """The numeric side tables of a project being written."""

    def __init__(self):
        self.rows: dict[str, list[list[np.ndarray]]] = {k: [[] for _ in v] for k, v in RAGGED.items()}
        self.posteriors: list[np.ndarray] = []
        self._peak_rows: dict[bytes, int] = {}

    def _add(self, table: str, *values: np.ndarray) -> int:
        for column, v in zip(self.rows[table], values, strict=True):
            column.append(v)
        return len(self.rows[table][0]) - 1

    def peaks(self, mz: np.ndarray, intensity: np.ndarray) -> int:
        mz, intensity = np.asarray(mz, np.float64), np.asarray(intensity, np.float64)
        key = hashlib.blake2b(mz.tobytes() + b"|" + intensity.tobytes(), digest_size=16).digest()
        if key not in self._peak_rows:
            self._peak_rows[key] = self._add("peaks", mz, intensity)
        return self._peak_rows[key]

    def thresholds(self, t: np.ndarray) -> int:
        return self._add("thresholds", np.asarray(t, np.float64).ravel())

    def candidate_bits(self, bits: np.ndarray) -> int:
        return self._add("candidate_bits", np.asarray(bits, np.int32).ravel())

    def posterior(self, p: np.ndarray) -> int:
        p = np.asarray(p, np.float32).ravel()
        if self.posteriors and p.size != self.posteriors[0].size:
            raise ConfigError(f"A posterior of {p.size} bits among ones of {self.posteriors[0].size}: one project "
                              "holds the posteriors of one fingerprint size.")
        self.posteriors.append(p)
        return len(self.posteriors) - 1

    def recal_points(self, mz: np.ndarray, ppm: np.ndarray, precursor: np.ndarray) -> int:
        return self._add("recal_points", np.asarray(mz, np.float64).ravel(), np.asarray(ppm, np.float64).ravel(),
                         np.asarray(precursor, np.bool_).ravel())

    def finish(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        dtypes = DTYPES
        for table, names in RAGGED.items():
            columns = self.rows[table]
            lengths = [len(v) for v in columns[0]]
            out[f"{table}_offsets"] = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
            for name, column in zip(names, columns):
                out[name] = np.concatenate(column).astype(dtypes[name]) if column else np.zeros(0, dtypes[name])
        n_bits = self.posteriors[0].size if self.posteriors else 0
        out["posteriors"] = np.stack(self.posteriors) if self.posteriors else np.zeros((0, n_bits), np.float32)
        return out
