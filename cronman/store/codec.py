"""Rows to value objects, and the opaque cursors of list answers."""

from __future__ import annotations

import base64
import binascii
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Row

from cronman.errors import ValidationError
from cronman.models import Job, Run, RunUpdate
from cronman.store.tables import jobs, scheduled_jobs
from cronman.timeutil import EPOCH

JOB_FIELDS = tuple(f.name for f in fields(Job))
RUN_FIELDS = tuple(f.name for f in fields(Run))
assert set(JOB_FIELDS) == set(jobs.c.keys()), "Job and the jobs table disagree"
assert set(RUN_FIELDS) == set(scheduled_jobs.c.keys()), "Run and scheduled_jobs disagree"

# Columns a RunUpdate may set through ``extra``.
RUN_EXTRA_COLUMNS = frozenset(RUN_FIELDS) - {"id", "job_id", "scheduled_for"}


def job_from_row(row: Row[Any]) -> Job:
    m = row._mapping
    return Job(**{name: m[name] for name in JOB_FIELDS})


def run_from_row(row: Row[Any]) -> Run:
    m = row._mapping
    return Run(**{name: m[name] for name in RUN_FIELDS})


def run_values(run: Run) -> dict[str, Any]:
    return {name: getattr(run, name) for name in RUN_FIELDS}


def merge_updates(updates: list[RunUpdate]) -> list[RunUpdate]:
    """One update per run (first-seen order): later updates win, None keeps the earlier value.

    A batch may carry several changes of one run (``running`` then
    ``succeeded``); a set-based UPDATE must see each run once.
    """
    merged: dict[str, RunUpdate] = {}
    for u in updates:
        prev = merged.get(u.id)
        if prev is None:
            merged[u.id] = RunUpdate(**{f.name: getattr(u, f.name) for f in fields(RunUpdate)})
            merged[u.id].extra = dict(u.extra)
            continue
        prev.status = u.status
        prev.result = u.result
        prev.error = u.error
        for name in ("attempt", "started_at", "finished_at", "lateness_ms", "duration_ms",
                     "lease_expires_at", "next_attempt_at"):
            value = getattr(u, name)
            if value is not None:
                setattr(prev, name, value)
        prev.extra.update(u.extra)
    for u in merged.values():
        unknown = set(u.extra) - RUN_EXTRA_COLUMNS
        if unknown:
            raise ValueError(f"RunUpdate.extra names unknown columns: {sorted(unknown)}")
    return list(merged.values())


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValidationError("invalid cursor", field="cursor") from None


def to_us(t: datetime) -> int:
    d = t - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def encode_job_cursor(job_id: str) -> str:
    return _b64(f"j:{job_id}")


def decode_job_cursor(cursor: str) -> str:
    text = _unb64(cursor)
    if not text.startswith("j:") or len(text) < 3:
        raise ValidationError("invalid cursor", field="cursor")
    return text[2:]


def encode_run_cursor(scheduled_for: datetime, run_id: str) -> str:
    return _b64(f"{to_us(scheduled_for)}:{run_id}")


def decode_run_cursor(cursor: str) -> tuple[datetime, str]:
    text = _unb64(cursor)
    head, sep, run_id = text.partition(":")
    try:
        if not sep or not run_id:
            raise ValueError(text)
        return from_us(int(head)), run_id
    except (ValueError, OverflowError):
        raise ValidationError("invalid cursor", field="cursor") from None
