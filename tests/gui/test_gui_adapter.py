"""The "Use adapter" switch: enabled only for a model with an adapter, and switching draws again."""

from __future__ import annotations

import shutil

import torch

SITAGLIPTIN = "MSBNK-Eawag-EA290310"


def adapted_copy(bundle_dir, dest):
    """The tiny bundle plus a LoRA adapter on the paper's placement (random B, so it changes the model)."""
    from engine.model.bundle import load_bundle, save_adapter
    from training.decoder.adapt import AdaptConfig, make_trainer, trainable_parameters

    shutil.copytree(bundle_dir, dest)
    base = load_bundle(dest, device="cpu", precision="fp32")
    model, _ = make_trainer(base.decoder, AdaptConfig(bundle=str(dest), mgf="-", out="-"))
    with torch.no_grad():
        for name, p in trainable_parameters(model):
            if "lora_B" in name:
                p.normal_(0, 0.05)
    save_adapter(model, dest)
    return dest


def test_adapter_switch_follows_the_model_and_requeries(qtbot, make_window, gui_bundle_dir, write_mgf, tmp_path):
    window = make_window()  # the tiny bundle has no adapter
    box = window.params_panel.adapter
    assert not box.isEnabled() and "no adapter" in box.toolTip()
    assert window.params_panel.params().use_adapter is False  # results say adapter=off
    assert "adapter" not in window.models.model_label.text()

    with qtbot.waitSignal(window.model_changed, timeout=30_000):
        window.models.load_model(adapted_copy(gui_bundle_dir, tmp_path / "adapted"))
    assert window.bundle.has_adapter
    assert box.isEnabled() and box.isChecked() and "fine-tuning for real spectra" in box.toolTip()
    assert window.query_params.use_adapter and "adapter on" in window.models.model_label.text()

    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([write_mgf("one.mgf", titles={SITAGLIPTIN})])
    entry = window.spectra.entries[0]
    window.select_entry(entry.key)
    with qtbot.waitSignal(window.run_finished, timeout=60_000):
        window.run_selected()
    on = entry.result
    assert on.params.use_adapter and window.bundle.adapter_active and on.n_samples == 100

    with qtbot.waitSignal(window.run_finished, timeout=60_000):  # unticking re-queries the shown spectrum
        box.setChecked(False)
    off = entry.result
    assert off.params.use_adapter is False and not window.bundle.adapter_active
    assert off.new_samples == off.n_samples == 100  # another model: every sample drawn again, none mixed
    assert "adapter off" in window.models.model_label.text()
    assert "adapter=off" in off.params.describe()


def test_adapter_box_is_unticked_without_an_adapter_and_remembered_for_models_with_one(
    qtbot, make_window, gui_bundle_dir, tmp_path
):
    adapted = adapted_copy(gui_bundle_dir, tmp_path / "adapted")
    window = make_window()  # no adapter: no tick, greyed out, as the exports say (adapter=off)
    box = window.params_panel.adapter
    assert not box.isChecked() and not box.isEnabled()

    def load(path):
        with qtbot.waitSignal(window.model_changed, timeout=30_000):
            window.models.load_model(path)

    load(adapted)
    assert box.isEnabled() and box.isChecked()  # the default: on
    box.setChecked(False)  # the user's choice...
    load(gui_bundle_dir)
    assert not box.isChecked() and not box.isEnabled()
    assert window.params_panel.params().use_adapter is False
    load(adapted)
    assert box.isEnabled() and not box.isChecked()  # ...is remembered between models
    assert window.query_params.use_adapter is False and "adapter off" in window.models.model_label.text()
    box.setChecked(True)
    load(gui_bundle_dir)
    assert not box.isChecked()
    window.close()  # and between sessions of the app: the choice, not the greyed-out box, is saved

    again = make_window(model=adapted)
    assert again.params_panel.adapter.isChecked() and again.query_params.use_adapter
    again.params_panel.adapter.setChecked(False)
    again.close()
    third = make_window(model=adapted)
    assert not third.params_panel.adapter.isChecked() and third.params_panel.adapter.isEnabled()
