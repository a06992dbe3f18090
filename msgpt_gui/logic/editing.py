"""What the user types below a spectrum, checked without Qt: precursor m/z, formula and adduct.

:func:`check_edit` turns the three texts into a new :class:`~engine.spectra.spectrum.Spectrum` (never
changing the one shown) and says whether it can run, what is missing, or what is wrong and how to
fix it. A record the reader skipped for want of a precursor m/z becomes a spectrum once one is typed
(:func:`spectrum_from_skipped`). :func:`apply_formula` is "Apply to selected": one formula and
adduct, checked against each spectrum's own precursor m/z.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, normalize_formula, parse_formula
from engine.errors import MsgptError
from engine.spectra.spectrum import (
    PRECURSOR_DECIMALS_KEY,
    SkippedRecord,
    Spectrum,
    check_formula_matches_precursor,
    written_decimals,
)

from .formulas import SOURCE_KEYS

OK, INCOMPLETE, ERROR = "ok", "incomplete", "error"


@dataclass(frozen=True)
class EditCheck:
    """The outcome of :func:`check_edit`."""

    spectrum: Spectrum | None  # the spectrum with the typed values (None when they are wrong)
    message: str  # calculated m/z and error, what is missing, or what is wrong and the fix
    level: str  # OK: it can run; INCOMPLETE: valid, but something is missing to run; ERROR
    changed: bool = False  # Apply would change the spectrum

    @property
    def appliable(self) -> bool:
        return self.spectrum is not None and self.changed


def spectrum_from_skipped(record: SkippedRecord, precursor_mz: float, decimals: int | None = None) -> Spectrum:
    """The spectrum of a skipped record that kept its peaks, with the precursor m/z the user typed."""
    if not record.has_peaks:
        raise ValueError(f"record {record.spectrum_id} kept no peaks")
    metadata = {"precursor_source": "typed in the app"}
    if decimals is not None:
        metadata[PRECURSOR_DECIMALS_KEY] = str(decimals)
    return Spectrum(id=record.spectrum_id, precursor_mz=precursor_mz, mz=record.mz, intensity=record.intensity,
                    polarity=record.polarity, retention_time=record.retention_time, metadata=metadata,
                    source=record.source, index=record.index)


def _with_precursor(base: Spectrum | SkippedRecord, text: str) -> tuple[Spectrum | None, str]:
    """``base`` with the typed precursor m/z (unchanged when the text is the one shown); or (None, why)."""
    shown = f"{base.precursor_mz:.4f}" if isinstance(base, Spectrum) else ""
    if not text or text == shown or (isinstance(base, Spectrum) and _same_number(text, base.precursor_mz)):
        if isinstance(base, Spectrum):
            return base, ""
        return None, "Enter the precursor m/z (the file gives none) to run this spectrum"
    try:
        mz = float(text)
    except ValueError:
        return None, f"precursor m/z {text!r} is not a number; type it as e.g. 163.1077"
    if not math.isfinite(mz) or mz <= 0:
        return None, f"precursor m/z {text!r} must be a positive number, e.g. 163.1077"
    decimals = written_decimals(text)
    if isinstance(base, SkippedRecord):
        return spectrum_from_skipped(base, mz, decimals), ""
    metadata = {**base.metadata, "precursor_source": "typed in the app"}
    metadata.pop(PRECURSOR_DECIMALS_KEY, None)
    if decimals is not None:
        metadata[PRECURSOR_DECIMALS_KEY] = str(decimals)
    return dataclasses.replace(base, precursor_mz=mz, metadata=metadata), ""


def _same_number(text: str, value: float) -> bool:
    try:
        return float(text) == value
    except ValueError:
        return False


def _ions(supported: Sequence[str] | None) -> str:
    return f" (this model supports {', '.join(supported)})" if supported else ""


def check_edit(
    base: Spectrum | SkippedRecord, precursor: str, formula: str, adduct: str,
    supported_adducts: Sequence[str] | None = None,
) -> EditCheck:
    """Check typed precursor m/z, formula and adduct against ``base`` (the spectrum shown, or a
    skipped record that kept its peaks). Empty precursor text keeps the spectrum's."""
    precursor, formula, adduct = precursor.strip(), formula.strip(), adduct.strip()
    spectrum, problem = _with_precursor(base, precursor)
    if spectrum is None:
        return EditCheck(None, problem, INCOMPLETE if not precursor else ERROR)
    try:
        spectrum = spectrum.with_adduct(adduct or None, check=False)
        hill = normalize_formula(formula) if formula else None
        spectrum = spectrum.with_formula(hill, check=False)
    except MsgptError as e:
        return EditCheck(None, str(e), ERROR)
    if isinstance(base, Spectrum) and (spectrum.formula, spectrum.adduct) != (base.formula, base.adduct) and \
            any(k in spectrum.metadata for k in SOURCE_KEYS):  # typed: no longer a picked formula candidate
        spectrum = dataclasses.replace(spectrum, metadata={k: v for k, v in spectrum.metadata.items()
                                                           if k not in SOURCE_KEYS})
    changed = not isinstance(base, Spectrum) or any(
        getattr(spectrum, f) != getattr(base, f) for f in ("precursor_mz", "formula", "adduct")
    )
    if adduct and supported_adducts is not None and spectrum.adduct not in supported_adducts:
        return EditCheck(None, f"adduct {spectrum.adduct} is not supported by this model{_ions(supported_adducts)}; "
                               "choose one of those", ERROR)
    if not hill or not spectrum.adduct:
        missing = " and ".join(w for w, v in (("formula", hill), ("adduct", spectrum.adduct)) if not v)
        return EditCheck(spectrum, f"Enter the {missing} to run this spectrum", INCOMPLETE, changed)
    expected = precursor_mz_from_neutral(formula_mass(parse_formula(hill)), spectrum.adduct)
    ppm = (spectrum.precursor_mz - expected) / expected * 1e6
    text = f"calc. m/z {expected:.4f} (Δ {ppm:+.1f} ppm)"
    try:
        check_formula_matches_precursor(spectrum)
    except MsgptError:
        return EditCheck(None, text + ": too far from the precursor m/z; check the formula and adduct", ERROR)
    return EditCheck(spectrum, text, OK, changed)


@dataclass(frozen=True)
class Applied:
    """The outcome of :func:`apply_formula` for one spectrum."""

    spectrum: Spectrum | None  # the new spectrum, or None when the formula does not fit this one
    problem: str = ""


def apply_formula(spectra: Sequence[Spectrum], formula: str, adduct: str,
                  supported_adducts: Sequence[str] | None = None) -> list[Applied]:
    """One formula and adduct for many spectra, each checked against its own precursor m/z.

    An empty formula sets the adduct only (the formulas are kept).
    """
    out = []
    for s in spectra:
        check = check_edit(s, "", formula if formula.strip() else (s.formula or ""), adduct, supported_adducts)
        if check.spectrum is None:
            out.append(Applied(None, check.message))
        else:
            out.append(Applied(check.spectrum))
    return out
