"""Substructure labels of annotated peaks: the auxiliary task of MIST's MAGMa step.

Every peak token of a training spectrum carries a neutral subformula ``S`` of the precursor's formula
(:mod:`engine.model.featurize`). When the spectrum's structure is known, a fragment of it with that formula
says *which part* of the molecule the peak is; MIST labels peaks this way (with MAGMa) and trains the
encoder to predict each peak's fragment fingerprint from the peak's token, so that the peak embeddings
learn substructures that the root token's fingerprint head can read.

The fragments are the bond-cleavage pieces of :func:`engine.spectra.fragments.fragment_pieces` (up to
``max_breaks`` cuts, breadth first). A peak gets the piece whose heavy atoms match ``S`` exactly and
whose hydrogens differ by at most ``h_shift`` (rearrangements), choosing the smallest hydrogen
difference, then the fewest cuts, then the piece reached first: deterministic, and the simplest
explanation, as MAGMa scores fewer and cheaper cuts better. A peak no piece matches has no label (it
adds nothing to the loss). The label is the piece's Morgan fingerprint (radius 2, stereo removed)
computed on the piece as a molecule of its own (the cut bonds capped by hydrogens), folded to
``n_bits`` bits (RDKit's Morgan bit at a length is the hash modulo that length).

Labels depend on the structure and the peak's formula only, so each (structure, formula) pair is
labelled once; :func:`fragment_labels` caches the table next to the labelled-spectra cache.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from engine import paths
from engine.chem import molecules as chem
from engine.chem.formula import ELEMENT_INDEX, ELEMENTS
from engine.errors import ConfigError
from engine.spectra.fragments import MAX_STATES, Pieces, fragment_pieces, piece_fingerprint
from engine.spectra.io import iter_spectra

from training.data.spectra import LabelledSpectra, file_sha256

FORMAT_VERSION = 1
_H = ELEMENT_INDEX["H"]


@dataclass(frozen=True)
class SubstructureSettings:
    n_bits: int = 512
    max_breaks: int = 2
    h_shift: int = 2
    radius: int = 2

    def __post_init__(self):
        if not isinstance(self.n_bits, int) or self.n_bits < 8:
            raise ConfigError(f"`n_bits` of the fragment fingerprints must be an integer >= 8, got {self.n_bits!r}.")
        if not isinstance(self.max_breaks, int) or not 1 <= self.max_breaks <= 3:
            raise ConfigError(f"`max_breaks` must be 1, 2 or 3 bond cuts, got {self.max_breaks!r}.")
        if not isinstance(self.h_shift, int) or not 0 <= self.h_shift <= 4:
            raise ConfigError(f"`h_shift` must be an integer number of hydrogens in [0, 4], got {self.h_shift!r}.")
        if not isinstance(self.radius, int) or self.radius < 0:
            raise ConfigError(f"`radius` must be a non-negative integer, got {self.radius!r}.")


def assign_pieces(pieces: Pieces, formulas: np.ndarray, h_shift: int) -> np.ndarray:
    """For each row of ``formulas`` (``(k, 14)`` neutral subformulas), the index of its piece, or -1.

    Heavy atoms must match exactly and hydrogens within ``h_shift``; ties go to the smallest hydrogen
    difference, then the fewest cuts, then the piece reached first.
    """
    formulas = np.asarray(formulas, dtype=np.int64).reshape(-1, pieces.formulas.shape[1])
    heavy = np.ones(pieces.formulas.shape[1], dtype=bool)
    heavy[_H] = False
    by_heavy: dict[bytes, list[int]] = {}
    for i, f in enumerate(pieces.formulas):
        by_heavy.setdefault(f[heavy].tobytes(), []).append(i)
    out = np.full(len(formulas), -1, dtype=np.int64)
    for j, f in enumerate(formulas):
        best = None
        for i in by_heavy.get(f[heavy].tobytes(), ()):
            dh = abs(int(pieces.formulas[i, _H]) - int(f[_H]))
            if dh <= h_shift and (best is None or (dh, pieces.breaks[i], i) < best):
                best = (dh, int(pieces.breaks[i]), i)
        if best is not None:
            out[j] = best[2]
    return out


def structure_labels(mol: chem.Mol, formulas: np.ndarray, settings: SubstructureSettings = SubstructureSettings()
                     ) -> tuple[list[np.ndarray | None], bool]:  # fmt: skip
    """Fragment fingerprint (or ``None``) of each neutral subformula in ``formulas`` for the structure ``mol``,
    and whether its piece enumeration was complete (very large molecules stop at a cap)."""
    pieces, complete = fragment_pieces(mol, settings.max_breaks, MAX_STATES)
    assigned = assign_pieces(pieces, formulas, settings.h_shift)
    cache: dict[int, np.ndarray] = {}
    out: list[np.ndarray | None] = []
    for i in assigned:
        if i < 0:
            out.append(None)
            continue
        if i not in cache:
            cache[i] = piece_fingerprint(mol, pieces.atom_indices(int(i)), settings.n_bits, settings.radius)
        out.append(cache[i])
    return out, complete


@dataclass(frozen=True, eq=False)
class FragmentLabels:
    """Per-token fragment fingerprints of one :class:`LabelledSpectra` (its tokens, in its order)."""

    token_label: np.ndarray  # (T,) int64 row of the table, -1 = no label (every root token)
    table_offsets: np.ndarray  # (F + 1,) int64
    table_bits: np.ndarray  # (sum,) uint16 sorted bits of each table row
    n_bits: int
    summary: dict

    def targets(self, data: LabelledSpectra, indices, n_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(targets (B, P, n_bits) float32, labelled (B, P) bool)`` for the spectra ``indices`` of ``data``,
        padded to ``n_tokens`` as :func:`engine.model.featurize.collate` pads the batch."""
        targets = np.zeros((len(indices), n_tokens, self.n_bits), dtype=np.float32)
        labelled = np.zeros((len(indices), n_tokens), dtype=bool)
        for row, i in enumerate(indices):
            start, stop = data.token_offsets[i], data.token_offsets[i + 1]
            for t, label in enumerate(self.token_label[start:stop]):
                if label >= 0:
                    labelled[row, t] = True
                    targets[row, t, self.table_bits[self.table_offsets[label]:self.table_offsets[label + 1]]] = 1.0
        return torch.from_numpy(targets), torch.from_numpy(labelled)


def concatenate_labels(parts: Sequence[FragmentLabels]) -> FragmentLabels:
    """The labels of spectra concatenated in the same order (:meth:`LabelledSpectra.concatenate`)."""
    if not parts:
        raise ConfigError("Nothing to concatenate: give at least one FragmentLabels.")
    bits = {p.n_bits for p in parts}
    if len(bits) != 1:
        raise ConfigError(f"Fragment labels of {sorted(bits)} bits cannot be joined; make them with the same n_bits.")
    token_label, shift = [], 0
    for p in parts:
        token_label.append(np.where(p.token_label >= 0, p.token_label + shift, -1))
        shift += len(p.table_offsets) - 1
    lengths = np.concatenate([np.diff(p.table_offsets) for p in parts])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return FragmentLabels(np.concatenate(token_label).astype(np.int64), offsets,
                          np.concatenate([p.table_bits for p in parts]).astype(np.uint16), parts[0].n_bits,
                          {"parts": [p.summary for p in parts]})  # fmt: skip


@dataclass(frozen=True)
class LabelProgress:
    structures_done: int
    structures: int
    elapsed_s: float


def labels_cache_path(mgf: str | Path, settings: SubstructureSettings, cache_dir: str | Path | None) -> Path:
    """Where the fragment labels of the structures of ``mgf`` with ``settings`` are cached."""
    key = json.dumps(
        {"version": FORMAT_VERSION, "settings": asdict(settings), "file": file_sha256(mgf)}, sort_keys=True
    )
    folder = Path(cache_dir) if cache_dir is not None else paths.cache_dir() / "labelled_spectra"
    return folder / f"fragment-labels-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"


def structures_of(mgf: str | Path, keys: set[str]) -> dict[str, str]:
    """The first parseable SMILES of each first InChIKey block in ``keys``, read from the labelled ``mgf``."""
    found: dict[str, str] = {}
    for item in iter_spectra(mgf):
        key = (getattr(item, "inchikey", None) or (getattr(item, "metadata", None) or {}).get("inchikey", ""))[:14]
        smiles = getattr(item, "smiles", None)
        if key in keys and key not in found and smiles and chem.mol_from_smiles(smiles) is not None:
            found[key] = smiles
            if len(found) == len(keys):
                break
    return found


class _Table:
    """The cache: one row per (structure, peak formula) pair, with its fragment fingerprint or none."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[tuple[str, bytes], np.ndarray | None] = {}
        if path.is_file():
            with np.load(path, allow_pickle=False) as z:
                offsets, bits = z["offsets"], z["bits"]
                for i, (key, formula, ok) in enumerate(zip(z["structure"].tolist(), z["formula"], z["ok"])):
                    fp = bits[offsets[i]:offsets[i + 1]] if ok else None
                    self.rows[(key, formula.astype(np.int64).tobytes())] = fp

    def save(self) -> None:
        items = list(self.rows.items())
        fps = [fp if fp is not None else np.zeros(0, np.uint16) for _, fp in items]
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(f) for f in fps])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.stem + ".tmp.npz")
        np.savez(tmp, structure=np.array([k for (k, _), _ in items], dtype=str),
                 formula=np.array([np.frombuffer(f, dtype=np.int64) for (_, f), _ in items], dtype=np.int16).reshape(
                     len(items), len(ELEMENTS)),
                 ok=np.array([fp is not None for _, fp in items], dtype=bool), offsets=offsets,
                 bits=np.concatenate(fps).astype(np.uint16) if fps else np.zeros(0, np.uint16))  # fmt: skip
        tmp.replace(self.path)


def fragment_labels(
    data: LabelledSpectra, mgf: str | Path, settings: SubstructureSettings = SubstructureSettings(), *,
    cache_dir: str | Path | None = None,
) -> Iterator[LabelProgress]:  # fmt: skip
    """Yield progress while labelling the peak tokens of ``data`` (read from ``mgf``); *return* the labels.

    Use ``labels = yield from fragment_labels(...)``. The (structure, formula) pairs are cached per file and
    settings, so any selection of the same file's spectra (a cross-fitting fold, a subset) reuses them.
    """
    t0 = time.monotonic()
    table = _Table(labels_cache_path(mgf, settings, cache_dir))
    keys = data.inchikey14.astype(str)
    token_struct = np.repeat(keys, np.diff(data.token_offsets))
    is_root = np.zeros(len(data.formulas), dtype=bool)
    is_root[data.token_offsets[:-1]] = True
    formula_keys = [f.tobytes() for f in np.asarray(data.formulas, dtype=np.int64)]
    missing: dict[str, dict[bytes, None]] = {}  # structure -> its unlabelled peak formulas (ordered)
    for t in np.flatnonzero(~is_root):
        if (token_struct[t], formula_keys[t]) not in table.rows:
            missing.setdefault(token_struct[t], {})[formula_keys[t]] = None
    if missing:
        smiles = structures_of(mgf, set(missing))
        structures = sorted(missing)
        for n, key in enumerate(structures):
            forms = list(missing[key])
            mol = chem.mol_from_smiles(smiles.get(key))
            fps: list[np.ndarray | None] = [None] * len(forms)
            if mol is not None:
                chem.remove_stereo(mol)
                queries = np.array([np.frombuffer(f, dtype=np.int64) for f in forms])
                try:
                    fps, _ = structure_labels(mol, queries, settings)
                except ConfigError:  # an element fragments do not support: no labels for this structure
                    pass
            for f, fp in zip(forms, fps):
                table.rows[(key, f)] = None if fp is None else fp.astype(np.uint16)
            if (n + 1) % 100 == 0 or n + 1 == len(structures):
                yield LabelProgress(n + 1, len(structures), time.monotonic() - t0)
                if (n + 1) % 500 == 0:
                    table.save()  # an interrupted run keeps what it labelled
        table.save()
    rows: dict[tuple[str, bytes], int] = {}
    fps_out: list[np.ndarray] = []
    token_label = np.full(len(data.formulas), -1, dtype=np.int64)
    for t in np.flatnonzero(~is_root):
        pair = (token_struct[t], formula_keys[t])
        fp = table.rows[pair]
        if fp is not None:
            if pair not in rows:
                rows[pair] = len(fps_out)
                fps_out.append(fp)
            token_label[t] = rows[pair]
    offsets = np.zeros(len(fps_out) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in fps_out])
    bits = np.concatenate(fps_out).astype(np.uint16) if fps_out else np.zeros(0, dtype=np.uint16)
    peaks = int((~is_root).sum())
    summary = {"structures": len(set(keys.tolist())), "structures_labelled_now": len(missing), "peak_tokens": peaks,
               "labelled_peak_tokens": int((token_label >= 0).sum()),
               "labelled_share": round(float((token_label >= 0).sum()) / max(peaks, 1), 4),
               "distinct_fragments": len(fps_out), "settings": asdict(settings),
               "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip
    return FragmentLabels(token_label, offsets, bits, settings.n_bits, summary)
