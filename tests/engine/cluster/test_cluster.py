"""``msgpt predict --cluster``: the same output as one process, whatever worker dies.

The reference is always a run in this process with the same options. The cluster runs are LocalClusters of two
worker processes; a worker is killed by its own task (SIGKILL, as ``kill -9``), so the test waits on nothing but
the run itself.
"""

from __future__ import annotations

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
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")]))
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
