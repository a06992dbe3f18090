"""The edit-prior study (issue #59): the truth's rank under fingerprint score − δ · [edit], and its table."""

from training.studies.edit_prior import rank_of_truth, table

POOL = {"spectrum": "s", "truth": "T", "candidates": [
    {"key": "E1", "fp": -10.0, "count": 0, "edit": 1},
    {"key": "T", "fp": -11.0, "count": 3, "edit": 0},
    {"key": "E2", "fp": -11.5, "count": 0, "edit": 1},
    {"key": "D", "fp": -14.0, "count": 1, "edit": 0},
]}


def test_the_handicap_moves_edits_below_drawn_candidates_of_close_scores():
    assert rank_of_truth(POOL, 0.0) == 2  # the pipeline's order
    assert rank_of_truth(POOL, 0.5) == 2  # E1 still ahead: -10.5 > -11
    assert rank_of_truth(POOL, 2.0) == 1  # E1 at -12 falls behind the truth
    assert rank_of_truth(POOL, 1e9) == 1
    assert rank_of_truth({**POOL, "truth": "X"}, 0.0) is None


def test_table_counts_pool_top1_top10():
    text = table([POOL, {**POOL, "truth": "X"}], deltas=(0.0, 2.0))
    assert "| 0 | 1 | 0 | 1 |" in text and "| 2 | 1 | 1 | 1 |" in text and text.startswith("2 spectra")
