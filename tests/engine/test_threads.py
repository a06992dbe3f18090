"""The thread rule (engine.threads): a job samples on one thread, a cluster's workers share the cores, and
OMP_NUM_THREADS or --threads win."""

import pytest

from engine import threads


@pytest.fixture
def eight_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 8)


def test_a_job_takes_one_thread_whatever_the_cores(eight_cores):
    assert threads.job_threads() == 1


def test_workers_share_the_cores(eight_cores):
    assert threads.worker_threads(1) == 8 and threads.worker_threads(3) == 2
    assert threads.worker_threads(16) == 1  # never 0


def test_omp_num_threads_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.job_threads() == 3 and threads.worker_threads(2) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "zero")
    assert threads.job_threads() == 1  # not a count: the rule


def test_apply_sets_torch(eight_cores):
    import torch

    before = torch.get_num_threads()
    try:
        assert threads.apply() == 1 and torch.get_num_threads() == 1
        assert threads.apply(workers=4) == 2 and torch.get_num_threads() == 2
        assert threads.apply(3) == 3 and torch.get_num_threads() == 3  # --threads
    finally:
        torch.set_num_threads(before)


def test_the_command_line_opens_the_model_on_one_thread(monkeypatch, tiny_bundle_dir):
    import argparse

    import torch

    from engine.cli.common import open_model

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        args = argparse.Namespace(threads=None, device="cpu", model=str(tiny_bundle_dir), precision="fp32")
        open_model(args, use_adapter=False)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
