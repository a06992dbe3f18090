"""Analogs for deep search: the library structures whose fingerprints a spectrum's posterior likes best, of any
formula but the spectrum's own (issue #39, "analog seeding").

A spectrum's true structure is often in no library, but a library often holds its relatives: the same scaffold
with another substituent, the same side chain on another ring. Their SAFE fragments are prefixes the decoder can
complete under the spectrum's own formula (:mod:`engine.elucidation.deep`).

:class:`AnalogIndex` holds every structure's Morgan bits as one CSR array (row offsets + bit numbers), so scoring
a library of 180k structures against a posterior is one gather and one segmented sum (tens of milliseconds).
A library whose index stores its bits (:class:`~engine.library.index.StructureLibrary` built without
``trust_keys``) is used as it is; one with lazy bits (the bundled library) has them computed once from its SMILES
(about a minute) and kept beside the library indexes in the data folder, named by the library's checksum.

Imports engine.library, engine.model.scoring, engine.progress and engine.chem only.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Generator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.chem.molecules import morgan_bits_from_smiles
from engine.library.index import StructureLibrary
from engine.model.scoring import FingerprintScorer
from engine.progress import CancelFn, check_cancel, run_to_end

FORMAT = "msgpt-analog-bits/1"
PROGRESS_EVERY = 5000  # structures between progress events while bits are computed
_OPENED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # library -> its AnalogIndex, once opened


@dataclass(frozen=True)
class AnalogProgress:
    """Bits computed for ``done`` of ``total`` structures of ``library``."""

    library: str
    done: int
    total: int


class AnalogIndex:
    """Every structure of one library as Morgan bits, for a fingerprint score of all of them at once."""

    def __init__(self, library: StructureLibrary, offsets: np.ndarray, bits: np.ndarray):
        if len(offsets) != len(library) + 1 or int(offsets[-1]) != len(bits):
            raise ValueError(f"analog bits of {library.name!r} do not fit its {len(library)} structures; delete the "
                             "cached file to rebuild it")
        self.library = library
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.bits = np.asarray(bits)

    def __len__(self) -> int:
        return len(self.library)

    def scores(self, scorer: FingerprintScorer) -> np.ndarray:
        """(n,) fingerprint score of every structure (:meth:`FingerprintScorer.score`, all at once)."""
        gain = np.append(scorer.gain, 0.0)  # bits beyond the posterior's size count nothing, as in score()
        gathered = gain[np.minimum(self.bits.astype(np.int64), len(scorer.gain))]
        sums = np.add.reduceat(gathered, self.offsets[:-1]) if len(gathered) else np.zeros(len(self))
        sums = np.where(np.diff(self.offsets) > 0, sums, 0.0)  # reduceat repeats a value for empty rows
        return scorer.base + sums

    def nearest(self, scorer: FingerprintScorer, k: int, exclude: Collection[str] = (),
                formula: str | None = None) -> list[tuple[int, float]]:
        """``(row, score)`` of the ``k`` structures the posterior scores best, best first, leaving out those whose
        InChIKey first block is in ``exclude`` (an evaluation leaves out the true structure) and those of
        ``formula`` (the spectrum's own: an analog lends fragments; a structure of the formula itself would be an
        answer, which is the structure library's job, not deep search's)."""
        scores = self.scores(scorer)
        if formula is not None:
            scores[self.library.rows_of_formula(formula)] = -np.inf
        out: list[tuple[int, float]] = []
        for row in np.argsort(-scores, kind="stable"):
            if not np.isfinite(scores[row]):
                break
            if self.library.inchikey14(int(row)) not in exclude:
                out.append((int(row), float(scores[row])))
                if len(out) == k:
                    break
        return out


def analog_bits_path(library: StructureLibrary, folder: Path) -> Path:
    return folder / f"analogs-{library.checksum[:32]}.npz"


def open_analog_index(library: StructureLibrary, folder: str | Path | None = None, cancel: CancelFn | None = None,
                      ) -> Generator[AnalogProgress, None, AnalogIndex]:
    """The :class:`AnalogIndex` of ``library``: its stored bits, the cached file, or computed now (and cached); kept
    for :func:`analog_index_of` as long as the library lives."""
    index = yield from _open(library, folder, cancel)
    _OPENED[library] = index
    return index


def analog_index_of(library: StructureLibrary) -> AnalogIndex:
    """The :class:`AnalogIndex` opened for ``library`` before (``msgpt predict --effort deep`` opens it with a
    progress bar), or opened now without progress."""
    index = _OPENED.get(library)
    if index is None:
        index = run_to_end(open_analog_index(library))
    return index


def _open(library: StructureLibrary, folder, cancel) -> Generator[AnalogProgress, None, AnalogIndex]:
    if not library.lazy_bits:
        return AnalogIndex(library, library._bits_offsets, library._bits)
    from engine.library.cache import library_cache_dir

    folder = Path(folder) if folder is not None else library_cache_dir()
    path = analog_bits_path(library, folder)
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            if str(z["format"]) == FORMAT and len(z["offsets"]) == len(library) + 1:
                return AnalogIndex(library, z["offsets"], z["bits"])
    n = len(library)
    offsets = np.zeros(n + 1, dtype=np.int64)
    chunks = []
    for row in range(n):
        if row % PROGRESS_EVERY == 0:
            check_cancel(cancel)
            yield AnalogProgress(library.name, row, n)
        bits = morgan_bits_from_smiles(library.smiles(row))
        bits = np.zeros(0, dtype=np.uint16) if bits is None else bits.astype(np.uint16)
        chunks.append(bits)
        offsets[row + 1] = offsets[row] + len(bits)
    yield AnalogProgress(library.name, n, n)
    bits = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint16)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, format=np.array(FORMAT), offsets=offsets, bits=bits)
    tmp.replace(path)
    return AnalogIndex(library, offsets, bits)
