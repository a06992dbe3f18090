"""The model in the window: loading and switching the model bundle, its adapter, and the compute device.

:class:`ModelController` holds the Model menu's actions (the bundled model, a model folder, the device, model
information) and the status-bar labels that name the model and the device. A model loads in
:class:`~msgpt_gui.run_controller.RunController`'s task slot; when it has loaded, the window follows it here:
the results drawn with the previous model are reset, the ion types offered and accepted are the model's, and
the "Use adapter" box is enabled only for a model with an adapter.
"""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

import html
from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QFileDialog, QLabel, QMessageBox

from engine.errors import MsgptError
from engine.model.bundle import ModelBundle, resolve_device
from engine.paths import default_model_dir

from .actions import make_action

DEVICES = (("auto", "&Automatic (GPU when present)"), ("cpu", "&CPU"), ("cuda", "CUDA &GPU"))


class ModelController(QObject):
    """The model bundle (``model_dir``) and the device the window uses; see the module notes."""

    def __init__(self, window, model: str | None = None, device: str | None = None):
        super().__init__(window)
        self.window = window
        settings = window.settings
        saved = settings.model_path
        self.model_dir = Path(model).expanduser() if model else Path(saved) if saved else default_model_dir()
        self.device = device or settings.device
        self.act_default_model = make_action(window, "Use the &Bundled Model", lambda: self.choose_model(None),
                                             tip="Load the default model shipped with the app")
        self.act_model_folder = make_action(window, "Open &Model Folder…", self.model_dialog,
                                            tip="Load a model bundle folder (it holds config.json)")
        self.act_model_info = make_action(window, "Model &Information", self.show_model_info)
        self.device_group = QActionGroup(window)
        self.device_actions = {}
        for key, text in DEVICES:
            act = QAction(text, window, checkable=True)
            act.setChecked(key == self.device)
            act.triggered.connect(lambda _=False, k=key: self.choose_device(k))
            self.device_group.addAction(act)
            self.device_actions[key] = act
        self.model_label = QLabel()
        self.model_label.setToolTip("The model bundle in use (Model ▸ Open Model Folder… to change it)")
        self.device_label = QLabel()
        self.device_label.setToolTip("Where the model runs (Model ▸ Device to change it)")
        window.runs.model_loaded.connect(self._model_loaded)
        window.runs.model_failed.connect(self._model_failed)

    @property
    def bundle(self) -> ModelBundle | None:
        return self.window.runs.bundle

    def add_menu_actions(self, menu) -> None:
        """The Model menu's own actions (others follow them)."""
        menu.addAction(self.act_default_model)
        menu.addAction(self.act_model_folder)
        devices = menu.addMenu("&Device")
        for act in self.device_actions.values():
            devices.addAction(act)
        menu.addSeparator()
        menu.addAction(self.act_model_info)

    def update_actions(self, busy: bool) -> None:
        has_default = (default_model_dir() / "config.json").is_file()
        self.act_default_model.setEnabled(not busy and has_default)
        self.act_default_model.setToolTip("Load the default model shipped with the app" if has_default else
                                          "The bundled default model is not installed in this version")
        self.act_model_folder.setEnabled(not busy)

    # ------------------------------------------------------------------------------------------
    # loading
    # ------------------------------------------------------------------------------------------
    def load_model(self, path: Path | None, quiet_if_default: bool = False) -> bool:
        """Load a model bundle in the background (None: the bundled default)."""
        w = self.window
        path = Path(path) if path else default_model_dir()
        if w.busy:
            w.show_message("Wait for the running work to finish (or cancel it with Esc) before changing the model.")
            return False
        is_default = path == default_model_dir()
        if is_default and not (path / "config.json").is_file():
            text = ("No model loaded: the bundled default model is not installed in this version. "
                    "Choose Model ▸ Open Model Folder… to pick a model bundle folder.")
            if not quiet_if_default:  # asked for from the menu: keep whatever model is loaded
                w.show_message(text.replace("No model loaded: t", "T"))
                return False
            self.model_dir = path
            w.runs.bundle = None
            self._follow_model()
            w.status(text, 0)
            self.show_label()
            w.runs.unload_model()
            return False
        self.model_label.setText(f"Loading model {html.escape(path.name)}…")
        return w.runs.load_model(path, self.device)

    def _model_loaded(self, bundle: ModelBundle, path: Path) -> None:
        self.model_dir = path
        self.window.settings.model_path = "" if path == default_model_dir() else str(path)
        self._reset_all_results()
        self._follow_model()
        _, device_note = resolve_device(self.device)
        self.show_label()
        self.window.status(f"Model {bundle.name} loaded. {device_note}")

    def _reset_all_results(self) -> None:
        """Results drawn with another model are gone."""
        w = self.window
        for e in w.spectra.all_entries():
            if e.spectrum is not None:
                e.reset_results()
        w.spectra.all_changed()
        w.spectra_list.update_title()
        w.show_current()

    def _follow_model(self) -> None:
        """What follows the model: the "Use adapter" box (enabled only for a model with an adapter; the
        parameters follow it) and the ion types offered and accepted."""
        w = self.window
        adducts = self.bundle.runnable_adducts if self.bundle is not None else None
        w.spectra.bundle = w.candidates.bundle = self.bundle  # why a confidence is missing
        w.spectra.set_supported_adducts(adducts)
        w.spectrum_panel.editor.set_supported_adducts(adducts)
        w.params_panel.set_adapter_available(self.bundle is not None and self.bundle.has_adapter)
        try:
            w.query_params = w.params_panel.params()
        except MsgptError:  # invalid parameters: the panel shows why; they are taken when fixed
            pass

    def _model_failed(self, message: str, path: Path) -> None:
        self.show_label()
        self.window.show_message(f"Cannot load the model bundle {path}:\n{message}", "error")
        if self.bundle is None:
            self.window.status("No model loaded: choose Model ▸ Open Model Folder… to pick a model bundle folder.", 0)

    def show_label(self) -> None:
        """The status bar's model (with "adapter on/off") and device."""
        if self.bundle is None:
            self.model_label.setText("<span style='color:#b3261e'><b>No model loaded</b></span> — "
                                     "Model ▸ Open Model Folder…")
            self.model_label.setToolTip("No model is loaded: Model ▸ Open Model Folder… picks a bundle folder")
        else:
            b = self.bundle
            adapter = (" · adapter " + ("on" if self.window.query_params.use_adapter else "off")) if b.has_adapter \
                else ""
            default = " (bundled)" if self.model_dir == default_model_dir() else ""
            self.model_label.setText(f"Model: <b>{html.escape(b.name)}</b>{default} [{b.checksum[:8]}]{adapter}")
            self.model_label.setToolTip(f"{b.describe()}\n{b.path}")
        dev, note = resolve_device(self.device)
        label = dev.type.upper()
        if self.bundle is not None:
            label = self.bundle.device.type.upper()
        self.device_label.setText(f"Device: <b>{label}</b>" + (" (auto)" if self.device == "auto" else ""))
        self.device_label.setToolTip(note + "\nModel ▸ Device changes it")

    # ------------------------------------------------------------------------------------------
    # the Model menu
    # ------------------------------------------------------------------------------------------
    def choose_model(self, path: Path | None) -> None:
        self.load_model(path)

    def model_dialog(self) -> None:
        start = str(self.model_dir if self.model_dir.exists() else Path.home())
        folder = QFileDialog.getExistingDirectory(self.window, "Choose a model bundle folder (it holds config.json)",
                                                  start)
        if folder:
            self.load_model(Path(folder))

    def choose_device(self, device: str) -> None:
        if device == self.device:
            return
        if self.window.busy:
            self.device_actions[self.device].setChecked(True)
            self.window.show_message("Wait for the running work to finish (or cancel it with Esc) before changing "
                                     "the device.")
            return
        self.device = device
        self.window.settings.device = device
        self.device_actions[device].setChecked(True)
        if self.bundle is not None or (self.model_dir / "config.json").is_file():
            self.load_model(self.model_dir)
        else:
            self.show_label()

    def show_model_info(self) -> None:
        if self.bundle is None:
            text = "No model is loaded: Model ▸ Open Model Folder… picks a model bundle folder."
        else:
            b = self.bundle
            card = b.path / "MODEL_CARD.md"
            text = (f"{b.describe()}\n\nFolder: {b.path}\nChecksum: {b.checksum}\n"
                    f"Supported adducts: {', '.join(b.supported_adducts)} natively; "
                    f"{', '.join(b.runnable_adducts[len(b.supported_adducts):]) or 'none'} by mapping")
            if card.is_file():
                text += "\n\n" + card.read_text(encoding="utf-8", errors="replace")[:3000]
        self.window.message_shown.emit("info", text)
        if self.window.popups:
            box = QMessageBox(QMessageBox.Icon.Information, "Model information", text, QMessageBox.StandardButton.Ok,
                              self.window)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.show()
