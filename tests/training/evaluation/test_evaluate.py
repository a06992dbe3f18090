"""msgpt-eval: each metric against hand-computed cases, the κ sweep, and end-to-end runs on the tiny bundle."""

import json

import numpy as np
import pytest

from engine.errors import ConfigError
from engine.model.querying import Calibration
from training.evaluation import evaluate as ev
from training.core.metrics import (
    CLOSE_MATCH,
    MCES_NO_CANDIDATES,
    fidelity_bin,
    optimal_threshold,
    reference_rank,
    sample_yield,
    threshold_counts,
    topk_best,
    topk_close_match,
    topk_exact,
    topk_min,
)
from training.evaluation.report import build_metrics, summarize


# -- metrics by hand ------------------------------------------------------------------------------------
def test_reference_rank_counts_distinct_structures_only():
    keys = ["AAA", "BBB", "AAA", "CCC", "BBB", "DDD"]
    assert reference_rank(keys, "AAA") == 1
    assert reference_rank(keys, "CCC") == 3  # the repeated AAA takes no rank
    assert reference_rank(keys, "DDD") == 4
    assert reference_rank(keys, "ZZZ") is None  # absent
    assert reference_rank(keys, None) is None and reference_rank([], "AAA") is None


def test_topk_exact_with_absent_reference_and_bad_k():
    assert topk_exact(1, 1) and topk_exact(10, 10) and topk_exact(3, 10)
    assert not topk_exact(2, 1) and not topk_exact(11, 10) and not topk_exact(None, 10)
    with pytest.raises(ConfigError, match="`k` must be a positive integer, got 0"):
        topk_exact(1, 0)


def test_tied_counts_are_ranked_once_by_the_pool():
    """Two isomers drawn equally often: the tie is broken by posterior similarity (then InChIKey), so the
    reference in second place is a Top-1 miss and a Top-10 hit, never both first."""
    import safe as sf

    from engine.chem import molecules as chem
    from engine.elucidation.ranking import CandidatePool

    ethanol, ether = "CCO", "COC"
    pool = CandidatePool("C2H6O", [chem.morgan_bits(chem.mol_from_smiles(ethanol))])
    pool.add([(0, 0), (0, 1), (0, 2), (0, 3)], [sf.encode(s, allow_empty=True) for s in (ethanol, ether, ether, ethanol)])
    candidates, counts = pool.rank()
    assert [c.count for c in candidates] == [2, 2] and counts["formula_consistent"] == 4
    rank = reference_rank([c.inchikey14 for c in candidates], chem.inchikey14(ether))
    assert rank == 2 and not topk_exact(rank, 1) and topk_exact(rank, 10)


def test_topk_best_and_close_match_at_the_boundary():
    assert topk_best([0.2, 0.9, 0.1], 1) == 0.2
    assert topk_best([0.2, 0.9, 0.1], 10) == 0.9
    assert topk_best([], 10) == 0.0  # no candidates: 0
    assert CLOSE_MATCH == 0.675
    assert topk_close_match([0.675], 1)  # the boundary counts (≥)
    assert not topk_close_match([0.6749999], 1)
    assert not topk_close_match([0.5, 0.9], 1) and topk_close_match([0.5, 0.9], 10)
    assert not topk_close_match([], 10)


def test_topk_min_mces_scores_no_candidates_100():
    assert topk_min([7.0, 3.0, 5.0], 1) == 7.0 and topk_min([7.0, 3.0, 5.0], 10) == 3.0
    assert topk_min([], 1) == MCES_NO_CANDIDATES == 100.0


def test_sample_yield_is_pooled_over_spectra():
    assert sample_yield([100, 100], [50, 30], [20, 0]) == (pytest.approx(0.4), pytest.approx(0.1))
    assert sample_yield([], [], []) == (0.0, 0.0)


@pytest.mark.parametrize("value, name", [(0.0, "low"), (0.4999, "low"), (0.5, "mid"), (0.6999, "mid"), (0.7, "high"),
                                         (1.0, "high")])
def test_fidelity_bin_edges(value, name):
    assert fidelity_bin(value) == name


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan")])
def test_fidelity_bin_rejects_non_similarities(bad):
    with pytest.raises(ConfigError, match="Tanimoto similarity in \\[0, 1\\]"):
        fidelity_bin(bad)


def test_threshold_counts_are_strict():
    post = np.array([[0.5, 0.5, 0.2, 0.9]], dtype=np.float32)
    inter, n_pred, n_true = threshold_counts(post, [np.array([0, 3])], [0.5, 0.2, 0.0, 0.9])
    assert n_pred.tolist() == [[1, 3, 4, 0]]  # π > t, not ≥
    assert inter.tolist() == [[1, 2, 2, 0]] and n_true.tolist() == [2]


def test_f1_and_cosine_optimal_thresholds_by_hand():
    # two spectra, 4 bits; truth {0,1} and {0}
    post = np.array([[0.9, 0.6, 0.3, 0.1], [0.8, 0.5, 0.45, 0.0]], dtype=np.float32)
    truths = [np.array([0, 1]), np.array([0])]
    grid = np.array([0.2, 0.4, 0.55, 0.7])
    # F1 = 2|Q∩T| / (|Q|+|T|) per spectrum, then the mean:
    # t=0.2: Q1={0,1,2} 4/5=0.8, Q2={0,1,2} 2/4=0.5 -> 0.65
    # t=0.4: Q1={0,1} 1, Q2={0,1,2} 0.5 -> 0.75
    # t=0.55: Q1={0,1} 1, Q2={0} 1 -> 1.0   <- best
    # t=0.7: Q1={0} 2/3, Q2={0} 1 -> 0.833
    t, f1 = optimal_threshold(post, truths, grid, "f1")
    assert t == 0.55 and f1 == pytest.approx(1.0)
    # cosine = |Q∩T| / sqrt(|Q||T|): t=0.2: 2/sqrt(6), 1/sqrt(3) -> 0.697; t=0.7: 1/sqrt(2), 1 -> 0.854
    t, cos = optimal_threshold(post, truths, np.array([0.2, 0.7]), "cosine")
    assert t == 0.7 and cos == pytest.approx((1 / np.sqrt(2) + 1) / 2)
    # F1 and cosine can disagree: truth {0,1,2,3}, π = .9 .8 .7 .1; t=.5 gives 3 bits, t=.05 all 4
    p2 = np.array([[0.9, 0.8, 0.7, 0.1], [0.9, 0.1, 0.1, 0.1]], dtype=np.float32)
    t2 = [np.array([0, 1, 2, 3]), np.array([0])]
    # f1:  t=.05: 1, 2/5 -> 0.7;       t=.5: 6/7, 1 -> 0.929
    assert optimal_threshold(p2, t2, [0.05, 0.5], "f1") == (0.5, pytest.approx((6 / 7 + 1) / 2))
    with pytest.raises(ConfigError, match="'f1', 'cosine' or 'tanimoto'"):
        optimal_threshold(post, truths, grid, "recall")


def test_kappa_sweep_by_hand():
    # A(t) = 10 (1 - t) and D_enc = 5, so t_κ = 1 - κ/2: κ=1 -> t=0.5, κ=1.6 -> t=0.2
    cal = Calibration(d_enc=5.0, thresholds=np.array([0.0, 1.0]), active_counts=np.array([10.0, 0.0]))
    post = np.array([[0.9, 0.8, 0.3, 0.0], [0.6, 0.0, 0.0, 0.3]], dtype=np.float32)
    truths = [np.array([0, 1]), np.array([0, 1, 2, 3])]
    rows = ev.kappa_sweep(cal, post, truths, kappas=(1.0, 1.6))
    # κ=1: Q1={0,1} T=1.0 (high), Q2={0} T=1/4 (low); bits 2 and 1
    assert rows[0]["threshold"] == pytest.approx(0.5)
    assert rows[0]["mean_active_bits"] == 1.5 and rows[0]["mean_fidelity"] == pytest.approx(0.625)
    assert (rows[0]["share_low"], rows[0]["share_mid"], rows[0]["share_high"]) == (0.5, 0.0, 0.5)
    # κ=1.6: Q1={0,1,2} T=2/3 (mid), Q2={0,3} T=2/4 = 0.5 (mid: the edge belongs to mid)
    assert rows[1]["threshold"] == pytest.approx(0.2)
    assert rows[1]["mean_active_bits"] == 2.5
    assert (rows[1]["share_low"], rows[1]["share_mid"], rows[1]["share_high"]) == (0.0, 1.0, 0.0)



def test_kappa_sweep_cuts_negative_mode_rows_at_their_own_curve():
    # positive A(t) = 10 (1 - t), D_enc 5: t_1 = 0.5; negative A(t) = 10 (1 - t), D_enc 8: t_1 = 0.2
    neg = Calibration(d_enc=8.0, thresholds=np.array([0.0, 1.0]), active_counts=np.array([10.0, 0.0]))
    cal = Calibration(d_enc=5.0, thresholds=np.array([0.0, 1.0]), active_counts=np.array([10.0, 0.0]), negative=neg)
    post = np.array([[0.9, 0.8, 0.3, 0.0], [0.6, 0.0, 0.0, 0.3]], dtype=np.float32)
    truths = [np.array([0, 1]), np.array([0, 1, 2, 3])]
    # row 2 negative: Q2 = {0, 3} at t=0.2, T = 2/4 (mid); row 1 at t=0.5 as before: {0, 1}, T = 1 (high)
    (row,) = ev.kappa_sweep(cal, post, truths, kappas=(1.0,), negative=np.array([False, True]))
    assert (row["threshold"], row["threshold_negative"]) == (pytest.approx(0.5), pytest.approx(0.2))
    assert row["mean_active_bits"] == 2.0 and row["mean_fidelity"] == pytest.approx(0.75)
    assert (row["share_low"], row["share_mid"], row["share_high"]) == (0.0, 0.5, 0.5)
    # every row negative: the negative curve's threshold is the row's threshold
    (row,) = ev.kappa_sweep(cal, post, truths, kappas=(1.0,), negative=np.array([True, True]))
    assert row["threshold"] == pytest.approx(0.2) and "threshold_negative" not in row
    # without a negative curve, or without flags, every row is cut at the positive one
    for kw in ({}, {"negative": np.array([False, False])}):
        (row,) = ev.kappa_sweep(cal, post, truths, kappas=(1.0,), **kw)
        assert row["mean_fidelity"] == pytest.approx(0.625) and "threshold_negative" not in row
    with pytest.raises(ValueError, match="one flag per posterior"):
        ev.kappa_sweep(cal, post, truths, kappas=(1.0,), negative=np.array([True]))


def record(rank, tanimoto, topological, samples=100, valid=50, fc=20, n_candidates=3, **kw):
    return {"rank": rank, "tanimoto": tanimoto, "topological": topological, "n_samples": samples,
            "n_valid": valid, "n_formula_consistent": fc, "n_candidates": n_candidates, "seconds": 1.0,
            "mean_query_bits": 30.0, "query_fidelity": 0.5, **kw}


def test_summarize_by_hand():
    records = [
        record(1, [1.0, 0.5], [1.0, 0.6]),  # exact at 1
        record(3, [0.4, 0.3, 1.0], [0.6, 0.675, 1.0]),  # exact at 3; close match at 2 (the boundary counts)
        record(None, [], [], valid=0, fc=0, n_candidates=0),  # no candidates
    ]
    m = summarize(records)
    assert m["n"] == 3
    assert m["top1_accuracy"] == pytest.approx(1 / 3) and m["top10_accuracy"] == pytest.approx(2 / 3)
    assert m["top1_tanimoto"] == pytest.approx((1.0 + 0.4 + 0.0) / 3)
    assert m["top10_tanimoto"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert m["top1_close_match"] == pytest.approx(1 / 3)  # 0.6 < 0.675 for the second
    assert m["top10_close_match"] == pytest.approx(2 / 3)
    assert m["valid_yield"] == pytest.approx(100 / 300) and m["formula_consistent_yield"] == pytest.approx(40 / 300)
    assert m["no_candidate_share"] == pytest.approx(1 / 3)
    assert "top1_mces" not in m
    with_mces = summarize([record(1, [1.0], [1.0], mces=[0.0, 4.0]), record(None, [], [], mces=[])])
    assert with_mces["top1_mces"] == pytest.approx(50.0) and with_mces["top10_mces"] == pytest.approx(50.0)


def test_metrics_compare_variants_on_common_spectra_only():
    run = {"variants": ["point", "band"], "selected": ["a", "b"], "model": {}, "data": {}, "parameters": {}}
    recs = [dict(record(1, [1.0], [1.0]), spectrum="a", variant="point", fidelity=0.8),
            dict(record(1, [1.0], [1.0]), spectrum="a", variant="band", fidelity=0.8),
            dict(record(None, [], []), spectrum="b", variant="point", fidelity=0.1)]  # band of b never finished
    m = build_metrics(run, recs)
    assert m["n_common_spectra"] == 1 and m["incomplete_spectra"] == 1
    assert m["variants"]["point"]["n"] == 1 and m["variants"]["point"]["top1_accuracy"] == 1.0
    assert m["fidelity_bins"]["band"]["high"]["share"] == 1.0


# -- end to end on the tiny bundle -------------------------------------------------------------------
def small_config(tiny_bundle_dir, data_dir, out, **kw):
    base = dict(model=str(tiny_bundle_dir), mgf=str(data_dir / "fixture.mgf"), out=str(out), folds=(),
                variants=("oracle", "point", "f1", "cosine", "outer", "band"), groups=4, pool_size=8,
                pool_sizes=(8, 16), precision="fp32", rankings=("frequency", "combined", "fingerprint"))
    return ev.EvalConfig(**{**base, **kw})


def test_end_to_end_report_and_resume(tiny_bundle_dir, data_dir, tmp_path, monkeypatch):
    cfg = small_config(tiny_bundle_dir, data_dir, tmp_path / "eval")
    events = list(ev.evaluate(cfg))
    assert isinstance(events[-1], ev.EvalResult) and all(isinstance(e, ev.Progress) for e in events[:-1])
    assert {e.phase for e in events[:-1]} == {"posteriors", "sampling"}
    metrics = events[-1].metrics
    names = {"oracle", "point", "f1", "cosine", "outer", "band", "band@B=8", "band@B=16"}
    assert set(metrics["variants"]) == names
    n = metrics["data"]["selected"]
    assert n == 10 and all(m["n"] == n for m in metrics["variants"].values())  # the positive-mode records
    # the tiny decoder was trained on these very structures from their true fingerprints
    assert metrics["variants"]["oracle"]["top1_accuracy"] >= 0.9
    # B=8 of the scaling run is the band run itself (same samples), B=16 adds samples
    assert metrics["variants"]["band@B=8"]["top10_accuracy"] == metrics["variants"]["band"]["top10_accuracy"]
    assert metrics["variants"]["band@B=16"]["mean_samples"] == 16
    out = tmp_path / "eval"
    records = ev.read_records(out / "results.jsonl")
    assert len(records) == len(names) * n
    run = json.loads((out / "run.json").read_text())
    by = {(r["spectrum"], r["variant"]): r for r in records}
    any_key = records[0]["spectrum"]
    assert by[any_key, "f1"]["thresholds"] == [pytest.approx(run["thresholds"]["f1_threshold"], abs=1e-5)]
    assert by[any_key, "point"]["thresholds"] == [pytest.approx(run["thresholds"]["kappa_1.0"], abs=1e-5)]
    assert by[any_key, "oracle"]["query_fidelity"] == 1.0 and by[any_key, "oracle"]["thresholds"] == []
    lo, hi = cfg.kappa_min, cfg.kappa_max
    assert all(k < lo or k > hi for k in by[any_key, "outer"]["kappas"]) and len(by[any_key, "outer"]["kappas"]) == 4
    assert by[any_key, "band@B=16"]["seconds"] >= by[any_key, "band@B=8"]["seconds"]  # cumulative
    report = (out / "report.md").read_text()
    for heading in ("## Setup", "## Variants", "## Accuracy, similarity, yield and speed", "### Uncertainty",
                    "## Posterior fidelity", "## κ diagnostic sweep", "## Candidate-pool scaling"):
        assert heading in report
    for text in ("tiny-test-bundle", metrics["model"]["checksum"][:16], "seed 0", "threads", "F1-optimal t="):
        assert text in report
    for fig in ("variants", "fidelity_bins", "kappa_sweep", "pool_scaling"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000
        assert f"figures/{fig}.png" in report

    # a rerun samples nothing: every (spectrum, variant) is in results.jsonl already
    calls = []
    real_run = ev.run_session
    monkeypatch.setattr(ev, "run_session", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    again = list(ev.evaluate(cfg))
    assert calls == [] and len(ev.read_records(out / "results.jsonl")) == len(records)
    assert again[-1].metrics["variants"] == metrics["variants"]

    # an interrupted run (the last spectrum's records and a half-written line lost) redoes only what is missing
    lines = (out / "results.jsonl").read_text().splitlines()
    last = records[-1]["spectrum"]
    kept = [line for line in lines if json.loads(line)["spectrum"] != last]
    (out / "results.jsonl").write_text("\n".join(kept) + '\n{"spectrum": "cut of')
    list(ev.evaluate(cfg))
    assert len(calls) == 6 + 2  # six variants, and one growing pool: B=8, then 8 more samples per group for B=16
    after = ev.read_records(out / "results.jsonl")
    assert len(after) == len(records)
    assert {(r["variant"], r["rank"]) for r in after if r["spectrum"] == last} == \
        {(r["variant"], r["rank"]) for r in records if r["spectrum"] == last}

    # other settings never mix with these results
    with pytest.raises(ConfigError, match="another model or settings.*seed"):
        list(ev.evaluate(small_config(tiny_bundle_dir, data_dir, out, seed=1)))


def test_subsample_is_seeded_and_filters_name_what_they_left_out(tiny_bundle, tiny_bundle_dir, data_dir, tmp_path):
    cfg = small_config(tiny_bundle_dir, data_dir, tmp_path, max_spectra=4, adducts=("[M+H]+",))
    a = ev.select_spectra(tiny_bundle, cfg)
    b = ev.select_spectra(tiny_bundle, cfg)
    assert [s.id for s, _ in a.chosen] == [s.id for s, _ in b.chosen] and len(a.chosen) == 4
    assert all(s.adduct == "[M+H]+" for s, _ in a.eligible)
    assert a.info["left_out"]["adduct not selected"] == 5  # three [M+Na]+ and two negative-mode records
    bigger = ev.select_spectra(tiny_bundle, small_config(tiny_bundle_dir, data_dir, tmp_path, max_spectra=6,
                                                         adducts=("[M+H]+",)))
    assert [s.id for s, _ in bigger.chosen][:4] == [s.id for s, _ in a.chosen]  # a larger N extends the sample
    none = small_config(tiny_bundle_dir, data_dir, tmp_path, licenses=("CC BY-NC",))
    with pytest.raises(ConfigError, match="no spectrum .* is eligible.*--licenses"):
        next(ev.evaluate(none))


def test_kappa_sweep_alone_from_an_encoder_folder(tiny_bundle, data_dir, tmp_path):
    from training.encoder.train_encoder import save_weights

    folder = tmp_path / "encoder_run"
    folder.mkdir()
    save_weights(tiny_bundle.encoder, folder / "encoder.safetensors")
    (folder / "encoder_config.json").write_text(json.dumps(tiny_bundle.encoder.config.to_dict()))
    tiny_bundle.calibration.save(folder / "calibration.json")
    result = list(ev.evaluate(ev.EvalConfig(model=str(folder), mgf=str(data_dir / "fixture.mgf"),
                                            out=str(tmp_path / "sweep"), folds=(), variants=())))[-1]
    assert result.metrics["variants"] == {} and len(result.metrics["kappa_sweep"]["all"]) == len(ev.KAPPA_SWEEP)
    report = (tmp_path / "sweep" / "report.md").read_text()
    assert "## κ diagnostic sweep" in report and "## Accuracy" not in report
    with pytest.raises(ConfigError, match="encoder folder without a decoder"):
        list(ev.evaluate(ev.EvalConfig(model=str(folder), mgf=str(data_dir / "fixture.mgf"),
                                       out=str(tmp_path / "x"), folds=(), variants=("band",))))


def test_cli_runs_and_reports_bad_values(tiny_bundle_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "cli"
    rc = ev.main(["--model", str(tiny_bundle_dir), "--mgf", str(data_dir / "fixture.mgf"), "--fold",
                  "--out", str(out), "--variants", "point", "band", "--groups", "4", "--pool-size", "8",
                  "--max-spectra", "2", "--no-kappa-sweep", "--threads", "1"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "report:" in printed and "band" in printed
    assert "κ diagnostic sweep" not in (out / "report.md").read_text()
    rc = ev.main(["--model", str(tiny_bundle_dir), "--mgf", str(data_dir / "fixture.mgf"), "--out", str(out),
                  "--pool-size", "30"])
    assert rc == 1 and "pool size 30 must be a positive multiple of M=20" in capsys.readouterr().err


def test_config_errors_name_the_bad_value():
    with pytest.raises(ConfigError, match="unknown variant.*bogus"):
        ev.EvalConfig(model="m", mgf="x", out="o", variants=("bogus",))
    with pytest.raises(ConfigError, match="pool size 30 must be a positive multiple of M=20"):
        ev.EvalConfig(model="m", mgf="x", out="o", pool_size=30)
    with pytest.raises(ConfigError, match="`kappa_min` \\(1.6\\) must not exceed"):
        ev.EvalConfig(model="m", mgf="x", out="o", kappa_min=1.6)


# -- MCES ------------------------------------------------------------------------------------------------
def test_mces_distances_and_failure_scoring(monkeypatch):
    pytest.importorskip("myopic_mces")
    from training.evaluation import mces

    mces.mces_distance.cache_clear()
    assert mces.topk_mces("CCO", ["OCC", "CCCO"], 10, 10.0) == ([0.0, 1.0], 0)  # same molecule, one C–C bond more
    assert mces.topk_mces("CCO", [], 10, 10.0) == ([], 0)  # no candidates: scored 100 by topk_min
    # tautomers are compared in canonical form: 2-hydroxypyridine and 2-pyridone are one structure
    assert mces.mces_distance("Oc1ccccn1", "O=c1cccc[nH]1")[0] == 0.0

    def crash(*args, **kwargs):
        raise RuntimeError("solver crashed")

    def timeout(*args, **kwargs):
        return 0, -1, 60.0, mces.TIMEOUT_NO_SOLUTION

    mces.mces_distance.cache_clear()
    monkeypatch.setattr("myopic_mces.MCES", crash)
    assert mces.topk_mces("CCO", ["CCCO"], 10, 1.0) == ([5.0], 1)  # failure: bonds of reference + candidate (2 + 3)
    mces.mces_distance.cache_clear()
    monkeypatch.setattr("myopic_mces.MCES", timeout)
    assert mces.topk_mces("CCO", ["CCCO"], 10, 1.0) == ([5.0], 1)
    mces.mces_distance.cache_clear()


def test_cancel_stops_between_spectra_and_keeps_what_is_done(tiny_bundle_dir, data_dir, tmp_path):
    from engine.errors import Cancelled

    cfg = small_config(tiny_bundle_dir, data_dir, tmp_path / "c", variants=("point",), pool_sizes=(), max_spectra=3,
                       kappa_sweep=False)
    state = {"stop": False}
    events = ev.evaluate(cfg, cancel=lambda: state["stop"])
    with pytest.raises(Cancelled, match="run the same command again"):
        for e in events:
            if e.phase == "sampling" and e.done == 1 and not e.variant:  # the first spectrum is finished
                state["stop"] = True
    assert [r["variant"] for r in ev.read_records(tmp_path / "c" / "results.jsonl")] == ["point"]
    result = list(ev.evaluate(cfg))[-1]
    assert result.metrics["variants"]["point"]["n"] == 3


def test_compare_runs_pairs_the_spectra_both_runs_scored(tmp_path):
    from training.evaluation.report import compare_runs
    from training.evaluation.report import main as report_main

    def write(run, ranks):
        run.mkdir()
        lines = [json.dumps({"spectrum": s, "variant": "band", "rank": r,
                             "rankings": {"frequency": {"rank": 1}}}) for s, r in ranks.items()]
        lines.append(json.dumps({"spectrum": "x", "variant": "oracle", "rank": 1}))
        (run / "results.jsonl").write_text("\n".join(lines) + "\n")

    write(tmp_path / "a", {"s1": 1, "s2": None, "s3": 12, "s4": 5})
    write(tmp_path / "b", {"s1": 1, "s2": 1, "s3": 3, "s5": 1})  # s4 / s5 are in one run only
    row = compare_runs(tmp_path / "a", tmp_path / "b")
    assert row["n"] == 3
    assert row["top1"] == pytest.approx((1 / 3, 2 / 3)) and row["top10"] == pytest.approx((1 / 3, 1.0))
    assert row["top10_diff"] == pytest.approx(2 / 3)
    lo, hi = row["top10_diff_ci"]
    assert 0 <= lo <= 2 / 3 <= hi <= 1
    assert compare_runs(tmp_path / "a", tmp_path / "b", "band", "frequency")["top1_diff"] == 0
    assert report_main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    # one run's band against another run's band+adapter (an adapted bundle evaluated on its own)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.jsonl").write_text("".join(
        json.dumps({"spectrum": s, "variant": "band+adapter", "rank": r}) + "\n" for s, r in {"s1": None, "s4": 1}.items()))
    cross = compare_runs(tmp_path / "a", tmp_path / "c", "band:band+adapter")
    assert cross["n"] == 2 and cross["top1"] == pytest.approx((0.5, 0.5)) and cross["top10"] == pytest.approx((1.0, 0.5))
    with pytest.raises(ValueError, match="share no spectrum"):
        compare_runs(tmp_path / "a", tmp_path / "c")  # c has no band records
