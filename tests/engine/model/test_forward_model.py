"""The forward model as a bundle part and a ranking term (engine.model.forward); its training: tests/training."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import numpy as np
import pytest
import torch

from engine.errors import BundleError, ConfigError
from engine.model import forward as fw
from engine.model.bundle import add_bundle_file, load_bundle
from engine.model.forward import (
    ForwardConfig,
    ForwardEnsemble,
    ForwardModel,
    ForwardRanking,
    ForwardScorer,
    PeakSettings,
    load_forward,
)

PEAKS = PeakSettings(tol_ppm=10.0, tol_da=0.002, min_rdbe=-0.5, max_peaks=60)


def small_model(seed: int = 0, ranking: ForwardRanking = ForwardRanking()) -> ForwardModel:
    torch.manual_seed(seed)
    return ForwardModel(ForwardConfig(hidden=16, n_bits=64), ranking).eval()


def test_forward_score_is_the_bernoulli_log_likelihood_plus_unexplained_peaks():
    q, o = np.array([0.5, 0.25]), np.array([1.0, 0.0])
    expected = math.log(0.5) + math.log(0.75) + 2 * math.log(0.01)  # 3 observed peaks, 1 explained
    assert fw.forward_score(q, o, 3) == pytest.approx(expected)
    assert fw.forward_score(np.array([1.0]), np.array([0.0]), 0) == pytest.approx(math.log(1e-4))  # clipped


def test_save_and_load_rebuild_the_same_model_and_its_ranking(tmp_path):
    model = small_model(ranking=ForwardRanking(weight=2.0, shortlist=7, scope="all", analog_weight=3.0,
                                               analog_hits=4, analog_weight_others=0.5, others_weight=1.5,
                                               others_shortlist=9, analog_weight_de_novo=7.0))
    model.save(tmp_path, extra={"note": "test"}, config_file="forward.json")
    saved = json.loads((tmp_path / "forward.json").read_text())
    assert saved["ranking"] == {"weight": 2.0, "shortlist": 7, "scope": "all", "intensity_weight": 0.0,
                                "analog_weight": 3.0, "analog_hits": 4, "analog_weight_others": 0.5,
                                "others_weight": 1.5, "others_shortlist": 9, "analog_weight_de_novo": 7.0}
    assert saved["training"]["note"] == "test"
    back = ForwardModel.load(tmp_path, config_file="forward.json")
    assert back.ranking == model.ranking and back.config == model.config
    x = torch.randn(3, 64 + fw.N_SCALARS)
    assert torch.equal(back(x)[0], model(x)[0])


def test_load_says_what_is_wrong_and_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="no config.json.*training.encoder.forward fit"):
        ForwardModel.load(tmp_path)
    small_model().save(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, "hidden": 32}))
    with pytest.raises(ConfigError, match="forward.safetensors does not hold the weights"):
        ForwardModel.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**data, "format_version": 99}))
    with pytest.raises(ConfigError, match="format 99"):
        ForwardModel.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**data, "ranking": {"weight": -1}}))
    with pytest.raises(ConfigError, match="weight"):
        ForwardModel.load(tmp_path)


def _toy_candidates(k: int = 5, n_bits: int = 64) -> fw.Candidates:
    rng = np.random.default_rng(0)
    bits = [np.sort(rng.choice(n_bits, 6, replace=False)).astype(np.int64) for _ in range(k)]
    return fw.Candidates(np.zeros((k, 14), np.int64), rng.normal(size=(k, fw.N_SCALARS)).astype(np.float32), bits,
                         True)


def test_an_ensemble_averages_its_members_peak_probabilities_and_reloads(tmp_path):
    members = [small_model(seed) for seed in (0, 1, 2)]
    ens = ForwardEnsemble.of(members, ForwardRanking(weight=4.0, shortlist=10))
    cand = _toy_candidates()
    q = ens.predict(cand)[0]
    by_member = np.stack([m.predict(cand)[0] for m in members])
    np.testing.assert_allclose(q, by_member.mean(0), rtol=1e-6)
    assert not np.allclose(by_member[0], by_member[1])  # the members differ, so the average is not one of them
    ens.save(tmp_path, extra={"members": ["a", "b", "c"]}, config_file="forward.json")
    saved = json.loads((tmp_path / "forward.json").read_text())
    assert saved["members"] == 3 and saved["hidden"] == 16 and saved["ranking"]["weight"] == 4.0
    back = load_forward(tmp_path, config_file="forward.json")
    assert isinstance(back, ForwardEnsemble) and back.ranking == ens.ranking and len(back.members) == 3
    np.testing.assert_array_equal(back.predict(cand)[0], q)
    single = tmp_path / "single"
    members[0].save(single)
    assert type(load_forward(single)) is ForwardModel  # a config without `members` is one model, as before
    with pytest.raises(ConfigError, match="ensemble of 3 forward models, not one"):
        ForwardModel.load(tmp_path, config_file="forward.json")


def test_an_ensemble_needs_two_members_of_one_architecture():
    with pytest.raises(ConfigError, match="one architecture"):
        ForwardEnsemble.of([small_model(), ForwardModel(ForwardConfig(hidden=8, n_bits=64))])
    with pytest.raises(ConfigError, match="integer >= 2 of members"):
        ForwardEnsemble(ForwardConfig(hidden=8, n_bits=64), 1)


@pytest.mark.parametrize("kwargs", [{"weight": -0.5}, {"shortlist": 0}, {"scope": "library"}, {"weight": "1"},
                                    {"intensity_weight": -1.0}, {"intensity_weight": float("inf")},
                                    {"intensity_weight": True}, {"analog_weight": -1.0},
                                    {"analog_weight": float("nan")}, {"analog_hits": 0}, {"analog_hits": 2.5},
                                    {"analog_weight_others": -1.0}])
def test_bad_ranking_settings_are_refused(kwargs):
    with pytest.raises(ConfigError):
        ForwardRanking(**kwargs)


def test_the_scorer_reads_the_spectrum_under_each_structures_formula(make_spectrum):
    model = small_model()
    scorer = ForwardScorer(model, make_spectrum(), PEAKS)
    mellein = "CC1CC2=C(C(=O)O1)C(O)=CC=C2"  # C10H10O3, the spectrum's formula
    value = scorer.score(mellein)
    assert value is not None and math.isfinite(value) and value < 0
    assert scorer.observed("C10H10O3")  # its peaks annotate under the formula
    assert scorer.score("not a smiles") is None
    assert scorer.score(mellein) == value  # cached, and deterministic


def test_a_structure_that_explains_the_peaks_scores_higher(make_spectrum):
    # with every candidate equally likely (q = 0.5), the score counts what the structure's fragments leave
    # unexplained: mellein's losses (H2O, CO + H2O, ...) explain peaks an isomer's need not
    model = small_model()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    scorer = ForwardScorer(model, make_spectrum(), PEAKS)
    observed = scorer.observed("C10H10O3")
    assert observed
    mellein = scorer.score("CC1CC2=C(C(=O)O1)C(O)=CC=C2")
    cand = fw.candidates(fw_mol("CC1CC2=C(C(=O)O1)C(O)=CC=C2"), 1)
    hits = sum(f.tobytes() in observed for f in cand.formulas)
    assert mellein == pytest.approx(len(cand) * math.log(0.5) + (len(observed) - hits) * math.log(0.01))


def test_an_intensity_weight_counts_intense_peaks_more(make_spectrum):
    model = small_model()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # q = 0.5 for every candidate: the score is the weighted count of explained and missed peaks
    smiles = "CC1CC2=C(C(=O)O1)C(O)=CC=C2"
    plain = ForwardScorer(model, make_spectrum(), PEAKS)
    weighted = ForwardScorer(model, make_spectrum(), PEAKS, intensity_weight=2.0)
    observed = weighted.observed("C10H10O3")
    assert all(0 < r <= 1 for r in observed.values()) and max(observed.values()) == pytest.approx(1.0)
    keys = {f.tobytes() for f in fw.candidates(fw_mol(smiles), 1).formulas}
    hit = sum(1 + 2.0 * r for k, r in observed.items() if k in keys)
    missed = sum(1 + 2.0 * r for k, r in observed.items() if k not in keys)
    n_hits = sum(k in keys for k in observed)
    expected = (hit + len(keys) - n_hits) * math.log(0.5) + missed * math.log(0.01)
    assert weighted.score(smiles) == pytest.approx(expected)
    assert ForwardScorer(model, make_spectrum(), PEAKS, intensity_weight=0.0).score(smiles) == plain.score(smiles)
    assert weighted.score(smiles) < plain.score(smiles)  # every weight is >= 1, and every term is <= 0
    with pytest.raises(ConfigError, match="intensity_weight"):
        ForwardScorer(model, make_spectrum(), PEAKS, intensity_weight=-1.0)


def fw_mol(smiles: str):
    from engine.chem import molecules as chem

    return chem.remove_stereo(chem.mol_from_smiles(smiles))


def test_a_bundle_loads_its_forward_model_checked_by_checksum(tiny_bundle_dir, tmp_path):
    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "bundle")
    small_model(ranking=ForwardRanking(weight=1.0)).save(tmp_path / "fw", config_file="forward.json")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.safetensors")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.json")
    bundle = load_bundle(bundle_dir, device="cpu", precision="fp32")
    assert bundle.forward is not None and bundle.forward.ranking.weight == 1.0
    (bundle_dir / "forward.json").write_text((bundle_dir / "forward.json").read_text() + " ")
    with pytest.raises(BundleError, match="forward.json .*checksum"):
        load_bundle(bundle_dir, device="cpu", precision="fp32")


def test_a_bundle_loads_an_ensemble_and_scores_with_it(tiny_bundle_dir, tmp_path, make_spectrum):
    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "bundle")
    ens = ForwardEnsemble.of([small_model(0), small_model(1)], ForwardRanking(weight=2.0))
    ens.save(tmp_path / "fw", config_file="forward.json")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.safetensors")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.json")
    bundle = load_bundle(bundle_dir, device="cpu", precision="fp32")
    assert isinstance(bundle.forward, ForwardEnsemble) and bundle.forward.ranking.weight == 2.0
    value = ForwardScorer(bundle.forward, make_spectrum(), PEAKS).score("CC1CC2=C(C(=O)O1)C(O)=CC=C2")
    assert value is not None and math.isfinite(value) and value < 0


def test_a_bundle_scores_with_the_intensity_weight_its_ranking_records(tiny_bundle_dir, tmp_path, make_spectrum):
    from engine.elucidation.pipeline import fragment_rerank

    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "bundle")
    ranking = ForwardRanking(weight=4.0, shortlist=10, intensity_weight=4.0)
    small_model(ranking=ranking).save(tmp_path / "fw", config_file="forward.json")
    assert json.loads((tmp_path / "fw" / "forward.json").read_text())["ranking"]["intensity_weight"] == 4.0
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.safetensors")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.json")
    bundle = load_bundle(bundle_dir, device="cpu", precision="fp32")
    assert bundle.forward.ranking == ranking
    spectrum, mellein = make_spectrum(), "CC1CC2=C(C(=O)O1)C(O)=CC=C2"
    term = fragment_rerank(bundle, spectrum)
    weighted = ForwardScorer(bundle.forward, spectrum, PEAKS, intensity_weight=4.0).score(mellein)
    plain = ForwardScorer(bundle.forward, spectrum, PEAKS).score(mellein)
    assert term.scorer(mellein) == pytest.approx(weighted) and weighted != pytest.approx(plain)
    assert ForwardRanking.from_dict({"weight": 8.0}).intensity_weight == 0.0  # files from before it: counts once


def test_without_a_forward_model_a_bundle_ranks_as_before(tiny_bundle):
    assert tiny_bundle.forward is None


def bundle_ranking_with(tiny_bundle_dir, tmp_path, ranking: ForwardRanking):
    """A copy of the tiny bundle with a small forward model that ranks by ``ranking``."""
    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "bundle")
    small_model(ranking=ranking).save(tmp_path / "fw", config_file="forward.json")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.safetensors")
    add_bundle_file(bundle_dir, tmp_path / "fw" / "forward.json")
    return load_bundle(bundle_dir, device="cpu", precision="fp32")


def run_with_live_rankings(session, params) -> tuple[tuple, list]:
    """The final candidates of ``session.run(params)`` and the partial results shown while it drew."""
    from engine.elucidation.pipeline import RankingUpdated

    events = session.run(params)
    partial = []
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value.candidates, partial
        if isinstance(event, RankingUpdated) and event.result.partial:
            partial.append(event.result)


def test_a_run_ranks_suspects_with_the_fragment_score_the_bundle_chose(tiny_bundle_dir, tmp_path, monkeypatch):
    from tiny_bundle import fixture_spectra

    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.library import load_library
    from engine.progress import run_to_end

    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    bundle = bundle_ranking_with(tiny_bundle_dir, tmp_path, ForwardRanking(weight=1.0, shortlist=5, scope="suspects"))
    spectrum = fixture_spectra()[0]  # C14H28N2O6; its structure and an isomer are the suspects
    path = tmp_path / "suspects.csv"
    path.write_text("Identifier,SMILES\nS1,O=C(CCCCC(=O)N(CCO)CCO)N(CCO)CCO\nS2,O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO\n")
    suspects = load_library(path)
    suspects.suspect = True
    session = SpectrumSession(bundle, spectrum, libraries=[suspects])
    params = QueryParams(groups=2, samples_per_group=2, seed=0)
    ranked, partial = run_with_live_rankings(session, params)
    assert partial and all(math.isnan(c.fragment_score) for r in partial for c in r.candidates)  # final only
    scored = [c for c in ranked if c.suspect]
    assert len(scored) == 2 and all(math.isfinite(c.fragment_score) for c in scored)
    assert all(math.isnan(c.fragment_score) for c in ranked if not c.suspect)  # predictions: out of its scope
    for c in scored:
        assert c.score == pytest.approx(c.fingerprint_score + c.fragment_score)
    assert [c.score for c in scored] == sorted((c.score for c in scored), reverse=True)
    off = run_to_end(session.run(dataclasses.replace(params, fragment_score=False))).candidates
    assert all(math.isnan(c.fragment_score) for c in off)


def test_a_run_orders_suspects_by_their_likeness_to_the_spectrums_analogs(tiny_bundle_dir, tmp_path, monkeypatch):
    from tiny_bundle import fixture_spectra

    from engine.chem import molecules as chem
    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.library import load_library
    from engine.spectral_library import ReferenceSpectrum, library_from_references

    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    ranking = ForwardRanking(weight=1.0, shortlist=5, scope="suspects", analog_weight=100.0, analog_hits=3)
    bundle = bundle_ranking_with(tiny_bundle_dir, tmp_path, ranking)
    spectrum = fixture_spectra()[0]
    s1, s2 = "O=C(CCCCC(=O)N(CCO)CCO)N(CCO)CCO", "O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO"
    path = tmp_path / "suspects.csv"
    path.write_text(f"Identifier,SMILES\nS1,{s1}\nS2,{s2}\n")
    suspects = load_library(path)
    suspects.suspect = True
    # an analog: the query's fragments at another precursor (so no identity hit), measured of S2's structure
    analog = ReferenceSpectrum(0, 1, spectrum.precursor_mz + 50.0, 1, np.asarray(spectrum.mz, dtype=np.float64),
                               np.asarray(spectrum.intensity, dtype=np.float64), accession="REF1",
                               name="the analog", adduct="[M+H]+", polarity="positive", smiles=s2)
    spectral = library_from_references([analog], "refs")
    params = QueryParams(groups=2, samples_per_group=2, seed=0)
    ranked = SpectrumSession(bundle, spectrum, libraries=[suspects, spectral]).rank_known(params).candidates
    scored = {c.library_id: c for c in ranked if c.suspect}
    assert len(scored) == 2 and all(0 < c.analog_score <= 1 for c in scored.values())
    assert all(c.analog_reference == "REF1 the analog" for c in scored.values())
    bits = [chem.morgan_bits_from_smiles(s) for s in (s1, s2)]
    similarity = scored["S2"].analog_score  # Tanimoto 1 to the analog's own structure
    assert scored["S1"].analog_score == pytest.approx(similarity * chem.tanimoto(*bits))
    for c in scored.values():
        assert c.score == pytest.approx(c.fingerprint_score + c.fragment_score + 100.0 * c.analog_score)
    assert all(math.isnan(c.analog_score) for c in ranked if not c.suspect)  # predictions: out of its scope
    session = SpectrumSession(bundle, spectrum, libraries=[suspects, spectral])
    off = session.rank_known(dataclasses.replace(params, analog_score=False)).candidates
    assert all(math.isnan(c.analog_score) for c in off)
    alone = SpectrumSession(bundle, spectrum, libraries=[suspects]).rank_known(params).candidates  # no spectra
    assert all(math.isnan(c.analog_score) for c in alone)


def test_the_predictions_take_the_analog_score_at_the_others_weight(tiny_bundle_dir, tmp_path, monkeypatch):
    from tiny_bundle import fixture_spectra

    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.progress import run_to_end
    from engine.spectral_library import ReferenceSpectrum, library_from_references

    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    ranking = ForwardRanking(weight=1.0, shortlist=5, scope="suspects", analog_weight=100.0, analog_hits=3,
                             analog_weight_others=50.0)
    bundle = bundle_ranking_with(tiny_bundle_dir, tmp_path, ranking)
    spectrum = fixture_spectra()[0]
    analog = ReferenceSpectrum(0, 1, spectrum.precursor_mz + 50.0, 1, np.asarray(spectrum.mz, dtype=np.float64),
                               np.asarray(spectrum.intensity, dtype=np.float64), accession="REF1",
                               adduct="[M+H]+", polarity="positive", smiles=spectrum.smiles)
    spectral = library_from_references([analog], "refs")
    params = QueryParams(groups=2, samples_per_group=2, seed=0)
    session = SpectrumSession(bundle, spectrum, libraries=[spectral])  # no structure library at all
    ranked, partial = run_with_live_rankings(session, params)
    assert ranked and all(0 <= c.analog_score <= 1 and c.analog_reference == "REF1" for c in ranked)
    for c in ranked:
        assert c.score == pytest.approx(c.fingerprint_score + 50.0 * c.analog_score)
    assert partial and all(math.isfinite(c.analog_score) for r in partial for c in r.candidates)  # live too
    off = SpectrumSession(bundle, spectrum, libraries=[spectral]).run(dataclasses.replace(params, analog_score=False))
    assert all(math.isnan(c.analog_score) for c in run_to_end(off).candidates)
