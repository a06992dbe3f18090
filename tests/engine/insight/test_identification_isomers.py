"""Isomer-aware identification levels (engine/insight/identification.py): a reference spectrum of the rank-1 structure
identifies it at level 2a, with its calibrated confidence, unless a reference of an isomer matches nearly as well;
then the level is 3 and the isomer is named, in the level's text and the CSV's and SDF's ``identification_note``."""

from __future__ import annotations

import csv
import importlib

import numpy as np
import pytest
from rdkit import Chem
from tiny_bundle import FIXTURE, fixture_spectra

from engine.chem import molecules as chem
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.files.export import CandidateWriter
from engine.insight.identification import identification_level
from engine.model.confidence import ConfidenceModel, identification_confidence
from engine.progress import run_to_end
from engine.spectral_library import load_spectral_library
from engine.spectral_library.identity import IDENTITY_FEATURES
from engine.spectral_library.search import AnswerThreshold

SEARCH = importlib.import_module("engine.spectral_library.search")

REFERENCE = "O=C(CCCCC(=O)N(CCO)CCO)N(CCO)CCO"  # the first fixture spectrum's structure, C14H28N2O6
ISOMER = "O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO"  # the same formula, one CH2 moved
PARAMS = QueryParams(groups=2, samples_per_group=2, seed=0)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.fixture
def identity_model(tmp_path, monkeypatch):
    """A confidence of identifications written by the test (kept off 0 and 1), in place of the shipped one."""
    n = len(IDENTITY_FEATURES)
    model = ConfidenceModel(tuple([0.5] * n), 0.2, tuple([0.0] * n), tuple([4.0] * n), IDENTITY_FEATURES)
    path = model.save(tmp_path / "identity.json")
    monkeypatch.setattr("engine.model.confidence.confidence_path", lambda: path)
    return model


def references(path, structures, scale=None):
    """The first fixture record once per structure (``structures``: (title, smiles)); ``scale``: intensities of the
    second record multiplied by these (a nearly equal spectrum)."""
    block = FIXTURE.read_text().split("END IONS")[0]
    head = [line for line in block.splitlines() if not line.startswith(("SMILES=", "INCHIKEY=", "ADDUCT=", "TITLE="))
            and not line[:1].isdigit()]
    peaks = [line for line in block.splitlines() if line[:1].isdigit()]
    out = []
    for k, (title, smiles) in enumerate(structures):
        lines = list(head)
        lines.insert(lines.index("BEGIN IONS") + 1, f"TITLE={title}\nSMILES={smiles}\nADDUCT=[M+H]+")
        rows = peaks
        if k and scale is not None:
            rows = [f"{p.split()[0]} {float(p.split()[1]) * s:g}" for p, s in zip(peaks, scale)]
        out.append("\n".join(lines + rows) + "\nEND IONS\n")
    path.write_text("\n".join(out))
    return path


def run(bundle, spectrum, libraries):
    return run_to_end(SpectrumSession(bundle, spectrum, libraries=libraries).run(PARAMS))


def rows_of(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def test_an_isomer_matching_as_well_withholds_level_2a_and_is_named(tiny_bundle, home, identity_model, monkeypatch):
    """Under the similarity threshold alone (the rule before, patched in) an isomer pair is identified, and the
    isomer withholds 2a; under the shipped calibrated rule it is not identified, and the level still names it."""
    spectrum = fixture_spectra()[0]
    monkeypatch.setattr(SEARCH, "default_threshold", lambda: AnswerThreshold(0.675, 3))
    alone = load_spectral_library(references(home / "one.mgf", [("MSBNK-A-000001", REFERENCE)]))
    result = run(tiny_bundle, spectrum, [alone])
    assert result.candidates[0].identified
    level = identification_level([result])
    assert level.code == "2a" and not level.isomers and "isomer" not in level.text
    # the identified rank 1 gets the identification's calibrated confidence (the model above, by its features)
    assert result.confidence == pytest.approx(identification_confidence(result.spectral_matches, identity_model))
    assert 0 < result.confidence < 1

    both = load_spectral_library(references(home / "two.mgf", [("MSBNK-A-000001", REFERENCE),
                                                               ("MSBNK-B-000002", ISOMER)]))
    result = run(tiny_bundle, spectrum, [both])
    first = result.candidates[0]
    assert first.identified and result.confidence is not None
    other = ISOMER if first.inchikey14 == chem.inchikey14(REFERENCE) else REFERENCE
    level = identification_level([result])
    assert level.code == "3" and [i.inchikey14 for i in level.isomers] == [chem.inchikey14(other)]
    assert "or its isomer" in level.text and "similarity 1.00" in level.text

    out = home / "c.csv"
    with CandidateWriter(out, {}) as w:
        w.write(result)
    top = rows_of(out)[0]
    assert top["identification_level"] == "3" and "or its isomer" in top["identification_note"]
    assert float(top["spectrum_confidence"]) == pytest.approx(result.confidence, abs=1e-4)
    sdf = home / "c.sdf"
    with CandidateWriter(sdf, {}) as w:
        w.write(result)
    mol = next(iter(Chem.SDMolSupplier(str(sdf))))
    assert "or its isomer" in mol.GetProp("identification_note") and mol.GetProp("identification_level") == "3"

    monkeypatch.undo()
    shipped = SEARCH.default_threshold()
    assert shipped.rule is not None  # the calibrated rule beside the bundled library
    result = run(tiny_bundle, spectrum, [both])
    assert not result.candidates[0].identified  # two structures' references equally similar: no identification
    level = identification_level([result])
    assert level.code == "3" and "or its isomer" in level.text and "not identified" in level.text


def test_an_isomer_far_below_leaves_level_2a(tiny_bundle, home, identity_model, monkeypatch):
    monkeypatch.setattr(SEARCH, "default_threshold", lambda: AnswerThreshold(0.675, 3))
    spectrum = fixture_spectra()[0]
    n = len([line for line in FIXTURE.read_text().split("END IONS")[0].splitlines() if line[:1].isdigit()])
    scale = np.where(np.arange(n) % 2 == 0, 1.0, 0.02)  # every other peak nearly gone: a clearly worse match
    lib = load_spectral_library(references(home / "far.mgf", [("MSBNK-A-000001", REFERENCE),
                                                              ("MSBNK-B-000002", ISOMER)], scale))
    result = run(tiny_bundle, spectrum, [lib])
    m = result.spectral_matches
    assert m.best_isomer is not None and m.best_isomer[0] < m.hits[0].similarity - 0.1
    level = identification_level([result])
    assert result.candidates[0].inchikey14 == chem.inchikey14(REFERENCE)
    assert level.code == "2a" and not level.isomers
    out = home / "c.csv"
    with CandidateWriter(out, {}) as w:
        w.write(result)
    assert rows_of(out)[0]["identification_note"].startswith("reference spectrum match")
