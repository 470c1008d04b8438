"""Records the store contract speaks in that are no rows of a model: who
asks for a change, which database member a process writes to, what an
idempotency key holds.

They live here, below both ``base.py`` and the SQL parts, so the contract
imports no implementation (the parts import them from here too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronman.models import Job
from cronman.vocabulary import ANONYMOUS_ACTOR, DATABASE_ACTOR, JobAction

Describe = Callable[[Job], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ChangeContext:
    """Who asks for a job change, through which request, and what the change is.

    ``describe`` renders a job's definition as it is recorded (secrets
    redacted); ``details`` are facts of the request worth keeping (a
    backfill's range), merged with what the store adds (run ids, counts).
    """

    action: JobAction
    describe: Describe
    actor_token_id: str | None = None
    actor_name: str = ANONYMOUS_ACTOR
    request_id: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TokenActor:
    """Who creates or revokes a token, as the token history records it: an
    admin token through the API (its id and name, the request's id), or
    someone with database access (no token id; ``name`` says who)."""

    token_id: str | None = None
    name: str = DATABASE_ACTOR
    request_id: str | None = None


@dataclass(frozen=True)
class Member:
    """The database member written to and since when (Unix seconds)."""

    member: str
    since: float


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What an idempotency key holds: the request it was first used with and,
    once the call answered, its answer (``status_code`` None: in progress)."""

    request_hash: str
    status_code: int | None
    body: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """How one earlier attempt of a run ended, as its row read when the next
    attempt began (a status still ``running`` or ``claimed``: the attempt's
    end was never written, e.g. its node died and a sweeper took the run)."""

    attempt: int
    status: str
    node_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
