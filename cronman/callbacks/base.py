"""The Target contract: fire one attempt of one run.

A target knows nothing of retries, leases or metrics: it delivers one attempt
and returns an ``Outcome``; it never raises for a delivery failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Delivery:
    """Everything a target needs to fire one attempt."""

    job_id: str
    run_id: str
    scheduled_for: datetime
    attempt: int
    target: dict[str, Any]  # the job's normalised target object (SPEC §3)
    namespace: str = ""
    job_name: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one attempt. ``retryable`` False means retrying is pointless
    (a rejected URL, an SSRF refusal); the run then fails at once."""

    ok: bool
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    retryable: bool = True


class Target(Protocol):
    kind: str

    async def deliver(self, delivery: Delivery) -> Outcome:
        """Fire one attempt. Runs on the dispatcher's event loop; blocking work
        (boto3) must be pushed to a thread."""

    async def close(self) -> None: ...
