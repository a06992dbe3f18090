"""The optional files shipped with the default model (bit legend, known structures): they read, describe
the model's fingerprint and match the checksums config.json records. Skipped where a file is absent."""

import json

import pytest

from engine.chem import molecules as chem
from engine.model.bitlegend import FILE_NAME as LEGEND
from engine.model.bitlegend import BitLegend
from engine.model.bundle import sha256_file
from engine.model.known import FILE_NAME as KNOWN
from engine.model.known import KnownStructures
from engine.paths import default_model_dir

MODEL = default_model_dir()


def needs(name):
    return pytest.mark.skipif(not (MODEL / name).is_file(), reason=f"the default model ships no {name}")


def recorded(name):
    return json.loads((MODEL / "config.json").read_text())["files"].get(name)


@needs(LEGEND)
def test_the_shipped_legend_describes_every_bit_of_the_models_fingerprint():
    legend = BitLegend.load(MODEL / LEGEND)
    assert legend.n_bits == chem.N_BITS and legend.radius == chem.RADIUS and legend.n_molecules >= 10_000
    assert len(legend) == chem.N_BITS and all(1 <= len(legend.environments(b)) <= 3 for b in range(chem.N_BITS))
    assert recorded(LEGEND) == sha256_file(MODEL / LEGEND)
    assert (MODEL / LEGEND).stat().st_size < 500_000
    hydroxyl = chem.morgan_bits(chem.mol_from_smiles("CCO"))  # the O-H atom environment is among ethanol's bits
    assert any(e.smiles == "[OH]" for b in hydroxyl for e in legend.environments(b))


@needs(KNOWN)
def test_the_shipped_known_structures_hold_the_training_corpus():
    known = KnownStructures.load(MODEL / KNOWN)
    assert len(known) > 100_000 and known.source
    assert recorded(KNOWN) == sha256_file(MODEL / KNOWN)


@needs("forward.json")
def test_the_shipped_forward_model_is_checked_trained_on_shippable_spectra_and_has_a_measured_ranking():
    from engine.model.forward import ForwardModel

    forward = ForwardModel.load(MODEL, config_file="forward.json")
    for name in ("forward.json", "forward.safetensors"):
        assert recorded(name) == sha256_file(MODEL / name)
    assert forward.ranking.weight > 0 and forward.ranking.shortlist >= 1
    saved = json.loads((MODEL / "forward.json").read_text())
    fit = saved["training"]["fit"]["metrics"]["config"]
    assert set(fit["licenses"]) <= {"CC0", "CC BY", "CC BY-SA", "dl-de/by-2-0"}  # redistributable spectra only
    assert "training.retrieval_forward" in saved["training"]["ranking_chosen_by"]
    assert (MODEL / "forward.safetensors").stat().st_size < 2_000_000
