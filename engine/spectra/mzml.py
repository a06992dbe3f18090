"""Read the MS2 scans of an mzML file (see :mod:`engine.spectra.io` for the rules) with pyteomics, scan by scan:
precursor, charge, polarity and scan start time from their CV params, peak arrays decoded per scan so that a
damaged array skips its scan only; with ``survey_scans``, the MS1 scans too.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterator, Mapping

import numpy as np

from engine.errors import InputFileError, SpectrumError
from engine.spectra.reading import RawRecord, ReadOptions, build_spectrum, open_binary, skipped_record
from engine.spectra.spectrum import SkippedRecord, Spectrum, SurveyScan


def _cv(params: Mapping, accession: str, name: str):
    """Value of a CV param by accession (pyteomics keys carry it), else by name; None if absent."""
    for key, value in params.items():
        if getattr(key, "accession", None) == accession:
            return value
    return params.get(name)


def iter_mzml(options: ReadOptions) -> Iterator[Spectrum | SkippedRecord]:
    """A Spectrum or SkippedRecord for every MS2 scan, in file order (and, with ``survey_scans``, a SurveyScan
    for every readable MS1 scan); a run without MS2 scans is an InputFileError."""
    from pyteomics import mzml

    n_scans = n_ms2 = 0
    levels: Counter[str] = Counter()
    # Arrays are decoded per scan (decode_binary=False), so a corrupt array skips its scan only.
    with open_binary(options.path) as fh, mzml.MzML(fh, use_index=False, read_schema=False,
                                                      iterative=True, decode_binary=False) as reader:
        for position, spec in enumerate(reader):
            n_scans += 1
            level = _cv(spec, "MS:1000511", "ms level")
            levels[str(level)] += 1
            if _int_or(level, -1) == 1 and options.survey_scans:
                scan = _survey_scan(options, _int_or(spec.get("index"), position), spec)
                if scan is not None:
                    yield scan
            if _int_or(level, -1) != 2:
                continue
            n_ms2 += 1
            index = _int_or(spec.get("index"), position)
            try:
                item = _mzml_record(options, index, spec)
            except SpectrumError as e:  # a damaged scan: the rest of the run goes on
                item = skipped_record(options, index, str(spec.get("id") or index), str(e))
            except (ValueError, TypeError) as e:
                item = skipped_record(options, index, str(spec.get("id") or index), f"the scan cannot be read ({e})")
            yield item
    if n_ms2 == 0:
        found = ", ".join(f"{n} of MS level {lv}" for lv, n in sorted(levels.items())) if n_scans else "none"
        raise InputFileError(
            options.source,
            f"no MS2 spectra: the file holds {n_scans} spectra ({found}); MS-GPT needs MS/MS (MS2) scans.",
        )


def _int_or(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _decoded(spec: Mapping, key: str) -> np.ndarray:
    array = spec.get(key)
    if array is None:
        return np.zeros(0)
    try:
        return np.asarray(array.decode() if hasattr(array, "decode") else array, dtype=np.float64)
    except (ValueError, TypeError, zlib.error) as e:  # bad base64, zlib or numbers
        raise SpectrumError(f"its {key} cannot be decoded ({e}); the file is damaged") from None


def _mzml_record(options: ReadOptions, index: int, spec: Mapping) -> Spectrum | SkippedRecord:
    spectrum_id = str(spec.get("id") or index)
    metadata: dict[str, str] = {"scan_id": spectrum_id, "ms_level": "2"}
    precursors = (spec.get("precursorList") or {}).get("precursor") or [{}]
    precursor = precursors[0]
    ions = (precursor.get("selectedIonList") or {}).get("selectedIon") or [{}]
    ion = ions[0]
    precursor_mz = _cv(ion, "MS:1000744", "selected ion m/z")
    if precursor_mz is not None:
        metadata["precursor_source"] = "selected ion m/z"
    else:
        precursor_mz = _cv(precursor.get("isolationWindow") or {}, "MS:1000827", "isolation window target m/z")
        if precursor_mz is not None:
            metadata["precursor_source"] = "isolation window target m/z"
    charge = _cv(ion, "MS:1000041", "charge state")
    polarity = _polarity(spec)
    if precursor.get("spectrumRef"):
        metadata["precursor_scan_id"] = str(precursor["spectrumRef"])
    precursor_intensity = _cv(ion, "MS:1000042", "peak intensity")
    if precursor_intensity is not None:
        metadata["precursor_intensity"] = f"{float(precursor_intensity):g}"
    energy = _cv(precursor.get("activation") or {}, "MS:1000045", "collision energy")
    if energy is not None:
        metadata["collision_energy"] = f"{energy:g}"
    for accession, name, key in (("MS:1000796", "spectrum title", "spectrum_title"),
                                 ("MS:1000512", "filter string", "filter_string")):
        value = _cv(spec, accession, name) or _cv(_first_scan(spec), accession, name)
        if value:
            metadata[key] = str(value)
    rec = RawRecord(
        index=index,
        spectrum_id=spectrum_id,
        precursor_mz=None if precursor_mz is None else float(precursor_mz),
        charge=int(charge) if charge is not None else 0,
        charge_signed=False,  # mzML charge states are unsigned; the polarity gives the sign
        polarity=polarity,
        retention_time=_mzml_rt(_first_scan(spec)),
        mz=_decoded(spec, "m/z array"),
        intensity=_decoded(spec, "intensity array"),
        metadata=metadata,
    )
    return build_spectrum(options, rec)


def _polarity(spec: Mapping) -> str | None:
    if _cv(spec, "MS:1000130", "positive scan") is not None:
        return "positive"
    if _cv(spec, "MS:1000129", "negative scan") is not None:
        return "negative"
    return None


def _survey_scan(options: ReadOptions, index: int, spec: Mapping) -> SurveyScan | None:
    """An MS1 scan; ``None`` when its peaks cannot be decoded (it is evidence only, the run goes on)."""
    try:
        mz, intensity = _decoded(spec, "m/z array"), _decoded(spec, "intensity array")
    except SpectrumError:
        return None
    if mz.shape != intensity.shape:
        return None
    keep = np.isfinite(mz) & np.isfinite(intensity) & (mz > 0) & (intensity > 0)
    return SurveyScan(id=str(spec.get("id") or index), index=index, retention_time=_mzml_rt(_first_scan(spec)),
                      polarity=_polarity(spec), mz=mz[keep], intensity=intensity[keep], source=options.source)


def _first_scan(spec: Mapping) -> Mapping:
    scans = (spec.get("scanList") or {}).get("scan") or [{}]
    return scans[0]


def _mzml_rt(scan: Mapping) -> float | None:
    value = _cv(scan, "MS:1000016", "scan start time")
    if value is None:
        return None
    unit = str(getattr(value, "unit_info", None) or "minute").lower()
    factor = {"second": 1.0, "s": 1.0, "minute": 60.0, "min": 60.0, "hour": 3600.0}.get(unit, 60.0)
    return float(value) * factor
