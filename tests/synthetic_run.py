"""Write small synthetic LC-MS/MS runs as mzML (MS1 survey scans + MS2 scans) for the tests.

Only what engine/spectra/io.py reads is written: MS level, polarity, scan start time (seconds), precursor
(selected ion m/z, charge, spectrumRef), uncompressed 64-bit peak arrays. Scans are dicts:

``{"ms_level": 1, "rt": 12.0, "mz": [...], "intensity": [...]}`` or
``{"ms_level": 2, "rt": 12.5, "precursor_mz": 195.0877, "mz": [...], "intensity": [...]}``
(optional keys: ``charge``, ``polarity`` ("positive"/"negative"), ``ref`` (id of the survey scan)).
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np


def _array(values, accession: str, name: str) -> str:
    data = base64.b64encode(np.asarray(values, dtype="<f8").tobytes()).decode()
    return (
        f'<binaryDataArray encodedLength="{len(data)}">'
        '<cvParam cvRef="MS" accession="MS:1000523" name="64-bit float" value=""/>'
        '<cvParam cvRef="MS" accession="MS:1000576" name="no compression" value=""/>'
        f'<cvParam cvRef="MS" accession="{accession}" name="{name}" value=""/>'
        f"<binary>{data}</binary></binaryDataArray>"
    )


def scan_id(index: int) -> str:
    return f"scan={index + 1}"


def _spectrum(index: int, scan: dict) -> str:
    level = scan["ms_level"]
    polarity = scan.get("polarity", "positive")
    pol = ('<cvParam cvRef="MS" accession="MS:1000130" name="positive scan" value=""/>' if polarity == "positive"
           else '<cvParam cvRef="MS" accession="MS:1000129" name="negative scan" value=""/>')
    precursor = ""
    if level == 2:
        ref = f' spectrumRef="{scan["ref"]}"' if scan.get("ref") else ""
        charge = (f'<cvParam cvRef="MS" accession="MS:1000041" name="charge state" value="{scan["charge"]}"/>'
                  if scan.get("charge") else "")
        precursor = (
            f'<precursorList count="1"><precursor{ref}><selectedIonList count="1"><selectedIon>'
            f'<cvParam cvRef="MS" accession="MS:1000744" name="selected ion m/z" value="{scan["precursor_mz"]!r}"/>'
            f"{charge}</selectedIon></selectedIonList></precursor></precursorList>"
        )
    mz, intensity = scan["mz"], scan["intensity"]
    return (
        f'<spectrum index="{index}" id="{scan_id(index)}" defaultArrayLength="{len(mz)}">'
        f'<cvParam cvRef="MS" accession="MS:1000511" name="ms level" value="{level}"/>{pol}'
        '<scanList count="1"><scan>'
        f'<cvParam cvRef="MS" accession="MS:1000016" name="scan start time" value="{scan["rt"]!r}" '
        'unitCvRef="UO" unitAccession="UO:0000010" unitName="second"/>'
        f"</scan></scanList>{precursor}"
        f'<binaryDataArrayList count="2">{_array(mz, "MS:1000514", "m/z array")}'
        f'{_array(intensity, "MS:1000515", "intensity array")}</binaryDataArrayList></spectrum>'
    )


def write_mzml(path: str | Path, scans: list[dict]) -> Path:
    """Write ``scans`` (in order) as one mzML run; returns the path."""
    body = "".join(_spectrum(i, s) for i, s in enumerate(scans))
    text = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<mzML xmlns="http://psi.hupo.org/ms/mzml" version="1.1.0">'
        '<cvList count="2"><cv id="MS" fullName="PSI-MS" URI="https://psi-mzml"/>'
        '<cv id="UO" fullName="Unit Ontology" URI="https://uo"/></cvList>'
        f'<run id="synthetic"><spectrumList count="{len(scans)}">{body}</spectrumList></run></mzML>\n'
    )
    path = Path(path)
    path.write_text(text, encoding="utf-8")
    return path


#: Six compounds of a synthetic run (:func:`write_shifted_run`): formula -> fragments (neutral subformulas, seen as
#: [M+H]+ ions).
SHIFTED_RUN = {
    "C8H10N4O2": ["C6H7N3O", "C5H7N3", "C4H5N3", "C7H6N4O"],
    "C10H10O3": ["C10H8O2", "C9H8O", "C8H8O", "C7H6"],
    "C9H8ClNO": ["C9H6ClN", "C8H8ClN", "C7H6Cl", "C6H5N"],
    "C12H10N2O": ["C12H8N2", "C11H8N2", "C6H5N", "C6H6N2"],
    "C7H14O6": ["C7H12O5", "C6H10O4", "C5H8O3", "C4H6O2"],
    "C13H18O2": ["C13H16O", "C12H16", "C10H12", "C9H10"],
}


def protonated_mz(formula: str) -> float:
    from engine.chem.adducts import precursor_mz_from_neutral
    from engine.chem.formula import formula_mass, parse_formula

    return precursor_mz_from_neutral(formula_mass(parse_formula(formula)), "[M+H]+")


def write_shifted_run(path: str | Path, offset_ppm: float) -> Path:
    """An mzML run of :data:`SHIFTED_RUN`, one compound a minute: a survey scan with its [M+H]+ isotope pattern and an
    MS2 scan with four fragment ions, every m/z read ``offset_ppm`` high (a run to recalibrate)."""
    from engine.chem.formula import format_formula, parse_formula
    from engine.spectra.isotopes import isotope_pattern

    shift = 1 + offset_ppm * 1e-6
    scans = []
    for i, (formula, fragments) in enumerate(SHIFTED_RUN.items()):
        rt = 60.0 * (i + 1)
        ion = dict(parse_formula(formula))
        ion["H"] += 1
        masses, abundances = isotope_pattern(format_formula(ion), 3, charge=1)
        scans.append({"ms_level": 1, "rt": rt, "mz": np.asarray(masses) * shift, "intensity": abundances * 1e6})
        scans.append({"ms_level": 2, "rt": rt + 0.5, "precursor_mz": protonated_mz(formula) * shift, "charge": 1,
                      "ref": scan_id(len(scans) - 1), "mz": sorted(protonated_mz(f) * shift for f in fragments),
                      "intensity": [100.0, 80.0, 60.0, 40.0]})
    return write_mzml(path, scans)
