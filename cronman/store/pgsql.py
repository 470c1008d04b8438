"""PostgreSQL bulk statements: ``VALUES`` lists rendered by psycopg2 itself.

A set-based ``UPDATE ... FROM (VALUES ...)`` writes a whole batch in one
statement (one round trip), where an executemany of UPDATEs costs one round
trip per row. psycopg2 interpolates parameters on the client anyway, so
rendering the list with ``cursor.mogrify`` is exactly what it would send.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg2
from sqlalchemy.engine import Connection

from cronman.errors import StoreUnavailable


def render_values(conn: Connection, template: str, rows: Sequence[Sequence[Any]]) -> str:
    """``(..), (..)`` for ``rows``, each rendered through ``template`` (``%s`` placeholders)."""
    cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        return b",".join(cur.mogrify(template, tuple(row)) for row in rows).decode()
    finally:
        cur.close()


def render_literal(conn: Connection, value: Any) -> str:
    """One value as a SQL literal (for constants inside a rendered statement)."""
    return render_values(conn, "%s", [(value,)])


def execute_rendered(conn: Connection, sql: str) -> int:
    """Run a fully rendered statement; returns the rowcount.

    SQLAlchemy hands psycopg2 an empty parameter mapping, so psycopg2 still
    reads ``%`` as a placeholder: literal percent signs are doubled.
    """
    return conn.exec_driver_sql(sql.replace("%", "%%")).rowcount


def fetch_rendered(conn: Connection, sql: str) -> list[Any]:
    """Run a fully rendered statement that returns rows (see ``execute_rendered``)."""
    return list(conn.exec_driver_sql(sql.replace("%", "%%")).all())


def fetch_tuples(conn: Connection, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Rows of a ``%(name)s``-style statement as the driver's plain tuples.

    For bulk reads: skips building a SQLAlchemy Row per row (a third of the
    cost of reading a wide row). psycopg2 has buffered the whole result by
    the time ``exec_driver_sql`` returns, so reading the cursor directly
    touches no connection (errors were translated already).
    """
    result = conn.exec_driver_sql(sql, params)
    try:
        assert result.cursor is not None  # a statement that returns rows
        return list(result.cursor.fetchall())
    finally:
        result.close()


def stream_tuples(conn: Connection, sql: str, batch_size: int) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``sql`` in batches, through a server-side cursor: one scan
    of the table however large, in constant client memory (the transaction of
    ``conn`` stays open until the last batch)."""
    raw = conn.connection.dbapi_connection
    try:
        with raw.cursor(name=f"cronman_{uuid.uuid4().hex[:12]}") as cur:  # type: ignore[union-attr]
            cur.itersize = batch_size
            cur.execute(sql)
            while True:
                rows = cur.fetchmany(batch_size)
                if not rows:
                    return
                yield rows
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
        raise StoreUnavailable(f"database unavailable: {exc}") from exc
