"""GUI test fixtures: offscreen Qt, isolated settings, the tiny bundle, window factory."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt is imported anywhere

from pathlib import Path

import pytest

import msgpt_gui.qtcompat  # noqa: E402,F401  (before pytest-qt's first processEvents: see that module)

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FIXTURE_MGF = TESTS / "data" / "fixture.mgf"


@pytest.fixture(scope="session")
def gui_bundle_dir(tiny_bundle_dir) -> Path:
    """The tiny bundle the GUI tests run on: the session's copy of the committed one (tests/conftest.py)."""
    return tiny_bundle_dir


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh MSGPT_HOME: settings, data and cache of the app go there."""
    path = tmp_path / "msgpt_home"
    monkeypatch.setenv("MSGPT_HOME", str(path))
    return path


@pytest.fixture
def no_examples(tmp_path, monkeypatch) -> Path:
    """An empty examples folder (the app opens the examples on first start)."""
    import msgpt_gui.file_controller as files

    folder = tmp_path / "no_examples"
    folder.mkdir()
    monkeypatch.setattr(files, "examples_dir", lambda: folder)
    return folder


@pytest.fixture
def no_default_model(tmp_path, monkeypatch) -> Path:
    """The bundled default model is hidden: the GUI tests run on the tiny bundle (``make_window``), so that what
    they assert does not hang on what the shipped model learned. tests/gui/test_gui_shipped_model.py runs the app
    on the shipped one."""
    import msgpt_gui.model_controller as models

    folder = tmp_path / "no_default_model"
    monkeypatch.setattr(models, "default_model_dir", lambda: folder)
    return folder


@pytest.fixture
def make_window(qtbot, home, no_examples, no_default_model, gui_bundle_dir):
    """Build a MainWindow on the tiny bundle, or with ``model=None`` on the (hidden) default one.

    Popups are off; every message is recorded in ``window.messages`` as (level, text).
    """
    from msgpt_gui.main_window import MainWindow

    windows = []

    def make(files=(), model=gui_bundle_dir, wait_model: bool = True, **kwargs):
        window = MainWindow(model=str(model) if model else None, device="cpu", files=files, popups=False, **kwargs)
        window.messages = []
        window.message_shown.connect(lambda level, text: window.messages.append((level, text)))
        qtbot.addWidget(window)
        windows.append(window)
        window.show()
        if wait_model and model:
            qtbot.waitUntil(lambda: window.bundle is not None and not window.busy, timeout=30_000)
        return window

    yield make
    for window in windows:
        window.shutdown()


@pytest.fixture
def fixture_mgf() -> Path:
    return FIXTURE_MGF


@pytest.fixture
def write_mgf(tmp_path):
    """Write records of fixture.mgf to a new file: ``write_mgf(name, titles=None, drop_keys=())``."""

    def write(name: str, titles=None, drop_keys=()) -> Path:
        blocks = [b.strip() for b in FIXTURE_MGF.read_text().split("END IONS") if "BEGIN IONS" in b]
        out = []
        for b in blocks:
            title = next(line.split("=", 1)[1] for line in b.splitlines() if line.startswith("TITLE="))
            if titles is None or title in titles:
                lines = [ln for ln in b.splitlines() if ln.split("=", 1)[0] not in drop_keys]
                out.append("\n".join(lines) + "\nEND IONS\n")
        path = tmp_path / name
        path.write_text("\n".join(out))
        return path

    return write


@pytest.fixture(autouse=True)
def _no_isomer_edits(monkeypatch):
    """Standard effort's isomer edits (tested in tests/engine/elucidation) score by the tiny bundle's random
    posterior here: dozens of random isomers would outrank the structure these tests follow."""
    from engine.elucidation.pipeline import SpectrumSession

    monkeypatch.setattr(SpectrumSession, "edits", lambda self, params: ({}, frozenset()))


@pytest.fixture(autouse=True)
def _quiet_matplotlib_qt():
    """matplotlib's Qt backend reads an attribute Qt 6 deprecated; not ours to fix."""
    import warnings

    warnings.filterwarnings("ignore", message=r"Enum value 'Qt::ApplicationAttribute\.AA_UseHighDpiPixmaps'",
                            category=DeprecationWarning)
    yield


@pytest.fixture
def bundled_libraries():
    """Asked for by a test that runs on the bundled libraries (tests/gui/test_gui_shipped_model.py): the autouse
    :func:`no_bundled_libraries` then leaves them listed."""
    return True


@pytest.fixture(autouse=True)
def no_bundled_libraries(request, monkeypatch):
    """The bundled structure and spectral libraries take seconds to index on first use: the GUI tests start with
    none listed (a test adds tiny ones of its own), except a test that asks for :func:`bundled_libraries`."""
    import msgpt_gui.logic.libraries as libraries

    if "bundled_libraries" in request.fixturenames:
        return
    monkeypatch.setattr(libraries, "default_sources", lambda: [])
