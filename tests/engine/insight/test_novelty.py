"""Novelty: known-structure sets (hashed InChIKey first blocks), users' lists, labels, the builder, the CLI."""

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem
from tiny_bundle import FIXTURE, fixture_spectra

from engine.chem import molecules as chem
from engine.cli import main as msgpt
from engine.errors import BundleError, ConfigError, InputFileError
from engine.insight.novelty import (
    CORPUS,
    NEW,
    USER,
    NoveltyMarker,
    categories,
    key_of,
    read_structure_list,
    scan_structure_list,
)
from engine.model.bundle import load_bundle
from engine.model.known import FILE_NAME, KnownStructures, key_hashes
from training.bundle.known_structures import main as build_known

MELLEIN = "CC1Cc2cccc(O)c2C(=O)O1"
MELLEIN_KEY = "KWILGNNWGSNMPA"
FAST = ["--groups", "2", "--pool-size", "4", "--threads", "1", "--precision", "fp32", "-q"]


def test_key_hash_is_the_documented_blake2b_and_stable():
    """The stored format: blake2b (8 bytes) of the 14 ASCII letters, little-endian. Pinned, so a change of
    the rule cannot go unnoticed (files shipped with models would silently stop matching)."""
    import hashlib

    expected = int.from_bytes(hashlib.blake2b(MELLEIN_KEY.encode(), digest_size=8).digest(), "little")
    assert key_hashes([MELLEIN_KEY]).tolist() == [expected] == [3955458275199369912]
    assert key_hashes([MELLEIN_KEY + "-UHFFFAOYSA-N"]).tolist() == [expected]  # a full key: its first block
    assert key_hashes([]).dtype == np.uint64


def test_known_structures_contains_only_its_keys():
    known = KnownStructures.from_keys([MELLEIN_KEY, "BSYNRYMUTXBXSQ", MELLEIN_KEY], "two")
    assert len(known) == 2
    assert known.contains([MELLEIN_KEY, "BSYNRYMUTXBXSQ-UHFFFAOYSA-N", "AAAAAAAAAAAAAA", None, ""]).tolist() == [
        True, True, False, False, False]
    assert MELLEIN_KEY in known and "ZZZZZZZZZZZZZZ" not in known
    assert not KnownStructures.from_keys([]).contains([MELLEIN_KEY]).any()


def test_known_structures_file_round_trip_without_pickles(tmp_path):
    known = KnownStructures.from_keys([f"{c * 14}" for c in "ABCDEFG"], "seven letters")
    known.save(tmp_path / FILE_NAME)
    with np.load(tmp_path / FILE_NAME, allow_pickle=False) as z:
        assert str(z["format"]) == "msgpt-known-structures" and z["hashes"].dtype == np.uint64
    back = KnownStructures.load(tmp_path / FILE_NAME)
    assert np.array_equal(back.hashes, known.hashes) and back.source == "seven letters"


@pytest.mark.parametrize("arrays, match", [
    (dict(format=np.array("other"), format_version=np.array(1), hashes=np.zeros(0, np.uint64), info=np.array("{}")),
     "not a set of known structures"),
    (dict(format=np.array("msgpt-known-structures"), format_version=np.array(9), hashes=np.zeros(0, np.uint64),
          info=np.array("{}")), "newer than this msgpt reads"),
    (dict(format=np.array("msgpt-known-structures"), format_version=np.array(1),
          hashes=np.array([3, 1], np.uint64), info=np.array("{}")), "sorted and distinct"),
])
def test_a_bad_known_structures_file_is_refused(tmp_path, arrays, match):
    np.savez(tmp_path / "k.npz", **arrays)
    with pytest.raises((BundleError, ConfigError), match=match):
        KnownStructures.load(tmp_path / "k.npz")


def test_hashes_must_be_uint64():
    with pytest.raises(ConfigError, match="1-D uint64 array"):
        KnownStructures(np.array([1, 2], dtype=np.int64))


def test_key_of_reads_inchikeys_and_smiles():
    assert key_of(MELLEIN_KEY) == key_of(MELLEIN_KEY + "-UHFFFAOYSA-N") == key_of(MELLEIN) == MELLEIN_KEY
    assert key_of("C[C@@H]1Cc2cccc(O)c2C(=O)O1") == MELLEIN_KEY  # stereo lives in the second block
    assert key_of("not a molecule") is None


def test_read_structure_list_plain_csv_tsv_and_sdf(tmp_path):
    plain = tmp_path / "list.txt"
    plain.write_text(f"# my database\n{MELLEIN}\nBSYNRYMUTXBXSQ-UHFFFAOYSA-N\nxyz\n\nCCO\n{MELLEIN_KEY}\n")
    listing = read_structure_list(plain)
    assert listing.keys == (MELLEIN_KEY, "BSYNRYMUTXBXSQ", chem.inchikey14("CCO"))
    assert listing.n_rows == 5 and listing.n_problems == 1 and "line 4: 'xyz'" in listing.problems[0]

    scan, counts = scan_structure_list(plain, every=2), []  # the generator behind it: rows read, then the list
    while True:
        try:
            counts.append(next(scan))
        except StopIteration as done:
            assert counts == [2, 4] and done.value == listing
            break

    table = tmp_path / "export.csv"
    table.write_text(f"name,SMILES\nmellein,{MELLEIN}\nethanol,CCO\n")
    assert read_structure_list(table).keys == (MELLEIN_KEY, chem.inchikey14("CCO"))
    keys = tmp_path / "keys.tsv"
    keys.write_text(f"id\tInChIKey\n1\t{MELLEIN_KEY}-UHFFFAOYSA-N\n")
    assert read_structure_list(keys).keys == (MELLEIN_KEY,)

    sdf = tmp_path / "db.sdf"
    with Chem.SDWriter(str(sdf)) as w:
        for s in (MELLEIN, "CCO"):
            w.write(Chem.MolFromSmiles(s))
    assert read_structure_list(sdf).keys == (MELLEIN_KEY, chem.inchikey14("CCO"))


def test_a_list_without_any_structure_says_what_to_give(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\nworld\n")
    with pytest.raises(InputFileError, match="no structure found in 2 rows .*give SMILES or InChIKeys"):
        read_structure_list(bad)
    with pytest.raises(InputFileError, match="no such file"):
        read_structure_list(tmp_path / "missing.txt")


def test_marker_labels_training_corpus_user_list_both_and_new():
    corpus = KnownStructures.from_keys(["AAAAAAAAAAAAAA", "BBBBBBBBBBBBBB"], "corpus")
    user = KnownStructures.from_keys(["BBBBBBBBBBBBBB", "CCCCCCCCCCCCCC"], "mine")
    marker = NoveltyMarker(corpus, user)
    labels = marker.labels(["AAAAAAAAAAAAAA", "BBBBBBBBBBBBBB", "CCCCCCCCCCCCCC", "DDDDDDDDDDDDDD"])
    assert labels == [CORPUS, f"{CORPUS}; {USER}", USER, NEW]
    assert [categories(x) for x in labels] == [{CORPUS}, {CORPUS, USER}, {USER}, {NEW}]
    assert NoveltyMarker(corpus).label("CCCCCCCCCCCCCC") == NEW  # only the corpus was checked
    assert NoveltyMarker().labels(["AAAAAAAAAAAAAA"]) == [""] and not NoveltyMarker().active
    assert marker.describe() == "training corpus: corpus; user list: mine"


def fake_corpus(folder: Path, shards: list[list[str]]) -> Path:
    folder.mkdir()
    names = []
    for i, keys in enumerate(shards):
        name = f"shard_{i:05d}"
        (folder / name).mkdir()
        (folder / name / "inchikey14.txt").write_text("".join(k + "\n" for k in keys))
        names.append({"name": name, "n": len(keys)})
    (folder / "manifest.json").write_text(json.dumps({"format": "msgpt-corpus", "shards": names}))
    return folder


def test_builder_reads_corpora_tables_and_mgf_and_restricts_with_within(tmp_path):
    corpus = fake_corpus(tmp_path / "corpus", [["AAAAAAAAAAAAAA", "BBBBBBBBBBBBBB"], ["CCCCCCCCCCCCCC"]])
    subset = tmp_path / "subset.tsv"
    subset.write_text("smiles\tinchikey14\tsource\nx\tAAAAAAAAAAAAAA\ts\ny\tCCCCCCCCCCCCCC\ts\n")
    out = tmp_path / FILE_NAME
    assert build_known(["--corpus", str(corpus), "--out", str(out)]) == 0
    assert len(KnownStructures.load(out)) == 3
    assert build_known(["--corpus", str(corpus), "--within", str(subset), "--out", str(out)]) == 0
    known = KnownStructures.load(out)
    assert len(known) == 2 and "BBBBBBBBBBBBBB" not in known and "within subset.tsv" in known.source

    mgf = tmp_path / "lib.mgf"
    records = [("train", "CC0", MELLEIN), ("val", "CC0", "CCO"), ("train", "CC BY-NC", "CCN")]
    mgf.write_text("".join(f"BEGIN IONS\nFOLD={f}\nLICENSE={lic}\nSMILES={s}\nPEPMASS=100\n50 1\nEND IONS\n"
                           for f, lic, s in records))
    assert build_known(["--mgf", str(mgf), "--out", str(out)]) == 0
    assert KnownStructures.load(out).contains([MELLEIN_KEY, chem.inchikey14("CCO"), chem.inchikey14("CCN")]).tolist() \
        == [True, False, False]
    assert build_known(["--corpus", str(tmp_path / "nothing"), "--out", str(out)]) == 2  # no manifest: refused


def read_rows(path: Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def test_predict_marks_candidates_from_the_bundle_corpus_and_a_user_list(tmp_path, tiny_bundle_dir, capsys):
    """The tiny model generates each fixture spectrum's reference: put two references in the bundle's
    corpus set and one in the user's list, and read the labels back from the CSV and the SDF."""
    refs = {s.id: chem.inchikey14(s.smiles) for s in fixture_spectra()}
    ids = list(refs)
    bundle_dir = Path(shutil.copytree(tiny_bundle_dir, tmp_path / "b"))
    KnownStructures.from_keys([refs[ids[0]], refs[ids[1]]], "tiny corpus").save(bundle_dir / FILE_NAME)
    assert load_bundle(bundle_dir, device="cpu").known_structures is not None
    mine = tmp_path / "mine.txt"
    mine.write_text(f"{refs[ids[1]]}\n{refs[ids[2]]}\n")
    out = tmp_path / "c.csv"
    assert msgpt(["predict", str(FIXTURE), "-o", str(out), "--model", str(bundle_dir), "--known", str(mine),
                  *FAST]) == 0
    assert "Known structures: 2 from" in capsys.readouterr().err
    header = out.read_text().splitlines()
    assert any(line.startswith("# novelty: training corpus: tiny corpus; user list: mine.txt (2 structures)")
               for line in header)
    label = {r["spectrum_id"]: r["novelty"] for r in read_rows(out) if r["is_reference"] == "yes"}
    assert label[ids[0]] == CORPUS and label[ids[1]] == f"{CORPUS}; {USER}" and label[ids[2]] == USER
    assert all(label[i] == NEW for i in ids[3:] if i in label)

    sdf = tmp_path / "c.sdf"
    assert msgpt(["predict", str(FIXTURE), "-o", str(sdf), "--model", str(bundle_dir), *FAST]) == 0
    marks = {m.GetProp("spectrum_id"): m.GetProp("novelty") for m in Chem.SDMolSupplier(str(sdf))
             if m.GetProp("is_reference") == "yes"}
    assert marks[ids[0]] == CORPUS and marks[ids[2]] == NEW  # no user list this time


def test_predict_without_any_set_leaves_the_column_empty_and_says_why(tmp_path, tiny_bundle_dir, capsys):
    out = tmp_path / "c.csv"
    assert msgpt(["predict", str(FIXTURE), "-o", str(out), "--model", str(tiny_bundle_dir), *FAST]) == 0
    assert "ships no list of its training structures" in capsys.readouterr().err
    assert {r["novelty"] for r in read_rows(out)} == {""}


def test_predict_with_an_unreadable_list_stops_before_anything_is_written(tmp_path, tiny_bundle_dir, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing here\n")
    out = tmp_path / "c.csv"
    assert msgpt(["predict", str(FIXTURE), "-o", str(out), "--model", str(tiny_bundle_dir), "--known", str(bad),
                  *FAST]) == 2
    assert "no structure found" in capsys.readouterr().err
    assert not list(tmp_path.glob("c.csv*"))  # no output, no journal
