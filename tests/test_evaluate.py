"""msgpt-eval: each metric against hand-computed cases, and an end-to-end run on the tiny bundle."""

import json

import numpy as np
import pytest

from engine.errors import ConfigError
from training.evaluate import (
    EvalConfig,
    EvalResult,
    Progress,
    evaluate,
    fidelity_bin,
    optimal_threshold,
    outer_kappas,
    summarize,
    topk_hit,
    topk_max,
)


def test_fidelity_bins_edges():
    assert fidelity_bin(0.0) == "low"
    assert fidelity_bin(0.4999) == "low"
    assert fidelity_bin(0.5) == "mid"
    assert fidelity_bin(0.6999) == "mid"
    assert fidelity_bin(0.7) == "high"
    assert fidelity_bin(1.0) == "high"
    with pytest.raises(ConfigError, match="fidelity must be in"):
        fidelity_bin(1.5)


def test_topk_hit_and_max():
    assert topk_hit(1, 1) and topk_hit(10, 10)
    assert not topk_hit(2, 1) and not topk_hit(11, 10) and not topk_hit(None, 10)
    assert topk_max([0.2, 0.9, 0.1], 1) == 0.2
    assert topk_max([0.2, 0.9, 0.1], 10) == 0.9
    assert topk_max([], 10) == 0.0


def record(rank, tanimoto, topological, samples=100, valid=50, fc=20, n_candidates=3):
    return {"rank": rank, "tanimoto": tanimoto, "topological": topological, "n_samples": samples,
            "n_valid": valid, "n_formula_consistent": fc, "n_candidates": n_candidates,
            "seconds": 1.0, "mean_query_bits": 30.0}


def test_summarize_by_hand():
    records = [
        record(1, [1.0, 0.5], [1.0, 0.6]),       # exact at 1
        record(3, [0.4, 0.3, 1.0], [0.6, 0.675, 1.0]),  # exact at 3, close match at 2 (boundary counts)
        record(None, [], [], valid=0, fc=0, n_candidates=0),  # no candidates
    ]
    m = summarize(records)
    assert m["n"] == 3
    assert m["top1_accuracy"] == pytest.approx(1 / 3)
    assert m["top10_accuracy"] == pytest.approx(2 / 3)
    assert m["top1_tanimoto"] == pytest.approx((1.0 + 0.4 + 0.0) / 3)
    assert m["top10_tanimoto"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert m["top1_close_match"] == pytest.approx(1 / 3)  # 0.6 < 0.675 for the second
    assert m["top10_close_match"] == pytest.approx(2 / 3)
    assert m["valid_yield"] == pytest.approx(100 / 300)
    assert m["formula_consistent_yield"] == pytest.approx(40 / 300)
    assert m["no_candidate_share"] == pytest.approx(1 / 3)


def test_optimal_thresholds_by_hand():
    # two spectra, 4 bits; truth {0,1} and {0}
    post = np.array([[0.9, 0.6, 0.3, 0.1], [0.8, 0.5, 0.45, 0.0]])
    truths = [np.array([0, 1]), np.array([0])]
    grid = np.array([0.2, 0.4, 0.55, 0.7])
    # t=0.2: P1={0,1,2} F1=2*2/5=0.8, P2={0,1,2} F1=2/4=0.5 -> 0.65
    # t=0.4: P1={0,1} F1=1, P2={0,1,2} 0.5 -> 0.75
    # t=0.55: P1={0,1} 1, P2={0} 1 -> 1.0
    # t=0.7: P1={0} 2/3, P2={0} 1 -> 0.8333
    t, f1 = optimal_threshold(post, truths, grid, "f1")
    assert (t, f1) == (0.55, pytest.approx(1.0))
    # cosine at t=0.7: P1={0}: 1/sqrt(2)=0.7071, P2: 1 -> 0.8536; at 0.55 -> 1.0
    t, cos = optimal_threshold(post, truths, np.array([0.2, 0.7]), "cosine")
    # t=0.2: P1 2/sqrt(6)=0.8165, P2 1/sqrt(3)=0.5774 -> 0.6969; t=0.7 -> 0.8536
    assert t == 0.7 and cos == pytest.approx((1 / np.sqrt(2) + 1) / 2)
    with pytest.raises(ConfigError, match="'f1' or 'cosine'"):
        optimal_threshold(post, truths, grid, "recall")


def test_outer_kappas_stay_outside_the_band():
    k = outer_kappas(np.random.default_rng(0), 200, 0.95, 1.5)
    assert len(k) == 200 and np.all(np.diff(k) >= 0)
    assert np.all(((k >= 0.5) & (k < 0.95)) | ((k > 1.5) & (k <= 2.5)))
    assert (k < 0.95).any() and (k > 1.5).any()


def test_end_to_end_report_and_resume(tiny_bundle_dir, data_dir, tmp_path):
    cfg = EvalConfig(model=str(tiny_bundle_dir), mgf=str(data_dir / "fixture.mgf"), out=str(tmp_path / "eval"),
                     folds=(), variants=("oracle", "point", "band", "outer"), groups=4, pool_size=8,
                     pool_sizes=(8, 16), precision="fp32")
    events = list(evaluate(cfg))
    assert isinstance(events[-1], EvalResult) and all(isinstance(e, Progress) for e in events[:-1])
    metrics = events[-1].metrics
    assert set(metrics["variants"]) == {"oracle", "point", "outer", "band", "band@B=8", "band@B=16"}
    n = metrics["data"]["selected"]
    assert n == 10 and all(m["n"] == n for m in metrics["variants"].values())  # the positive-mode records
    # the tiny decoder was trained on these very structures from their true fingerprints
    assert metrics["variants"]["oracle"]["top10_accuracy"] > 0.5
    # B=8 of the scaling run is the band run itself (same samples), B=16 adds samples
    assert metrics["variants"]["band@B=8"]["top10_accuracy"] == metrics["variants"]["band"]["top10_accuracy"]
    lines = (tmp_path / "eval" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6 * n
    report = (tmp_path / "eval" / "report.md").read_text()
    for heading in ("## Accuracy, similarity, yield and speed", "## Posterior fidelity", "## κ diagnostic sweep",
                    "## Candidate-pool scaling"):
        assert heading in report
    for fig in ("accuracy_by_variant", "fidelity_bins", "kappa_sweep", "pool_scaling"):
        assert (tmp_path / "eval" / "figures" / f"{fig}.png").stat().st_size > 1000

    # a rerun draws nothing new: every (spectrum, variant) is in results.jsonl already
    again = list(evaluate(cfg))
    assert (tmp_path / "eval" / "results.jsonl").read_text().splitlines() == lines
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["variants"] == again[-1].metrics["variants"]

    other = EvalConfig(**{**cfg.__dict__, "seed": 1})
    with pytest.raises(ConfigError, match="another model or settings"):
        list(evaluate(other))


def test_config_errors_name_the_bad_value(tmp_path):
    with pytest.raises(ConfigError, match="unknown variant.*bogus"):
        EvalConfig(model="m", mgf="x", out="o", variants=("bogus",))
    with pytest.raises(ConfigError, match="pool size 30 must be a positive multiple of M=20"):
        EvalConfig(model="m", mgf="x", out="o", pool_size=30)


def test_mces_distances_and_failure_scoring(monkeypatch):
    pytest.importorskip("myopic_mces")
    from engine.ranking import Candidate
    from engine.spectrum import Spectrum
    from training import evaluate as ev

    ref = ev.Reference.of(Spectrum(id="x", precursor_mz=47.05, smiles="CCO", mz=[1.0], intensity=[1.0]))
    same = Candidate(rank=1, smiles="CCO", inchikey="", inchikey14="LFQSCWFLJHTTHZ", formula="C2H6O", count=1,
                     frequency=1.0, posterior_similarity=0.0, bits=np.zeros(0, dtype=np.int64))
    assert ev.mces_distances([same], ref, 10, 5.0) == [0.0]
    assert ev.mces_distances([], ref, 10, 5.0) == [ev.MCES_FAILED]  # no candidates: 100

    def fail(*args, **kwargs):
        raise RuntimeError("solver crashed")

    monkeypatch.setattr("myopic_mces.MCES", fail)
    assert ev.mces_distances([same], ref, 10, 5.0) == [4.0]  # failure: bonds of reference + candidate (2 + 2)
