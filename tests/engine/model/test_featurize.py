"""Encoder input: tokens from annotated peaks, and batching with padding masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.chem.formula import ELEMENTS, formula_vector, parse_formula
from engine.errors import ConfigError
from engine.model.encoder import EncoderConfig
from engine.model.featurize import collate, featurize, featurize_spectrum
from engine.spectra.spectrum import Spectrum

MELLEIN_MZ = np.array([133.0648, 155.9743, 161.0597, 179.0703])  # 155.9743 has no subformula
MELLEIN_INT = np.array([20.0, 5.0, 40.0, 100.0])


def vec(formula: str) -> np.ndarray:
    return formula_vector(parse_formula(formula))


def test_root_then_annotated_peaks_by_mz():
    f = featurize(MELLEIN_MZ, MELLEIN_INT, "C10H10O3", "[M+H]+")
    assert f.formulas.shape == (4, len(ELEMENTS))
    expected = [vec("C10H10O3"), vec("C9H8O"), vec("C10H8O2"), vec("C10H10O3")]
    np.testing.assert_array_equal(f.formulas, np.stack(expected))
    np.testing.assert_allclose(f.intensities, [1.0, np.sqrt(0.2), np.sqrt(0.4), 1.0], rtol=1e-6)
    assert f.intensities.dtype == np.float32
    assert (f.polarity, f.n_peaks, f.n_unannotated, f.n_merged, f.n_truncated) == (1, 4, 1, 0, 0)
    assert not f.adduct_retained.any()


def test_max_peaks_keeps_the_most_intense():
    f = featurize(MELLEIN_MZ, MELLEIN_INT, "C10H10O3", "[M+H]+", max_peaks=2)
    np.testing.assert_array_equal(f.formulas[1:], np.stack([vec("C10H8O2"), vec("C10H10O3")]))
    assert f.n_truncated == 1
    np.testing.assert_allclose(f.intensities[1:], [np.sqrt(0.4), 1.0], rtol=1e-6)


def test_split_centroids_of_one_ion_are_merged():
    f = featurize([133.0647, 133.0649, 179.0703], [30.0, 10.0, 40.0], "C10H10O3", "[M+H]+")
    assert f.n_merged == 1 and f.n_tokens == 3
    np.testing.assert_allclose(f.intensities[1:], [1.0, 1.0])  # 30 + 10 = 40 = base


def test_sodium_adduct_tokens_flag_the_retained_adduct():
    f = featurize([133.0648, 183.0416, 201.0522], [1.0, 1.0, 1.0], "C10H10O3", "[M+Na]+")
    assert f.adduct_retained.tolist() == [0.0, 0.0, 1.0, 1.0]


def test_negative_mode_polarity():
    assert featurize([133.0659], [1.0], "C10H10O3", "[M-H]-").polarity == -1


def test_no_annotated_peak_leaves_the_root_alone():
    f = featurize([155.9743], [1.0], "C10H10O3", "[M+H]+")
    assert f.n_tokens == 1 and f.n_unannotated == 1


def test_bad_max_peaks_names_the_field():
    with pytest.raises(ConfigError, match="`max_peaks`"):
        featurize(MELLEIN_MZ, MELLEIN_INT, "C10H10O3", "[M+H]+", max_peaks=0)


def test_featurize_spectrum_follows_the_encoder_config():
    peaks = dict(mz=MELLEIN_MZ, intensity=MELLEIN_INT)
    s = Spectrum(id="AC000001", precursor_mz=179.0697, adduct="[M+H]+", formula="C10H10O3", **peaks)
    assert featurize_spectrum(s).n_tokens == 4
    assert featurize_spectrum(s, EncoderConfig(max_peaks=1)).n_tokens == 2
    # At 0.05 ppm only 161.0597 (0.04 ppm off) is annotated.
    assert featurize_spectrum(s, EncoderConfig(tol_ppm=0.05, tol_da=0.0)).n_tokens == 2


def test_collate_pads_and_masks():
    a = featurize(MELLEIN_MZ, MELLEIN_INT, "C10H10O3", "[M+H]+")  # 4 tokens
    b = featurize([133.0659], [1.0], "C10H10O3", "[M-H]-")  # 2 tokens
    batch = collate([a, b])
    assert batch["formulas"].shape == (2, 4, len(ELEMENTS)) and batch["formulas"].dtype == torch.float32
    assert batch["mask"].tolist() == [[True] * 4, [True, True, False, False]]
    assert batch["polarity"].tolist() == [1.0, -1.0]
    assert (batch["formulas"][1, 2:] == 0).all() and (batch["intensities"][1, 2:] == 0).all()
    assert collate([a, b], pad_to=7)["mask"].shape == (2, 7)
    with pytest.raises(ConfigError, match="`pad_to`=3"):
        collate([a, b], pad_to=3)
    with pytest.raises(ConfigError, match="`features` is empty"):
        collate([])
