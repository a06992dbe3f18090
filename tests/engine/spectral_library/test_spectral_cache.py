"""Spectral library indexes kept in the data folder (engine/spectral_library/cache.py, index.py): reuse, rebuild
on change, damaged indexes, cancelling, files without pickle."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest
from progress_events import drain

from engine.errors import Cancelled
from engine.spectral_library import (
    SpectralLibraryError,
    SpectralLibraryProgress,
    load_spectral_library,
    open_spectral_libraries,
    open_spectral_library,
    search,
    spectral_cache_dir,
)
from engine.spectral_library import cache as cache_module


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def mgf_text(n, seed=0, polarity="positive"):
    rng = np.random.default_rng(seed)
    blocks = []
    for i in range(n):
        precursor = 120.0 + 0.37 * i
        mz = np.sort(rng.uniform(50.0, precursor - 3.0, size=6))
        peaks = "".join(f"{m:.4f} {rng.uniform(1, 100):.1f}\n" for m in mz)
        blocks.append(f"BEGIN IONS\nTITLE=S{i}\nPEPMASS={precursor:.4f}\nIONMODE={polarity}\nNAME=compound {i}\n"
                      f"{peaks}END IONS\n")
    return "".join(blocks)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "mine.mgf"
    path.write_text(mgf_text(30))
    return path


def index_files(folder):
    return sorted(p.name for p in folder.glob("*") if p.is_file())


def test_indexed_once_then_reused(source, monkeypatch):
    seen, library = drain(open_spectral_library(source))
    assert all(isinstance(e, SpectralLibraryProgress) for e in seen) and seen[-1].text.startswith("Saving")
    assert len(library) == 30 and library.name == "mine.mgf"
    folder = spectral_cache_dir()
    files = index_files(folder)
    assert files == [f"{library.checksum}.json", f"{library.checksum}.npz"]
    with zipfile.ZipFile(folder / files[1]) as z:  # plain .npy arrays, nothing pickled
        assert all(name.endswith(".npy") for name in z.namelist())
    with np.load(folder / files[1], allow_pickle=False) as z:
        assert "positive__all_ions_mz" in z.files and "peak_offsets" in z.files

    def no_build(*args, **kwargs):
        raise AssertionError("indexed again")

    monkeypatch.setattr(cache_module, "build_library", no_build)
    seen, again = drain(open_spectral_library(source, name="Mine"))
    assert seen == [] and again.name == "Mine" and again.checksum == library.checksum
    assert again.columns == library.columns
    query = library.record(4)
    mz, intensity = library.peaks(4)

    class Query:
        precursor_mz, polarity = query.precursor_mz, "positive"

    Query.mz, Query.intensity = mz, intensity
    a, b = search(library, Query), search(again, Query)
    assert [(h.row, h.similarity, h.matched_peaks) for h in a.hits] == [(h.row, h.similarity, h.matched_peaks)
                                                                         for h in b.hits]
    assert a.hits[0].row == 4

    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))  # touched, not changed
    seen, touched = drain(open_spectral_library(source))
    assert [e.text for e in seen] == ["Checking mine.mgf"] and touched.checksum == library.checksum


def test_an_edited_file_is_indexed_again_and_its_old_index_goes(source):
    first = load_spectral_library(source)
    source.write_text(mgf_text(12, seed=9))
    second = load_spectral_library(source)
    assert len(second) == 12 and second.checksum != first.checksum
    assert index_files(spectral_cache_dir()) == [f"{second.checksum}.json", f"{second.checksum}.npz"]


def test_a_damaged_index_is_rebuilt(source):
    library = load_spectral_library(source)
    npz = spectral_cache_dir() / f"{library.checksum}.npz"
    npz.write_bytes(b"not a zip")
    again = load_spectral_library(source)
    assert len(again) == 30
    with np.load(npz, allow_pickle=False) as z:
        assert "peak_mz" in z.files


def test_index_and_metadata_of_different_builds_are_not_mixed(source):
    library = load_spectral_library(source)
    folder = spectral_cache_dir()
    json_file = folder / f"{library.checksum}.json"
    text = json_file.read_text()
    json_file.write_text(text.replace('"build_id":"', '"build_id":"x'))
    again = load_spectral_library(source)  # rebuilt, consistent again
    assert len(again) == 30 and '"build_id":"x' not in json_file.read_text()


def test_cancel_leaves_no_partial_file(tmp_path):
    path = tmp_path / "big.mgf"
    path.write_text(mgf_text(1200))
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(Cancelled):
        drain(open_spectral_library(path, cancel=cancel))
    folder = spectral_cache_dir()
    assert not folder.exists() or [p for p in folder.rglob("*") if p.is_file()] == []


def test_unwritable_data_folder_still_gives_the_library(source, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("engine.spectral_library.index.SpectralLibrary.save", refuse)
    library = load_spectral_library(source)
    assert len(library) == 30 and "cannot write" in library.info["cache_error"]


def test_several_files_one_failing(source, tmp_path):
    bad = tmp_path / "bad.msp"
    bad.write_text("no records here\n")
    libraries, failures = drain(open_spectral_libraries([source, bad]))[1]
    assert [lib.name for lib in libraries] == ["mine.mgf"]
    assert len(failures) == 1 and isinstance(failures[0], SpectralLibraryError) and "bad.msp" in str(failures[0])


def test_missing_file(tmp_path):
    with pytest.raises(SpectralLibraryError, match="cannot be opened"):
        load_spectral_library(tmp_path / "gone.msp")
