"""Corpus preparation (training.data.corpus) and its dataset (training.data.dataset) on a dozen molecules."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import safe
import torch

from engine.chem import molecules as chem
from engine.chem.formula import formula_vector
from engine.errors import ConfigError
from training.data.corpus import PrepareConfig, iter_smiles_file, prepare_corpus, read_mgf_headers
from training.data.dataset import IGNORE_INDEX, CorpusDataset

# (SMILES, what it tests); the drop reasons expected are in test_report_counts_every_drop_by_reason
SMILES_ROWS = [
    ("C[C@H](N)C(=O)O", "stereo: kept without '@'"),
    ("CC(N)C(=O)O", "duplicate of the first after stereo removal"),
    ("CC[Sn](CC)(CC)CC", "unsupported element Sn"),
    ("c1ccccc1", "no cuttable bond: SAFE is the SMILES"),
    ("CCO", "no cuttable bond"),
    ("CC1Cc2cccc(O)c2C(=O)O1", "mellein, in the --exclude file"),
    ("C1CC(", "unparseable"),
    ("", "empty SMILES field"),
    ("CC(=O)Oc1ccccc1C(=O)O", "aspirin, fragmented SAFE"),
    ("CC(C)Cc1ccc(cc1)C(C)C(=O)O", "ibuprofen, a structure of the MGF val fold"),
    ("C" * 40 + "O", "too long for max_tokens=32"),
    ("C[N+](C)(C)CCO", "charged: formula without the charge sign"),
]
MGF_RECORDS = [  # (SMILES, FOLD, LICENSE)
    ("Cn1cnc2c1c(=O)n(C)c(=O)n2C", "train", "CC0"),  # caffeine: new, selected
    ("CCO", "train", "CC BY"),  # selected, duplicate of the SMILES file's ethanol
    ("OC(=O)c1ccccc1O", "train", "CC BY-NC"),  # salicylic acid: license not selected
    ("CC(C)Cc1ccc(cc1)C(C)C(=O)O", "val", "CC BY"),  # ibuprofen: its key is excluded
]
EXPECTED_DROPS = {
    "duplicate": 2,
    "empty_smiles": 1,
    "excluded": 2,
    "too_long": 1,
    "unparseable_smiles": 1,
    "unsupported_element": 1,
}
EXPECTED_KEPT = [
    "CC(N)C(=O)O",
    "c1ccccc1",
    "CCO",
    "CC(=O)Oc1ccccc1C(=O)O",
    "C[N+](C)(C)CCO",
    "Cn1c(=O)c2c(ncn2C)n(C)c1=O",  # from the MGF
]


def _write_mgf(path: Path) -> None:
    blocks = []
    for i, (smiles, fold, lic) in enumerate(MGF_RECORDS):
        key = chem.inchikey(chem.mol_from_smiles(smiles))
        blocks.append(
            f"BEGIN IONS\nTITLE=T{i}\nPEPMASS=100.0\nSMILES={smiles}\nINCHIKEY={key}\n"
            f"LICENSE={lic}\nFOLD={fold}\n50.0 10\n60.5 100\nEND IONS\n"
        )
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(blocks))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("inputs")
    rows = "".join(f"{s}\t{note}\n" for s, note in SMILES_ROWS)
    (d / "mols.tsv").write_text("smiles\tnote\n" + rows)
    _write_mgf(d / "spectra.mgf.gz")
    (d / "exclude.txt").write_text("# structures of a test set\nKWILGNNWGSNMPA\n")
    return {"smiles": d / "mols.tsv", "mgf": d / "spectra.mgf.gz", "exclude": d / "exclude.txt"}


def _config(inputs: dict[str, Path], **kw) -> PrepareConfig:
    return PrepareConfig(
        inputs=(str(inputs["smiles"]),),
        mgf=(str(inputs["mgf"]),),
        mgf_folds=("train",),
        mgf_licenses=("CC0", "CC BY", "CC BY-SA", "dl-de/by-2-0"),
        exclude=(str(inputs["exclude"]),),
        exclude_mgf_folds=("val",),
        chunk_size=4,
        max_tokens=kw.pop("max_tokens", 32),
        **kw,
    )


@pytest.fixture(scope="module")
def corpus(inputs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "c"
    prepare_corpus(_config(inputs), out)
    return out


def _shard_arrays(out: Path) -> dict[str, bytes]:
    files = {}
    for shard in sorted(out.glob("shard_*")):
        for f in sorted(shard.iterdir()):
            if f.suffix in (".npy", ".txt"):
                files[f"{shard.name}/{f.name}"] = f.read_bytes()
    return files


def test_report_counts_every_drop_by_reason(corpus):
    report = json.loads((corpus / "report.json").read_text())
    assert report["counts"] == EXPECTED_DROPS
    assert report["details"]["unsupported_element"] == {"Sn": 1}
    assert report["n_input"] == len(SMILES_ROWS) + 2  # the MGF adds its 2 selected structures
    assert report["n_kept"] == len(EXPECTED_KEPT) == report["n_input"] - sum(EXPECTED_DROPS.values())
    assert report["n_unfragmented_safe"] == 4  # alanine, benzene, ethanol, caffeine
    mgf_stats = next(v for k, v in report["mgf"].items() if k.endswith("spectra.mgf.gz"))
    assert mgf_stats == {"spectra": 4, "selected_spectra": 2, "excluded_spectra": 1}


def test_records_are_canonical_and_safe_round_trips(corpus):
    shards = sorted(p for p in corpus.glob("shard_*"))
    read = lambda name: [line for s in shards for line in (s / name).read_text().splitlines()]  # noqa: E731
    smiles, safe_strings, keys = read("smiles.txt"), read("safe.txt"), read("inchikey14.txt")
    assert smiles == EXPECTED_KEPT
    assert len(set(keys)) == len(keys)
    for smi, enc in zip(smiles, safe_strings):
        assert "@" not in smi
        assert chem.canonical_smiles(safe.decode(enc)) == smi
    assert safe_strings[1] == "c1ccccc1" and "." in safe_strings[3]  # benzene whole, aspirin cut
    assert read("formula.txt")[4] == "C5H14NO"


def test_resume_redoes_only_missing_shards_identically(corpus, inputs, tmp_path):
    out = tmp_path / "c"
    shutil.copytree(corpus, out)
    before = _shard_arrays(out)
    shutil.rmtree(out / "shard_00001")  # its DONE marker and data
    (out / "shard_00002" / "DONE").unlink()  # data left behind without a marker is redone too
    prepare_corpus(_config(inputs), out, workers=2)
    assert _shard_arrays(out) == before
    assert json.loads((out / "report.json").read_text())["counts"] == EXPECTED_DROPS


def test_rerun_with_other_settings_is_refused(corpus, inputs):
    with pytest.raises(ConfigError, match="max_tokens"):
        prepare_corpus(_config(inputs, max_tokens=64), corpus)


def test_dataset_items_match_the_records(corpus):
    ds = CorpusDataset(corpus)
    assert len(ds) == len(EXPECTED_KEPT)
    tok = ds.tokenizer
    for i, smi in enumerate(EXPECTED_KEPT):
        tokens, bits, formula = ds[i]
        assert tokens[0] == tok.bos_id and tokens[-1] == tok.eos_id
        assert chem.canonical_smiles(safe.decode(tok.decode(tokens))) == smi
        mol = chem.mol_from_smiles(smi)
        assert np.array_equal(bits, chem.morgan_bits(mol))
        assert np.array_equal(formula, formula_vector(chem.mol_formula_counts(mol)))
    keys = ds.formula_keys()
    assert keys.dtype == np.int64 and len(set(keys.tolist())) == len(keys)  # six different formulas
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_collate_pads_and_shifts(corpus):
    ds = CorpusDataset(corpus)
    batch = ds.collate([2, 3, 0])
    lengths = [len(ds[i][0]) for i in (2, 3, 0)]
    B, T = 3, max(lengths) - 1
    assert batch["idx"].shape == batch["targets"].shape == (B, T)
    assert batch["fp_bits"].shape == batch["fp_mask"].shape == (B, 256)
    assert batch["formula"].shape == (B, 14)
    for b, i in enumerate((2, 3, 0)):
        tokens, bits, formula = ds[i]
        n = len(tokens) - 1
        assert batch["idx"][b, :n].tolist() == tokens[:-1].tolist()
        assert batch["targets"][b, :n].tolist() == tokens[1:].tolist()
        assert (batch["idx"][b, n:] == ds.pad_id).all() and (batch["targets"][b, n:] == IGNORE_INDEX).all()
        assert batch["fp_mask"][b].sum() == len(bits)
        assert batch["fp_bits"][b, : len(bits)].tolist() == bits.tolist()
        assert batch["formula"][b].tolist() == formula.tolist()


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("a.smi", "CCO ethanol\nc1ccccc1 benzene\n", ["CCO", "c1ccccc1"]),  # no header: first column
        ("a.csv", 'id,SMILES\n1,CCO\n"2,x",CCN\n', ["CCO", "CCN"]),  # header names the column
        ("a.tsv", "CCO\t1\n\nCCN\t2\n", ["CCO", "CCN"]),  # blank lines are not records
    ],
)
def test_smiles_column_detection(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    assert list(iter_smiles_file(path)) == expected


def test_mgf_header_scanner_reads_fields_with_equals_signs(inputs):
    records = list(read_mgf_headers(inputs["mgf"]))
    assert [r["SMILES"] for r in records] == [s for s, _, _ in MGF_RECORDS]
    assert records[0]["FOLD"] == "train" and records[2]["LICENSE"] == "CC BY-NC"


def test_collate_items_and_pickled_dataset_agree_with_collate(corpus):
    ds = CorpusDataset(corpus)
    copy = pickle.loads(pickle.dumps(ds))
    assert len(pickle.dumps(ds)) < 1000  # the maps are reopened, not copied
    a, b = ds.collate([1, 4]), copy.collate_items([copy[1], copy[4]])
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_flat_fingerprint_arrays_and_keys_match_the_records(corpus):
    ds = CorpusDataset(corpus)
    bits, offsets, formulas = ds.fingerprint_arrays()
    keys = ds.inchikey_blocks()
    assert len(offsets) == len(ds) + 1 and offsets[0] == 0 and len(bits) == offsets[-1]
    assert formulas.shape == (len(ds), 14) and keys.shape == (len(ds), 14) and keys.dtype == np.uint8
    assert len(ds.manifest["shards"]) > 1  # chunk_size 4: the offsets cross shard boundaries
    for i, smi in enumerate(EXPECTED_KEPT):
        _, item_bits, item_formula = ds[i]
        assert np.array_equal(bits[offsets[i] : offsets[i + 1]], item_bits)
        assert np.array_equal(formulas[i], item_formula)
        assert keys[i].tobytes().decode() == chem.inchikey14(smi)


def test_headroom_corpus_drops_the_structures_it_is_told_to(corpus):
    from training.studies.encoder_headroom import load_corpus

    ds = CorpusDataset(corpus)
    bits, offsets, formulas = ds.fingerprint_arrays()
    drop = [chem.inchikey14(EXPECTED_KEPT[1]), "NOTINTHECORPUS"]
    kept, dropped = load_corpus(corpus, drop)
    assert dropped == 1 and len(kept["formula"]) == len(ds) - 1
    rows = [i for i in range(len(ds)) if i != 1]
    assert np.array_equal(kept["formula"], formulas[rows])
    for r, i in enumerate(rows):
        a, b = kept["offsets"][r], kept["offsets"][r + 1]
        assert np.array_equal(kept["bits"][a:b], bits[offsets[i] : offsets[i + 1]])
