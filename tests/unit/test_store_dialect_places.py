"""Only the places ``cronman.store.dialect``'s docstring names look at the
database kind: every other store module goes through its named functions."""

from __future__ import annotations

import re
from pathlib import Path

import cronman.store.dialect as dialect

STORE = Path(dialect.__file__).parent
# What a module branching on the database kind writes.
BRANCH = re.compile(r"dialect ==|dialect !=|dialect\.name|is_postgres|pg_insert|sqlite_insert")
# The statements' homes (the batch modules) and the set-up (a backend picked once).
BULK = {"change_seq", "job_bulk", "outbox_bulk", "run_bulk"}
SETUP = {"__init__", "connect", "engine", "migrate", "tables"}


def branching_modules() -> set[str]:
    return {path.stem for path in STORE.glob("*.py") if BRANCH.search(path.read_text())}


def test_only_the_named_places_branch_on_the_dialect():
    assert branching_modules() - {"dialect"} <= BULK | SETUP


def test_the_dialect_docstring_names_each_place_that_branches():
    doc = dialect.__doc__ or ""
    for module in branching_modules() - {"dialect"}:
        assert f"``{module}``" in doc, module
