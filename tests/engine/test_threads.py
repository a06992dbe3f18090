"""The thread rule (engine.threads): the jobs of a machine share its cores, a cluster's workers too, and
OMP_NUM_THREADS or --threads win."""

import pytest

from engine import threads


@pytest.fixture
def eight_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 8)


def test_a_job_takes_its_share_of_the_cores(eight_cores):
    assert threads.job_threads() == 8 and threads.job_threads(2) == 4 and threads.job_threads(3, reserve=1) == 2
    assert threads.job_threads(16) == 1  # never 0


def test_workers_share_the_cores(eight_cores):
    assert threads.worker_threads(1) == 8 and threads.worker_threads(3) == 2
    assert threads.worker_threads(16) == 1  # never 0


def test_omp_num_threads_wins(eight_cores, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.job_threads() == 3 and threads.job_threads(4) == 3 and threads.worker_threads(2) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "zero")
    assert threads.job_threads() == 8  # not a count: the rule


def test_apply_sets_torch(eight_cores):
    import torch

    before = torch.get_num_threads()
    try:
        assert threads.apply() == 8 and torch.get_num_threads() == 8
        assert threads.apply(workers=4) == 2 and torch.get_num_threads() == 2
        assert threads.apply(3) == 3 and torch.get_num_threads() == 3  # --threads
    finally:
        torch.set_num_threads(before)


def test_the_command_line_opens_the_model_with_the_cores(monkeypatch, tiny_bundle_dir):
    import argparse

    import torch

    from engine.cli.common import open_model

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        args = argparse.Namespace(threads=None, device="cpu", model=str(tiny_bundle_dir), precision="fp32")
        open_model(args, use_adapter=False)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_jobs_share_the_cores_and_a_dead_jobs_file_goes(eight_cores, tmp_path):
    import os
    import subprocess
    import sys

    import torch

    before = torch.get_num_threads()
    try:
        with threads.JobShare(tmp_path) as share:
            assert share.path.exists() and share.jobs() == 1 and torch.get_num_threads() == 8
            other = tmp_path / f"{share.host}-{os.getppid()}"  # a live process: another job
            other.touch()
            assert share.rebalance() == 4 and torch.get_num_threads() == 4
            dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                  text=True, check=True).stdout.strip()
            gone = tmp_path / f"{share.host}-{dead}"
            gone.touch()
            (tmp_path / f"elsewhere-{os.getppid()}").touch()  # another machine's job (a shared data folder)
            assert share.jobs() == 2 and not gone.exists()
            other.unlink()
            assert share.rebalance() == 8
        assert not share.path.exists()
        with threads.JobShare(tmp_path, threads=3) as fixed:  # --threads fixes the count
            (tmp_path / f"{fixed.host}-{os.getppid()}").touch()
            assert fixed.rebalance() == 3
        with threads.JobShare(tmp_path, reserve=1) as app:  # the app keeps a core for its window
            assert app.rebalance() == 3  # (8 - 1) // 2
    finally:
        torch.set_num_threads(before)


def test_an_unwritable_folder_counts_as_alone(eight_cores, tmp_path):
    import torch

    before = torch.get_num_threads()
    blocker = tmp_path / "file"
    blocker.write_text("")
    try:
        with threads.JobShare(blocker / "jobs") as share:
            assert share.jobs() == 1 and torch.get_num_threads() == 8
    finally:
        torch.set_num_threads(before)
