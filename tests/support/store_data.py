"""Builders of job specs and runs for the store tests."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cronman.ids import run_id_for
from cronman.models import Run
from cronman.timeutil import utcnow


def job_spec(name: str, namespace: str = "default", **overrides: Any) -> dict[str, Any]:
    """A normalised job spec as the API hands it to ``create_jobs``."""
    spec: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "schedule": {"kind": "cron", "cron": "*/5 * * * *", "timezone": "UTC"},
        "target": {"kind": "http", "url": "http://127.0.0.1:9/hook", "method": "POST",
                   "headers": {}, "body": "", "timeout": 10},
        "retry": {"max_attempts": 3, "min_backoff": 1, "max_backoff": 60},
        "misfire": {"policy": "fire_once", "grace": 300},
        "delivery": "at_least_once",
        "concurrency": "allow",
        "priority": 0,
        "labels": {},
    }
    spec.update(overrides)
    return spec


def base_time() -> datetime:
    """A whole second of the current hour (inside the partitions made ahead)."""
    return utcnow().replace(minute=0, second=0, microsecond=0)


def make_run(job_id: str, t: datetime, *, node: str | None = "n1", status: str = "claimed",
             lease_seconds: float = 30, **fields: Any) -> Run:
    return Run(
        id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status=status,
        node_id=node, claimed_at=t, lease_expires_at=t + timedelta(seconds=lease_seconds),
        **fields,
    )
