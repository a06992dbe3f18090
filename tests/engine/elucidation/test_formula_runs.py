"""The formula-run budget (engine.elucidation.formula_runs): which formula candidates of a spectrum of unknown
formula draw samples, and which rank their library structures alone."""

from __future__ import annotations

import csv
import dataclasses

import pytest
from tiny_bundle import fixture_spectra

from engine.elucidation.formula_runs import (
    LIBRARY_ONLY,
    MIN_SAMPLED_PROBABILITY,
    SHARE_KEY,
    draws_samples,
    formula_run_spectra,
    run_params,
    sample_share,
    sampled,
)
from engine.elucidation.pipeline import QueryParams
from engine.elucidation.libraries import MASS_TRACK
from engine.formulas.candidates import FormulaCandidate, FormulaTable
from engine.library import load_library

ISOMER = "O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO"  # C14H28N2O6


def candidate(rank: int, formula: str, p: float, ion: str = "[M+H]+") -> FormulaCandidate:
    return FormulaCandidate(rank=rank, formula=formula, ion_type=ion, neutral_mass=0.0, theoretical_mz=0.0,
                            ppm_error=0.0, rdbe=0.0, terms={}, score=0.0, probability=p, explained_intensity=0.0,
                            n_explained=0, isomers=0)


@pytest.fixture
def table() -> FormulaTable:
    cands = (candidate(1, "C13H24N4O5", 0.90), candidate(2, "C12H29N3O7", 0.07), candidate(3, "C14H28N2O6", 0.02),
             candidate(4, "C10H20N8O3", 0.01))
    return FormulaTable("s1", 321.0, ("[M+H]+",), cands, n_decompositions=4, has_ms1=False, n_fragment_peaks=3)


@pytest.fixture
def spectrum():
    s = fixture_spectra()[0]
    return s.with_formula(None, check=False)


@pytest.fixture
def library(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    path = tmp_path / "mine.csv"
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows([["Identifier", "CompoundName", "SMILES"], ["ID-1", "an isomer", ISOMER]])
    return load_library(path, "mine")


def test_the_best_candidate_is_always_sampled_and_the_others_from_the_threshold_on():
    assert sampled(0, 0.001, 0.05)
    assert sampled(1, 0.05, 0.05) and not sampled(1, 0.0499, 0.05)
    assert sampled(3, 0.0, 0.0)  # 0 samples every one
    assert 0 < MIN_SAMPLED_PROBABILITY < 0.5


def test_unlikely_formulas_without_library_structures_are_left_out(spectrum, table):
    runs = formula_run_spectra(spectrum, table, 3, ["[M+H]+"])
    assert [s.formula for _, s in runs] == ["C13H24N4O5", "C12H29N3O7"]
    assert all(draws_samples(s) for _, s in runs)
    assert [c.rank for c, _ in runs] == [1, 2]


def test_every_one_of_k_is_sampled_at_zero(spectrum, table):
    runs = formula_run_spectra(spectrum, table, 3, ["[M+H]+"], min_probability=0.0)
    assert [s.formula for _, s in runs] == ["C13H24N4O5", "C12H29N3O7", "C14H28N2O6"]
    assert all(draws_samples(s) for _, s in runs)


def test_an_unlikely_formula_a_library_holds_ranks_its_structures_without_samples(spectrum, table, library):
    runs = formula_run_spectra(spectrum, table, 3, ["[M+H]+"], [library])
    assert [s.formula for _, s in runs] == ["C13H24N4O5", "C12H29N3O7", "C14H28N2O6"]
    unsampled = runs[2][1]
    assert not draws_samples(unsampled) and unsampled.metadata["formula_run"] == LIBRARY_ONLY
    assert unsampled.metadata["formula_score"] == "0.0200"  # it keeps its probability for the feature ranking
    assert "was not sampled" in unsampled.metadata["warnings"]
    assert len(formula_run_spectra(spectrum, table, 4, ["[M+H]+"], [library])) == 3  # C10H20N8O3: no structure


def test_the_mass_track_draws_no_samples(spectrum):
    track = spectrum.with_formula("C14H28N2O6", check=False)
    assert draws_samples(track)
    assert not draws_samples(dataclasses.replace(track, metadata={"formula_source": MASS_TRACK}))


def test_a_sampled_formula_below_the_best_draws_its_share_of_the_samples(spectrum, table):
    best, second = formula_run_spectra(spectrum, table, 3, ["[M+H]+"])
    params = QueryParams()  # N = 5 per query group
    assert SHARE_KEY not in best[1].metadata and run_params(best[1], params) is params
    assert float(second[1].metadata[SHARE_KEY]) == pytest.approx(0.07 / 0.90, abs=1e-4)
    assert "drew P/P(best) = 8% of each query group's samples, rounded up" in second[1].metadata["warnings"]
    assert run_params(second[1], params).samples_per_group == 1  # ceil(5 x 0.078), at least one
    assert run_params(second[1], dataclasses.replace(params, samples_per_group=40)).samples_per_group == 4
    deep = dataclasses.replace(params, effort="deep")
    assert run_params(second[1], deep) is deep  # deep search spends the full pool on every formula


def test_the_share_follows_the_probability_and_full_runs_switch_it_off(spectrum, table):
    assert sample_share(0, 0.01, 0.9) == 1.0  # the best draws everything, whatever its probability
    assert sample_share(1, 0.45, 0.5) == pytest.approx(0.9)
    assert sample_share(2, 0.6, 0.5) == 1.0  # never more than the full pool
    full = formula_run_spectra(spectrum, table, 3, ["[M+H]+"], proportional=False)
    assert all(SHARE_KEY not in s.metadata for _, s in full)
    params = QueryParams()
    assert all(run_params(s, params) is params for _, s in full)
