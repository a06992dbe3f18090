"""What the training commands share: learning-rate schedule, re-seeding, autocast, torch threads, stopping
on a signal, and the base class of their config dataclasses (saved configs, command-line flags).

Pretraining (:mod:`training.decoder.pretrain`), encoder training (:mod:`training.encoder.train_encoder`, also run by
:mod:`training.calibration.oof_posteriors`) and adaptation (:mod:`training.decoder.adapt`) use these; the checkpoint files
themselves are written with :mod:`training.core.checkpoint`.

Exact resume rests on two of them: :func:`lr_at` is a pure function of the step, and :func:`reseed`
makes every random draw of a step a function of ``(seed, rank, step)``, so a run's state is its
weights, its optimizer moments, its step and its data position. Their arithmetic must never change:
runs resumed with a newer program would then drift from the runs they continue.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import signal
import sys
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import MISSING, asdict, fields
from typing import Any, TypeVar

import numpy as np
import torch

from engine.errors import ConfigError
from engine.model.bundle import native_bf16

# -----------------------------------------------------------------------------------------------
# Learning rate, random streams, precision


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, max_steps: int) -> float:
    """Learning rate of optimizer update ``step`` (0-based): linear warm-up to ``lr`` over the first
    ``warmup_steps`` updates, then cosine decay to ``min_lr`` at ``max_steps`` (and ``min_lr`` after).

    With ``lr=1.0`` and ``min_lr`` a ratio it is the multiplier of a peak learning rate (encoder training
    multiplies its ``lr`` by it).
    """
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def reseed(seed: int, rank: int, step: int) -> None:
    """Seed torch (CPU + CUDA), numpy and python ``random`` from (seed, rank, step)."""
    words = np.random.SeedSequence([seed, rank, step]).generate_state(4, np.uint32)
    torch.manual_seed(int(words[0]) << 32 | int(words[1]))
    np.random.seed(words[2:])
    random.seed(int(words[2]) << 32 | int(words[3]))


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bfloat16 when asked for or (``auto``) when the device computes it natively; None = float32."""
    if precision == "fp32":
        return None
    supported = native_bf16(device)
    if precision == "bf16" and not supported:
        raise ConfigError(f"`precision` bf16 was asked for, but this {device.type.upper()} lacks bf16; use fp32.")
    return torch.bfloat16 if supported else None


def autocast(precision: str, device: torch.device) -> tuple[Callable[[], AbstractContextManager], torch.dtype | None]:
    """What forward passes run under: a function opening bf16 autocast (a null context in float32), and the
    autocast dtype (None: float32); see :func:`autocast_dtype`."""
    dtype = autocast_dtype(precision, device)
    return (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext, dtype


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch computes on ``n`` CPU threads inside (None: as it is); the caller's setting comes back after."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# -----------------------------------------------------------------------------------------------
# Stopping


@contextmanager
def stop_on_signals(stop: threading.Event | None = None, notice: str | None = None) -> Iterator[threading.Event]:
    """While inside, SIGINT / SIGTERM set ``stop`` (a new event when None; training saves and ends at the next
    step boundary); a second SIGINT interrupts at once. ``notice``, when given, is printed to stderr after the
    signal's name at the first signal. The previous handlers are restored on leaving."""
    stop = threading.Event() if stop is None else stop

    def handler(signum, frame):
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if notice and not stop.is_set():
            print(f"\n{signal.Signals(signum).name}: {notice}", file=sys.stderr, flush=True)
        stop.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# -----------------------------------------------------------------------------------------------
# Config dataclasses

C = TypeVar("C", bound="TrainingConfig")
PRECISIONS = ("auto", "bf16", "fp32")
DEVICES = ("auto", "cpu", "cuda")


def int_at_least(least: int, *, optional: bool = False) -> Callable[[Any], bool]:
    """A test for :meth:`TrainingConfig.require`: an integer (not a bool) >= ``least`` (or None, if ``optional``)."""
    return lambda v: (optional and v is None) or (isinstance(v, int) and not isinstance(v, bool) and v >= least)


def one_of(choices: Sequence[str]) -> tuple[Callable[[Any], bool], str]:
    """The test and its wording for :meth:`TrainingConfig.require`: one of ``choices`` ("'a', 'b' or 'c'")."""
    quoted = [repr(c) for c in choices]
    wording = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return (lambda v: v in choices), wording


class TrainingConfig:
    """Base class of the training commands' config dataclasses (fields carry ``metadata={"help": ...}``;
    the dataclass's ``__post_init__`` checks values and raises ConfigError naming the field)."""

    def require(self, names: Iterable[str], ok: Callable[[Any], bool], allowed: str) -> None:
        """For ``__post_init__``: raise ConfigError "`name` must be <allowed>, got <value>." for the first of
        ``names`` whose value fails ``ok`` (a value ``ok`` cannot compare, such as None for a number, fails)."""
        for name in names:
            value = getattr(self, name)
            try:
                good = ok(value)
            except TypeError:
                good = False
            if not good:
                raise ConfigError(f"`{name}` must be {allowed}, got {value!r}.")

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values (tuples as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Build from a saved dict; unknown keys (a newer program wrote them) are logged and left out."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            logging.getLogger(cls.__module__).warning("%s ignores unknown keys %s", cls.__name__, unknown)
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def add_arguments(
        cls, parser: argparse.ArgumentParser, *, skip: Collection[str] = (), given_only: bool = False
    ) -> None:
        """Add a ``--field-name`` flag for every field not in ``skip``, typed by its annotation (``bool``: a
        switch; ``tuple[...]``: a list of words or numbers), with the field's help.

        ``given_only``: every flag defaults to None, so what was given can be told from what was not (a
        command merges the given flags into a saved config); the field's default is named in the help.
        Otherwise a flag defaults to its field's default (an ``ArgumentDefaultsHelpFormatter`` shows it).
        """
        for f in fields(cls):
            if f.name in skip:
                continue
            flag, help_text = "--" + f.name.replace("_", "-"), f.metadata.get("help", "")
            type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            default = None if given_only or f.default is MISSING else f.default
            if type_name == "bool":
                parser.add_argument(flag, action="store_true", default=default, help=help_text)
                continue
            if given_only and f.default not in (None, "", MISSING):
                help_text += f" (default: {f.default})"
            if type_name.startswith("tuple"):
                kind = float if "float" in type_name else str
                parser.add_argument(flag, nargs="*", type=kind, default=default, help=help_text)
                continue
            kind = {"int": int, "float": float, "str": str}.get(type_name.split(" | ")[0])
            if kind is None:
                raise TypeError(f"{cls.__name__}.{f.name}: no command-line flag for type {type_name!r}; skip it.")
            parser.add_argument(flag, type=kind, default=default, help=help_text)
