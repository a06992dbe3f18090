"""The encoder recipe ablation's variant configs and table (training itself: tests/test_train_encoder.py)."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from training.studies.encoder_ablation import BASE, VARIANTS, format_table, variant_config


def test_variants_change_only_what_they_name(tmp_path):
    base = variant_config("baseline", "x.mgf", tmp_path).to_dict()
    for name, (_, overrides) in VARIANTS.items():
        config = variant_config(name, "x.mgf", tmp_path).to_dict()
        changed = {k for k in config if config[k] != base[k]} - {"out_dir"}
        assert changed == set(overrides), name
        assert config["encoder"]["dropout"] == BASE["encoder"]["dropout"]  # encoder overrides merge
    assert variant_config("grow", "x.mgf", tmp_path).encoder_config().grow_levels == 4
    custom = variant_config("mine", "x.mgf", tmp_path, extra={"ema_decay": 0.99})
    assert custom.ema_decay == 0.99 and custom.out_dir == str(tmp_path / "mine")
    with pytest.raises(ConfigError, match="Unknown variant 'nope'"):
        variant_config("nope", "x.mgf", tmp_path)


def test_table_shows_the_change_against_baseline():
    row = dict(low=0.7, tanimoto_k1=0.3, ap_micro=0.45, ap_macro=0.12, parameters=3_291_712, spectra_per_s=500.0,
               train_minutes=17.0)  # fmt: skip
    table = format_table({"baseline": {**row, "fidelity": 0.312}, "ema": {**row, "fidelity": 0.334}})
    assert "| ema |" in table and "0.334 (+0.022)" in table and "| 70% |" in table


def test_an_ensemble_of_one_encoder_scores_as_that_encoder(tmp_path):
    from dataclasses import replace

    from labelled_spectra import tiny_config, write_labelled_mgf

    from training.studies.encoder_ablation import SCORED_ADDUCTS, run_variant, score_ensemble, score_variant
    from training.data.spectra import load_labelled_spectra

    mgf = write_labelled_mgf(tmp_path / "labelled.mgf")
    folders = []
    for seed in (0, 1):
        config = tiny_config(mgf, tmp_path / f"enc{seed}", max_steps=3, seed=seed)
        for _ in run_variant(config):  # trains, then calibrates on its own training spectra
            pass
        folders.append(tmp_path / f"enc{seed}")
    data = load_labelled_spectra(mgf, replace(config.feature_settings(), adducts=SCORED_ADDUCTS),
                                 cache_dir=tmp_path / "cache")  # fmt: skip
    val = data.select(("val",))
    one, alone = score_ensemble(folders[:1], data, val), score_variant(folders[0], val)
    for key in ("fidelity", "low", "tanimoto_k1", "ap_micro", "ap_macro", "t_kappa1", "val_spectra"):
        assert one[key] == pytest.approx(alone[key], abs=1e-6), key
    two = score_ensemble(folders, data, val)
    assert two["parameters"] == 2 * one["parameters"] and two["members"] == [str(f) for f in folders]
    assert two["ap_micro"] != one["ap_micro"]  # another seed's posterior is averaged in


def test_ensemble_arguments_name_the_fix(tmp_path):
    from training.studies.encoder_ablation import parse_ensembles

    with pytest.raises(ConfigError, match="NAME=DIR"):
        parse_ensembles(["runs/a,runs/b"])
    with pytest.raises(ConfigError, match="holds no finished encoder"):
        parse_ensembles([f"five={tmp_path / 'missing'}"])
