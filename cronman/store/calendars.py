"""Named exclusion calendars on SQLAlchemy Core (``/v1/calendars``).

A calendar's name is unique in its namespace. Changes carry an optional
version (a stale one is a ``Conflict``, never an overwrite) and announce
``CALENDARS_CHANGED`` so scheduler nodes read the calendars again at once.
A calendar jobs name is deleted only when forced; a job naming a calendar
that no longer exists has nothing excluded by it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, delete, func, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Row
from sqlalchemy.sql.elements import ColumnElement

from cronman.errors import Conflict, NotFound
from cronman.ids import new_job_id
from cronman.models import Page
from cronman.schedules.calendars import ExclusionCalendar
from cronman.store.base import CALENDARS_CHANGED, CalendarRecord
from cronman.store.codec import decode_job_cursor, encode_job_cursor
from cronman.store.dialect import json_array_has
from cronman.store.engine import Database, Tx
from cronman.store.tables import calendars, jobs
from cronman.timeutil import utcnow

cal = calendars
_FIELDS = tuple(CalendarRecord.__dataclass_fields__)


def _record(row: Row[Any]) -> CalendarRecord:
    m = row._mapping
    return CalendarRecord(**{name: m[name] for name in _FIELDS})


def _taken(namespace: str, name: str) -> Conflict:
    return Conflict(f"a calendar named {name!r} already exists in namespace {namespace!r}",
                    field="name")


class SqlCalendarStore:
    """Calendars: create, read, list, replace, delete; all of them for the nodes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, namespace: str, calendar: ExclusionCalendar) -> CalendarRecord:
        now = utcnow()
        record = CalendarRecord(id=new_job_id(), namespace=namespace, name=calendar.name,
                                timezone=calendar.timezone, dates=calendar.to_dict()["dates"],
                                version=1, created_at=now, updated_at=now)
        row = {name: getattr(record, name) for name in _FIELDS}

        def fn(tx: Tx) -> None:
            tx.conn.execute(cal.insert().values(**row))
            tx.announce([CALENDARS_CHANGED])

        try:
            self._db.write(fn)
        except sa_exc.IntegrityError:
            raise _taken(namespace, calendar.name) from None
        return record

    def get(self, calendar_id: str) -> CalendarRecord | None:
        with self._db.read() as conn:
            row = conn.execute(select(cal).where(cal.c.id == calendar_id)).first()
        return None if row is None else _record(row)

    def get_by_name(self, namespace: str, name: str) -> CalendarRecord | None:
        with self._db.read() as conn:
            row = conn.execute(select(cal).where(cal.c.namespace == namespace,
                                                 cal.c.name == name)).first()
        return None if row is None else _record(row)

    def list_calendars(self, *, namespace: str | None, namespaces: tuple[str, ...] | None,
                       limit: int, cursor: str | None) -> Page:
        conds: list[ColumnElement[bool]] = []
        if cursor:
            conds.append(cal.c.id > decode_job_cursor(cursor))
        if namespace is not None:
            conds.append(cal.c.namespace == namespace)
        if namespaces is not None:
            conds.append(cal.c.namespace.in_(list(namespaces)))
        stmt = select(cal).where(and_(True, *conds)).order_by(cal.c.id).limit(limit + 1)
        with self._db.read() as conn:
            rows = conn.execute(stmt).all()
        items = [_record(r) for r in rows[:limit]]
        more = len(rows) > limit and items
        return Page(items, encode_job_cursor(items[-1].id) if more else None)

    def replace(self, calendar_id: str, *, namespace: str, calendar: ExclusionCalendar,
                version: int | None = None) -> CalendarRecord:
        def fn(tx: Tx) -> CalendarRecord:
            current = tx.conn.execute(select(cal.c.version, cal.c.namespace, cal.c.name)
                                      .where(cal.c.id == calendar_id).with_for_update()).first()
            if current is None:
                raise NotFound(f"no calendar {calendar_id!r}")
            if version is not None and version != current.version:
                raise Conflict(f"the calendar is at version {current.version}, not {version}: "
                               "it changed since it was read", field="version")
            if (current.namespace, current.name) != (namespace, calendar.name):
                users = _referencing(tx, current.namespace, current.name)
                if users:
                    raise Conflict(f"jobs name this calendar ({_shown(users)}): it keeps its "
                                   "namespace and name while they do", field="name")
            stmt = (update(cal).where(cal.c.id == calendar_id)
                    .values(namespace=namespace, name=calendar.name,
                            timezone=calendar.timezone, dates=calendar.to_dict()["dates"],
                            version=cal.c.version + 1, updated_at=utcnow())
                    .returning(*cal.c))
            record = _record(tx.conn.execute(stmt).one())
            tx.announce([CALENDARS_CHANGED])
            return record

        try:
            return self._db.write(fn)
        except sa_exc.IntegrityError:
            raise _taken(namespace, calendar.name) from None

    def delete(self, calendar_id: str, *, force: bool = False) -> bool:
        def fn(tx: Tx) -> bool:
            current = tx.conn.execute(select(cal.c.namespace, cal.c.name)
                                      .where(cal.c.id == calendar_id)).first()
            if current is None:
                return False
            users = _referencing(tx, current.namespace, current.name)
            if users and not force:
                raise Conflict(f"jobs name this calendar: {_shown(users)}; take it out of "
                               "them first, or force the delete (they then fire on "
                               "its dates)", field="force")
            tx.conn.execute(delete(cal).where(cal.c.id == calendar_id))
            tx.announce([CALENDARS_CHANGED])
            return True

        return self._db.write(fn)

    def all_calendars(self) -> list[CalendarRecord]:
        with self._db.read() as conn:
            return [_record(r) for r in conn.execute(select(cal).order_by(cal.c.id))]

    def fingerprint(self) -> tuple[int, Any]:
        with self._db.read() as conn:
            count, latest = conn.execute(select(func.count(), func.max(cal.c.updated_at))).one()
        return int(count), latest


def _shown(users: list[tuple[str, str]]) -> str:
    more = " and more" if len(users) > 10 else ""
    return ", ".join(f"{ns}/{name}" for ns, name in users[:10]) + more


def _referencing(tx: Tx, namespace: str, name: str) -> list[tuple[str, str]]:
    """(namespace, name) of the live jobs naming the calendar: by its name in
    its own namespace, or as namespace/name from another."""
    full = f"{namespace}/{name}"
    refs = jobs.c.calendars
    cond = (((jobs.c.namespace == namespace) & json_array_has(refs, name, tx.dialect))
            | json_array_has(refs, full, tx.dialect))
    stmt = (select(jobs.c.namespace, jobs.c.name)
            .where(jobs.c.deleted_at.is_(None), jobs.c.calendars.is_not(None), cond)
            .order_by(jobs.c.namespace, jobs.c.name).limit(11))
    return [(ns, n) for ns, n in tx.conn.execute(stmt)]
