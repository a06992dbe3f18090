"""The encoder recipe ablation's variant configs and table (training itself: tests/test_train_encoder.py)."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from training.encoder_ablation import BASE, VARIANTS, format_table, variant_config


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
