"""Shared fixtures: a spectrum builder and the path of the test data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.spectrum import Spectrum

DATA_DIR = Path(__file__).parent / "data"


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny models gain nothing from threads, and a busy shared machine makes thread barriers slow."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def data_dir() -> Path:
    return DATA_DIR


@pytest.fixture
def make_spectrum():
    """Build a valid Spectrum (mellein, [M+H]+); keyword arguments override any field."""

    def build(**overrides) -> Spectrum:
        fields = dict(
            id="mellein",
            precursor_mz=179.0703,
            adduct="[M+H]+",
            formula="C10H10O3",
            mz=[133.0648, 151.0754, 161.0597, 179.0703],
            intensity=[21905.3, 9239.9, 96508.4, 72563.9],
        )
        fields.update(overrides)
        return Spectrum(**fields)

    return build


@pytest.fixture(scope="session")
def tiny_bundle_dir(tmp_path_factory) -> Path:
    """A tiny trained model bundle (see tests/tiny_bundle.py), built once per test session."""
    from tiny_bundle import build_tiny_bundle

    return build_tiny_bundle(tmp_path_factory.mktemp("bundle") / "tiny")


@pytest.fixture(scope="session")
def tiny_bundle(tiny_bundle_dir):
    from engine.bundle import load_bundle

    return load_bundle(tiny_bundle_dir, device="cpu")
