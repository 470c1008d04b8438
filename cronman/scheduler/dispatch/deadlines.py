"""How long a target is given: its ``timeout`` (an attempt's, a dead letter's),
before the dispatcher adds its margin and gives up on it."""

from __future__ import annotations

from typing import Any

DEFAULT_TARGET_TIMEOUT = 10.0


def timeout_of(spec: dict[str, Any]) -> float:
    """A target's ``timeout`` in seconds (its default when unset or invalid).
    A ``worker`` target's attempt here is its hand-off to the queue: its
    ``timeout`` bounds the worker's claim, which the queue watches."""
    if spec.get("kind") == "worker":
        return DEFAULT_TARGET_TIMEOUT
    try:
        value = float(spec.get("timeout") or DEFAULT_TARGET_TIMEOUT)
    except (TypeError, ValueError):
        value = DEFAULT_TARGET_TIMEOUT
    return max(0.1, value)
