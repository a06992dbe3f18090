"""training.bundle.build_bundle: a bundle and its model card from the runs of the training stages."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from tiny_corpus import tiny_config, write_synthetic_corpus
from labelled_spectra import tiny_config as encoder_config
from labelled_spectra import write_labelled_mgf

from engine.errors import ConfigError
from engine.model.bundle import load_bundle
from engine.model.querying import Calibration
from training.bundle.build_bundle import _simulated_line
from training.bundle.build_bundle import main as build_main
from training.decoder.pretrain import pretrain
from training.encoder.train_encoder import train_encoder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two pretraining stages (the second starts from the first's decoder) and an encoder run."""
    root = tmp_path_factory.mktemp("runs")
    corpus = write_synthetic_corpus(root / "corpus")
    list(pretrain(tiny_config(corpus, root / "stage1", max_steps=3)))
    list(pretrain(tiny_config(corpus, root / "stage2", max_steps=2, seed=1, init_decoder=str(root / "stage1"))))
    mgf = write_labelled_mgf(root / "labelled.mgf")
    list(train_encoder(encoder_config(mgf, root / "encoder", max_steps=3, encoder={"fp_bits": 4096})))
    rng = np.random.default_rng(0)
    Calibration.from_posteriors(rng.random((20, 4096)) ** 8, rng.integers(20, 60, 20)).save(root / "calibration.json")
    return root


def _build(runs, out, *extra):
    return build_main(["--decoder", str(runs / "stage2"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "test-model", "--out", str(out),
                       *extra])


def test_bundle_records_every_decoder_stage_and_its_card_names_them(runs, tmp_path):
    assert _build(runs, tmp_path / "b1") == 0
    bundle = load_bundle(tmp_path / "b1", device="cpu")
    stages = bundle.config["training"]["decoder_stages"]
    assert [s["step"] for s in stages] == [3, 2]
    assert stages[0]["source"] == "stage1/step_00000003" and stages[1]["source"] == "stage2/step_00000002"
    card = (tmp_path / "b1" / "MODEL_CARD.md").read_text()
    assert "Decoder stage 1: 3 AdamW steps (stage1/step_00000003)" in card
    assert "Decoder stage 2 (from those weights" in card and "5 pretraining steps" in card
    assert "Not evaluated yet" in card

    # a third stage started from the bundle itself carries all three (the bundle lists the first two)
    corpus = runs / "corpus"
    list(pretrain(tiny_config(corpus, tmp_path / "stage3", max_steps=1, init_decoder=str(tmp_path / "b1"))))
    assert build_main(["--decoder", str(tmp_path / "stage3"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "m3", "--out",
                       str(tmp_path / "b3")]) == 0
    stages = json.loads((tmp_path / "b3" / "config.json").read_text())["training"]["decoder_stages"]
    assert [s["step"] for s in stages] == [3, 2, 1]
    # replacing the very bundle the new stage started from (--force): its stages are read first
    assert build_main(["--decoder", str(tmp_path / "stage3"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "m3", "--out",
                       str(tmp_path / "b1"), "--force"]) == 0
    stages = json.loads((tmp_path / "b1" / "config.json").read_text())["training"]["decoder_stages"]
    assert [s["step"] for s in stages] == [3, 2, 1]
    # and once more: b1, which stage3 started from, now lists stage3 itself; a stage never precedes itself
    assert build_main(["--decoder", str(tmp_path / "stage3"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "m4", "--out",
                       str(tmp_path / "b4")]) == 0
    stages = json.loads((tmp_path / "b4" / "config.json").read_text())["training"]["decoder_stages"]
    assert [s["step"] for s in stages] == [3, 2, 1]
    assert "6 pretraining steps" in (tmp_path / "b4" / "MODEL_CARD.md").read_text()


def test_the_bundle_ships_the_structures_of_every_pretraining_corpus(runs, tmp_path, capsys):
    from engine.model.known import KnownStructures
    from training.bundle.known_structures import corpus_keys

    assert _build(runs, tmp_path / "b") == 0
    bundle = load_bundle(tmp_path / "b", device="cpu")  # its checksum in config.json is checked
    keys = sorted(set(corpus_keys(runs / "corpus")))
    assert bundle.known_structures is not None and len(bundle.known_structures) == len(keys)
    assert bundle.known_structures.contains(keys).all() and "corpus" in bundle.known_structures.source
    assert "known_structures.npz" in bundle.config["files"]
    card = (tmp_path / "b" / "MODEL_CARD.md").read_text()
    assert "## Files beside the weights" in card
    assert "**Decoder pretraining, last stage**" in card and "All stages together" not in card  # one corpus

    # a stage started from a bundle: that bundle's set joins the new corpus's
    other = write_synthetic_corpus(tmp_path / "other_corpus", seed=1)  # other random InChIKey blocks
    more = sorted(set(corpus_keys(other)) - set(keys))
    list(pretrain(tiny_config(other, tmp_path / "stage3", max_steps=1, init_decoder=str(tmp_path / "b"))))
    assert build_main(["--decoder", str(tmp_path / "stage3"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "m3", "--out",
                       str(tmp_path / "b3")]) == 0
    known = KnownStructures.load(tmp_path / "b3" / "known_structures.npz")
    assert len(more) > 0 and len(known) == len(keys) + len(more) and known.contains(keys + more).all()
    assert "bundle test-model" in known.source  # the bundle's name, not its folder's ("b")
    card = (tmp_path / "b3" / "MODEL_CARD.md").read_text()  # the last stage's corpus, and all stages' union
    assert f"All stages together read {len(known):,} distinct structures" in card

    # a corpus that is gone: no set, and the command says how to build one
    shutil.rmtree(other)
    assert build_main(["--decoder", str(tmp_path / "stage3"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "m3", "--out",
                       str(tmp_path / "b4")]) == 0
    assert not (tmp_path / "b4" / "known_structures.npz").exists()
    assert "python -m training.bundle.known_structures" in capsys.readouterr().err


def test_bit_legend_from_the_corpus_on_request(runs, tmp_path):
    smiles = ["CCO", "c1ccccc1O", "CC(=O)O", "CCN"]
    for shard in sorted((runs / "corpus").glob("shard_*")):  # the synthetic corpus has no SMILES: give it some
        n = len((shard / "inchikey14.txt").read_text().splitlines())
        (shard / "smiles.txt").write_text("".join(smiles[i % 4] + "\n" for i in range(n)))
    assert _build(runs, tmp_path / "b", "--bit-legend", "20") == 0
    legend = load_bundle(tmp_path / "b", device="cpu").bit_legend
    assert legend is not None and legend.n_molecules == 20 and "from corpus" in legend.source
    assert "bit_legend.json.gz" in (tmp_path / "b" / "MODEL_CARD.md").read_text()


def test_a_bundle_from_before_decoder_stages_counts_as_one_stage(runs, tmp_path):
    assert _build(runs, tmp_path / "old") == 0
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    config["training"] = {"decoder_step": 5}  # what bundles written before decoder_stages recorded
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    list(pretrain(tiny_config(runs / "corpus", tmp_path / "next", max_steps=1, init_decoder=str(tmp_path / "old"))))
    assert build_main(["--decoder", str(tmp_path / "next"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "m", "--out",
                       str(tmp_path / "new")]) == 0
    card = (tmp_path / "new" / "MODEL_CARD.md").read_text()
    assert "- Decoder stage 1: 5 AdamW steps (bundle test-model)." in card and "6 pretraining steps" in card


def test_evaluation_table_goes_into_the_card_and_an_existing_bundle_is_kept(runs, tmp_path, capsys):
    table = tmp_path / "eval.md"
    table.write_text("| variant | Top-1 |\n| --- | --- |\n| band | 12.5 |\n")
    assert _build(runs, tmp_path / "b", "--evaluation", str(table)) == 0
    assert "| band | 12.5 |" in (tmp_path / "b" / "MODEL_CARD.md").read_text()
    assert _build(runs, tmp_path / "b") == 1
    assert "exists; pass --force" in capsys.readouterr().err


def test_a_folder_without_a_decoder_is_refused(runs, tmp_path):
    with pytest.raises(ConfigError, match="neither a decoder checkpoint, a pretraining run"):
        from training.bundle.build_bundle import resolve_decoder_checkpoint

        resolve_decoder_checkpoint(tmp_path)


def test_a_new_decoder_beside_the_encoder_of_an_existing_bundle(runs, tmp_path):
    from pathlib import Path

    from engine.model.bundle import add_bundle_file

    assert _build(runs, tmp_path / "first") == 0
    legend = Path(__file__).resolve().parents[3] / "resources" / "default_model" / "bit_legend.json.gz"
    add_bundle_file(tmp_path / "first", legend)  # it describes the 4096-bit fingerprint, as the encoder's
    list(pretrain(tiny_config(runs / "corpus", tmp_path / "next", max_steps=1, init_decoder=str(tmp_path / "first"))))
    assert build_main(["--decoder", str(tmp_path / "next"), "--encoder", str(tmp_path / "first"),
                       "--name", "second", "--out", str(tmp_path / "second")]) == 0
    first, second = load_bundle(tmp_path / "first", device="cpu"), load_bundle(tmp_path / "second", device="cpu")
    for (name, a), b in zip(first.encoder.state_dict().items(), second.encoder.state_dict().values()):
        assert np.array_equal(a.float().numpy(), b.float().numpy()), name
    calibrations = [(tmp_path / name / "calibration.json").read_text() for name in ("first", "second")]
    assert calibrations[0] == calibrations[1]
    # the encoder's training record travels with it, so the card still describes it
    assert second.config["training"]["encoder_summary"] == first.config["training"]["encoder_summary"]
    assert "Encoder: 3 steps" in (tmp_path / "second" / "MODEL_CARD.md").read_text()
    assert second.bit_legend is not None and len(second.bit_legend) == len(first.bit_legend)  # travels with it


def test_bundle_weights_are_readable_like_any_new_file(runs, tmp_path):
    import os
    import stat

    umask = os.umask(0o022)
    try:
        assert _build(runs, tmp_path / "b") == 0
    finally:
        os.umask(umask)
    for name in ("decoder.safetensors", "encoder.safetensors", "config.json"):
        assert stat.S_IMODE((tmp_path / "b" / name).stat().st_mode) == 0o644, name
    assert load_bundle(tmp_path / "b", device="cpu").name == "test-model"


def test_the_decoder_of_a_bundle_beside_a_new_encoder(runs, tmp_path):
    assert _build(runs, tmp_path / "first") == 0
    assert build_main(["--decoder", str(tmp_path / "first"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "second",
                       "--out", str(tmp_path / "second")]) == 0
    first, second = load_bundle(tmp_path / "first", device="cpu"), load_bundle(tmp_path / "second", device="cpu")
    for (name, a), b in zip(first.decoder.state_dict().items(), second.decoder.state_dict().values()):
        assert np.array_equal(a.float().numpy(), b.float().numpy()), name  # bf16 stored again: unchanged
    assert second.config["training"]["decoder_stages"] == first.config["training"]["decoder_stages"]
    assert len(second.known_structures) == len(first.known_structures)  # the decoder's corpus travels with it
    card = (tmp_path / "second" / "MODEL_CARD.md").read_text()
    origin = f"Decoder weights: the decoder of bundle test-model [{first.checksum[:12]}], unchanged"
    assert origin in card and "Decoder stage 1: 3 AdamW steps (stage1/step_00000003)" in card
    assert "tokens/s" in card and "5 pretraining steps" in card  # the whole record of the last stage came along

    # reused once more, from the second bundle: the first bundle stays named, no stage is lost
    assert build_main(["--decoder", str(tmp_path / "second"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "third",
                       "--out", str(tmp_path / "third")]) == 0
    third = (tmp_path / "third" / "MODEL_CARD.md").read_text()
    assert origin in third and "5 pretraining steps" in third

    # a bundle from before decoder_summary: its stage list stands in, and the card says where the rest is
    config = json.loads((tmp_path / "first" / "config.json").read_text())
    del config["training"]["decoder_summary"]
    (tmp_path / "first" / "config.json").write_text(json.dumps(config))
    assert build_main(["--decoder", str(tmp_path / "first"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "old",
                       "--out", str(tmp_path / "old")]) == 0
    card = (tmp_path / "old" / "MODEL_CARD.md").read_text()
    assert "Decoder stage 2 (from those weights" in card and "2 AdamW steps" in card
    assert "in that bundle's model card" in card and "None" not in card


def test_an_fp16_encoder_needs_a_calibration_of_the_rounded_weights(runs, tmp_path, capsys):
    from safetensors import safe_open

    from training.calibration.calibrate import calibrate, load_encoder, round_weights

    assert _build(runs, tmp_path / "refused", "--encoder-dtype", "fp16") == 1
    assert "--round-weights fp16" in capsys.readouterr().err and not (tmp_path / "refused").exists()
    cal, _ = calibrate(runs / "encoder", rounding="fp16")
    assert "(weights rounded to fp16)" in cal.source
    cal.save(tmp_path / "cal16.json")
    assert build_main(["--decoder", str(runs / "stage2"), "--encoder", str(runs / "encoder"), "--calibration",
                       str(tmp_path / "cal16.json"), "--name", "half", "--out", str(tmp_path / "half"),
                       "--encoder-dtype", "fp16"]) == 0
    with safe_open(str(tmp_path / "half" / "encoder.safetensors"), "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.float16"}
    loaded = load_bundle(tmp_path / "half", device="cpu", precision="fp32")
    rounded = round_weights(load_encoder(runs / "encoder"), "fp16")
    for (name, a), b in zip(rounded.state_dict().items(), loaded.encoder.state_dict().values()):
        assert np.array_equal(a.numpy(), b.float().numpy()), name  # the file holds exactly what was calibrated
    assert "encoder weights in fp16 (its calibration was computed on those rounded weights)" in (
        tmp_path / "half" / "MODEL_CARD.md").read_text()

    # a new decoder beside that bundle's encoder keeps it in fp16 without being told, bit for bit
    assert build_main(["--decoder", str(runs / "stage2"), "--encoder", str(tmp_path / "half"), "--name", "again",
                       "--out", str(tmp_path / "again")]) == 0
    for name in ("encoder.safetensors", "calibration.json"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "half" / name).read_bytes(), name
    # and storing it wider is still a choice
    assert build_main(["--decoder", str(runs / "stage2"), "--encoder", str(tmp_path / "half"), "--name", "wide",
                       "--out", str(tmp_path / "wide"), "--encoder-dtype", "fp32"]) == 0
    with safe_open(str(tmp_path / "wide" / "encoder.safetensors"), "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.float32"}


def test_the_card_gives_the_held_out_curve_of_the_last_stage(runs, tmp_path):
    from training.bundle.build_bundle import _curve_text

    list(pretrain(tiny_config(runs / "corpus", tmp_path / "curve", max_steps=4, eval_every=2)))
    metrics = [json.loads(line) for line in (tmp_path / "curve" / "metrics.jsonl").read_text().splitlines()]
    val = {r["step"]: r["loss"] for r in metrics if r["kind"] == "val"}
    assert sorted(val) == [2, 4]
    assert build_main(["--decoder", str(tmp_path / "curve"), "--encoder", str(runs / "encoder"),
                       "--calibration", str(runs / "calibration.json"), "--name", "c", "--out",
                       str(tmp_path / "c")]) == 0
    card = (tmp_path / "c" / "MODEL_CARD.md").read_text()
    assert f"Held-out loss by step (true fingerprint): 2: {val[2]:.3f}; 4: {val[4]:.3f}." in card
    # with simulated queries both numbers; one validation is no curve
    assert _curve_text([[1000, 0.345, 0.553], [2000, 0.317, 0.512]]) == (
        " Held-out loss by step (true fingerprint / simulated query): 1,000: 0.345 / 0.553; 2,000: 0.317 / 0.512.")
    assert _curve_text([[5, 0.3, None]]) == ""


def test_interpolating_a_new_stage_with_the_decoder_it_started_from(runs, tmp_path, capsys):
    from training.core.checkpoint import load_decoder

    assert _build(runs, tmp_path / "base") == 0  # stage2's decoder as a bundle
    assert build_main(["--decoder", str(runs / "stage1"), "--encoder", str(runs / "encoder"), "--calibration",
                       str(runs / "calibration.json"), "--name", "mid", "--out", str(tmp_path / "mid"),
                       "--dtype", "fp32", "--interpolate", str(tmp_path / "base"), "0.25"]) == 0
    new, _ = load_decoder(runs / "stage1" / "checkpoints" / "step_00000003")
    old, _ = load_decoder(tmp_path / "base")
    mid = load_bundle(tmp_path / "mid", device="cpu", precision="fp32").decoder.state_dict()
    for name, w in new.state_dict().items():
        if w.is_floating_point():
            torch.testing.assert_close(mid[name].float(), 0.75 * old.state_dict()[name] + 0.25 * w, rtol=0, atol=1e-6)
    assert any(not torch.equal(w, old.state_dict()[n]) for n, w in new.state_dict().items())  # the test can fail
    card = (tmp_path / "mid" / "MODEL_CARD.md").read_text()
    assert "- Shipped decoder weights: 0.25 × these weights + 0.75 × the decoder of bundle test-model [" in card
    stages = json.loads((tmp_path / "mid" / "config.json").read_text())["training"]["decoder_stages"]
    assert stages[-1]["interpolation"]["alpha"] == 0.25

    # a bundle's decoder interpolated is no longer "unchanged"
    assert build_main(["--decoder", str(tmp_path / "mid"), "--encoder", str(runs / "encoder"), "--calibration",
                       str(runs / "calibration.json"), "--name", "m2", "--out", str(tmp_path / "m2"),
                       "--interpolate", str(tmp_path / "base"), "0.5"]) == 0
    card = (tmp_path / "m2" / "MODEL_CARD.md").read_text()
    assert "interpolated (below)" in card and "unchanged" not in card.split("## Training")[1].split("- Encoder")[0]

    for bad in ("1.5", "0", "half"):
        assert build_main(["--decoder", str(runs / "stage1"), "--encoder", str(runs / "encoder"), "--calibration",
                           str(runs / "calibration.json"), "--name", "x", "--out", str(tmp_path / "x"),
                           "--interpolate", str(tmp_path / "base"), bad]) == 1
        assert f"--interpolate weight '{bad}' must be a number between 0 and 1" in capsys.readouterr().err


def test_card_names_the_simulated_spectra_apart_from_the_measured_ones(runs, tmp_path):
    assert _build(runs, tmp_path / "plain") == 0
    assert "simulated spectra" not in (tmp_path / "plain" / "MODEL_CARD.md").read_text()
    encoder = tmp_path / "encoder"
    shutil.copytree(runs / "encoder", encoder)
    metrics = json.loads((encoder / "metrics.json").read_text())
    metrics["data"]["simulated"] = {"file": "runs/sim.npz", "spectra": 1200, "structures": 1100,
                                    "adducts": {"[M+H]+": 800, "[M-H]-": 400}, "model": "runs/forward",
                                    "sources": ["npclassifier", "mibig"], "control": False,
                                    "measured_structures": 3}  # fmt: skip
    (encoder / "metrics.json").write_text(json.dumps(metrics))
    assert build_main(["--decoder", str(runs / "stage2"), "--encoder", str(encoder), "--calibration",
                       str(runs / "calibration.json"), "--name", "sim", "--out", str(tmp_path / "sim")]) == 0
    card = (tmp_path / "sim" / "MODEL_CARD.md").read_text()
    line = next(x for x in card.splitlines() if x.startswith("- **Spectrum encoder, simulated spectra**"))
    assert "1,200 spectra (800 [M+H]+, 400 [M-H]-) of 1,100 molecules" in line
    assert "(npclassifier, mibig; 3 of them also among the measured training structures, none a `FOLD=val`" in line
    assert "`sim.npz`" in line and "control" not in line
    measured = metrics["data"]["train"]["spectra"]
    assert f"`FOLD=train`: {measured:,} " in card  # the measured spectra are counted apart
    sim = metrics["data"]["simulated"]
    assert "(npclassifier, mibig; none of them among the measured training structures, none a" in _simulated_line(
        {**sim, "measured_structures": 0})
    assert "(npclassifier, mibig; none a `FOLD=val`" in _simulated_line(
        {k: v for k, v in sim.items() if k != "measured_structures"})
