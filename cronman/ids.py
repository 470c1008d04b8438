"""Identifiers.

Job ids are time-ordered (UUIDv7 layout), so keyset pagination over ids
follows creation order. Run ids are *deterministic*: a UUIDv8 whose first
48 bits are the scheduled time in Unix milliseconds and whose remaining bits
come from a hash of (job id, scheduled time). Every replica therefore derives
the same run id for the same fire (the SQS deduplication id and the
``Cronman-Run-Id`` header agree across replicas), and the scheduled time --
the partition key of ``scheduled_jobs`` -- can be read back from a run id.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import datetime

from cronman.timeutil import from_ms, now_ms, to_ms


def new_job_id() -> str:
    ms = now_ms()
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | rand
    return str(_with_version(value, 7))


def run_id_for(job_id: str, scheduled_for: datetime) -> str:
    ms = to_ms(scheduled_for)
    digest = hashlib.blake2b(f"{job_id}|{ms}".encode(), digest_size=10).digest()
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | int.from_bytes(digest, "big")
    return str(_with_version(value, 8))


def scheduled_ms_of_run_id(run_id: str) -> int | None:
    """The scheduled time (Unix ms) a run id encodes, or None if it is no run id."""
    try:
        value = uuid.UUID(run_id)
    except (ValueError, AttributeError, TypeError):
        return None
    if value.version != 8:
        return None
    return value.int >> 80


def scheduled_for_of_run_id(run_id: str) -> datetime | None:
    ms = scheduled_ms_of_run_id(run_id)
    return None if ms is None else from_ms(ms)


def _with_version(value: int, version: int) -> uuid.UUID:
    value &= ~(0xF << 76)
    value |= version << 76
    value &= ~(0x3 << 62)
    value |= 0x2 << 62
    return uuid.UUID(int=value)
