"""Retry, misfire and concurrency policies (SPEC §3): pure functions, no I/O.

Times are Unix milliseconds (ints) throughout, as in the timer heap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_ATTEMPTS = 1
DEFAULT_MIN_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 60.0
DEFAULT_MISFIRE_POLICY = "fire_once"
DEFAULT_MISFIRE_GRACE = 300.0

MISFIRE_POLICIES = ("fire_once", "fire_all", "skip")
CONCURRENCY_POLICIES = ("allow", "forbid", "replace")


# --- retry -------------------------------------------------------------------


def retry_backoff(attempt: int, min_backoff: float, max_backoff: float) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based):
    ``min_backoff * 2**(attempt-1)``, capped at ``max_backoff``."""
    if attempt < 1:
        attempt = 1
    # 2**60 already exceeds any sane cap; avoid building huge floats.
    exp = min(attempt - 1, 60)
    return float(min(max_backoff, min_backoff * (2**exp)))


def next_retry_delay(attempt: int, retry: Mapping[str, Any] | None, retryable: bool = True) -> float | None:
    """Seconds until the next attempt after attempt ``attempt`` failed, or
    None when the run is done (``failed``): attempts used up, or the failure is
    not retryable."""
    if not retryable:
        return None
    retry = retry or {}
    max_attempts = int(retry.get("max_attempts", DEFAULT_MAX_ATTEMPTS) or 1)
    if attempt >= max_attempts:
        return None
    return retry_backoff(
        attempt,
        float(retry.get("min_backoff", DEFAULT_MIN_BACKOFF)),
        float(retry.get("max_backoff", DEFAULT_MAX_BACKOFF)),
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
    """Apply a misfire policy to past fire times.

    ``recent``: fire times (ascending) not yet handled, all in the past, the ones
    that may still be within grace; ``older``: how many more, earlier, fire times
    were missed (already known to be beyond grace, not listed); their latest is
    ``older_cursor_ms`` when ``recent`` is empty.

    ``fire_once`` fires the latest time within grace, ``fire_all`` each one
    within grace, ``skip`` none. Everything not fired counts as skipped.
    """
    limit = now_ms - grace_ms
    within = [t for t in recent if t >= limit]
    total = older + len(recent)
    if policy == "skip":
        fire: list[int] = []
    elif policy == "fire_all":
        fire = within
    else:
        fire = within[-1:]
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
    return ConcurrencyDecision("dispatch")


# --- lease recovery ----------------------------------------------------------


def recovery_action(delivery: str, status: str) -> str:
    """What a sweeper does with a run whose lease expired: ``redispatch`` or
    ``lost``.

    A ``retrying`` run was between attempts (its last attempt is known to have
    ended), so its next attempt is no repetition: it is dispatched under both
    delivery modes. Otherwise ``at_most_once`` records the run ``lost``.
    """
    if status == "retrying" or delivery != "at_most_once":
        return "redispatch"
    return "lost"
