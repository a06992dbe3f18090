"""Per-spectrum confidence (engine/model/confidence.py, training/calibration/confidence.py): features, fit, calibration, use."""

from __future__ import annotations

import csv
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.elucidation.pipeline import QueryParams
from engine.errors import BundleError, ConfigError
from engine.model.confidence import (
    FEATURES,
    SCORE_GAP_CAP,
    ConfidenceModel,
    confidence_features,
    fit_logistic,
    isotonic_knots,
    reliability,
    spectrum_confidence,
)


def test_features_of_a_pool():
    f = confidence_features([30, 50, 5], [-10.0, -14.5, -20.0], 100, 90, 12)
    assert f == {"top_share": 0.30, "max_share": 0.50, "agreement": 0.0, "score_gap": 4.5,
                 "log_candidates": pytest.approx(math.log(12)), "yield": 0.90}
    assert confidence_features([7], [-3.0], 100, 7, 1)["score_gap"] == SCORE_GAP_CAP  # alone: no rival
    assert confidence_features([9, 1], [-1.0, -90.0], 100, 10, 2)["score_gap"] == SCORE_GAP_CAP  # capped
    assert confidence_features([9, 1], [float("nan")] * 2, 100, 10, 2)["score_gap"] == 0.0  # no posterior
    assert confidence_features([], [], 100, 0, 0) is None


def _synthetic(n: int, seed: int):
    """Features whose true P(hit) is a known logistic function of two of them."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.beta(1, 6, n), rng.beta(1, 4, n), rng.integers(0, 2, n), rng.exponential(3, n),
                         rng.normal(3, 0.8, n), rng.uniform(0.2, 0.9, n)])
    p = 1 / (1 + np.exp(-(-4.0 + 9.0 * X[:, 0] + 0.3 * X[:, 3])))
    return X, rng.random(n) < p, p


def test_the_fit_recovers_a_logistic_truth_and_is_calibrated_on_new_data():
    X, y, _ = _synthetic(20000, 0)
    w, b, mean, scale = fit_logistic(X, y, l2=1.0)
    raw = w / scale  # back to the features' units
    assert raw[0] == pytest.approx(9.0, rel=0.12) and raw[3] == pytest.approx(0.3, rel=0.15)
    assert np.all(np.abs(raw[[1, 2, 4, 5]]) < 0.35)  # features the truth ignores stay near 0
    model = ConfidenceModel(tuple(w), b, tuple(mean), tuple(scale))
    Xn, yn, pn = _synthetic(20000, 1)
    probs = [model.probability(dict(zip(FEATURES, row))) for row in Xn]
    rel = reliability(probs, yn)
    assert rel["ece"] < 0.015 and rel["brier"] < rel["brier_base_rate"]
    assert np.corrcoef(probs, pn)[0, 1] > 0.99
    for row in rel["bins"]:
        assert abs(row["predicted"] - row["observed"]) < 0.05 or row["n"] < 200


def test_reliability_table_counts_and_errors():
    rel = reliability([0.0, 0.02, 0.5, 0.9, 1.0], [False, False, True, True, True], bins=(0, 0.1, 1.0))
    assert rel["n"] == 5 and rel["hits"] == 3 and [r["n"] for r in rel["bins"]] == [2, 3]
    assert rel["bins"][1]["predicted"] == pytest.approx(0.8) and rel["bins"][1]["observed"] == 1.0
    assert rel["ece"] == pytest.approx((2 * 0.01 + 3 * 0.2) / 5)
    assert rel["auroc"] == 1.0 and rel["top_decile_rate"] == 1.0


def test_auroc_by_hand():
    from engine.model.confidence import auroc

    assert auroc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75  # 3 of the 4 pairs in order
    assert auroc([0.5, 0.5, 0.5], [True, False, False]) == 0.5  # ties count half
    assert auroc([0.2, 0.3], [False, False]) is None


def _model(**settings) -> ConfidenceModel:
    return ConfidenceModel((2.0, 0.5, 0.3, 0.2, -0.4, 0.1), -3.0, (0.05, 0.08, 0.6, 2.0, 3.0, 0.5),
                           (0.05, 0.08, 0.5, 2.0, 0.8, 0.2), FEATURES, settings, {"fit": {"spectra": 10}})


def test_model_json_round_trip_and_bad_files(tmp_path):
    model = _model(kappa_min=0.95, decoding="formula")
    again = ConfidenceModel.load(model.save(tmp_path / "c.json"))
    assert again == model
    f = confidence_features([30, 50, 5], [-10.0, -14.5, -20.0], 100, 90, 12)
    assert again.probability(f) == model.probability(f) and 0 < model.probability(f) < 1
    assert model.probability(None) == 0.0
    bad = model.to_json() | {"weights": [1.0]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(BundleError, match="1 weights, 6 means and 6 scales for 6 features"):
        ConfidenceModel.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps(model.to_json() | {"format": "something"}))
    with pytest.raises(BundleError, match="refit"):
        ConfidenceModel.load(tmp_path / "other.json")


def test_applies_only_to_the_settings_it_was_fitted_with():
    model = _model(kappa_min=0.95, kappa_max=1.5, groups=20, samples_per_group=5, decoding="formula", adapter=False)
    assert model.applies_to(QueryParams())
    assert not model.applies_to(QueryParams(samples_per_group=10))
    assert not model.applies_to(QueryParams(kappa_min=1.0))
    assert not model.applies_to(QueryParams(decoding="free"))
    assert not model.applies_to(QueryParams(), adapter=True)


@pytest.fixture(scope="module")
def bundle_with_confidence(tiny_bundle_dir, tmp_path_factory):
    from engine.model.bundle import load_bundle
    from training.calibration.confidence import _settings, save_model

    folder = tmp_path_factory.mktemp("conf") / "bundle"
    shutil.copytree(tiny_bundle_dir, folder)
    model = ConfidenceModel(_model().weights, -1.0, _model().mean, _model().scale, FEATURES,
                            {**_settings(QueryParams()), "adapter": False}, {"fit": {"spectra": 10}})
    save_model(model, folder)
    return load_bundle(folder, device="cpu", precision="fp32")


def _run(bundle, spectrum, params):
    from engine.elucidation.pipeline import SpectrumSession
    from engine.progress import run_to_end

    return run_to_end(SpectrumSession(bundle, spectrum).run(params))


def test_results_carry_the_confidence_into_csv_and_projects(bundle_with_confidence, tmp_path):
    from tiny_bundle import fixture_spectra

    from engine.files.export import export_results
    from engine.files.project import Project, ProjectEntry, save_project
    from engine.files.project_read import load_project
    from engine.model.confidence import result_features

    bundle = bundle_with_confidence
    assert bundle.confidence is not None and "confidence.json" in bundle.config["files"]
    spectrum = fixture_spectra()[0]
    params = QueryParams(groups=4, samples_per_group=2, kappa_min=0.95, kappa_max=1.5)
    other = _run(bundle, spectrum, params)
    assert other.confidence is None  # M=4, N=2: not the settings of the fit
    result = _run(bundle, spectrum, QueryParams())
    expected = bundle.confidence.probability(result_features(result))
    assert result.confidence == pytest.approx(expected) and 0 <= result.confidence <= 1
    out = tmp_path / "c.csv"
    export_results(out, [result], {"model": bundle.name})
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    if result.candidates:
        assert {r["spectrum_confidence"] for r in rows} == {f"{result.confidence:.4f}"}
    entry = ProjectEntry(spectrum=spectrum, original=spectrum, status="done", result=result,
                         model_checksum=bundle.checksum)
    save_project(tmp_path / "p.msgpt", Project(entries=[entry]))
    back = load_project(tmp_path / "p.msgpt").entries[0].result
    assert back.confidence == pytest.approx(result.confidence)


def test_adding_the_model_changes_the_bundle_checksum_not_the_weights_checksum(bundle_with_confidence, tiny_bundle):
    from engine.model.bundle import weights_checksum

    assert bundle_with_confidence.checksum != tiny_bundle.checksum  # exports name the exact files
    assert weights_checksum(bundle_with_confidence) == weights_checksum(tiny_bundle)  # adaptation caches stay valid


def test_a_picked_formula_candidate_scales_the_confidence(bundle_with_confidence):
    from tiny_bundle import fixture_spectra

    bundle = bundle_with_confidence
    spectrum = fixture_spectra()[0]
    result = _run(bundle, spectrum, QueryParams())
    picked = replace(result, spectrum=replace(spectrum, metadata={**spectrum.metadata, "formula_score": "0.2500",
                                                                  "formula_source": "ranked candidates"}))
    assert spectrum_confidence(bundle, picked) == pytest.approx(0.25 * spectrum_confidence(bundle, result))
    assert spectrum_confidence(bundle, replace(result, partial=True)) is None


def _write_collected(folder, n=400, seed=0, cap=None):
    from training.calibration.confidence import _settings

    X, y, p = _synthetic(n, seed)
    if cap is not None:  # the truth saturates: a logistic over these features promises too much at its top
        y = np.random.default_rng(seed + 1).random(n) < np.minimum(p, cap)
    folder.mkdir()
    (folder / "collect.json").write_text(json.dumps({"settings": {
        "bundle": "abc", "oof": "runs/oof", "params": _settings(QueryParams())}}))
    with open(folder / "pools.jsonl", "w") as fh:
        for i, (row, hit) in enumerate(zip(X, y)):
            fh.write(json.dumps({"id": f"S{i}", "hit": bool(hit), "rank": 1 if hit else None,
                                 "features": dict(zip(FEATURES, row.tolist()))}) + "\n")
        fh.write(json.dumps({"id": "empty", "hit": False, "rank": None, "features": None}) + "\n")


def test_fit_command_writes_a_model_checked_on_an_eval_run(tmp_path):
    from training.calibration.confidence import main

    _write_collected(tmp_path / "collected")
    run = tmp_path / "eval"
    run.mkdir()
    records = [
        {"id": "V1", "variant": "band", "decoding": "formula", "ranking": "fingerprint", "rank": 1,
         "top_counts": [60, 5], "top_fingerprint_scores": [-5.0, -30.0], "n_samples": 100,
         "n_formula_consistent": 70, "n_candidates": 2},
        {"id": "V2", "variant": "band", "decoding": "formula", "ranking": "fingerprint", "rank": None,
         "top_counts": [1, 1], "top_fingerprint_scores": [-50.0, -50.2], "n_samples": 100,
         "n_formula_consistent": 40, "n_candidates": 38},
        {"id": "V3", "variant": "band", "decoding": "formula", "ranking": "fingerprint", "rank": None,
         "top_counts": [], "top_fingerprint_scores": [], "n_samples": 100, "n_formula_consistent": 0,
         "n_candidates": 0},
        {"id": "V1", "variant": "oracle", "decoding": "formula", "ranking": "fingerprint", "rank": 1,
         "top_counts": [90], "top_fingerprint_scores": [-1.0], "n_samples": 100, "n_formula_consistent": 90,
         "n_candidates": 1},
    ]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "confidence.json"
    assert main(["fit", "--collected", str(tmp_path / "collected"), "--val-eval", str(run), "--out", str(out),
                 "--figure", str(tmp_path / "rel.png")]) == 0
    model = ConfidenceModel.load(out)
    assert model.meta["fit"]["spectra"] == 401 and model.meta["val"]["n"] == 3  # band records only
    assert (tmp_path / "rel.png").stat().st_size > 1000
    assert main(["fit", "--collected", str(tmp_path / "nothing"), "--out", str(out)]) == 2

    # the model carried to another bundle: `check` records a check on that bundle's own run, weights unchanged
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"files": {}}))
    model.save(bundle / "confidence.json")
    only_one = tmp_path / "eval_one"
    only_one.mkdir()
    (only_one / "results.jsonl").write_text(json.dumps(records[1]) + "\n")
    assert main(["check", "--bundle", str(bundle), "--val-eval", str(only_one)]) == 0
    checked = ConfidenceModel.load(bundle / "confidence.json")
    assert checked.meta["val"]["n"] == 1 and checked.meta["val"]["eval"] == str(only_one)
    assert checked.weights == model.weights and checked.meta["fit"] == model.meta["fit"]
    assert "confidence.json" in json.loads((bundle / "config.json").read_text())["files"]
    assert main(["check", "--bundle", str(tmp_path), "--val-eval", str(only_one)]) == 2  # no confidence.json


def test_no_confidence_for_an_ion_mode_the_fit_never_saw(bundle_with_confidence):
    from tiny_bundle import fixture_spectra

    bundle = bundle_with_confidence
    result = _run(bundle, fixture_spectra()[0], QueryParams())
    assert bundle.confidence.meta.get("polarities", ["positive"]) == ["positive"]
    negative = replace(result, spectrum=SimpleNamespace(polarity="negative", metadata={}))
    assert spectrum_confidence(bundle, result) is not None and spectrum_confidence(bundle, negative) is None


def test_isotonic_knots_by_hand():
    # two clean blocks of 30: each knot at its mean prediction, its rate pulled towards it by 5 pseudo-spectra
    xs, ys = isotonic_knots([0.1] * 30 + [0.9] * 30, [False] * 30 + [True] * 30)
    assert xs == (0.1, 0.9)
    assert ys == (pytest.approx((0 + 5 * 0.1) / 35, abs=1e-6), pytest.approx((30 + 5 * 0.9) / 35, abs=1e-6))
    # three right answers at the top are too few for a knot of their own: joined to the block below
    xs, ys = isotonic_knots([0.1] * 30 + [0.95] * 3, [False] * 30 + [True] * 3)
    assert xs == (0.0, 1.0) and ys[0] == ys[1] == pytest.approx((3 + 5 * (3 + 2.85) / 33) / 38, abs=1e-6)
    # a violation is pooled: the higher prediction with the lower rate joins its neighbour
    xs, ys = isotonic_knots([0.2] * 20 + [0.3] * 20 + [0.4] * 20, [True] * 10 + [False] * 10 + [False] * 20
                            + [True] * 15 + [False] * 5, prior=0.0)
    assert xs == (pytest.approx(0.25), 0.4) and ys == (pytest.approx(0.25), pytest.approx(0.75))
    with pytest.raises(ValueError, match="2 probabilities for 1 labels"):
        isotonic_knots([0.1, 0.2], [True])


def test_isotonic_knots_follow_a_saturating_truth():
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 0.9, 5000)
    xs, ys = isotonic_knots(p, rng.random(5000) < np.minimum(p, 0.3))
    assert np.all(np.diff(xs) > 0) and np.all(np.diff(ys) >= 0) and ys[0] > 0
    assert len(xs) <= 5000 // 20
    assert np.interp(0.8, xs, ys) == pytest.approx(0.3, abs=0.05)  # not the 0.8 the input said
    assert np.interp(0.15, xs, ys) == pytest.approx(0.15, abs=0.05)


def test_a_recalibrated_model_reads_its_knots_and_round_trips(tmp_path):
    knots = ((0.0, 0.1, 0.5, 1.0), (0.0, 0.05, 0.2, 0.3))
    model = replace(_model(decoding="formula"), recalibration=knots)
    f = confidence_features([30, 50, 5], [-10.0, -14.5, -20.0], 100, 90, 12)
    plain = _model(decoding="formula").probability(f)
    assert model.probability(f) == pytest.approx(float(np.interp(plain, *knots)))
    assert model.probability(None) == 0.0
    assert model.to_json()["version"] == 2 and _model().to_json()["version"] == 1
    assert ConfidenceModel.load(model.save(tmp_path / "c.json")) == model
    with pytest.raises(BundleError, match="non-decreasing values"):
        replace(model, recalibration=((0.0, 0.5, 1.0), (0.3, 0.2, 0.4)))
    with pytest.raises(BundleError, match="increasing probabilities"):
        replace(model, recalibration=((0.0, 0.0, 1.0), (0.1, 0.2, 0.4)))
    no_knots = model.to_json()
    del no_knots["recalibration"]
    (tmp_path / "v2.json").write_text(json.dumps(no_knots))
    with pytest.raises(BundleError, match="version 2 without its recalibration"):
        ConfidenceModel.load(tmp_path / "v2.json")


def test_the_fit_keeps_a_recalibration_only_where_cross_validation_says_it_helps(tmp_path):
    from training.calibration.confidence import main

    _write_collected(tmp_path / "saturating", n=3000, cap=0.25)
    assert main(["fit", "--collected", str(tmp_path / "saturating"), "--out", str(tmp_path / "a.json")]) == 0
    model = ConfidenceModel.load(tmp_path / "a.json")
    cv = model.meta["fit"]["cross_validated"]
    assert cv["recalibration_kept"] and cv["recalibrated"]["brier"] < cv["logistic"]["brier"]
    assert cv["pools"] == 3000 and model.recalibration and max(model.recalibration[1]) < 0.4
    assert main(["fit", "--collected", str(tmp_path / "saturating"), "--out", str(tmp_path / "b.json"),
                 "--no-recalibration"]) == 0
    plain = ConfidenceModel.load(tmp_path / "b.json")
    assert not plain.recalibration and not plain.meta["fit"]["cross_validated"]["recalibration_kept"]
    assert plain.weights == model.weights  # the logistic is the same; only the map differs
    f = dict(zip(FEATURES, (0.8, 0.8, 1.0, 20.0, 0.5, 0.9)))  # a pool the logistic is sure of
    assert plain.probability(f) > 0.9 and model.probability(f) < 0.4

    # where the logistic is the truth, the map must earn its place in the nested cross-validation
    _write_collected(tmp_path / "logistic", n=3000, seed=5)
    assert main(["fit", "--collected", str(tmp_path / "logistic"), "--out", str(tmp_path / "c.json")]) == 0
    cv = ConfidenceModel.load(tmp_path / "c.json").meta["fit"]["cross_validated"]
    assert cv["recalibration_kept"] == (cv["recalibrated"]["brier"] < cv["logistic"]["brier"])


def test_collecting_unseen_structures_needs_a_bundle_that_records_its_encoders_licences():
    from engine.model.bundle import load_bundle
    from training.calibration.confidence import _unseen_ids

    root = Path(__file__).resolve().parents[2] / "data"
    bundle = load_bundle(root / "tiny_bundle", device="cpu")
    with pytest.raises(ConfigError, match="licences its encoder trained on"):
        _unseen_ids(bundle, str(root / "fixture.mgf"))


def test_why_no_confidence_names_the_reason_spectrum_confidence_leaves_it_out(bundle_with_confidence, tiny_bundle):
    from tiny_bundle import fixture_spectra

    from engine.model.confidence import why_no_confidence

    bundle = bundle_with_confidence
    result = _run(bundle, fixture_spectra()[0], QueryParams())
    assert why_no_confidence(bundle, result) == "" and spectrum_confidence(bundle, result) is not None
    cases = {
        "ships no confidence model": (tiny_bundle, result),
        "not finished": (bundle, replace(result, partial=True)),
        "-mode spectra only, this one is negative": (
            bundle, replace(result, spectrum=SimpleNamespace(polarity="negative", metadata={}))),
        "B = 100; these candidates were ranked with B = 140": (
            bundle, replace(result, params=replace(result.params, samples_per_group=7))),
        "rank 1 comes from your suspect list": (
            bundle, replace(result, candidates=(replace(result.candidates[0], suspect=True), *result.candidates[1:]))),
        "rank 1 was made by an isomer edit": (bundle, replace(result, candidates=(
            replace(result.candidates[0], count=0, edited_from="CCO"), *result.candidates))),
        "3 isomer edit rounds; these candidates were ranked with 0 isomer edit rounds": (
            bundle, replace(result, params=replace(result.params, edit_rounds=0))),
    }
    for words, (b, r) in cases.items():
        assert words in why_no_confidence(b, r) and spectrum_confidence(b, r) is None, words


def test_the_features_read_the_pool_as_drawn(bundle_with_confidence):
    """The six pool features read the pool the decoder drew: an edit anywhere in the ranking changes none of them;
    ``edited`` says whether an edit is rank 1."""
    from tiny_bundle import fixture_spectra

    from engine.model.confidence import EDIT_FEATURE, result_features

    result = _run(bundle_with_confidence, fixture_spectra()[0], QueryParams(edit_rounds=0))
    drawn = result_features(result)
    assert drawn[EDIT_FEATURE] == 0.0
    edit = replace(result.candidates[-1], smiles="CCO", inchikey14="LFQSCWFLJHTTHZ", count=0, edited_from="CC")
    for at in (0, 1, len(result.candidates)):
        candidates = (*result.candidates[:at], edit, *result.candidates[at:])
        assert result_features(replace(result, candidates=candidates)) == {**drawn, EDIT_FEATURE: float(at == 0)}


def test_a_model_with_an_edit_offset_gives_an_edited_rank_1_its_own_probability(bundle_with_confidence, tmp_path):
    from tiny_bundle import fixture_spectra

    from engine.model.confidence import logit, why_no_confidence

    bundle = bundle_with_confidence
    result = _run(bundle, fixture_spectra()[0], QueryParams())
    edited = replace(result, candidates=(replace(result.candidates[0], count=0, edited_from="CCO"), *result.candidates))
    assert spectrum_confidence(bundle, edited) is None  # this model has no offset: how often it is right is unknown
    plain = replace(bundle.confidence, weights=(0.0,) * len(FEATURES), bias=-1.0)  # a drawn rank 1 at 27%
    shifted = replace(plain, edit_offset=-1.5)
    assert ConfidenceModel.load(shifted.save(tmp_path / "c.json")) == shifted
    assert "edit_offset" not in plain.to_json()
    bundle = replace(bundle, confidence=shifted)
    assert why_no_confidence(bundle, edited) == ""
    p_drawn, p_edited = spectrum_confidence(bundle, result), spectrum_confidence(bundle, edited)
    assert p_drawn == pytest.approx(plain.probability(_features(result)))  # a drawn rank 1: as before
    assert 0.02 < p_drawn < 0.98 and logit(p_edited) == pytest.approx(logit(p_drawn) - 1.5)


def _features(result):
    from engine.model.confidence import result_features

    return {k: v for k, v in result_features(result).items() if k in FEATURES}


def _write_edited(folder, n=3000, seed=3, factor=0.25):
    """Pools in two shards (and a line a stop cut short); 30% of them have an edited rank 1, right ``factor`` times
    as often as the drawn rank 1's truth says."""
    from training.calibration.confidence import _settings

    X, _, p = _synthetic(n, seed)
    rng = np.random.default_rng(seed + 1)
    made = rng.random(n) < 0.3
    y = rng.random(n) < np.where(made, factor * p, p)
    folder.mkdir()
    (folder / "collect.json").write_text(json.dumps({"settings": {
        "bundle": "abc", "oof": "unseen structures", "params": _settings(QueryParams())}}))
    for shard in (0, 1):
        with open(folder / f"pools.{shard}.jsonl", "w") as fh:
            for i in range(shard, n, 2):
                fh.write(json.dumps({"id": f"S{i}", "hit": bool(y[i]), "rank": 1 if y[i] else None,
                                     "rank1_edit": bool(made[i]),
                                     "features": dict(zip(FEATURES, X[i].tolist()))}) + "\n")
            fh.write('{"id": "cut short", "hit": fa')
    return made, y


def test_pools_with_edited_rank_1s_fit_the_drawn_model_and_the_edits_offset(tmp_path):
    """The fit reads every shard and skips a line a stop cut short; the six weights come from the pools whose rank 1
    was drawn, the offset from the edited ones: near log(1/4) where an edit is right a quarter as often."""
    from training.calibration.confidence import main

    made, y = _write_edited(tmp_path / "collected")
    assert main(["fit", "--collected", str(tmp_path / "collected"), "--out", str(tmp_path / "c.json")]) == 0
    model = ConfidenceModel.load(tmp_path / "c.json")
    edits = model.meta["edits"]
    assert model.meta["fit"]["spectra"] == 3000 and model.meta["fit"]["with_candidates"] == 3000 - int(made.sum())
    assert edits["edited"] == int(made.sum()) and edits["edited_hits"] == int(y[made].sum())
    lo, hi = edits["offset_95"]
    assert lo < model.edit_offset < hi < 0 and edits["intercept"] is None
    assert abs(edits["edited_mean_predicted"] - edits["edited_rate"]) < 0.02

    _write_collected(tmp_path / "none")  # no pool's rank 1 is an edit: no offset, an edited rank 1 gets none
    assert main(["fit", "--collected", str(tmp_path / "none"), "--out", str(tmp_path / "d.json")]) == 0
    assert ConfidenceModel.load(tmp_path / "d.json").edit_offset is None


def test_fit_edits_keeps_the_shipped_model_and_fits_its_offset_with_an_intercept(tmp_path):
    """Pools harder than the model's own (every truth half as likely): the intercept takes the difficulty, the offset
    the edits' own effect; the six weights stay as they were, and the check keeps the edited records."""
    from engine.model.confidence import EDIT_FEATURE
    from training.calibration.confidence import check_on, eval_records, main

    _write_collected(tmp_path / "own", n=3000)
    assert main(["fit", "--collected", str(tmp_path / "own"), "--out", str(tmp_path / "own.json")]) == 0
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"files": {}}))
    ConfidenceModel.load(tmp_path / "own.json").save(bundle / "confidence.json")
    _write_edited(tmp_path / "harder", seed=11, factor=0.25)
    assert main(["fit-edits", "--bundle", str(bundle), "--collected", str(tmp_path / "harder"), "--no-record"]) == 0
    assert ConfidenceModel.load(bundle / "confidence.json").edit_offset is None  # --no-record
    assert main(["fit-edits", "--bundle", str(bundle), "--collected", str(tmp_path / "harder")]) == 0
    model, before = ConfidenceModel.load(bundle / "confidence.json"), ConfidenceModel.load(tmp_path / "own.json")
    assert model.weights == before.weights and model.recalibration == before.recalibration
    assert model.edit_offset < -0.5 and model.meta["edits"]["intercept"] is not None
    assert "confidence.json" in json.loads((bundle / "config.json").read_text())["files"]

    run = tmp_path / "eval"
    run.mkdir()
    base = {"variant": "band", "decoding": "formula", "ranking": "fingerprint", "top_counts": [30, 5],
            "top_fingerprint_scores": [-5.0, -9.0], "n_samples": 100, "n_formula_consistent": 70, "n_candidates": 20}
    (run / "results.jsonl").write_text("".join(json.dumps({**base, "id": f"V{i}", "rank": 1 if i % 3 else 2,
                                                           "rank1_edit": i % 2 == 1}) + "\n" for i in range(6)))
    records = eval_records(run)
    assert [r["edited"] for r in records] == [False, True] * 3
    assert all(r["features"][EDIT_FEATURE] == float(r["edited"]) for r in records)
    report = check_on(model, records)
    assert report["by_origin"]["edited"]["n"] == 3 and report["n"] == 6
    assert report["by_origin"]["edited"]["mean_predicted"] < report["by_origin"]["drawn"]["mean_predicted"]
    assert [r["id"] for r in eval_records(run, edited=False)] == ["V0", "V2", "V4"]
    assert main(["fit-edits", "--bundle", str(bundle), "--collected", str(tmp_path / "own")]) == 2  # no edits


def test_collect_names_a_bad_shard(tmp_path, capsys):
    from training.calibration.confidence import main

    for bad in ("2/2", "one of two"):
        assert main(["collect", "--unseen", "--mgf", str(tmp_path / "x.mgf"), "--out", str(tmp_path / "o"),
                     "--shard", bad]) == 2
        assert "--shard" in capsys.readouterr().err
