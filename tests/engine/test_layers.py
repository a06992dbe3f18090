"""The layering of engine/ (engine/__init__.py) and training/ (training/__init__.py): each package imports only from
the layers below it and its own modules, engine/ never imports training/, no module imports Qt, and no import circle
exists (lazy imports inside functions included)."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_graph import ROOT, imports, module_name

LAYERS = ("errors progress paths stamps threads timing", "chem", "spectra", "formulas", "library", "spectral_library", "model", "elucidation",
          "insight", "files", "cluster", "cli")
RANK = {name: i for i, names in enumerate(LAYERS) for name in names.split()}
#: training/'s packages, lowest first (training/__init__.py); every one may import engine/ too
TRAINING_LAYERS = ("core", "data", "encoder", "calibration", "decoder", "bundle", "evaluation", "studies")
TRAINING_RANK = {name: i for i, name in enumerate(TRAINING_LAYERS)}
QT = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "superqt", "qtpy", "msgpt_gui")


def sources(top: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / top).rglob("*.py"))}


ENGINE = sources("engine")
TRAINING = sources("training")


def layer_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def internal(module: str, known: dict[str, Path]) -> list[str]:
    """The modules of ``known`` that ``module`` imports (a ``from pkg import name`` counts when name is one)."""
    return sorted(m for m in imports(known[module]) if m in known and m != module)


@pytest.mark.parametrize("module", sorted(m for m in ENGINE if m.count(".")))
def test_engine_imports_only_lower_layers(module):
    own = layer_of(module)
    for target in internal(module, ENGINE):
        if not target.count("."):
            continue  # engine/__init__.py: the version
        other = layer_of(target)
        assert RANK[other] <= RANK[own], (
            f"{module} (layer {own}) imports {target} (layer {other}): a package may import only from the layers "
            f"below it ({' < '.join(LAYERS)}); move the shared code down")


@pytest.mark.parametrize("module", sorted(m for m in TRAINING if m.count(".")))
def test_training_imports_only_engine_and_lower_layers(module):
    own = layer_of(module)
    assert own in TRAINING_RANK, f"{module}: training/ holds its modules in the packages {TRAINING_LAYERS}"
    for target in imports(TRAINING[module]):
        top = target.split(".")[0]
        assert top != "msgpt_gui", f"{module} imports {target}: training/ never imports the app"
        if top != "training" or target not in TRAINING or not target.count("."):
            continue
        other = layer_of(target)
        assert TRAINING_RANK[other] <= TRAINING_RANK[own], (
            f"{module} (layer {own}) imports {target} (layer {other}): a training package may import only engine/ "
            f"and the layers below it ({' < '.join(TRAINING_LAYERS)}); move the shared code down")


def test_every_training_package_is_a_layer():
    packages = sorted(p.name for p in (ROOT / "training").iterdir() if (p / "__init__.py").exists())
    assert packages == sorted(TRAINING_LAYERS)


@pytest.mark.parametrize("module", sorted(ENGINE))
def test_engine_never_imports_training(module):
    bad = sorted(m for m in imports(ENGINE[module]) if m.split(".")[0] == "training")
    assert not bad, f"{module} imports {bad}: the engine never imports training code"


@pytest.mark.parametrize("top", ["engine", "training"])
def test_no_qt(top):
    for module, path in sources(top).items():
        bad = sorted(m for m in imports(path) if m.split(".")[0] in QT)
        assert not bad, f"{module} imports {bad}: {top}/ never imports Qt or the app"


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("top", ["engine", "msgpt_gui", "training"])
def test_no_import_circles(top):
    known = {**ENGINE, **sources("msgpt_gui"), **TRAINING}
    mods = sources(top)
    graph = {m: [t for t in internal(m, known) if not mods.get(t, Path()).name == "__init__.py" or t in mods]
             for m in mods}
    graph = {m: [t for t in ts if t in mods and not (mods[t].name == "__init__.py" and m.startswith(t + "."))]
             for m, ts in graph.items()}
    cycle = find_cycle(graph)
    assert cycle is None, f"import circle: {' -> '.join(cycle)}"


def test_find_cycle_finds_one():
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": []}) is None


@pytest.mark.parametrize("top", ["engine", "training"])
def test_few_modules_directly_in_a_top_package(top):
    direct = sorted(p.name for p in (ROOT / top).glob("*.py"))
    assert len(direct) <= 8, f"{top}/ holds {direct}: put modules in the package of their concern"
