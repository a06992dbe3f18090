"""The prepared accelerator run (training/decoder/accelerator.py): pack, remote step, unpack, candidate bundle.

The dry run is the whole chain at toy scale on this CPU: the remote step runs in a Python that cannot
import what the device machine lacks (RDKit, safe-mol, Qt, pyteomics, platformdirs)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.errors import BundleError
from training.decoder import accelerator as acc
from training.data.dataset import CorpusDataset

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def dry(tmp_path_factory) -> tuple[Path, str]:
    work = tmp_path_factory.mktemp("dry")
    done = subprocess.run([sys.executable, "-m", "training.decoder.accelerator", "--dry-run", "--workdir", str(work)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work, done.stdout


def test_dry_run_travels_within_the_limit_and_brings_back_a_loadable_bundle(dry):
    work, stdout = dry
    m = re.search(r"^travels: ([0-9.]+) MiB", stdout, re.M)
    assert m and 0 < float(m.group(1)) <= 64
    returned = sorted(p for p in (work / "OUT").iterdir() if p.is_file())
    assert 1 <= len(returned) <= 8 and all(p.stat().st_size <= 16 * 1024 * 1024 for p in returned)
    report = json.loads((work / "OUT" / acc.REPORT).read_text())
    assert report["steps"] == 6 and report["last_loss"] < report["first_loss"]
    assert (work / "bundle" / "config.json").is_file()
    # the unpacked run is a pretraining run directory build_bundle reads: its record names the device run
    config = json.loads((work / "unpacked" / "run" / "pretrain_config.json").read_text())
    assert config["device_run"]["records_per_s"] > 0 and Path(config["corpus"]).is_dir()


def test_a_damaged_part_is_refused_by_name(dry, tmp_path):
    work, _ = dry
    returned = tmp_path / "OUT"
    returned.mkdir()
    for p in (work / "OUT").iterdir():
        returned.joinpath(p.name).write_bytes(p.read_bytes())
    part = returned / "decoder.safetensors.part0"
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="part0"):
        acc.unpack(returned, work / "carry" / "accel", tmp_path / "unpacked", restore=False)


def test_the_materialized_corpus_holds_every_record_and_the_oversampled_ones_again(dry, tmp_path):
    work, _ = dry
    pack_dir = work / "carry" / "accel"
    source = CorpusDataset(work / "corpus")
    info = json.loads((pack_dir / "pack.json").read_text())
    rows = info["corpus"]["oversample_rows"]
    assert 0 < rows < len(source)
    manifest = acc.materialize_corpus(pack_dir, tmp_path / "c", oversample=2)
    copy = CorpusDataset(tmp_path / "c")
    assert len(copy) == manifest["n_records"] == len(source) + 2 * rows
    for i in (0, len(source) // 2, len(source) - 1):
        for a, b in zip(copy[i], source[i]):
            np.testing.assert_array_equal(a, b)
    assert (copy.inchikey_blocks()[: len(source)] == source.inchikey_blocks()).all()


def test_park_takes_the_bundle_out_of_what_travels_and_unpark_restores_it(tmp_path):
    repo = tmp_path / "repo"
    (repo / "resources" / "default_model").mkdir(parents=True)
    (repo / "resources" / "default_model" / "decoder.safetensors").write_bytes(b"x" * 1000)
    (repo / "code.py").write_text("print(1)\n")

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    everything = {p.name for p in acc.travelling_files(repo, without=None)}
    assert everything == {"code.py", "decoder.safetensors"}
    assert acc.park(repo) and not acc.park(repo)
    assert {p.name for p in acc.travelling_files(repo, without=None)} == {"code.py"}
    assert (repo / "resources" / "default_model" / "decoder.safetensors").is_file()  # still on disk
    assert acc.unpark(repo) and not acc.unpark(repo)
    assert git("status", "--porcelain") == ""


def test_the_remote_command_fits_the_device_tool():
    cmd = acc.remote_command(".carry/accel")
    assert len(cmd) <= acc.RUN_CHARS and "--out $OUT" in cmd


def test_the_shipping_rule_needs_both_modes():
    base = {"positive": {"band": {"top1": 9.0, "top10": 17.3}}, "negative": {"band": {"top1": 7.0, "top10": 15.2}}}
    better = {"positive": {"band": {"top1": 9.3, "top10": 18.0}}, "negative": {"band": {"top1": 7.0, "top10": 15.2}}}
    worse = {"positive": {"band": {"top1": 12.0, "top10": 20.0}}, "negative": {"band": {"top1": 7.0, "top10": 14.9}}}
    assert acc.ship_decision(better, base)[0]
    assert not acc.ship_decision(worse, base)[0]
