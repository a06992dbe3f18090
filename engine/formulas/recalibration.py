"""Run-level mass recalibration: the m/z error of a run, estimated from the run itself, corrected before formulas.

Precursor m/z of a real run read consistently off (a TripleTOF run of pesticides: +4 to +9 ppm), a
calibration offset of the run rather than noise, and a 10 ppm window scored as if it were noise pushes
the true formula down. As SIRIUS and instrument software do, the run tells its own error: the formulas
and fragment subformulas that explain its spectra best sit at a consistent offset.

:func:`recalibrate_run` (one run's precursors, each with its survey scan when there is one):

1. **annotate**: each precursor up to ``max_mz`` (600; at most ``max_precursors``, 300, spread over the run)
   has its formulas ranked with a wide window (``search_ppm``, default 25 ppm)
   and a mass term that barely counts (as if the scatter were ``search_ppm / 2``), so the error of the
   run cannot decide the formula. A precursor whose best candidate is probable (``min_probability``) and
   explains fragment intensity (``min_explained``) gives points ``(m/z, error ppm)``: its precursor, and the
   fragment peaks its subformulas annotate within ``search_ppm``;
2. **fit** ``error = offset + slope * (m/z - 500) / 1000`` robustly (Tukey biweight from the weighted median;
   the slope only when the points span ``min_span_mz``, and only between their 2nd and 98th percentile
   m/z: beyond, the error at the nearer end, never an extrapolated line); the precursors' residual
   scatter (1.4826 MAD) is the run's ``scatter_ppm``;
3. **repeat** once on the corrected m/z with a tighter window (4 x scatter, at least 10 ppm) and mass term,
   so the formulas picked no longer lean towards a zero error.

Fewer than ``min_features`` usable precursors: no recalibration (``applied`` false, the ``note`` says why).
:func:`recalibrate_features` does all this for the features of one run as they stream (``msgpt predict
--recalibrate auto|off|OFFSET[,SLOPE]``), :func:`run_formula_config` gives a corrected spectrum its tolerances.
:meth:`Recalibration.apply` corrects a spectrum (precursor and fragments), :meth:`~Recalibration.apply_ms1`
its survey peaks, and :meth:`~Recalibration.formula_config` sets the precursor tolerance (4 x scatter,
between ``min_ppm`` and the given one) and the mass term's scatter from the measured one.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.errors import Cancelled, ConfigError, FormulaError, SpectrumError
from engine.formulas.candidates import FormulaConfig, rank_formulas
from engine.formulas.evidence import fragment_peaks
from engine.formulas.scorer import FormulaScorer
from engine.spectra.annotate import annotate_peaks
from engine.timing import staged

DEFAULT_CONFIG = FormulaConfig()
RECALIBRATED_KEY = "recalibrated_ppm"  # spectrum metadata: the correction taken out at its precursor m/z
SCATTER_KEY = "mz_scatter_ppm"  # spectrum metadata: the run's measured precursor scatter


@dataclass(frozen=True)
class RecalibrationConfig:
    """How a run's m/z error is estimated (module notes)."""

    search_ppm: float = field(default=25.0, metadata={"help": "window of the first ranking, ppm"})
    min_probability: float = field(default=0.5, metadata={"help": "best formula's probability to use a precursor"})
    min_explained: float = field(default=0.5, metadata={"help": "fragment intensity share it must explain"})
    min_features: int = field(default=5, metadata={"help": "usable precursors needed to recalibrate"})
    min_span_mz: float = field(default=200.0, metadata={"help": "m/z span (10-90%) needed to fit a slope"})
    max_scored: int = field(default=20, metadata={"help": "formulas per ion type scored in the rankings"})
    min_scatter_ppm: float = field(default=1.5, metadata={"help": "smallest scatter the mass term assumes, ppm"})
    min_ppm: float = field(default=3.0, metadata={"help": "narrowest precursor tolerance set, ppm"})
    max_mz: float = field(default=600.0, metadata={
        "help": "precursors above this m/z give no points (their many formulas take long to rank)"})
    max_precursors: int = field(default=300, metadata={"help": "precursors used at most (spread over the run)"})
    fragment_weight: float = field(default=1.0, metadata={
        "help": "weight of a precursor's fragment points together, its precursor weighs 1 (0: precursors alone)"})

    def __post_init__(self):
        for name in ("search_ppm", "min_span_mz", "min_scatter_ppm", "min_ppm", "max_mz"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ConfigError(f"`{name}` must be a number > 0, got {value!r}.")
        if isinstance(self.fragment_weight, bool) or not isinstance(self.fragment_weight, (int, float)) or not (
                0 <= self.fragment_weight < math.inf):
            raise ConfigError(f"`fragment_weight` must be a number >= 0, got {self.fragment_weight!r}.")
        for name in ("min_probability", "min_explained"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value <= 1):
                raise ConfigError(f"`{name}` must be a number in [0, 1], got {value!r}.")
        for name in ("min_features", "max_scored", "max_precursors"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a whole number >= 1, got {value!r}.")


@dataclass(frozen=True, eq=False)
class Recalibration:
    """A run's m/z error ``offset_ppm + slope_ppm * (m/z - 500) / 1000`` and how it was found."""

    offset_ppm: float = 0.0
    slope_ppm: float = 0.0  # ppm per 1000 m/z
    scatter_ppm: float | None = None  # precursors' scatter after correction (None: not measured)
    n_features: int = 0  # precursors that gave points
    points_mz: np.ndarray = field(default_factory=lambda: np.zeros(0))  # for the plot: m/z of the points
    points_ppm: np.ndarray = field(default_factory=lambda: np.zeros(0))  # their error, ppm (as measured)
    points_precursor: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # precursor or fragment
    applied: bool = False
    source: str = "estimated"  # "estimated", "set by the user", "off"
    note: str = ""
    min_ppm: float = 3.0
    min_scatter_ppm: float = 1.5
    mz_range: tuple[float, float] = (0.0, math.inf)  # the slope holds here; beyond, the error at the nearer end

    @classmethod
    def fixed(cls, offset_ppm: float, slope_ppm: float = 0.0, scatter_ppm: float | None = None) -> Recalibration:
        """A correction the user set (``scatter_ppm``: the tolerance to assume, None: keep the configured one)."""
        for name, value in (("offset_ppm", offset_ppm), ("slope_ppm", slope_ppm)):
            if not math.isfinite(value) or abs(value) > 200:
                raise ConfigError(f"`{name}` must be a number between -200 and 200 ppm, got {value!r}.")
        if scatter_ppm is not None and not (0 < scatter_ppm < 100):
            raise ConfigError(f"`scatter_ppm` must be between 0 and 100 ppm, got {scatter_ppm!r}.")
        return cls(offset_ppm=offset_ppm, slope_ppm=slope_ppm, scatter_ppm=scatter_ppm, applied=True,
                   source="set by the user", note="set by the user")

    @classmethod
    def off(cls, note: str = "turned off") -> Recalibration:
        return cls(applied=False, source="off", note=note)

    def ppm(self, mz):
        """The run's m/z error at ``mz`` (0 when not applied)."""
        if not self.applied:
            return np.zeros_like(np.asarray(mz, dtype=np.float64))
        mz = np.clip(np.asarray(mz, dtype=np.float64), *self.mz_range)
        return self.offset_ppm + self.slope_ppm * (mz - 500.0) / 1000.0

    def correct(self, mz: np.ndarray) -> np.ndarray:
        """``mz`` with the run's error taken out."""
        mz = np.asarray(mz, dtype=np.float64)
        return mz / (1.0 + self.ppm(mz) * 1e-6)

    def apply(self, spectrum):
        """The spectrum with precursor and fragment m/z corrected (unchanged when not applied); its metadata notes
        the correction (``recalibrated_ppm``) and the run's scatter (``mz_scatter_ppm``, see :func:`run_formula_config`)."""
        if not self.applied:
            return spectrum
        metadata = {**spectrum.metadata, RECALIBRATED_KEY: f"{float(self.ppm(spectrum.precursor_mz)):.2f}"}
        if self.scatter_ppm is not None:
            metadata[SCATTER_KEY] = f"{self.scatter_ppm:.2f}"
        return dataclasses.replace(spectrum, precursor_mz=float(self.correct(spectrum.precursor_mz)),
                                   mz=self.correct(spectrum.mz), metadata=metadata)

    def apply_ms1(self, ms1):
        """Survey evidence with its m/z corrected (None stays None)."""
        if ms1 is None or not self.applied:
            return ms1
        return dataclasses.replace(ms1, precursor_mz=float(self.correct(ms1.precursor_mz)), mz=self.correct(ms1.mz))

    def formula_config(self, config: FormulaConfig) -> FormulaConfig:
        """``config`` with the precursor tolerance and the mass term's scatter from the measured scatter."""
        if not self.applied or self.scatter_ppm is None:
            return config
        return _scatter_config(config, self.scatter_ppm, self.min_scatter_ppm, self.min_ppm)

    def describe(self) -> str:
        """One line for the CLI and the app."""
        if not self.applied:
            return f"m/z recalibration: none ({self.note})"
        scatter = f", scatter {self.scatter_ppm:.1f} ppm" if self.scatter_ppm is not None else ""
        by = f" from {self.n_features} precursors" if self.source == "estimated" else f" ({self.source})"
        return (f"m/z recalibration: {self.offset_ppm:+.1f} ppm at m/z 500, slope {self.slope_ppm:+.1f} ppm per "
                f"1000 m/z{scatter}{by}")


def _scatter_config(config: FormulaConfig, scatter_ppm: float, min_scatter_ppm: float, min_ppm: float) -> FormulaConfig:
    sigma = max(scatter_ppm, min_scatter_ppm)
    return dataclasses.replace(config, ppm=min(max(4.0 * sigma, min_ppm), config.ppm), mass_sigma_ppm=sigma)


def run_formula_config(spectrum, config: FormulaConfig, recalibration: RecalibrationConfig = RecalibrationConfig()
                       ) -> FormulaConfig:
    """``config`` for a spectrum :meth:`Recalibration.apply` corrected: tolerance and mass term from the scatter it
    noted; ``config`` itself for any other spectrum."""
    try:
        scatter = float(spectrum.metadata[SCATTER_KEY])
    except (KeyError, ValueError):
        return config
    return _scatter_config(config, scatter, recalibration.min_scatter_ppm, recalibration.min_ppm)


def parse_setting(text: str) -> Recalibration | None:
    """``auto`` -> None (estimate per run); ``off``; ``OFFSET`` or ``OFFSET,SLOPE`` in ppm (a correction the user set)."""
    value = text.strip().lower()
    if value == "auto":
        return None
    if value == "off":
        return Recalibration.off()
    try:
        numbers = [float(v) for v in value.split(",")]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2):
        raise ConfigError(f"m/z recalibration {text!r}: give auto, off, or OFFSET[,SLOPE] in ppm (e.g. 5.2 or 5.2,-1.0).")
    return Recalibration.fixed(*numbers)


def recalibrate_features(
    items: Iterable, setting: Recalibration | None = None, *, config: FormulaConfig = DEFAULT_CONFIG,
    scorer: FormulaScorer | None = None, max_features: int = 2000, report: Callable[[Recalibration], None] | None = None,
) -> Iterator:
    """The features (and skipped records) of one run, their m/z corrected (:meth:`Recalibration.apply`).

    ``setting`` None estimates the correction from the run's first ``max_features`` features (so that a long
    file still streams); a :class:`Recalibration` is used as it is. ``report`` gets the correction before the
    first feature comes out.
    """
    items = iter(items)
    head = list(itertools.islice(items, max_features))
    if setting is None:
        features = [f for f in head if hasattr(f, "spectrum") and f.spectrum.formula is None]
        setting = recalibrate_run([(f.spectrum, f.ms1) for f in features], config=config, scorer=scorer)
    if report is not None:
        report(setting)
    for item in itertools.chain(head, items):
        if not setting.applied or not hasattr(item, "spectrum") or item.spectrum.formula is not None:
            yield item
            continue
        spectrum = setting.apply(item.spectrum)
        yield dataclasses.replace(item, spectrum=spectrum, precursor_mz=spectrum.precursor_mz,
                                  ms1=setting.apply_ms1(item.ms1))


def robust_line(mz: np.ndarray, ppm: np.ndarray, weight: np.ndarray, fit_slope: bool) -> tuple[float, float, np.ndarray]:
    """``(offset, slope, residuals)`` of ``ppm = offset + slope * (mz - 500) / 1000`` by Tukey-biweight IRLS."""
    x = (mz - 500.0) / 1000.0
    order = np.argsort(ppm)
    cum = np.cumsum(weight[order])
    offset, slope = float(ppm[order][np.searchsorted(cum, cum[-1] / 2)]), 0.0  # weighted median
    for _ in range(10):
        resid = ppm - offset - slope * x
        scale = max(1.4826 * float(np.median(np.abs(resid))), 0.3)
        u = resid / (4.685 * scale)
        w = weight * np.where(np.abs(u) < 1, (1 - u ** 2) ** 2, 0.0)
        if w.sum() <= 0:
            break
        if fit_slope:
            design = np.stack([np.ones_like(x), x], axis=1) * np.sqrt(w)[:, None]
            offset, slope = (float(v) for v in np.linalg.lstsq(design, ppm * np.sqrt(w), rcond=None)[0])
        else:
            offset = float((w * ppm).sum() / w.sum())
    return offset, slope, ppm - offset - slope * x


def _points(spectrum, ms1, config: FormulaConfig, rc: RecalibrationConfig, scorer):
    """``(mz, ppm, weight, is_precursor)`` arrays of one precursor, or None when it is not confident."""
    try:
        table = rank_formulas(spectrum, ms1=ms1, config=config, scorer=scorer)
    except (SpectrumError, FormulaError) as e:  # too coarse, too heavy: this precursor gives no points
        del e
        return None
    if not table.candidates:
        return None
    best = table.candidates[0]
    if best.probability < rc.min_probability or best.explained_intensity < rc.min_explained:
        return None
    mz, weight = fragment_peaks(spectrum)
    annotation = annotate_peaks(mz, weight, best.formula, best.ion_type, tol_ppm=rc.search_ppm, tol_da=1e-9)
    hit = annotation.matched
    frag_w = rc.fragment_weight * weight[hit] / max(float(weight[hit].sum()), 1e-12)  # together fragment_weight
    return (np.r_[spectrum.precursor_mz, mz[hit]], np.r_[best.ppm_error, annotation.error_ppm[hit]],
            np.r_[1.0, frag_w], np.r_[True, np.zeros(int(hit.sum()), dtype=bool)])


def _estimate(items, config: FormulaConfig, rc: RecalibrationConfig, scorer, sigma: float, cancel,
              window_ppm: float) -> Recalibration:
    ranked = dataclasses.replace(config, ppm=window_ppm, mass_sigma_ppm=sigma, max_scored=rc.max_scored)
    found = []
    for spectrum, ms1 in items:
        if cancel is not None and cancel():
            raise Cancelled("Cancelled by the user.")
        pts = _points(spectrum, ms1, ranked, rc, scorer)
        if pts is not None:
            found.append(pts)
    if len(found) < rc.min_features:
        return Recalibration.off(f"{len(found)} of {len(items)} precursors explained confidently, "
                                 f"{rc.min_features} needed")
    mz, ppm, w, is_prec = (np.concatenate(a) for a in zip(*found))
    fit = is_prec | (rc.fragment_weight > 0)  # fragment_weight 0: the fragments are shown, not fitted
    lo, hi = np.percentile(mz[fit], [10, 90])
    offset, slope, _ = robust_line(mz[fit], ppm[fit], w[fit], fit_slope=hi - lo >= rc.min_span_mz)
    resid = ppm - offset - slope * (mz - 500.0) / 1000.0
    scatter = 1.4826 * float(np.median(np.abs(resid[is_prec])))
    span = (float(np.percentile(mz[fit], 2)), float(np.percentile(mz[fit], 98))) if slope else (0.0, math.inf)
    return Recalibration(offset_ppm=offset, slope_ppm=slope, scatter_ppm=scatter, n_features=len(found),
                         points_mz=mz, points_ppm=ppm, points_precursor=is_prec, applied=True,
                         min_ppm=rc.min_ppm, min_scatter_ppm=rc.min_scatter_ppm, mz_range=span)


@staged("recalibration")
def recalibrate_run(
    items: Sequence[tuple], *, config: FormulaConfig = DEFAULT_CONFIG, scorer: FormulaScorer | None = None,
    recalibration: RecalibrationConfig = RecalibrationConfig(), cancel: Callable[[], bool] | None = None,
) -> Recalibration:
    """The m/z error of one run from its ``(spectrum, ms1 or None)`` precursors (module notes)."""
    rc = recalibration
    items = [(s, ms1) for s, ms1 in items if s.formula is None and s.precursor_mz <= rc.max_mz]
    if len(items) > rc.max_precursors:  # spread over the run
        items = [items[i] for i in np.linspace(0, len(items) - 1, rc.max_precursors).round().astype(int)]
    first = _estimate(items, config, rc, scorer, rc.search_ppm / 2, cancel, rc.search_ppm)
    if not first.applied:
        return first
    corrected = [(first.apply(s), first.apply_ms1(ms1)) for s, ms1 in items]
    sigma = max(first.scatter_ppm, 3.0)
    second = _estimate(corrected, config, rc, scorer, sigma, cancel, min(max(4 * sigma, 10.0), rc.search_ppm))
    if not second.applied:
        return first
    # the two corrections compose: the second was measured on m/z the first had corrected
    x = first.points_mz if rc.fragment_weight > 0 else first.points_mz[first.points_precursor]
    total = first.ppm(x) + second.ppm(first.correct(x))
    design = np.stack([np.ones_like(x), (x - 500.0) / 1000.0], axis=1)
    offset, slope = np.linalg.lstsq(design, total, rcond=None)[0] if len(total) > 1 else (total[0], 0.0)
    fitted_slope = first.slope_ppm or second.slope_ppm
    span = (float(np.percentile(x, 2)), float(np.percentile(x, 98))) if fitted_slope else (0.0, math.inf)
    return dataclasses.replace(second, offset_ppm=float(offset), slope_ppm=float(slope) if fitted_slope else 0.0,
                               points_mz=first.points_mz, points_ppm=first.points_ppm, points_precursor=first.points_precursor,
                               mz_range=span)
