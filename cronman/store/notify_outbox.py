"""The notification outbox on SQLAlchemy Core (PostgreSQL and SQLite): what the
notifier reads from the run history and writes before it sends anything.

- Failures to report come from the partial index ``ix_scheduled_jobs_unnotified``
  (failed/lost runs whose ``notified_attempt`` lags their attempt): no
  watermark, so a result written late is still found, and marking a run read
  in the transaction that stores its events makes each event count once.
- ``write_pass`` stores a pass in one transaction: runs marked read, events
  (unique per rule and event: a second notifier finding the same one adds
  nothing), the rate limit's placement of new events (``cronman.outbox.limiter``)
  into new messages or digests still open, the failing jobs, the ``late``
  cursor. On PostgreSQL the groups and open digests are locked (FOR UPDATE)
  so a sender taking a digest and a pass adding to it serialise.
- ``claim_due`` takes due messages (FOR UPDATE SKIP LOCKED) and leases them;
  ``mark_sent``/``mark_unsent`` only touch a message still in the attempt
  that was claimed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Table,
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.engine import Row
from sqlalchemy.sql.elements import ColumnElement

from cronman.ids import new_job_id
from cronman.models import Job
from cronman.outbox.limiter import GroupState, Incoming, plan
from cronman.outbox.records import (
    Event,
    EventRecord,
    FailingJob,
    FinishedRun,
    Notification,
    PassResult,
    group_key,
)
from cronman.store import outbox_bulk
from cronman.store.codec import job_from_row
from cronman.store.dialect import (
    for_update,
    for_update_skip_locked,
    insert_ignoring_conflicts,
    upsert,
)
from cronman.store.engine import Database, Tx
from cronman.store.outbox_bulk import RUN_COLUMNS, chunks
from cronman.store.tables import (
    UNNOTIFIED_RUNS,
    jobs,
    notification_events,
    notification_failing_jobs,
    notification_groups,
    notifications,
    notifier_cursors,
    scheduled_jobs,
)
from cronman.vocabulary import NotificationStatus

sj = scheduled_jobs
nt = notifications
ne = notification_events
LATE_CURSOR = "late"
_OPEN = (NotificationStatus.PENDING.value, NotificationStatus.SENDING.value)
_DONE = (NotificationStatus.SENT.value, NotificationStatus.FAILED.value)


def notification_from_row(row: Row[Any]) -> Notification:
    m = row._mapping
    return Notification(**{name: m[name] for name in Notification.__dataclass_fields__})


def event_from_row(row: Row[Any]) -> EventRecord:
    m = row._mapping
    return EventRecord(**{name: m[name] for name in EventRecord.__dataclass_fields__})


class SqlNotificationOutbox:
    """The notifier's reads and writes (``cronman.notify.model.Outbox``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- reads ------------------------------------------------------------------

    def unnotified_runs(self, limit: int) -> list[FinishedRun]:
        stmt = (select(*RUN_COLUMNS).where(UNNOTIFIED_RUNS)
                .order_by(sj.c.scheduled_for).limit(limit))
        with self._db.read() as conn:
            return [FinishedRun(*row) for row in conn.execute(stmt)]

    def failing_jobs(self) -> list[FailingJob]:
        with self._db.read() as conn:
            rows = conn.execute(select(notification_failing_jobs)).all()
        return [FailingJob(r.job_id, r.last_failure_at, r.last_failure_run_id, r.failures,
                           r.since) for r in rows]

    def first_successes(self, since: Mapping[str, datetime]) -> dict[str, FinishedRun]:
        with self._db.read() as conn:
            return outbox_bulk.first_successes(conn, since)

    def run_starts(self, keys: Sequence[tuple[str, datetime]]
                   ) -> dict[tuple[str, datetime], tuple[str, datetime | None, str]]:
        out: dict[tuple[str, datetime], tuple[str, datetime | None, str]] = {}
        with self._db.read() as conn:
            for chunk in chunks(sorted(set(keys), key=lambda k: (k[1], k[0]))):
                times = sorted({t for _, t in chunk})
                stmt = (select(sj.c.job_id, sj.c.scheduled_for, sj.c.status, sj.c.started_at,
                               sj.c.origin)
                        .where(tuple_(sj.c.job_id, sj.c.scheduled_for).in_(list(chunk)),
                               sj.c.scheduled_for.in_(times)))  # partition pruning
                for job_id, at, status, started, origin in conn.execute(stmt):
                    out[(job_id, at)] = (status, started, origin)
        return out

    def cursor(self, name: str) -> datetime | None:
        with self._db.read() as conn:
            value: datetime | None = conn.execute(
                select(notifier_cursors.c.at).where(notifier_cursors.c.name == name)
            ).scalar()
        return value

    def jobs_to_watch(self, namespaces: Sequence[str], *, with_rules: bool) -> list[Job]:
        """Live jobs of ``namespaces``, and (``with_rules``) every live job with
        rules of its own: the candidates for ``late`` watching."""
        either: list[ColumnElement[bool]] = []
        if with_rules:
            either.append(jobs.c.notify.is_not(None))
        if namespaces:
            either.append(jobs.c.namespace.in_(list(namespaces)))
        if not either:
            return []
        stmt = select(jobs).where(jobs.c.deleted_at.is_(None), or_(*either))
        with self._db.read() as conn:
            return [job_from_row(r) for r in conn.execute(stmt)]

    def events_of(self, notification_id: str, limit: int) -> list[EventRecord]:
        stmt = (select(ne).where(ne.c.notification_id == notification_id)
                .order_by(ne.c.id).limit(limit))
        with self._db.read() as conn:
            return [event_from_row(r) for r in conn.execute(stmt)]

    def backlog(self, now: datetime) -> tuple[int, int]:
        overdue = now - timedelta(minutes=1)
        stmt = select(func.count(), func.count().filter(nt.c.next_attempt_at <= overdue)).where(
            nt.c.status.in_(_OPEN))
        with self._db.read() as conn:
            waiting, late = conn.execute(stmt).one()
        return int(waiting), int(late)

    # -- one pass, one transaction ----------------------------------------------

    def write_pass(self, result: PassResult, *, now: datetime, node_id: str) -> int:
        def fn(tx: Tx) -> int:
            outbox_bulk.mark_read(tx, result.seen_runs)
            self._failing(tx, result.failing, result.recovered)
            made = self._store_events(tx, result.events, now) if result.events else 0
            if result.late_through is not None:
                self._upsert(tx, notifier_cursors, [{
                    "name": LATE_CURSOR, "at": result.late_through, "node_id": node_id}],
                    ("name",))
            return made

        return self._db.write(fn)

    def _failing(self, tx: Tx, failing: Sequence[FailingJob], recovered: Sequence[str]) -> None:
        table = notification_failing_jobs
        if recovered:
            for chunk in chunks(list(recovered)):
                tx.conn.execute(delete(table).where(table.c.job_id.in_(list(chunk))))
        if failing:
            self._upsert(tx, table, [
                {"job_id": f.job_id, "last_failure_at": f.last_failure_at,
                 "last_failure_run_id": f.last_failure_run_id, "failures": f.failures,
                 "since": f.since} for f in failing], ("job_id",))

    def _store_events(self, tx: Tx, events: Sequence[Event], now: datetime) -> int:
        fresh = self._insert_events(tx, events, now)
        if not fresh:
            return 0
        new = [(events[i], row_id) for i, row_id in fresh]
        keys = [group_key(e.rule, e.job_id) for e, _ in new]
        states = self._group_states(tx, sorted(set(keys)))
        placed = plan([Incoming(k, e.rule.digest_interval) for k, (e, _) in
                       zip(keys, new, strict=True)], states, now, new_job_id)
        if placed.messages:
            tx.conn.execute(insert(nt), [self._message_row(new[m.first_event][0], m.group_key,
                                                           m, now) for m in placed.messages])
        for digest_id, added in placed.folded.items():
            tx.conn.execute(update(nt).where(nt.c.id == digest_id).values(
                event_count=nt.c.event_count + added, updated_at=now))
        outbox_bulk.assign_events(tx, [(row_id, note) for (_, row_id), note in
                                       zip(new, placed.assigned, strict=True)])
        self._upsert(tx, notification_groups, [
            {"group_key": key, "latest_id": s.latest_id, "latest_due_at": s.latest_due_at,
             "open_digest_id": s.open_digest_id} for key, s in placed.groups.items()],
            ("group_key",))
        return len(placed.messages)

    def _insert_events(self, tx: Tx, events: Sequence[Event], now: datetime
                       ) -> list[tuple[int, int]]:
        """Insert the events not stored yet: (index into ``events``, row id) of each."""
        rows = [{"notification_id": None, "rule_key": e.rule.key, "event_key": e.event_key,
                 "event": e.kind, "job_id": e.job_id, "run_id": e.run_id,
                 "scheduled_for": e.scheduled_for, "occurred_at": e.occurred_at,
                 "detail": dict(e.detail), "created_at": now} for e in events]
        index = {(e.rule.key, e.event_key): i for i, e in enumerate(events)}
        fresh: list[tuple[int, int]] = []
        stmt = insert_ignoring_conflicts(ne, tx.dialect).returning(
            ne.c.id, ne.c.rule_key, ne.c.event_key)
        for chunk in chunks(rows):
            for row_id, rule_key, event_key in tx.conn.execute(stmt, list(chunk)):
                fresh.append((index[(rule_key, event_key)], row_id))
        fresh.sort()
        return fresh

    def _group_states(self, tx: Tx, keys: list[str]) -> dict[str, GroupState]:
        groups = notification_groups
        states: dict[str, GroupState] = {}
        for chunk in chunks(keys):
            stmt = select(groups).where(groups.c.group_key.in_(list(chunk)))
            for r in tx.conn.execute(for_update(stmt, tx.dialect)):
                states[r.group_key] = GroupState(r.latest_id, r.latest_due_at, r.open_digest_id)
        digests = [s.open_digest_id for s in states.values() if s.open_digest_id]
        pending: set[str] = set()
        for chunk in chunks(digests):
            stmt = select(nt.c.id, nt.c.status).where(nt.c.id.in_(list(chunk)))
            pending.update(i for i, status in tx.conn.execute(for_update(stmt, tx.dialect))
                           if status == NotificationStatus.PENDING)
        return {k: s if s.open_digest_id in pending else
                GroupState(s.latest_id, s.latest_due_at, None) for k, s in states.items()}

    @staticmethod
    def _message_row(event: Event, key: str, message: Any, now: datetime) -> dict[str, Any]:
        single = message.kind == "event"
        return {"id": message.id, "namespace": event.namespace, "job_id": event.job_id,
                "job_name": event.job_name, "rule_key": event.rule.key, "group_key": key,
                "channel": dict(event.rule.channel), "kind": message.kind.value,
                "event": event.kind if single else None,
                "status": NotificationStatus.PENDING.value, "attempts": 0,
                "due_at": message.due_at, "next_attempt_at": message.due_at,
                "last_error": None, "event_count": message.event_count,
                "created_at": now, "updated_at": now, "sent_at": None}

    def _upsert(self, tx: Tx, table: Table, rows: list[dict[str, Any]],
                key: tuple[str, ...]) -> None:
        if not rows:
            return
        stmt = upsert(table, key, tx.dialect)
        for chunk in chunks(rows):
            tx.conn.execute(stmt, list(chunk))

    # -- sending ----------------------------------------------------------------

    def claim_due(self, now: datetime, lease_until: datetime, limit: int) -> list[Notification]:
        due = (select(nt.c.id).where(nt.c.status.in_(_OPEN), nt.c.next_attempt_at <= now)
               .order_by(nt.c.next_attempt_at).limit(limit))

        def fn(tx: Tx) -> list[Notification]:
            ids = list(tx.conn.execute(for_update_skip_locked(due, tx.dialect)).scalars())
            if not ids:
                return []
            stmt = (update(nt).where(nt.c.id.in_(ids), nt.c.status.in_(_OPEN))
                    .values(status=NotificationStatus.SENDING.value,
                            attempts=nt.c.attempts + 1, next_attempt_at=lease_until,
                            updated_at=now)
                    .returning(*nt.c))
            return sorted((notification_from_row(r) for r in tx.conn.execute(stmt)),
                          key=lambda n: (n.due_at, n.id))

        return self._db.write(fn)

    def claims(self) -> list[tuple[str, int]]:
        stmt = select(nt.c.id, nt.c.attempts).where(
            nt.c.status == NotificationStatus.SENDING.value)
        with self._db.read() as conn:
            return [(str(i), int(a)) for i, a in conn.execute(stmt)]

    def release_claims(self, now: datetime, claims: list[tuple[str, int]]) -> int:
        """Of ``claims`` (taken by a notifier no longer active), those still ``sending``
        in the same attempt: due again now."""
        if not claims:
            return 0
        attempts: dict[int, list[str]] = {}
        for note_id, attempt in claims:
            attempts.setdefault(attempt, []).append(note_id)

        def fn(tx: Tx) -> int:
            released = 0
            for attempt, ids in attempts.items():
                released += tx.conn.execute(
                    update(nt).where(nt.c.id.in_(ids), nt.c.attempts == attempt,
                                     nt.c.status == NotificationStatus.SENDING.value)
                    .values(status=NotificationStatus.PENDING.value, next_attempt_at=now,
                            updated_at=now)).rowcount
            return int(released)

        return int(self._db.write(fn))

    def _finish(self, note: Notification, values: dict[str, Any]) -> bool:
        stmt = (update(nt).where(nt.c.id == note.id,
                                 nt.c.status == NotificationStatus.SENDING.value,
                                 nt.c.attempts == note.attempts).values(**values))
        return bool(self._db.write(lambda tx: tx.conn.execute(stmt).rowcount))

    def mark_sent(self, note: Notification, now: datetime) -> bool:
        return self._finish(note, {"status": NotificationStatus.SENT.value, "sent_at": now,
                                   "last_error": None, "updated_at": now})

    def mark_unsent(self, note: Notification, error: str, now: datetime,
                    retry_at: datetime | None) -> bool:
        if retry_at is None:
            return self._finish(note, {"status": NotificationStatus.FAILED.value,
                                       "last_error": error, "updated_at": now})
        return self._finish(note, {"status": NotificationStatus.PENDING.value,
                                   "next_attempt_at": retry_at, "last_error": error,
                                   "updated_at": now})

    # -- retention ----------------------------------------------------------------

    def purge(self, before: datetime) -> int:
        groups = notification_groups
        failing = notification_failing_jobs

        def fn(tx: Tx) -> int:
            old = select(nt.c.id).where(nt.c.created_at < before, nt.c.status.in_(_DONE))
            dropped = tx.conn.execute(delete(ne).where(or_(
                ne.c.notification_id.in_(old),
                and_(ne.c.notification_id.is_(None), ne.c.created_at < before)))).rowcount
            dropped += tx.conn.execute(delete(nt).where(nt.c.created_at < before,
                                                        nt.c.status.in_(_DONE))).rowcount
            dropped += tx.conn.execute(delete(groups).where(
                groups.c.latest_due_at < before)).rowcount
            dropped += tx.conn.execute(delete(failing).where(
                failing.c.last_failure_at < before)).rowcount
            return int(dropped)

        return self._db.write(fn)
