"""The operator's job list: live jobs in (namespace, name) order, searchable
by exact name, name prefix and labels (``JobStore.search_jobs``).

The order is that of the unique index on live jobs' (namespace, name), so a
page is one index range from the cursor on. A name prefix is a ``LIKE
'prefix%'`` on PostgreSQL (wildcards in the prefix escaped) and a ``substr``
comparison on SQLite (whose LIKE ignores case): case-sensitive on both.
"""

from __future__ import annotations

from sqlalchemy import and_, select, tuple_
from sqlalchemy.sql.elements import ColumnElement

from cronman.models import JobFilter, Page
from cronman.store.codec import decode_name_cursor, encode_name_cursor, job_from_row
from cronman.store.dialect import labels_match, name_starts_with
from cronman.store.engine import Database
from cronman.store.tables import jobs


class JobQueries:
    """``search_jobs`` of the SQL job store (mixed into ``SqlJobStore``, which
    sets ``_db``)."""

    _db: Database

    def _filter_conditions(self, flt: JobFilter) -> list[ColumnElement[bool]]:
        """The live jobs ``flt`` selects, as WHERE conditions."""
        conds: list[ColumnElement[bool]] = [jobs.c.deleted_at.is_(None)]
        if flt.namespace is not None:
            conds.append(jobs.c.namespace == flt.namespace)
        if flt.namespaces is not None:
            conds.append(jobs.c.namespace.in_(list(flt.namespaces)))
        if flt.paused is not None:
            conds.append(jobs.c.paused == flt.paused)
        if flt.name is not None:
            conds.append(jobs.c.name == flt.name)
        if flt.name_prefix:
            conds.append(name_starts_with(flt.name_prefix, self._db.dialect))
        if flt.labels:
            conds.extend(labels_match(flt.labels, self._db.dialect))
        return conds

    def search_jobs(self, flt: JobFilter, limit: int, cursor: str | None) -> Page:
        """See ``JobStore.search_jobs``."""
        conds = self._filter_conditions(flt)
        if cursor:
            namespace, name = decode_name_cursor(cursor)
            conds.append(tuple_(jobs.c.namespace, jobs.c.name) > tuple_(namespace, name))
        stmt = (select(jobs).where(and_(*conds))
                .order_by(jobs.c.namespace, jobs.c.name).limit(limit + 1))
        with self._db.read() as conn:
            rows = conn.execute(stmt).all()
        items = [job_from_row(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit and items:
            next_cursor = encode_name_cursor(items[-1].namespace, items[-1].name)
        return Page(items, next_cursor)
