"""The Target contract: fire one attempt of one run.

A target knows nothing of retries, leases or metrics: it delivers one attempt
and returns an ``Outcome``; it never raises for a delivery failure.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


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
    priority: int = 0  # the job's: where runs wait for room, higher goes first
    # The job's retry policy and delivery mode, and when the run fell due
    # (Unix ms): what a target that retries on its own needs (``worker``).
    retry: Mapping[str, Any] | None = None
    delivery_mode: str = "at_least_once"
    due_ms: int | None = None
    # The attempt's trace context for the receiver (``traceparent``,
    # ``tracestate``), empty unless tracing is on (observability.tracing).
    trace: tuple[tuple[str, str], ...] = ()
    # Headers of this attempt besides the target's and the Cronman-* ids (http:
    # a completion by callback's URLs and lease token), as (name, value) pairs.
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one attempt. ``retryable`` False means retrying is pointless
    (a rejected URL, an SSRF refusal); the run then fails at once. ``lost``
    means that whether the attempt ran is unknown (the worker agent holding it
    vanished): the run's ``delivery`` decides, as for a run whose node died
    (``at_least_once``: a new attempt now; ``at_most_once``: ``lost``).
    ``handed_off`` means the run went to a work queue (a ``worker`` target):
    its row is the queue's now, and the node forgets it without a write."""

    ok: bool
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    retryable: bool = True
    lost: bool = False
    handed_off: bool = False


class Answered:
    """An awaitable of an outcome known at once (a target refused before
    sending): nothing to wait for, and nothing left unawaited if dropped."""

    __slots__ = ("outcome",)

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def __await__(self) -> Generator[Any, None, Outcome]:
        yield from ()  # a generator that yields nothing: ``await`` takes its return value
        return self.outcome


class Target(Protocol):
    """Fires one kind of target. A target whose work outlives the node (a
    container on a worker agent) may also define ``hand_back()``: the node
    calls it when it hands its runs back (graceful stop), before it cancels
    their attempts, and the target then leaves that work running for the
    runs' next holder instead of stopping it.

    A target may also define ``start(delivery)``: ``deliver`` not yet
    awaited, with what can be done at once done before it returns (the
    ``http`` target writes its request on an idle connection). The
    dispatcher calls it from the callback that starts the attempt, so the
    send does not wait for the attempt task's first turn."""

    kind: str

    @property
    def pool_limit(self) -> int | None:
        """How many attempts the target can carry at once (its connection
        pool); None when it does not limit them. The dispatcher never starts more."""

    async def deliver(self, delivery: Delivery) -> Outcome:
        """Fire one attempt. Runs on the dispatcher's event loop; blocking work
        (boto3) must be pushed to a thread."""

    def hand_back(self) -> None:
        """The node stops and hands its runs back: work that outlives an
        attempt's delivery (a container on an agent) is left running, for
        whichever node takes the run over to adopt. Most targets have none."""

    async def close(self) -> None: ...


@runtime_checkable
class Stoppable(Protocol):
    """A target whose attempt under way can be asked to stop and still
    answer (a container on a worker agent: SIGTERM, SIGKILL after the agent's
    grace, its exit code and output kept) -- an operator's cancel
    (``scheduler.dispatch.cancels``)."""

    async def stop_run(self, run_id: str) -> bool:
        """Ask the run's attempt under way to stop; its ``deliver`` then
        answers as it ends. False when there is nothing to stop yet (the run
        still waits for room): the caller ends the attempt itself."""
