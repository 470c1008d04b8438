"""Arrays sent to PostgreSQL as one literal read back exactly as the values given."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine

from cronman.store.pgsql import array_literal

TEXTS = ['plain', 'a"b', "c\\d", "NULL", "null", "", "x y", "{braces}", "a,b", "'quote'",
         "ünï€ 🙂", "\\\"", None, "tab\tnew\nline"]
TIMES = [datetime(2026, 11, 27, 12, 0, tzinfo=UTC),
         datetime(2026, 11, 27, 12, 0, 0, 123456, tzinfo=UTC),
         datetime(2026, 3, 29, 2, 30, tzinfo=timezone(timedelta(hours=2))),
         datetime(2, 1, 1, tzinfo=UTC),
         datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
         None]
INTS = [0, -1, 2**62, -(2**62), None, 7]


@pytest.fixture
def conn(pg_database_url):
    engine = create_engine(pg_database_url)
    with engine.connect() as c:
        # The server's zone must not matter: aware times are sent with their offset.
        c.exec_driver_sql("SET TIME ZONE 'America/St_Johns'")
        yield c
    engine.dispose()


def _back(conn, literal: str, pg_type: str):
    return conn.exec_driver_sql(f"SELECT %s::{pg_type}", (literal,)).scalar_one()


def test_texts_and_times_and_numbers_come_back_as_given(conn):
    assert _back(conn, array_literal(TEXTS, "text"), "text[]") == TEXTS
    assert _back(conn, array_literal(TIMES, "timestamptz"), "timestamptz[]") == TIMES
    assert _back(conn, array_literal(INTS, "bigint"), "bigint[]") == INTS
    assert _back(conn, array_literal([], "text"), "text[]") == []


def test_json_texts_come_back_as_their_documents(conn):
    docs = [{"http_status": 204}, {"snippet": 'say "hi"\\n', "list": [1, None]}, None, "x"]
    texts = [None if d is None else json.dumps(d) for d in docs]
    assert _back(conn, array_literal(texts, "jsonb"), "jsonb[]") == docs


def test_a_float_given_for_an_integer_is_rounded_as_the_server_would(conn):
    assert _back(conn, array_literal([1.4, 2.6, 3], "bigint"), "bigint[]") == [1, 3, 3]


def test_naive_times_and_unknown_types_are_refused():
    with pytest.raises(ValueError, match="naive"):
        array_literal([datetime(2026, 1, 1)], "timestamptz")
    with pytest.raises(ValueError, match="no array literal"):
        array_literal([True], "boolean")
