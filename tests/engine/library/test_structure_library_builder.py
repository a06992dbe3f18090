"""The bundled library's builder (training/bundle/structure_library.py): the licence filter, the size limit, the
attribution, reproducible bytes; and, where ../shared/data is present, that the shipped table is what it builds."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from engine.library import bundled_library_path, load_library
from training.bundle import structure_library as builder

ROOT = Path(__file__).resolve().parents[3]
MOLECULES = ROOT.parent / "shared" / "data" / "molecules.tsv.gz"

CORPUS = [
    ("CCO", "LFQSCWFLJHTTHZ", "massbank_open;npclassifier"),  # kept: massbank_open only
    ("CC(=O)O", "QTBSBXVTEAMEQO", "npclassifier"),  # dropped: no allowed source
    ("CCN", "QUSNBJAOOMFDIB", "mibig;benchmarking_platform"),  # dropped
    ("CCCl", "HRYZWHHZPQKTII", "repoRT;graph2graph_zinc;moleculenet_glambard"),  # kept: repoRT
    ("OCCO", "LYCAIKOWRPUZTN", "chemxlstm_chembl31;smilestransformer_chembl30"),  # kept unless over the size
    ("CCS", "DNJIEGIFACGWOD", "some_new_source"),  # not judged: dropped
    ("NCCO", "HZAXFHJVJLSVMW", "spectraverse_example;modelseed_metacyc"),  # kept, both
]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))


@pytest.fixture
def molecules(tmp_path):
    path = tmp_path / "molecules.tsv.gz"
    text = "smiles\tinchikey14\tsource\n" + "".join("\t".join(row) + "\n" for row in CORPUS)
    path.write_bytes(gzip.compress(text.encode()))
    return path


def shipped(folder: Path) -> list[tuple[str, ...]]:
    with gzip.open(folder / builder.TABLE, "rt") as fh:
        assert fh.readline() == "smiles\tinchikey14\tformula\tsource\n"
        return [tuple(line.rstrip("\n").split("\t")) for line in fh]


def test_every_source_of_the_corpus_is_judged():
    assert {s for s, v in builder.SOURCES.items() if v.allowed} == {
        "massbank_open", "repoRT", "spectraverse_example", "modelseed_metacyc", "chemxlstm_chembl31"}
    assert all(s.why for s in builder.SOURCES.values())


def test_the_licence_filter_keeps_allowed_sources_only(molecules, tmp_path):
    out = tmp_path / "out"
    assert builder.main(["build", "--molecules", str(molecules), "--out", str(out)]) == 0
    assert shipped(out) == [
        ("CCO", "LFQSCWFLJHTTHZ", "C2H6O", "massbank_open"),
        ("CCCl", "HRYZWHHZPQKTII", "C2H5Cl", "repoRT"),
        ("OCCO", "LYCAIKOWRPUZTN", "C2H6O2", "chemxlstm_chembl31"),
        ("NCCO", "HZAXFHJVJLSVMW", "C2H7NO", "spectraverse_example;modelseed_metacyc"),
    ]
    text = (out / builder.ATTRIBUTION).read_text()
    assert "**CC BY-SA 4.0**" in text and "| massbank_open |" in text and "GuptaVishu2002" in text
    assert "| npclassifier | MIT (repository); source databases' terms | 2 | 1 |" in text
    assert "| some_new_source | unknown | 1 | 1 | not judged: not shipped |" in text
    lib = load_library(out / builder.TABLE, trust_keys=True)  # the engine reads what the builder writes
    assert len(lib) == 4 and lib.record(3).source == "spectraverse_example;modelseed_metacyc"


def test_optional_sources_go_first_when_over_the_size_limit(molecules, tmp_path):
    out = tmp_path / "small"
    _, sources, _ = builder.build(molecules, out, max_mb=1e-6)
    assert "chemxlstm_chembl31" not in sources
    assert [row[0] for row in shipped(out)] == ["CCO", "CCCl", "NCCO"]
    text = (out / builder.ATTRIBUTION).read_text()
    assert "| chemxlstm_chembl31 |" in text and "left out to keep the table under 1e-06 MB" in text


def test_a_rebuild_gives_the_same_bytes(molecules, tmp_path):
    builder.build(molecules, tmp_path / "a")
    builder.build(molecules, tmp_path / "b")
    assert (tmp_path / "a" / builder.TABLE).read_bytes() == (tmp_path / "b" / builder.TABLE).read_bytes()


def test_a_file_that_is_not_the_corpus_is_refused(tmp_path, capsys):
    path = tmp_path / "other.tsv"
    path.write_text("name\tsmiles\nx\tCCO\n")
    assert builder.main(["build", "--molecules", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "expected the columns smiles, inchikey14, source" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not MOLECULES.is_file(), reason="needs ../shared/data/molecules.tsv.gz")
def test_the_shipped_table_is_what_the_builder_makes(tmp_path):
    builder.build(MOLECULES, tmp_path)
    assert (tmp_path / builder.TABLE).read_bytes() == bundled_library_path().read_bytes()
    shipped_attribution = (bundled_library_path().parent / builder.ATTRIBUTION).read_text()
    assert (tmp_path / builder.ATTRIBUTION).read_text() == shipped_attribution


def test_a_salt_is_shipped_standardised_with_its_neutral_formula(molecules, tmp_path):
    """What the app's trusted build takes as written must be what its own standardisation would make."""
    path = tmp_path / "salts.tsv.gz"
    text = "smiles\tinchikey14\tsource\nCC(=O)[O-].[Na+]\tVMHLLURERBWHNL\tmassbank_open\nC1CC(\tXXXXXXXXXXXXXX\trepoRT\n"
    path.write_bytes(gzip.compress(text.encode()))
    out = tmp_path / "out"
    assert builder.main(["build", "--molecules", str(path), "--out", str(out)]) == 0
    assert shipped(out) == [("CC(=O)O", "QTBSBXVTEAMEQO", "C2H4O2", "massbank_open")]  # the bad SMILES left out
