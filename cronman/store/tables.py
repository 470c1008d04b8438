"""The schema, as SQLAlchemy Core tables. Alembic migrations must yield exactly this.

``scheduled_jobs`` holds one row per dispatched fire time. On PostgreSQL it is
range-partitioned by day on ``scheduled_for`` (partitions ``scheduled_jobs_yyyymmdd``,
created and dropped by ``cronman.store.partitions``); on SQLite it is one table.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Sequence,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    or_,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from cronman import vocabulary

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# The statuses as plain strings, for SQL (a run in flight holds a lease).
IN_FLIGHT_STATUSES = tuple(s.value for s in vocabulary.IN_FLIGHT_STATUSES)
FINAL_STATUSES = tuple(s.value for s in vocabulary.FINAL_STATUSES)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        stored: datetime = value
        if stored.tzinfo is None:
            return stored.replace(tzinfo=UTC)
        return stored.astimezone(UTC)


JsonType = JSON().with_variant(JSONB(), "postgresql")
# JSON where None is SQL NULL (not JSON null), for columns queried with IS NULL.
NullableJsonType = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("namespace", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("schedule", JsonType, nullable=False),
    Column("target", JsonType, nullable=False),
    Column("retry", JsonType, nullable=False),
    Column("misfire", JsonType, nullable=False),
    Column("delivery", String(16), nullable=False),
    Column("concurrency", String(16), nullable=False),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("start_at", UTCDateTime()),
    Column("end_at", UTCDateTime()),
    Column("jitter", Float),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("labels", JsonType, nullable=False),
    Column("dead_letter", JsonType),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    # Soft delete: schedulers following the change feed must see deletes.
    # Tombstones are purged after the retention period.
    Column("deleted_at", UTCDateTime()),
    # Monotonic change counter (per database), the watermark of the polling safety net.
    Column("change_seq", BigInteger, nullable=False),
    # Where the schedule stands: the latest fire time that was claimed (or
    # skipped by misfire policy). A restarted node resumes from here.
    Column("last_fire_at", UTCDateTime()),
    # Fire times passed over by the misfire policy, reported on the next run.
    Column("skipped_pending", BigInteger, nullable=False, server_default=text("0")),
    # The job's own notification rules (cronman.notify.rules); NULL: none.
    Column("notify", NullableJsonType),
    # [{"job": <upstream id>, "within": s, "wait": s}]: a fire waits for each
    # upstream's fresh success (cronman.scheduler.dispatch.gates); NULL: none.
    Column("depends_on", NullableJsonType),
    # Names of exclusion calendars (``calendars``) whose dates skip a fire; NULL: none.
    Column("calendars", NullableJsonType),
    # The policies of cronman.store.run_policies (migration 0012): how many
    # fires ``buffer_all`` keeps (NULL: the default), after how many failed
    # runs in a row the job pauses itself, after how many runs it is done.
    Column("buffer_limit", Integer),
    Column("pause_after_failures", Integer),
    Column("max_runs", BigInteger),
    # What the store keeps for them: failed or lost runs in a row, runs that
    # ended (skipped ones left out), when ``max_runs`` was reached, why the
    # job paused itself; and the operator's note of a pause or a resume.
    Column("failure_streak", Integer, nullable=False, server_default=text("0")),
    Column("runs_done", BigInteger, nullable=False, server_default=text("0")),
    Column("done_at", UTCDateTime()),
    Column("pause_reason", Text),
    Column("pause_note", Text),
    # When the job was paused (by an operator, its breaker or its run limit);
    # NULL while it is not.
    Column("paused_at", UTCDateTime()),
    # Room on each page for the cursor updates of every claim to stay heap-only
    # (migration 0008).
    postgresql_with={"fillfactor": 80},
)
Index(
    "uq_jobs_namespace_name_live",
    jobs.c.namespace,
    jobs.c.name,
    unique=True,
    postgresql_where=jobs.c.deleted_at.is_(None),
    sqlite_where=jobs.c.deleted_at.is_(None),
)
Index("ix_jobs_change_seq", jobs.c.change_seq)

# PostgreSQL source of ``jobs.change_seq`` (SQLite uses max + 1 under its write
# lock). Not a column default: the store always writes change_seq explicitly.
jobs_change_seq = Sequence("jobs_change_seq", metadata=metadata)

scheduled_jobs = Table(
    "scheduled_jobs",
    metadata,
    Column("id", String(36), nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("scheduled_for", UTCDateTime(), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("0")),
    # Which node holds the run; NULL for a run the API requested (trigger,
    # replay, backfill) that no node has taken yet.
    Column("node_id", String(128)),
    # How the run came to be: schedule, trigger, backfill, replay.
    Column("origin", String(16), nullable=False, server_default=text("'schedule'")),
    Column("claimed_at", UTCDateTime()),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    # 64-bit: a run fired ~25 days late has a lateness over 2^31 ms.
    Column("lateness_ms", BigInteger),
    Column("duration_ms", BigInteger),
    Column("result", JsonType),
    Column("error", Text),
    Column("lease_expires_at", UTCDateTime()),
    Column("next_attempt_at", UTCDateTime()),
    Column("skipped_before", BigInteger, nullable=False, server_default=text("0")),
    # The attempt whose final status (failed, lost) the notifier has read;
    # written by the notifier only (see NOTIFIER_RUN_COLUMNS).
    Column("notified_attempt", Integer),
    # What gated the run: the upstream runs it consumed or found fresh, what
    # it waited for and how long, the calendar that skipped it; NULL: nothing.
    Column("gate", NullableJsonType),
    # The outcomes of the run's earlier attempts, oldest first (the row holds
    # the latest): written by a trigger only (migration 0016, ATTEMPT_COLUMNS).
    Column("attempts", NullableJsonType),
    # An operator's cancel of a run its node stops (a container run): who,
    # why, when, which attempt (migration 0018, CANCEL_COLUMNS); NULL: none.
    Column("cancel_request", NullableJsonType),
    PrimaryKeyConstraint("id", "scheduled_for", name="pk_scheduled_jobs"),
    UniqueConstraint("job_id", "scheduled_for", name="uq_scheduled_jobs_job_id_scheduled_for"),
    postgresql_partition_by="RANGE (scheduled_for)",
)
# The sweeper and the pickup of API-requested runs only look at in-flight rows.
Index(
    "ix_scheduled_jobs_in_flight",
    scheduled_jobs.c.lease_expires_at,
    postgresql_where=scheduled_jobs.c.status.in_(IN_FLIGHT_STATUSES),
    sqlite_where=scheduled_jobs.c.status.in_(IN_FLIGHT_STATUSES),
)
# Runs across jobs, newest first (``search_runs``, ``run_stats``): one range
# per status, so "failed in the last hour" reads only those rows; the id
# breaks ties between runs of one instant (the keyset cursor).
Index(
    "ix_scheduled_jobs_status_time",
    scheduled_jobs.c.status,
    scheduled_jobs.c.scheduled_for,
    scheduled_jobs.c.id,
)

# Columns of scheduled_jobs that the scheduler never reads or writes (not in
# ``models.Run``): its inserts leave them NULL.
NOTIFIER_RUN_COLUMNS = ("notified_attempt",)
# Written by the database itself (a trigger, when a run's attempt goes up) and
# read by the API's run detail only (``RunStore.run_attempts``).
ATTEMPT_COLUMNS = ("attempts",)
# Written by the API's cancel (and cleared by a replay), read by the node
# holding the run at its lease renewal and by the API's run detail
# (``RunStore.request_cancel``, ``cancel_requests``).
CANCEL_COLUMNS = ("cancel_request",)
# The runs the notifier has yet to read: failed or lost, in this attempt,
# and not read yet. Small (it holds only failures not yet read), so the
# notifier finds them without a watermark -- a result written late (after a
# database outage) is still found.
UNNOTIFIED_RUNS = and_(
    scheduled_jobs.c.status.in_(("failed", "lost")),
    or_(scheduled_jobs.c.notified_attempt.is_(None),
        scheduled_jobs.c.notified_attempt < scheduled_jobs.c.attempt),
)
Index(
    "ix_scheduled_jobs_unnotified",
    scheduled_jobs.c.scheduled_for,
    postgresql_where=UNNOTIFIED_RUNS,
    sqlite_where=UNNOTIFIED_RUNS,
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("name", String(128), nullable=False),
    # sha256 hex of the secret token; the token itself is shown once, at creation.
    Column("token_hash", String(64), nullable=False, unique=True),
    # NULL for an admin token (all namespaces).
    Column("namespaces", JsonType),
    # A read-only token may call GET (and HEAD) only: every change is a 403.
    Column("read_only", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("revoked_at", UTCDateTime()),
)

# Who created or revoked which API token, when, through which request: one row
# per change, written in the transaction of the change (the token's scope as it
# was; never its secret or hash). Rows are never updated.
token_history = Table(
    "token_history",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("token_id", String(36), nullable=False),
    Column("token_name", String(128), nullable=False),
    # One of vocabulary.TOKEN_ACTIONS.
    Column("action", String(16), nullable=False),
    # SQL NULL for an admin token (all namespaces).
    Column("namespaces", NullableJsonType),
    Column("read_only", Boolean, nullable=False),
    # The admin token that made the change through the API; NULL when it was
    # made with database access (actor_name says by whom).
    Column("actor_token_id", String(36)),
    Column("actor_name", String(128), nullable=False),
    Column("request_id", String(128)),
    Column("at", UTCDateTime(), nullable=False),
)
Index("ix_token_history_token_id_id", token_history.c.token_id, token_history.c.id)

# Who changed which job, when, through which request, and how: one row per job
# change made through the API, written in the transaction of the change. The
# definitions are stored as the API shows them (secrets redacted). Rows are
# never updated; they outlive the job (a deleted job keeps its history).
job_history = Table(
    "job_history",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("job_id", String(36), nullable=False),
    Column("namespace", String(128), nullable=False),
    Column("job_name", String(256), nullable=False),
    # One of vocabulary.JOB_ACTIONS.
    Column("action", String(16), nullable=False),
    # The job's version after the change (before it, for trigger/replay/backfill).
    Column("job_version", Integer, nullable=False),
    # The token that made the change; NULL with the name "anonymous" when auth is off.
    Column("actor_token_id", String(36)),
    Column("actor_name", String(128), nullable=False),
    Column("request_id", String(128)),
    Column("at", UTCDateTime(), nullable=False),
    Column("before", JsonType),
    Column("after", JsonType),
    # What a run request asked for: run ids, the backfill range and counts.
    Column("details", JsonType),
)
Index("ix_job_history_job_id_id", job_history.c.job_id, job_history.c.id)

# A cluster-wide single row per named maintenance task (partition upkeep, lease
# sweeping) recording who ran it last; the lock itself is an advisory lock on
# PostgreSQL and unnecessary on SQLite (one process).
maintenance = Table(
    "maintenance",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("node_id", String(128)),
    Column("ran_at", UTCDateTime()),
)


# -- notifications (cronman.notify) ------------------------------------------------

# Namespace-wide notification rules (a job's own rules live in ``jobs.notify``).
notification_rules = Table(
    "notification_rules",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("namespace", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    # The rule object (cronman.notify.rules), normalised.
    Column("rule", JsonType, nullable=False),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("namespace", "name", name="uq_notification_rules_namespace_name"),
)

# The outbox: one row per message to send (one event, or a digest of several),
# written before it is sent; the sender moves it pending -> sending -> sent
# (or back to pending with the error and a later attempt, or failed).
notifications = Table(
    "notifications",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("namespace", String(128), nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("job_name", String(256), nullable=False),
    # ns:<rule id> or job:<job id>:<digest> (cronman.notify.rules.Rule.key).
    Column("rule_key", String(128), nullable=False),
    # The rate limit's unit (rule, job, destination).
    Column("group_key", String(64), nullable=False),
    # The destination as configured when the message was made.
    Column("channel", JsonType, nullable=False),
    # vocabulary.NotificationKind: event or digest.
    Column("kind", String(16), nullable=False),
    # The event of a single-event message; NULL for a digest.
    Column("event", String(16)),
    # vocabulary.NotificationStatus.
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    # When it is meant to go out (a digest: the end of its interval).
    Column("due_at", UTCDateTime(), nullable=False),
    # The next attempt (pending), or the end of the sender's lease (sending).
    Column("next_attempt_at", UTCDateTime(), nullable=False),
    Column("last_error", Text),
    Column("event_count", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("sent_at", UTCDateTime()),
)
Index(
    "ix_notifications_due",
    notifications.c.next_attempt_at,
    postgresql_where=notifications.c.status.in_(("pending", "sending")),
    sqlite_where=notifications.c.status.in_(("pending", "sending")),
)
# Ids are time-ordered (UUIDv7): lists go by id, newest first.
Index("ix_notifications_job_id_id", notifications.c.job_id, notifications.c.id)

# Every event the notifier found, once per rule: (rule_key, event_key) is
# unique, so an event is never counted twice, whichever notifier saw it.
notification_events = Table(
    "notification_events",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("notification_id", String(36)),
    Column("rule_key", String(128), nullable=False),
    # failed:<run id>:<attempt>, lost:..., recovered:<run id>:<attempt>, late:<job id>:<ms>.
    Column("event_key", String(128), nullable=False),
    Column("event", String(16), nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("run_id", String(36)),
    Column("scheduled_for", UTCDateTime()),
    Column("occurred_at", UTCDateTime(), nullable=False),
    Column("detail", JsonType),
    Column("created_at", UTCDateTime(), nullable=False),
    UniqueConstraint("rule_key", "event_key",
                     name="uq_notification_events_rule_key_event_key"),
)
Index("ix_notification_events_notification_id", notification_events.c.notification_id)

# The rate limit's state: per group, its latest message and the digest still
# open for more events.
notification_groups = Table(
    "notification_groups",
    metadata,
    Column("group_key", String(64), primary_key=True),
    Column("latest_id", String(36), nullable=False),
    Column("latest_due_at", UTCDateTime(), nullable=False),
    Column("open_digest_id", String(36)),
)

# Jobs that failed and have a rule listening for their recovery: the
# scheduled time of their latest failure (a success scheduled at or after it
# is the recovery).
notification_failing_jobs = Table(
    "notification_failing_jobs",
    metadata,
    Column("job_id", String(36), primary_key=True),
    Column("last_failure_at", UTCDateTime(), nullable=False),
    Column("last_failure_run_id", String(36), nullable=False),
    Column("failures", Integer, nullable=False),
    Column("since", UTCDateTime(), nullable=False),
)

# The notifier's cursors (``late``: fire times due up to here were checked).
notifier_cursors = Table(
    "notifier_cursors",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("node_id", String(128)),
)


# -- workflows: dependencies, triggers, exclusion calendars ---------------------------

# The job graph: one row per (upstream, downstream, kind) of the live jobs'
# ``depends_on`` entries and ``after`` schedules, kept in the transaction of
# each job write (cronman.store.dag). What refuses cycles, and deletes of
# jobs others depend on; what tells a success write which runs to make.
job_edges = Table(
    "job_edges",
    metadata,
    Column("downstream_id", String(36), nullable=False),
    Column("upstream_id", String(36), nullable=False),
    # vocabulary.EdgeKind: depends_on or after.
    Column("kind", String(16), nullable=False),
    PrimaryKeyConstraint("downstream_id", "upstream_id", "kind", name="pk_job_edges"),
)
Index("ix_job_edges_upstream_id", job_edges.c.upstream_id)

# Upstream successes heard by ``after`` jobs (cronman.store.triggers): the
# fence that makes one run per success however often the success is written,
# and, while ``consumed_by`` is NULL, the set an ``all`` job is completing.
trigger_events = Table(
    "trigger_events",
    metadata,
    Column("downstream_id", String(36), nullable=False),
    # <upstream run id>:<attempt>: one success of one upstream run.
    Column("event_key", String(64), nullable=False),
    Column("upstream_id", String(36), nullable=False),
    Column("upstream_run_id", String(36), nullable=False),
    Column("upstream_scheduled_for", UTCDateTime(), nullable=False),
    Column("upstream_attempt", Integer, nullable=False),
    # The downstream run made from it; NULL while it waits for the rest of its set.
    Column("consumed_by", String(36)),
    Column("created_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("downstream_id", "event_key", name="pk_trigger_events"),
)
Index("ix_trigger_events_created_at", trigger_events.c.created_at)

# Named exclusion calendars (cronman.schedules.calendars): per namespace, a
# zone and its excluded local dates; jobs name them in ``jobs.calendars``.
calendars = Table(
    "calendars",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("namespace", String(128), nullable=False),
    Column("name", String(128), nullable=False),
    Column("timezone", String(64), nullable=False),
    # The dates as the calendar's JSON form lists them (sorted, unique).
    Column("dates", JsonType, nullable=False),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("namespace", "name", name="uq_calendars_namespace_name"),
)

# Each namespace's signing key generation (cronman.signing_keys): the keys
# themselves are derived from the cluster secret, never stored. A namespace
# without a row is at generation 0; ``previous_until``: the previous
# generation keeps signing until then (the rotation's overlap window).
signing_keys = Table(
    "signing_keys",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("generation", Integer, nullable=False),
    Column("previous_until", UTCDateTime()),
    Column("rotated_at", UTCDateTime(), nullable=False),
)

# What each namespace's runs may ask of their host (cronman.host_policy), as
# an admin token granted it; a namespace without a row has the operator's
# default (CRONMAN_HOST_POLICY).
host_policies = Table(
    "host_policies",
    metadata,
    Column("namespace", String(128), primary_key=True),
    # The keys of {"root": bool, "networks": [...], "process": bool} the grant
    # sets; the others come from the live default.
    Column("policy", JsonType, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    # The admin token that set it (NULL: with auth off or open).
    Column("updated_by", String(36)),
)


# -- work queues (cronman.store.work_queue) ----------------------------------------

# One row per worker run while it is with its queue (a ``worker`` target's
# run from its hand-off until its final status): queued, or held by a
# worker under a lease. The run row (``scheduled_jobs``) is ``running`` or
# ``retrying`` with no node meanwhile; the row here is deleted in the
# transaction that writes the run's final status.
work_items = Table(
    "work_items",
    metadata,
    Column("run_id", String(36), primary_key=True),
    # The run row's key part (its partition).
    Column("scheduled_for", UTCDateTime(), nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("namespace", String(128), nullable=False),
    Column("queue", String(64), nullable=False),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    # When the run fell due (the fire time, or its request) and when this
    # attempt may be claimed (later after a failed attempt's backoff).
    Column("due_at", UTCDateTime(), nullable=False),
    Column("available_at", UTCDateTime(), nullable=False),
    Column("enqueued_at", UTCDateTime(), nullable=False),
    Column("attempt", Integer, nullable=False),
    # vocabulary.WorkState queued or held; ended: the run ended failed or lost
    # and waits for a node to send it to its job's dead letter (work_runs.ENDED).
    Column("state", String(16), nullable=False),
    Column("payload", NullableJsonType),
    Column("heartbeat_timeout", Integer, nullable=False),
    # Seconds a claimed attempt may take; its deadline once claimed.
    Column("timeout", Integer, nullable=False),
    Column("deadline_at", UTCDateTime()),
    # capacity: idle workers needed before a claim, and how long to wait for them.
    Column("capacity_idle", Integer),
    Column("capacity_wait", Integer),
    # SHA-256 hex of the holder's lease token (the token is never stored).
    Column("lease_token_hash", String(64)),
    Column("worker_id", String(128)),
    Column("claimed_at", UTCDateTime()),
    Column("lease_expires_at", UTCDateTime()),
    Column("last_heartbeat", UTCDateTime()),
    Column("progress", Text),
    Column("percent", Float),
    # The attempt's heartbeats so far, and the tail of its stdout and stderr
    # as the latest one reported it ({"stdout", "stderr"}; NULL: none sent).
    Column("heartbeats", Integer, nullable=False, server_default=text("0")),
    Column("output", NullableJsonType),
    Column("cancel_requested", Boolean, nullable=False, server_default=text("false")),
    Column("cancel_reason", Text),
    # vocabulary.DeliveryMode and the job's retry object, as fired.
    Column("delivery", String(16), nullable=False),
    Column("retry", JsonType, nullable=False),
    # The error of the previous failed attempt (kept on the run row too).
    Column("last_error", Text),
    # vocabulary.WorkKind: a worker target's item, or an http target's with
    # ``"completion": "callback"`` (held by its receiver from the start, never queued).
    Column("kind", String(16), nullable=False, server_default=text("'worker'")),
    # The W3C trace context of the attempt that handed the run over, when
    # tracing was on (the claim answers with it: observability.tracing).
    Column("traceparent", String(64)),
    Column("tracestate", String(512)),
)
# A claim's pick: a queue's available items, highest priority first.
Index("ix_work_items_pick", work_items.c.namespace, work_items.c.queue, work_items.c.state,
      work_items.c.priority, work_items.c.available_at)
# Expiry: held items by lease end.
Index("ix_work_items_lease", work_items.c.lease_expires_at)

# The workers seen claiming on a queue: when last, how many runs they hold
# and how many they take at once (``slots``). Idle: seen within twice the
# queue's heartbeat period and holding fewer than their slots.
work_workers = Table(
    "work_workers",
    metadata,
    Column("namespace", String(128), nullable=False),
    Column("queue", String(64), nullable=False),
    Column("worker_id", String(128), nullable=False),
    Column("last_seen", UTCDateTime(), nullable=False),
    Column("held", Integer, nullable=False, server_default=text("0")),
    Column("slots", Integer, nullable=False, server_default=text("1")),
    PrimaryKeyConstraint("namespace", "queue", "worker_id", name="pk_work_workers"),
)
Index("ix_work_workers_last_seen", work_workers.c.last_seen)

# Named limits per destination (cronman.limits): what they match and allow;
# every node reads them all each sync poll.
limits = Table(
    "limits",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("match_kind", String(16), nullable=False),
    Column("match_value", String(2048), nullable=False),
    Column("rate", Float),
    Column("burst", Integer),
    Column("concurrency", Integer),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("updated_by", String(36)),
    # Who manages the limit ("apply": jobs apply, which prunes only its own).
    Column("managed_by", String(32)),
)

# Each namespace's quota (cronman.limits.Quota): NULL bounds nothing.
namespace_quotas = Table(
    "namespace_quotas",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("max_jobs", Integer),
    Column("fires_per_second", Float),
    Column("burst", Integer),
    Column("concurrent_runs", Integer),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("updated_by", String(36)),
)

# The first answer of each call made with an ``Idempotency-Key`` (per caller:
# ``scope``), until ``expires_at`` (cronman.store.idempotency). A row without
# ``status_code`` is a call still in progress.
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(300), nullable=False),
    Column("key", String(255), nullable=False),
    # sha256 hex of the method, path and body the key was first used with.
    Column("request_hash", String(64), nullable=False),
    Column("status_code", Integer),
    Column("body", Text),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("scope", "key", name="pk_idempotency_keys"),
)
Index("ix_idempotency_keys_expires_at", idempotency_keys.c.expires_at)
