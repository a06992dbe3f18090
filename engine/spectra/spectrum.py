"""The Spectrum record, the checks of its formula against the precursor, and merging split peaks.

A :class:`Spectrum` is frozen and validated when built: peaks are float64, finite, sorted by m/z
and read-only; the adduct is normalised (``M+H`` -> ``[M+H]+``) and the formula written in Hill
order. ``charge`` is signed, ``0`` meaning unknown; ``polarity`` is ``None`` when the file does
not say. :func:`sort_and_merge_peaks` (the readers merge split peaks with it) returns a new spectrum
and never mutates its input, so the spectrum the GUI shows stays as it was read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from engine.chem.adducts import Adduct, neutral_mass_from_precursor, parse_adduct, precursor_mz_from_neutral
from engine.chem.formula import formula_mass, normalize_formula, parse_formula
from engine.errors import ConfigError, SpectrumError

POLARITIES = ("positive", "negative")

DEFAULT_TOL_PPM = 10.0
DEFAULT_TOL_DA = 0.01


def _peak_array(values, name: str) -> np.ndarray:
    try:
        arr = np.array(values, dtype=np.float64)  # a copy: later edits of the input do not leak in
    except (TypeError, ValueError) as e:
        raise SpectrumError(f"`{name}` must be numbers: {e}") from None
    if arr.ndim != 1:
        raise SpectrumError(f"`{name}` must be one-dimensional, got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise SpectrumError(f"`{name}` contains NaN or infinite values; remove those peaks first.")
    return arr


def _sorted_peaks(mz_values, intensity_values) -> tuple[np.ndarray, np.ndarray]:
    """Checked, m/z-sorted, read-only copies of a spectrum's peak arrays."""
    mz = _peak_array(mz_values, "mz")
    intensity = _peak_array(intensity_values, "intensity")
    if mz.shape != intensity.shape:
        raise SpectrumError(f"`mz` has {mz.size} values but `intensity` has {intensity.size}.")
    if mz.size > 1 and np.any(np.diff(mz) < 0):
        order = np.argsort(mz, kind="stable")
        mz, intensity = mz[order], intensity[order]
    mz.flags.writeable = False
    intensity.flags.writeable = False
    return mz, intensity


@dataclass(frozen=True, eq=False, kw_only=True)
class Spectrum:
    """One MS/MS spectrum with its precursor and (optional) reference annotations.

    Fields are keyword-only. Not hashable; ``==`` compares every field, peaks included.
    """

    id: str
    precursor_mz: float
    adduct: str | None = None  # normalised, e.g. "[M+H]+"
    charge: int = 0  # signed; 0 = unknown
    polarity: str | None = None  # "positive" / "negative" / None (unknown)
    formula: str | None = None  # neutral molecular formula, Hill order
    smiles: str | None = None  # reference structure, when the record has one
    inchikey: str | None = None
    retention_time: float | None = None  # seconds
    mz: np.ndarray  # float64, sorted, read-only
    intensity: np.ndarray  # float64, read-only
    metadata: dict[str, str] = field(default_factory=dict)
    source: str = ""  # file the spectrum was read from
    index: int = 0  # 0-based record number in that file (mzML: the spectrum's index attribute)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "id", str(self.id))
        try:
            mz_value = float(self.precursor_mz)
        except (TypeError, ValueError):
            raise SpectrumError(f"Precursor m/z must be a number, got {self.precursor_mz!r}.") from None
        if not np.isfinite(mz_value) or mz_value <= 0:
            raise SpectrumError(f"Precursor m/z must be a positive number, got {self.precursor_mz!r}.")
        set_(self, "precursor_mz", mz_value)

        mz, intensity = _sorted_peaks(self.mz, self.intensity)
        set_(self, "mz", mz)
        set_(self, "intensity", intensity)

        charge = self.charge
        if isinstance(charge, bool) or not isinstance(charge, (int, np.integer)):
            raise SpectrumError(f"Charge must be a signed integer (0 = unknown), got {charge!r}.")
        charge = int(charge)
        if self.adduct is not None:
            adduct = parse_adduct(self.adduct)
            if charge == 0:
                charge = adduct.charge
            elif charge != adduct.charge:
                raise SpectrumError(
                    f"Adduct {adduct.name} has charge {adduct.charge:+d} but the spectrum's charge is "
                    f"{charge:+d}; fix ADDUCT or CHARGE."
                )
            set_(self, "adduct", adduct.name)
        if self.polarity is not None and self.polarity not in POLARITIES:
            raise SpectrumError(f"Polarity must be 'positive', 'negative' or None, got {self.polarity!r}.")
        if charge:
            implied = "positive" if charge > 0 else "negative"
            if self.polarity is not None and self.polarity != implied:
                what = f"adduct {self.adduct}" if self.adduct else f"charge {charge:+d}"
                raise SpectrumError(
                    f"The {what} is {implied} but the spectrum's polarity is {self.polarity}; "
                    f"fix ADDUCT/CHARGE or IONMODE."
                )
            set_(self, "polarity", implied)
        set_(self, "charge", charge)

        if self.formula is not None:
            set_(self, "formula", normalize_formula(self.formula))
        if self.retention_time is not None:
            rt = float(self.retention_time)
            if not np.isfinite(rt) or rt < 0:
                raise SpectrumError(f"Retention time must be >= 0 seconds, got {self.retention_time!r}.")
            set_(self, "retention_time", rt)
        set_(self, "metadata", {str(k): str(v) for k, v in self.metadata.items()})
        set_(self, "source", str(self.source))
        set_(self, "index", int(self.index))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Spectrum):
            return NotImplemented
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if not (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # holds arrays and a dict, like a dict

    @property
    def n_peaks(self) -> int:
        return int(self.mz.size)

    @property
    def adduct_info(self) -> Adduct | None:
        """The parsed :class:`~engine.chem.adducts.Adduct`, or ``None``."""
        return parse_adduct(self.adduct) if self.adduct else None

    @property
    def neutral_mass(self) -> float | None:
        """Neutral mass implied by precursor m/z and adduct (``None`` without an adduct)."""
        return neutral_mass_from_precursor(self.precursor_mz, self.adduct) if self.adduct else None

    @property
    def formula_counts(self) -> dict[str, int] | None:
        return parse_formula(self.formula) if self.formula else None

    def with_formula(self, formula: str | None, *, check: bool = True) -> Spectrum:
        """A copy with ``formula`` (``None`` clears it); with ``check``, it must fit the precursor m/z."""
        new = dataclasses.replace(self, formula=formula)
        return check_formula_matches_precursor(new) if check else new

    def with_adduct(self, adduct: str | Adduct | None, *, check: bool = True) -> Spectrum:
        """A copy with ``adduct`` (its charge replaces the old one; polarity must agree).

        With ``check``, a formula already set must fit the precursor m/z with the new adduct.
        """
        if adduct is None:
            return dataclasses.replace(self, adduct=None)
        a = parse_adduct(adduct)
        new = dataclasses.replace(self, adduct=a.name, charge=a.charge)
        return check_formula_matches_precursor(new) if check else new


@dataclass(frozen=True)
class SkippedRecord:
    """A record of an input file that could not be used, and why.

    A record whose peaks could be read (an MS2 scan without a precursor m/z, say) keeps them, with
    its retention time and polarity, so that an app can still plot it and let the user supply what
    is missing; these fields take no part in ``==``.
    """

    source: str
    index: int
    spectrum_id: str
    reason: str
    mz: np.ndarray | None = field(default=None, compare=False, repr=False)  # float64, finite, > 0
    intensity: np.ndarray | None = field(default=None, compare=False, repr=False)
    retention_time: float | None = field(default=None, compare=False)  # seconds
    polarity: str | None = field(default=None, compare=False)

    @property
    def has_peaks(self) -> bool:
        return self.mz is not None and self.mz.size > 0


@dataclass(frozen=True, eq=False, kw_only=True)
class SurveyScan:
    """An MS1 survey scan of an LC-MS/MS run (mzML), kept for precursor evidence (isotopes, adducts).

    Peaks are float64, sorted by m/z and read-only, like a :class:`Spectrum`'s.
    """

    id: str
    index: int  # the scan's index in its file
    retention_time: float | None  # seconds
    polarity: str | None
    mz: np.ndarray
    intensity: np.ndarray
    source: str = ""

    def __post_init__(self) -> None:
        mz, intensity = _sorted_peaks(self.mz, self.intensity)
        object.__setattr__(self, "mz", mz)
        object.__setattr__(self, "intensity", intensity)

    @property
    def n_peaks(self) -> int:
        return int(self.mz.size)


# ----------------------------------------------------------------------------------------------
# Preprocessing steps: Spectrum -> new Spectrum
# ----------------------------------------------------------------------------------------------


def _with_peaks(spectrum: Spectrum, mz: np.ndarray, intensity: np.ndarray) -> Spectrum:
    return dataclasses.replace(spectrum, mz=mz, intensity=intensity)


def _tolerance(mz: float, tol_ppm: float, tol_da: float) -> float:
    if tol_ppm < 0 or tol_da < 0:
        raise ConfigError(f"Tolerances must be >= 0, got tol_ppm={tol_ppm}, tol_da={tol_da}.")
    return max(tol_da, abs(mz) * tol_ppm * 1e-6)


def sort_and_merge_peaks(spectrum: Spectrum, tolerance_da: float = 0.001) -> Spectrum:
    """Merge peaks closer than ``tolerance_da`` to their m/z neighbour (peaks are already sorted).

    Runs of peaks whose consecutive gaps are <= ``tolerance_da`` become one peak: intensities are
    **summed** (the signal was split, e.g. by centroiding or by merged scans) and the m/z is the
    intensity-weighted mean (the plain mean when all intensities are 0). ``tolerance_da=0``
    merges exact duplicates only.
    """
    if tolerance_da < 0:
        raise ConfigError(f"`tolerance_da` must be >= 0, got {tolerance_da}.")
    mz, intensity = spectrum.mz, spectrum.intensity
    if mz.size < 2:
        return spectrum
    starts = np.flatnonzero(np.concatenate(([True], np.diff(mz) > tolerance_da)))
    if starts.size == mz.size:
        return spectrum
    summed = np.add.reduceat(intensity, starts)
    weighted = np.add.reduceat(mz * intensity, starts)
    counts = np.diff(np.append(starts, mz.size))
    plain = np.add.reduceat(mz, starts) / counts
    safe = np.where(summed != 0, summed, 1.0)
    new_mz = np.where(summed != 0, weighted / safe, plain)
    return _with_peaks(spectrum, new_mz, summed)


def _round_ppm(ppm: float) -> str:
    if abs(ppm) >= 100:
        return f"{float(f'{ppm:.3g}'):.0f}"
    return f"{ppm:.1f}"


#: ``metadata`` key: how many decimals the file wrote the precursor m/z with (MGF ``PEPMASS``).
PRECURSOR_DECIMALS_KEY = "precursor_mz_decimals"


def written_decimals(text: str) -> int | None:
    """Decimals of a number as written: ``"163"`` -> 0, ``"163.10"`` -> 2; ``None`` for exponent notation."""
    number = text.strip().split()[0] if text.strip() else ""
    if not number or "e" in number.lower():
        return None
    return len(number.split(".", 1)[1]) if "." in number else 0


def precursor_precision_da(spectrum: Spectrum) -> float:
    """One unit of the last decimal the precursor m/z was written with, 0.0 when not recorded.

    MassBank-style records may give a nominal precursor (``PEPMASS=163`` for an ion at 163.1077):
    written to the unit, the value says the ion lies within 1 Da of it (rounded or truncated alike).
    """
    text = spectrum.metadata.get(PRECURSOR_DECIMALS_KEY)
    if text is None or not text.isdigit():
        return 0.0
    return 10.0 ** -int(text)


def check_formula_matches_precursor(
    spectrum: Spectrum, tol_ppm: float = DEFAULT_TOL_PPM, tol_da: float = DEFAULT_TOL_DA
) -> Spectrum:
    """Raise :class:`SpectrumError` when formula + adduct do not give the precursor m/z.

    The tolerance is ``max(tol_da, tol_ppm * 1e-6 * m/z)`` (default 10 ppm or 0.01 Da, whichever
    is larger), widened to the precision the file wrote the precursor with
    (:func:`precursor_precision_da`: ``PEPMASS=163`` is a check to 1 Da, ``163.1`` to 0.1 Da).
    Returns the spectrum unchanged when it fits, or when formula or adduct is unknown.
    """
    if not spectrum.formula or not spectrum.adduct:
        return spectrum
    expected = precursor_mz_from_neutral(formula_mass(parse_formula(spectrum.formula)), spectrum.adduct)
    delta = spectrum.precursor_mz - expected
    tol = _tolerance(expected, tol_ppm, tol_da)
    precision = precursor_precision_da(spectrum)
    why = ""
    if precision > tol:
        tol = precision
        why = f", the precision PEPMASS is written with ({spectrum.metadata[PRECURSOR_DECIMALS_KEY]} decimals)"
    if abs(delta) > tol:
        raise SpectrumError(
            f"formula {spectrum.formula} gives {spectrum.adduct} m/z {expected:.4f} but PEPMASS is "
            f"{spectrum.precursor_mz:g} (Δ {abs(delta):.2f} Da, {_round_ppm(abs(delta) / expected * 1e6)} ppm; "
            f"tolerance {tol:.4g} Da{why}); fix FORMULA or ADDUCT"
        )
    return spectrum


# ----------------------------------------------------------------------------------------------
# Spectra that hold only the precursor
# ----------------------------------------------------------------------------------------------

#: Note for a spectrum without fragments (shown by the CLI summary and the app).
NO_FRAGMENTS_NOTE = "no fragments: candidates reflect the formula only"
FRAGMENT_MARGIN_DA = 2.0


def has_fragments(spectrum: Spectrum, margin_da: float = FRAGMENT_MARGIN_DA) -> bool:
    """Whether any peak lies below ``precursor m/z - margin_da`` (default 2 Da).

    Peaks within 2 Da of the precursor (the precursor, its isotopes, a loss of H2) say nothing about
    the structure: with none below, the encoder sees only the formula, and so do its candidates.
    """
    if margin_da < 0:
        raise ConfigError(f"`margin_da` must be >= 0, got {margin_da}.")
    return bool(np.any(spectrum.mz < spectrum.precursor_mz - margin_da))


def note_no_fragments(spectrum: Spectrum, margin_da: float = FRAGMENT_MARGIN_DA) -> Spectrum:
    """A copy noting :data:`NO_FRAGMENTS_NOTE` in ``metadata["warnings"]`` when it has no fragments.

    Returns the spectrum itself when it has fragments or already carries the note.
    """
    return spectrum if has_fragments(spectrum, margin_da) else with_warning(spectrum, NO_FRAGMENTS_NOTE)


def with_warning(spectrum: Spectrum, text: str) -> Spectrum:
    """A copy with ``text`` added to ``metadata["warnings"]`` (``; ``-joined); the spectrum itself when it has it."""
    warnings = spectrum.metadata.get("warnings", "")
    if text in warnings:
        return spectrum
    return dataclasses.replace(spectrum, metadata={**spectrum.metadata,
                                                   "warnings": f"{warnings}; {text}" if warnings else text})
