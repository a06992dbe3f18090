"""Shared fixtures: a spectrum builder, the path of the test data folder, the committed tiny bundle."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.spectra.spectrum import Spectrum

DATA_DIR = Path(__file__).parent / "data"


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny models gain nothing from threads, and a busy shared machine makes thread barriers slow."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True, scope="session")
def fp32_decoding():
    """``auto`` precision is fp32 in the tests, on every CPU.

    ``auto`` decodes in bfloat16 where the CPU computes it natively (AVX-512 BF16, AMX), which rounds
    differently from CPU to CPU; the tests ask for the same arithmetic everywhere. Tests of ``auto``
    itself patch ``native_bf16`` again; subprocesses get ``--precision fp32``.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("engine.model.bundle.native_bf16", lambda device: False)
        yield


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
    """The committed tiny bundle (tests/data/tiny_bundle, built by scripts/build_test_bundle.py), copied
    once per session so that no test can change the committed files. Nothing is trained."""
    from tiny_bundle import BUNDLE_DIR

    return Path(shutil.copytree(BUNDLE_DIR, tmp_path_factory.mktemp("bundle") / "tiny"))


@pytest.fixture(scope="session")
def tiny_bundle(tiny_bundle_dir):
    from engine.model.bundle import load_bundle

    return load_bundle(tiny_bundle_dir, device="cpu", precision="fp32")


@pytest.fixture
def captured(monkeypatch):
    """The spectra ``msgpt predict`` hands to the model, in order."""
    from engine.cli import predict as cli

    seen = []
    real = cli._elucidate_one

    def spy(bundle, spectrum, params, bar, libraries=()):
        seen.append(spectrum)
        return real(bundle, spectrum, params, bar, libraries)

    monkeypatch.setattr(cli, "_elucidate_one", spy)
    return seen
