"""A batch of whole transactions as Parquet objects, one per table and hour.

Object keys are a pure function of the batch: ``{table}/dt={YYYY-MM-DD}/
hour={HH}/{first}-{last}.parquet`` where the hour is that of the commit
(UTC) and ``first``/``last`` are the commit LSNs of the batch's first and
last transactions (16 hex digits, so names sort in log order). The same
transactions always give the same keys and the same rows, in the same order
(commit LSN, then the change's place in its transaction): an exporter that
writes a batch again after a crash overwrites nothing with anything new.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cronman.audit.columns import (
    CDC_FIELDS,
    REDACTED_COLUMNS,
    arrow_type,
    convert,
    converter,
)
from cronman.audit.pgoutput import UNCHANGED, Change, Transaction

PARQUET_COMPRESSION = "zstd"


@dataclass(frozen=True, slots=True)
class ObjectData:
    key: str
    table: str
    body: bytes
    changes: int


def lsn_name(lsn: int) -> str:
    return f"{lsn:016X}"


def object_key(table: str, hour: tuple[str, int], first: int, last: int) -> str:
    day, hh = hour
    return f"{table}/dt={day}/hour={hh:02d}/{lsn_name(first)}-{lsn_name(last)}.parquet"


def batch_objects(txns: Sequence[Transaction], tables: Sequence[str]) -> list[ObjectData]:
    """The objects of a batch (the transactions in commit order), sorted by key."""
    if not txns:
        return []
    first, last = txns[0].commit_lsn, txns[-1].commit_lsn
    groups: dict[tuple[str, str, int], list[tuple[Transaction, int, Change]]] = {}
    wanted = set(tables)
    for txn in txns:
        t = txn.commit_time
        hour = (t.strftime("%Y-%m-%d"), t.hour)
        for seq, change in enumerate(txn.changes):
            table = change.relation.name
            if table in wanted:
                groups.setdefault((table, *hour), []).append((txn, seq, change))
    objects = [ObjectData(object_key(table, (day, hh), first, last), table,
                          _parquet(table, rows), len(rows))
               for (table, day, hh), rows in groups.items()]
    objects.sort(key=lambda o: o.key)
    return objects


def _parquet(table: str, rows: list[tuple[Transaction, int, Change]]) -> bytes:
    # The table's columns in the order PostgreSQL sent them (a union, should a
    # migration have changed the table within the batch).
    columns: dict[str, int] = {}
    for _, _, change in rows:
        for col in change.relation.columns:
            columns.setdefault(col.name, col.type_oid)
    redact = REDACTED_COLUMNS.get(table, {})
    data: dict[str, list[Any]] = {f.name: [] for f in CDC_FIELDS}
    data.update({name: [] for name in columns})
    convs = {name: converter(oid) for name, oid in columns.items()}
    for txn, seq, change in rows:
        data["cdc_commit_lsn"].append(txn.commit_lsn)
        data["cdc_seq"].append(seq)
        data["cdc_commit_time"].append(txn.commit_time)
        data["cdc_xid"].append(txn.xid)
        data["cdc_op"].append(change.op)
        values = dict(zip((c.name for c in change.relation.columns), change.values,
                          strict=False))
        unchanged = [name for name, v in values.items() if v is UNCHANGED]
        data["cdc_unchanged"].append(unchanged or None)
        for name in columns:
            value = convert(values.get(name), convs[name])
            if value is not None and name in redact:
                value = redact[name](value)
            data[name].append(value)
    schema = pa.schema([*CDC_FIELDS,
                        *(pa.field(name, arrow_type(oid)) for name, oid in columns.items())])
    arrow = pa.Table.from_pydict(data, schema=schema)
    buf = io.BytesIO()
    pq.write_table(arrow, buf, compression=PARQUET_COMPRESSION)
    return buf.getvalue()
