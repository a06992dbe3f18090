"""Searching spectral libraries with ms-entropy's Flash entropy search, and what a hit reports.

Modes (:data:`MODES`):

* ``identity`` (default): references whose precursor m/z is within ``precursor_tol_da`` of the query's,
  scored by entropy similarity of their fragments. A rank-1 identity hit that passes the calibrated
  :class:`AnswerThreshold` is a *spectral answer*: the query is most likely that reference's structure.
* ``open``: fragments only, any precursor (an analog of the query may have another mass).
* ``neutral_loss``: neutral losses (precursor - fragment) only, any precursor.
* ``hybrid``: fragments and neutral losses (a peak counts once), any precursor: the analog search of
  Flash entropy. ``open``, ``neutral_loss`` and ``hybrid`` hits are similar compounds, never an answer.

The query is cleaned like the references (:func:`engine.spectral_library.index.clean_peaks`). Every hit
carries its entropy similarity, the matched peaks (pairs of indices into the query's and the reference's
cleaned peaks, fragments and neutral losses apart, for a mirror plot), the precursor difference and the
reference's metadata. Libraries are searched in their ion-mode group: a positive query searches the positive
spectra and those of unknown ion mode; a query of unknown polarity searches all.
"""

from __future__ import annotations

import json
import math
import weakref
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine import paths
from engine.errors import ConfigError

from .identity import IdentityRule, confidence_path, load_rule, user_calibration_path
from .index import (
    MAX_FRAGMENT_TOL_DA,
    Group,
    ReferenceRecord,
    SpectralLibrary,
    clean_peaks,
)
from .records import POLARITIES

MODES = ("identity", "open", "neutral_loss", "hybrid")
#: References of each ion-mode group an identity search keeps before it reports its hits: what the rank-1 hit's
#: other-structure, isomer and same-structure numbers of :class:`SpectralMatches` are read from.
IDENTITY_CANDIDATES = 64
#: A reference of the rank-1 structure counts in ``SpectralMatches.structure_spectra`` from this similarity on.
STRUCTURE_SPECTRA_FLOOR = 0.5
CALIBRATION_FILE = "calibration.json"
# Used only when resources/spectral_library/calibration.json is missing (a source checkout without it).
FALLBACK_THRESHOLD = (0.75, 3)


@dataclass(frozen=True)
class SearchParams:
    """How to search: mode (:data:`MODES`), precursor and fragment tolerances (Da), how many hits to report,
    and the least similarity and matched peaks a reported hit needs."""

    mode: str = "identity"
    precursor_tol_da: float = 0.01
    fragment_tol_da: float = 0.02
    top_k: int = 5
    min_similarity: float = 0.0
    min_matched_peaks: int = 1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"Spectral search mode {self.mode!r} is not one of {', '.join(MODES)}.")
        if not (0 < self.precursor_tol_da <= 1.0):
            raise ConfigError(f"Precursor tolerance {self.precursor_tol_da!r} Da must be > 0 and <= 1 Da "
                              "(e.g. 0.01).")
        if not (0 < self.fragment_tol_da <= MAX_FRAGMENT_TOL_DA):
            raise ConfigError(f"Fragment tolerance {self.fragment_tol_da!r} Da must be > 0 and <= "
                              f"{MAX_FRAGMENT_TOL_DA} Da (the index merges peaks closer than 0.05 Da); e.g. 0.02.")
        if not (isinstance(self.top_k, int) and self.top_k >= 1):
            raise ConfigError(f"top_k {self.top_k!r} must be a whole number >= 1.")
        if not (0.0 <= self.min_similarity <= 1.0):
            raise ConfigError(f"min_similarity {self.min_similarity!r} must be between 0 and 1.")
        if not (isinstance(self.min_matched_peaks, int) and self.min_matched_peaks >= 0):
            raise ConfigError(f"min_matched_peaks {self.min_matched_peaks!r} must be a whole number >= 0.")


@dataclass(frozen=True)
class AnswerThreshold:
    """When a rank-1 identity hit is a spectral answer: similarity and matched peaks at least these and, with a
    calibrated ``rule`` (:class:`engine.spectral_library.identity.IdentityRule`), its probability of being the query's
    structure at least the rule's. The measured rates come with it (``resources/spectral_library/confidence.json``
    and ``calibration.json``, docs/spectral_library.md)."""

    min_similarity: float
    min_matched_peaks: int
    false_answer_rate: float | None = None  # structure-disjoint queries answered at rank 1
    true_answer_rate: float | None = None  # queries of library structures answered correctly
    source: str = ""
    rule: IdentityRule | None = None

    def accepts(self, hit: SpectralHit) -> bool:
        """``hit`` passes the similarity and matched-peak floor (the rule, if any, also needs its search)."""
        return hit.similarity >= self.min_similarity and hit.matched_peaks >= self.min_matched_peaks

    def accepts_first(self, matches: SpectralMatches) -> bool:
        """The rank-1 hit of ``matches`` passes the floor and the calibrated rule."""
        return bool(matches.hits) and self.accepts(matches.hits[0]) and (self.rule is None or
                                                                         self.rule.accepts(matches))


@lru_cache(maxsize=1)
def default_threshold() -> AnswerThreshold:
    """The identification rule shipped beside the bundled library: the calibrated :class:`IdentityRule` of
    ``confidence.json`` with its floor, or without one the similarity and matched-peak threshold of
    ``calibration.json`` (a fixed fallback if both are missing)."""
    rule = load_rule(confidence_path())
    if rule is not None:
        return _rule_threshold(rule, str(confidence_path()))
    path = calibration_path()
    try:
        chosen = json.loads(path.read_text(encoding="utf-8"))["chosen"]
        return AnswerThreshold(float(chosen["min_similarity"]), int(chosen["min_matched_peaks"]),
                               chosen.get("false_answer_rate"), chosen.get("true_answer_rate"), str(path))
    except (OSError, ValueError, KeyError, TypeError):
        return AnswerThreshold(*FALLBACK_THRESHOLD, source="fallback (calibration.json missing)")


@lru_cache(maxsize=16)
def file_threshold(path: str, mtime: float = 0.0) -> AnswerThreshold:
    """The rule of a library's own calibration file (``mtime``: a rewritten file is read again); the shipped rule when
    the file has none."""
    rule = load_rule(path)
    return default_threshold() if rule is None else _rule_threshold(rule, path)


def _rule_threshold(rule: IdentityRule, source: str) -> AnswerThreshold:
    """The threshold of a calibrated rule: its floor, its measured rates, the rule itself."""
    measured = rule.measured or {}
    return AnswerThreshold(rule.min_similarity, rule.min_matched_peaks, measured.get("false_answer_rate"),
                           measured.get("true_answer_rate"), source, rule)


def _mtime(path: str) -> float:
    try:
        return Path(path).stat().st_mtime
    except OSError:
        return 0.0


_CALIBRATION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def library_calibration(library: SpectralLibrary) -> str | None:
    """The library's own calibration file (:func:`engine.spectral_library.identity.user_calibration_path` of the file
    it was read from) when there is one; looked up once per library object."""
    if library not in _CALIBRATION:
        source = getattr(getattr(library, "report", None), "path", "") or ""
        path = user_calibration_path(source) if source else None
        _CALIBRATION[library] = str(path) if path is not None and path.is_file() else ""
    return _CALIBRATION[library] or None


@dataclass(frozen=True)
class SpectralHit:
    """One reference matched by a query. ``fragment_pairs``/``loss_pairs`` are ``(n, 2)`` int arrays of
    (query peak, reference peak) indices into the cleaned peaks: the query's (:attr:`SpectralMatches.query_mz`)
    and the reference's (``reference_mz``/``reference_intensity``, intensities summing to 1), which is what a
    mirror plot draws; ``precursor_delta`` is query minus reference m/z."""

    rank: int
    similarity: float
    matched_peaks: int
    fragment_pairs: np.ndarray
    loss_pairs: np.ndarray
    precursor_delta: float
    reference: ReferenceRecord
    reference_mz: np.ndarray
    reference_intensity: np.ndarray

    @property
    def library(self) -> str:
        return self.reference.library

    @property
    def row(self) -> int:
        return self.reference.row


@dataclass(frozen=True)
class SpectralMatches:
    """The result of searching one query: its cleaned peaks, the hits (best first) and plain-language notes
    (a library of the other ion mode, a query without fragments)."""

    precursor_mz: float
    polarity: str | None
    query_mz: np.ndarray
    query_intensity: np.ndarray
    params: SearchParams
    hits: tuple[SpectralHit, ...] = ()
    notes: tuple[str, ...] = field(default=())
    libraries: tuple[str, ...] = ()
    # identity mode, about the rank-1 hit (0 / None without one), over every reference that scored, not only the
    # reported hits: the distinct structures (first InChIKey block) of its formula the searched libraries hold, its
    # own included; the best similarity of a reference of another structure; the best reference of another structure
    # of the same formula (an isomer) as (similarity, record); the references of its own structure scoring >= 0.5
    formula_structures: int = 0
    other_similarity: float = 0.0
    best_isomer: tuple[float, ReferenceRecord] | None = None
    structure_spectra: int = 0
    # (library name, its own calibration file) of the searched libraries that have one (``msgpt calibrate-library``)
    calibrations: tuple[tuple[str, str], ...] = ()

    def calibration_file(self, library: str) -> str | None:
        """The calibration file of the searched library named ``library`` (None: the shipped one applies)."""
        return dict(self.calibrations).get(library)

    def threshold_for(self, library: str) -> AnswerThreshold:
        """The identification rule of a hit of ``library``: its own calibration's, or the shipped
        :func:`default_threshold`."""
        path = self.calibration_file(library)
        return default_threshold() if path is None else file_threshold(path, _mtime(path))

    def answer(self, threshold: AnswerThreshold | None = None) -> SpectralHit | None:
        """The rank-1 hit when it is a spectral answer: identity mode and passing ``threshold`` (default: the rule
        of its library, :meth:`threshold_for`); ``None`` otherwise."""
        if self.params.mode != "identity" or not self.hits:
            return None
        threshold = threshold or self.threshold_for(self.hits[0].library)
        return self.hits[0] if threshold.accepts_first(self) else None


# ----------------------------------------------------------------------------------------------
# Matched peaks
# ----------------------------------------------------------------------------------------------


def _pairs(q: np.ndarray, r: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices (into ``q``, into ``r``) of values within ``tol``; both sorted ascending, with neighbours
    more than 2 ``tol`` apart, so each value has at most one partner."""
    if q.size == 0 or r.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    idx = np.searchsorted(r, q - tol, side="left")
    ok = idx < r.size
    ok[ok] = r[idx[ok]] <= q[ok] + tol
    return np.flatnonzero(ok), idx[ok]


def matched_peaks(query_mz: np.ndarray, query_precursor: float, ref_mz: np.ndarray, ref_precursor: float,
                  tol: float, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(fragment pairs, neutral-loss pairs) as Flash entropy search counts them in ``mode``: fragments match
    within ``tol``; in ``hybrid`` a neutral loss matches only between peaks not matched as fragments."""
    empty = np.zeros((0, 2), dtype=np.int64)
    fragments = empty
    used_q = np.zeros(query_mz.size, dtype=bool)
    used_r = np.zeros(ref_mz.size, dtype=bool)
    if mode != "neutral_loss":
        qi, ri = _pairs(query_mz.astype(np.float64), ref_mz.astype(np.float64), tol)
        fragments = np.column_stack([qi, ri]) if qi.size else empty
        used_q[qi], used_r[ri] = True, True
    if mode not in ("neutral_loss", "hybrid"):
        return fragments, empty
    q_left, r_left = np.flatnonzero(~used_q)[::-1], np.flatnonzero(~used_r)[::-1]  # losses ascending
    q_loss = query_precursor - query_mz[q_left].astype(np.float64)
    r_loss = ref_precursor - ref_mz[r_left].astype(np.float64)
    qi, ri = _pairs(q_loss, r_loss, tol)
    losses = np.column_stack([q_left[qi], r_left[ri]]) if qi.size else empty
    return fragments, losses


# ----------------------------------------------------------------------------------------------
# Searching
# ----------------------------------------------------------------------------------------------


def _group_scores(group: Group, peaks: np.ndarray, precursor_mz: float, params: SearchParams,
                  exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(group positions, similarities) of the group's spectra that score above zero; library rows in ``exclude``
    never score."""
    core, tol = group.core, params.fragment_tol_da
    if params.mode == "identity":
        lo, hi = group.range_of(precursor_mz, params.precursor_tol_da)
        if lo >= hi:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = core.search(method="open", peaks=peaks, ms2_tolerance_in_da=tol, search_type=1,
                             search_spectra_idx_min=lo, search_spectra_idx_max=hi)[lo:hi]
        offset = lo
    elif params.mode == "hybrid":
        scores, offset = core.search_hybrid(precursor_mz=precursor_mz, peaks=peaks, ms2_tolerance_in_da=tol), 0
    else:
        method = "open" if params.mode == "open" else "neutral_loss"
        scores = core.search(method=method, precursor_mz=precursor_mz, peaks=peaks, ms2_tolerance_in_da=tol,
                             search_type=0)
        offset = 0
    if exclude is not None and exclude.size:
        scores = np.where(np.isin(group.rows[offset:offset + scores.size], exclude), 0.0, scores)
    keep = np.flatnonzero(scores > max(params.min_similarity, 0.0) - 1e-7)
    keep = keep[scores[keep] > 0]
    n = params.top_k * 4 + 8  # room for hits dropped by min_matched_peaks
    if params.mode == "identity":
        n = max(n, IDENTITY_CANDIDATES)  # room for the rank-1 structure's many spectra and its isomers
    if keep.size > n:
        keep = keep[np.argpartition(-scores[keep], n - 1)[:n]]
    return keep + offset, scores[keep]


def _groups_for(polarity: str | None) -> tuple[str, ...]:
    return (polarity, "unknown") if polarity in POLARITIES else ("positive", "negative", "unknown")


_FORMULA_INDEX: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _formula_rows(library: SpectralLibrary) -> dict[str, np.ndarray]:
    """Rows of each formula of ``library`` (built once per library object)."""
    index = _FORMULA_INDEX.get(library)
    if index is None:
        rows: dict[str, list[int]] = defaultdict(list)
        for row, formula in enumerate(library.columns["formula"]):
            if formula:
                rows[formula].append(row)
        index = {f: np.asarray(r, dtype=np.int64) for f, r in rows.items()}
        _FORMULA_INDEX[library] = index
    return index


def formula_structures(libraries: Sequence[SpectralLibrary], formula: str,
                       exclude: Mapping[str, np.ndarray] | None = None) -> int:
    """Distinct structures (first InChIKey block) of ``formula`` that ``libraries`` hold, rows in ``exclude``
    (library name -> rows) left out."""
    keys = set()
    for lib in libraries:
        rows = _formula_rows(lib).get(formula)
        if rows is None:
            continue
        if exclude and exclude.get(lib.name) is not None:
            rows = rows[~np.isin(rows, exclude[lib.name])]
        keys.update(k for k in (lib.columns["inchikey14"][int(r)] for r in rows) if k)
    return len(keys)


def search_peaks(libraries: SpectralLibrary | Sequence[SpectralLibrary], precursor_mz: float, mz, intensity,
                 polarity: str | None = None, params: SearchParams | None = None,
                 exclude: Mapping[str, np.ndarray] | None = None) -> SpectralMatches:
    """Search one query (precursor m/z, peaks, ion mode or ``None``) in one or several libraries. ``exclude``: rows
    of each library (by name) left out of the search, as if the library lacked them (the leave-one-lab-out
    measurements of :mod:`training.calibration.identity_confidence`)."""
    params = params or SearchParams()
    libraries = [libraries] if isinstance(libraries, SpectralLibrary) else list(libraries)
    try:
        precursor_mz = float(precursor_mz)
    except (TypeError, ValueError):
        raise ConfigError(f"Precursor m/z {precursor_mz!r} is not a number.") from None
    if not (0 < precursor_mz < math.inf):
        raise ConfigError(f"Precursor m/z {precursor_mz!r} must be a positive number.")
    if polarity not in (None, *POLARITIES):
        raise ConfigError(f"Polarity {polarity!r} must be 'positive', 'negative' or None.")
    peaks = clean_peaks(precursor_mz, mz, intensity)
    notes = [note for lib in libraries if (note := lib.polarity_note(polarity))]
    if peaks.shape[0] == 0:
        notes.append("The spectrum has no fragment peak to compare (peaks within 1.6 Da of the precursor or "
                     "under 1% of the base peak are not compared).")
    candidates: list[tuple[float, int, int, SpectralLibrary]] = []
    if peaks.shape[0]:
        for li, lib in enumerate(libraries):
            for name in _groups_for(polarity):
                group = lib.groups.get(name)
                if group is None or not len(group):
                    continue
                positions, scores = _group_scores(group, peaks, precursor_mz, params,
                                                  None if exclude is None else exclude.get(lib.name))
                candidates.extend((float(s), li, int(group.rows[p]), lib) for p, s in zip(positions, scores))
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    hits: list[SpectralHit] = []
    for score, _, row, lib in candidates:
        ref_mz, ref_intensity = lib.peaks(row)
        ref_precursor = float(lib.precursor_mz[row])
        fragments, losses = matched_peaks(peaks[:, 0], precursor_mz, ref_mz, ref_precursor,
                                          params.fragment_tol_da, params.mode)
        n_matched = len(fragments) + len(losses)
        if n_matched < params.min_matched_peaks:
            continue
        hits.append(SpectralHit(rank=len(hits) + 1, similarity=min(score, 1.0), matched_peaks=n_matched,
                                fragment_pairs=fragments, loss_pairs=losses,
                                precursor_delta=precursor_mz - ref_precursor, reference=lib.record(row),
                                reference_mz=ref_mz, reference_intensity=ref_intensity))
        if len(hits) == params.top_k:
            break
    query_mz = np.ascontiguousarray(peaks[:, 0])
    query_intensity = np.ascontiguousarray(peaks[:, 1])
    about = {}
    if params.mode == "identity" and hits:
        about = _about_rank1(hits[0], candidates)
        if hits[0].reference.formula:
            about["formula_structures"] = formula_structures(libraries, hits[0].reference.formula, exclude)
    calibrations = tuple((lib.name, path) for lib in libraries if (path := library_calibration(lib)))
    return SpectralMatches(precursor_mz, polarity, query_mz, query_intensity, params, tuple(hits), tuple(notes),
                           tuple(lib.name for lib in libraries), calibrations=calibrations, **about)


def _about_rank1(first: SpectralHit, candidates: Sequence[tuple[float, int, int, SpectralLibrary]]) -> dict:
    """What the references that scored say about the rank-1 hit ``first`` (the fields of :class:`SpectralMatches`
    after ``formula_structures``)."""
    key = first.reference.inchikey14 or first.reference.accession
    formula = first.reference.formula
    other, isomer, same = 0.0, None, 0
    for score, _, row, lib in candidates:  # best first
        k = lib.columns["inchikey14"][row] or lib.columns["accession"][row]
        if k == key:
            same += score >= STRUCTURE_SPECTRA_FLOOR
            continue
        other = max(other, min(score, 1.0))
        if isomer is None and formula and lib.columns["formula"][row] == formula:
            isomer = (min(score, 1.0), lib.record(row))
    return {"other_similarity": other, "best_isomer": isomer, "structure_spectra": int(same)}


def search(libraries: SpectralLibrary | Sequence[SpectralLibrary], spectrum,
           params: SearchParams | None = None) -> SpectralMatches:
    """Search a spectrum (anything with ``precursor_mz``, ``mz``, ``intensity`` and ``polarity``, such as
    :class:`engine.spectra.spectrum.Spectrum`) in one or several libraries."""
    return search_peaks(libraries, spectrum.precursor_mz, spectrum.mz, spectrum.intensity,
                        getattr(spectrum, "polarity", None), params)


def calibration_path() -> Path:
    """``resources/spectral_library/calibration.json``: the shipped threshold and its measured rates."""
    return paths.resources_dir() / "spectral_library" / CALIBRATION_FILE
