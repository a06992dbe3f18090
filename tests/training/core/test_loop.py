"""What the training commands share (training.core.loop): LR schedule, re-seeding, autocast, signals, config base."""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import signal
import threading
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from engine.errors import ConfigError
from engine.model.bundle import native_bf16
from training.core.loop import (
    TrainingConfig,
    autocast,
    autocast_dtype,
    int_at_least,
    lr_at,
    one_of,
    reseed,
    stop_on_signals,
    torch_threads,
)


def test_lr_schedule_at_hand_computed_steps():
    kw = dict(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=110)
    assert lr_at(0, **kw) == pytest.approx(1e-4)  # 1/10 of the peak
    assert lr_at(4, **kw) == pytest.approx(5e-4)
    assert lr_at(9, **kw) == pytest.approx(1e-3)  # warm-up ends at the peak
    assert lr_at(10, **kw) == pytest.approx(1e-3)  # cosine starts at the peak
    assert lr_at(60, **kw) == pytest.approx(5.5e-4)  # half way: (1e-3 + 1e-4) / 2
    assert lr_at(35, **kw) == pytest.approx(1e-4 + 0.5 * (1 + math.cos(math.pi / 4)) * 9e-4)
    assert lr_at(110, **kw) == pytest.approx(1e-4)  # the floor
    assert lr_at(500, **kw) == pytest.approx(1e-4)


def test_lr_schedule_as_a_multiplier_and_without_warm_up():
    kw = dict(lr=1.0, min_lr=0.1, warmup_steps=10, max_steps=110)  # encoder training: lr * this
    assert lr_at(0, **kw) == pytest.approx(0.1)
    assert lr_at(9, **kw) == pytest.approx(1.0)
    assert lr_at(60, **kw) == pytest.approx(0.1 + 0.9 * 0.5)  # half-way through the cosine
    assert lr_at(110, **kw) == pytest.approx(0.1)
    assert lr_at(0, lr=2e-3, min_lr=0.0, warmup_steps=0, max_steps=4) == 2e-3  # no warm-up: the peak first
    assert lr_at(2, lr=2e-3, min_lr=0.0, warmup_steps=0, max_steps=4) == pytest.approx(1e-3)
    assert lr_at(3, lr=1.0, min_lr=0.0, warmup_steps=0, max_steps=1) == 0.0  # past the end: the floor


def _draws():
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_reseed_makes_the_draws_a_function_of_seed_rank_and_step():
    reseed(7, 1, 42)
    first = _draws()
    _draws()  # other draws in between change nothing
    reseed(7, 1, 42)
    assert _draws() == first
    for other in ((8, 1, 42), (7, 0, 42), (7, 1, 43)):
        reseed(*other)
        assert all(a != b for a, b in zip(_draws(), first)), other


def test_reseed_derives_the_seeds_from_a_seed_sequence():
    # resumed runs depend on this derivation: it must never change
    words = np.random.SeedSequence([3, 0, 5]).generate_state(4, np.uint32)
    reseed(3, 0, 5)
    assert torch.initial_seed() == int(words[0]) << 32 | int(words[1])
    assert np.random.rand() == np.random.RandomState(words[2:]).rand()
    assert random.random() == random.Random(int(words[2]) << 32 | int(words[3])).random()


def test_autocast_choice():
    cpu = torch.device("cpu")
    assert autocast("fp32", cpu) == (nullcontext, None)
    assert autocast_dtype("auto", cpu) == (torch.bfloat16 if native_bf16(cpu) else None)
    enter, dtype = autocast("auto", cpu)
    with enter():
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype == (torch.bfloat16 if dtype else torch.float32)
    if not native_bf16(cpu):
        with pytest.raises(ConfigError, match="`precision` bf16 was asked for"):
            autocast("bf16", cpu)


def test_torch_threads_inside_a_generator_and_back_after():
    before = torch.get_num_threads()

    def work():
        with torch_threads(before + 1):
            yield torch.get_num_threads()
            yield torch.get_num_threads()

    gen = work()
    assert next(gen) == before + 1
    gen.close()  # a caller that stops iterating gets its setting back too
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


def test_signals_set_the_stop_flag_and_the_handlers_come_back(capsys):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with stop_on_signals(notice="saving a checkpoint after this step...") as stop:
        assert isinstance(stop, threading.Event) and not stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM only stops (again)
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C gives up at once
            os.kill(os.getpid(), signal.SIGINT)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert capsys.readouterr().err == "\nSIGTERM: saving a checkpoint after this step...\n"


def test_sigint_sets_a_given_event_quietly(capsys):
    event = threading.Event()
    with stop_on_signals(event) as stop:
        os.kill(os.getpid(), signal.SIGINT)
    assert stop is event and event.is_set()
    assert capsys.readouterr().err == ""


@dataclass
class _Config(TrainingConfig):
    name: str = field(default="", metadata={"help": "a name"})
    steps: int = field(default=10, metadata={"help": "steps"})
    rate: float | None = field(default=None, metadata={"help": "a rate"})
    sizes: tuple[float, ...] = field(default=(1.0, 2.0), metadata={"help": "sizes"})
    verbose: bool = field(default=False, metadata={"help": "say more"})

    def __post_init__(self):
        self.sizes = tuple(self.sizes)
        if self.steps < 1:
            raise ConfigError(f"`steps` must be a positive integer, got {self.steps!r}.")


def test_config_round_trip_and_unknown_keys_warn(caplog):
    config = _Config(name="a", sizes=(3.0,))
    assert config.to_dict() == {"name": "a", "steps": 10, "rate": None, "sizes": [3.0], "verbose": False}
    assert _Config.from_dict(config.to_dict()) == config
    with caplog.at_level(logging.WARNING):
        assert _Config.from_dict({**config.to_dict(), "future_key": 1, "another": 2}) == config
    assert [r.getMessage() for r in caplog.records] == ["_Config ignores unknown keys ['another', 'future_key']"]
    assert caplog.records[0].name == __name__  # logged for the module that defines the config
    with pytest.raises(ConfigError, match="`steps`"):
        _Config.from_dict({"steps": 0})


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steps": 0}, r"`steps` must be a positive integer, got 0\."),
        ({"steps": True}, r"`steps` must be a positive integer, got True\."),
        ({"steps": 2.0}, r"`steps` must be a positive integer, got 2\.0\."),
        ({"rate": -1.0}, r"`rate` must be >= 0 or unset, got -1\.0\."),
        ({"rate": "fast"}, r"`rate` must be >= 0 or unset, got 'fast'\."),  # not comparable: the same error
        ({"name": "c"}, r"`name` must be 'a' or 'b', got 'c'\."),
    ],
)
def test_require_names_the_field_the_value_and_what_is_allowed(changes, message):
    @dataclass
    class Checked(_Config):
        def __post_init__(self):
            self.require(("steps",), int_at_least(1), "a positive integer")
            self.require(("rate",), lambda v: v is None or v >= 0, ">= 0 or unset")
            self.require(("name",), *one_of(("a", "b")))

    Checked(name="a", rate=None)
    with pytest.raises(ConfigError, match=message):
        Checked(**{"name": "a", **changes})
    assert one_of(("fp32",))[1] == "'fp32'" and one_of(("a", "b", "c"))[1] == "'a', 'b' or 'c'"
    assert int_at_least(0, optional=True)(None) and not int_at_least(0)(None)


def test_flags_from_fields():
    p = argparse.ArgumentParser()
    _Config.add_arguments(p, given_only=True)
    assert vars(p.parse_args([])) == {"name": None, "steps": None, "rate": None, "sizes": None, "verbose": None}
    args = vars(p.parse_args(["--steps", "3", "--rate", "0.5", "--sizes", "4", "5", "--verbose"]))
    assert args == {"name": None, "steps": 3, "rate": 0.5, "sizes": [4.0, 5.0], "verbose": True}
    helps = {a.dest: a.help for a in p._actions}
    assert helps["steps"] == "steps (default: 10)" and helps["name"] == "a name" and helps["rate"] == "a rate"

    p = argparse.ArgumentParser()
    _Config.add_arguments(p, skip={"name", "verbose"})
    assert vars(p.parse_args([])) == {"steps": 10, "rate": None, "sizes": (1.0, 2.0)}


def test_flags_refuse_a_type_they_cannot_parse():
    @dataclass
    class WithDict(TrainingConfig):
        extra: dict = field(default_factory=dict)

    with pytest.raises(TypeError, match="extra"):
        WithDict.add_arguments(argparse.ArgumentParser())
    WithDict.add_arguments(argparse.ArgumentParser(), skip={"extra"})
