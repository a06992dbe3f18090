"""Auto recalibration recovering a known offset, through ``msgpt predict`` (issue #61, item 3).

A synthetic run (tests/synthetic_run.py) of six compounds, each a survey scan with its [M+H]+ isotope pattern and an
MS2 scan with four fragment ions, every m/z read 15 ppm high: more than the 10 ppm precursor window, so as measured
no true formula is a candidate. ``--recalibrate auto`` (the default) measures the offset from the run itself, takes it
out, and the formulas handed to the model are the true ones; ``--recalibrate off`` leaves them out of reach. What the
CLI hands to the model is captured: nothing depends on what the tiny model generates.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from synthetic_run import scan_id, write_mzml

import engine.cli.predict as cli
from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import format_formula, formula_mass, parse_formula
from engine.spectra.isotopes import isotope_pattern

OFFSET_PPM = 15.0
RUN = {  # formula: fragments (neutral subformulas, seen as [M+H]+ ions)
    "C8H10N4O2": ["C6H7N3O", "C5H7N3", "C4H5N3", "C7H6N4O"],
    "C10H10O3": ["C10H8O2", "C9H8O", "C8H8O", "C7H6"],
    "C9H8ClNO": ["C9H6ClN", "C8H8ClN", "C7H6Cl", "C6H5N"],
    "C12H10N2O": ["C12H8N2", "C11H8N2", "C6H5N", "C6H6N2"],
    "C7H14O6": ["C7H12O5", "C6H10O4", "C5H8O3", "C4H6O2"],
    "C13H18O2": ["C13H16O", "C12H16", "C10H12", "C9H10"],
}


def mz_of(formula: str) -> float:
    return precursor_mz_from_neutral(formula_mass(parse_formula(formula)), "[M+H]+")


@pytest.fixture
def shifted_run(tmp_path):
    shift = 1 + OFFSET_PPM * 1e-6
    scans = []
    for i, (formula, fragments) in enumerate(RUN.items()):
        rt = 60.0 * (i + 1)
        ion = dict(parse_formula(formula))
        ion["H"] += 1
        masses, abundances = isotope_pattern(format_formula(ion), 3, charge=1)
        scans.append({"ms_level": 1, "rt": rt, "mz": np.asarray(masses) * shift, "intensity": abundances * 1e6})
        scans.append({"ms_level": 2, "rt": rt + 0.5, "precursor_mz": mz_of(formula) * shift, "charge": 1,
                      "ref": scan_id(len(scans) - 1), "mz": sorted(mz_of(f) * shift for f in fragments),
                      "intensity": [100.0, 80.0, 60.0, 40.0]})
    return write_mzml(tmp_path / "run.mzML", scans)


def predict(run, tmp_path, tiny_bundle_dir, *extra):
    return cli.main(["predict", str(run), "-o", str(tmp_path / "out.csv"), "--model", str(tiny_bundle_dir),
                     "--formulas", "1", "--groups", "2", "--pool-size", "4", "-q", "--no-libraries", *extra])


def test_auto_recalibration_recovers_the_runs_offset(shifted_run, tmp_path, tiny_bundle_dir, captured, capsys):
    assert predict(shifted_run, tmp_path, tiny_bundle_dir) == 0  # auto: the default
    err = capsys.readouterr().err
    said = re.search(r"run\.mzML: m/z recalibration: ([+-][\d.]+) ppm at m/z 500.* from (\d+) precursors", err)
    assert said, err
    assert float(said.group(1)) == pytest.approx(OFFSET_PPM, abs=1.0) and int(said.group(2)) >= 5
    assert len(captured) == len(RUN)
    for spectrum, formula in zip(captured, RUN):  # features in retention-time order, as written
        assert float(spectrum.metadata["recalibrated_ppm"]) == pytest.approx(OFFSET_PPM, abs=1.0)
        assert (spectrum.precursor_mz / mz_of(formula) - 1) * 1e6 == pytest.approx(0.0, abs=1.0)
        assert spectrum.formula == formula  # the true formula, back within the window


def test_without_recalibration_the_true_formulas_are_out_of_reach(shifted_run, tmp_path, tiny_bundle_dir, captured,
                                                                  capsys):
    assert predict(shifted_run, tmp_path, tiny_bundle_dir, "--recalibrate", "off") == 0
    assert "run.mzML: m/z recalibration: none (" in capsys.readouterr().err
    assert len(captured) == len(RUN)
    for spectrum, formula in zip(captured, RUN):
        assert "recalibrated_ppm" not in spectrum.metadata
        assert (spectrum.precursor_mz / mz_of(formula) - 1) * 1e6 == pytest.approx(OFFSET_PPM, abs=0.01)
        assert spectrum.formula != formula  # 15 ppm off: outside the 10 ppm window
