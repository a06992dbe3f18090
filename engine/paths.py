"""User folders (platformdirs) and the bundled resources, in one place.

``MSGPT_HOME`` overrides every user folder (data, cache, config) with subfolders of one directory,
which tests and portable installs use.
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import PlatformDirs

APP_NAME = "msgpt"
_DIRS = PlatformDirs(APP_NAME, appauthor=False)


def _home() -> Path | None:
    home = os.environ.get("MSGPT_HOME")
    return Path(home).expanduser() if home else None


def data_dir() -> Path:
    return (_home() / "data") if _home() else Path(_DIRS.user_data_dir)


def cache_dir() -> Path:
    return (_home() / "cache") if _home() else Path(_DIRS.user_cache_dir)


def config_dir() -> Path:
    return (_home() / "config") if _home() else Path(_DIRS.user_config_dir)


def resources_dir() -> Path:
    """The ``resources/`` folder shipped with the app (default model, example spectra)."""
    import resources

    return Path(resources.__file__).resolve().parent


def default_model_dir() -> Path:
    return resources_dir() / "default_model"


def examples_dir() -> Path:
    return resources_dir() / "examples"
