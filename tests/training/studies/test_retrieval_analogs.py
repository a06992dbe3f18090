"""training.studies.retrieval_analogs: the suspect order it measures, its choice and --install."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from engine.model.forward import ForwardConfig, ForwardModel, ForwardRanking
from training.studies import retrieval_analogs as ra


def record(fps: list[float], truth: int = 0, mass_only: tuple[int, ...] = ()) -> dict:
    smiles = ["CCCO", "CC(C)O", "CCOC", "CCCCO", "CCC(C)O"]
    cands = [{"k": f"K{i}", "s": smiles[i], "fp": fp, "fl": int(i not in mass_only), "ml": 1}
             for i, fp in enumerate(fps)]
    return {"key": "x", "fold": "val", "truth": {"inchikey14": f"K{truth}", "smiles": smiles[truth]},
            "candidates": cands}


def test_hit_at_k_is_expected_over_ties():
    mask = np.ones(4, dtype=bool)
    score = np.array([1.0, 1.0, 0.0, 2.0])
    assert ra.hit_at(score, 0, mask, 1) == 0.0  # one is better
    assert ra.hit_at(score, 0, mask, 2) == pytest.approx(0.5)  # tied with another for place 2
    assert ra.hit_at(score, 0, mask, 3) == 1.0
    assert ra.hit_at(score, 0, np.array([True, True, True, False]), 1) == pytest.approx(0.5)  # the 4th is not listed


def test_the_suspect_order_shortlists_by_fingerprint_and_analog_score_and_gives_the_rest_the_lowest():
    rec = record([-1.0, -2.0, -3.0])
    fw = {"K0": -10.0, "K1": None}  # K1 cannot be scored
    none = np.zeros(3)
    # shortlist K0, K1 (by fingerprint); lowest finite forward score -10 for K1 and K2
    assert ra.suspect_scores(rec, fw, 2.0, 2, none, 0.0)["formula"] == pytest.approx([-21.0, -22.0, -23.0])
    fp = ra.fingerprint(rec)
    assert ra.missing(rec, fw, 2, fp) == set() and ra.missing(rec, fw, 3, fp) == {"K2"}
    analog = np.array([0.0, 0.0, 1.0])  # lifts K2 into the shortlist: its forward score is needed
    assert ra.missing(rec, fw, 2, ra.fingerprint(rec) + 10 * analog) == {"K2"}
    fw["K2"] = -1.0
    # before the fragment term: -1, -2, 7; shortlist K2, K0; lowest forward score -10 for K1
    assert ra.suspect_scores(rec, fw, 2.0, 2, analog, 10.0)["formula"] == pytest.approx([-21.0, -22.0, 5.0])
    assert ra.suspect_scores(rec, {}, 0.0, 2, none, 0.0)["formula"] == pytest.approx([-1.0, -2.0, -3.0])


def test_the_analog_score_of_a_pool_is_the_engines():
    rec = record([-1.0, -2.0, -3.0])
    hits = [{"s": 0.5, "smiles": "CCOC", "accession": "A"}, {"s": 0.9, "smiles": "not a smiles", "accession": "B"}]
    scores = ra.analog_scores(rec, hits, 2)
    assert scores[2] == pytest.approx(0.5) and 0 <= scores[0] < 0.5  # an unreadable structure is passed over
    assert ra.analog_scores(rec, hits, 0).tolist() == [0.0, 0.0, 0.0]


def test_the_choice_is_the_best_mean_hit1_then_hit5_then_the_smaller_weight():
    def table(f1, m1, f5=0.5):
        return {"formula": np.array([[f1, f5, 1.0]]), "mass": np.array([[m1, f5, 1.0]])}

    grid = {(10, 0.0): table(0.3, 0.3), (10, 80.0): table(0.5, 0.3), (20, 80.0): table(0.3, 0.5),
            (20, 160.0): table(0.4, 0.3)}
    assert ra.choose(grid) == (10, 80.0)  # tied with (20, 80) on Hit@1 and Hit@5: the smaller H
    grid[(20, 80.0)] = table(0.3, 0.5, f5=0.9)
    assert ra.choose(grid) == (20, 80.0)


def test_install_writes_the_analog_setting_and_keeps_the_forward_ranking(tiny_bundle_dir, tmp_path):
    from engine.model.bundle import add_bundle_file, load_bundle

    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "bundle")
    torch.manual_seed(0)
    ranking = ForwardRanking(weight=4.0, shortlist=10, scope="suspects", intensity_weight=4.0)
    ForwardModel(ForwardConfig(hidden=8, n_bits=32), ranking).save(
        tmp_path / "fw", extra={"fit": {"auroc": 0.9}, "ranking_chosen_by": "x"}, config_file="forward.json")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.safetensors")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.json")
    weights = (bundle_dir / "forward.safetensors").read_bytes()
    message = ra.install(str(bundle_dir), 30, 1280.0, "python -m training.studies.retrieval_analogs --install x")
    assert "installed" in message
    bundle = load_bundle(bundle_dir, device="cpu", precision="fp32")
    assert bundle.forward.ranking == ForwardRanking(weight=4.0, shortlist=10, scope="suspects", intensity_weight=4.0,
                                                    analog_weight=1280.0, analog_hits=30)
    saved = json.loads((bundle_dir / "forward.json").read_text())
    assert saved["training"]["fit"] == {"auroc": 0.9} and saved["training"]["ranking_chosen_by"] == "x"
    assert "--install" in saved["training"]["analogs_chosen_by"]
    assert (bundle_dir / "forward.safetensors").read_bytes() == weights  # the model itself is unchanged
    ra.install(str(bundle_dir), 30, 1280.0, "again, with pools of de novo candidates", others_weight=160.0)
    ranking = load_bundle(bundle_dir, device="cpu", precision="fp32").forward.ranking
    assert (ranking.analog_weight, ranking.analog_weight_others, ranking.weight) == (1280.0, 160.0, 4.0)


def pool_record(key: str, fold: str, fps: list[float], counts: list[int]) -> dict:
    """The truth (K0, a library structure the decoder also drew) among library isomers and de novo-only ones."""
    cands = [{"k": f"K{i}", "s": "C" * (i + 1), "fp": fp, "fl": int(n == 0 or i == 0), "ml": int(n == 0 or i == 0),
              "n": n} for i, (fp, n) in enumerate(zip(fps, counts))]
    return {"key": key, "fold": fold, "adduct": "[M+H]+", "queries": [], "candidates": cands,
            "truth": {"inchikey14": "K0", "smiles": "C"}}


def test_the_others_weight_is_the_de_novo_rules_choice():
    records = {f"{fold}{i}": pool_record(f"{fold}{i}", fold, [-3.0, -1.0, -2.0, -4.0], [1, 0, 0, 2])
               for fold in ("train", "val") for i in range(3)}
    # the analog score lifts the truth (drawn de novo as well): from weight 2 it is first (-3 + w > -1); none crowds
    lifts = {k: np.array([1.0, 0.0, 0.0, 0.0]) for k in records}
    rule = ra.others_rule(records, lifts, [0.0, 1.0, 10.0, 20.0])
    assert rule["chosen"] == 10.0 and rule["crowding_ok"]  # the smallest weight of the best Hit@1
    assert set(rule["tables"]) == {"train-unseen", "FOLD=val"} and "| 10 (chosen) |" in rule["tables"]["FOLD=val"]
    # an analog score that lifts the de novo decoy (K3) above the de novo truth lowers de novo Top-1: weight 0
    decoy = {k: np.array([0.0, 0.0, 0.0, 1.0]) for k in records}
    assert ra.others_rule(records, decoy, [0.0, 1.0, 10.0])["chosen"] == 0.0


def test_the_fragment_setting_is_chosen_again_with_the_analog_weight_and_reported_against_the_bundles():
    # K0 is the truth; the fingerprint puts K1 first, K0's forward score is the best, K2 is only reached by a
    # shortlist of 3 and its forward score is the worst
    recs = {"a": {**record([-2.0, -1.0, -3.0]), "key": "a"}, "b": {**record([-2.0, -1.0, -3.0]), "key": "b"}}
    fw = {"a": {"K0": -1.0, "K1": -2.0, "K2": -30.0}, "b": {"K0": -1.0, "K1": -2.0, "K2": -30.0}}
    none = {k: np.zeros(3) for k in recs}
    keys = {"train-unseen": ["a"], "FOLD=val": ["b"]}
    grids = ra.fragment_grid(recs, fw, none, keys, [0.0, 1.0, 2.0], [1, 3], [0.0])
    assert set(grids["train-unseen"]) == {(w, n, 0.0) for w in (0.0, 1.0, 2.0) for n in (1, 3)}
    first = {g: t["formula"][0, 0] for g, t in grids["train-unseen"].items()}
    assert first[(0.0, 3, 0.0)] == 0.0  # the fingerprint alone puts K1 first
    assert first[(1.0, 3, 0.0)] == pytest.approx(0.5)  # -3 each: a tie
    assert first[(2.0, 3, 0.0)] == 1.0 and first[(2.0, 1, 0.0)] == 0.0  # a shortlist of 1 never scores K0
    assert ra.choose_fragment(grids["train-unseen"]) == (2.0, 3, 0.0)
    report = ra.refit_report(grids, (1.0, 3, 0.0), "train-unseen")
    assert report["chosen"] == [2.0, 3, 0.0] and report["shipped"] == [1.0, 3, 0.0]
    val = next(s for s in report["sets"] if s["label"] == "FOLD=val")
    assert [r["setting"] for r in val["rows"]] == [[1.0, 3, 0.0], [2.0, 3, 0.0]]
    assert val["gain"]["formula"][0] == pytest.approx(50.0)  # 0.5 -> 1.0 at Hit@1, in points
    assert len(report["grid"]) == 6
    same = ra.refit_report(grids, (2.0, 3, 0.0), "train-unseen")  # the bundle's own setting chosen: one row
    assert [len(s["rows"]) for s in same["sets"]] == [1, 1]
    text = ra.report_text({"run": {"pools": "p", "n": {"train-unseen": 1}, "forward_weight": 1.0, "shortlist": 3,
                                   "intensity_weight": 0.0, "libraries": [], "machine": "m",
                                   "search_seconds_per_spectrum": 0.0, "command": "c"},
                           "chosen": {"hits": 30, "weight": 0.0}, "sets": [], "refit": report, "others": None})
    assert "w = 2, shortlist 3, v = 0" in text and "| FOLD=val | 1 | 3 | 0 |" in text
