"""``msgpt predict --cluster``: the same output as one process, whatever worker dies.

The reference is always a run in this process with the same options. The cluster runs are LocalClusters of two
worker processes; a worker is killed by its own task (SIGKILL, as ``kill -9``), so the test waits on nothing but
the run itself.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import pytest
from tiny_bundle import FIXTURE

from engine.cli import main
from engine.cluster.client import parse_address
from engine.errors import ConfigError

HERE = Path(__file__).resolve().parent
# no libraries: what the workers do with them is what one process does, and loading them (77 MB) 5 times is slow
FAST = ["--groups", "2", "--pool-size", "4", "--threads", "1", "--precision", "fp32", "--no-libraries", "-q"]
CRASH_ONCE = "MSBNK-Eawag-EA290310"  # its first attempt kills its worker: recomputed on another
CRASH_ALWAYS = "MSBNK-RIKEN-PR100288"  # kills every worker that runs it: reported and skipped


def predict(out: Path, bundle: Path, *extra: str) -> int:
    return main(["predict", str(FIXTURE), "-o", str(out), "--model", str(bundle), *FAST, *extra])


def rows(path: Path) -> list[str]:
    """The CSV's candidate rows and settings, without the time it was made."""
    return [line for line in path.read_text().splitlines() if not line.startswith("# created:")]


@pytest.mark.parametrize(("text", "expected"), [
    ("local:2", (None, 2)),
    ("tcp://127.0.0.1:8786", ("tcp://127.0.0.1:8786", 0)),
    ("tls://scheduler.lab:8786", ("tls://scheduler.lab:8786", 0)),
])
def test_addresses(text, expected):
    address = parse_address(text)
    assert (address.scheduler, address.n_workers) == expected


@pytest.mark.parametrize("text", ["local:0", "local", "127.0.0.1:8786", "http://x:8786", "local:two"])
def test_bad_addresses_say_what_is_allowed(text):
    with pytest.raises(ConfigError, match="local:N") as e:
        parse_address(text)
    assert repr(text) in str(e.value)


def test_a_spectrum_s_samples_do_not_depend_on_its_place_in_the_batch(tiny_bundle):
    """What lets the cluster give one process's output: sample (i, j) of a spectrum draws from (seed, i, j) alone, so
    its candidates are the same wherever and after whichever spectra it runs. At T=3 and top-p 1 the tiny model's
    samples vary with the seed, which this test would see."""
    from engine.elucidation.pipeline import QueryParams, SpectrumFinished, elucidate
    from engine.spectra.io import iter_spectra

    spectra = [s for s in iter_spectra(FIXTURE) if getattr(s, "adduct", None) in tiny_bundle.supported_adducts][:4]

    def candidates(batch, seed):
        params = QueryParams(groups=2, samples_per_group=4, temperature=3.0, top_p=1.0, seed=seed)
        return {ev.result.spectrum.id: [(c.smiles, c.count) for c in ev.result.candidates]
                for ev in elucidate(tiny_bundle, batch, params) if isinstance(ev, SpectrumFinished)}

    forward = candidates(spectra, 0)
    assert candidates(spectra[::-1], 0) == forward
    assert candidates(spectra[2:3], 0) == {spectra[2].id: forward[spectra[2].id]}
    assert candidates(spectra, 1) != forward  # the seed does decide the samples


def test_without_dask_the_cluster_flag_says_how_to_install(tmp_path, tiny_bundle_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    assert predict(tmp_path / "out.csv", tiny_bundle_dir, "--cluster", "local:2") == 2
    assert 'pip install -e ".[cluster]"' in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


def test_ship_model_needs_a_cluster(tmp_path, tiny_bundle_dir, capsys):
    assert predict(tmp_path / "out.csv", tiny_bundle_dir, "--ship-model") == 2
    assert "give --cluster too" in capsys.readouterr().err


@pytest.mark.slow
def test_a_killed_worker_loses_nothing_and_a_crashing_feature_is_skipped(tmp_path, tiny_bundle_dir, monkeypatch,
                                                                           capsys):
    pytest.importorskip("distributed")
    import engine.cli.predict
    import engine.cluster.client

    reference = tmp_path / "reference.csv"
    assert predict(reference, tiny_bundle_dir) == 0
    capsys.readouterr()

    # the workers import the crashing task by name, and read which features crash from their environment
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in [str(HERE), os.environ.get("PYTHONPATH")] if p))
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("MSGPT_TEST_CRASH_DIR", str(tmp_path))
    monkeypatch.setenv("MSGPT_TEST_CRASH_ONCE", CRASH_ONCE)
    monkeypatch.setenv("MSGPT_TEST_CRASH_ALWAYS", CRASH_ALWAYS)
    from crashing_task import crashing_task

    monkeypatch.setattr(engine.cli.predict, "_feature_task", crashing_task)
    monkeypatch.setattr(engine.cluster.client, "DEFAULT_ALLOWED_FAILURES", 1)  # given up after 2 deaths
    out = tmp_path / "cluster.csv"
    assert predict(out, tiny_bundle_dir, "--cluster", "local:2") == 0
    stderr = capsys.readouterr().err

    assert (tmp_path / "crashed-once").exists()  # the worker running CRASH_ONCE really died mid-feature
    assert stderr.count("Worker left:") >= 3  # CRASH_ONCE once, CRASH_ALWAYS twice; each said
    assert f"({CRASH_ALWAYS}): its worker died 2 times while computing it" in stderr
    expected = [line for line in rows(reference) if CRASH_ALWAYS not in line]
    assert rows(out) == expected  # same rows, same order, each spectrum once; CRASH_ONCE's among them
    assert sum(CRASH_ONCE in line for line in rows(out)) == sum(CRASH_ONCE in line for line in rows(reference)) > 0
    assert not out.with_name(out.name + ".journal").exists()


@pytest.mark.slow
def test_ctrl_c_cancels_the_cluster_run_and_resume_goes_on(tmp_path, tiny_bundle_dir, monkeypatch, capsys):
    """Ctrl-C while the cluster computes: exit 130, the finished spectra kept with their journal, the futures
    cancelled and the cluster closed; ``--resume`` (here in one process) writes what an uninterrupted run writes."""
    pytest.importorskip("distributed")
    import engine.cli.predict

    reference = tmp_path / "reference.csv"
    assert predict(reference, tiny_bundle_dir) == 0
    real, calls = engine.cli.predict._write_feature, {"n": 0}

    def write_feature(*args, **kwargs):  # Ctrl-C as the 4th feature comes back (as the user would press it)
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(engine.cli.predict, "_write_feature", write_feature)
    out = tmp_path / "out.csv"
    capsys.readouterr()
    assert predict(out, tiny_bundle_dir, "--cluster", "local:2") == 130
    stderr = capsys.readouterr().err
    assert "Run the same command with --resume" in stderr and "Traceback" not in stderr
    assert not multiprocessing.active_children()  # the local cluster's worker processes are gone
    monkeypatch.undo()
    assert out.with_name(out.name + ".journal").exists() and not out.exists()
    assert predict(out, tiny_bundle_dir, "--resume") == 0
    assert rows(out) == rows(reference)


def fake_worker(tmp_path: Path):
    from types import SimpleNamespace

    return SimpleNamespace(address="tcp://10.0.0.7:40000", local_directory=str(tmp_path / "worker"),
                           state=SimpleNamespace(nthreads=1))


def model_spec(bundle, **changes):
    from dataclasses import replace

    from engine.cluster.worker import ModelSpec

    spec = ModelSpec(path=str(bundle.path), checksum=bundle.checksum, device="cpu", precision="fp32",
                     use_adapter=False, device_type="cpu", dtype="torch.float32", threads=1)
    return replace(spec, **changes)


@pytest.mark.parametrize(("changes", "message"), [
    ({"checksum": "0" * 64}, "has a different model at .*checksum .*copy the same bundle to every worker"),
    ({"dtype": "torch.bfloat16"}, "runs the model on cpu \\(torch.float32\\), the client on cpu \\(torch.bfloat16\\)"),
    ({"path": "/nowhere/model"}, "cannot read the model bundle /nowhere/model: .* --ship-model"),
])
def test_a_worker_refuses_another_model(tmp_path, tiny_bundle, changes, message):
    pytest.importorskip("distributed")
    from engine.cluster.worker import ModelPlugin, run_task
    from engine.errors import BundleError

    plugin = ModelPlugin("run1", model_spec(tiny_bundle, **changes), {})
    with pytest.raises(BundleError, match=message):
        plugin.setup(fake_worker(tmp_path))
    with pytest.raises(BundleError, match="has not loaded the model of run run1"):
        run_task(len, "run1", ())  # nothing was loaded: its tasks refuse too


def test_a_shipped_model_loads_from_the_worker_s_folder(tmp_path, tiny_bundle):
    pytest.importorskip("distributed")
    from engine.cluster.worker import ModelPlugin, bundle_files, run_task

    spec = model_spec(tiny_bundle, path="/not/on/this/worker", files=bundle_files(tiny_bundle.path))
    plugin = ModelPlugin("run2", spec, {"extra": 5})
    worker = fake_worker(tmp_path)
    plugin.setup(worker)
    try:
        assert run_task(lambda bundle, item, extra: (bundle.checksum, item + extra), "run2", 1) == (
            tiny_bundle.checksum, 6)
        assert (Path(worker.local_directory) / f"msgpt-model-{tiny_bundle.checksum[:16]}" / "config.json").is_file()
    finally:
        plugin.teardown(worker)
