"""The analog-posterior study (issue #59, item 1): the analogs' weighted fingerprint leaves the truth out, and the
blend is π at w = 0."""

from types import SimpleNamespace

import numpy as np

from engine.chem import molecules as chem
from training.studies.analog_posterior import analog_fingerprint, blend, table


def _hit(smiles, similarity):
    return SimpleNamespace(similarity=similarity, reference=SimpleNamespace(smiles=smiles, inchikey14=""))


def test_the_analog_fingerprint_is_the_similarity_weighted_mean_without_the_truth():
    phenol, toluene, truth = "Oc1ccccc1", "Cc1ccccc1", "CCO"
    matches = SimpleNamespace(hits=[_hit(truth, 0.9), _hit(phenol, 0.6), _hit(toluene, 0.2), _hit("", 0.5)])
    got = analog_fingerprint(matches, chem.inchikey14(truth), hits=30, n_bits=chem.N_BITS)
    want = np.zeros(chem.N_BITS)
    want[chem.morgan_bits_from_smiles(phenol)] += 0.6
    want[chem.morgan_bits_from_smiles(toluene)] += 0.2
    assert np.allclose(got, want / 0.8)
    only_first = analog_fingerprint(matches, chem.inchikey14(truth), hits=1, n_bits=chem.N_BITS)
    assert np.array_equal(only_first > 0, np.isin(np.arange(chem.N_BITS), chem.morgan_bits_from_smiles(phenol)))
    assert analog_fingerprint(None, None, 30, chem.N_BITS) is None


def test_blend_and_table():
    pi = np.full(4, 0.5, dtype=np.float32)
    assert blend(pi, None, 0.3) is pi and blend(pi, np.ones(4), 0.0) is pi
    assert np.allclose(blend(pi, np.array([1.0, 0, 0, 1]), 0.2), [0.6, 0.4, 0.4, 0.6])
    rows = [{"spectrum": "a", "w": 0.0, "rank": 1, "seconds": 1.0},
            {"spectrum": "a", "w": 0.2, "rank": None, "seconds": 2.0},
            {"spectrum": "b", "w": 0.0, "rank": 12, "seconds": 1.0}]
    text = table(rows, [0.0, 0.2])
    assert text.startswith("1 spectra") and "| 0 | 1 | 1 | 1 | 1.00 |" in text and "| 0.2 | 0 | 0 | 0 | 2.00 |" in text
