"""PostgreSQL text values to typed Arrow columns, and the fixed change columns.

Every exported row is one change: the ``cdc_*`` columns say which (the
transaction's commit LSN and time, the change's place in it, the operation,
the TOASTed columns an UPDATE left unsent) and the table's own columns
follow, typed from their PostgreSQL types (integers as int64, timestamps as
UTC microseconds, JSON as its text). The ``jobs`` rows' target, dead
letter and notification rules are redacted the way the API shows them: the
audit bucket never holds a secret header or environment value in full.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pyarrow as pa

from cronman.audit.pgoutput import UNCHANGED, Value
from cronman.notify.rules import redact_notify
from cronman.redaction import redact_target, redact_value

# PostgreSQL type OIDs (pg_type.oid; fixed for built-in types).
BOOL, INT8, INT2, INT4, TEXT, JSON, FLOAT4, FLOAT8 = 16, 20, 21, 23, 25, 114, 700, 701
BPCHAR, VARCHAR, DATE, TIMESTAMP, TIMESTAMPTZ, JSONB = 1042, 1043, 1082, 1114, 1184, 3802

UTC_MICROS = pa.timestamp("us", tz="UTC")

# The change columns every exported table starts with.
CDC_FIELDS = (
    pa.field("cdc_commit_lsn", pa.int64(), nullable=False),
    pa.field("cdc_seq", pa.int32(), nullable=False),
    pa.field("cdc_commit_time", UTC_MICROS, nullable=False),
    pa.field("cdc_xid", pa.int64(), nullable=False),
    pa.field("cdc_op", pa.string(), nullable=False),
    pa.field("cdc_unchanged", pa.list_(pa.string())),
)
CDC_NAMES = tuple(f.name for f in CDC_FIELDS)


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _bool(text: str) -> bool:
    return text == "t"


_CONVERT: dict[int, tuple[pa.DataType, Callable[[str], Any]]] = {
    BOOL: (pa.bool_(), _bool),
    INT2: (pa.int64(), int),
    INT4: (pa.int64(), int),
    INT8: (pa.int64(), int),
    FLOAT4: (pa.float64(), float),
    FLOAT8: (pa.float64(), float),
    TIMESTAMPTZ: (UTC_MICROS, _timestamp),
    TIMESTAMP: (pa.timestamp("us"), _timestamp),
    DATE: (pa.date32(), lambda t: datetime.fromisoformat(t).date()),
}
_AS_TEXT: tuple[pa.DataType, Callable[[str], Any]] = (pa.string(), str)


def arrow_type(type_oid: int) -> pa.DataType:
    """The Arrow type a column of this PostgreSQL type is exported as (text for
    the rest: text, varchar, json, jsonb and anything unknown)."""
    return _CONVERT.get(type_oid, _AS_TEXT)[0]


def converter(type_oid: int) -> Callable[[str], Any]:
    return _CONVERT.get(type_oid, _AS_TEXT)[1]


def convert(value: Value, convert_text: Callable[[str], Any]) -> Any:
    if value is None or value is UNCHANGED:
        return None
    assert isinstance(value, str)
    return convert_text(value)


# -- redaction -----------------------------------------------------------------

# Columns of a table whose JSON holds secrets, and how each is redacted.
def _redact_target_json(text: str) -> str:
    try:
        target = json.loads(text)
    except ValueError:
        return text
    if not isinstance(target, dict):
        return text
    return json.dumps(redact_target(target), separators=(",", ":"), ensure_ascii=False)


def _redact_notify_json(text: str) -> str:
    try:
        rules = json.loads(text)
    except ValueError:
        return text
    if not isinstance(rules, list):
        return text
    return json.dumps(redact_notify(rules, redact_value), separators=(",", ":"),
                      ensure_ascii=False)


REDACTED_COLUMNS: dict[str, dict[str, Callable[[str], str]]] = {
    "jobs": {"target": _redact_target_json, "dead_letter": _redact_target_json,
             "notify": _redact_notify_json},
}
