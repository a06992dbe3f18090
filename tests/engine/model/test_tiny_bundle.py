"""The committed tiny bundle (tests/data/tiny_bundle) the tests run on: it loads, it belongs to the
fixture, and it still memorises the fixture's structures with a wide margin.

Nothing is retrained here and no bits are compared: another CPU trains other bits, and that is fine.
When this file fails after a change to fixture.mgf or the bundle format, rebuild the bundle with
``python scripts/build_test_bundle.py`` (see tests/data/README.md).
"""

import json

import pytest
from tiny_bundle import BUNDLE_DIR, NAME, fixture_spectra, fixture_tokenizer, reference_margins, reference_safes

from engine.model.bundle import load_bundle

FILES = {"config.json", "decoder.safetensors", "encoder.safetensors", "tokenizer.json", "calibration.json"}


def fixture_safes():
    return reference_safes([s.smiles for s in fixture_spectra()])


@pytest.fixture(scope="module")
def committed():
    return load_bundle(BUNDLE_DIR, device="cpu", precision="fp32")  # checks every file against its checksum


def test_the_committed_bundle_loads_and_is_small(committed):
    assert committed.name == NAME and committed.supported_adducts == ("[M+H]+", "[M+Na]+")
    assert not committed.has_adapter
    assert FILES <= {p.name for p in BUNDLE_DIR.iterdir()}
    assert sum(p.stat().st_size for p in BUNDLE_DIR.iterdir()) < 1_000_000


def test_its_tokenizer_is_the_fixtures(committed):
    assert committed.tokenizer.fingerprint() == fixture_tokenizer().fingerprint()
    config = json.loads((BUNDLE_DIR / "config.json").read_text())
    assert config["tokenizer_checksum"] == committed.tokenizer.fingerprint()
    longest = max(len(committed.tokenizer.encode(s)) for s in fixture_safes())
    assert longest <= committed.decoder.config.block_size  # every reference fits: the sampler can finish it


def test_it_memorises_every_fixture_structure_with_a_wide_margin(committed):
    """Every reference token has p > 0.95 (built at > 0.99) under the true, random and empty
    fingerprints: top-p 0.95 then keeps the reference's token alone, on any CPU."""
    margins = reference_margins(committed.decoder, committed.tokenizer, [s.smiles for s in fixture_spectra()])
    assert len(margins) == 10 and min(margins) > 0.95, margins
