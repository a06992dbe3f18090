"""A ``git worktree`` of a commit of this repository in a temporary folder, removed after: the code of another commit
that ``bench_run.py`` and ``bench_app.py`` time beside this tree's."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """The source tree of ``commit`` (a detached worktree) for the duration of the block."""
    folder = Path(tempfile.mkdtemp(prefix="msgpt-baseline-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), commit], check=True,
                   capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)], capture_output=True)
        shutil.rmtree(folder.parent, ignore_errors=True)
