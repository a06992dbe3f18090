"""What the MGF and mzML readers (:mod:`engine.spectra.mgf`, :mod:`engine.spectra.mzml`) share: the reading
options, opening a file (gzip-compressed or not) as bytes or text, one record as read, and turning that record
into a :class:`~engine.spectra.spectrum.Spectrum` or a :class:`~engine.spectra.spectrum.SkippedRecord` by the
rules listed in :mod:`engine.spectra.io`.
"""

from __future__ import annotations

import gzip
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from engine.chem.adducts import Adduct, parse_adduct_or_none
from engine.chem.formula import normalize_formula
from engine.chem.molecules import mol_from_smiles
from engine.errors import AdductError, FormulaError, SpectrumError
from engine.spectra.spectrum import SkippedRecord, Spectrum, check_formula_matches_precursor

GZIP_MAGIC = b"\x1f\x8b"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def is_gzip(path: Path) -> bool:
    """Whether the file starts with gzip's magic bytes (whatever its name says)."""
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def open_binary(path: Path) -> IO[bytes]:
    """The file's content as bytes, decompressed when it is gzip-compressed."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def text_encoding(head: bytes) -> str:
    """UTF-16 when the content starts with its byte-order mark, else UTF-8 (a UTF-8 BOM is dropped)."""
    return "utf-16" if head[:2] in _UTF16_BOMS else "utf-8-sig"


def open_text(path: Path, encoding: str) -> IO[str]:
    """The file's content as text in ``encoding`` (see :func:`text_encoding`)."""
    # Undecodable bytes (Latin-1 names in a UTF-8 file) become U+FFFD, and the record gets a note.
    return io.TextIOWrapper(open_binary(path), encoding=encoding, errors="replace")


# ----------------------------------------------------------------------------------------------
# Turning one record into a Spectrum
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """What :func:`engine.spectra.io.iter_spectra` was asked: the file, the defaults and the precursor tolerance."""

    path: Path
    source: str
    default_adduct: Adduct | None
    default_formula: str | None
    tol_ppm: float
    tol_da: float
    survey_scans: bool = False

    @classmethod
    def create(cls, path, default_adduct, default_formula, tol_ppm, tol_da, survey_scans=False) -> ReadOptions:
        adduct = parse_adduct_or_none(default_adduct)
        if adduct is not None and abs(adduct.charge) != 1:
            raise AdductError(
                f"Default adduct {adduct.name} has charge {adduct.charge:+d}; only singly charged "
                f"adducts such as [M+H]+ or [M-H]- can be used."
            )
        formula = normalize_formula(default_formula) if default_formula else None
        return cls(Path(path), str(path), adduct, formula, float(tol_ppm), float(tol_da), bool(survey_scans))


@dataclass
class RawRecord:
    """What one record says, before validation (shared by MGF and mzML)."""

    index: int
    spectrum_id: str
    precursor_mz: float | None
    charge: int = 0
    charge_signed: bool = True
    polarity: str | None = None
    adduct: str | None = None
    formula: str | None = None
    smiles: str | None = None
    inchikey: str | None = None
    retention_time: float | None = None
    mz: np.ndarray | None = None
    intensity: np.ndarray | None = None
    metadata: dict[str, str] | None = None


def skipped_record(options: ReadOptions, index: int, spectrum_id: str, reason: str,
                   rec: RawRecord | None = None) -> SkippedRecord:
    """A skipped record; with ``rec``, it keeps the record's usable peaks (finite, > 0, sorted by m/z)."""
    if rec is None or rec.mz is None or rec.intensity is None or rec.mz.shape != rec.intensity.shape:
        return SkippedRecord(options.source, index, spectrum_id, reason)
    keep = np.isfinite(rec.mz) & np.isfinite(rec.intensity) & (rec.mz > 0) & (rec.intensity > 0)
    order = np.argsort(rec.mz[keep], kind="stable")
    mz, intensity = rec.mz[keep][order], rec.intensity[keep][order]
    mz.flags.writeable = intensity.flags.writeable = False
    return SkippedRecord(options.source, index, spectrum_id, reason, mz=mz, intensity=intensity,
                         retention_time=rec.retention_time, polarity=rec.polarity)


def add_warning(metadata: dict[str, str], message: str) -> None:
    """Add ``message`` to a record's notes (``metadata["warnings"]``, separated by ``; ``)."""
    metadata["warnings"] = f"{metadata['warnings']}; {message}" if metadata.get("warnings") else message


def _clean_peaks(mz: np.ndarray, intensity: np.ndarray, metadata: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
    keep = np.isfinite(mz) & np.isfinite(intensity) & (mz > 0) & (intensity > 0)
    n_bad = int(keep.size - np.count_nonzero(keep))
    if n_bad == keep.size:
        if keep.size == 0:
            raise SpectrumError("no peaks: the record has no 'm/z intensity' lines")
        raise SpectrumError(f"no usable peaks: all {keep.size} peaks have zero, negative or NaN intensity or m/z")
    if n_bad:
        add_warning(metadata,
                    f"{n_bad} peak{'s' if n_bad > 1 else ''} with zero, negative or NaN intensity or m/z dropped")
        return mz[keep], intensity[keep]
    return mz, intensity


def _resolve_charge(rec: RawRecord, adduct: Adduct | None) -> tuple[int, str | None]:
    """Signed charge (0 = unknown) and polarity, after checking that all sources agree."""
    sources: list[tuple[str, str]] = []  # (polarity, what said so)
    if rec.polarity:
        sources.append((rec.polarity, f"IONMODE is {rec.polarity}"))
    if rec.charge and rec.charge_signed:
        sign = "+" if rec.charge > 0 else "-"
        sources.append(("positive" if rec.charge > 0 else "negative", f"CHARGE is {abs(rec.charge)}{sign}"))
    if adduct is not None:
        sources.append((adduct.polarity, f"ADDUCT {adduct.name} is {adduct.polarity}"))
    polarities = {p for p, _ in sources}
    if len(polarities) > 1:
        first = [w for p, w in sources if p == sources[0][0]]
        other = [w for p, w in sources if p != sources[0][0]]
        raise SpectrumError(
            f"conflicting polarity: {' and '.join(first)} but {' and '.join(other)}; fix the one that is wrong"
        )
    polarity = polarities.pop() if polarities else None
    charge = abs(rec.charge)
    if adduct is not None:
        if charge and charge != abs(adduct.charge):
            raise SpectrumError(
                f"CHARGE {charge} does not match ADDUCT {adduct.name} (charge {abs(adduct.charge)})"
            )
        charge = abs(adduct.charge)
    if charge > 1:
        what = f"adduct {adduct.name}" if adduct is not None else f"charge {charge}"
        raise SpectrumError(f"{what}: only singly charged precursors (charge 1+ or 1-) are supported")
    if charge and polarity is None:
        polarity = "positive"  # an unsigned charge with nothing else to go by: MGF's default
    return (charge if polarity != "negative" else -charge), polarity


def record_formula(text: str, adduct: Adduct | None) -> str:
    """A record's FORMULA in Hill order. A permanently charged ion (``[M]+``, ``[M]-``) is its own molecule: MassBank
    and MS-DIAL write its formula with the charge (``C5H14NO+`` for choline), which is read as the ion's atoms
    (``C5H14NO``); any other formula must be the neutral one (the charge comes from the adduct)."""
    text = text.strip()
    if adduct is not None and adduct.name in ("[M]+", "[M]-") and text.endswith(adduct.name[-1]):
        text = text[:-1]
    return normalize_formula(text)


def build_spectrum(options: ReadOptions, rec: RawRecord) -> Spectrum | SkippedRecord:
    """Validate one record; every problem becomes a SkippedRecord naming the bad value."""
    metadata = rec.metadata if rec.metadata is not None else {}
    try:
        if rec.precursor_mz is None:
            raise SpectrumError("no precursor m/z (PEPMASS, or the selected ion in mzML)")
        if not (0 < rec.precursor_mz < math.inf):
            raise SpectrumError(f"precursor m/z {rec.precursor_mz:g} is not a positive number; fix PEPMASS "
                                "(or the selected ion m/z in mzML)")
        mz, intensity = _clean_peaks(rec.mz, rec.intensity, metadata)
        adduct = parse_adduct_or_none(rec.adduct)
        charge, polarity = _resolve_charge(rec, adduct)
        default = options.default_adduct
        if adduct is None and default is not None and (polarity in (None, default.polarity)):
            adduct = default
            charge, polarity = default.charge, default.polarity
        formula = record_formula(rec.formula, adduct) if rec.formula else options.default_formula
        smiles = rec.smiles
        if smiles is not None and mol_from_smiles(smiles) is None:
            add_warning(metadata, f"reference SMILES {smiles!r} cannot be parsed by RDKit and was dropped")
            smiles = None
        spectrum = Spectrum(
            id=rec.spectrum_id,
            precursor_mz=rec.precursor_mz,
            mz=mz,
            intensity=intensity,
            adduct=adduct.name if adduct is not None else None,
            charge=charge,
            polarity=polarity,
            formula=formula,
            smiles=smiles,
            inchikey=rec.inchikey,
            retention_time=rec.retention_time,
            metadata=metadata,
            source=options.source,
            index=rec.index,
        )
        return check_formula_matches_precursor(spectrum, options.tol_ppm, options.tol_da)
    except (SpectrumError, FormulaError, AdductError) as e:
        return skipped_record(options, rec.index, rec.spectrum_id, str(e), rec)
