"""The confidence of a rank 1 from a suspect list (engine.model.suspect_confidence), level 2b, and the collection and
fit that make it (training.calibration.suspect_confidence)."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from tiny_bundle import fixture_spectra

from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.errors import ConfigError
from engine.insight.identification import identification_level
from engine.library import load_library
from engine.model.confidence import ConfidenceModel, spectrum_confidence, why_no_confidence, with_confidence
from engine.model.suspect_confidence import (
    MEASURED_FEATURES,
    SUSPECT_FEATURES,
    best_fingerprint_score,
    level_2b_probability,
    on_list_model,
    suspect_features,
    suspect_probability,
)
from engine.model.scoring import FingerprintScorer
from engine.progress import run_to_end

REFERENCE = "O=C(CCCCC(=O)N(CCO)CCO)N(CCO)CCO"  # the first fixture spectrum's structure, C14H28N2O6
ISOMER = "O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO"
PARAMS = QueryParams(groups=2, samples_per_group=2, seed=0)
# a model that trusts a fragment lead and a lone suspect: P rises with fragment_gap and alone
WEIGHTS = (-0.5, 1.0, 0.5, 2.0, 0.5, 0.5, 0.5, 0.2)


def _model(bar: float = 0.8) -> ConfidenceModel:
    n = len(SUSPECT_FEATURES)
    return ConfidenceModel(WEIGHTS, 0.0, (0.0,) * n, (1.0,) * n, SUSPECT_FEATURES,
                           {"fragment_score": True, "analog_score": True},
                           {"polarities": ["positive"], "level_2b": {"min_probability": bar}})


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.fixture(scope="module")
def bundle(tiny_bundle_dir, tmp_path_factory):
    """The tiny bundle with a suspect model written in as a bundle file (its checksum recorded)."""
    from engine.model.bundle import add_bundle_file, load_bundle

    folder = tmp_path_factory.mktemp("suspect") / "bundle"
    shutil.copytree(tiny_bundle_dir, folder)
    _model().save(folder / "suspect_confidence.json")
    add_bundle_file(folder, folder / "suspect_confidence.json")
    assert "suspect_confidence.json" in json.loads((folder / "config.json").read_text())["files"]
    return load_bundle(folder, device="cpu", precision="fp32")


def _suspect_result(bundle, home, smiles=(ISOMER, REFERENCE)):
    """A finished run of the first fixture spectrum with ``smiles`` as a suspect list (the tiny bundle has no forward
    model: the fragment scores are then set by hand, as a bundle with one would give them)."""
    table = home / "suspects.csv"
    table.write_text("Identifier,Name,SMILES\n" + "".join(f"S{i},suspect {i},{s}\n" for i, s in enumerate(smiles)))
    suspects = load_library(table)
    suspects.suspect = True
    result = run_to_end(SpectrumSession(bundle, fixture_spectra()[0], libraries=[suspects]).run(PARAMS))
    assert result.candidates[0].suspect
    return result


def _with_fragments(result, scores):
    """``result`` whose suspects, in rank order, have the fragment ``scores``."""
    it = iter(scores)
    return replace(result, candidates=tuple(replace(c, fragment_score=next(it)) if c.suspect else c
                                            for c in result.candidates))


def test_a_suspect_rank_1_gets_the_suspect_models_confidence_and_level_2b(bundle, home):
    result = _suspect_result(bundle, home)
    assert "could not be scored" in why_no_confidence(bundle, result)  # no forward model: no fragment score
    assert spectrum_confidence(bundle, result) is None and with_confidence(bundle, result).confidence is None

    params = bundle.suspect_confidence.settings
    clear, close = (_with_fragments(result, s) for s in ((-20.0, -35.0), (-20.0, -20.5)))
    for r in (clear, close):
        assert why_no_confidence(bundle, r) == ""
    f_clear, f_close = suspect_features(bundle, clear), suspect_features(bundle, close)
    assert set(f_clear) == set(SUSPECT_FEATURES) and f_clear["fragment_gap"] == 15.0 and f_close["fragment_gap"] == 0.5
    assert f_clear["log_suspects"] == pytest.approx(math.log(2)) and f_clear["alone"] == 0.0
    assert f_clear["fingerprint_fit"] <= 0.0
    assert f_clear["fingerprint_fit"] == pytest.approx(
        max(clear.candidates[0].fingerprint_score - best_fingerprint_score(FingerprintScorer(
            clear.posterior, bundle.calibration.for_polarity(clear.spectrum.polarity).bits)), -200.0))
    p_clear, p_close = spectrum_confidence(bundle, clear), spectrum_confidence(bundle, close)
    assert p_clear == pytest.approx(bundle.suspect_confidence.probability(f_clear)) and p_clear > p_close
    # whether drawn or not: the suspect model does not read the samples
    assert spectrum_confidence(bundle, replace(clear, n_samples=0)) == pytest.approx(p_clear)

    bar = level_2b_probability(bundle.suspect_confidence)
    assert p_clear >= bar > p_close and params == {"fragment_score": True, "analog_score": True}
    sure, unsure = with_confidence(bundle, clear), with_confidence(bundle, close)
    assert sure.level_2b and not unsure.level_2b
    level = identification_level([sure])
    assert level.code == "2b" and "suspect list match suspect" in level.text
    assert identification_level([unsure]).code == "3"
    # a ranked formula's probability multiplies it, as for a prediction
    md = {**clear.spectrum.metadata, "formula_source": "ranked candidates", "formula_score": "0.5"}
    ranked = replace(clear, spectrum=replace(clear.spectrum, metadata=md))
    assert spectrum_confidence(bundle, ranked) == pytest.approx(p_clear * 0.5)


def test_the_share_the_user_states_moves_a_two_part_confidence_not_its_level(bundle, home):
    on = ConfidenceModel((0.0,) * 8, 0.0, (0.0,) * 8, (1.0,) * 8, SUSPECT_FEATURES)  # P(on the list) 0.5 always
    one = _model(0.3)
    two = replace(one, meta={**one.meta, "on_list": {"model": on.to_json(), "share": 0.5}})
    b = replace(bundle, suspect_confidence=two)
    clear = _with_fragments(_suspect_result(bundle, home), (-20.0, -35.0))
    right_if_on = two.probability(suspect_features(b, clear))
    assert spectrum_confidence(b, clear) == pytest.approx(0.5 * right_if_on)
    for present in (0.1, 0.9):
        stated = replace(clear, params=replace(clear.params, suspects_present=present))
        assert spectrum_confidence(b, stated) == pytest.approx(present * right_if_on)
        done = with_confidence(b, stated)
        assert done.confidence == pytest.approx(present * right_if_on)
        assert done.level_2b  # the evidence at an even share reaches the bar (0.3), whatever the user states
    assert 0.5 * right_if_on >= 0.3


def test_msgpt_info_names_the_suspect_model_and_its_level_2b_bar(bundle, capsys):
    from engine.cli import main

    assert main(["info", "--model", str(bundle.path)]) == 0
    assert "confidence of a suspect-list rank 1: fitted on ? suspect rank 1s; level 2b at P >= 0.8" in \
        capsys.readouterr().out


def test_why_a_suspect_rank_1_gets_no_number(bundle, tiny_bundle, home):
    result = _with_fragments(_suspect_result(bundle, home), (-20.0, -35.0))
    cases = {
        "ships no confidence of suspect rank 1s": (tiny_bundle, result),
        "not finished": (bundle, replace(result, partial=True)),
        "fitted on positive-mode spectra only": (
            bundle, replace(result, spectrum=SimpleNamespace(polarity="negative", metadata={}))),
        "other settings than the confidence of suspect rank 1s was fitted with: fragment score": (
            bundle, replace(result, params=replace(result.params, fragment_score=False))),
        "keeps no fingerprint posterior": (bundle, replace(result, posterior=None)),
        "neither given nor among the ranked formula candidates (structure library (mass))": (
            bundle, replace(result, spectrum=replace(result.spectrum, metadata={
                **result.spectrum.metadata, "formula_source": "structure library (mass)"}))),
    }
    for words, (b, r) in cases.items():
        assert words in why_no_confidence(b, r) and spectrum_confidence(b, r) is None, words


def test_a_project_keeps_level_2b(bundle, home):
    from engine.files.project import Project, ProjectEntry, save_project
    from engine.files.project_read import load_project

    sure = with_confidence(bundle, _with_fragments(_suspect_result(bundle, home), (-20.0, -35.0)))
    assert sure.level_2b
    for r in (sure, replace(sure, level_2b=False)):
        save_project(home / "p.msgpt", Project(entries=[ProjectEntry(spectrum=r.spectrum, result=r)]))
        back = load_project(home / "p.msgpt").entries[0].result
        assert back.level_2b == r.level_2b and back.confidence == pytest.approx(r.confidence)


def test_no_level_2b_without_a_measured_bar():
    assert level_2b_probability(None) > 1 and level_2b_probability(replace(_model(), meta={})) > 1
    assert level_2b_probability(_model(0.85)) == 0.85


# -- training.calibration.suspect_confidence -------------------------------------------------------------------


def _entries(n_formulas=30, per_formula=2, isomers=30):
    from training.calibration.suspect_confidence import Entry

    out = []
    for f in range(n_formulas):
        for j in range(per_formula):
            spectrum = SimpleNamespace(formula=f"C{f + 1}H4", smiles=f"T{f}_{j}")
            out.append(Entry(f"k{f}_{j}", spectrum, f"TRUTH{f}_{j}", tuple(f"I{f}_{i}" for i in range(isomers))))
    return out


def test_suspect_lists_share_a_formula_hold_its_truths_half_the_time_and_are_seeded():
    from training.calibration.suspect_confidence import ON_LIST, SIZES, suspect_lists

    entries = _entries(n_formulas=400)
    lists, on = suspect_lists(entries, variant=0)
    assert lists == suspect_lists(entries, variant=0)[0] and lists != suspect_lists(entries, variant=1)[0]
    assert set(lists) == {e.spectrum.formula for e in entries}
    for e in entries:
        assert (e.spectrum.smiles in lists[e.spectrum.formula]) == on[e.key]
    for formula, smiles in lists.items():
        truths = sum(s.startswith("T") for s in smiles)
        assert len(smiles) == max(min(SIZES), truths) or len(smiles) in SIZES or len(smiles) == truths
        assert len(set(smiles)) == len(smiles)
    share = np.mean(list(on.values()))
    assert abs(share - ON_LIST) < 0.06  # 800 truths


def test_folds_by_group_keep_a_spectrums_rows_together():
    from training.calibration.confidence import _folds

    groups = np.repeat(np.arange(50), 4)
    seen = np.zeros(200, dtype=int)
    for train, test in _folds(200, 0, groups):
        assert not set(groups[train]) & set(groups[test])
        seen[test] += 1
    assert (seen == 1).all()


def test_level_2b_is_the_least_probability_of_the_asked_precision():
    from training.calibration.suspect_confidence import best_precision, choose_level_2b

    p = np.array([0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.55])
    y = np.array([1, 1, 1, 1, 0, 1, 0], dtype=bool)
    assert choose_level_2b(p, y, 0.9, min_rows=1) == (0.71, 4, 0)  # above 0.70, the first wrong one, all right
    assert choose_level_2b(p, y, 0.8, min_rows=1) == (0.56, 5, 1)  # above 0.55, the second wrong one: 5 of 6
    assert choose_level_2b(p, y, 0.9, min_rows=5) == (2.0, 0, 0)  # 4 rows are too few to hold a bar: none (never)
    assert choose_level_2b(p, ~y, 0.9, min_rows=1) == (2.0, 0, 0)
    assert best_precision(p, y, min_rows=5) == (0.56, 5 / 6, 6)


def test_fit_writes_a_two_part_model_that_reads_the_suspect_features(tmp_path):
    from engine.model.suspect_confidence import on_list_model, suspect_probability
    from training.calibration.suspect_confidence import main

    rng = np.random.default_rng(0)
    rows = []
    for i in range(600):
        gap, analog = float(rng.normal(2, 3)), float(rng.normal())
        on = bool(rng.random() < 1 / (1 + math.exp(-4 * analog)))  # the analog score says whether it is on the list
        right = on and bool(rng.random() < 1 / (1 + math.exp(-2 * (gap - 2))))  # the fragment lead, which one it is
        features = {k: float(rng.normal()) for k in MEASURED_FEATURES} | {"fragment_gap": gap, "analog": analog}
        for v in range(2):
            rows.append({"key": f"s{i}", "variant": v, "right": right, "on_list": on, "list_size": 3,
                         "adduct": "[M+H]+", "polarity": "positive", "rank1": "C", "features": features})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "train.0of2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[::2]))
    (tmp_path / "c" / "train.1of2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1::2]))
    out = tmp_path / "m.json"
    assert main(["fit", "--collected", str(tmp_path / "c"), "--out", str(out)]) == 0
    model = ConfidenceModel.load(out)
    assert model.features == SUSPECT_FEATURES and model.meta["fit"]["rows"] == 1200
    assert model.meta["fit"]["spectra"] == 600 and model.meta["polarities"] == ["positive"]
    assert model.weights[SUSPECT_FEATURES.index("fragment_gap")] > 0.5  # which one: the fragment lead
    on, share = on_list_model(model)
    assert on.weights[SUSPECT_FEATURES.index("analog")] > 0.5 and 0.3 < share < 0.7  # whether on the list: analog
    assert share == pytest.approx(np.mean([r["on_list"] for r in rows]), abs=1e-6)
    low = dict.fromkeys(SUSPECT_FEATURES, 0.0) | {"fragment_gap": -4.0, "analog": 2.0}
    high = dict(low, fragment_gap=8.0)
    assert suspect_probability(model, low) < 0.2 < 0.8 < suspect_probability(model, high)
    # the share the user states moves the probability, in its direction, and never above P(right | on the list)
    stated = [suspect_probability(model, high, present) for present in (0.05, 0.5, 0.95)]
    assert stated[0] < stated[1] < stated[2] < model.probability(high)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        suspect_probability(model, high, 1.0)
    assert 0.5 <= model.meta["level_2b"]["min_probability"] < 1.0  # 90% right above it, on at least 50 rows
    # the FOLD=val report reads the same rows, with the model written above
    (tmp_path / "c" / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from training.calibration.suspect_confidence import compare_features, report

    text = report(tmp_path / "c", out)
    assert "| every suspect rank 1 | 1200 |" in text and "the compound not on the list (all wrong)" in text
    assert "level 2b (P >= " in text and "mean confidence of right rank 1s" in text
    table = text[text.index("resampled to a share"):].splitlines()
    assert [line.split(" | ")[0] for line in table[3:]] == ["| 0.1", "| 0.25", "| 0.5", "| 0.75", "| 0.9"]
    told_ece = [float(line.split(" | ")[3]) for line in table[3:]]
    left_ece = [float(line.split(" | ")[7]) for line in table[3:]]
    assert told_ece[0] < left_ece[0] and told_ece[-1] < left_ece[-1]  # told the share, calibrated at the ends
    table = compare_features(tmp_path / "c")
    # header (2 lines), shipped, each extra (the pool's too: these rows have them), all, the pool's three, each out
    assert len([t for t in table.splitlines() if t.startswith("|")]) == 2 + 1 + 6 + 1 + 1 + len(SUSPECT_FEATURES)
    assert "P(on the list) from the shipped features" in table and "the decoder drew the suspect for" in table
    with pytest.raises(SystemExit):
        main(["fit"])
    assert main(["fit", "--collected", str(tmp_path / "c")]) == 2  # nowhere to write
    with pytest.raises(ConfigError, match="run `collect` first"):
        from training.calibration.suspect_confidence import read_rows

        read_rows(tmp_path, "val")


def test_a_one_part_model_ignores_the_share_and_a_bad_share_is_refused():
    from engine.elucidation.pipeline import QueryParams
    from engine.model.suspect_confidence import shift_share, suspect_probability

    model = ConfidenceModel((1.0,) + (0.0,) * 7, 0.0, (0.0,) * 8, (1.0,) * 8, SUSPECT_FEATURES)  # fitted before
    f = dict.fromkeys(SUSPECT_FEATURES, 0.0) | {"log_suspects": 1.0}
    assert suspect_probability(model, f, 0.1) == suspect_probability(model, f, 0.9) == model.probability(f)
    assert suspect_probability(model, None) == 0.0
    assert shift_share(0.5, 0.5, 0.9) == pytest.approx(0.9) and shift_share(0.3, 0.6, 0.6) == pytest.approx(0.3)
    assert shift_share(0.5, 0.25, 0.5) == pytest.approx(0.75)  # odds 1 at a share of odds 1/3: times 3
    for bad in (0.0, 1.0, -0.2, float("nan"), "half"):
        with pytest.raises(ConfigError, match="suspects_present"):
            QueryParams(suspects_present=bad)
    assert "suspects_present=0.9" in QueryParams(suspects_present=0.9).describe()
    assert "suspects_present" not in QueryParams().describe()
    assert QueryParams(suspects_present=0.9).sampling_key() == QueryParams().sampling_key()  # no sample changes


def test_the_shipped_suspect_model_reads_todays_features_and_is_recorded_in_the_bundle():
    from engine.model.bundle import sha256_file
    from engine.paths import default_model_dir

    folder = default_model_dir()
    model = ConfidenceModel.load(folder / "suspect_confidence.json")
    assert model.features == SUSPECT_FEATURES and model.settings == {"fragment_score": True, "analog_score": True}
    assert set(model.meta["polarities"]) == {"positive", "negative"} and "level_2b" in model.meta
    on, share = on_list_model(model)
    assert on.features == SUSPECT_FEATURES and 0.3 < share < 0.7  # the two parts, fitted at about half on the list
    recorded = json.loads((folder / "config.json").read_text())["files"]["suspect_confidence.json"]
    assert recorded == sha256_file(folder / "suspect_confidence.json")
    # more suspects of the formula and a smaller fragment lead make rank 1 less sure
    f = dict.fromkeys(SUSPECT_FEATURES, 0.0) | {"fragment_fit": -3.0, "fingerprint_fit": -60.0}
    crowded = f | {"log_suspects": math.log(13)}
    assert model.probability(f | {"fragment_gap": 5.0}) > model.probability(f) > model.probability(crowded)
    # a list of standards known to be in the sample makes a rank 1 surer than a broad screening list does
    assert suspect_probability(model, f, 0.9) > suspect_probability(model, f) > suspect_probability(model, f, 0.1)
