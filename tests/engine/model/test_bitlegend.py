"""The bit legend: atom environments behind each Morgan bit, its file, its builder and its place in a bundle."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem

from engine.chem import molecules as chem
from engine.errors import BundleError, ConfigError
from engine.model.bitlegend import (
    FILE_NAME,
    BitLegend,
    Environment,
    bit_environments,
    environment_fragment,
    fragment_mol,
    legend_from_counts,
)
from engine.model.bundle import add_bundle_file, bundle_checksum, load_bundle
from training.bundle.bit_legend import build_legend, main, reservoir_sample

MOLECULES = [
    "CC1Cc2cccc(O)c2C(=O)O1",  # mellein
    "c1ccccc1O",  # phenol
    "CCO",
    "C[N+](C)(C)CCO",  # choline: a charge
    "O=C(O)c1ccc(Cl)cc1",
    "c1ccc2[se]ccc2c1",  # an aromatic element outside SMILES' organic subset
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol
]


def run(gen):
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


@pytest.mark.parametrize("smiles", MOLECULES)
def test_every_bit_of_the_fingerprint_gets_environments_whose_smarts_match_the_molecule(smiles):
    mol = chem.mol_from_smiles(smiles)
    envs = bit_environments(mol)
    assert sorted(envs) == chem.morgan_bits(mol).tolist()
    for found in envs.values():
        assert found and len({e.smiles for e in found}) == len(found)
        for env in found:
            assert env.radius in (0, 1, 2)
            assert mol.HasSubstructMatch(Chem.MolFromSmarts(env.smarts)), env
            assert fragment_mol(env.smiles) is not None


def test_the_same_environment_reads_the_same_in_any_molecule():
    """An aromatic CH between two CH (radius 1) in benzene, toluene and phenol: one string."""
    seen = set()
    for smiles in ("c1ccccc1", "Cc1ccccc1", "Oc1ccccc1"):
        mol = chem.mol_from_smiles(smiles)
        atom = next(a.GetIdx() for a in mol.GetAtoms()
                    if a.GetIsAromatic() and a.GetTotalNumHs() == 1
                    and all(n.GetTotalNumHs() == 1 for n in a.GetNeighbors()))
        seen.add(environment_fragment(mol, atom, 1))
    assert seen == {Environment("[cH]([cH])[cH]", "[c&D2&H1&R](:[c&D2&H1&R]):[c&D2&H1&R]", 1)}


def test_radius_zero_is_the_atom_with_its_invariants():
    mol = chem.mol_from_smiles("C[N+](C)(C)CCO")
    n = next(a.GetIdx() for a in mol.GetAtoms() if a.GetSymbol() == "N")
    env = environment_fragment(mol, n, 0)
    assert env.smiles == "[N+]" and env.smarts == "[N&D4&H0&!R&+1]"


def test_build_legend_counts_molecules_per_environment_and_keeps_the_top():
    legend = run(build_legend(["CCO", "CCCO", "OCCO", "not a smiles"], top=2, source="test"))
    assert legend.n_molecules == 3 and legend.top == 2 and legend.source == "test"
    ethanol = bit_environments(chem.mol_from_smiles("CCO"))
    bit = next(b for b, envs in ethanol.items() if envs[0].smiles == "[OH]")
    assert legend.n_with_bit(bit) == 3 and legend.environments(bit)[0] == Environment(
        "[OH]", "[O&D1&H1&!R]", 0, 3)
    assert legend.frequency(bit) == 1.0 and "[OH] (100%)" in legend.describe(bit)
    assert all(len(legend.environments(b)) <= 2 for b in range(legend.n_bits))
    unseen = next(b for b in range(legend.n_bits) if b not in legend)
    assert legend.environments(unseen) == () and legend.describe(unseen) == "not seen in the corpus sample"


def test_legend_file_round_trip_gzip_and_plain(tmp_path):
    legend = run(build_legend(MOLECULES, top=3, source="fixture"))
    for name in ("legend.json.gz", "legend.json"):
        path = legend.save(tmp_path / name)
        back = BitLegend.load(path)
        assert back.to_dict() == legend.to_dict()
    assert gzip.decompress((tmp_path / "legend.json.gz").read_bytes()) == (tmp_path / "legend.json").read_bytes()
    # reproducible bytes: the same legend gives the same file (no time stamp in the gzip header)
    legend.save(tmp_path / "again.json.gz")
    assert (tmp_path / "again.json.gz").read_bytes() == (tmp_path / "legend.json.gz").read_bytes()


@pytest.mark.parametrize("change, match", [
    (lambda d: d.update(format="something"), "not an msgpt bit legend"),
    (lambda d: d.update(format_version=99), "newer than this msgpt reads"),
    (lambda d: d["bits"].update({"5000": {"n": 1, "env": []}}), "outside the fingerprint"),
    (lambda d: d["bits"].update({"1": {"n": 1}}), "malformed"),
])
def test_a_bad_legend_file_is_refused_with_what_to_do(tmp_path, change, match):
    d = run(build_legend(["CCO"])).to_dict()
    change(d)
    (tmp_path / "l.json").write_text(json.dumps(d))
    with pytest.raises(BundleError, match=match):
        BitLegend.load(tmp_path / "l.json")


def test_top_must_be_positive():
    with pytest.raises(ConfigError, match="`top` must be a positive integer"):
        legend_from_counts({}, {}, {}, 0, top=0)


def test_reservoir_sample_is_seeded_uniform_and_keeps_input_order():
    items = [str(i) for i in range(1000)]
    a, b = reservoir_sample(items, 50, seed=1), reservoir_sample(items, 50, seed=1)
    assert a == b and len(a) == 50 and a == sorted(a, key=int)
    assert reservoir_sample(items, 50, seed=2) != a
    assert reservoir_sample(items[:10], 50) == items[:10]


def test_bundle_loads_a_legend_checks_its_checksum_and_still_loads_without_one(tmp_path, tiny_bundle_dir):
    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "b")
    assert load_bundle(bundle_dir, device="cpu").bit_legend is None  # an old bundle without a legend
    smi = tmp_path / "mols.smi"
    smi.write_text("\n".join(MOLECULES) + "\n")
    assert main(["--molecules", str(smi), "--rows", "100", "--out", str(bundle_dir / FILE_NAME),
                 "--bundle", str(bundle_dir), "-q"]) == 0
    config = json.loads((bundle_dir / "config.json").read_text())
    assert FILE_NAME in config["files"]
    bundle = load_bundle(bundle_dir, device="cpu")
    assert bundle.bit_legend is not None and bundle.bit_legend.n_molecules == len(MOLECULES)
    mellein = chem.morgan_bits(chem.mol_from_smiles(MOLECULES[0]))
    assert all(bundle.bit_legend.environments(b) for b in mellein)

    legend = BitLegend.load(bundle_dir / FILE_NAME)  # replaced by another file: the checksum catches it
    BitLegend({}, n_molecules=0, fingerprint=legend.fingerprint).save(bundle_dir / FILE_NAME)
    with pytest.raises(BundleError, match="does not match its checksum"):
        load_bundle(bundle_dir, device="cpu")


def test_a_legend_of_another_fingerprint_is_refused(tmp_path, tiny_bundle_dir):
    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "b")
    legend = BitLegend({1: (1, ())}, n_molecules=1,
                       fingerprint={"type": "morgan", "radius": 2, "n_bits": 2048})
    legend.save(bundle_dir / FILE_NAME)
    with pytest.raises(BundleError, match="2048-bit radius-2 Morgan fingerprint but the model reads 4096"):
        load_bundle(bundle_dir, device="cpu")


def test_add_bundle_file_takes_only_the_optional_files(tmp_path, tiny_bundle_dir):
    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "b")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ConfigError, match="not an optional bundle file"):
        add_bundle_file(bundle_dir, tmp_path / "x.json")


def test_adding_a_file_renames_the_checksum_in_the_model_card(tmp_path, tiny_bundle_dir):
    # confidence.json is added after the card is written: the card must name the checksum users will see
    bundle_dir = Path(shutil.copytree(tiny_bundle_dir, tmp_path / "b"))
    before = bundle_checksum(bundle_dir)
    (bundle_dir / "MODEL_CARD.md").write_text(f"# card\n\nbundle checksum `{before[:16]}`, 1 MB; other `{before[:16]}`\n")
    legend = BitLegend({1: (1, ())}, n_molecules=1, fingerprint={"type": "morgan", "radius": 2, "n_bits": 4096})
    add_bundle_file(bundle_dir, legend.save(tmp_path / FILE_NAME))
    after = load_bundle(bundle_dir, device="cpu").checksum
    assert after != before
    assert (bundle_dir / "MODEL_CARD.md").read_text() == (
        f"# card\n\nbundle checksum `{after[:16]}`, 1 MB; other `{before[:16]}`\n")


def test_environment_counts_are_numpy_free_ints():
    legend = run(build_legend(["CCO", "CCN"]))
    d = legend.to_dict()
    json.dumps(d)  # plain JSON types only
    assert all(isinstance(e[3], int) and not isinstance(e[3], np.integer) for v in d["bits"].values() for e in v["env"])
