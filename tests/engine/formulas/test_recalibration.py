"""Run-level m/z recalibration: the robust fit, corrections, tolerances and an estimate from a synthetic run.

The synthetic run's spectra are built from formulas and subformula fragments, all shifted by a known
offset; a scorer with explicit weights is built here (nothing depends on the shipped one).
"""

import dataclasses

import numpy as np
import pytest

from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.errors import ConfigError
from engine.formulas.candidates import FormulaConfig
from engine.formulas.prior import FormulaPrior
from engine.formulas.recalibration import (
    Recalibration,
    RecalibrationConfig,
    recalibrate_run,
    robust_line,
)
from engine.formulas.scorer import FormulaScorer
from engine.spectra.features import MS1Evidence
from engine.spectra.spectrum import Spectrum

RUN = {  # formula: fragments (neutral subformulas, seen as [M+H]+ ions)
    "C8H10N4O2": ["C6H7N3O", "C5H7N3", "C4H5N3", "C7H6N4O"],
    "C10H10O3": ["C10H8O2", "C9H8O", "C8H8O", "C7H6"],
    "C9H8ClNO": ["C9H6ClN", "C8H8ClN", "C7H6Cl", "C6H5N"],
    "C12H10N2O": ["C12H8N2", "C11H8N2", "C6H5N", "C6H6N2"],
    "C7H14O6": ["C7H12O5", "C6H10O4", "C5H8O3", "C4H6O2"],
    "C13H18O2": ["C13H16O", "C12H16", "C10H12", "C9H10"],
}


@pytest.fixture(scope="module")
def scorer():
    prior = FormulaPrior.fit({f: 3 for f in RUN})
    stage1 = {"mass_error": -5.0, "prior_isomers": 1.0}
    stage2 = {**stage1, "frag_intensity": 8.0, "frag_decoy": -4.0}
    return FormulaScorer(prior=prior, stage1=stage1, stage2=stage2, ion_type_log_prior={"[M+H]+": -0.1})


def ion_mz(formula: str) -> float:
    return precursor_mz_from_neutral(formula_mass(parse_formula(formula)), "[M+H]+")


def shifted_run(offset_ppm: float, fragment_offset_ppm: float | None = None) -> list[tuple[Spectrum, None]]:
    """The run's precursors off by ``offset_ppm``, its fragments by ``fragment_offset_ppm`` (default the same)."""
    fragment_offset_ppm = offset_ppm if fragment_offset_ppm is None else fragment_offset_ppm
    items = []
    for i, (formula, fragments) in enumerate(RUN.items()):
        mz = np.array([ion_mz(f) for f in fragments]) * (1 + fragment_offset_ppm * 1e-6)
        precursor = ion_mz(formula) * (1 + offset_ppm * 1e-6)
        items.append((Spectrum(id=f"s{i}", precursor_mz=precursor, mz=mz, intensity=[100.0, 80.0, 60.0, 40.0],
                               adduct="[M+H]+"), None))
    return items


def test_robust_line_recovers_offset_and_slope_despite_outliers():
    rng = np.random.default_rng(0)
    mz = rng.uniform(100, 900, 200)
    ppm = 6.0 + 4.0 * (mz - 500) / 1000 + rng.normal(0, 1.0, mz.size)
    ppm[:30] = rng.uniform(-25, 25, 30)  # wrong annotations
    offset, slope, _ = robust_line(mz, ppm, np.ones(mz.size), fit_slope=True)
    assert offset == pytest.approx(6.0, abs=0.4) and slope == pytest.approx(4.0, abs=1.0)
    offset_only, slope0, _ = robust_line(mz, ppm, np.ones(mz.size), fit_slope=False)
    assert slope0 == 0.0 and offset_only == pytest.approx(6.0, abs=0.6)


def test_a_shifted_run_is_measured_and_corrected(scorer):
    items = shifted_run(8.0)
    recal = recalibrate_run(items, scorer=scorer, recalibration=RecalibrationConfig(min_features=4))
    assert recal.applied and recal.n_features >= 4
    assert recal.ppm(300.0) == pytest.approx(8.0, abs=1.0)
    assert "m/z recalibration: +" in recal.describe() and "precursors" in recal.describe()
    fixed = recal.apply(items[0][0])
    assert (fixed.precursor_mz - ion_mz("C8H10N4O2")) / ion_mz("C8H10N4O2") * 1e6 == pytest.approx(0.0, abs=1.0)
    assert fixed.metadata["recalibrated_ppm"].startswith("8") or fixed.metadata["recalibrated_ppm"].startswith("7")


def test_fragment_weight_sets_how_much_the_fragments_pull_the_line(scorer):
    # fragments read 0 ppm (closest subformula, or MS2 calibrated apart), precursors +8 ppm
    items = shifted_run(8.0, fragment_offset_ppm=0.0)
    alone = recalibrate_run(items, scorer=scorer, recalibration=RecalibrationConfig(min_features=4, fragment_weight=0))
    both = recalibrate_run(items, scorer=scorer, recalibration=RecalibrationConfig(min_features=4))
    assert alone.applied and alone.ppm(300.0) == pytest.approx(8.0, abs=0.5)
    assert both.applied and both.ppm(300.0) < 6.0  # the fragments' robust majority pulls the line off the precursors
    assert len(alone.points_mz) == len(alone.points_ppm) == len(both.points_mz)  # fragments still shown
    with pytest.raises(ConfigError, match="`fragment_weight` must be a number >= 0"):
        RecalibrationConfig(fragment_weight=-1.0)


def test_too_few_confident_precursors_leave_the_run_as_measured(scorer):
    recal = recalibrate_run(shifted_run(8.0)[:2], scorer=scorer)
    assert not recal.applied and "5 needed" in recal.describe()
    s = shifted_run(8.0)[0][0]
    assert recal.apply(s) is s and recal.formula_config(FormulaConfig()) == FormulaConfig()


def test_user_set_and_off():
    user = Recalibration.fixed(5.0, 2.0, scatter_ppm=1.0)
    assert user.applied and user.ppm(500.0) == pytest.approx(5.0) and user.ppm(1500.0) == pytest.approx(7.0)
    assert user.correct(np.array([500.0]))[0] == pytest.approx(500.0 / (1 + 5e-6))
    ms1 = MS1Evidence("m", None, 500.0025, 1.0, np.array([500.0025, 501.0]), np.array([1.0, 0.2]))
    assert user.apply_ms1(ms1).precursor_mz == pytest.approx(500.0025 / (1 + 5e-6))
    assert "set by the user" in user.describe()
    off = Recalibration.off()
    assert not off.applied and off.apply_ms1(ms1) is ms1 and "turned off" in off.describe()
    with pytest.raises(ConfigError, match="`offset_ppm` must be a number between -200 and 200 ppm, got 500"):
        Recalibration.fixed(500.0)


def test_tolerance_follows_the_measured_scatter():
    recal = dataclasses.replace(Recalibration.fixed(3.0), scatter_ppm=1.0, min_scatter_ppm=1.5)
    config = recal.formula_config(FormulaConfig(ppm=10.0))
    assert config.ppm == pytest.approx(6.0) and config.mass_sigma_ppm == pytest.approx(1.5)
    wide = dataclasses.replace(recal, scatter_ppm=5.0).formula_config(FormulaConfig(ppm=10.0))
    assert wide.ppm == 10.0 and wide.mass_sigma_ppm == 5.0  # never wider than the user's tolerance


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="`min_probability` must be a number in"):
        RecalibrationConfig(min_probability=2.0)
    with pytest.raises(ConfigError, match="`mass_sigma_ppm` must be > 0"):
        FormulaConfig(mass_sigma_ppm=0.0)


def test_settings_and_features_of_a_run(scorer):
    from engine.formulas.recalibration import (
        parse_setting,
        recalibrate_features,
        run_formula_config,
    )
    from engine.spectra.features import library_feature

    assert parse_setting("auto") is None and not parse_setting("OFF").applied
    assert parse_setting("5.2,-1").ppm(1500.0) == pytest.approx(4.2)
    with pytest.raises(ConfigError, match="give auto, off, or OFFSET"):
        parse_setting("five")
    features = [library_feature(s) for s, _ in shifted_run(8.0)]
    seen = []
    out = list(recalibrate_features(features, None, scorer=scorer, report=seen.append))
    assert len(seen) == 1 and seen[0].applied and len(out) == len(features)
    assert out[0].precursor_mz == out[0].spectrum.precursor_mz < features[0].precursor_mz
    config = run_formula_config(out[0].spectrum, FormulaConfig())
    assert config.ppm < 10.0 and config.mass_sigma_ppm >= 1.5
    assert run_formula_config(features[0].spectrum, FormulaConfig()) == FormulaConfig()
    kept = list(recalibrate_features(features, parse_setting("off"), scorer=scorer))
    assert [f.spectrum for f in kept] == [f.spectrum for f in features]


def test_the_slope_is_not_extrapolated_beyond_the_points():
    recal = dataclasses.replace(Recalibration.fixed(2.0, 10.0), mz_range=(100.0, 600.0))
    assert recal.ppm(600.0) == pytest.approx(3.0) and recal.ppm(1000.0) == pytest.approx(3.0)
    assert recal.ppm(50.0) == recal.ppm(100.0) == pytest.approx(-2.0)
