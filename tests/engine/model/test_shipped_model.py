"""The shipped model (resources/default_model) run by a test (issue #61, item 1).

No accuracy claim: what holds for any sound model. It loads and its checksum is the one its model card names;
its encoder gives a posterior of the fingerprint's shape with values in [0, 1] and a calibration that reads it;
on two bundled example spectra (resources/examples) a small pool (M=2 groups of N=4) holds valid molecules,
and every de novo candidate kept has the spectrum's formula (worked out here with RDKit, not by the engine).
The app's run on it, with the bundled libraries, is tests/gui/test_gui_shipped_model.py. Seconds on one thread.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem.rdMolDescriptors import CalcMolFormula

from engine.chem import molecules as chem
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.model.bundle import load_bundle, sha256_file
from engine.paths import default_model_dir, examples_dir
from engine.progress import run_to_end
from engine.spectra.io import read_spectra

MODEL = default_model_dir()
EXAMPLES = examples_dir() / "massbank_examples.mgf"
# one of each ion type the model was trained on in positive mode; a small ring-rich one and a sulfonamide
EXAMPLE_IDS = ("MSBNK-AAFC-AC000058", "MSBNK-Env_Anal_Chem_U_Tuebingen-TUE00653")


@pytest.fixture(scope="module")
def shipped():
    return load_bundle(MODEL, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def examples():
    spectra, _ = read_spectra(EXAMPLES)
    by_id = {s.id: s for s in spectra}
    return [by_id[i] for i in EXAMPLE_IDS]


def test_the_shipped_model_loads_as_its_card_and_config_say(shipped):
    config = json.loads((MODEL / "config.json").read_text())
    for name, digest in config["files"].items():  # every recorded file is there and unchanged
        assert sha256_file(MODEL / name) == digest, name
    named = re.search(r"bundle checksum `([0-9a-f]{16})`", (MODEL / "MODEL_CARD.md").read_text())
    assert named and shipped.checksum.startswith(named.group(1))  # the card describes these very files
    assert shipped.name == config["name"] and shipped.device.type == "cpu"
    assert {"[M+H]+", "[M+Na]+"} <= set(shipped.supported_adducts)


def test_its_encoder_gives_a_calibrated_posterior(shipped, examples):
    calibration = shipped.calibration
    t, active = np.asarray(calibration.thresholds), np.asarray(calibration.active_counts)
    assert t.size >= 2 and np.all(np.diff(t) > 0) and 0 <= t[0] and t[-1] <= 1
    assert np.all(np.diff(active) <= 1e-9) and calibration.d_enc > 0 and calibration.n_spectra > 0
    for spectrum in examples:
        posterior = SpectrumSession(shipped, spectrum).posterior
        assert posterior.shape == (chem.N_BITS,) == (4096,)
        assert np.all(np.isfinite(posterior)) and posterior.min() >= 0 and posterior.max() <= 1
        assert posterior.std() > 0  # not a constant: the spectrum reaches it


def test_it_samples_valid_molecules_of_the_given_formula(shipped, examples):
    for spectrum in examples:
        result = run_to_end(SpectrumSession(shipped, spectrum).run(QueryParams(groups=2, samples_per_group=4,
                                                                                 seed=0)))
        assert result.n_samples == 8 and 0 <= result.n_formula_consistent <= result.n_samples
        assert result.candidates, spectrum.id
        for c in result.candidates:
            mol = Chem.MolFromSmiles(c.smiles)
            assert mol is not None, (spectrum.id, c.smiles)  # a valid molecule
            assert CalcMolFormula(mol) == c.formula == spectrum.formula, (spectrum.id, c.smiles)
        assert sum(c.count for c in result.candidates) <= result.n_samples
