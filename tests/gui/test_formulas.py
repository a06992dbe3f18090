"""The app's formula candidates and precursor features without Qt (msgpt_gui/logic/formulas.py, the jobs that load a
run by feature and run the best k formulas, the entries of a feature)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from progress_events import drain
from synthetic_run import write_mzml

from engine.elucidation.pipeline import QueryParams
from engine.errors import Cancelled
from engine.formulas.candidates import rank_formulas
from engine.insight.identification import FORMULA_WEIGHT, feature_ranks, formula_log_probability
from engine.spectra.spectrum import SkippedRecord
from msgpt_gui.logic.entries import SpectrumEntry, Status
from msgpt_gui.logic.formulas import (
    combine_results,
    formula_base,
    formula_note,
    formula_scores,
    formula_spectra,
    no_candidate_reason,
    rank_job,
    readiness,
)
from msgpt_gui.logic.jobs import (
    EntryFailed,
    EntryFinished,
    EntryStarted,
    FormulaJob,
    FormulasRanked,
    elucidate_sessions,
    load_file,
)

ADDUCTS = ("[M+H]+", "[M+Na]+")
FAST = QueryParams(groups=2, samples_per_group=2)


@pytest.fixture
def bare(make_spectrum):
    """Mellein without a formula or an ion type, as a run would give it."""
    return make_spectrum(formula=None, adduct=None)


def test_formula_base_goes_back_to_the_records_formula_and_keeps_an_ion_type_set_alone(make_spectrum, bare):
    picked = bare.with_adduct("[M+H]+", check=False).with_formula("C10H10O3", check=False)
    picked = dataclasses.replace(picked, metadata={**picked.metadata, "formula_rank": "1", "formula_score": "0.9",
                                                   "formula_source": "ranked candidates"})
    base = formula_base(picked, bare)
    assert (base.formula, base.adduct) == (None, None) and "formula_rank" not in base.metadata
    only_ion = bare.with_adduct("[M+Na]+", check=False)
    assert formula_base(only_ion, bare).adduct == "[M+Na]+"  # the user set only the ion type: kept
    library = make_spectrum()
    assert formula_base(library, library) is library  # a record with a formula keeps it (ion types are ranked)
    assert formula_base(bare, None).formula is None


def test_readiness_says_why_no_candidates_can_be_had(make_spectrum, bare):
    assert readiness(bare, ADDUCTS) is None and readiness(bare) is None
    nominal = make_spectrum(formula=None, precursor_mz=179.0, metadata={"precursor_mz_decimals": "0"})
    assert "written to 1 Da" in readiness(nominal, ADDUCTS)
    negative = make_spectrum(formula=None, adduct=None, polarity="negative", charge=-1, precursor_mz=177.0557)
    assert "[M-H]-" in readiness(negative, ADDUCTS) and readiness(negative, None) is None
    assert readiness(make_spectrum(formula=None, adduct="[M+K]+", precursor_mz=217.0262), ADDUCTS) is not None


def test_the_best_k_of_the_supported_ion_types_become_spectra_with_their_rank_and_score(bare):
    table = rank_formulas(bare)
    assert table.candidates[0].formula == "C10H10O3"
    chosen = table.runnable(3, ADDUCTS)
    assert len(chosen) == 3 and all(c.ion_type in ADDUCTS for c in chosen)
    assert [c.rank for c in chosen] == sorted(c.rank for c in chosen)
    spectra = formula_spectra(bare, table, ADDUCTS, 2, min_probability=0.0)  # every one of the best k (no budget)
    assert [(c.formula, s.formula, s.adduct) for c, s in spectra] == [(c.formula, c.formula, c.ion_type)
                                                                      for c in chosen[:2]]
    assert formula_note(spectra[0][1]) == ("1", f"{chosen[0].probability:.4f}")
    assert bare.formula is None  # never changed in place
    assert table.runnable(3, ("[M+Li]+",)) == () and "no formula candidate of an ion type the model supports" in \
        no_candidate_reason(table, ("[M+Li]+",))
    events, out = drain(rank_job(bare))
    assert events == [] and [c.formula for c in out.candidates] == [c.formula for c in table.candidates]
    with pytest.raises(Cancelled):
        drain(rank_job(bare, cancel=lambda: True))


def test_the_candidates_of_several_formulas_become_one_list_ranked_on(tiny_bundle, bare):
    table = rank_formulas(bare, supported_adducts=tiny_bundle.supported_adducts)
    spectra = [s for _, s in formula_spectra(bare, table, tiny_bundle.supported_adducts, 3, min_probability=0.0)]
    jobs = [FormulaJob(7, bare, None, table, (100, 101, 102), min_probability=0.0)]  # the best 3 all sample
    events, outcome = drain(elucidate_sessions(jobs, FAST, bundle=tiny_bundle, preview=False))
    ranked = [e for e in events if isinstance(e, FormulasRanked)]
    assert len(ranked) == 1 and ranked[0].table is table  # a table given is not ranked again
    assert [(r.key, r.spectrum.formula) for r in ranked[0].runs] == list(zip((100, 101, 102),
                                                                           [s.formula for s in spectra]))
    assert isinstance(events[0], EntryStarted) and events[0].key == 7
    finished = {e.key: e.result for e in events if isinstance(e, EntryFinished)}
    failed = {e.key for e in events if isinstance(e, EntryFailed)}
    assert set(finished) | failed == {100, 101, 102} and finished
    assert outcome.finished == [7]
    results = [finished[k] for k in (100, 101, 102) if k in finished]
    combined = combine_results(results)
    n = [len(r.candidates) for r in results]
    assert [c.rank for c in combined.candidates] == list(range(1, sum(n) + 1))
    # one ranking per feature, exactly msgpt predict's feature_rank: by score plus the formula's weighted log P
    franks = feature_ranks(results)
    expected = sorted(((k, c.smiles) for r, ks in zip(results, franks) for k, c in zip(ks, r.candidates)))
    assert [(c.rank, c.smiles) for c in combined.candidates] == expected
    log_p = {r.spectrum.formula: formula_log_probability(r) for r in results}
    keys = [c.score + FORMULA_WEIGHT * log_p[c.formula] for c in combined.candidates if c.rank_group == 2]
    assert keys == sorted(keys, reverse=True)
    best = next(r for r, ks in zip(results, franks) if 1 in ks)
    assert combined.confidence == best.confidence and combined.spectrum is best.spectrum
    assert combined.n_samples == sum(r.n_samples for r in results)
    assert combine_results([results[0]]) is results[0] and combine_results([None]) is None
    assert set(formula_scores(results)) == {r.spectrum.formula for r in results}

    # a table ranked in the job; none of its formulas of an ion type the model runs: said, nothing runs
    negative = dataclasses.replace(bare, polarity="negative", charge=-1, precursor_mz=177.0557)
    events, outcome = drain(elucidate_sessions([FormulaJob(8, negative, None, None, (200,))], FAST,
                                               bundle=tiny_bundle))
    assert [type(e).__name__ for e in events] == ["EntryStarted", "FormulasRanked", "EntryFailed"]
    assert "the model supports" in events[-1].message and outcome.failed == [8]


def test_run_adds_the_formula_runs_of_the_libraries_mass_track(tiny_bundle, bare, tmp_path, monkeypatch):
    """As ``msgpt predict``: a suspect of the precursor's mass whose formula Run did not take is ranked on its own
    (no samples); one whose formula Run took adds nothing."""
    from engine.chem import molecules as chem
    from engine.elucidation.libraries import MASS_TRACK
    from engine.library import load_library

    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    mellein = "CC1Cc2cccc(O)c2C(=O)O1"
    (tmp_path / "suspects.csv").write_text(f"Identifier,SMILES\nS1,{mellein}\n")
    suspects = load_library(tmp_path / "suspects.csv")
    suspects.suspect = True
    table = rank_formulas(bare, supported_adducts=tiny_bundle.supported_adducts)
    assert table.runnable(1, tiny_bundle.supported_adducts)[0].formula == "C10H10O3"
    jobs = [FormulaJob(9, bare, None, table, (), (suspects,), (300, 301))]  # no formula candidate taken
    events, outcome = drain(elucidate_sessions(jobs, FAST, bundle=tiny_bundle, preview=False))
    runs = next(e for e in events if isinstance(e, FormulasRanked)).runs
    assert [(r.key, r.candidate, r.spectrum.formula, r.spectrum.metadata["formula_source"]) for r in runs] == \
        [(300, None, "C10H10O3", MASS_TRACK)]
    result = next(e.result for e in events if isinstance(e, EntryFinished))
    assert result.n_samples == 0 and [c.inchikey14 for c in result.candidates] == [chem.inchikey14(mellein)]
    assert result.candidates[0].suspect and outcome.finished == [9]
    jobs = [FormulaJob(10, bare, None, table, (400,), (suspects,), (401,))]  # the formula is taken: nothing added
    events, _ = drain(elucidate_sessions(jobs, FAST, bundle=tiny_bundle, preview=False))
    runs = next(e for e in events if isinstance(e, FormulasRanked)).runs
    assert [(r.key, r.spectrum.formula) for r in runs] == [(400, "C10H10O3")] and runs[0].candidate is not None


def test_an_mzml_run_loads_as_precursor_features_and_an_mgf_as_records(tmp_path, fixture_mgf):
    peaks = {"mz": [80.05, 120.08, 163.12], "intensity": [10.0, 100.0, 50.0]}
    scans = [
        {"ms_level": 1, "rt": 10.0, "mz": [163.1230, 164.1263], "intensity": [1e6, 1.1e5]},
        {"ms_level": 2, "rt": 10.5, "precursor_mz": 163.1230, **peaks},
        {"ms_level": 2, "rt": 12.0, "precursor_mz": 163.1231, **peaks},
        {"ms_level": 2, "rt": 80.0, "precursor_mz": 163.1230, **peaks},  # elutes apart: another feature
        {"ms_level": 2, "rt": 11.0, "precursor_mz": 250.1, **peaks},
    ]
    path = write_mzml(tmp_path / "run.mzML", scans)
    events, summary = drain(load_file(path))
    items = [i for e in events for i in e.items]
    assert [f.n_scans for f in items] == [2, 1, 1]
    assert (summary.records, summary.features, summary.ms2_scans, summary.survey_scans) == (3, 3, 4, 1)
    first = items[0]
    assert first.ms1 is not None and first.precursor_mz == 163.1230

    keys = iter(range(10, 20))
    entry = SpectrumEntry.from_feature(0, first, lambda: next(keys))
    assert entry.display_id == "F0001" and entry.n_scans == 2 and entry.rt_range == (10.5, 12.0)
    assert [c.key for c in entry.children] == [10, 11] and all(c.parent_key == 0 for c in entry.children)
    assert all(c.ms1 is first.ms1 for c in entry.children)
    single = SpectrumEntry.from_feature(1, items[1], lambda: next(keys))
    assert single.children == [] and single.display_id == "F0002 · scan=5"  # 250.1 at 11 s: second by RT

    # MGF: record by record, as before; no grouping
    events, summary = drain(load_file(fixture_mgf))
    items = [i for e in events for i in e.items]
    assert summary.features == 0 and summary.records == len(items) == 12
    assert not any(hasattr(i, "scans") for i in items)
    # a run listed scan by scan when asked
    events, summary = drain(load_file(path, features=None))
    assert summary.features == 0 and len([i for e in events for i in e.items]) == 4


def test_formula_runs_decide_the_status_of_their_entry(make_spectrum, bare):
    entry = SpectrumEntry.from_item(0, bare)
    runs = [SpectrumEntry(k, make_spectrum(formula=f), owner_key=0, status=Status.QUEUED)
            for k, f in ((1, "C10H10O3"), (2, "C6H14O6"))]
    entry.formula_runs = runs
    entry.sync_status()
    assert entry.status == Status.RUNNING
    runs[0].status, runs[1].status, runs[1].reason = Status.DONE, Status.FAILED, "too large"
    entry.sync_status()
    assert entry.status == Status.DONE
    runs[0].status = Status.FAILED
    entry.sync_status()
    assert entry.status == Status.FAILED and "C6H14O6: too large" in entry.reason
    assert not entry.has_results and entry.results() == []
    entry.reset_results()
    assert entry.formula_runs == [] and entry.status == Status.NOT_RUN


def test_a_skipped_record_is_not_a_feature():
    record = SkippedRecord("run.mzML", 3, "scan=4", "no precursor m/z", mz=np.array([50.0]), intensity=np.array([1.0]))
    entry = SpectrumEntry.from_item(0, record)
    assert entry.n_scans is None and entry.rt_range is None and not entry.needs_formulas
    assert entry.cached_formulas() is None and entry.formula_base() is None


def test_a_runs_spectra_are_ranked_with_its_recalibration_measured_once(bare, monkeypatch):
    import msgpt_gui.logic.formulas as logic
    from engine.formulas.recalibration import Recalibration

    calls = []

    def fake(items, config, cancel=None):
        calls.append(len(items))
        return Recalibration.fixed(4.0, 0.0, scatter_ppm=1.0)

    monkeypatch.setattr(logic, "recalibrate_run", fake)
    monkeypatch.setattr(logic, "_recalibrations", {})
    spectrum = dataclasses.replace(bare, source="/runs/a.mzML")
    _, table = drain(logic.rank_job(spectrum, None, None, run_items=[(spectrum, None)] * 6))
    assert table.notes[0].startswith("m/z recalibration: +4.0 ppm") and calls == [6]
    assert table.precursor_mz == pytest.approx(bare.precursor_mz / (1 + 4e-6))
    _, again = drain(logic.rank_job(spectrum, None, None))  # the Run path: the run's recalibration is kept
    assert again.notes[0] == table.notes[0] and calls == [6]
    _, other = drain(logic.rank_job(dataclasses.replace(bare, source="/runs/b.mzML"), None, None))
    assert not any(n.startswith("m/z recalibration") for n in other.notes)  # not measured for that run


@pytest.fixture
def restore_formula_settings():
    from msgpt_gui.logic.formulas import DEFAULT_ELEMENTS, set_current_config

    yield
    set_current_config(10.0, DEFAULT_ELEMENTS, "")


def test_the_recalibration_setting_decides_what_the_ranking_takes_out(bare, monkeypatch, restore_formula_settings):
    import msgpt_gui.logic.formulas as logic
    from msgpt_gui.logic.formulas import (
        DEFAULT_ELEMENTS,
        RecalibrationChoice,
        set_current_config,
        table_key,
    )

    def never(*args, **kwargs):
        raise AssertionError("a run is not measured when the setting fixes its recalibration")

    monkeypatch.setattr(logic, "recalibrate_run", never)
    monkeypatch.setattr(logic, "_recalibrations", {})
    spectrum = dataclasses.replace(bare, source="/runs/a.mzML")
    key_auto = table_key(spectrum)
    set_current_config(10.0, DEFAULT_ELEMENTS, "", RecalibrationChoice("fixed", 4.0, -2.0))
    assert table_key(spectrum) != key_auto  # tables ranked with auto are ranked again
    _, table = drain(logic.rank_job(spectrum, None, None, run_items=[(spectrum, None)] * 6))
    assert table.notes[0] == ("m/z recalibration: +4.0 ppm at m/z 500, slope -2.0 ppm per 1000 m/z "
                              "(set by the user)")
    shift = 4.0 - 2.0 * (bare.precursor_mz - 500.0) / 1000.0
    assert table.precursor_mz == pytest.approx(bare.precursor_mz / (1 + shift * 1e-6))
    _, again = drain(logic.rank_job(spectrum, None, None))  # the Run path (no run items): the same correction
    assert again.notes[0] == table.notes[0] and again.precursor_mz == table.precursor_mz
    set_current_config(10.0, DEFAULT_ELEMENTS, "", RecalibrationChoice("off", 4.0, -2.0))
    _, off = drain(logic.rank_job(spectrum, None, None, run_items=[(spectrum, None)] * 6))
    assert off.notes[0] == "m/z recalibration: none (turned off)" and off.precursor_mz == bare.precursor_mz
    assert RecalibrationChoice("off", 4.0).text() == "off" and RecalibrationChoice("fixed", 4.0, -2.0).text() == "4,-2"


def test_a_recalibration_choice_out_of_range_says_what_is_allowed():
    from engine.errors import ConfigError
    from msgpt_gui.logic.formulas import RecalibrationChoice

    with pytest.raises(ConfigError, match="`offset_ppm` must be a number between -200 and 200"):
        RecalibrationChoice("fixed", 500.0)
    with pytest.raises(ConfigError, match="choose one of auto, off, fixed"):
        RecalibrationChoice("sometimes")
    assert RecalibrationChoice("auto", 500.0).setting() is None  # the numbers count only when fixed


def _recalibration_with_points():
    from engine.formulas.recalibration import Recalibration

    return Recalibration(offset_ppm=3.0, slope_ppm=-2.0, scatter_ppm=1.2, n_features=2, applied=True,
                         points_mz=np.array([200.0, 300.0, 450.0, 600.0]), points_ppm=np.array([3.5, 4.0, 2.9, 2.0]),
                         points_precursor=np.array([True, False, True, False]), mz_range=(250.0, 550.0))


def _line(ax, label):
    return next(line for line in ax.lines if line.get_label() == label)


def test_the_recalibration_plot_draws_the_points_and_the_fitted_line():
    from matplotlib.figure import Figure

    from msgpt_gui.logic.plotting import plot_recalibration

    recal = _recalibration_with_points()
    ax = Figure().add_subplot()
    assert plot_recalibration(recal, ax=ax) is ax
    fragments, precursors = ax.collections
    assert precursors.get_offsets().tolist() == [[200.0, 3.5], [450.0, 2.9]]
    assert fragments.get_offsets().tolist() == [[300.0, 4.0], [600.0, 2.0]]
    x, y = _line(ax, "fitted line").get_data()
    assert x.min() < 200.0 and x.max() > 600.0 and y == pytest.approx(recal.ppm(x))
    assert y[0] == pytest.approx(3.5) and y[-1] == pytest.approx(2.9)  # flat beyond the m/z the slope holds on
    assert ax.get_title(loc="left") == "4 points: 2 precursors, 2 fragments\n+3.0 ppm at m/z 500, -2.0 ppm/1000 m/z\nscatter 1.2 ppm"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["fragments", "precursors", "fitted line"]
    titled = plot_recalibration(recal, ax=Figure().add_subplot(), title="run a")
    assert titled.get_title(loc="left").startswith("run a\n4 points")
    assert plot_recalibration(recal, ax=Figure().add_subplot(), legend=False).get_legend() is None


@pytest.mark.parametrize("setting, label, at_500, caption", [
    ("5,1", "set by the user", 5.0, "no points: set by the user\n+5.0 ppm at m/z 500, +1.0 ppm/1000 m/z"),
    ("off", "no correction", 0.0, "no points: turned off"),
])
def test_a_recalibration_without_points_draws_the_line_alone_and_says_why(setting, label, at_500, caption):
    from matplotlib.figure import Figure

    from engine.formulas.recalibration import parse_setting
    from msgpt_gui.logic.plotting import plot_recalibration

    ax = Figure().add_subplot()
    assert plot_recalibration(parse_setting(setting), ax=ax, mz_range=(100.0, 900.0)) is ax
    assert not ax.collections  # no scatter
    x, y = _line(ax, label).get_data()
    assert (x.min(), x.max()) == (100.0, 900.0) and np.interp(500.0, x, y) == pytest.approx(at_500)
    assert ax.get_title(loc="left") == caption and ax.get_legend() is None  # the caption says what the line is


def test_run_draws_a_less_likely_formula_its_share_and_run_best_k_the_full_pool(tiny_bundle, bare):
    table = rank_formulas(bare, supported_adducts=tiny_bundle.supported_adducts)
    best3 = table.runnable(3, tiny_bundle.supported_adducts)
    assert len(best3) == 3
    p = dict(zip([(c.formula, c.ion_type) for c in best3], (0.80, 0.15, 0.05)))
    table = dataclasses.replace(table, candidates=tuple(
        dataclasses.replace(c, probability=p.get((c.formula, c.ion_type), 0.0)) for c in table.candidates))
    for min_p, want in ((0.05, [2, 1, 1]), (0.0, [2, 2, 2])):  # Run (N x P/P(best), at least 1); Run best k: all
        jobs = [FormulaJob(7, bare, None, table, (100, 101, 102), min_probability=min_p)]
        events, _ = drain(elucidate_sessions(jobs, FAST, bundle=tiny_bundle, preview=False))
        finished = {e.key: e.result for e in events if isinstance(e, EntryFinished)}
        assert [finished[k].params.samples_per_group for k in (100, 101, 102)] == want
