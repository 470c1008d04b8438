"""Namespace notification rules on SQLAlchemy Core (``/v1/notification-rules``).

A rule's name is unique in its namespace. Changes carry an optional version:
a stale one is a ``Conflict`` (409), never an overwrite. Deleting is for good
(the notifier reads every rule at each pass; nothing follows a change feed).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, delete, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Row
from sqlalchemy.sql.elements import ColumnElement

from cronman.errors import Conflict, NotFound
from cronman.ids import new_job_id
from cronman.models import Page
from cronman.outbox.records import Rule, RuleRecord, namespace_rule
from cronman.store.codec import decode_job_cursor, encode_job_cursor
from cronman.store.engine import Database, Tx
from cronman.store.tables import notification_rules
from cronman.timeutil import utcnow

nr = notification_rules


def _record(row: Row[Any]) -> RuleRecord:
    m = row._mapping
    return RuleRecord(**{name: m[name] for name in RuleRecord.__dataclass_fields__})


def _taken(namespace: str, name: str) -> Conflict:
    return Conflict(f"a notification rule named {name!r} already exists in namespace "
                    f"{namespace!r}", field="name")


class SqlNotificationRules:
    """Namespace rules: create, read, list, replace, delete; all of them for the notifier."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, namespace: str, name: str, rule: dict[str, Any]) -> RuleRecord:
        now = utcnow()
        record = RuleRecord(id=new_job_id(), namespace=namespace, name=name, rule=rule,
                            version=1, created_at=now, updated_at=now)
        row = {name: getattr(record, name) for name in RuleRecord.__dataclass_fields__}
        try:
            self._db.write(lambda tx: tx.conn.execute(nr.insert().values(**row)))
        except sa_exc.IntegrityError:
            raise _taken(namespace, name) from None
        return record

    def get(self, rule_id: str) -> RuleRecord | None:
        with self._db.read() as conn:
            row = conn.execute(select(nr).where(nr.c.id == rule_id)).first()
        return None if row is None else _record(row)

    def list_rules(self, *, namespace: str | None, namespaces: tuple[str, ...] | None, limit: int,
             cursor: str | None) -> Page:
        conds: list[ColumnElement[bool]] = []
        if cursor:
            conds.append(nr.c.id > decode_job_cursor(cursor))
        if namespace is not None:
            conds.append(nr.c.namespace == namespace)
        if namespaces is not None:
            conds.append(nr.c.namespace.in_(list(namespaces)))
        stmt = select(nr).where(and_(True, *conds)).order_by(nr.c.id).limit(limit + 1)
        with self._db.read() as conn:
            rows = conn.execute(stmt).all()
        items = [_record(r) for r in rows[:limit]]
        more = len(rows) > limit and items
        return Page(items, encode_job_cursor(items[-1].id) if more else None)

    def replace(self, rule_id: str, *, namespace: str, name: str, rule: dict[str, Any],
                version: int | None = None) -> RuleRecord:
        def fn(tx: Tx) -> RuleRecord:
            current = tx.conn.execute(select(nr.c.version).where(nr.c.id == rule_id)
                                      .with_for_update()).scalar()
            if current is None:
                raise NotFound(f"no notification rule {rule_id!r}")
            if version is not None and version != current:
                raise Conflict(f"the rule is at version {current}, not {version}: it changed "
                               "since it was read", field="version")
            stmt = (update(nr).where(nr.c.id == rule_id)
                    .values(namespace=namespace, name=name, rule=rule,
                            version=nr.c.version + 1, updated_at=utcnow())
                    .returning(*nr.c))
            return _record(tx.conn.execute(stmt).one())

        try:
            return self._db.write(fn)
        except sa_exc.IntegrityError:
            raise _taken(namespace, name) from None

    def delete(self, rule_id: str) -> bool:
        stmt = delete(nr).where(nr.c.id == rule_id)
        return bool(self._db.write(lambda tx: tx.conn.execute(stmt).rowcount))

    def all_rules(self) -> dict[str, list[Rule]]:
        with self._db.read() as conn:
            rows = conn.execute(select(nr.c.id, nr.c.namespace, nr.c.rule)
                                .order_by(nr.c.id)).all()
        out: dict[str, list[Rule]] = {}
        for rule_id, namespace, spec in rows:
            out.setdefault(namespace, []).append(namespace_rule(rule_id, spec))
        return out
