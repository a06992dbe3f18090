"""Model bundles: round trip, and a clear message for every way a bundle can be broken."""

import json
import pickle
import shutil

import pytest
import torch
from tiny_bundle import fixture_spectra

from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.errors import BundleError, ConfigError
from engine.model.bundle import load_bundle, resolve_device


@pytest.fixture
def bundle_copy(tiny_bundle_dir, tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, dst)
    return dst


def test_round_trip_weights_and_config(tiny_bundle_dir, tiny_bundle):
    again = load_bundle(tiny_bundle_dir, device="cpu")
    for a, b in zip(tiny_bundle.decoder.state_dict().values(), again.decoder.state_dict().values()):
        assert torch.equal(a, b)
    assert again.checksum == tiny_bundle.checksum
    assert again.tokenizer.vocab_size == again.decoder.config.vocab_size
    assert again.supported_adducts == ("[M+H]+", "[M+Na]+")


def test_missing_file(bundle_copy):
    (bundle_copy / "encoder.safetensors").unlink()
    with pytest.raises(BundleError, match="incomplete: encoder.safetensors is missing"):
        load_bundle(bundle_copy)


def test_truncated_safetensors(bundle_copy):
    f = bundle_copy / "decoder.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(BundleError, match="does not match its checksum"):
        load_bundle(bundle_copy)


def test_truncated_safetensors_without_recorded_checksum(bundle_copy):
    cfg = json.loads((bundle_copy / "config.json").read_text())
    del cfg["files"]
    (bundle_copy / "config.json").write_text(json.dumps(cfg))
    f = bundle_copy / "decoder.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(BundleError, match="decoder.safetensors is truncated or corrupt"):
        load_bundle(bundle_copy)


def test_shape_mismatch(bundle_copy):
    cfg = json.loads((bundle_copy / "config.json").read_text())
    cfg["decoder"]["count_hidden"] += 8
    (bundle_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleError, match=r"tensor `formula_encoder\..*` has shape .* expects"):
        load_bundle(bundle_copy)


def test_newer_format(bundle_copy):
    cfg = json.loads((bundle_copy / "config.json").read_text())
    cfg["format_version"] = 99
    (bundle_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleError, match="newer than this msgpt understands.*Upgrade msgpt"):
        load_bundle(bundle_copy)


def test_tokenizer_of_another_model(bundle_copy):
    tok = json.loads((bundle_copy / "tokenizer.json").read_text())
    tok["vocab"] = tok["vocab"][:-1]
    (bundle_copy / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(BundleError, match="tokenizer"):
        load_bundle(bundle_copy)


def test_not_a_bundle(tmp_path):
    with pytest.raises(BundleError, match="does not exist"):
        load_bundle(tmp_path / "nope")
    with pytest.raises(BundleError, match="config.json is missing"):
        load_bundle(tmp_path)


class _Evil:
    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(MARKER),))


MARKER = ""


def test_pickle_is_refused_and_never_executed(tmp_path):
    global MARKER
    MARKER = str(tmp_path / "pwned")
    evil = tmp_path / "model.pt"
    evil.write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(BundleError, match="never loads pickles"):
        load_bundle(evil)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    shutil.copy(evil, folder / "pytorch_model.bin")
    with pytest.raises(BundleError, match=r"pickle checkpoints \(pytorch_model.bin\)"):
        load_bundle(folder)
    assert not (tmp_path / "pwned").exists()


def test_adapter_is_loaded_merged_and_switchable(bundle_copy):
    from peft import LoraConfig, get_peft_model

    base = load_bundle(bundle_copy, device="cpu")
    lora = get_peft_model(base.decoder, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                   init_lora_weights=False))
    lora.save_pretrained(bundle_copy / "adapter")
    assert (bundle_copy / "adapter" / "adapter_model.safetensors").is_file()

    b = load_bundle(bundle_copy, device="cpu")
    assert b.has_adapter and b.adapter_active
    assert b.checksum != base.checksum
    on = {k: v.clone() for k, v in b.decoder.state_dict().items()}
    b.set_adapter(False)
    fresh = load_bundle(bundle_copy, device="cpu", use_adapter=False)
    assert all(torch.equal(v, fresh.decoder.state_dict()[k]) for k, v in b.decoder.state_dict().items())
    assert any(not torch.equal(on[k], v) for k, v in b.decoder.state_dict().items())
    # the pipeline switches it per run
    s = fixture_spectra()[0]
    list(SpectrumSession(b, s).run(QueryParams(use_adapter=True)))
    assert b.adapter_active


def test_adapter_pickle_is_refused(bundle_copy):
    (bundle_copy / "adapter").mkdir()
    (bundle_copy / "adapter" / "adapter_model.bin").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(BundleError, match="adapter_model.bin are pickles"):
        load_bundle(bundle_copy)


def test_device_resolution():
    dev, msg = resolve_device("cpu")
    assert dev.type == "cpu" and "CPU" in msg
    if not torch.cuda.is_available():
        dev, msg = resolve_device("cuda")
        assert dev.type == "cpu" and "not available" in msg
    with pytest.raises(ConfigError, match="Unknown device 'tpu'"):
        resolve_device("tpu")


def test_precision_fp32_and_auto(tiny_bundle_dir, monkeypatch):
    fp32 = load_bundle(tiny_bundle_dir, device="cpu", precision="fp32")
    assert next(fp32.decoder.parameters()).dtype == torch.float32
    assert "(fp32)" in fp32.describe()
    monkeypatch.setattr("engine.model.bundle.native_bf16", lambda device: False)
    assert load_bundle(tiny_bundle_dir, device="cpu").dtype == torch.float32  # auto: no native bf16 → fp32
    with pytest.raises(ConfigError, match="lacks native bf16"):
        load_bundle(tiny_bundle_dir, device="cpu", precision="bf16")
    monkeypatch.setattr("engine.model.bundle.native_bf16", lambda device: True)
    bf16 = load_bundle(tiny_bundle_dir, device="cpu")
    assert next(bf16.decoder.parameters()).dtype == torch.bfloat16
    assert next(bf16.encoder.parameters()).dtype == torch.float32  # thresholds were calibrated in fp32
    with pytest.raises(ConfigError, match="Unknown precision 'fp64'"):
        load_bundle(tiny_bundle_dir, device="cpu", precision="fp64")
