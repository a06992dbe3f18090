"""Layers that cannot leak: engine/ and training/ never import Qt; neither does the app's Qt-free package
(msgpt_gui/logic/: no Qt, no Qt module of the app, importable without PySide6); the app's plotting needs no Qt;
every Qt module of the app imports msgpt_gui.qtcompat first."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

from import_graph import ROOT, imports

QT_PACKAGES = {"PySide6", "PySide2", "shiboken6", "shiboken2", "PyQt5", "PyQt6", "qtpy", "superqt", "pytestqt"}
QT_FREE_PACKAGE = "msgpt_gui.logic"
QT_FREE_DIR = ROOT / "msgpt_gui" / "logic"
QT_FREE_APP_MODULES = [QT_FREE_PACKAGE] + sorted(f"{QT_FREE_PACKAGE}.{p.stem}" for p in QT_FREE_DIR.glob("*.py")
                                                 if p.name != "__init__.py")
QTCOMPAT_FIRST = "from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)"

_IMPORT_ALL = r"""
import importlib, json, pkgutil, sys
import engine, training
names = [m.name for pkg in (engine, training) for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
         if not m.name.endswith(".__main__")]  # a __main__ runs its program (its source is checked below)
names += sys.argv[1:]
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as e:  # reported, so a broken module cannot hide a Qt import
        failed[name] = f"{type(e).__name__}: {e}"

# the Qt-free plot works in a plain script (ax=None draws on pyplot's current axes)
from engine.spectra.io import read_spectra
from engine.spectra.annotate import annotate_spectrum
from msgpt_gui.logic.plotting import plot_spectrum
spectrum = read_spectra("tests/data/fixture.mgf")[0][0]
ax = plot_spectrum(spectrum, annotate_spectrum(spectrum))
plotted = len(ax.texts)

top = {m.split(".")[0] for m in sys.modules}
print(json.dumps({"names": names, "failed": failed, "qt": sorted(top & set(json.loads(QT))), "plotted": plotted}))
"""


def test_engine_and_training_never_import_qt_when_every_module_is_imported():
    script = "QT = " + repr(json.dumps(sorted(QT_PACKAGES))) + "\n" + _IMPORT_ALL
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    env.pop("QT_QPA_PLATFORM", None)
    proc = subprocess.run([sys.executable, "-c", script, *QT_FREE_APP_MODULES], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(n.startswith("training.") for n in report["names"]) and "engine.elucidation.pipeline" in report["names"]
    assert report["qt"] == [], f"Qt was imported by the engine/training layer: {report['qt']}"
    assert report["plotted"] > 0
    if report["failed"]:
        warnings.warn(f"modules that could not be imported (checked by source only): {report['failed']}", stacklevel=1)


def _imported_top_level(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module", "__import__"
        ) and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.add(node.args[0].value.split(".")[0])
    return names


def test_no_source_file_of_engine_or_training_names_a_qt_package():
    files = sorted((ROOT / "engine").rglob("*.py")) + sorted((ROOT / "training").rglob("*.py"))
    files += sorted(QT_FREE_DIR.rglob("*.py"))
    assert len(files) > 20 and len(QT_FREE_APP_MODULES) >= 9
    offenders = {str(p.relative_to(ROOT)): sorted(_imported_top_level(p) & QT_PACKAGES) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}



def test_imported_modules_resolves_relative_imports():
    assert "msgpt_gui.logic.formulas" in imports(QT_FREE_DIR / "entries.py")
    assert "msgpt_gui.qtcompat" in imports(ROOT / "msgpt_gui" / "models.py")


def test_the_qt_free_package_imports_neither_qt_nor_a_qt_module_of_the_app():
    files = sorted(QT_FREE_DIR.rglob("*.py"))
    assert {p.stem for p in files} >= {"__init__", "entries", "formulas", "jobs", "projects", "plotting"}
    offenders = {}
    for path in files:
        bad = sorted(m for m in imports(path)
                     if m.split(".")[0] in QT_PACKAGES
                     or (m.split(".")[0] == "msgpt_gui" and m != "msgpt_gui" and not m.startswith(QT_FREE_PACKAGE)))
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}, f"msgpt_gui/logic/ imports only engine, the standard library and itself: {offenders}"


def test_the_qt_free_package_imports_without_pyside6():
    script = ("import importlib, json, sys\n"
              "for name in sys.argv[1:]:\n"
              "    importlib.import_module(name)\n"
              "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'superqt')"
              " or (m.startswith('msgpt_gui.') and not m.startswith('msgpt_gui.logic')))))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    env.pop("QT_QPA_PLATFORM", None)
    proc = subprocess.run([sys.executable, "-c", script, *QT_FREE_APP_MODULES], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []  # 'PySide6' not in sys.modules, nor a Qt module


def _imports_qt_at_top(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in QT_PACKAGES for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in QT_PACKAGES:
            return True
    return False


def test_every_qt_module_of_the_app_imports_qtcompat_first():
    """msgpt_gui/qtcompat.py guards against a PySide6 6.12.0 refcount bug: its import is the first of every module
    that imports Qt at its top, right after ``from __future__`` (isort would move it: the line is checked as
    written)."""
    checked, offenders = [], []
    for path in sorted((ROOT / "msgpt_gui").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not _imports_qt_at_top(tree):
            continue
        checked.append(path.stem)
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        first = imports[1] if getattr(imports[0], "module", "") == "__future__" else imports[0]
        dots = "." * len(path.relative_to(ROOT / "msgpt_gui").parts)
        line = path.read_text(encoding="utf-8").splitlines()[first.lineno - 1]
        if line != QTCOMPAT_FIRST.replace("from . ", f"from {dots} ", 1):
            offenders.append(f"{path.relative_to(ROOT)}: {line}")
    assert {"main_window", "models", "candidates_view", "params_view", "settings"} <= set(checked)
    assert offenders == []

def test_plot_functions_take_ax_and_return_it(fixture_mgf):
    from matplotlib.figure import Figure

    from engine.spectra.annotate import annotate_spectrum
    from engine.spectra.io import read_spectra
    from msgpt_gui.logic.plotting import plot_spectrum

    spectrum = read_spectra(fixture_mgf)[0][0]
    annotation = annotate_spectrum(spectrum)
    ax = Figure().add_subplot()
    assert plot_spectrum(spectrum, annotation, ax=ax, max_labels=5) is ax
    labels = [t.get_text() for t in ax.texts]
    assert 0 < len(labels) <= 5 and all(label.startswith("C") for label in labels)
    assert any("precursor m/z 321.2020" in t.get_text() for t in ax.get_legend().get_texts())
    assert ax.get_xlim()[0] < spectrum.mz.min() and ax.get_xlim()[1] > spectrum.precursor_mz

    bare = Figure().add_subplot()
    assert plot_spectrum(spectrum, ax=bare) is bare and len(bare.texts) == 0  # no annotation: no labels


def test_the_isotope_plot_takes_ax_and_return_it():
    import numpy as np
    from matplotlib.figure import Figure

    from engine.spectra.isotopes import isotope_pattern, match_isotopes
    from msgpt_gui.logic.plotting import plot_isotopes

    mz, abundance = isotope_pattern("C9H8ClO2", 4, charge=1)  # a chlorine: a large M+2
    survey_mz = np.array([*mz, mz[0] - 20.0])
    order = np.argsort(survey_mz)
    survey = (survey_mz[order], np.array([*(abundance * 1e6), 5e4])[order])
    match = match_isotopes({"C": 9, "H": 8, "Cl": 1, "O": 2}, 1, *survey, float(mz[0]))
    ax = Figure().add_subplot()
    assert plot_isotopes(match, ax=ax, survey=survey, label="C9H7ClO2 [M+H]+", title="isotopes") is ax
    assert [t.get_text() for t in ax.texts] == ["M", "M+1", "M+2", "M+3"]
    heights = sorted(round(p.get_height()) for p in ax.patches)
    assert heights.count(100) == 2 and round(abundance[2] * 100) in heights  # observed and theoretical M, M+2
    names = [t.get_text() for t in ax.get_legend().get_texts()]
    assert names == ["survey scan", "observed", "C9H7ClO2 [M+H]+"]
    assert ax.collections  # the survey scan's peaks (only those near the precursor)
    assert ax.get_xlim()[0] > mz[0] - 1.0 and ax.get_xlim()[1] < mz[-1] + 1.0
