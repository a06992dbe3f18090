"""The settings file is written atomically; a failed write says so and keeps the previous file."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import OutputError
from msgpt_gui.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

SAVE_TWICE = """
import sys
from engine.errors import OutputError
from msgpt_gui.settings import Settings
s = Settings(sys.argv[1])
s.set("model/device", "cpu")
s.sync()                      # a small file: fits
s.set("files/recent", "x" * 5000)
try:
    s.sync()                  # larger than the files this process may write: the 'disk is full'
except OutputError as e:
    print(e)
"""


def test_a_full_disk_keeps_the_previous_settings_file(tmp_path):
    path = tmp_path / "config" / "msgpt-gui.ini"

    def small_files_only():
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))

    p = subprocess.run([sys.executable, "-c", SAVE_TWICE, str(path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, preexec_fn=small_files_only, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (
        f"Cannot save the settings: {path} cannot be written (disk full, or no permission?). The previous settings "
        "file is kept; the app works on, but changes made now are lost when it closes."
    )
    assert path.read_text() == "[model]\ndevice=cpu\n"  # the first save, whole
    assert os.listdir(path.parent) == ["msgpt-gui.ini"]  # no temporary file left behind


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_folder_keeps_the_previous_settings_file(tmp_path):
    s = Settings(tmp_path / "msgpt-gui.ini")
    s.set("model/device", "cpu")
    s.sync()
    before = (tmp_path / "msgpt-gui.ini").read_bytes()
    tmp_path.chmod(0o500)
    try:
        s.set("model/device", "cuda")
        with pytest.raises(OutputError, match="cannot be written"):
            s.sync()
    finally:
        tmp_path.chmod(0o700)
    assert (tmp_path / "msgpt-gui.ini").read_bytes() == before


def test_the_window_tells_the_user_when_its_settings_cannot_be_saved(make_window, monkeypatch):
    window = make_window(wait_model=False, model=None)

    def full_disk(self):
        raise OutputError("Cannot save the settings: disk full.")

    monkeypatch.setattr(Settings, "sync", full_disk)
    window.save_layout()
    assert ("error", "Cannot save the settings: disk full.") in window.messages
