"""Persistent settings: one INI file in ``engine.paths.config_dir()`` (``MSGPT_HOME`` moves it).

QSettings with ``IniFormat`` and an explicit file path, so tests (and portable installs) keep
their settings apart from the user's. Values are read back with a type and a default, because an
INI file stores everything as text. Qt writes the file atomically (a temporary file renamed over
it); :meth:`Settings.sync` reports a failed write as an :class:`~engine.errors.OutputError`.

The file dialogs start where the user's files are: the folder used last for that kind of file, else beside the
listed spectra, else the user's documents folder (:func:`start_folder`); never in the app's own folders (its data,
cache and settings folders, the bundled resources such as the read-only examples).
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import json
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths

from engine.elucidation.pipeline import QueryParams
from engine.errors import OutputError
from engine.paths import cache_dir, config_dir, data_dir, resources_dir


SETTINGS_FILE = "msgpt-gui.ini"
MAX_RECENT = 10


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE


def documents_folder() -> str:
    """The user's documents folder when there is one, else the home folder."""
    docs = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return docs if docs and Path(docs).is_dir() else str(Path.home())


def is_app_folder(folder) -> bool:
    """Whether ``folder`` is (inside) one of the app's own folders: data (autosaves), cache, settings, the bundled
    resources (the read-only examples). The file dialogs never start there."""
    try:
        path = Path(folder).resolve()
        return any(path.is_relative_to(Path(f).resolve()) for f in (data_dir(), cache_dir(), config_dir(),
                                                                      resources_dir()))
    except (OSError, ValueError):
        return False


def existing_folder(folder: str) -> str:
    """``folder``, or its nearest parent that still exists (a folder moved or a drive unplugged); the documents
    folder when none is given or none exists."""
    if folder:
        path = Path(folder)
        for candidate in (path, *path.parents):
            if candidate.is_dir():
                return str(candidate)
    return documents_folder()


def start_folder(*choices: str) -> str:
    """Where a file dialog starts: the first of ``choices`` (folders; a gone one counts as its nearest parent that
    exists) that is not one of the app's own folders, else the documents folder."""
    for choice in choices:
        if choice:
            folder = existing_folder(choice)
            if not is_app_folder(folder):
                return folder
    return documents_folder()


class Settings:
    """Typed access to the app's QSettings."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else settings_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.qsettings = QSettings(str(self.path), QSettings.Format.IniFormat)

    # -- plain values
    def get(self, key: str, default=None, type_=None):
        if type_ is None:
            return self.qsettings.value(key, default)
        value = self.qsettings.value(key, default)
        try:
            if type_ is bool and isinstance(value, str):
                return value.lower() in ("1", "true", "yes")
            return type_(value)
        except (TypeError, ValueError):
            return default

    def set(self, key: str, value) -> None:
        self.qsettings.setValue(key, value)

    def sync(self) -> None:
        """Write the settings file now, atomically (Qt writes a temporary file, then renames it).

        Raises :class:`~engine.errors.OutputError` when the file cannot be written (disk full, no
        permission); the previous settings file is then left as it was.
        """
        self.qsettings.sync()
        status = self.qsettings.status()
        if status != QSettings.Status.NoError:
            what = "cannot be written (disk full, or no permission?)" if status == QSettings.Status.AccessError \
                else "is not a valid settings file"
            raise OutputError(
                f"Cannot save the settings: {self.path} {what}. The previous settings file is kept; the app "
                "works on, but changes made now are lost when it closes."
            )

    @property
    def first_start(self) -> bool:
        return not self.get("app/started_before", False, bool)

    def mark_started(self) -> None:
        self.set("app/started_before", True)

    # -- model
    @property
    def model_path(self) -> str:
        """'' means the bundled default model."""
        return self.get("model/path", "", str)

    @model_path.setter
    def model_path(self, value: str) -> None:
        self.set("model/path", value or "")

    @property
    def device(self) -> str:
        value = self.get("model/device", "auto", str)
        return value if value in ("auto", "cpu", "cuda") else "auto"

    @device.setter
    def device(self, value: str) -> None:
        self.set("model/device", value)

    # -- query parameters
    def query_params(self) -> QueryParams:
        d = QueryParams()
        try:
            return QueryParams(
                kappa_min=self.get("params/kappa_min", d.kappa_min, float),
                kappa_max=self.get("params/kappa_max", d.kappa_max, float),
                groups=self.get("params/groups", d.groups, int),
                samples_per_group=self.get("params/samples_per_group", d.samples_per_group, int),
                seed=self.get("params/seed", d.seed, int),
                decoding=self.get("params/decoding", d.decoding, str),
                ranking=self.get("params/ranking", d.ranking, str),
                use_adapter=self.get("params/use_adapter", d.use_adapter, bool),
                effort=self.get("params/effort", d.effort, str),
                suspects_present=self.get("params/suspects_present", d.suspects_present, float),
            )
        except ValueError:  # ConfigError: a hand-edited file; fall back to the defaults
            return d

    def set_query_params(self, p: QueryParams) -> None:
        for k in ("kappa_min", "kappa_max", "groups", "samples_per_group", "seed", "decoding", "ranking",
                  "use_adapter", "effort", "suspects_present"):
            self.set(f"params/{k}", getattr(p, k))

    # -- recent files
    def recent_files(self) -> list[str]:
        try:
            value = json.loads(self.get("files/recent", "[]", str))
        except json.JSONDecodeError:
            return []
        return [str(v) for v in value if isinstance(v, str)][:MAX_RECENT]

    def add_recent_file(self, path: str) -> list[str]:
        path = str(Path(path).resolve())
        files = [path] + [f for f in self.recent_files() if f != path]
        self.set("files/recent", json.dumps(files[:MAX_RECENT]))
        return files[:MAX_RECENT]

    def clear_recent_files(self) -> None:
        self.set("files/recent", "[]")

    # -- where the file dialogs start (files/last_dir, files/export_dir)
    def open_dir(self, beside: str = "") -> str:
        """Where File ▸ Open starts: the folder of the spectra opened last (dialog, drop, recent files), else
        ``beside`` (the listed spectra's folder), else the documents folder."""
        return start_folder(self.get("files/last_dir", "", str), beside)

    def remember_open_dir(self, path) -> None:
        """``path`` (a file, or a folder) was opened: File ▸ Open starts in its folder next time."""
        path = Path(path)
        self.set("files/last_dir", str(path if path.is_dir() else path.parent))

    def export_dir(self, beside: str = "") -> str:
        """Where the export dialogs (candidates, posteriors, scored structures) start: the folder exported to last,
        else that of the spectra opened last, else ``beside`` (the listed spectra's folder), else the documents
        folder."""
        return start_folder(self.get("files/export_dir", "", str), self.get("files/last_dir", "", str), beside)

    def project_dir(self, beside: str = "") -> str:
        """Where Open / Save Project start: the folder of the project saved or opened last, else that of the spectra
        opened last, else ``beside`` (the listed spectra's folder), else the documents folder."""
        return start_folder(self.get("projects/last_dir", "", str), self.get("files/last_dir", "", str), beside)

    def remember_export_dir(self, path) -> None:
        """A file was exported to ``path``: the export dialogs start in its folder next time."""
        self.set("files/export_dir", str(Path(path).parent))

    # -- window layout
    def bytes_value(self, key: str) -> QByteArray | None:
        value = self.qsettings.value(key)
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None
