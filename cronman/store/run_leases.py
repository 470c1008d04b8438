"""Leases and takers: lease renewal, starting claimed runs, and handing runs
to a node (runs the API requested, runs whose node died) -- the SQL run
store's queries for the scheduler's leases, requested-runs and sweeper loops.

Every statement carries the runs' ``scheduled_for`` so PostgreSQL prunes
the daily partitions at plan time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import case, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from cronman.models import Run
from cronman.store.codec import run_from_row
from cronman.store.dialect import for_update_skip_locked
from cronman.store.engine import Database, Tx
from cronman.store.run_bulk import by_keys, chunks, key_lookups
from cronman.store.tables import IN_FLIGHT_STATUSES
from cronman.store.tables import scheduled_jobs as sj
from cronman.vocabulary import RunOrigin


def _by_time(keys: Sequence[tuple[str, datetime]]) -> list[tuple[str, datetime]]:
    return sorted(set(keys), key=lambda k: (k[1], k[0]))


class RunLeases:
    """Leases and takers (mixed into ``SqlRunStore``, which sets ``_db``)."""

    _db: Database

    def renew_leases(
        self, node_id: str, keys: Sequence[tuple[str, datetime]], until: datetime
    ) -> int:
        """See ``RunStore.renew_leases``: one UPDATE per 1000 keys."""
        if not keys:
            return 0
        ordered = _by_time(keys)

        def fn(tx: Tx) -> int:
            count = 0
            with key_lookups(tx):
                for chunk in chunks(ordered):
                    stmt = (update(sj)
                            .where(sj.c.node_id == node_id,
                                   *by_keys(chunk, IN_FLIGHT_STATUSES))
                            .values(lease_expires_at=until))
                    count += tx.conn.execute(stmt).rowcount
            return count

        return self._db.write(fn)

    def hold_for_attempt(self, node_id: str, key: tuple[str, datetime], attempt: int,
                         until: datetime) -> bool:
        """See ``RunStore.hold_for_attempt``."""

        def fn(tx: Tx) -> bool:
            with key_lookups(tx):
                stmt = (update(sj)
                        .where(sj.c.node_id == node_id, *by_keys([key], IN_FLIGHT_STATUSES))
                        .values(lease_expires_at=until,
                                attempt=case((sj.c.attempt < attempt, attempt),
                                             else_=sj.c.attempt)))
                return bool(tx.conn.execute(stmt).rowcount)

        return self._db.write(fn)

    def start_claimed_runs(
        self, node_id: str, keys: Sequence[tuple[str, datetime]], started_at: datetime,
        lease_until: datetime, holder: str | None = None,
    ) -> set[str]:
        """See ``RunStore.start_claimed_runs``."""
        if not keys:
            return set()
        ordered = _by_time(keys)

        def fn(tx: Tx) -> set[str]:
            changed: set[str] = set()
            with key_lookups(tx):
                for chunk in chunks(ordered):
                    where = [sj.c.started_at.is_(None), *by_keys(chunk, ("claimed",))]
                    if holder is not None:
                        where.append(sj.c.node_id == holder)
                    else:  # a takeover: only a claim of the schedule's, never a requested run
                        where.append(sj.c.origin == RunOrigin.SCHEDULE.value)
                    stmt = (update(sj).where(*where)
                            .values(node_id=node_id, status="running", started_at=started_at,
                                    lease_expires_at=lease_until)
                            .returning(sj.c.id))
                    changed.update(tx.conn.execute(stmt).scalars())
            return changed

        return self._db.write(fn)

    def take_requested_runs(self, node_id: str, lease_until: datetime, limit: int) -> list[Run]:
        """See ``RunStore.take_requested_runs``."""
        return self._take([sj.c.status == "claimed", sj.c.node_id.is_(None)],
                          sj.c.scheduled_for, node_id, lease_until, limit)

    def take_expired_runs(self, node_id: str, now: datetime, lease_until: datetime,
                          limit: int, spare: Sequence[str] = (),
                          spare_before: datetime | None = None) -> list[Run]:
        """See ``RunStore.take_expired_runs``."""
        where = [sj.c.status.in_(IN_FLIGHT_STATUSES), sj.c.node_id.is_not(None),
                 sj.c.lease_expires_at < now]
        if spare:
            where.append(or_(sj.c.node_id.not_in(sorted(set(spare))),
                             sj.c.lease_expires_at < (spare_before or now)))
        return self._take(where, sj.c.lease_expires_at, node_id, lease_until, limit)

    def _take(self, where: list[ColumnElement[bool]], order: Any, node_id: str,
              lease_until: datetime, limit: int) -> list[Run]:
        """Lock up to ``limit`` matching rows (a concurrent taker skips them)
        and assign them, in one transaction.

        Two statements on purpose: with the pick as a subquery of the UPDATE,
        PostgreSQL joins it by hashing and scans every partition; with the
        picked keys as literals the UPDATE prunes to their partitions and
        uses the primary key.
        """
        if limit <= 0:
            return []
        pick = for_update_skip_locked(
            select(sj.c.id, sj.c.scheduled_for).where(*where).order_by(order).limit(limit),
            self._db.dialect)

        def fn(tx: Tx) -> list[Any]:
            keys = _by_time([(k[0], k[1]) for k in tx.conn.execute(pick).all()])
            taken: list[Any] = []
            if not keys:  # the usual answer of a poll: no planner settings to set
                return taken
            with key_lookups(tx):
                for chunk in chunks(keys):
                    stmt = (update(sj).where(*by_keys(chunk))
                            .values(node_id=node_id, lease_expires_at=lease_until)
                            .returning(*sj.c))
                    taken += tx.conn.execute(stmt).all()
            return taken

        runs = [run_from_row(r) for r in self._db.write(fn)]
        runs.sort(key=lambda r: (r.scheduled_for, r.id))
        return runs
