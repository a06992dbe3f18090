"""The formula-run budget study (training.studies.feature_formula_weight budget): what a run below the threshold
keeps, and the ranking it then gives."""

import math

from training.studies.feature_formula_weight import budget_record, metrics


def cand(key, score, origin="de_novo", count=1, group=2, suspect=False):
    return [key, "C6H6O", score, group, None, count, origin, suspect]


def run(p, seconds, cands):
    return {"formula": "C6H6O", "adduct": "[M+H]+", "p": p, "seconds": seconds, "cands": cands}


def record():
    best = run(0.90, 2.0, [cand("AAA", -10.0), cand("BBB", -11.0)])
    unlikely = run(0.03, 1.5, [cand("TRUTH", -1.0), cand("LIB", -2.0, "de_novo;structure_library"),
                               cand("SUS", -3.0, "structure_library", count=0, group=1, suspect=True)])
    nothing = run(0.02, 1.0, [cand("X", -5.0)])
    track = run(None, 0.1, [cand("TRK", -4.0, "structure_library", count=0)])
    return {"id": "s", "truth": "TRUTH", "formula": "C6H6O", "table": {}, "runs": [best, unlikely, nothing, track]}


def test_a_run_below_the_threshold_keeps_its_library_structures_only():
    rec, saved, cut = budget_record(record(), 0.05, undrawn=-16.0)
    assert cut == 2 and math.isclose(saved, 2.5)
    kept = {c[0]: c for run in rec["runs"] for c in run["cands"]}
    assert "TRUTH" not in kept and "X" not in kept  # de novo only: gone; the run of nothing but those goes too
    assert len(rec["runs"]) == 3 and rec["runs"][0]["p"] == 0.90 and rec["runs"][-1]["p"] is None
    assert kept["LIB"][2] == -18.0  # drawn before, now a library structure no sample drew
    assert kept["SUS"][2] == -3.0  # a suspect keeps its score


def test_the_best_run_and_those_above_the_threshold_stay_as_they_were():
    rec, saved, cut = budget_record(record(), 0.0, undrawn=-16.0)
    assert rec == record() and saved == 0 and cut == 0
    rec, _, cut = budget_record(record(), 1.0, undrawn=-16.0)
    assert cut == 2 and rec["runs"][0] == record()["runs"][0]  # the best formula is always sampled


def test_the_truth_of_an_unlikely_formula_is_lost_only_when_it_was_de_novo():
    before = metrics([record()], 16.0, "eps", 1e-4)
    after = metrics([budget_record(record(), 0.05, -16.0)[0]], 16.0, "eps", 1e-4)
    assert before["top10"][0] == 1.0 and after["top10"][0] == 0.0
