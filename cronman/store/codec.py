"""Rows to value objects, and the opaque cursors of list answers."""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Row

from cronman.errors import ValidationError
from cronman.models import Job, Run, RunUpdate
from cronman.store.tables import (
    ATTEMPT_COLUMNS,
    CANCEL_COLUMNS,
    NOTIFIER_RUN_COLUMNS,
    jobs,
    scheduled_jobs,
)
from cronman.timeutil import EPOCH

JOB_FIELDS = tuple(f.name for f in fields(Job))
RUN_FIELDS = tuple(f.name for f in fields(Run))
assert set(JOB_FIELDS) == set(jobs.c.keys()), "Job and the jobs table disagree"
assert set(RUN_FIELDS) == (set(scheduled_jobs.c.keys()) - set(NOTIFIER_RUN_COLUMNS)
                           - set(ATTEMPT_COLUMNS) - set(CANCEL_COLUMNS)), \
    "Run and scheduled_jobs disagree"

# Columns a RunUpdate may set through ``extra``.
RUN_EXTRA_COLUMNS = frozenset(RUN_FIELDS) - {"id", "job_id", "scheduled_for"}


def job_from_row(row: Row[Any]) -> Job:
    m = row._mapping
    return Job(**{name: m[name] for name in JOB_FIELDS})


def run_from_row(row: Row[Any]) -> Run:
    m = row._mapping
    return Run(**{name: m[name] for name in RUN_FIELDS})


# What neither database stores in text: PostgreSQL refuses NUL in text and
# "\u0000" in jsonb, and lone surrogates cannot be encoded as UTF-8.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(value: Any) -> Any:
    """``value`` with NUL characters and lone surrogates in its strings (keys
    included) replaced by U+FFFD; the same object when there are none.

    Run results and errors carry text a target sent back (a response body
    holding a NUL byte): such a row must not be refused by the database.
    """
    if isinstance(value, str):
        return _UNSTORABLE.sub(REPLACEMENT, value) if _UNSTORABLE.search(value) else value
    if isinstance(value, dict):
        items = [(storable(k), storable(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(),
                                                              strict=True)):
            return value
        return dict(items)
    if isinstance(value, list):
        out = [storable(v) for v in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    return value


def run_values(run: Run) -> dict[str, Any]:
    values = {name: getattr(run, name) for name in RUN_FIELDS}
    values["result"] = storable(values["result"])
    values["error"] = storable(values["error"])
    return values


def merge_updates(updates: list[RunUpdate]) -> list[RunUpdate]:
    """One update per run (first-seen order): later updates win, None keeps the earlier value.

    A batch may carry several changes of one run (``running`` then
    ``succeeded``); a set-based UPDATE must see each run once.
    """
    merged: dict[str, RunUpdate] = {}
    for u in updates:
        prev = merged.get(u.id)
        if prev is None:
            merged[u.id] = u.copy()
        else:
            prev.absorb(u)
    for u in merged.values():
        unknown = set(u.extra) - RUN_EXTRA_COLUMNS
        if unknown:
            raise ValueError(f"RunUpdate.extra names unknown columns: {sorted(unknown)}")
        u.result = storable(u.result)
        u.error = storable(u.error)
        if u.extra:
            u.extra = {k: storable(v) for k, v in u.extra.items()}
    return list(merged.values())


# The cursors of list answers are the keyset position itself: the last job's
# id; the last run's scheduled_for in microseconds since 1970 (a job has one
# run per scheduled_for). Every text matching these patterns is a valid
# position (the OpenAPI document gives them), anything else is a 400.
JOB_CURSOR_PATTERN = r"[0-9a-fA-F-]{1,36}"
# Microseconds up to 2.5e17 (year 9892): any of them is a datetime.
RUN_CURSOR_PATTERN = r"[0-9]{1,17}|[01][0-9]{17}|2[0-4][0-9]{16}"
# Across jobs: the last run's scheduled_for and, after a dot, its id.
SEARCH_CURSOR_PATTERN = f"(?:{RUN_CURSOR_PATTERN})\\.{JOB_CURSOR_PATTERN}"
# In (namespace, name) order: the last job's namespace and name.
NAME_CURSOR_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}/[^\x00]{1,256}"
_JOB_CURSOR = re.compile(f"^(?:{JOB_CURSOR_PATTERN})$")
_RUN_CURSOR = re.compile(f"^(?:{RUN_CURSOR_PATTERN})$")
_SEARCH_CURSOR = re.compile(f"^(?:{SEARCH_CURSOR_PATTERN})$")
_NAME_CURSOR = re.compile(f"^(?:{NAME_CURSOR_PATTERN})$", re.S)


def _invalid_cursor() -> ValidationError:
    return ValidationError("invalid cursor: pass back the next_cursor of the previous page",
                           field="cursor")


def to_us(t: datetime) -> int:
    d = t - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def encode_job_cursor(job_id: str) -> str:
    return job_id


def decode_job_cursor(cursor: str) -> str:
    """The job id a page starts after; ``ValidationError`` for anything else."""
    if not _JOB_CURSOR.match(cursor):
        if _NAME_CURSOR.match(cursor):
            raise _other_order("sort=name", "id order")
        raise _invalid_cursor()
    return cursor


def _other_order(was: str, asked: str) -> ValidationError:
    return ValidationError(f"is a position of {was}, not of {asked}: pass it back with "
                           f"the sort it came with", field="cursor")


def encode_run_cursor(scheduled_for: datetime) -> str:
    return str(to_us(scheduled_for))


def decode_run_cursor(cursor: str) -> datetime:
    """The scheduled_for a page of runs starts before; ``ValidationError`` for anything else."""
    if not _RUN_CURSOR.match(cursor):
        raise _invalid_cursor()
    return from_us(int(cursor))


def encode_search_cursor(scheduled_for: datetime, run_id: str) -> str:
    """The position after a run in (scheduled_for, id) order, newest first
    (``search_runs``: runs of many jobs can share a scheduled_for)."""
    return f"{to_us(scheduled_for)}.{run_id}"


def decode_search_cursor(cursor: str) -> tuple[datetime, str]:
    if not _SEARCH_CURSOR.match(cursor):
        raise _invalid_cursor()
    us, _, run_id = cursor.partition(".")
    return from_us(int(us)), run_id


def encode_name_cursor(namespace: str, name: str) -> str:
    """The position after a job in (namespace, name) order (``search_jobs``):
    ``namespace/name`` (a namespace holds no ``/``)."""
    return f"{namespace}/{name}"


def decode_name_cursor(cursor: str) -> tuple[str, str]:
    if not _NAME_CURSOR.match(cursor):
        if _JOB_CURSOR.match(cursor):
            raise _other_order("id order", "sort=name")
        raise _invalid_cursor()
    namespace, _, name = cursor.partition("/")
    return namespace, name
