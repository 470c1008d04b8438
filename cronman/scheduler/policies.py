"""Retry, misfire and concurrency policies (SPEC §3): pure functions, no I/O.

The retry and lease-recovery rules live in the pure core (``cronman.retries``:
the work queue's store applies them too) and are re-exported here.

Times are Unix milliseconds (ints) throughout, as in the timer heap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cronman.retries import next_retry_delay as next_retry_delay
from cronman.retries import recovery_action as recovery_action
from cronman.retries import retry_backoff as retry_backoff
from cronman.vocabulary import (
    DEFAULT_MISFIRE_GRACE,
    DEFAULT_MISFIRE_POLICY,
    MISFIRE_POLICIES,
)

# --- misfire -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MisfirePlan:
    """What to do with fire times found in the past.

    ``fire`` lists the fire times to dispatch (ascending); ``skipped`` counts the
    ones passed over; ``cursor_ms`` is the latest fire time examined (where the
    schedule stands afterwards), None when there was none.
    """

    fire: list[int] = field(default_factory=list)
    skipped: int = 0
    cursor_ms: int | None = None


def misfire_settings(misfire: Mapping[str, Any] | None) -> tuple[str, int]:
    """(policy, grace in ms) of a job's ``misfire`` object, defaults filled in."""
    misfire = misfire or {}
    policy = str(misfire.get("policy") or DEFAULT_MISFIRE_POLICY)
    if policy not in MISFIRE_POLICIES:
        policy = DEFAULT_MISFIRE_POLICY
    grace = misfire.get("grace")
    grace_s = DEFAULT_MISFIRE_GRACE if grace is None else float(grace)
    return policy, int(grace_s * 1000)


def plan_misfire(
    recent: Sequence[int],
    older: int,
    now_ms: int,
    policy: str,
    grace_ms: int,
    older_cursor_ms: int | None = None,
) -> MisfirePlan:
    """Apply a misfire policy to past fire times (SPEC §3: grace is a threshold).

    ``recent``: fire times (ascending) not yet handled, all in the past;
    ``older``: how many more, earlier, fire times were missed (beyond grace,
    not listed); their latest is ``older_cursor_ms``.

    A fire time late by no more than ``grace_ms`` fires as usual under every
    policy. Older ones are misfires, and the policy decides: ``fire_once``
    fires the latest misfired time once, ``fire_all`` each listed one,
    ``skip`` none. Everything not fired counts as skipped.
    """
    limit = now_ms - grace_ms
    within = [t for t in recent if t >= limit]
    misfired = [t for t in recent if t < limit]
    late: list[int]
    if policy == "skip":
        late = []
    elif policy == "fire_all":
        late = misfired
    else:
        latest = misfired[-1] if misfired else (older_cursor_ms if older else None)
        late = [] if latest is None else [latest]
    fire = late + within
    total = older + len(recent)
    cursor = recent[-1] if recent else older_cursor_ms
    return MisfirePlan(fire=fire, skipped=total - len(fire), cursor_ms=cursor)


# --- concurrency -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConcurrencyDecision:
    """``action``: ``dispatch``, ``skip`` (forbid) or ``replace``; ``previous``:
    the in-flight run ids the decision is about."""

    action: str
    previous: tuple[str, ...] = ()

    @property
    def error(self) -> str | None:
        if self.action == "skip" and self.previous:
            return f"previous run {self.previous[0]} still in flight"
        return None


def decide_concurrency(policy: str, in_flight: Sequence[str]) -> ConcurrencyDecision:
    """What to do with a new fire while ``in_flight`` runs of the job are running."""
    if not in_flight or policy == "allow":
        return ConcurrencyDecision("dispatch")
    prev = tuple(in_flight)
    if policy == "forbid":
        return ConcurrencyDecision("skip", prev)
    if policy == "replace":
        return ConcurrencyDecision("replace", prev)
    # buffer_one / buffer_all: the fire goes on to the overlap buffers
    # (cronman.scheduler.dispatch.buffers), which hold it while runs are in flight.
    return ConcurrencyDecision("dispatch")
