"""Untrusted model files: nothing is ever unpickled, and every broken bundle gets a clear message."""

import json
import pickle
import shutil
import struct

import pytest
import torch

from engine.errors import BundleError
from engine.model.bundle import load_bundle


@pytest.fixture
def bundle_copy(tiny_bundle_dir, tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, dst)
    return dst


def edit_config(bundle, change) -> None:
    path = bundle / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


class _Evil:
    """Unpickling this touches a marker file: proof that code in a pickle ran."""

    marker = ""

    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(_Evil.marker),))


def no_unpickling(*args, **kwargs):
    raise AssertionError("a bundle was unpickled")


def test_loading_a_bundle_unpickles_nothing(tiny_bundle_dir, monkeypatch):
    for target, name in [(pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load")]:
        monkeypatch.setattr(target, name, no_unpickling)
    bundle = load_bundle(tiny_bundle_dir, device="cpu")
    assert bundle.decoder is not None and bundle.tokenizer.vocab_size > 0


def test_adapter_loading_unpickles_nothing(bundle_copy, monkeypatch):
    from peft import LoraConfig, get_peft_model

    base = load_bundle(bundle_copy, device="cpu")
    lora = get_peft_model(base.decoder, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                   init_lora_weights=False))
    lora.save_pretrained(bundle_copy / "adapter")
    for target, name in [(pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load")]:
        monkeypatch.setattr(target, name, no_unpickling)
    assert load_bundle(bundle_copy, device="cpu").has_adapter


@pytest.mark.parametrize("name", ["model.safetensors", "weights.model", "bundle"])
def test_a_pickle_is_refused_by_its_content_whatever_its_name_and_never_runs(tmp_path, name):
    _Evil.marker = str(tmp_path / "pwned")
    evil = tmp_path / name
    evil.write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(BundleError, match=r"is a PyTorch pickle checkpoint\. msgpt never loads pickles: unpickling "
                                          r"can run arbitrary code hidden in the file"):
        load_bundle(evil)
    assert not (tmp_path / "pwned").exists()


def test_a_torch_save_zip_is_refused_whatever_its_name(tmp_path):
    path = tmp_path / "checkpoint.weights"
    torch.save({"w": torch.zeros(2)}, path)
    with pytest.raises(BundleError, match="is a PyTorch pickle checkpoint"):
        load_bundle(path)


def test_a_pickle_inside_a_bundle_in_place_of_weights_is_refused_and_never_runs(bundle_copy, tmp_path):
    _Evil.marker = str(tmp_path / "pwned")
    edit_config(bundle_copy, lambda c: c.pop("files"))  # no checksums to catch it first
    (bundle_copy / "decoder.safetensors").write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(BundleError, match=r"^decoder\.safetensors is truncated or corrupt \(Error while deserializing "
                                          r"header: .*\); copy the bundle again\.$"):
        load_bundle(bundle_copy)
    assert not (tmp_path / "pwned").exists()


def _header_too_large(bundle):
    f = bundle / "decoder.safetensors"
    f.write_bytes(struct.pack("<Q", 10**15) + f.read_bytes()[8:])


def _empty_weights(bundle):
    (bundle / "encoder.safetensors").write_bytes(b"")


@pytest.mark.parametrize(
    "damage, message",
    [
        (_header_too_large, r"^decoder\.safetensors is truncated or corrupt \(Error while deserializing header: header "
                            r"too large\); copy the bundle again\.$"),
        (_empty_weights, r"^encoder\.safetensors is truncated or corrupt \(Error while deserializing header: header "
                         r"too small\); copy the bundle again\.$"),
    ],
)
def test_corrupt_safetensors_without_checksums(bundle_copy, damage, message):
    edit_config(bundle_copy, lambda c: c.pop("files"))
    damage(bundle_copy)
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle_copy)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.update(format="other"), r"config\.json is not an msgpt bundle config \(format 'other'\)"),
        (lambda c: c.update(format_version="2"), r"format_version '2' is not a whole number; copy the bundle again"),
        (lambda c: c.update(format_version=2), r"was written in bundle format 2, newer than this msgpt understands "
                                               r"\(1\)\. Upgrade msgpt"),
        (lambda c: c.update(files=["decoder.safetensors"]), r"`files` must map file names to sha256 checksums"),
        (lambda c: c.update(decoder=[1, 2]), r"config\.json: the model sections are malformed"),
        (lambda c: c["decoder"].update(n_layer="two"),
         r"config\.json: `n_layer` must be a positive integer, got 'two'"),
        (lambda c: c.pop("encoder"), r"config\.json lacks the 'encoder' section"),
    ],
)
def test_malformed_config_gives_a_clear_message(bundle_copy, change, message):
    edit_config(bundle_copy, change)
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle_copy)


def test_config_that_is_not_an_object(bundle_copy):
    (bundle_copy / "config.json").write_text("[1, 2]")
    with pytest.raises(BundleError, match=r"is not an msgpt bundle config \(format 'a JSON list'\)"):
        load_bundle(bundle_copy)


def test_calibration_of_the_wrong_shape(bundle_copy):
    edit_config(bundle_copy, lambda c: c.pop("files"))
    (bundle_copy / "calibration.json").write_text("[]")
    with pytest.raises(BundleError, match=r"calibration\.json"):  # named, never a bare AttributeError
        load_bundle(bundle_copy)
