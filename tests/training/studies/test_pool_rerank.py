"""The pool re-ranking study (issue #59, item 3): its features, the re-ranked truth's rank and the listwise fit."""

import numpy as np

from training.studies.pool_rerank import FEATURES, cross_validated, feature_matrix, fit_logit, hits, new_rank


def cand(k, rank, fp, fwd=None, an=0.0, n=1, ed=0, dec=(-10.0, -10.0, -10.0), length=10):
    return {"k": k, "s": "C", "rank": rank, "fp": fp, "n": n, "ed": ed, "sim": 0.3, "fwd": fwd, "an": an,
            "dec": list(dec) if dec is not None else [None, None, None], "len": length if dec is not None else None}


POOL = {"spectrum": "s1", "truth": "T", "rank": 2, "candidates": [
    cand("A", 1, -10.0, fwd=-30.0), cand("T", 2, -11.0, fwd=-20.0), cand("B", 3, -12.0, fwd=None, dec=None)]}


def test_missing_scores_take_the_pools_lowest_and_the_truth_is_found():
    X, t = feature_matrix(POOL)
    assert t == 1 and X.shape == (3, len(FEATURES))
    assert X[2, FEATURES.index("fwd")] == -30.0  # no forward score: the pool's lowest
    assert X[2, FEATURES.index("dec")] == -10.0
    assert X[0, FEATURES.index("logn")] == np.log(2)


def test_new_rank_reorders_the_top_and_ties_go_against_the_truth():
    X, t = feature_matrix(POOL)
    w = np.zeros(len(FEATURES))
    w[0] = 1.0
    assert new_rank(POOL, X, t, w) == 2  # the fingerprint score alone: today's order
    w[1] = 1.0  # + forward: T -31 against A -40
    assert new_rank(POOL, X, t, w) == 1
    assert new_rank(POOL, X, t, np.zeros(len(FEATURES))) == 3  # all tied: the truth last
    assert new_rank({**POOL, "truth": "X"}, *feature_matrix({**POOL, "truth": "X"}), w) is None
    far = {**POOL, "candidates": [*POOL["candidates"][:1], {**POOL["candidates"][1], "rank": 40}]}
    assert new_rank(far, *feature_matrix(far), w, top=30) == 40  # beyond the re-ranked top: unchanged


def synthetic_pools(n=60, seed=0):
    """Pools whose truth has the best forward score but a middling fingerprint score."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        fp = np.sort(rng.normal(-20, 3, 8))[::-1]
        fwd = rng.normal(-40, 5, 8)
        t = int(rng.integers(0, 8))
        fwd[t] = fwd.max() + 5
        out.append({"spectrum": f"s{i}", "truth": f"k{t}", "rank": t + 1, "candidates": [
            cand(f"k{j}", j + 1, float(fp[j]), fwd=float(fwd[j])) for j in range(8)]})
    return out


def test_the_listwise_fit_finds_the_evidence_that_names_the_truth():
    pools = synthetic_pools()
    data = [feature_matrix(p) for p in pools]
    cols = [FEATURES.index("fp"), FEATURES.index("fwd")]
    w = fit_logit(data, cols)
    assert w[FEATURES.index("fwd")] > 0 and set(np.flatnonzero(w)) <= set(cols)
    assert hits(pools, w)[:, 0].sum() > hits(pools, None)[:, 0].sum()
    assert cross_validated(pools, cols)[:, 0].sum() > hits(pools, None)[:, 0].sum()


def test_collected_ranks_read_back_as_deep_search_eval_results(tmp_path):
    import json

    from training.studies.deep_search_eval import _rows_by_spectrum
    from training.studies.pool_rerank import as_results, read_pools

    rows = [{**POOL, "method": m, "smiles": "CCO", "seconds": 1.5, "n_candidates": 3} for m in ("standard", "deep")]
    (tmp_path / "pools.0.jsonl").write_text(json.dumps(rows[0]) + "\n" + '{"cut sho')  # a stopped process's last line
    (tmp_path / "pools.1.jsonl").write_text(json.dumps(rows[1]) + "\n")
    assert [r["method"] for r in read_pools(tmp_path, "deep")] == ["deep"]
    by = _rows_by_spectrum(as_results(tmp_path))
    assert by["s1"]["standard"]["rank"] == 2 and by["s1"]["deep"]["seconds"] == 1.5
