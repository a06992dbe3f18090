"""Adduct groups of an LC-MS/MS run: the features that are ions of one compound (issue #56, item 2).

A compound often shows as several precursor features of one run: its ``[M+H]+`` and ``[M+Na]+`` (or
``[M+NH4]+``, ``[M+K]+``, an in-source water loss ``[M-H2O+H]+``; ``[M-H]-`` with ``[M+Cl]-``, ``[M+HCOO]-``,
``[M+CH3COO]-``, ``[M-H2O-H]-`` in negative mode). Each solved alone gives the poorly fragmenting sodium adduct
its own, mostly wrong, answer. As MZmine's ion identity networking and MS-DIAL do, :func:`find_groups` joins
such features into a **compound group**, on three kinds of evidence:

1. **retention time**: the apexes of the two features' MS1 traces (their precursor's intensity over the survey
   scans, :func:`trace_of`; a feature's apex is the trace's highest point within ``apex_search_s`` of its MS2
   scans, so that a later peak of the same m/z, another compound, is not taken for it) lie within ``apex_fraction`` of the run's **peak width**, measured from the run: the
   median full width at half maximum of the features' traces (``peak_width_s`` fixes it instead; with no trace
   to measure, ``default_peak_width_s``);
2. **m/z**: the two precursors are two ion types of :data:`engine.chem.adducts.COMMON_ION_TYPES` (``[M]+``
   left out: it pairs with nothing by a fixed mass) of one neutral mass, within ``max(mz_tol_ppm, mz_tol_da)``;
3. **MS1**: both ions are seen in at least ``min_shared_scans`` of the survey scans across the peak
   (``apex ± peak_width``) and their intensities there correlate (Pearson ``r >= min_correlation``): two
   compounds that merely co-elute rise and fall apart.

A pair that passes all three is an edge with its ion types. Edges are taken strongest first (correlation, then
shared scans, then the closer apexes), and an edge joins its two features' groups only when the result stays
one compound: each feature keeps the ion type its first (strongest) edge gave it, no two members share an ion
type, the members' neutral masses agree and every two members' apexes lie within the peak width. A feature
that fits two groups thus goes to the one with the stronger evidence; the weaker edge is kept in
:attr:`GroupResult.rejected` (never silently merged). Groups are numbered ``G0001``... by their first apex.

Without survey scans there is no MS1 evidence, and no groups (an MGF library's records are never grouped).
:func:`group_features` attaches the groups to a run's features (each member's ``group`` and ``partners``,
:func:`with_partners` again after the features change). What the group then decides (the ion types, one neutral
formula for all members, the member elucidated) is :mod:`engine.formulas.groups`. Imports numpy,
:mod:`engine.chem.adducts`, :mod:`engine.errors` and the spectrum classes; nothing of the model, the app or Qt (the
features are taken as they come: :mod:`engine.spectra.features` imports this module).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.chem.adducts import COMMON_ION_TYPES, neutral_mass_from_precursor
from engine.errors import ConfigError
from engine.timing import staged

#: Ion types without a fixed mass relation to the others (a permanent cation is not a protonated molecule).
UNPAIRED_ION_TYPES = frozenset({"[M]+"})


@dataclass(frozen=True)
class GroupConfig:
    """How features of one compound are found (see the module notes)."""

    mz_tol_ppm: float = field(default=10.0, metadata={"help": "agreement of the members' neutral masses, ppm"})
    mz_tol_da: float = field(default=0.005, metadata={"help": "agreement of the members' neutral masses, Da (larger wins)"})
    peak_width_s: float | None = field(default=None, metadata={
        "help": "apexes of one compound's ions lie this close, s (None: the run's median FWHM, measured)"})
    default_peak_width_s: float = field(default=6.0, metadata={
        "help": "the peak width when the run gives no trace to measure it from, s"})
    min_peak_width_s: float = field(default=2.0, metadata={"help": "a measured peak width is at least this, s"})
    max_peak_width_s: float = field(default=30.0, metadata={"help": "a measured peak width is at most this, s"})
    trace_window_s: float = field(default=60.0, metadata={
        "help": "survey scans this far beyond a feature's MS2 scans make its MS1 trace, s"})
    apex_search_s: float = field(default=10.0, metadata={
        "help": "a feature's apex is its trace's highest point this close to its MS2 scans, s (another peak of the "
                "same m/z further away is another compound)"})
    min_correlation: float = field(default=0.8, metadata={
        "help": "Pearson r of the two ions' intensities across the peak needed to group them (0.8: chosen on "
                "FOLD=train simulated runs, docs/evidence/adduct_groups.md)"})
    min_shared_scans: int = field(default=3, metadata={"help": "survey scans across the peak that hold both ions"})
    apex_fraction: float = field(default=1.0, metadata={
        "help": "two ions of one compound have their apexes within this share of the peak width"})

    def __post_init__(self):
        for name in ("mz_tol_ppm", "mz_tol_da", "default_peak_width_s", "min_peak_width_s", "max_peak_width_s",
                     "trace_window_s", "apex_search_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ConfigError(f"`{name}` must be a number >= 0, got {value!r}.")
        if self.mz_tol_ppm == 0 and self.mz_tol_da == 0:
            raise ConfigError("`mz_tol_ppm` and `mz_tol_da` are both 0; give at least one tolerance > 0.")
        if self.peak_width_s is not None and (isinstance(self.peak_width_s, bool)
                                              or not isinstance(self.peak_width_s, (int, float))
                                              or not (0 < self.peak_width_s < math.inf)):
            raise ConfigError(f"`peak_width_s` must be a number > 0 or None (measured), got {self.peak_width_s!r}.")
        if self.min_peak_width_s > self.max_peak_width_s:
            raise ConfigError(f"`min_peak_width_s` ({self.min_peak_width_s}) is above `max_peak_width_s` "
                              f"({self.max_peak_width_s}); swap them.")
        if isinstance(self.apex_fraction, bool) or not isinstance(self.apex_fraction, (int, float)) or not (
                0 < self.apex_fraction < math.inf):
            raise ConfigError(f"`apex_fraction` must be a number > 0, got {self.apex_fraction!r}.")
        if not (-1 <= self.min_correlation <= 1):
            raise ConfigError(f"`min_correlation` must be in [-1, 1], got {self.min_correlation!r}.")
        n = self.min_shared_scans
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(f"`min_shared_scans` must be a whole number >= 2 (a correlation needs two points), "
                              f"got {n!r}.")

    def tolerance(self, mass: float) -> float:
        return max(self.mz_tol_ppm * 1e-6 * abs(mass), self.mz_tol_da)


@dataclass(frozen=True, eq=False)
class Trace:
    """A feature's precursor over the survey scans around it: ``rt`` (s) and ``intensity`` (0: no peak)."""

    rt: np.ndarray
    intensity: np.ndarray
    apex_rt: float
    apex_intensity: float
    fwhm_s: float | None  # None: too few points above half the apex to say


@dataclass(frozen=True)
class PairEvidence:
    """Why two features may be one compound: their ion types, apex distance, m/z error and MS1 agreement."""

    a: int  # index into the features given to find_groups
    b: int
    ion_a: str
    ion_b: str
    neutral_mass: float
    delta_rt_s: float
    mass_error_da: float
    correlation: float
    shared_scans: int

    @property
    def strength(self) -> tuple:
        return (self.correlation, self.shared_scans, -abs(self.delta_rt_s), -abs(self.mass_error_da))

    def describe(self, ids: Sequence[str] | None = None) -> str:
        name = (lambda i: ids[i]) if ids is not None else str
        return (f"{name(self.a)} {self.ion_a} ~ {name(self.b)} {self.ion_b}: M {self.neutral_mass:.4f}, "
                f"apexes {self.delta_rt_s:+.1f} s apart, r {self.correlation:.2f} over {self.shared_scans} scans")


@dataclass(frozen=True)
class GroupMember:
    """One feature of a compound group and the ion type the group gives it."""

    feature_id: str
    ion_type: str
    precursor_mz: float
    apex_rt: float


@dataclass(frozen=True)
class CompoundGroup:
    """Features of one compound: ``members`` in m/z order, the neutral mass they agree on, the edges that joined them."""

    id: str
    neutral_mass: float
    members: tuple[GroupMember, ...]
    evidence: tuple[PairEvidence, ...]

    def ion_type_of(self, feature_id: str) -> str | None:
        return next((m.ion_type for m in self.members if m.feature_id == feature_id), None)

    def describe(self) -> str:
        """``G0003: M 303.1041 as [M+H]+ F0012, [M+Na]+ F0015``."""
        members = ", ".join(f"{m.ion_type} {m.feature_id}" for m in self.members)
        return f"{self.id}: M {self.neutral_mass:.4f} as {members}"


@dataclass(frozen=True)
class GroupResult:
    """The groups of a run, the peak width used (and whether it was measured), and the edges left out."""

    groups: tuple[CompoundGroup, ...]
    peak_width_s: float
    peak_width_source: str  # "measured (median FWHM of N traces)", "given", "default"
    rejected: tuple[PairEvidence, ...] = ()

    def group_of(self, feature_id: str) -> CompoundGroup | None:
        return next((g for g in self.groups if any(m.feature_id == feature_id for m in g.members)), None)


# ----------------------------------------------------------------------------------------------
# MS1 traces and the run's peak width
# ----------------------------------------------------------------------------------------------


def _intensity_near(scan, mz: float, tol: float) -> float:
    lo, hi = np.searchsorted(scan.mz, [mz - tol, mz + tol])
    return float(scan.intensity[lo:hi].max()) if hi > lo else 0.0


def _scans_between(survey, times: np.ndarray, lo: float, hi: float) -> Sequence:
    i, j = int(np.searchsorted(times, lo, side="left")), int(np.searchsorted(times, hi, side="right"))
    return survey[i:j]


def trace_of(mz: float, rt_lo: float, rt_hi: float, survey: Sequence, times: np.ndarray, tol: float,
             apex_range: tuple[float, float] | None = None) -> Trace | None:
    """The precursor ``mz``'s intensity in the survey scans from ``rt_lo`` to ``rt_hi`` (``survey`` sorted by
    retention time, ``times`` their retention times), its apex the highest point within ``apex_range`` (default:
    anywhere); None when no scan there holds the ion."""
    scans = _scans_between(survey, times, rt_lo, rt_hi)
    if not scans:
        return None
    rt = np.array([s.retention_time for s in scans], dtype=np.float64)
    intensity = np.array([_intensity_near(s, mz, tol) for s in scans], dtype=np.float64)
    near = np.ones(rt.size, dtype=bool) if apex_range is None else (rt >= apex_range[0]) & (rt <= apex_range[1])
    if not near.any():
        return None
    k = int(np.flatnonzero(near)[np.argmax(intensity[near])])
    if intensity[k] <= 0:
        return None
    return Trace(rt=rt, intensity=intensity, apex_rt=float(rt[k]), apex_intensity=float(intensity[k]),
                 fwhm_s=_fwhm(rt, intensity, k))


def _fwhm(rt: np.ndarray, intensity: np.ndarray, k: int) -> float | None:
    """Full width at half maximum around the apex ``k`` (linear interpolation at the half-height crossings); None
    when the peak has fewer than 3 points above half its apex or runs off the trace's ends."""
    half = intensity[k] / 2
    left = k
    while left > 0 and intensity[left - 1] >= half:
        left -= 1
    right = k
    while right < len(intensity) - 1 and intensity[right + 1] >= half:
        right += 1
    if right - left + 1 < 3 or left == 0 or right == len(intensity) - 1:
        return None

    def cross(i_out: int, i_in: int) -> float:
        a, b = intensity[i_out], intensity[i_in]
        return float(rt[i_out] + (rt[i_in] - rt[i_out]) * (half - a) / (b - a)) if b != a else float(rt[i_in])

    return cross(right + 1, right) - cross(left - 1, left)


def run_peak_width(traces: Sequence[Trace | None], config: GroupConfig = GroupConfig()) -> tuple[float, str]:
    """The run's peak width (s) and where it comes from: ``config.peak_width_s`` when given, else the median FWHM
    of the traces that have one (within the config's bounds), else the default."""
    if config.peak_width_s is not None:
        return float(config.peak_width_s), "given"
    widths = [t.fwhm_s for t in traces if t is not None and t.fwhm_s is not None]
    if not widths:
        return float(config.default_peak_width_s), "default (no trace to measure)"
    width = float(np.clip(np.median(widths), config.min_peak_width_s, config.max_peak_width_s))
    return width, f"measured (median FWHM of {len(widths)} traces)"


# ----------------------------------------------------------------------------------------------
# Pairs
# ----------------------------------------------------------------------------------------------


def ion_pairs(polarity: str) -> tuple[tuple[str, str], ...]:
    """The ordered pairs of different ion types of ``polarity`` that join two features (``[M]+`` left out)."""
    ions = [a for a in COMMON_ION_TYPES[polarity] if a not in UNPAIRED_ION_TYPES]
    return tuple((a, b) for a, b in itertools.permutations(ions, 2))


def _correlation(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def ms1_agreement(mz_a: float, mz_b: float, apex_rt: float, width: float, survey: Sequence, times: np.ndarray,
                  config: GroupConfig) -> tuple[float, int]:
    """``(Pearson r, shared scans)`` of two ions' intensities over the survey scans within ``width`` of
    ``apex_rt`` (scans without either ion count 0 for it; r is NaN when one trace is flat)."""
    scans = _scans_between(survey, times, apex_rt - width, apex_rt + width)
    a = np.array([_intensity_near(s, mz_a, config.tolerance(mz_a)) for s in scans])
    b = np.array([_intensity_near(s, mz_b, config.tolerance(mz_b)) for s in scans])
    both = (a > 0) & (b > 0)
    return _correlation(a, b), int(both.sum())


def candidate_pairs(mz: Sequence[float], apex: Sequence[float | None], polarity: Sequence[str], width: float,
                    config: GroupConfig = GroupConfig()) -> list[tuple[int, int, str, str, float, float]]:
    """``(a, b, ion_a, ion_b, neutral mass, mass error)`` of every two features of one polarity whose apexes lie
    within ``width`` and whose m/z are two ion types of one neutral mass (no MS1 check yet)."""
    order = [i for i in sorted(range(len(mz)), key=lambda i: apex[i] if apex[i] is not None else math.inf)
             if apex[i] is not None]
    out = []
    for p, i in enumerate(order):
        for j in order[p + 1:]:
            if apex[j] - apex[i] > width:
                break
            if polarity[i] != polarity[j]:
                continue
            a, b = (i, j) if mz[i] <= mz[j] else (j, i)
            for ion_a, ion_b in ion_pairs(polarity[i]):
                m_a, m_b = neutral_mass_from_precursor(mz[a], ion_a), neutral_mass_from_precursor(mz[b], ion_b)
                if m_a <= 0 or abs(m_a - m_b) > config.tolerance(m_a):
                    continue
                out.append((a, b, ion_a, ion_b, (m_a + m_b) / 2, m_b - m_a))
    return out


# ----------------------------------------------------------------------------------------------
# Groups
# ----------------------------------------------------------------------------------------------


def _consistent(members: dict[int, str], mass: float, edge: PairEvidence, apex: Sequence[float], width: float,
                config: GroupConfig) -> bool:
    """Whether ``members`` (feature -> ion type, one compound of neutral ``mass``) stay one compound with the
    edge's two features as its ion types."""
    for f, ion in ((edge.a, edge.ion_a), (edge.b, edge.ion_b)):
        if f in members and members[f] != ion:
            return False
    merged = {**members, edge.a: edge.ion_a, edge.b: edge.ion_b}
    if len(set(merged.values())) != len(merged):  # two features of one ion type: two compounds
        return False
    if abs(edge.neutral_mass - mass) > config.tolerance(mass):
        return False
    times = [apex[f] for f in merged]
    return max(times) - min(times) <= width


def find_groups(features: Sequence, survey_scans: Sequence, config: GroupConfig = GroupConfig()) -> GroupResult:
    """The compound groups of a run's ``features`` (:class:`~engine.spectra.features.Feature`) from its
    ``survey_scans`` (module notes)."""
    survey = sorted((s for s in survey_scans if s.retention_time is not None), key=lambda s: s.retention_time)
    if not survey or not features:
        width, source = run_peak_width((), config)
        return GroupResult((), width, source)
    by_polarity = {p: [s for s in survey if s.polarity in (None, p)] for p in ("positive", "negative")}
    by_polarity_times = {p: np.array([s.retention_time for s in v]) for p, v in by_polarity.items()}
    polarity = [f.spectrum.polarity or "positive" for f in features]
    mz = [float(f.precursor_mz) for f in features]
    traces: list[Trace | None] = []
    for f, pol in zip(features, polarity):
        if f.rt_min is None:
            traces.append(None)
            continue
        traces.append(trace_of(f.precursor_mz, f.rt_min - config.trace_window_s, f.rt_max + config.trace_window_s,
                               by_polarity[pol], by_polarity_times[pol], config.tolerance(f.precursor_mz),
                               (f.rt_min - config.apex_search_s, f.rt_max + config.apex_search_s)))
    width, source = run_peak_width(traces, config)
    apex = [t.apex_rt if t is not None else None for t in traces]
    edges: list[PairEvidence] = []
    apex_tol = config.apex_fraction * width
    for a, b, ion_a, ion_b, mass, error in candidate_pairs(mz, apex, polarity, apex_tol, config):
        mid = (apex[a] + apex[b]) / 2
        r, shared = ms1_agreement(mz[a], mz[b], mid, width, by_polarity[polarity[a]], by_polarity_times[polarity[a]],
                                  config)
        r = -1.0 if math.isnan(r) else r  # a flat trace: no evidence
        ev = PairEvidence(a, b, ion_a, ion_b, mass, apex[b] - apex[a], error, r, shared)
        if shared >= config.min_shared_scans and r >= config.min_correlation:
            edges.append(ev)
    edges.sort(key=lambda e: e.strength, reverse=True)
    component: dict[int, int] = {}  # feature -> group key
    members: dict[int, dict[int, str]] = {}  # group key -> feature -> ion type
    masses: dict[int, float] = {}
    joined: dict[int, list[PairEvidence]] = {}
    rejected: list[PairEvidence] = []
    new_key = itertools.count()
    for e in edges:
        ka, kb = component.get(e.a), component.get(e.b)
        if ka is not None and ka == kb:
            if members[ka][e.a] == e.ion_a and members[ka][e.b] == e.ion_b:
                joined[ka].append(e)
            else:
                rejected.append(e)
            continue
        current = {**members.get(ka, {}), **members.get(kb, {})}
        mass = masses[ka] if ka is not None else (masses[kb] if kb is not None else e.neutral_mass)
        if ka is not None and kb is not None and abs(masses[ka] - masses[kb]) > config.tolerance(masses[ka]):
            rejected.append(e)
            continue
        if (ka is not None and kb is not None and set(members[ka].values()) & set(members[kb].values())) or \
                not _consistent(current, mass, e, apex, apex_tol, config):
            rejected.append(e)
            continue
        key = ka if ka is not None else (kb if kb is not None else next(new_key))
        for old in {ka, kb} - {None, key}:
            for f in members.pop(old):
                component[f] = key
            joined.setdefault(key, []).extend(joined.pop(old, []))
            masses.pop(old)
        members[key] = {**current, e.a: e.ion_a, e.b: e.ion_b}
        masses[key] = mass
        component[e.a] = component[e.b] = key
        joined.setdefault(key, []).append(e)
    ordered = sorted(members, key=lambda k: (min(apex[f] for f in members[k]), min(mz[f] for f in members[k])))
    groups = []
    for n, key in enumerate(ordered):
        fs = sorted(members[key], key=lambda f: mz[f])
        neutral = float(np.mean([neutral_mass_from_precursor(mz[f], members[key][f]) for f in fs]))
        groups.append(CompoundGroup(
            id=f"G{n + 1:04d}", neutral_mass=neutral,
            members=tuple(GroupMember(features[f].id, members[key][f], mz[f], float(apex[f])) for f in fs),
            evidence=tuple(joined[key])))
    return GroupResult(tuple(groups), width, source, tuple(rejected))


# ----------------------------------------------------------------------------------------------
# A run's features with their groups
# ----------------------------------------------------------------------------------------------


def with_groups(features: Sequence, result: GroupResult) -> list:
    """The features (:class:`~engine.spectra.features.Feature`) with their compound groups attached (``group``,
    ``partners``; spectrum metadata ``compound_group`` and ``group_ion_type``); features outside every group come
    back as they were."""
    of = {m.feature_id: g for g in result.groups for m in g.members}
    out = []
    for f in features:
        g = of.get(f.id)
        if g is None:
            out.append(f)
            continue
        metadata = {**f.spectrum.metadata, "compound_group": g.id, "group_ion_type": g.ion_type_of(f.id)}
        out.append(dataclasses.replace(f, group=g, partners=(), spectrum=dataclasses.replace(f.spectrum, metadata=metadata)))
    return with_partners(out)


@staged("adduct groups")
def with_partners(features: Sequence) -> list:
    """The features, each group member with its partners (``partners``) taken from ``features`` (after a change
    to them, e.g. a recalibration, so that the partners are the changed ones)."""
    members: dict[str, list] = {}
    for f in features:
        if f.group is not None:
            members.setdefault(f.group.id, []).append(dataclasses.replace(f, partners=()))
    return [f if f.group is None else
            dataclasses.replace(f, partners=tuple(p for p in members[f.group.id] if p.id != f.id))
            for f in features]


def group_features(features: Sequence, survey_scans: Sequence, config) -> tuple[list, GroupResult | None]:
    """A run's features with their compound groups (``config``, an :class:`~engine.spectra.features.FeatureConfig`:
    ``adduct_groups`` on, found with ``groups``) and the grouping's result (None when off or without survey scans)."""
    if not config.adduct_groups or not survey_scans:
        return list(features), None
    result = find_groups(features, survey_scans, config.groups)
    return with_groups(features, result), result
