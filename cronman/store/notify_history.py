"""What was sent, is waiting, or failed: the outbox read for ``GET /v1/notifications``.

Newest first by id (notification ids are time-ordered), keyset pages.
"""

from __future__ import annotations

from sqlalchemy import and_, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from cronman.models import Page
from cronman.outbox.records import EventRecord, Notification, NotificationFilter
from cronman.store.codec import decode_job_cursor, encode_job_cursor
from cronman.store.engine import Database
from cronman.store.notify_outbox import event_from_row, notification_from_row
from cronman.store.tables import notification_events, notifications
from cronman.vocabulary import NotificationKind

nt = notifications
ne = notification_events


class SqlNotificationHistory:
    """Read-only views of the outbox."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def list_notifications(self, flt: NotificationFilter, limit: int, cursor: str | None) -> Page:
        conds: list[ColumnElement[bool]] = []
        if cursor:
            conds.append(nt.c.id < decode_job_cursor(cursor))
        if flt.namespace is not None:
            conds.append(nt.c.namespace == flt.namespace)
        if flt.namespaces is not None:
            conds.append(nt.c.namespace.in_(list(flt.namespaces)))
        if flt.job_id is not None:
            conds.append(nt.c.job_id == flt.job_id)
        if flt.statuses:
            conds.append(nt.c.status.in_(list(flt.statuses)))
        if flt.events:
            kinds = [e for e in flt.events if e != NotificationKind.DIGEST]
            either: list[ColumnElement[bool]] = []
            if kinds:
                either.append(nt.c.event.in_(kinds))
            if NotificationKind.DIGEST in flt.events:
                either.append(nt.c.kind == NotificationKind.DIGEST.value)
            conds.append(or_(*either))
        stmt = select(nt).where(and_(True, *conds)).order_by(nt.c.id.desc()).limit(limit + 1)
        with self._db.read() as conn:
            rows = conn.execute(stmt).all()
        items = [notification_from_row(r) for r in rows[:limit]]
        more = len(rows) > limit and items
        return Page(items, encode_job_cursor(items[-1].id) if more else None)

    def get(self, notification_id: str) -> Notification | None:
        with self._db.read() as conn:
            row = conn.execute(select(nt).where(nt.c.id == notification_id)).first()
        return None if row is None else notification_from_row(row)

    def events(self, notification_ids: list[str], per_notification: int
               ) -> dict[str, list[EventRecord]]:
        """The first events of each listed notification (in the order found)."""
        out: dict[str, list[EventRecord]] = {i: [] for i in notification_ids}
        if not notification_ids:
            return out
        place = func.row_number().over(partition_by=ne.c.notification_id,
                                       order_by=ne.c.id).label("place")
        numbered = select(ne, place).where(ne.c.notification_id.in_(notification_ids)).subquery()
        stmt = (select(numbered).where(numbered.c.place <= per_notification)
                .order_by(numbered.c.notification_id, numbered.c.id))
        with self._db.read() as conn:
            for row in conn.execute(stmt):
                out[row.notification_id].append(event_from_row(row))
        return out
