"""What the app shows beside the candidates, without Qt: a spectrum's posterior and its top bits, scores
of structures the user proposes, the known-structures list, and the posterior export job.

Long work (exporting many posteriors, reading a large list of known structures) is a generator of
progress events like :mod:`msgpt_gui.logic.jobs`, run by a :class:`~msgpt_gui.workers.GeneratorWorker`.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.elucidation.pipeline import QueryParams, SpectrumSession, compute_posterior, require_usable
from engine.errors import MsgptError
from engine.files.posteriors import PosteriorRecord, PosteriorWriter, posterior_info, record_for_spectrum
from engine.insight.novelty import StructureList, scan_structure_list
from engine.model.known import KnownStructures
from engine.model.querying import band_thresholds, build_queries
from engine.progress import CancelFn, check_cancel


# -- a spectrum's posterior -----------------------------------------------------------------------
def entry_posterior(entry, bundle) -> np.ndarray:
    """π of an entry's spectrum: the one its last result carries, or computed now (the encoder only). Raises :class:`~engine.errors.MsgptError` saying why the model cannot run on it."""
    if entry.spectrum is None:
        raise MsgptError(entry.reason or "this record has no usable spectrum")
    result = entry.result
    if result is not None and result.posterior is not None and result.spectrum is entry.spectrum \
            and entry.model_checksum == bundle.checksum:
        return result.posterior
    require_usable(bundle, entry.spectrum)
    return compute_posterior(bundle, entry.spectrum)


def scoring_session(entry, bundle, libraries=()) -> SpectrumSession:
    """A session of the entry's spectrum for scoring (its posterior reused; the entry's own sample pool is
    left alone), searching the enabled ``libraries`` as a run does."""
    return SpectrumSession(bundle, entry.spectrum, posterior=entry_posterior(entry, bundle), libraries=libraries)


@dataclass(frozen=True)
class BitRow:
    """One bit of a spectrum's posterior, as the bits table shows it."""

    bit: int
    probability: float
    in_queries: int  # how many of the M band queries hold it
    n_queries: int
    environments: tuple  # engine.model.bitlegend.Environment, most frequent first
    n_with_bit: int  # corpus molecules in the legend's sample that set it
    in_candidate: bool | None  # None: no candidate selected


ORDERS = ("probability", "specific")


def bit_order(posterior: np.ndarray, legend, order: str = "probability") -> np.ndarray:
    """Bits from first to last: by π (``probability``), or by how much π exceeds the bit's frequency in the
    corpus (``specific``: π·log(π/f), f the share of the legend's molecules with the bit), which puts the
    predicted substructures that are rare in the corpus before the ubiquitous CH3 and CH2 bits."""
    if order not in ORDERS:
        raise MsgptError(f"Unknown bit order {order!r}; use one of {', '.join(ORDERS)}.")
    p = np.asarray(posterior, dtype=np.float64)
    if order == "probability" or legend is None or not legend.n_molecules:
        return np.argsort(-p, kind="stable")
    floor = 1.0 / (legend.n_molecules + 1)
    f = np.array([max(legend.frequency(b), floor) for b in range(p.size)])
    return np.argsort(-(p * np.log(np.maximum(p, 1e-12) / f)), kind="stable")


def top_bits(posterior: np.ndarray, bundle, params: QueryParams, n: int = 25,
             candidate_bits: np.ndarray | None = None, order: str = "probability",
             polarity: str | None = None) -> list[BitRow]:
    """The first ``n`` bits (:func:`bit_order`) with their legend entries and how many band queries hold them
    (the band of the spectrum's ``polarity``)."""
    posterior = np.asarray(posterior)
    order = bit_order(posterior, bundle.bit_legend, order)[:n]
    thresholds = band_thresholds(bundle.calibration.for_polarity(polarity), params.kappa_min, params.kappa_max, params.groups)
    held = np.zeros(posterior.size, dtype=np.int64)
    for q in build_queries(posterior, thresholds):
        held[q.bits] += len(q.threshold_indices)
    legend = bundle.bit_legend
    have = set(np.asarray(candidate_bits).tolist()) if candidate_bits is not None else None
    return [BitRow(int(b), float(posterior[b]), int(held[b]), len(thresholds),
                   legend.environments(int(b)) if legend is not None else (),
                   legend.n_with_bit(int(b)) if legend is not None else 0,
                   None if have is None else int(b) in have)
            for b in order]


# -- fragment pictures ----------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def depict_fragment_png(smiles: str, width: int, height: int) -> bytes | None:
    """PNG of a legend fragment (a partial molecule: aromatic atoms outside a full ring stay aromatic);
    the centre atom, written first, is highlighted. None when it cannot be drawn."""
    from rdkit import rdBase
    from rdkit.Chem import rdDepictor
    from rdkit.Chem.Draw import rdMolDraw2D

    from engine.model.bitlegend import fragment_mol

    mol = fragment_mol(smiles)
    if mol is None or width < 8 or height < 8:
        return None
    with rdBase.BlockLogs():
        try:
            rdDepictor.Compute2DCoords(mol)
            drawer = rdMolDraw2D.MolDraw2DCairo(int(width), int(height))
            opts = drawer.drawOptions()
            opts.padding = 0.15
            opts.explicitMethyl = True  # a CH3 end of a fragment is written, not a bare line end
            opts.highlightRadius = 0.25
            opts.minFontSize = max(7, int(min(width, height) / 7))
            opts.maxFontSize = max(opts.minFontSize + 1, int(min(width, height) / 4))
            drawn = rdMolDraw2D.PrepareMolForDrawing(mol, kekulize=False, addChiralHs=False)
            drawer.DrawMolecule(drawn, highlightAtoms=[0], highlightAtomColors={0: (0.55, 0.78, 1.0)},
                                highlightBonds=[])
            drawer.FinishDrawing()
        except (RuntimeError, ValueError):
            return None
    return drawer.GetDrawingText()


# -- jobs -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    text: str = ""


@dataclass(frozen=True)
class PosteriorsWritten:
    path: str
    n_written: int
    skipped: tuple[str, ...]  # "id: reason"


def export_posteriors(path: str | Path, bundle, items: Sequence[tuple], params: QueryParams,
                      cancel: CancelFn | None = None) -> Generator[Progress, None, PosteriorsWritten]:
    """Write the posteriors of ``items`` (``(spectrum, posterior or None)``) to one ``.npz`` atomically.

    A missing posterior is computed (the encoder alone); a spectrum the model cannot run on is left out
    and named in the result.
    """
    skipped: list[str] = []
    with PosteriorWriter(path, posterior_info(bundle, params)) as writer:
        for i, (spectrum, posterior) in enumerate(items):
            check_cancel(cancel)
            try:
                if posterior is None:
                    record = record_for_spectrum(bundle, spectrum, params)
                else:
                    cal = bundle.calibration.for_polarity(spectrum.polarity)
                    thresholds = band_thresholds(cal, params.kappa_min, params.kappa_max, params.groups)
                    record = PosteriorRecord.of(spectrum, posterior, thresholds)
            except MsgptError as e:
                skipped.append(f"{spectrum.id}: {e}")
                continue
            writer.write(record)
            yield Progress(i + 1, len(items), f"Posteriors: {i + 1}/{len(items)} spectra")
        check_cancel(cancel)
    return PosteriorsWritten(str(path), writer.n, tuple(skipped))


@dataclass(frozen=True)
class KnownList:
    path: str
    known: KnownStructures
    n_rows: int
    n_problems: int
    problems: tuple[str, ...]


def read_known_list(path: str | Path, cancel: CancelFn | None = None) -> Generator[Progress, None, KnownList]:
    """Read a user's list of known structures (SMILES / InChIKeys / SDF), with progress."""
    name = Path(path).name
    scan = scan_structure_list(path, max_problems=5)
    while True:
        try:
            n_rows = next(scan)
        except StopIteration as done:
            listing: StructureList = done.value
            break
        check_cancel(cancel)
        yield Progress(n_rows, 0, f"Reading {name}: {n_rows:,} rows")
    return KnownList(str(path), listing.known(), listing.n_rows, listing.n_problems, listing.problems)
