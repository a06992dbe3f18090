"""Simulated LC-MS runs with adduct partners (benchmarks/realistic_runs.py, lcms_run) and how
benchmarks/adduct_group_benchmark.py scores them: partners grouped, a decoy at a partner m/z left out."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.spectra.spectrum import Spectrum

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import adduct_group_benchmark as bench  # noqa: E402
import realistic_runs  # noqa: E402

COMPOUNDS = {  # formula -> fragments (neutral subformulas, seen as [M+H]+)
    "C8H10N4O2": ["C6H7N3O", "C5H7N3", "C4H5N3"],
    "C10H10O3": ["C10H8O2", "C9H8O", "C8H8O"],
    "C12H10N2O": ["C12H8N2", "C11H8N2", "C6H6N2"],
}


def mz(formula: str, ion: str = "[M+H]+") -> float:
    return precursor_mz_from_neutral(formula_mass(parse_formula(formula)), ion)


def spectrum(formula: str, key: str) -> Spectrum:
    frags = COMPOUNDS[formula]
    return Spectrum(id=key, precursor_mz=mz(formula), mz=[mz(f) for f in frags], intensity=[100.0, 60.0, 30.0],
                    adduct="[M+H]+", formula=formula, inchikey=f"{key:A<14}-XXXXXXXXXX-N")


def quiet(name: str):
    return dataclasses.replace(realistic_runs.INSTRUMENTS[name], noise_peaks=0.0, offset_sd_ppm=0.5, slope_sd_ppm=0.0)


def test_a_simulated_run_elutes_each_ion_with_its_partner_and_hides_what_it_is():
    rng = np.random.default_rng(1)
    main = spectrum("C8H10N4O2", "CAFF")
    ions = realistic_runs.adduct_partner_ions("CAFF", main, {}, 60.0, 2.0, 1e7, {"[M+Na]+": 1.0}, rng)
    assert [(i.ion_type, i.role, i.source) for i in ions] == [("[M+H]+", "main", "real"),
                                                             ("[M+Na]+", "partner", "simulated")]
    spectra, survey, _, owner = realistic_runs.lcms_run(ions, quiet("orbitrap"), rng, (40.0, 80.0))
    assert [o.ion_type for o in owner] == ["[M+H]+", "[M+Na]+"] or [o.ion_type for o in owner] == ["[M+Na]+", "[M+H]+"]
    assert all(s.formula is None and s.adduct is None and s.inchikey is None for s in spectra)
    na = spectra[[o.ion_type for o in owner].index("[M+Na]+")]
    assert abs(na.precursor_mz - mz("C8H10N4O2", "[M+Na]+")) < 0.002 and abs(na.retention_time - 60.0) < 1.5
    apex = max(survey, key=lambda s: s.intensity[np.abs(s.mz - mz("C8H10N4O2")).argmin()])
    assert abs(apex.retention_time - 60.0) <= 0.5  # the [M+H]+ peaks at its apex
    both = [s for s in survey if (np.abs(s.mz - mz("C8H10N4O2", "[M+Na]+")) < 0.005).any()]
    assert both and all(abs(s.retention_time - 60.0) < 8 for s in both)  # the partner co-elutes


def test_the_benchmark_counts_partners_grouped_and_a_decoy_left_out():
    rng = np.random.default_rng(3)
    ions = []
    for k, (formula, apex) in enumerate(zip(COMPOUNDS, (60.0, 120.0, 180.0))):
        ions += realistic_runs.adduct_partner_ions(f"K{k}", spectrum(formula, f"K{k}"), {}, apex, 2.0, 1e7,
                                                   {"[M+Na]+": 1.0}, rng)
    # another compound placed at caffeine's [M+K]+ m/z, 2 s after it, with its own peak shape
    target = dataclasses.replace(ions[0], ion_type="[M+K]+")
    ions.append(realistic_runs.decoy_ion("decoy", target, spectrum("C10H10O3", "DECOY"), rng))
    out = bench.evaluate_run(ions, quiet("orbitrap"), rng, 240.0, bench.FormulaConfig(), bench.GroupConfig())
    assert out["true_pairs"] == 3 and out["correct_pairs"] == 3 and out["found_pairs"] == 3
    assert out["decoys"] == 1 and out["decoys_grouped"] == 0
    assert out["grouped_right_ion"] == out["n_grouped"] == 6
    na = [r for r in out["rows"] if r["ion_type"] == "[M+Na]+"]
    assert len(na) == 3 and all(r["grouped"] for r in na)
    summary = bench.summarise([out])
    assert summary["precision"] == pytest.approx(1.0) and summary["recall"] == pytest.approx(1.0)
    assert summary["formula_first"]["[M+Na]+ (simulated MS2)"]["n"] == 3
