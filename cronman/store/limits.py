"""Limits and namespace quotas on SQLAlchemy Core (``/v1/limits``,
``/v1/namespaces/{ns}/quotas``).

A limit's update names the version it read (a stale one is a ``Conflict``,
never an overwrite). Nodes read every limit and quota each sync poll
(``all_limits``: the limits and the quotas carried out as limits).

``hold_max_jobs`` is the quota's check inside a create's transaction: under
a lock per namespace (PostgreSQL's transaction advisory lock; SQLite's
writers are serialised), so two creates racing from two API processes see
each other's jobs and cannot both pass the bound.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Row

from cronman.errors import Conflict, NotFound, QuotaExceeded
from cronman.limits import Limit, Quota, quota_limit
from cronman.store.dialect import advisory_xact_lock, labels_match
from cronman.store.engine import Database, Tx
from cronman.store.tables import IN_FLIGHT_STATUSES, jobs, limits, namespace_quotas, scheduled_jobs
from cronman.timeutil import utcnow

lt = limits
nq = namespace_quotas
# The advisory lock of a namespace's max_jobs is its name's digest under this
# prefix, cut to PostgreSQL's signed 64 bits.
QUOTA_LOCK_PREFIX = b"cronman.max_jobs:"


def quota_lock_key(namespace: str) -> int:
    digest = hashlib.sha256(QUOTA_LOCK_PREFIX + namespace.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _live_count(conn: Connection, namespace: str) -> int:
    return int(conn.execute(select(func.count()).select_from(jobs).where(
        jobs.c.namespace == namespace, jobs.c.deleted_at.is_(None))).scalar() or 0)


def hold_max_jobs(tx: Tx, adding: Counter[str]) -> None:
    """``QuotaExceeded`` when adding ``adding[ns]`` jobs takes a namespace
    past its ``max_jobs``; in the creating transaction, first in it: each
    bounded namespace's lock (in name order, so two bulk creates cannot
    deadlock) is held to the commit, and the count after it is taken sees
    every create committed before (READ COMMITTED: a snapshot per statement).
    """
    bounded = tx.conn.execute(select(nq.c.namespace, nq.c.max_jobs).where(
        nq.c.namespace.in_(sorted(adding)), nq.c.max_jobs.is_not(None))).all()
    for namespace, max_jobs in sorted(bounded):
        advisory_xact_lock(tx.conn, quota_lock_key(namespace))
        live = _live_count(tx.conn, namespace)
        if live + adding[namespace] > max_jobs:
            raise QuotaExceeded(
                f"namespace {namespace!r} is at its quota max_jobs ({max_jobs}): "
                f"{live} live jobs, {adding[namespace]} more asked for", field="namespace")


def _limit(row: Row[Any]) -> Limit:
    return Limit(name=row.name, kind=row.match_kind, value=row.match_value, rate=row.rate,
                 burst=row.burst, concurrency=row.concurrency, version=row.version,
                 managed_by=row.managed_by)


def _quota(row: Row[Any]) -> Quota:
    return Quota(namespace=row.namespace, max_jobs=row.max_jobs,
                 fires_per_second=row.fires_per_second, burst=row.burst,
                 concurrent_runs=row.concurrent_runs)


def _values(limit: Limit) -> dict[str, Any]:
    return {"match_kind": limit.kind, "match_value": limit.value, "rate": limit.rate,
            "burst": limit.burst, "concurrency": limit.concurrency,
            "managed_by": limit.managed_by}


class SqlLimitStore:
    """Named limits and namespace quotas."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- limits -------------------------------------------------------------

    def list_limits(self) -> list[Limit]:
        with self._db.read() as conn:
            return [_limit(r) for r in conn.execute(select(lt).order_by(lt.c.name)).all()]

    def get_limit(self, name: str) -> Limit | None:
        with self._db.read() as conn:
            row = conn.execute(select(lt).where(lt.c.name == name)).first()
        return None if row is None else _limit(row)

    def create_limit(self, limit: Limit, *, by: str | None) -> Limit:
        now = utcnow()
        try:
            self._db.write(lambda tx: tx.conn.execute(lt.insert().values(
                name=limit.name, version=1, created_at=now, updated_at=now, updated_by=by,
                **_values(limit))))
        except sa_exc.IntegrityError:
            raise Conflict(f"a limit named {limit.name!r} already exists", field="name") from None
        stored = self.get_limit(limit.name)
        assert stored is not None
        return stored

    def update_limit(self, limit: Limit, *, version: int | None, by: str | None) -> Limit:
        """Replace the limit; ``version``: the one the caller read (None: any)."""

        def fn(tx: Tx) -> Row[Any]:
            stmt = update(lt).where(lt.c.name == limit.name)
            if version is not None:
                stmt = stmt.where(lt.c.version == version)
            row = tx.conn.execute(stmt.values(version=lt.c.version + 1, updated_at=utcnow(),
                                              updated_by=by, **_values(limit))
                                  .returning(*lt.c)).first()
            if row is not None:
                return row
            current = tx.conn.execute(select(lt.c.version).where(lt.c.name == limit.name)
                                      ).scalar()
            if current is None:
                raise NotFound(f"no limit named {limit.name!r}")
            raise Conflict(f"the limit is at version {current}, not {version}: read it again",
                           field="version")

        return _limit(self._db.write(fn))

    def delete_limit(self, name: str) -> bool:
        return bool(self._db.write(lambda tx: tx.conn.execute(
            delete(lt).where(lt.c.name == name)).rowcount))

    # -- quotas -------------------------------------------------------------

    def get_quota(self, namespace: str) -> Quota | None:
        with self._db.read() as conn:
            row = conn.execute(select(nq).where(nq.c.namespace == namespace)).first()
        return None if row is None else _quota(row)

    def list_quotas(self) -> list[Quota]:
        with self._db.read() as conn:
            return [_quota(r) for r in conn.execute(select(nq).order_by(nq.c.namespace)).all()]

    def put_quota(self, quota: Quota, *, by: str | None) -> Quota:
        values = {"max_jobs": quota.max_jobs, "fires_per_second": quota.fires_per_second,
                  "burst": quota.burst, "concurrent_runs": quota.concurrent_runs,
                  "updated_at": utcnow(), "updated_by": by}

        def fn(tx: Tx) -> None:
            changed = tx.conn.execute(update(nq).where(nq.c.namespace == quota.namespace)
                                      .values(**values)).rowcount
            if not changed:
                tx.conn.execute(nq.insert().values(namespace=quota.namespace, **values))

        try:
            self._db.write(fn)
        except sa_exc.IntegrityError:  # set at the same moment by another call
            self._db.write(fn)
        return quota

    def delete_quota(self, namespace: str) -> bool:
        return bool(self._db.write(lambda tx: tx.conn.execute(
            delete(nq).where(nq.c.namespace == namespace)).rowcount))

    def waiting_counts(self) -> dict[str, int]:
        """Per limit, the attempts waiting on it now: in-flight runs whose
        ``gate`` says they wait on it (a started one says how long it waited)."""
        sj = scheduled_jobs
        out: dict[str, int] = {}
        with self._db.read() as conn:
            gates = conn.execute(select(sj.c.gate).where(
                sj.c.status.in_(IN_FLIGHT_STATUSES), sj.c.gate.is_not(None))).scalars()
            for gate in gates:
                held = gate.get("limit") if isinstance(gate, dict) else None
                if isinstance(held, dict) and "since" in held and "waited_ms" not in held:
                    name = str(held.get("name"))
                    out[name] = out.get(name, 0) + 1
        return out

    # -- for the nodes ------------------------------------------------------

    def labelled_jobs(self, labels: list[str]) -> dict[str, frozenset[str]]:
        """Per label (``key:value``), the ids of the live jobs that carry it
        (a node holds no labels of its jobs: label limits are matched so)."""
        out: dict[str, frozenset[str]] = {}
        with self._db.read() as conn:
            for label in labels:
                key, _, value = label.partition(":")
                ids = conn.execute(select(jobs.c.id).where(
                    jobs.c.deleted_at.is_(None),
                    *labels_match([(key, value)], self._db.dialect))).scalars().all()
                out[label] = frozenset(ids)
        return out

    def all_limits(self) -> list[Limit]:
        """Every limit, and every quota that bounds fires, as limits."""
        out = self.list_limits()
        for quota in self.list_quotas():
            lim = quota_limit(quota)
            if lim is not None:
                out.append(lim)
        return out
