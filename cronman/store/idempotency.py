"""Idempotency keys: the first answer of each keyed call, per caller, until it expires.

A call with an ``Idempotency-Key`` takes the key first (``claim``: a row
without an answer, inserted in a transaction of its own, so that of two
concurrent calls exactly one gets it: the other finds the row); once the
call has answered, the answer is kept (``keep``); a call that ends without
an answer worth keeping (a 5xx, an exception) gives the key back
(``release``). A row whose ``expires_at`` has passed is as good as none: it
is replaced when its key comes again, and deleted by the maintenance that
drops expired run partitions (``purge``). A key held without an answer for
long (its call's process died) is taken over by the next call with the same
request.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, insert, select, update
from sqlalchemy import exc as sa_exc

from cronman.store.engine import Database, Tx
from cronman.store.records import KeyRecord
from cronman.store.tables import idempotency_keys as ik


class SqlIdempotencyKeys:
    """The ``idempotency_keys`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def claim(self, scope: str, key: str, request_hash: str, now: datetime,
              expires_at: datetime, stale_before: datetime) -> KeyRecord | None:
        """Take ``key`` for a new call (None), or the record it holds already.
        A key held for the same request since before ``stale_before`` with no
        answer (its call's process died) is taken over."""
        row = {"scope": scope, "key": key, "request_hash": request_hash, "status_code": None,
               "body": None, "created_at": now, "expires_at": expires_at}

        def take(tx: Tx) -> None:
            tx.conn.execute(delete(ik).where(ik.c.scope == scope, ik.c.key == key,
                                             ik.c.expires_at <= now))
            tx.conn.execute(insert(ik).values(**row))

        try:
            self._db.write(take)
            return None
        except sa_exc.IntegrityError:
            pass
        with self._db.read() as conn:
            found = conn.execute(
                select(ik.c.request_hash, ik.c.status_code, ik.c.body, ik.c.created_at)
                .where(ik.c.scope == scope, ik.c.key == key)).first()
        if found is None:  # given back meanwhile: try again
            return self.claim(scope, key, request_hash, now, expires_at, stale_before)
        record = KeyRecord(*found)
        if (record.status_code is None and record.request_hash == request_hash
                and record.created_at < stale_before):
            taken = self._db.write(lambda tx: tx.conn.execute(
                update(ik).where(ik.c.scope == scope, ik.c.key == key,
                                 ik.c.status_code.is_(None), ik.c.created_at < stale_before)
                .values(created_at=now, expires_at=expires_at)).rowcount)
            if taken:
                return None
        return record

    def keep(self, scope: str, key: str, status_code: int, body: str) -> None:
        """Keep the answer of the call that holds ``key``."""
        self._db.write(lambda tx: tx.conn.execute(
            update(ik).where(ik.c.scope == scope, ik.c.key == key)
            .values(status_code=status_code, body=body)))

    def release(self, scope: str, key: str) -> None:
        """Give back a key whose call ended without an answer to keep."""
        self._db.write(lambda tx: tx.conn.execute(
            delete(ik).where(ik.c.scope == scope, ik.c.key == key,
                             ik.c.status_code.is_(None))))

    def purge(self, now: datetime) -> int:
        """Delete the keys expired by ``now``; how many."""
        return int(self._db.write(lambda tx: tx.conn.execute(
            delete(ik).where(ik.c.expires_at <= now)).rowcount))
