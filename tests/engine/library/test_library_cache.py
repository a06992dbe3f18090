"""Libraries kept in the data folder (engine/library/cache.py): reuse, rebuild on change, cancel, failures."""

from __future__ import annotations

import gzip
import os

import pytest
from progress_events import drain

from engine.chem import molecules as chem
from engine.errors import Cancelled
from engine.library import (
    LibraryError,
    LibraryProgress,
    StructureLibrary,
    bundled_library_path,
    library_cache_dir,
    load_library,
    open_libraries,
    open_library,
)
from engine.library import build as build_module
from engine.library import cache as cache_module

ROWS = ["CCO", "CC(=O)O", "c1ccccc1O", "CCN", "CCCl", "OCCO", "CC(C)O", "CCOC", "CN(C)C", "C1CCCCC1",
        "CCS", "CCBr", "NCCO", "CC=O", "C#N", "CCC#N", "OC(=O)C(=O)O", "c1ccncc1", "Cc1ccccc1", "CCCCO"]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("SMILES,Name\n" + "".join(f"{s},compound {i}\n" for i, s in enumerate(ROWS)))
    return path


def indexes():
    return sorted(p.name for p in library_cache_dir().glob("*.npz"))


def test_first_open_builds_and_keeps_the_index_in_the_data_folder(source, home):
    seen, lib = drain(open_library(source))
    assert len(lib) == len(ROWS) and lib.name == "mine.csv"
    assert all(isinstance(e, LibraryProgress) and 0 <= e.done <= e.total for e in seen)
    texts = " | ".join(e.text for e in seen)
    assert "Checking mine.csv" in texts and "Indexing mine.csv" in texts and "Saving" in texts
    assert library_cache_dir() == home / "data" / "libraries"
    assert indexes() == [f"{lib.checksum}.npz"]


def test_an_unchanged_file_is_opened_from_its_index_without_reading_it(source, monkeypatch):
    first = load_library(source)
    monkeypatch.setattr(cache_module, "build_library", None)  # building again would fail
    monkeypatch.setattr(cache_module, "hash_file", None)  # so would hashing it
    seen, again = drain(open_library(source, name="My list"))
    assert seen == []
    assert again.name == "My list" and again.checksum == first.checksum and len(again) == len(first)


def test_a_touched_but_unchanged_file_is_hashed_not_rebuilt(source, monkeypatch):
    first = load_library(source)
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 5_000_000_000))
    monkeypatch.setattr(cache_module, "build_library", None)
    seen, again = drain(open_library(source))
    assert [e.text for e in seen] == ["Checking mine.csv"]
    assert again.checksum == first.checksum
    seen, _ = drain(open_library(source))  # the stamp was renewed
    assert seen == []


def test_a_changed_file_is_rebuilt_and_its_old_index_dropped(source):
    first = load_library(source)
    source.write_text(source.read_text() + "CCCCCCO,hexanol\n")
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 5_000_000_000))
    second = load_library(source)
    assert len(second) == len(first) + 1 and second.checksum != first.checksum
    assert indexes() == [f"{second.checksum}.npz"]


def test_the_same_file_in_two_places_shares_one_index(source, tmp_path, monkeypatch):
    first = load_library(source)
    copy = tmp_path / "copy.csv"
    copy.write_bytes(source.read_bytes())
    monkeypatch.setattr(cache_module, "build_library", None)
    assert load_library(copy).checksum == first.checksum
    assert indexes() == [f"{first.checksum}.npz"]


def test_a_corrupt_index_is_rebuilt(source):
    first = load_library(source)
    (library_cache_dir() / f"{first.checksum}.npz").write_bytes(b"garbage")
    assert len(load_library(source)) == len(ROWS)
    assert len(StructureLibrary.load(library_cache_dir() / f"{first.checksum}.npz")) == len(ROWS)


def test_cancel_mid_build_raises_and_leaves_no_file(source, monkeypatch):
    monkeypatch.setattr(build_module, "EVERY", 3)
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 3  # after the hash and two progress checks of the build

    gen = open_library(source, cancel=cancel)
    seen = []
    with pytest.raises(Cancelled):
        for event in gen:
            seen.append(event.text)
    assert any(t.startswith("Indexing mine.csv: ") for t in seen)
    folder = library_cache_dir()
    assert not folder.exists() or not [p for p in folder.rglob("*") if p.is_file()]


def test_a_failed_write_leaves_no_partial_file(source, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("numpy.savez", fail)
    lib = load_library(source)  # still returned: the run goes on without a kept index
    assert len(lib) == len(ROWS) and "No space left" in lib.info["cache_error"]
    folder = library_cache_dir()
    assert not folder.exists() or not [p for p in folder.rglob("*") if p.is_file()]


def test_open_libraries_reports_a_failing_one_and_keeps_the_others(source, tmp_path):
    (tmp_path / "junk.smi").write_text("xx(\n")
    missing = tmp_path / "missing.csv"
    _, (libs, failures) = drain(open_libraries([missing, source, tmp_path / "junk.smi"]))
    assert [lib.name for lib in libs] == ["mine.csv"]
    assert [type(e) for e in failures] == [LibraryError, LibraryError]
    assert "missing.csv" in str(failures[0]) and "junk.smi" in str(failures[1])


def test_the_bundled_table_is_shipped_with_its_attribution():
    path = bundled_library_path()
    assert path.is_file() and (path.parent / "ATTRIBUTION.md").is_file()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        assert fh.readline() == "smiles\tinchikey14\tformula\tsource\n"
        first = fh.readline().rstrip("\n").split("\t")
    assert len(first) == 4 and len(first[1]) == 14 and first[2] == chem.mol_formula(chem.mol_from_smiles(first[0]))
    assert first[3]


def test_a_trusted_table_is_taken_as_written_and_fingerprinted_when_asked(tmp_path, monkeypatch):
    """The bundled table's build (trust_keys, a formula column) runs no RDKit per row: the mass comes from the
    formula, a bad formula is reported by line, and fingerprints are computed on first use and equal RDKit's."""
    path = tmp_path / "trusted.tsv"
    path.write_text("smiles\tinchikey14\tformula\tsource\n"
                    "CCO\tLFQSCWFLJHTTHZ\tC2H6O\ta\n"
                    "OCC\tLFQSCWFLJHTTHZ\tC2H6O\tb\n"
                    "CCN\tQUSNBJAOOMFDIB\tC2H7Q\ta\n"
                    "c1ccccc1O\tISWSIDIOOBJBQZ\tC6H6O\ta\n")
    monkeypatch.setattr(build_module, "parse_structure", lambda raw: pytest.fail(f"RDKit ran on {raw.where}"))
    lib = load_library(path, trust_keys=True, folder=tmp_path / "idx")
    assert len(lib) == 2 and lib.info["n_duplicates"] == 1 and lib.record(0).source == "a;b"
    assert lib.info["n_problems"] == 1 and lib.problems[0].startswith("line 4:") and "C2H7Q" in lib.problems[0]
    phenol = lib.row_of_key("ISWSIDIOOBJBQZ")
    assert lib.record(phenol).mass == pytest.approx(94.041865, abs=1e-5)
    assert lib.lazy_bits and list(lib.bits(phenol)) == list(chem.morgan_bits(chem.mol_from_smiles("c1ccccc1O")))
    again = load_library(path, trust_keys=True, folder=tmp_path / "idx")  # from the kept index, still lazy
    assert again.lazy_bits and list(again.bits(phenol)) == list(lib.bits(phenol))
