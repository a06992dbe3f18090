"""SpectrumEncoder: shapes, set invariances, config validation, and that it can learn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.chem.formula import ELEMENTS
from engine.errors import ConfigError
from engine.model.encoder import ENCODER_PRESETS, EncoderConfig, SpectrumEncoder
from engine.model.featurize import SpectrumFeatures, collate


def synthetic(n_peaks: int, seed: int, polarity: int = 1) -> SpectrumFeatures:
    """Root formula plus ``n_peaks`` random subformulas of it."""
    rng = np.random.default_rng(seed)
    root = np.zeros(len(ELEMENTS), dtype=np.int64)
    root[:4] = rng.integers(1, 20, size=4)
    peaks = rng.integers(0, root + 1, size=(n_peaks, len(ELEMENTS)))
    return SpectrumFeatures(
        formulas=np.vstack([root, peaks]),
        intensities=np.concatenate([[1.0], rng.random(n_peaks)]).astype(np.float32),
        adduct_retained=(rng.random(n_peaks + 1) < 0.3).astype(np.float32) * (np.arange(n_peaks + 1) > 0),
        polarity=polarity,
        n_peaks=n_peaks,
        n_unannotated=0,
        n_merged=0,
        n_truncated=0,
    )


@pytest.fixture
def model() -> SpectrumEncoder:
    torch.manual_seed(0)
    return SpectrumEncoder(EncoderConfig.from_preset("tiny")).eval()


def test_shapes_and_posterior_range(model):
    batch = collate([synthetic(5, 0), synthetic(9, 1, polarity=-1), synthetic(0, 2)])
    logits = model(batch)
    assert logits.shape == (3, model.config.fp_bits)
    proba = model.predict_proba(batch)
    assert proba.shape == logits.shape and ((proba > 0) & (proba < 1)).all()
    assert torch.allclose(proba, torch.sigmoid(logits))


def test_invariant_to_the_order_of_peaks(model):
    f = synthetic(8, 3)
    perm = np.concatenate([[0], 1 + np.random.default_rng(0).permutation(8)])  # root stays first
    shuffled = SpectrumFeatures(
        formulas=f.formulas[perm],
        intensities=f.intensities[perm],
        adduct_retained=f.adduct_retained[perm],
        polarity=f.polarity,
        n_peaks=8,
        n_unannotated=0,
        n_merged=0,
        n_truncated=0,
    )
    torch.testing.assert_close(model(collate([f])), model(collate([shuffled])), atol=1e-5, rtol=1e-5)


def test_invariant_to_padding_and_batch_neighbours(model):
    f = synthetic(4, 4)
    alone = model(collate([f]))
    padded = model(collate([f], pad_to=model.config.max_peaks + 1))
    in_batch = model(collate([synthetic(12, 5), f]))[1:]
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(alone, in_batch, atol=1e-5, rtol=1e-5)


def test_pairwise_bias_can_be_switched_off():
    torch.manual_seed(0)
    m = SpectrumEncoder(EncoderConfig.from_preset("tiny", pair_hidden=0)).eval()
    assert m.pair_bias is None
    assert m(collate([synthetic(3, 6)])).shape == (1, m.config.fp_bits)


def test_too_many_peaks_is_refused(model):
    with pytest.raises(ConfigError, match="`max_peaks` is 16"):
        model(collate([synthetic(17, 7)]))


def test_a_few_steps_lower_the_loss():
    torch.manual_seed(0)
    m = SpectrumEncoder(EncoderConfig.from_preset("tiny"))
    batch = collate([synthetic(int(n), seed) for seed, n in enumerate([3, 7, 12, 5, 9, 16, 1, 4])])
    target = (torch.rand(8, m.config.fp_bits, generator=torch.Generator().manual_seed(1)) < 0.1).float()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = F.binary_cross_entropy_with_logits(m(batch), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_small_preset_size():
    n = SpectrumEncoder(EncoderConfig.from_preset("small")).num_parameters()
    assert 1_000_000 < n < 4_000_000


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 0}, "`d_model` must be a positive integer"),
        ({"d_model": 30, "n_heads": 4}, r"`d_model` \(30\) must be divisible by `n_heads` \(4\)"),
        ({"dropout": 1.0}, "`dropout` must be in"),
        ({"pair_hidden": -1}, "`pair_hidden`"),
        ({"count_periods": ()}, "`count_periods`"),
        ({"tol_ppm": 0.0, "tol_da": 0.0}, "`tol_ppm` and `tol_da`"),
        ({"fp_bits": 4096.0}, "`fp_bits` must be a positive integer"),
    ],
)
def test_config_validation_names_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        EncoderConfig(**overrides)


def test_config_round_trip_and_unknown_keys():
    cfg = EncoderConfig.from_preset("tiny")
    assert EncoderConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.warns(UserWarning, match="unknown keys.*'future'"):
        assert EncoderConfig.from_dict({**cfg.to_dict(), "future": 1}) == cfg


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ConfigError, match="small, tiny|tiny, small"):
        EncoderConfig.from_preset("huge")
    assert set(ENCODER_PRESETS) == {"small", "tiny"}


def test_growing_head_levels_and_folding():

    config = EncoderConfig.from_preset("tiny", grow_levels=2)  # 128 -> 32, 64, 128 bits
    model = SpectrumEncoder(config)
    batch = {"formulas": torch.randint(0, 4, (3, 5, 14)).float(), "intensities": torch.rand(3, 5),
             "adduct_retained": torch.zeros(3, 5), "mask": torch.ones(3, 5, dtype=torch.bool),
             "polarity": torch.ones(3)}  # fmt: skip
    levels = model(batch, return_levels=True)
    assert [tuple(lv.shape) for lv in levels] == [(3, 32), (3, 64), (3, 128)]
    assert torch.equal(model(batch), levels[-1])
    flat = SpectrumEncoder(EncoderConfig.from_preset("tiny"))
    assert "head.3.weight" in flat.state_dict() and "head.3.weight" not in model.state_dict()  # old bundles load
    with pytest.raises(ConfigError, match="`grow_levels`"):
        EncoderConfig.from_preset("tiny", grow_levels=5)  # 128 / 32 = 4 bits


def test_fold_bits_is_the_shorter_morgan_fingerprint():
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator

    from engine.model.encoder import fold_bits

    mol = Chem.MolFromSmiles("CC(=O)Oc1ccccc1C(=O)O")
    long_fp = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=4096).GetFingerprintAsNumPy(mol)
    short_fp = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=512).GetFingerprintAsNumPy(mol)
    folded = fold_bits(torch.from_numpy(long_fp.astype("float32"))[None], 512)[0]
    assert torch.equal(folded, torch.from_numpy(short_fp.astype("float32")))
