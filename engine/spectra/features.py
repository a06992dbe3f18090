"""Precursor features of an LC-MS/MS run: the MS2 scans of one precursor, merged into one spectrum.

A data-dependent run triggers MS2 on the same ion again and again while it elutes (5 scans of one
pesticide in 17 s are common). Each scan alone is a noisy copy of the same spectrum; elucidating
them one by one gives 5 results for one compound. A :class:`Feature` is one precursor: its scans,
their **consensus spectrum**, and the MS1 evidence of the precursor (isotope pattern, co-detected
adducts) from the run's survey scans.

Grouping (:func:`group_scans`), in two steps that do not depend on the order of the scans:

1. **m/z**: scans sorted by precursor m/z are cut wherever two neighbours differ by more than
   ``max(mz_tol_ppm * 1e-6 * m/z, mz_tol_da)`` (default 10 ppm or 5 mDa);
2. **retention time**: each m/z group sorted by retention time is cut wherever two consecutive
   scans lie more than ``rt_gap_s`` apart (default 30 s). Isomers at one m/z that elute apart
   become separate features; an ion re-triggered all through a peak (or a background ion) stays one;
3. **precursor jitter** (with survey scans): an instrument may write one ion's precursor m/z with more
   scatter than the tolerance (a TripleTOF pesticide at 304.1157 and 304.1210). Groups within
   ``jitter_ppm`` (default 30 ppm) whose retention times meet within ``rt_gap_s`` join when the survey
   scans around them show one ion there (a peak near either m/z, never two different ones, one near
   each); two co-eluting ions that MS1 resolves stay apart.

Scans without a retention time are features of their own.

Merging (:func:`merge_scans`), the consensus spectrum of ``n`` scans:

1. each scan is scaled to its base peak (1.0), so a strong scan does not outvote the others;
2. all peaks are pooled and sorted by m/z; neighbours closer than ``max(fragment_tol_ppm * 1e-6
   * m/z, fragment_tol_da)`` (default 10 ppm or 2 mDa) form one cluster (one fragment ion);
3. a cluster's m/z is the intensity-weighted mean of its peaks, its intensity the sum of the scaled
   intensities divided by ``n`` (the mean relative intensity; a scan without the peak counts 0);
4. with ``n >= min_scans_for_fraction`` (default 3) scans, a cluster is kept only when at least
   ``min_scan_fraction`` (default half) of the scans hold it: noise peaks come and go, fragments stay.
   With 2 scans every cluster is kept; a single scan is its own consensus, unchanged.

MGF libraries hold one spectrum per record, already merged; with ``grouping="auto"`` (default) each
record is its own feature, unchanged, and only mzML runs are grouped. ``grouping="never"`` keeps every
scan of a run as its own feature, unchanged (with its MS1 evidence); ``"always"`` groups MGF too.

Adduct groups (``adduct_groups``, default on): once a run's features are made, those that are ions of one compound
(an ``[M+H]+`` and its ``[M+Na]+``, ...) are joined into compound groups by :mod:`engine.spectra.adduct_groups`
(co-eluting apexes within the run's measured peak width, an m/z difference of two known ion types, correlated MS1
traces); each member feature holds its :class:`~engine.spectra.adduct_groups.CompoundGroup` (``group``) and its
spectrum's metadata ``compound_group`` and ``group_ion_type`` (:func:`~engine.spectra.adduct_groups.group_features`).
Only runs read whole (mzML, not ``grouping="never"``) with survey scans are grouped. A file's features as they stream
(:func:`~engine.spectra.run_features.iter_features`) are :mod:`engine.spectra.run_features`'s; this module makes
them, and imports numpy, the adduct groups' classes and the spectrum classes of this package.

MS1 evidence (:func:`ms1_evidence`): among the survey scans within ``ms1_rt_pad_s`` of the
feature's retention-time range (and those its scans name as their precursor scan), the one where the
precursor peak is most intense (the apex seen by MS1) and up to ``ms1_scans`` (default 5) of the most
intense whose precursor peak holds at least ``ms1_apex_fraction`` (default 30%) of the apex's: their
survey peaks from ``ms1_window_da`` below to ``ms1_window_da`` above the precursor are averaged (one
scan's isotope ratios are noisy, and the apex scan's M may be saturated) and kept for the isotope
pattern and co-detected adducts (:mod:`engine.formulas.candidates`); the feature's precursor m/z
becomes the averaged precursor peak's m/z.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.errors import ConfigError
from engine.spectra.adduct_groups import CompoundGroup, GroupConfig
from engine.spectra.spectrum import Spectrum, SurveyScan

GROUPINGS = ("auto", "always", "never")


@dataclass(frozen=True)
class FeatureConfig:
    """How MS2 scans become features and how their spectra merge (see the module notes)."""

    mz_tol_ppm: float = field(default=10.0, metadata={"help": "precursor m/z agreement, ppm"})
    mz_tol_da: float = field(default=0.005, metadata={"help": "precursor m/z agreement, Da (the larger wins)"})
    rt_gap_s: float = field(default=30.0, metadata={"help": "longest gap between consecutive scans of a feature, s"})
    jitter_ppm: float = field(default=30.0, metadata={
        "help": "features this close in precursor m/z join when the MS1 trace shows one ion there (0: never)"})
    fragment_tol_ppm: float = field(default=10.0, metadata={"help": "fragment peaks merged across scans, ppm"})
    fragment_tol_da: float = field(default=0.002, metadata={"help": "fragment peaks merged across scans, Da"})
    min_scan_fraction: float = field(default=0.5, metadata={"help": "share of scans a fragment must be in"})
    min_scans_for_fraction: int = field(default=3, metadata={"help": "scans needed before that share applies"})
    ms1_rt_pad_s: float = field(default=5.0, metadata={"help": "survey scans this far around the feature are searched"})
    ms1_window_da: float = field(default=40.0, metadata={"help": "survey peaks kept around the precursor, Da each side"})
    ms1_scans: int = field(default=5, metadata={"help": "survey scans around the apex averaged (isotope pattern)"})
    ms1_apex_fraction: float = field(default=0.3, metadata={
        "help": "a survey scan is averaged when its precursor peak holds this share of the apex's"})
    grouping: str = field(default="auto", metadata={
        "help": "auto: group mzML runs, keep MGF records as they are; always; never (one feature per scan)"})
    adduct_groups: bool = field(default=True, metadata={
        "help": "join the features that are ions of one compound ([M+H]+ and [M+Na]+, ...) into compound groups"})
    groups: GroupConfig = field(default_factory=GroupConfig, metadata={"help": "how compound groups are found"})

    def __post_init__(self):
        for name in ("mz_tol_ppm", "mz_tol_da", "rt_gap_s", "jitter_ppm", "fragment_tol_ppm", "fragment_tol_da",
                     "ms1_rt_pad_s", "ms1_window_da"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ConfigError(f"`{name}` must be a number >= 0, got {value!r}.")
        if self.mz_tol_ppm == 0 and self.mz_tol_da == 0:
            raise ConfigError("`mz_tol_ppm` and `mz_tol_da` are both 0; give at least one tolerance > 0.")
        if self.fragment_tol_ppm == 0 and self.fragment_tol_da == 0:
            raise ConfigError("`fragment_tol_ppm` and `fragment_tol_da` are both 0; give at least one tolerance > 0.")
        if not (0 < self.min_scan_fraction <= 1):
            raise ConfigError(f"`min_scan_fraction` must be in (0, 1], got {self.min_scan_fraction!r}.")
        if isinstance(self.ms1_scans, bool) or not isinstance(self.ms1_scans, int) or self.ms1_scans < 1:
            raise ConfigError(f"`ms1_scans` must be a whole number >= 1, got {self.ms1_scans!r}.")
        if not (0 < self.ms1_apex_fraction <= 1):
            raise ConfigError(f"`ms1_apex_fraction` must be in (0, 1], got {self.ms1_apex_fraction!r}.")
        n = self.min_scans_for_fraction
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(f"`min_scans_for_fraction` must be a whole number >= 2, got {n!r}.")
        if self.grouping not in GROUPINGS:
            raise ConfigError(f"`grouping` must be one of {', '.join(GROUPINGS)}, got {self.grouping!r}.")

    def mz_tolerance(self, mz: np.ndarray | float) -> np.ndarray | float:
        return np.maximum(self.mz_tol_ppm * 1e-6 * np.abs(mz), self.mz_tol_da)

    def fragment_tolerance(self, mz: np.ndarray | float) -> np.ndarray | float:
        return np.maximum(self.fragment_tol_ppm * 1e-6 * np.abs(mz), self.fragment_tol_da)


@dataclass(frozen=True, eq=False)
class MS1Evidence:
    """The precursor as a survey scan saw it: its peak and the survey peaks around it."""

    scan_id: str
    retention_time: float | None
    precursor_mz: float  # observed m/z of the precursor peak
    precursor_intensity: float
    mz: np.ndarray  # survey peaks within ms1_window_da of the precursor, sorted
    intensity: np.ndarray
    n_scans: int = 1  # survey scans averaged into mz / intensity


@dataclass(frozen=True, eq=False)
class Feature:
    """One precursor of a run: its MS2 scans, their consensus spectrum and its MS1 evidence."""

    id: str
    index: int  # the file index of its first scan: unique in the file, apart from skipped records' indices
    precursor_mz: float
    rt_min: float | None  # seconds
    rt_max: float | None
    scans: tuple[Spectrum, ...]  # sorted by retention time
    spectrum: Spectrum  # the consensus spectrum (the scan itself for a single scan)
    ms1: MS1Evidence | None = None
    group: CompoundGroup | None = None  # the compound group this feature is a member of (engine.spectra.adduct_groups)
    partners: tuple[Feature, ...] = field(default=(), repr=False)  # the group's other member features (no partners)

    @property
    def group_members(self) -> tuple[Feature, ...]:
        """This feature and its partners in its group's order (m/z), or () outside a group or with partners missing."""
        if self.group is None or len(self.partners) + 1 != len(self.group.members):
            return ()
        by_id = {f.id: f for f in (self, *self.partners)}
        if set(by_id) != {m.feature_id for m in self.group.members}:
            return ()
        return tuple(by_id[m.feature_id] for m in self.group.members)

    @property
    def ion_type_in_group(self) -> str | None:
        """The ion type the feature's compound group gives it, or None outside a group."""
        return None if self.group is None else self.group.ion_type_of(self.id)

    @property
    def n_scans(self) -> int:
        return len(self.scans)

    @property
    def scan_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.scans)

    @property
    def retention_time(self) -> float | None:
        return self.spectrum.retention_time

    def describe(self) -> str:
        """``m/z 313.1798, RT 200.3–215.0 s, 3 scans``."""
        if self.rt_min is None:
            rt = "no RT"
        elif self.rt_max is None or self.rt_max - self.rt_min < 0.05:
            rt = f"RT {self.rt_min:.1f} s"
        else:
            rt = f"RT {self.rt_min:.1f}–{self.rt_max:.1f} s"
        return f"m/z {self.precursor_mz:.4f}, {rt}, {self.n_scans} scan{'s' if self.n_scans != 1 else ''}"


# ----------------------------------------------------------------------------------------------
# Grouping
# ----------------------------------------------------------------------------------------------


def group_scans(
    precursor_mz: Sequence[float], retention_time: Sequence[float | None], config: FeatureConfig = FeatureConfig(),
    survey_scans: Sequence[SurveyScan] = (),
) -> list[np.ndarray]:
    """Indices of the scans of each feature (m/z neighbours, then retention-time runs; module notes); with
    ``survey_scans`` (sorted by retention time), groups that precursor jitter split are joined (step 3).

    Features come sorted by their first retention time (no RT last), then m/z; the scans of a
    feature by retention time.
    """
    mz = np.asarray(precursor_mz, dtype=np.float64)  # (n,)
    rt = np.array([np.nan if t is None else float(t) for t in retention_time], dtype=np.float64)  # (n,)
    if mz.shape != rt.shape:
        raise ConfigError(f"{mz.size} precursor m/z values but {rt.size} retention times.")
    if mz.size == 0:
        return []
    by_mz = np.argsort(mz, kind="stable")
    cuts = np.flatnonzero(np.diff(mz[by_mz]) > config.mz_tolerance(mz[by_mz][1:])) + 1
    groups: list[np.ndarray] = []
    for members in np.split(by_mz, cuts):
        timed = members[~np.isnan(rt[members])]
        groups.extend(np.array([i]) for i in members[np.isnan(rt[members])])
        timed = timed[np.argsort(rt[timed], kind="stable")]
        rt_cuts = np.flatnonzero(np.diff(rt[timed]) > config.rt_gap_s) + 1
        groups.extend(part for part in np.split(timed, rt_cuts) if part.size)
    groups = _join_jitter(groups, mz, rt, survey_scans, config)
    first = [(np.inf if np.isnan(rt[g[0]]) else rt[g[0]], float(np.median(mz[g])), int(g[0])) for g in groups]
    return [groups[k] for k in sorted(range(len(groups)), key=first.__getitem__)]


def _one_ion(mz_a: float, mz_b: float, rt_lo: float, rt_hi: float, survey: Sequence[SurveyScan], config: FeatureConfig) -> bool:
    """Whether the survey scans between ``rt_lo`` and ``rt_hi`` (+- ms1_rt_pad_s) show one ion near both m/z: some
    scan has a peak near one of them, and none has two different peaks, one near each."""
    seen = False
    for scan in survey:
        t = scan.retention_time
        if t is None or t < rt_lo - config.ms1_rt_pad_s or t > rt_hi + config.ms1_rt_pad_s:
            continue
        a = _peak_near(scan, mz_a, float(config.mz_tolerance(mz_a)))
        b = _peak_near(scan, mz_b, float(config.mz_tolerance(mz_b)))
        if a is not None and b is not None and a != b:
            return False
        seen = seen or a is not None or b is not None
    return seen


def _join_jitter(groups: list[np.ndarray], mz: np.ndarray, rt: np.ndarray, survey: Sequence[SurveyScan],
                 config: FeatureConfig) -> list[np.ndarray]:
    """Groups within ``jitter_ppm`` of each other, close in time, whose MS1 trace shows one ion, as one group."""
    if config.jitter_ppm <= 0 or not survey:
        return groups
    untimed = [g for g in groups if np.isnan(rt[g]).any()]
    joined: list[np.ndarray] = []
    for g in sorted((g for g in groups if not np.isnan(rt[g]).any()), key=lambda g: float(np.median(mz[g]))):
        m = float(np.median(mz[g]))
        for k, h in enumerate(joined):
            n = float(np.median(mz[h]))
            if abs(m - n) > config.jitter_ppm * 1e-6 * m:
                continue
            if rt[g].min() > rt[h].max() + config.rt_gap_s or rt[h].min() > rt[g].max() + config.rt_gap_s:
                continue
            if _one_ion(n, m, min(rt[g].min(), rt[h].min()), max(rt[g].max(), rt[h].max()), survey, config):
                both = np.concatenate([h, g])
                joined[k] = both[np.argsort(rt[both], kind="stable")]
                break
        else:
            joined.append(g)
    return joined + untimed


# ----------------------------------------------------------------------------------------------
# Merging
# ----------------------------------------------------------------------------------------------


def merge_scans(
    peaks: Sequence[tuple[np.ndarray, np.ndarray]], config: FeatureConfig = FeatureConfig()
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Consensus of several scans' ``(mz, intensity)`` peaks: ``(mz, intensity, n_scans_with_peak)``.

    The rule is in the module notes; one scan comes back as it was (count 1 per peak).
    """
    if not peaks:
        raise ConfigError("merge_scans needs at least one scan.")
    if len(peaks) == 1:
        mz, intensity = (np.asarray(a, dtype=np.float64) for a in peaks[0])
        return mz.copy(), intensity.copy(), np.ones(mz.size, dtype=np.int64)
    n = len(peaks)
    mz_parts, int_parts, scan_parts = [], [], []
    for k, (mz, intensity) in enumerate(peaks):
        mz, intensity = np.asarray(mz, dtype=np.float64), np.asarray(intensity, dtype=np.float64)
        top = intensity.max(initial=0.0)
        if top <= 0:
            continue  # a scan without signal adds nothing (it still counts in n)
        mz_parts.append(mz)
        int_parts.append(intensity / top)
        scan_parts.append(np.full(mz.size, k, dtype=np.int64))
    if not mz_parts:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    mz, rel, scan = np.concatenate(mz_parts), np.concatenate(int_parts), np.concatenate(scan_parts)  # (P,)
    order = np.argsort(mz, kind="stable")
    mz, rel, scan = mz[order], rel[order], scan[order]
    new_cluster = np.concatenate(([True], np.diff(mz) > config.fragment_tolerance(mz[1:])))  # (P,)
    starts = np.flatnonzero(new_cluster)  # (K,) first peak of each cluster
    cluster = np.cumsum(new_cluster) - 1  # (P,) cluster of each peak
    summed = np.add.reduceat(rel, starts)  # (K,)
    weighted = np.add.reduceat(mz * rel, starts) / summed
    # distinct scans per cluster: unique (cluster, scan) pairs
    pairs = np.unique(cluster * n + scan)
    present = np.bincount(pairs // n, minlength=starts.size)  # (K,)
    keep = np.ones(starts.size, dtype=bool)
    if n >= config.min_scans_for_fraction:
        keep = present >= math.ceil(config.min_scan_fraction * n - 1e-9)
    return weighted[keep], summed[keep] / n, present[keep]


def consensus_spectrum(scans: Sequence[Spectrum], config: FeatureConfig = FeatureConfig(), **fields) -> Spectrum:
    """The scans' consensus as a :class:`Spectrum` (first scan's annotations; ``fields`` override).

    A single scan is returned unchanged unless ``fields`` change it.
    """
    if not scans:
        raise ConfigError("consensus_spectrum needs at least one scan.")
    if len(scans) == 1:
        return dataclasses.replace(scans[0], **fields) if fields else scans[0]
    mz, intensity, present = merge_scans([(s.mz, s.intensity) for s in scans], config)
    if mz.size == 0:  # every peak fell below the share: keep the most common ones
        mz, intensity, present = merge_scans([(s.mz, s.intensity) for s in scans],
                                             dataclasses.replace(config, min_scans_for_fraction=len(scans) + 1))
    return dataclasses.replace(scans[0], mz=mz, intensity=intensity, **fields)


# ----------------------------------------------------------------------------------------------
# MS1 evidence
# ----------------------------------------------------------------------------------------------


def _peak_near(scan: SurveyScan, mz: float, tol: float) -> int | None:
    """Index of the most intense survey peak within ``tol`` of ``mz``, or None."""
    lo, hi = np.searchsorted(scan.mz, mz - tol, "left"), np.searchsorted(scan.mz, mz + tol, "right")
    if hi <= lo:
        return None
    return int(lo + np.argmax(scan.intensity[lo:hi]))


def ms1_evidence(
    precursor_mz: float,
    rt_range: tuple[float | None, float | None],
    survey_scans: Sequence[SurveyScan],
    config: FeatureConfig = FeatureConfig(),
    referenced: Iterable[str] = (),
    polarity: str | None = None,
) -> MS1Evidence | None:
    """The precursor's peak in the survey scan where it is most intense (module notes), or None.

    ``survey_scans`` must be sorted by retention time (as a run gives them); ``referenced`` are the
    ids of survey scans the MS2 scans name as their precursor scan.
    """
    lo_rt, hi_rt = rt_range
    tol = float(config.mz_tolerance(precursor_mz))
    wanted = set(referenced)
    found: list[tuple[float, SurveyScan, int]] = []
    for scan in survey_scans:
        if polarity is not None and scan.polarity not in (None, polarity):
            continue
        near = (
            lo_rt is not None and scan.retention_time is not None
            and lo_rt - config.ms1_rt_pad_s <= scan.retention_time <= (hi_rt if hi_rt is not None else lo_rt) + config.ms1_rt_pad_s
        )
        if not near and scan.id not in wanted:
            continue
        k = _peak_near(scan, precursor_mz, tol)
        if k is not None:
            found.append((float(scan.intensity[k]), scan, k))
    if not found:
        return None
    found.sort(key=lambda f: -f[0])  # stable: the first of equal scans stays the apex
    intensity, scan, k = found[0]
    chosen = [f for f in found if f[0] >= config.ms1_apex_fraction * intensity][: config.ms1_scans]
    mz, summed = _average_windows([(s, float(s.mz[j])) for _, s, j in chosen], config.ms1_window_da)
    apex = float(scan.mz[k])
    j = int(np.argmin(np.abs(mz - apex)))  # the precursor's cluster: its m/z is the scans' weighted mean
    return MS1Evidence(
        scan_id=scan.id, retention_time=scan.retention_time, precursor_mz=float(mz[j]), precursor_intensity=intensity,
        mz=mz, intensity=summed, n_scans=len(chosen),
    )


def _average_windows(windows: Sequence[tuple[SurveyScan, float]], window_da: float, tol_ppm: float = 5.0,
                     tol_da: float = 0.002) -> tuple[np.ndarray, np.ndarray]:
    """The mean of several survey scans' peaks within ``window_da`` of each one's precursor peak.

    Peaks closer than ``max(tol_ppm, tol_da)`` across scans are one peak (its m/z the intensity-weighted
    mean, its intensity the sum over the scans divided by their number); one scan comes back as it is.
    """
    parts = []
    for scan, center in windows:
        lo, hi = np.searchsorted(scan.mz, [center - window_da, center + window_da])
        parts.append((scan.mz[lo:hi], scan.intensity[lo:hi]))
    if len(parts) == 1:
        return parts[0][0].copy(), parts[0][1].copy()
    mz, intensity = (np.concatenate(a) for a in zip(*parts))
    order = np.argsort(mz, kind="stable")
    mz, intensity = mz[order], intensity[order]
    starts = np.flatnonzero(np.r_[True, np.diff(mz) > np.maximum(tol_ppm * 1e-6 * mz[1:], tol_da)])
    summed = np.add.reduceat(intensity, starts)
    weighted = np.add.reduceat(mz * intensity, starts) / np.where(summed > 0, summed, 1.0)
    return weighted, summed / len(parts)


# ----------------------------------------------------------------------------------------------
# Features of a run
# ----------------------------------------------------------------------------------------------


def _common(values: Iterable):
    """The one value all non-None values agree on, else None."""
    found = {v for v in values if v is not None}
    return found.pop() if len(found) == 1 else None


def feature_id(index: int, precursor_mz: float, retention_time: float | None) -> str:
    """``F0007_mz313.1798_rt200.3`` (RT omitted when unknown): sortable, unique in a run, readable."""
    rt = "" if retention_time is None else f"_rt{retention_time:.1f}"
    return f"F{index + 1:04d}_mz{precursor_mz:.4f}{rt}"


def build_feature(
    index: int, scans: Sequence[Spectrum], survey_scans: Sequence[SurveyScan] = (), config: FeatureConfig = FeatureConfig()
) -> Feature:
    """One feature from its scans (sorted by retention time here): consensus spectrum, MS1 evidence.

    ``index`` numbers the feature's id (``F0001``...); the feature's own ``index`` is its first scan's.
    """
    scans = sorted(scans, key=lambda s: (math.inf if s.retention_time is None else s.retention_time))
    times = [s.retention_time for s in scans if s.retention_time is not None]
    rt_min, rt_max = (min(times), max(times)) if times else (None, None)
    precursor = float(np.median([s.precursor_mz for s in scans]))
    polarity = _common(s.polarity for s in scans)
    ms1 = None
    if survey_scans:
        ms1 = ms1_evidence(precursor, (rt_min, rt_max), survey_scans, config,
                           referenced=[s.metadata["precursor_scan_id"] for s in scans if "precursor_scan_id" in s.metadata],
                           polarity=polarity)
    source = "median of the MS2 scans' precursor m/z"
    if ms1 is not None:
        precursor, source = ms1.precursor_mz, f"MS1 survey scan {ms1.scan_id}"
    rt = ms1.retention_time if ms1 is not None and ms1.retention_time is not None else (
        float(np.median(times)) if times else None)
    fid = feature_id(index, precursor, rt)
    metadata = {
        **scans[0].metadata,
        "feature_id": fid,
        "scans": ";".join(s.id for s in scans),
        "n_scans": str(len(scans)),
        "precursor_source": source,
    }
    if rt_min is not None:
        metadata["rt_range_s"] = f"{rt_min:.2f}-{rt_max:.2f}"
    if len(scans) > 1:
        metadata["merged"] = (f"consensus of {len(scans)} scans (per-scan base-peak scaling, peaks within "
                              f"{config.fragment_tol_ppm:g} ppm / {config.fragment_tol_da:g} Da clustered, mean relative "
                              f"intensity" + (f", in >= {config.min_scan_fraction:g} of the scans)"
                                              if len(scans) >= config.min_scans_for_fraction else ")"))
    charge = _common(s.charge or None for s in scans) or 0
    first_scan = min(s.index for s in scans)
    spectrum = consensus_spectrum(
        scans, config, id=fid, index=first_scan, precursor_mz=precursor, retention_time=rt, metadata=metadata,
        adduct=_common(s.adduct for s in scans), formula=_common(s.formula for s in scans),
        charge=charge, polarity=polarity,
    )
    return Feature(id=fid, index=first_scan, precursor_mz=precursor, rt_min=rt_min, rt_max=rt_max,
                   scans=tuple(scans), spectrum=spectrum, ms1=ms1)


def build_features(
    spectra: Sequence[Spectrum], survey_scans: Sequence[SurveyScan] = (), config: FeatureConfig = FeatureConfig()
) -> list[Feature]:
    """Group a run's MS2 scans into features (``config.grouping`` "never": one per scan)."""
    survey = sorted(survey_scans, key=lambda s: (math.inf if s.retention_time is None else s.retention_time))
    if config.grouping == "never":
        return [single_scan_feature(s, survey, config) for s in spectra]
    groups = group_scans([s.precursor_mz for s in spectra], [s.retention_time for s in spectra], config, survey)
    return [build_feature(k, [spectra[i] for i in g], survey, config) for k, g in enumerate(groups)]


def single_scan_feature(
    spectrum: Spectrum, survey_scans: Sequence[SurveyScan] = (), config: FeatureConfig = FeatureConfig()
) -> Feature:
    """One scan as its own feature, unchanged (its id, index and precursor), with its MS1 evidence."""
    feature = library_feature(spectrum)
    if not survey_scans:
        return feature
    rt = spectrum.retention_time
    ms1 = ms1_evidence(spectrum.precursor_mz, (rt, rt), survey_scans, config,
                       referenced=[spectrum.metadata["precursor_scan_id"]] if "precursor_scan_id" in spectrum.metadata else (),
                       polarity=spectrum.polarity)
    return dataclasses.replace(feature, ms1=ms1)


def library_feature(spectrum: Spectrum) -> Feature:
    """A library record (one spectrum per record, MGF) as its own feature: nothing merged or renamed."""
    rt = spectrum.retention_time
    return Feature(id=spectrum.id, index=spectrum.index, precursor_mz=spectrum.precursor_mz, rt_min=rt, rt_max=rt,
                   scans=(spectrum,), spectrum=spectrum, ms1=None)
