"""``cronman audit query``: DuckDB over the exported Parquet objects.

Each audited table is a view over its objects (``hive_partitioning``: the
``dt`` and ``hour`` of the key are columns too, and DuckDB skips the files of
other days when a query filters on them): ``jobs``, ``job_history``,
``scheduled_jobs`` (also as ``runs``). Every row is one change
(``cdc_op``, ``cdc_commit_lsn``, ``cdc_seq``, ``cdc_commit_time``, ...), so a
row's life is its changes ordered by ``(cdc_commit_lsn, cdc_seq)``.

A local export is read where it lies. A bucket's objects are fetched into a
cache directory first (only the days asked for with ``since``/``until``, and
only objects not fetched before: an object's content never changes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from cronman.audit.settings import AUDITED_TABLES
from cronman.audit.sinks import LocalSink, ObjectSink

ALIASES = {"runs": "scheduled_jobs"}


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def _day_of(key: str) -> date | None:
    for part in key.split("/"):
        if part.startswith("dt="):
            try:
                return date.fromisoformat(part[3:])
            except ValueError:
                return None
    return None


def fetch(sink: ObjectSink, cache_dir: Path, *, since: date | None = None,
          until: date | None = None, tables: Sequence[str] = AUDITED_TABLES) -> int:
    """Copy the objects of ``tables`` (days ``since``..``until``, inclusive) not
    yet in ``cache_dir``; returns how many were fetched."""
    fetched = 0
    for table in tables:
        for key in sink.keys(f"{table}/"):
            if not key.endswith(".parquet"):
                continue
            day = _day_of(key)
            if day is not None and ((since and day < since) or (until and day > until)):
                continue
            target = cache_dir / key
            if target.exists():
                continue
            body = sink.get(key)
            if body is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.part")
            tmp.write_bytes(body)
            os.replace(tmp, target)
            fetched += 1
    return fetched


def run_query(sql: str, root: Path, *, tables: Sequence[str] = AUDITED_TABLES) -> QueryResult:
    """Run ``sql`` with a view per audited table over the Parquet files under ``root``."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        for table in tables:
            files = root / table
            if any(files.rglob("*.parquet")):
                source = (f"read_parquet('{_sql_text(str(files))}/**/*.parquet', "
                          "hive_partitioning = true, union_by_name = true)")
            else:
                source = f"(SELECT * FROM {_empty_relation(table)} LIMIT 0)"
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM {source}")
        for alias, table in ALIASES.items():
            if table in tables:
                con.execute(f"CREATE VIEW {alias} AS SELECT * FROM {table}")
        # Through Arrow: its datetimes carry their zone without pytz.
        relation = con.sql(sql)
        if relation is None:  # a statement with no result
            return QueryResult([], [])
        table = relation.to_arrow_table()
        return QueryResult(list(table.column_names),
                           [tuple(row.values()) for row in table.to_pylist()])
    finally:
        con.close()


def query_sink(sql: str, sink: ObjectSink, *, cache_dir: Path | None, since: date | None = None,
               until: date | None = None) -> QueryResult:
    """Run ``sql`` over a sink's objects (fetched into ``cache_dir`` unless local)."""
    if isinstance(sink, LocalSink):
        return run_query(sql, sink.root)
    if cache_dir is None:
        raise ValueError("a bucket's objects are queried from a cache directory")
    fetch(sink, cache_dir, since=since, until=until)
    return run_query(sql, cache_dir)


def _sql_text(text: str) -> str:
    return text.replace("'", "''")


def _empty_relation(table: str) -> str:
    """A VALUES-free empty relation with the table's exported columns (a table
    with no object yet still answers queries, with no rows)."""
    from cronman.audit.columns import CDC_FIELDS
    from cronman.store.tables import metadata

    duck = {"int64": "BIGINT", "int32": "INTEGER", "string": "VARCHAR", "bool": "BOOLEAN",
            "double": "DOUBLE", "timestamp[us, tz=UTC]": "TIMESTAMPTZ",
            "list<item: string>": "VARCHAR[]"}
    cols = [f"CAST(NULL AS {duck[str(f.type)]}) AS {f.name}" for f in CDC_FIELDS]
    for column in metadata.tables[table].columns:
        kind = column.type.__class__.__name__.lower()
        sql_type = ("BIGINT" if "int" in kind else "BOOLEAN" if "bool" in kind else
                    "DOUBLE" if "float" in kind else
                    "TIMESTAMPTZ" if "date" in kind else "VARCHAR")
        cols.append(f"CAST(NULL AS {sql_type}) AS \"{column.name}\"")
    cols += ["CAST(NULL AS DATE) AS dt", "CAST(NULL AS BIGINT) AS hour"]
    return f"(SELECT {', '.join(cols)})"
