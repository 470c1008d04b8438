"""The retry policy and what a lost lease means (SPEC §3 ``retry``, ``delivery``):
pure functions, no I/O, shared by the scheduler (``scheduler.policies``
re-exports them) and the work queue's store, which retries worker runs
itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cronman.vocabulary import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BACKOFF, DEFAULT_MIN_BACKOFF

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
