"""The words of the job and run contract (SPEC §3, §4), defined once.

Every layer -- the API's validation and OpenAPI schema, the store, the
scheduler, the CLI -- takes its statuses, policies, kinds and defaults from
here. The members are ``str`` enums, so they compare equal to the plain
strings stored in rows and JSON (``RunStatus.FAILED == "failed"``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final


class RunStatus(StrEnum):
    """The life of one run (SPEC §4)."""

    CLAIMED = "claimed"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    LOST = "lost"

    @property
    def in_flight(self) -> bool:
        """A run in this status holds a lease."""
        return self in IN_FLIGHT_STATUSES

    @property
    def final(self) -> bool:
        return self in FINAL_STATUSES


IN_FLIGHT_STATUSES: Final = (RunStatus.CLAIMED, RunStatus.RUNNING, RunStatus.RETRYING)
FINAL_STATUSES: Final = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SKIPPED,
                         RunStatus.LOST)
RUN_STATUSES: Final = IN_FLIGHT_STATUSES + FINAL_STATUSES


class RunOrigin(StrEnum):
    """Why a run exists: its schedule, or a request through the API."""

    SCHEDULE = "schedule"
    TRIGGER = "trigger"
    REPLAY = "replay"
    BACKFILL = "backfill"
    UPSTREAM = "upstream"  # made by the success of the jobs an ``after`` schedule names


# Origins whose runs pass the gates of their job before a first attempt
# (exclusion calendars, ``depends_on``, concurrency); manual ones do not.
GATED_ORIGINS: Final = (RunOrigin.SCHEDULE, RunOrigin.UPSTREAM)
# Runs a person asked for through the API. They are not lateness: their
# ``lateness_ms`` is measured from the request (not from a past fire time
# they replay or backfill), and the lateness statistics, plots, histograms
# and ``late`` notifications, which tell whether the schedule fires on
# time, leave them out.
MANUAL_ORIGINS: Final = (RunOrigin.TRIGGER, RunOrigin.REPLAY, RunOrigin.BACKFILL)
RUN_ORIGINS: Final = tuple(RunOrigin)


class MisfirePolicy(StrEnum):
    FIRE_ONCE = "fire_once"
    FIRE_ALL = "fire_all"
    SKIP = "skip"


class ConcurrencyPolicy(StrEnum):
    ALLOW = "allow"
    FORBID = "forbid"
    REPLACE = "replace"
    BUFFER_ONE = "buffer_one"  # keep the latest fire while a run is in flight
    BUFFER_ALL = "buffer_all"  # keep every fire, in order, up to ``buffer_limit``


class DeliveryMode(StrEnum):
    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


class TargetKind(StrEnum):
    HTTP = "http"
    SQS = "sqs"
    CONTAINER = "container"
    WORKER = "worker"  # waits on a work queue for a worker to claim it (cronman.api.work)


#: Target kinds whose runs an operator's cancel reaches through the node
#: holding them (``POST /v1/runs/{id}/cancel``: recorded on the run row, read
#: at the node's lease renewal); a worker's and an http callback's go through
#: their work queue, and the others cannot be stopped once sent.
NODE_CANCELLED_KINDS = frozenset({TargetKind.CONTAINER.value})


class WorkState(StrEnum):
    """Where a worker run stands while it is with its queue."""

    QUEUED = "queued"  # waiting for a worker (or for its retry's time)
    HELD = "held"  # claimed by a worker, under a lease its heartbeats renew
    WAITING_CAPACITY = "waiting_capacity"  # queued, but too few idle workers (shown only)


class WorkKind(StrEnum):
    """Whose work item it is (``work_items.kind``)."""

    WORKER = "worker"  # a worker target's: queued until a worker claims it
    HTTP = "http"  # an http target's with "completion": "callback": held by its receiver


class HttpCompletion(StrEnum):
    """How an http target's run ends (the target's ``completion``)."""

    RESPONSE = "response"  # the answer is the attempt's outcome
    CALLBACK = "callback"  # a 202 leaves the run running; the receiver completes it


class ScheduleKind(StrEnum):
    ONCE = "once"
    INTERVAL = "interval"
    CRON = "cron"
    AFTER = "after"  # no fire times: fired by the success of upstream jobs


class TriggerMode(StrEnum):
    """When an ``after`` schedule fires: every upstream succeeded, or any one."""

    ALL = "all"
    ANY = "any"


class EdgeKind(StrEnum):
    """How one job depends on another (an edge of the job graph)."""

    DEPENDS_ON = "depends_on"  # a fire waits for the upstream's fresh success
    AFTER = "after"  # the upstream's success fires the job


MISFIRE_POLICIES: Final = tuple(MisfirePolicy)
TRIGGER_MODES: Final = tuple(TriggerMode)
CONCURRENCY_POLICIES: Final = tuple(ConcurrencyPolicy)
DELIVERY_MODES: Final = tuple(DeliveryMode)
TARGET_KINDS: Final = tuple(TargetKind)
WORK_STATES: Final = tuple(WorkState)
# A dead letter receives a run record: only the kinds that carry a message.
DEAD_LETTER_KINDS: Final = (TargetKind.HTTP, TargetKind.SQS)

# --- defaults a job spec is completed with (SPEC §3) --------------------------

DEFAULT_NAMESPACE: Final = "default"
DEFAULT_MAX_ATTEMPTS: Final = 3
DEFAULT_MIN_BACKOFF: Final = 1
DEFAULT_MAX_BACKOFF: Final = 60
DEFAULT_MISFIRE_POLICY: Final = MisfirePolicy.FIRE_ONCE
DEFAULT_MISFIRE_GRACE: Final = 300
DEFAULT_DELIVERY: Final = DeliveryMode.AT_LEAST_ONCE
DEFAULT_CONCURRENCY: Final = ConcurrencyPolicy.ALLOW
DEFAULT_PRIORITY: Final = 0
DEFAULT_TRIGGER_MODE: Final = TriggerMode.ALL
# How long a fire waits for a stale upstream of ``depends_on`` before it is
# recorded ``skipped`` (seconds after its due time), when the entry says not.
DEFAULT_DEPENDENCY_WAIT: Final = 600
# ``buffer_all``: how many fires a job keeps while a run of it is in flight.
DEFAULT_BUFFER_LIMIT: Final = 100
BUFFER_LIMIT_MAX: Final = 1000
BUFFERED_POLICIES: Final = (ConcurrencyPolicy.BUFFER_ONE, ConcurrencyPolicy.BUFFER_ALL)
# The ``error`` of a run row a buffer holds (status ``claimed``) starts with
# this; its ``gate`` says behind which run (cronman.scheduler.dispatch.buffers).
BUFFERED_PREFIX: Final = "buffered: "
# The circuit breaker's and the run limit's bounds.
PAUSE_AFTER_FAILURES_MAX: Final = 1000
MAX_RUNS_MAX: Final = 10**9
# Run statuses ``max_runs`` counts (a skipped fire is no run of the target).
COUNTED_STATUSES: Final = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.LOST)


def default_retry() -> dict[str, Any]:
    """A job's ``retry`` when it names none (a fresh dict: callers may fill it)."""
    return {"max_attempts": DEFAULT_MAX_ATTEMPTS, "min_backoff": DEFAULT_MIN_BACKOFF,
            "max_backoff": DEFAULT_MAX_BACKOFF}


def default_misfire() -> dict[str, Any]:
    """A job's ``misfire`` when it names none."""
    return {"policy": DEFAULT_MISFIRE_POLICY.value, "grace": DEFAULT_MISFIRE_GRACE}


class JobAction(StrEnum):
    """What a recorded job change did (the ``action`` of a job history entry)."""

    CREATE = "create"
    UPDATE = "update"
    PATCH = "patch"
    PAUSE = "pause"
    RESUME = "resume"
    TRIGGER = "trigger"
    REPLAY = "replay"
    BACKFILL = "backfill"
    DELETE = "delete"
    DONE = "done"  # ``max_runs`` reached (recorded by the store, not asked for)


JOB_ACTIONS: Final = tuple(JobAction)
# The actor of a change made while the API runs without authentication.
ANONYMOUS_ACTOR: Final = "anonymous"


class TokenAction(StrEnum):
    """What a recorded API token change did (the ``action`` of a token history entry)."""

    CREATE = "create"
    REVOKE = "revoke"


TOKEN_ACTIONS: Final = tuple(TokenAction)
# The actor of a token change made with database access (``cronman tokens
# create|revoke``), not through the API: there is no token to name.
DATABASE_ACTOR: Final = "database"
# The actor of a change the service made itself: a job that paused itself
# after failures (``pause_after_failures``) or reached its ``max_runs``.
SCHEDULER_ACTOR: Final = "scheduler"


# --- notifications (cronman.notify) --------------------------------------------

class NotifyEvent(StrEnum):
    """What a notification rule may listen to."""

    FAILED = "failed"  # a run ended failed
    LOST = "lost"  # a run ended lost
    RECOVERED = "recovered"  # the first success of a job after failures
    LATE = "late"  # a fire not started within late_after seconds of its time
    PAUSED = "paused"  # the job paused itself after failed runs (pause_after_failures)


class ChannelKind(StrEnum):
    """Where a notification goes."""

    EMAIL = "email"
    WEBHOOK = "webhook"


class NotificationStatus(StrEnum):
    """The life of one outgoing message in the outbox."""

    PENDING = "pending"  # waiting for its time (or its next attempt)
    SENDING = "sending"  # taken by the notifier; back to pending if it dies
    SENT = "sent"
    FAILED = "failed"  # gave up after the last attempt, or refused for good


class NotificationKind(StrEnum):
    """One event sent alone, or several folded into a digest by the rate limit."""

    EVENT = "event"
    DIGEST = "digest"


NOTIFY_EVENTS: Final = tuple(NotifyEvent)
CHANNEL_KINDS: Final = tuple(ChannelKind)
NOTIFICATION_STATUSES: Final = tuple(NotificationStatus)
# Seconds between two messages of one rule about one job; what comes in
# between is folded into one digest sent at the end of the interval.
DEFAULT_DIGEST_INTERVAL: Final = 900
