"""An operator's cancel of a run its node stops (a container run): the SQL
run store's side of it.

``POST /v1/runs/{id}/cancel`` records the request on the run row
(``scheduled_jobs.cancel_request``) in the one statement that finds the run
in flight, so a run that ended meanwhile is never marked. The node holding
the run reads the requests of its runs at each lease renewal
(``cancel_requests``) and stops them; a replay clears the request
(``RunRequests.request_replay``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from cronman.models import Run
from cronman.store.codec import run_from_row
from cronman.store.engine import Database, Tx
from cronman.store.run_bulk import chunks
from cronman.store.run_reads import run_key_range
from cronman.store.tables import IN_FLIGHT_STATUSES
from cronman.store.tables import scheduled_jobs as sj


class RunCancels:
    """Cancel requests (mixed into ``SqlRunStore``, which sets ``_db``)."""

    _db: Database

    def request_cancel(self, run_id: str, request: dict[str, Any]) -> Run | None:
        """See ``RunStore.request_cancel``."""
        span = run_key_range(run_id)
        if span is None:
            return None
        stmt = (update(sj)
                .where(sj.c.id == run_id, sj.c.scheduled_for >= span[0],
                       sj.c.scheduled_for < span[1], sj.c.status.in_(IN_FLIGHT_STATUSES))
                .values(cancel_request=request)
                .returning(*sj.c))

        def fn(tx: Tx) -> Run | None:
            row = tx.conn.execute(stmt).first()
            return None if row is None else run_from_row(row)

        return self._db.write(fn)

    def cancel_request(self, run_id: str) -> dict[str, Any] | None:
        """See ``RunStore.cancel_request``."""
        span = run_key_range(run_id)
        if span is None:
            return None
        stmt = select(sj.c.cancel_request).where(
            sj.c.id == run_id, sj.c.scheduled_for >= span[0], sj.c.scheduled_for < span[1])
        with self._db.read() as conn:
            found = conn.execute(stmt).scalar()
        return found if isinstance(found, dict) else None

    def cancel_requests(self, keys: Sequence[tuple[str, datetime]]
                        ) -> dict[str, dict[str, Any]]:
        """See ``RunStore.cancel_requests``."""
        out: dict[str, dict[str, Any]] = {}
        if not keys:
            return out
        with self._db.read() as conn:
            for chunk in chunks(sorted(set(keys), key=lambda k: (k[1], k[0]))):
                times = sorted({k[1] for k in chunk})
                stmt = select(sj.c.id, sj.c.cancel_request).where(
                    sj.c.id.in_([k[0] for k in chunk]), sj.c.scheduled_for.in_(times),
                    sj.c.status.in_(IN_FLIGHT_STATUSES), sj.c.cancel_request.is_not(None))
                for run_id, request in conn.execute(stmt):
                    if isinstance(request, dict):
                        out[run_id] = request
        return out
