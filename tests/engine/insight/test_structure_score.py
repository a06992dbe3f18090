"""Scoring a structure the user proposes: fingerprint score and rank, decoder likelihood, formula, fragments;
``msgpt score`` end to end. A planted structure must score above a random one."""

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem
from tiny_bundle import FIXTURE, fixture_spectra

from engine.chem import molecules as chem
from engine.chem.formula import ELECTRON_MASS, element_masses, formula_vector
from engine.cli import main as msgpt
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.insight.novelty import NoveltyMarker
from engine.insight.structure_score import (
    SCORE_COLUMNS,
    RankedStructure,
    canonical_safe,
    format_formula_difference,
    parse_structure,
    score_structures,
)
from engine.model.known import KnownStructures
from engine.spectra.fragments import fragment_formulas
from engine.spectra.spectrum import Spectrum

PARAMS = QueryParams(groups=4)
FAST = ["--groups", "3", "--threads", "1", "--precision", "fp32"]


@pytest.fixture(scope="module")
def first():
    """A fixture spectrum whose reference the tiny decoder has memorised."""
    return fixture_spectra()[0]  # C14H28N2O6


def isomer_of(smiles: str) -> str:
    """A different structure with the same formula: the amide N-substituents moved onto one nitrogen."""
    assert chem.mol_formula(chem.mol_from_smiles(smiles)) == "C14H28N2O6"
    return "O=C(CCCCC(=O)NCCO)N(CCO)CCOCCO"


def test_planted_structure_has_a_far_higher_decoder_likelihood_than_an_isomer(tiny_bundle, first):
    """The tiny decoder memorised the reference (every token p > 0.95 under any query); an isomer of the same
    formula is far less likely."""
    other = isomer_of(first.smiles)
    assert chem.mol_formula(chem.mol_from_smiles(other)) == first.formula
    planted, rand = score_structures(SpectrumSession(tiny_bundle, first), [first.smiles, other], PARAMS)
    assert planted.formula_match and rand.formula_match
    assert planted.decoder_logp_per_token > np.log(0.95)
    assert planted.decoder_logp > rand.decoder_logp + 10
    assert planted.decoder_logp_best_query >= planted.decoder_logp
    assert planted.safe_tokens == len(tiny_bundle.tokenizer.encode(canonical_safe(planted.smiles))) - 1


def test_planted_fingerprint_scores_above_a_random_structure_and_ranks_first(tiny_bundle, first):
    """A posterior that is sure of the planted structure's bits: its fingerprint score beats an isomer's, and
    among candidates (the isomer and two others) it ranks first."""
    bits = chem.morgan_bits(chem.mol_from_smiles(first.smiles))
    posterior = np.full(4096, 0.01, dtype=np.float32)
    posterior[bits] = 0.95
    session = SpectrumSession(tiny_bundle, first, posterior=posterior)
    other = isomer_of(first.smiles)
    candidates = [RankedStructure(1, chem.inchikey14(other), score_structures(session, [other], PARAMS)[0].fingerprint_score),
                  RankedStructure(2, "AAAAAAAAAAAAAA", -500.0), RankedStructure(3, "BBBBBBBBBBBBBB", -900.0)]
    planted, rand = score_structures(session, [first.smiles, other], PARAMS, candidates=candidates)
    assert planted.fingerprint_score > rand.fingerprint_score
    assert planted.fingerprint_rank == 1 and planted.candidate_rank is None and planted.n_candidates == 3
    assert rand.fingerprint_rank == 1 + sum(c.fingerprint_score > rand.fingerprint_score for c in candidates[1:])
    assert rand.candidate_rank == 1  # it is candidate #1 itself


def test_fragments_of_the_planted_structure_explain_a_spectrum_made_from_them(tiny_bundle):
    planted, isomer = "CC(=O)Nc1ccc(O)cc1", "COc1ccc(N)cc1C=O"
    found, _ = fragment_formulas(chem.mol_from_smiles(planted), 1)
    h = formula_vector({"H": 1})
    mz = sorted({round(float((v + h) @ element_masses() - ELECTRON_MASS), 5) for v in found if v.sum()})
    spectrum = Spectrum(id="planted", precursor_mz=mz[-1], adduct="[M+H]+", formula="C8H9NO2", mz=mz,
                        intensity=np.linspace(1, 2, len(mz)))
    mine, other = score_structures(SpectrumSession(tiny_bundle, spectrum), [planted, isomer], PARAMS)
    assert mine.explained_peaks == mine.n_peaks == len(mz) and mine.explained_intensity == pytest.approx(1.0)
    assert other.explained_peaks < mine.explained_peaks
    assert mine.subformula_explained_intensity == pytest.approx(1.0)


def test_formula_check_inputs_and_notes(tiny_bundle, first):
    session = SpectrumSession(tiny_bundle, first)
    molblock = Chem.MolToMolBlock(Chem.MolFromSmiles(first.smiles))
    inchi = Chem.MolToInchi(Chem.MolFromSmiles(first.smiles))
    rows = score_structures(session, [first.smiles, molblock, inchi, "CCO", "no structure", "BrCCBr"], PARAMS)
    assert rows[0].smiles == rows[1].smiles == rows[2].smiles and rows[1].decoder_logp == pytest.approx(rows[0].decoder_logp)
    ethanol = rows[3]
    assert ethanol.formula_match is False and ethanol.structure_formula == "C2H6O"
    assert "formula C2H6O differs from the spectrum's C14H28N2O6 (-C12H22N2O5)" in ethanol.row()["note"]
    assert ethanol.row()["formula_match"] == "no"
    assert not rows[4].ok and "not a structure RDKit can read" in rows[4].row()["note"]
    assert rows[4].row()["fingerprint_score"] == "" and rows[4].row()["explained_peaks"] == ""
    bromine = rows[5]  # 'Br' is not a token of the tiny model
    assert np.isnan(bromine.decoder_logp) and "not in the model's vocabulary" in bromine.row()["note"]
    assert not np.isnan(bromine.fingerprint_score)
    assert list(rows[0].row()) == list(SCORE_COLUMNS)


def test_novelty_of_a_scored_structure(tiny_bundle, first):
    marker = NoveltyMarker(KnownStructures.from_keys([chem.inchikey14(first.smiles)], "corpus"))
    rows = score_structures(SpectrumSession(tiny_bundle, first), [first.smiles, "CCO"], PARAMS, marker=marker)
    assert [r.novelty for r in rows] == ["training corpus", "new"]


def test_parse_structure_removes_stereo_and_refuses_junk():
    mol = parse_structure("C[C@@H](N)C(=O)O")
    assert Chem.MolToSmiles(mol) == "CC(N)C(=O)O"
    assert parse_structure("") is None and parse_structure("   ") is None and parse_structure("C1CC") is None
    assert format_formula_difference("C10H12O3", "C10H10O3") == "+H2"
    assert format_formula_difference("C9H10O3", "C10H10O3") == "-C"


def read_rows(path: Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def test_msgpt_score_ranks_a_structure_among_the_candidates_of_a_predict_run(tmp_path, tiny_bundle_dir, capsys):
    spectra = fixture_spectra()
    candidates = tmp_path / "c.csv"
    assert msgpt(["predict", str(FIXTURE), "-o", str(candidates), "--model", str(tiny_bundle_dir), "--pool-size", "6",
                  "-q", *FAST]) == 0
    structures = tmp_path / "mine.sdf"
    with Chem.SDWriter(str(structures)) as w:
        mol = Chem.MolFromSmiles("CCO")
        mol.SetProp("_Name", "ethanol")
        w.write(mol)
    out = tmp_path / "scores.csv"
    ids = [spectra[0].id, spectra[1].id]
    assert msgpt(["score", str(FIXTURE), "--model", str(tiny_bundle_dir), "--smiles", spectra[0].smiles,
                  spectra[1].smiles, "--smiles-file", str(structures), "--candidates", str(candidates),
                  "--spectrum", *ids, "-o", str(out), *FAST]) == 0
    assert "Scored 3 structure(s) against 2 spectra" in capsys.readouterr().err
    text = out.read_text()
    assert "# model_checksum:" in text and "# fragments: up to 2 bonds cut" in text
    rows = read_rows(out)
    assert len(rows) == 6 and list(rows[0]) == list(SCORE_COLUMNS)
    by = {(r["spectrum_id"], r["structure"]): r for r in rows}
    own = by[(ids[0], spectra[0].smiles)]
    assert own["candidate_rank"] == "1" and own["formula_match"] == "yes" and own["n_candidates"] != "0"
    assert by[(ids[1], spectra[0].smiles)]["formula_match"] == "no"
    assert by[(ids[0], "ethanol")]["structure_formula"] == "C2H6O"  # from the SDF, named by its title
    assert float(own["decoder_logp"]) > float(by[(ids[0], spectra[1].smiles)]["decoder_logp"])


def test_msgpt_score_needs_structures_and_prints_to_stdout(tmp_path, tiny_bundle_dir, capsys):
    assert msgpt(["score", str(FIXTURE), "--model", str(tiny_bundle_dir), *FAST]) == 2
    assert "Give the structures to score" in capsys.readouterr().err
    assert msgpt(["score", str(FIXTURE), "--model", str(tiny_bundle_dir), "--smiles", "CCO",
                  "--spectrum", fixture_spectra()[0].id, *FAST]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split(",") == list(SCORE_COLUMNS) and len(printed) == 2


def test_msgpt_score_reads_a_tools_feature_export_feature_by_feature():
    """MZmine's SIRIUS export interleaves MS1 and MS2 records of one FEATURE_ID: `msgpt score` reads it as
    `msgpt predict` does, one spectrum per feature under the tool's ID (read record by record it was 24)."""
    from engine.cli.score import score_inputs

    errors = []
    export = Path(__file__).parents[2] / "data" / "handoff" / "qexactive_dda_qc_pool_sirius.mgf"
    spectra = list(score_inputs([str(export)], None, None, errors))
    assert errors == [] and [s.id for s in spectra] == ["1", "2", "3", "4", "5"]
    assert all(isinstance(s, Spectrum) and len(s.mz) > 0 for s in spectra)
