"""The thread rule (engine.threads): OpenMP threads sleep when they wait, and one job takes the cores it may use."""

import os
import subprocess
import sys

import pytest

from engine import threads


def test_omp_num_threads_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.default_threads() == 3 and threads.default_threads(workers=2, reserve=1) == 3


def test_the_cores_are_shared_among_workers_and_a_reserve(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    assert threads.default_threads() == 8
    assert threads.default_threads(workers=3) == 2
    assert threads.default_threads(reserve=1) == 7
    assert threads.default_threads(workers=16) == 1  # never 0
    monkeypatch.setattr(threads, "available_cores", lambda: 1)
    assert threads.default_threads(reserve=1) == 1


def test_apply_sets_torch(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        assert threads.apply(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("user", [None, "ACTIVE"])
def test_waiting_threads_sleep_unless_the_user_chose(user):
    """In a fresh process (torch not loaded yet): PASSIVE is set, a policy the user set stays; too late once torch
    is loaded."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if user:
        env["OMP_WAIT_POLICY"] = user
    code = ("import os, sys; from engine import threads; ok = threads.prepare_openmp(); "
            "print(ok, os.environ.get('OMP_WAIT_POLICY')); import torch; print(threads.prepare_openmp())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", user or "PASSIVE", "False"]


def test_msgpt_sets_the_policy_before_torch_loads():
    """Importing the command line loads no torch, and its main() sets the policy first thing."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = ("import os, sys; from engine.cli import main; loaded = 'torch' in sys.modules\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(loaded, os.environ.get('OMP_WAIT_POLICY'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["False", "PASSIVE"]
