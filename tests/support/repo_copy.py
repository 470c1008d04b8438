"""A copy of the repository as a clone of it holds: tracked files and new ones not
ignored (the working tree's state), nothing built -- no .venv, no build/, no caches.

Installing from a copy keeps pip's in-tree build (``build/``, ``*.egg-info``) out
of the repository, where two tests installing at once would share it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def repo_copy(dest: Path) -> Path:
    """Copy the repository's files to ``dest`` (made if missing); returns ``dest``."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, check=True)
    for name in out.stdout.decode().split("\0"):
        src = REPO / name
        if name and src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest
