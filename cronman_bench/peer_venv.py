"""The APScheduler 4 peer's own virtualenv: made once, reused while its pins hold.

APScheduler 3.x (the first peer) and 4.x are both the ``apscheduler``
package, so they cannot live in one environment. The 4.x peer runs from a
virtualenv of its own, built from the pinned ``peer_requirements/apscheduler4.txt``
shipped with this package: by ``ops/setup --dev`` in a checkout
(``python -m cronman_bench.peer_venv``), else by the first benchmark run that
needs it. A stamp named after the pins' digest tells a current one from a
stale one.

Where: ``CRONMAN_BENCH_APS4_VENV`` if set; in a checkout, ``.venv-apscheduler4``
beside the repository's ``.venv``; otherwise ``~/.cache/cronman-bench/apscheduler4``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).with_name("peer_requirements") / "apscheduler4.txt"
PEER_SCRIPT = Path(__file__).with_name("peer_aps4.py")
VENV_ENV = "CRONMAN_BENCH_APS4_VENV"


def venv_dir() -> Path:
    if os.environ.get(VENV_ENV):
        return Path(os.environ[VENV_ENV])
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").is_file() and (repo / "ops").is_dir():
        return repo / ".venv-apscheduler4"
    return Path.home() / ".cache" / "cronman-bench" / "apscheduler4"


def _stamp(venv: Path) -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    return venv / f".installed-{digest}"


def python_of(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def is_ready(venv: Path | None = None) -> bool:
    v = venv or venv_dir()
    return python_of(v).exists() and _stamp(v).exists()


def ensure(venv: Path | None = None, *, quiet: bool = True) -> Path:
    """The peer's Python, after making or updating its virtualenv if needed."""
    v = venv or venv_dir()
    if is_ready(v):
        return python_of(v)
    if not python_of(v).exists():
        subprocess.run([sys.executable, "-m", "venv", str(v)], check=True)
    q = ["-q"] if quiet else []
    subprocess.run([str(python_of(v)), "-m", "pip", "install", *q, "--disable-pip-version-check",
                    "-r", str(REQUIREMENTS)], check=True)
    for old in v.glob(".installed-*"):
        old.unlink()
    _stamp(v).touch()
    return python_of(v)


if __name__ == "__main__":
    print(ensure(quiet="-v" not in sys.argv[1:]))
