"""Write an LC-MS/MS run's features as the hand-off files of the chemist's pipeline, as each tool writes them (#60).

From an mzML run, through MS-GPT's own feature building (:func:`engine.spectra.run_features.iter_features`: consensus
MS2 of each precursor, its MS1 isotope pattern, RT, m/z), this writes

* ``<name>_sirius.mgf``: **MZmine 3's SIRIUS export**. Per feature row, as ``SiriusExportTask.writeHeader`` writes
  it (mzmine/mzmine, ``src/main/java/io/github/mzmine/modules/io/export_features_sirius/SiriusExportTask.java``,
  MZmine 3.0-3.4; later versions write the same keys through ``MGFEntryGenerator``): ``BEGIN IONS``,
  ``FEATURE_ID=<row ID>``, ``PEPMASS=<row m/z>``, ``CHARGE=1+`` (``abs(charge)`` then the polarity sign),
  ``RTINSECONDS=<RT min x 60>``, for the correlated MS1 record ``SPECTYPE=CORRELATED MS`` then ``MSLEVEL=1``
  (the feature's isotope pattern and co-detected ions, here the survey peaks MS-GPT averaged), for each MS2
  record ``MSLEVEL=2``; ``FILENAME=<raw file>``, ``SCANS=<scan number>`` (MS2 records, "merge off": one record
  per fragment scan); ``ION=<adduct>`` only where the feature has an ion identity (MZmine's ion identity
  networking; not written here: the features of a raw run have none); peaks ``m/z intensity``; ``END IONS`` and
  a blank line. Java's ``String.valueOf(double)`` is Python's ``repr``.
* ``<name>.mgf`` + ``<name>_quant.csv``: **MZmine's GNPS feature-based molecular networking export**
  (``GnpsFbmnMgfExportTask.export``, mzmine/mzmine ``modules/io/export_features_gnps/fbmn``): ``FEATURE_ID``,
  ``PEPMASS`` (``0.####`` m/z), ``SCANS=<row ID>``, ``RTINSECONDS`` (``0.###``), ``CHARGE=1+``, ``MSLEVEL=2``,
  ``MERGED_STATS`` where merged, peaks; and the quantification table GNPS reads (CCMS-UCSD/GNPS_Workflows,
  ``feature-based-molecular-networking/README.md``, "MZmine": ``row ID``, ``row m/z``, ``row retention time``
  (minutes), then ``<file name with extension> Peak area`` per sample). The run is one sample; the feature's
  area is the sum of its MS1 precursor intensities over the survey scans within its RT range (a stand-in for
  MZmine's chromatogram area, enough to test that abundances travel).
* ``<name>_msdial.msp``: **MS-DIAL's alignment spectra export** (MAT layout, as ``writeMsAnnotationTag`` of
  MS-DIAL's ``UtilityForAIF`` writes an aligned feature for MS-FINDER / as MSP; MS-DIAL 4 source, namespace
  ``Rfx.Riken.OsakaUniv``): ``NAME: Unknown``,
  ``SCANNUMBER: <alignment ID>``, ``RETENTIONTIME: <min>``, ``PRECURSORMZ``, ``PRECURSORTYPE`` (``[M+H]+``
  / ``[M-H]-`` when the feature has no adduct assigned, as MS-DIAL does), ``IONMODE: Positive``,
  ``SPECTRUMTYPE: Centroid``, ``INTENSITY: <height>``, ``INCHIKEY:``, ``SMILES:``, ``FORMULA:``, ``COMMENT:``,
  ``MSTYPE: MS1`` + ``Num Peaks: 3`` (M, M+1.00335, M+2.00671 heights, m/z rounded to 5 decimals), ``MSTYPE: MS2``
  + ``Num Peaks: n`` + ``m/z<TAB>intensity`` (5 decimals, intensity rounded to 0 decimals; MS-DIAL keeps peaks
  >= 0.5); records separated by a blank line.
* ``<name>.ms``: **SIRIUS .ms** as SIRIUS' ``JenaMsWriter.write`` writes one compound (sirius-ms/sirius,
  ``io/src/main/java/de/unijena/bioinf/babelms/ms/JenaMsWriter.java``): ``>compound <name>``, ``>parentmass``,
  ``>ionization`` (``[M+?]+``: the polarity only, no adduct assigned), ``>feature_id <row ID>``,
  ``>rt <seconds>s``, a blank line, ``>ms1merged``
  (the merged MS1: here the survey peaks MS-GPT averaged) with its peaks and a blank line, ``>ms2peaks`` (no
  collision energy known) with its peaks and a blank line (the optional ``>formula``, ``>instrumentation``,
  ``>quality`` lines are left out); compounds follow one another.

Usage (the QC-pool run of ../shared/data/mzml is MIT-licensed, from mzmine/mzmine; see its README)::

    python scripts/write_handoff_files.py ../shared/data/mzml/qexactive_dda_qc_pool.mzML OUT_DIR
    python scripts/write_handoff_files.py RUN.mzML OUT_DIR --features 20   # only the 20 most intense features
    python scripts/write_handoff_files.py RUN.mzML OUT_DIR --check   # and read them back against the mzML's features

It prints what it wrote (features, records, bytes). The tests build the same files from
``tests/synthetic_run.py`` with :func:`write_all`, so they run without ../shared.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

C13 = 1.003355  # 13C - 12C
MSDIAL_ISOTOPE_STEPS = (0.0, 1.00335, 2.00671)  # MS-DIAL writes M, M+1, M+2 at these offsets


def _sign(feature) -> str:
    return "-" if feature.spectrum.polarity == "negative" else "+"


def _charge(feature) -> str:
    return f"{abs(feature.spectrum.charge) or 1}{_sign(feature)}"


def _peaks(mz: np.ndarray, intensity: np.ndarray) -> list[str]:
    return [f"{float(m)!r} {float(i)!r}" for m, i in zip(mz, intensity)]


def _row_id(k: int) -> str:
    return str(k + 1)


def scan_number(scan_id: str) -> str:
    """``scan=17`` or ``controllerType=0 controllerNumber=1 scan=17`` -> ``17``."""
    for part in scan_id.split():
        if part.startswith("scan="):
            return part[5:]
    return scan_id


def mzmine_sirius_mgf(features: Sequence, raw_name: str) -> str:
    """MZmine 3's SIRIUS export of ``features`` (module notes); feature k gets row ID k + 1."""
    out: list[str] = []
    for k, f in enumerate(features):
        head = [f"FEATURE_ID={_row_id(k)}", f"PEPMASS={f.precursor_mz!r}", f"CHARGE={_charge(f)}",
                f"RTINSECONDS={f.retention_time!r}"]
        if f.ms1 is not None:
            out += ["BEGIN IONS", *head, "SPECTYPE=CORRELATED MS", "MSLEVEL=1", f"FILENAME={raw_name}",
                    *_peaks(f.ms1.mz, f.ms1.intensity), "END IONS", ""]
        for scan in f.scans:
            out += ["BEGIN IONS", *head, "MSLEVEL=2", f"FILENAME={raw_name}", f"SCANS={scan_number(scan.id)}",
                    *_peaks(scan.mz, scan.intensity), "END IONS", ""]
    return "\n".join(out) + "\n"


def gnps_fbmn_mgf(features: Sequence) -> str:
    """MZmine's GNPS-FBMN MGF: one merged MS2 record per feature row (module notes)."""
    out: list[str] = []
    for k, f in enumerate(features):
        out += ["BEGIN IONS", f"FEATURE_ID={_row_id(k)}", f"PEPMASS={f.precursor_mz:.4f}", f"SCANS={_row_id(k)}",
                f"RTINSECONDS={f.retention_time:.3f}", f"CHARGE={_charge(f)}", "MSLEVEL=2"]
        if f.n_scans > 1:
            out.append(f"MERGED_STATS={f.n_scans} / {f.n_scans} (0 removed due to low quality, 0 removed due to low "
                       "cosine).")
        out += [f"{float(m):.4f} {float(i):.1f}" for m, i in zip(f.spectrum.mz, f.spectrum.intensity * 1e4)]
        out += ["END IONS", ""]
    return "\n".join(out) + "\n"


def feature_area(feature, survey_scans: Sequence) -> float:
    """The feature's MS1 precursor intensity summed over the survey scans within its RT range (+- 5 s)."""
    lo = (feature.rt_min if feature.rt_min is not None else 0.0) - 5.0
    hi = (feature.rt_max if feature.rt_max is not None else lo) + 5.0
    tol = max(10e-6 * feature.precursor_mz, 0.005)
    total = 0.0
    for scan in survey_scans:
        if scan.retention_time is None or not (lo <= scan.retention_time <= hi):
            continue
        near = np.abs(scan.mz - feature.precursor_mz) <= tol
        if near.any():
            total += float(scan.intensity[near].max())
    if total == 0.0 and feature.ms1 is not None:
        total = feature.ms1.precursor_intensity
    return total


def gnps_quant_csv(features: Sequence, areas: Sequence[float], raw_name: str) -> str:
    """The GNPS/MZmine quantification table: row ID, row m/z, row retention time (min), '<file> Peak area'."""
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["row ID", "row m/z", "row retention time", f"{raw_name} Peak area", ""])
    for k, (f, area) in enumerate(zip(features, areas)):
        writer.writerow([_row_id(k), f"{f.precursor_mz:.4f}", f"{f.retention_time / 60.0:.4f}", f"{area:.1f}", ""])
    return buffer.getvalue()


def _isotope_heights(feature) -> list[tuple[float, float]]:
    """M, M+1, M+2 as MS-DIAL writes them: the precursor's m/z plus its fixed steps, the survey peak height there."""
    base = feature.precursor_mz
    heights = []
    for step in MSDIAL_ISOTOPE_STEPS:
        target = base + step
        height = 0.0
        if feature.ms1 is not None:
            near = np.abs(feature.ms1.mz - target) <= max(10e-6 * target, 0.005)
            height = float(feature.ms1.intensity[near].max()) if near.any() else 0.0
        heights.append((round(target, 5), height))
    return heights


def msdial_msp(features: Sequence, raw_name: str) -> str:
    """MS-DIAL's alignment spectra export (MAT layout, module notes); alignment IDs start at 0 as in MS-DIAL."""
    out: list[str] = []
    for k, f in enumerate(features):
        negative = f.spectrum.polarity == "negative"
        adduct = f.spectrum.adduct or ("[M-H]-" if negative else "[M+H]+")
        height = f.ms1.precursor_intensity if f.ms1 is not None else 0.0
        out += ["NAME: Unknown", f"SCANNUMBER: {k}", f"RETENTIONTIME: {f.retention_time / 60.0:.4f}",
                f"PRECURSORMZ: {f.precursor_mz:.5f}", f"PRECURSORTYPE: {adduct}",
                f"IONMODE: {'Negative' if negative else 'Positive'}", "SPECTRUMTYPE: Centroid",
                f"INTENSITY: {height:.0f}", "INCHIKEY: ", "SMILES: ", "FORMULA: ", f"COMMENT: {Path(raw_name).stem}",
                "MSTYPE: MS1", "Num Peaks: 3"]
        out += [f"{mz:.5f}\t{h:.0f}" for mz, h in _isotope_heights(f)]
        peaks = [(m, i) for m, i in zip(f.spectrum.mz, f.spectrum.intensity * 1e4) if i >= 0.5]
        out += ["MSTYPE: MS2", f"Num Peaks: {len(peaks)}"] + [f"{m:.5f}\t{i:.0f}" for m, i in peaks] + [""]
    return "\n".join(out) + "\n"


def sirius_ms(features: Sequence) -> str:
    """SIRIUS .ms, one compound per feature (module notes)."""
    out: list[str] = []
    for k, f in enumerate(features):
        ionization = f.spectrum.adduct or f"[M+?]{_sign(f)}"
        out += [f">compound feature_{_row_id(k)}", f">parentmass {f.precursor_mz!r}", f">ionization {ionization}",
                f">feature_id {_row_id(k)}", f">rt {f.retention_time!r}s", ""]
        if f.ms1 is not None:
            out += [">ms1merged", *_peaks(f.ms1.mz, f.ms1.intensity), ""]
        out += [">ms2peaks", *_peaks(f.spectrum.mz, f.spectrum.intensity), ""]
    return "\n".join(out) + "\n"


def run_features(mzml: str | Path, limit: int | None = None) -> tuple[list, list]:
    """The run's features (with RT, MS1 evidence) and its survey scans; ``limit``: the most intense features only,
    kept in run order."""
    from engine.spectra.features import FeatureConfig, build_features
    from engine.spectra.io import iter_spectra
    from engine.spectra.spectrum import Spectrum, SurveyScan

    spectra, survey = [], []
    for item in iter_spectra(mzml, survey_scans=True):
        if isinstance(item, SurveyScan):
            survey.append(item)
        elif isinstance(item, Spectrum):
            spectra.append(item)
    features = [f for f in build_features(spectra, survey, FeatureConfig()) if f.retention_time is not None]
    if limit is not None and len(features) > limit:
        keep = sorted(range(len(features)), key=lambda k: -(features[k].ms1.precursor_intensity
                                                          if features[k].ms1 is not None else 0.0))[:limit]
        features = [features[k] for k in sorted(keep)]
    return features, sorted(survey, key=lambda s: s.retention_time if s.retention_time is not None else np.inf)


def write_all(mzml: str | Path, out_dir: str | Path, limit: int | None = None) -> dict[str, Path]:
    """Write the four hand-offs of ``mzml``'s features into ``out_dir``; returns ``{kind: path}`` (plus ``quant``)."""
    features, survey = run_features(mzml, limit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = Path(mzml).name
    stem = Path(mzml).stem.removesuffix(".mzML")
    paths = {
        "mzmine_sirius": out / f"{stem}_sirius.mgf",
        "feature_mgf": out / f"{stem}_gnps.mgf",
        "quant": out / f"{stem}_gnps_quant.csv",
        "msp": out / f"{stem}_msdial.msp",
        "sirius_ms": out / f"{stem}.ms",
    }
    paths["mzmine_sirius"].write_text(mzmine_sirius_mgf(features, name), encoding="utf-8")
    paths["feature_mgf"].write_text(gnps_fbmn_mgf(features), encoding="utf-8")
    paths["quant"].write_text(gnps_quant_csv(features, [feature_area(f, survey) for f in features], name),
                              encoding="utf-8")
    paths["msp"].write_text(msdial_msp(features, name), encoding="utf-8")
    paths["sirius_ms"].write_text(sirius_ms(features), encoding="utf-8")
    return paths


def check(paths: dict[str, Path], reference: Sequence) -> list[str]:
    """Read each hand-off back as features and compare with the mzML's: one line per export (what the docs quote)."""
    from engine.formulas.candidates import rank_formulas
    from engine.spectra.handoff import feature_abundance, iter_input_features
    from engine.spectra.spectrum import SkippedRecord

    lines = []
    ref_tables = [rank_formulas(r.spectrum, ms1=r.ms1) for r in reference]
    for kind in ("mzmine_sirius", "feature_mgf", "msp", "sirius_ms"):
        items = list(iter_input_features(paths[kind]))
        features = [i for i in items if not isinstance(i, SkippedRecord)]
        same_ms2 = sum(f.spectrum.mz.size == r.spectrum.mz.size and np.allclose(f.spectrum.mz, r.spectrum.mz, atol=1e-4)
                       for f, r in zip(features, reference))
        same_top = same_all = ranked = 0
        for f, r, theirs in zip(features, reference, ref_tables):
            mine = rank_formulas(f.spectrum, ms1=f.ms1)
            ranked += bool(theirs.candidates)
            same_top += bool(mine.candidates and theirs.candidates
                             and mine.candidates[0].formula == theirs.candidates[0].formula)
            same_all += [c.formula for c in mine.candidates] == [c.formula for c in theirs.candidates]
        abundance = sum(feature_abundance(f.spectrum.metadata)[0] is not None for f in features)
        lines.append(f"  {kind:14s} {len(features)}/{len(reference)} features ({len(items) - len(features)} skipped), "
                     f"same MS2 peaks {same_ms2}, MS1 evidence {sum(f.ms1 is not None for f in features)}, "
                     f"same rank-1 formula {same_top} of the {ranked} the mzML gives candidates, same formula list "
                     f"{same_all}, with abundance {abundance}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mzml", help="an LC-MS/MS run (mzML)")
    parser.add_argument("out_dir", help="folder for the hand-off files")
    parser.add_argument("--features", type=int, metavar="N", help="only the N most intense features (run order kept)")
    parser.add_argument("--check", action="store_true",
                        help="read each file back and compare its features and formula candidates with the mzML's")
    args = parser.parse_args(argv)
    paths = write_all(args.mzml, args.out_dir, args.features)
    features, _ = run_features(args.mzml, args.features)
    print(f"{args.mzml}: {len(features)} features ({sum(f.ms1 is not None for f in features)} with MS1 evidence, "
          f"{sum(f.n_scans for f in features)} MS2 scans)")
    for kind, path in paths.items():
        print(f"  {kind:14s} {path} ({path.stat().st_size} bytes)")
    if args.check:
        print("read back as features, against the mzML's (formula candidates: rank_formulas with the MS1 evidence):")
        print("\n".join(check(paths, features)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
