"""Sizes a reader can hold: no module over 600 lines in engine/, msgpt_gui/ or training/, and at most 2 functions
over 100 lines (argument parsers included) in the three together. A long module is split by role (a recipe over
its config and steps, a command over its arguments and writing), a long function into named parts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("engine", "msgpt_gui", "training")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100
MAX_LONG_FUNCTIONS = 2
MODULES = sorted(p for top in TOPS for p in (ROOT / top).rglob("*.py"))


def long_functions(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_is_at_most_600_lines(path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_MODULE_LINES, (
        f"{path.relative_to(ROOT)} has {n} lines (at most {MAX_MODULE_LINES}): split it by role, as "
        "training/decoder/pretrain.py is over pretrain_config.py and pretrain_steps.py")


def test_at_most_two_functions_over_100_lines():
    found = [f for path in MODULES for f in long_functions(path)]
    assert len(found) <= MAX_LONG_FUNCTIONS, (
        f"{len(found)} functions over {MAX_FUNCTION_LINES} lines (at most {MAX_LONG_FUNCTIONS} in "
        f"{', '.join(TOPS)}): {found}; split them into named parts")


def test_long_functions_are_found(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert long_functions(tmp_path / "m.py", tmp_path) == [f"m.py:5 long ({MAX_FUNCTION_LINES + 1} lines)"]
