"""The Python client of the cronman API (light: no server dependency).

    from cronman.client import CronmanClient, ConflictError

    api = CronmanClient.from_env()          # CRONMAN_URL, CRONMAN_TOKEN
    job = api.create_job(spec)
    for job in api.iter_jobs(namespace="billing", labels={"team": "billing"}):
        ...

See :mod:`cronman.client.api` for every call and :mod:`cronman.client.errors`
for the errors. A worker of a work queue is a ``Worker`` with a handler
(:mod:`cronman.client.worker`); ``CommandHandler`` runs a command per run.
"""

from __future__ import annotations

from cronman.client.api import BULK_MAX, DEFAULT_URL, PAGE_MAX, CronmanClient
from cronman.client.command import CommandHandler
from cronman.client.errors import (
    ApiError,
    BulkCreateError,
    ConflictError,
    InvalidRequest,
    NotFoundError,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from cronman.client.held_run import RunReport
from cronman.client.notifications import Notification, NotificationRule
from cronman.client.run_context import RunContext, RunFailed
from cronman.client.signing import SigningKey, SigningKeys
from cronman.client.tokens import ApiToken, CreatedToken
from cronman.client.transport import NO_RETRY, RetryPolicy
from cronman.client.types import (
    Backfill,
    Claim,
    Cluster,
    Heartbeat,
    HistoryEntry,
    Job,
    JobSpec,
    Page,
    Queue,
    Readiness,
    Run,
    RunItem,
)
from cronman.client.worker import Worker
from cronman.client.workflows import Calendar, JobDependencies, JobEdge

__all__ = [
    "BULK_MAX",
    "DEFAULT_URL",
    "NO_RETRY",
    "PAGE_MAX",
    "ApiError",
    "ApiToken",
    "Backfill",
    "BulkCreateError",
    "Calendar",
    "Claim",
    "Cluster",
    "CommandHandler",
    "ConflictError",
    "CreatedToken",
    "CronmanClient",
    "Heartbeat",
    "HistoryEntry",
    "InvalidRequest",
    "Job",
    "JobDependencies",
    "JobEdge",
    "JobSpec",
    "NotFoundError",
    "Notification",
    "NotificationRule",
    "Page",
    "PermissionDenied",
    "Readiness",
    "RetryPolicy",
    "Queue",
    "Run",
    "RunContext",
    "RunFailed",
    "RunItem",
    "RunReport",
    "SigningKey",
    "SigningKeys",
    "Unauthenticated",
    "Unavailable",
    "Worker",
]
