"""Every command README.md and docs/ show still runs: each ``python -m MODULE`` names a module that exists and, when
it is this project's, answers ``--help``; each ``msgpt SUBCOMMAND`` and ``msgpt-eval`` answers ``--help``; each
``python path/to/script.py`` names a file that exists. Commands are read from code blocks and inline code."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
OURS = ("engine", "training", "msgpt_gui", "benchmarks", "scripts")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`((?:[^`\n]|\n(?!\n))+)`")  # inline code may wrap within a paragraph
START = r"(?:^|[\s;&|(])"
MODULE = re.compile(START + r"(?:python3? |torchrun [^\n]*?)-m ([A-Za-z_][\w.]*)")
MSGPT = re.compile(START + r"msgpt(-eval)?(?: ([a-z][\w-]*))?")
SCRIPT = re.compile(START + r"python3? ((?:benchmarks|scripts|tests)/[\w/]+\.py)")


def code_spans(text: str) -> list[str]:
    return FENCE.findall(text) + INLINE.findall(FENCE.sub("", text))


def collect() -> dict[str, dict[str, set[str]]]:
    """``{"module" | "msgpt" | "script": {command: pages}}`` of README.md and docs/."""
    found: dict[str, dict[str, set[str]]] = {"module": {}, "msgpt": {}, "script": {}}
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        for span in code_spans(page.read_text(encoding="utf-8")):
            for m in MODULE.finditer(span):
                found["module"].setdefault(m[1], set()).add(name)
            for m in MSGPT.finditer(span):
                if m[1]:  # msgpt-eval: one command, no subcommands
                    found["msgpt"].setdefault("msgpt-eval", set()).add(name)
                elif m[2]:
                    found["msgpt"].setdefault(f"msgpt {m[2]}", set()).add(name)
            for m in SCRIPT.finditer(span):
                found["script"].setdefault(m[1], set()).add(name)
    return found


COMMANDS = collect()
ENTRY_POINTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]


def help_argv(command: str) -> list[str]:
    """What ``COMMAND --help`` runs, as this interpreter runs it (the console scripts are these modules' mains)."""
    if command == "msgpt-eval":
        return [sys.executable, "-m", ENTRY_POINTS["msgpt-eval"].split(":")[0], "--help"]
    if command.startswith("msgpt "):
        return [sys.executable, "-m", "engine.cli", command.split()[1], "--help"]
    return [sys.executable, "-m", command, "--help"]


def ours(module: str) -> bool:
    return module.split(".")[0] in OURS


@cache
def help_results() -> dict[str, subprocess.CompletedProcess]:
    """``--help`` of every project command the docs show, two at a time (each is a fresh interpreter)."""
    commands = [*(m for m in COMMANDS["module"] if ours(m)), *COMMANDS["msgpt"]]

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(help_argv(command), cwd=ROOT, capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(commands, pool.map(run, commands)))


def where(kind: str, command: str) -> str:
    return ", ".join(sorted(COMMANDS[kind][command]))


def test_the_docs_show_commands():
    assert len(COMMANDS["module"]) >= 10 and "msgpt predict" in COMMANDS["msgpt"]


@pytest.mark.parametrize("module", sorted(COMMANDS["module"]))
def test_python_m_module_exists_and_answers_help(module):
    assert importlib.util.find_spec(module) is not None, (
        f"python -m {module} ({where('module', module)}): no such module; rename the command where it is written")
    if ours(module):
        done = help_results()[module]
        assert done.returncode == 0 and "usage:" in done.stdout, (
            f"python -m {module} --help ({where('module', module)}) exited {done.returncode}: {done.stderr[-2000:]}")


@pytest.mark.parametrize("command", sorted(COMMANDS["msgpt"]))
def test_msgpt_command_answers_help(command):
    done = help_results()[command]
    assert done.returncode == 0 and "usage:" in done.stdout, (
        f"{command} --help ({where('msgpt', command)}) exited {done.returncode}: {done.stderr[-2000:]}")


def test_console_scripts_are_the_modules_checked():
    assert ENTRY_POINTS["msgpt"] == "engine.cli:main"
    module, _, func = ENTRY_POINTS["msgpt-eval"].partition(":")
    assert importlib.util.find_spec(module) is not None and func == "main"


@pytest.mark.parametrize("script", sorted(COMMANDS["script"]))
def test_python_script_exists(script):
    assert (ROOT / script).is_file(), f"python {script} ({where('script', script)}): no such file"


def test_commands_are_read_from_code_only():
    text = "Run `python -m training.decoder.pretrain\n--corpus c` or\n\n```bash\nmsgpt predict a.mgf -o b.csv\n```\n"
    spans = code_spans(text)
    assert [MODULE.search(s)[1] for s in spans if MODULE.search(s)] == ["training.decoder.pretrain"]
    assert [MSGPT.search(s)[2] for s in spans if MSGPT.search(s)] == ["predict"]
    assert not code_spans("python -m not.in.code")
