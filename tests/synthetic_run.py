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


def ion_mz(formula: str, ion_type: str) -> float:
    from engine.chem.adducts import precursor_mz_from_neutral
    from engine.chem.formula import formula_mass, parse_formula

    return precursor_mz_from_neutral(formula_mass(parse_formula(formula)), ion_type)


def elution_run(ions: list[dict], rt_range: tuple[float, float], step_s: float = 0.5) -> list[dict]:
    """Scans of a run in which each ion elutes as a Gaussian peak: survey scans every ``step_s`` seconds holding every
    ion's isotope pattern (M, M+1, M+2) at its height at that time, and, for each ion with ``fragments``, one MS2
    scan at its apex. An ion is ``{"formula", "ion_type", "apex", "sigma", "height", "fragments": [(m/z,
    intensity), ...] or None}``; scans come in time order (an MS2 scan names the survey scan before it)."""
    from engine.chem.adducts import parse_adduct
    from engine.chem.formula import parse_formula
    from engine.spectra.isotopes import isotope_pattern

    patterns = []
    for ion in ions:
        adduct = parse_adduct(ion["ion_type"])
        masses, abundances = isotope_pattern(adduct.ion_counts(parse_formula(ion["formula"])), 3, adduct.charge)
        patterns.append((np.asarray(masses), np.asarray(abundances) / abundances[0]))
    times = np.arange(rt_range[0], rt_range[1] + 1e-9, step_s)
    events = [(t, 1, None) for t in times] + [(ion["apex"] + step_s / 4, 2, k) for k, ion in enumerate(ions)
                                              if ion.get("fragments")]
    scans: list[dict] = []
    last_survey = None
    for t, level, k in sorted(events, key=lambda e: (e[0], e[1])):
        if level == 1:
            mz, intensity = [], []
            for ion, (masses, ratios) in zip(ions, patterns):
                height = ion["height"] * np.exp(-0.5 * ((t - ion["apex"]) / ion["sigma"]) ** 2)
                if height >= 1e3:
                    mz.extend(masses)
                    intensity.extend(ratios * height)
            mz.append(1000.0)  # a background ion: no survey scan is empty
            intensity.append(1e3)
            order = np.argsort(mz)
            scans.append({"ms_level": 1, "rt": float(t), "mz": np.array(mz)[order],
                          "intensity": np.array(intensity)[order]})
            last_survey = len(scans) - 1
        else:
            ion = ions[k]
            precursor = ion_mz(ion["formula"], ion["ion_type"])
            peaks = sorted([*ion["fragments"], (precursor, 20.0)])
            scans.append({"ms_level": 2, "rt": float(t), "precursor_mz": precursor, "charge": 1,
                          "ref": scan_id(last_survey) if last_survey is not None else None,
                          "mz": [p[0] for p in peaks], "intensity": [p[1] for p in peaks]})
    return scans


#: A run of adduct partners (:func:`write_adduct_run`): caffeine as [M+H]+ (four fragments) and [M+Na]+ (one weak
#: fragment) co-eluting at 60 s; a caffeine isomer seen only as [M+Na]+ at 150 s (not a partner: another time);
#: at 60 s a co-eluting ion whose m/z is caffeine's [M+K]+ but whose peak is 3 s later (another compound: its trace
#: does not follow caffeine's); and an [M+H]+ ion 0.6 s later (C5H5N5O4: its [M+NH4]+ would be caffeine's [M+Na]+
#: m/z within 10 ppm, a second partner for that feature that the weaker evidence loses).
CAFFEINE = "C8H10N4O2"
CAFFEINE_FRAGMENTS = ["C6H7N3O", "C5H7N3", "C4H5N3", "C7H6N4O"]  # neutral subformulas, seen as [M+H]+ ions


def adduct_run_ions() -> list[dict]:
    from engine.chem.adducts import parse_adduct

    k_partner = ion_mz(CAFFEINE, "[M+K]+")
    proton = parse_adduct("[M+H]+").mass_delta
    return [
        {"name": "caffeine [M+H]+", "formula": CAFFEINE, "ion_type": "[M+H]+", "apex": 60.0, "sigma": 2.0,
         "height": 1e7, "fragments": [(ion_mz(f, "[M+H]+"), 100.0) for f in CAFFEINE_FRAGMENTS]},
        {"name": "caffeine [M+Na]+", "formula": CAFFEINE, "ion_type": "[M+Na]+", "apex": 60.0, "sigma": 2.0,
         "height": 3e6, "fragments": [(ion_mz("C6H7N3O", "[M+Na]+"), 5.0)]},
        {"name": "isomer [M+Na]+", "formula": CAFFEINE, "ion_type": "[M+Na]+", "apex": 150.0, "sigma": 2.0,
         "height": 3e6, "fragments": [(ion_mz("C6H7N3O", "[M+Na]+"), 5.0)]},
        {"name": "other compound at caffeine's [M+K]+ m/z", "formula": _formula_of_mz(k_partner - proton),
         "ion_type": "[M+H]+", "apex": 63.0, "sigma": 1.5, "height": 2e6, "fragments": [(120.0808, 50.0)]},
        {"name": "C5H5N5O4 [M+H]+", "formula": "C5H5N5O4", "ion_type": "[M+H]+", "apex": 60.6, "sigma": 2.0,
         "height": 2e6, "fragments": [(ion_mz("C5H3N5O3", "[M+H]+"), 50.0)]},
    ]


def _formula_of_mz(neutral: float) -> str:
    """A formula of (close to) the neutral mass: the nearest CHNO decomposition (test fixtures only)."""
    from engine.chem.formula import format_formula, formula_mass

    best = min(((c, h, n, o) for c in range(1, 20) for n in range(0, 6) for o in range(0, 6) for h in range(0, 40)),
               key=lambda v: abs(formula_mass({"C": v[0], "H": v[1], "N": v[2], "O": v[3]}) - neutral))
    return format_formula({k: v for k, v in zip("CHNO", best) if v})


def write_adduct_run(path: str | Path, ions: list[dict] | None = None) -> Path:
    """The run of :func:`adduct_run_ions` (or ``ions``) as mzML, 30-180 s, a survey scan every 0.5 s."""
    return write_mzml(path, elution_run(ions if ions is not None else adduct_run_ions(), (30.0, 180.0)))
