"""PostgreSQL bulk statements: ``VALUES`` lists rendered by psycopg2 itself,
and prepared statements over arrays for the hottest ones.

A set-based ``UPDATE ... FROM (VALUES ...)`` writes a whole batch in one
statement (one round trip), where an executemany of UPDATEs costs one round
trip per row. psycopg2 interpolates parameters on the client anyway, so
rendering the list with ``cursor.mogrify`` is exactly what it would send.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import psycopg2
from sqlalchemy.engine import Connection, CursorResult

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


# Where a pooled connection remembers the statements prepared on it
# (``PoolProxiedConnection.info`` lives as long as the driver's connection).
_PREPARED_KEY = "cronman_prepared"


def execute_prepared(conn: Connection, name: str, statement: str, types: Sequence[str],
                     args: Sequence[Any]) -> CursorResult[Any]:
    """Run ``statement`` (``$1``... placeholders of ``types``) with ``args``
    as a server-side prepared statement, prepared on first use on each
    connection.

    For the per-fire batches (claims, results): the server parses and plans
    the statement once per connection instead of a ``VALUES`` list of every
    batch, and psycopg2 renders a few arrays instead of a row each -- about
    a third less server CPU and two thirds less client CPU per row. The
    arguments are cast to their types in the ``EXECUTE`` (an array of NULLs
    is text[] to the parser otherwise). A prepared statement outlives a
    rolled-back transaction, so it is remembered once made.
    """
    prepared: set[str] = conn.connection.info.setdefault(_PREPARED_KEY, set())
    if name not in prepared:
        conn.exec_driver_sql(f"PREPARE {name} ({', '.join(types)}) AS {statement}"
                             .replace("%", "%%"))
        prepared.add(name)
    casts = ", ".join(f"%s::{t}" for t in types)
    values = tuple(array_literal(a, t[:-2]) if t.endswith("[]") and isinstance(a, list) else a
                   for a, t in zip(args, types, strict=True))
    return conn.exec_driver_sql(f"EXECUTE {name} ({casts})", values)


def array_literal(values: Sequence[Any], element_type: str) -> str:
    """``values`` as the text of a PostgreSQL array of ``element_type``
    (``{a,b,NULL}``), sent as one string and parsed by the server.

    psycopg2 adapts a list element by element, each through Python: about
    10 µs for a timestamp and 2 for a string here, several per fire. Texts
    (and JSON texts) are always quoted, so no value can read as NULL or
    break the list; timestamps are written as ISO 8601 (aware, so the
    server reads them in UTC whatever its time zone); numbers as integers
    (a float rounded, as the server's cast would).
    """
    if element_type in _QUOTED_ELEMENTS:
        items = ["NULL" if v is None else
                 '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values]
    elif element_type == "timestamptz":
        items = ["NULL" if v is None else _iso(v) for v in values]
    elif element_type in _NUMBER_ELEMENTS:
        items = ["NULL" if v is None else str(v if isinstance(v, int) else round(v))
                 for v in values]
    else:
        raise ValueError(f"no array literal for elements of type {element_type}")
    return "{" + ",".join(items) + "}"


_QUOTED_ELEMENTS = frozenset({"text", "jsonb", "json"})
_NUMBER_ELEMENTS = frozenset({"int", "integer", "bigint", "smallint"})


def _iso(t: datetime) -> str:
    if t.tzinfo is None:
        raise ValueError("naive datetime given to the store")
    return t.isoformat()

