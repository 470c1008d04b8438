"""Build hook (the rest of the packaging is in pyproject.toml): a wheel carries the
Alembic migrations, the repository's ``migrations/`` folder, as ``cronman/_migrations``,
so that a server installed with ``pip install 'cronman[server]'`` can create its schema.
An editable install reads the repository's own folder instead."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


class BuildWithMigrations(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "cronman" / "_migrations"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(MIGRATIONS, target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithMigrations})
