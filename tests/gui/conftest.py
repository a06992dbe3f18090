"""GUI test fixtures: offscreen Qt, isolated settings, a cached tiny bundle, window factory."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt is imported anywhere

import msgpt_gui.qtcompat  # noqa: E402,F401  (before pytest-qt's first processEvents: see that module)

import hashlib
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FIXTURE_MGF = TESTS / "data" / "fixture.mgf"

# What decides the tiny bundle's content: a change to any of these rebuilds the cached copy.
_BUNDLE_INPUTS = [TESTS / "tiny_bundle.py", FIXTURE_MGF] + [
    ROOT / "engine" / f"{m}.py" for m in ("bundle", "decoder", "encoder", "tokenizer", "querying", "featurize")
]


def _bundle_key() -> str:
    h = hashlib.sha256()
    for p in _BUNDLE_INPUTS:
        h.update(p.name.encode())
        h.update(p.read_bytes() if p.exists() else b"")
    return h.hexdigest()[:16]


def _loads(path: Path) -> bool:
    from engine.bundle import load_bundle
    from engine.errors import MsgptError

    try:
        load_bundle(path, device="cpu")
    except MsgptError:
        return False
    return True


@pytest.fixture(scope="session")
def gui_bundle_dir(request) -> Path:
    """The tiny trained bundle of tests/tiny_bundle.py, kept in pytest's cache between runs.

    Building it trains a decoder (a minute or more on two busy cores); the GUI tests only need
    *a* working bundle, so a copy is cached under .pytest_cache, keyed by the files that decide
    its content. Without a cache (``-p no:cacheprovider``) the session fixture builds it.
    """
    cache = getattr(request.config, "cache", None)
    if cache is None:
        return request.getfixturevalue("tiny_bundle_dir")
    target = Path(cache.mkdir("msgpt-tiny-bundle")) / _bundle_key()
    if (target / "config.json").is_file() and _loads(target):
        return target
    built = request.getfixturevalue("tiny_bundle_dir")
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(built, tmp)
    shutil.rmtree(target, ignore_errors=True)
    try:
        tmp.rename(target)
    except OSError:  # another test run put it there first
        shutil.rmtree(tmp, ignore_errors=True)
    return target if (target / "config.json").is_file() else built


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh MSGPT_HOME: settings, data and cache of the app go there."""
    path = tmp_path / "msgpt_home"
    monkeypatch.setenv("MSGPT_HOME", str(path))
    return path


@pytest.fixture
def no_examples(tmp_path, monkeypatch) -> Path:
    """An empty examples folder (the app opens the examples on first start)."""
    import msgpt_gui.main_window as mw

    folder = tmp_path / "no_examples"
    folder.mkdir()
    monkeypatch.setattr(mw, "examples_dir", lambda: folder)
    return folder


@pytest.fixture
def no_default_model(tmp_path, monkeypatch) -> Path:
    """The bundled default model is not there (as in this version): tests never depend on it."""
    import msgpt_gui.main_window as mw

    folder = tmp_path / "no_default_model"
    monkeypatch.setattr(mw, "default_model_dir", lambda: folder)
    return folder


@pytest.fixture
def make_window(qtbot, home, no_examples, no_default_model, gui_bundle_dir):
    """Build a MainWindow on the tiny bundle, or with ``model=None`` on the (missing) default one.

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
def _quiet_matplotlib_qt():
    """matplotlib's Qt backend reads an attribute Qt 6 deprecated; not ours to fix."""
    import warnings

    warnings.filterwarnings("ignore", message=r"Enum value 'Qt::ApplicationAttribute\.AA_UseHighDpiPixmaps'",
                            category=DeprecationWarning)
    yield
