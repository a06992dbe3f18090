"""training.studies.retrieval_forward's two choices and --install: which ranking a bundle gets from a measurement."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engine.model.forward import ForwardConfig, ForwardModel, ForwardRanking
from training.studies import retrieval_forward as rf


def metrics(library_hit1: dict[str, float], library_hit5: float = 0.5) -> dict:
    return {t: {"library": {"hit1": library_hit1[t], "hit5": library_hit5}} for t in ("formula", "mass")}


def test_the_library_rule_takes_the_best_mean_library_hit1_over_both_tracks():
    assert rf.library_key(metrics({"formula": 0.4, "mass": 0.2})) == pytest.approx((0.3, 0.5))
    keys = {"0": rf.library_key(metrics({"formula": 0.30, "mass": 0.30})),
            "8": rf.library_key(metrics({"formula": 0.40, "mass": 0.25})),
            "16": rf.library_key(metrics({"formula": 0.45, "mass": 0.10}))}
    assert max(keys, key=keys.get) == "8"


@pytest.mark.parametrize("chosen, library, expected", [
    ("0", "8", ForwardRanking(weight=8.0, shortlist=10, scope="suspects")),
    ("2", "8", ForwardRanking(weight=2.0, shortlist=10, scope="all")),  # the de novo rule decides when above 0
    ("0", "0", None),
])
def test_install_writes_the_de_novo_rules_weight_else_the_suspect_rules(chosen, library, expected):
    assert rf.chosen_ranking({"shortlist": 10, "chosen": chosen, "chosen_library": library}) == expected


def test_library_only_pools_install_only_the_suspect_rules_weight(tmp_path):
    assert not rf.library_only_pools(tmp_path)  # no run.json: pools of an older run, with de novo candidates
    (tmp_path / "run.json").write_text(json.dumps({"run_key": {"seed": 0}}))
    assert not rf.library_only_pools(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"run_key": {"seed": 0, "library_only": True}}))
    assert rf.library_only_pools(tmp_path)
    result = {"shortlist": 10, "chosen": "2", "chosen_library": "8"}
    assert rf.chosen_ranking(result, library_only=True) == ForwardRanking(weight=8.0, shortlist=10, scope="suspects")
    assert rf.chosen_ranking({**result, "chosen_library": "0"}, library_only=True) is None
    assert rf.chosen_ranking(result, library_only=True, intensity_weight=4.0) == ForwardRanking(
        weight=8.0, shortlist=10, scope="suspects", intensity_weight=4.0)  # the score the run measured


def _mgf_with_folds(path, records):
    blocks = [f"BEGIN IONS\nFOLD={fold}\nLICENSE={lic}\nINCHIKEY={key}-AAAAAAAAAA-N\nPEPMASS=100\n50 1\nEND IONS\n"
              for fold, lic, key in records]
    path.write_text("".join(blocks))
    return path


def test_the_overlap_check_reads_every_members_licences(tmp_path):
    from engine.model.forward import ForwardEnsemble

    a, b = "A" * 14, "B" * 14
    mgf = _mgf_with_folds(tmp_path / "x.mgf", [("train", "CC0", a), ("train", "CC BY-NC", b), ("val", "CC0", "C" * 14)])
    torch.manual_seed(0)
    m = ForwardModel(ForwardConfig(hidden=8, n_bits=32))
    members = []
    for name, lic in (("m0", ["CC0"]), ("m1", ["CC BY-NC"])):
        m.save(tmp_path / name, extra={"metrics": {"config": {"licenses": lic}}})
        members.append(json.loads((tmp_path / name / "config.json").read_text())["training"])
    assert rf.forward_training_overlap(str(tmp_path / "m0"), str(mgf), {a, b, "C" * 14}) == 1
    ForwardEnsemble.of([m, m]).save(tmp_path / "ens", extra={"members": members})
    assert rf.forward_training_overlap(str(tmp_path / "ens"), str(mgf), {a, b, "C" * 14}) == 2
    bundle = tmp_path / "bundle"  # a model bundle: its config.json is the bundle's, the forward model's is forward.json
    m.save(bundle, extra={"fit": members[0], "ranking_chosen_by": "x"}, config_file="forward.json")
    (bundle / "config.json").write_text(json.dumps({"format_version": 1, "name": "a bundle"}))
    assert rf.config_file(bundle) == "forward.json" and rf.config_file(tmp_path / "m0") == "config.json"
    assert rf.forward_training_overlap(str(bundle), str(mgf), {a, b, "C" * 14}) == 1


def test_install_puts_the_model_and_its_ranking_into_a_bundle(tiny_bundle_dir, tmp_path):
    import shutil

    from engine.model.bundle import load_bundle

    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "bundle")
    torch.manual_seed(0)
    ForwardModel(ForwardConfig(hidden=8, n_bits=32)).save(tmp_path / "fit", extra={"metrics": {"auroc": 0.9}})
    model = ForwardModel.load(tmp_path / "fit")
    run = {"forward": str(tmp_path / "fit"), "command": "python -m training.studies.retrieval_forward --install x"}
    message = rf.install(model, {"shortlist": 10, "chosen": "0", "chosen_library": "8"}, str(bundle_dir), run)
    assert "installed" in message
    bundle = load_bundle(bundle_dir, device="cpu", precision="fp32")
    assert bundle.forward.ranking == ForwardRanking(weight=8.0, shortlist=10, scope="suspects")
    saved = json.loads((bundle_dir / "forward.json").read_text())
    assert saved["training"]["fit"] == {"metrics": {"auroc": 0.9}} and "--install" in saved["training"]["ranking_chosen_by"]
    nothing = rf.install(model, {"shortlist": 10, "chosen": "0", "chosen_library": "0"}, str(bundle_dir), run)
    assert nothing.startswith("not installed")


@pytest.mark.parametrize("text, expected", [("0/2", (0, 2)), ("1/2", (1, 2)), ("2/2", None), ("-1/2", None),
                                            ("1", None), ("a/b", None), ("1/2/3", None)])
def test_a_shard_is_i_of_n(text, expected):
    assert rf.parse_shard(text) == expected


def test_a_score_cache_is_kept_to_the_settings_it_was_computed_with(tmp_path):
    from engine.errors import ConfigError

    rf.check_score_settings(tmp_path, {"eps": 0.01, "intensity_weight": 2.0})  # a new folder records them
    rf.check_score_settings(tmp_path, {"eps": 0.01, "intensity_weight": 2.0})
    with pytest.raises(ConfigError, match="computed with .*intensity_weight': 2.0.*use a new --out"):
        rf.check_score_settings(tmp_path, {"eps": 0.01, "intensity_weight": 0.0})
    old = tmp_path / "old"
    old.mkdir()
    (old / "forward_scores.jsonl").write_text("")  # a cache from before the record: the default settings
    with pytest.raises(ConfigError, match="unrecorded settings"):
        rf.check_score_settings(old, {"eps": 0.01, "intensity_weight": 1.0})
    rf.check_score_settings(old, {"eps": 0.01, "intensity_weight": 0.0})
    assert json.loads((old / "score_settings.json").read_text())["intensity_weight"] == 0.0


def test_a_shard_run_refuses_to_install(capsys):
    with pytest.raises(SystemExit) as e:
        rf.main(["--shard", "0/2", "--install", "somewhere"])
    assert e.value.code == 2 and "--shard only computes scores" in capsys.readouterr().err


def _library_pool(fp, fw, key):
    """A library-only pool, truth at row 0, with forward scores in the fragment slot."""
    from training.studies.retrieval import Pool

    n = len(fp)
    return Pool(key, 0, np.asarray(fp, float), np.zeros((n, 0)), np.ones(n, bool),
                {"formula": np.ones(n, bool), "mass": np.ones(n, bool)}, np.zeros(n, np.int64),
                np.asarray(fw, float))


def test_the_suspect_rule_reports_how_sure_its_choice_is():
    # the fingerprint puts a decoy first in both pools; the forward score lifts the truth when weighted enough
    pools = [_library_pool([-2.0, -1.0, -3.0], [0.0, -1.5, -3.0], "a"),
             _library_pool([-2.0, -1.0, -3.0], [0.0, -0.5, -3.0], "b")]
    sets = {"choose": pools, "report": pools}
    res = rf.run_shortlist(10, [0.0, 1.0, 4.0], sets, {"choose": ["[M+H]+"] * 2, "report": ["[M+H]+"] * 2})
    assert res["chosen_library"] == "4"  # both truths first at w = 4, one at w = 1, none at w = 0
    grid = res["grid"]
    assert grid["4"]["choose"]["library_hit1_vs_chosen_ci95"] == [0.0, 0.0]
    assert grid["0"]["choose"]["library_hit1_vs_chosen_ci95"] == [-1.0, -1.0]  # both lost, in every resample
    low, high = grid["1"]["report"]["library_hit1_vs_chosen_ci95"]
    assert -1.0 <= low <= -0.5 <= high <= 0.0  # one of two lost
    assert all(not k.startswith("_") for m in grid.values() for s in m.values() for k in s)  # none in metrics.json
    table = rf.library_table(res)
    assert "| 4 (chosen for suspects) | 100.0 | 100.0 |" in table and "| 0 | 0.0, -100.0 … -100.0 |" in table
