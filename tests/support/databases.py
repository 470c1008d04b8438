"""Throw-away PostgreSQL databases and Redis db numbers on the machine's servers.

CI shares the machine's servers with other runs, so each test session makes
its own database and takes a Redis db number nobody else holds, and cleans up.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
import redis

PG_HOST = os.environ.get("CRONMAN_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("CRONMAN_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("CRONMAN_TEST_PG_USER", "postgres")
PG_ADMIN_DB = os.environ.get("CRONMAN_TEST_PG_DB", "test")
REDIS_HOST = os.environ.get("CRONMAN_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("CRONMAN_TEST_REDIS_PORT", "6379"))
_OWNER_KEY = "__cronman_test_owner__"


def pg_url(dbname: str) -> str:
    return f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{dbname}"


def _admin():
    conn = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=PG_ADMIN_DB)
    conn.autocommit = True
    return conn


@contextmanager
def temporary_pg_database(prefix: str = "cronman_t") -> Iterator[str]:
    """A new empty database; yields its SQLAlchemy URL and drops it afterwards.

    Its sessions commit without waiting for the WAL flush (synchronous_commit
    off, a setting of this database alone): a commit costs ~0.2 ms instead of
    ~4 ms here, and nothing kills the machine's server under a test, so no
    commit a client was told about is lost. (The private servers that tests
    do kill, tests.support.pg_server, keep synchronous_commit on.)
    """
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = _admin()
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
            cur.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    finally:
        conn.close()
    try:
        yield pg_url(name)
    finally:
        conn = _admin()
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            conn.close()


@contextmanager
def temporary_redis_db() -> Iterator[str]:
    """A Redis db number (1-15) no other test session holds; flushed before and after."""
    token = uuid.uuid4().hex
    for db in range(1, 16):
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db)
        if client.set(_OWNER_KEY, token, nx=True, ex=3600):
            try:
                for key in client.scan_iter(count=1000):
                    if key != _OWNER_KEY.encode():
                        client.delete(key)
                yield f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"
            finally:
                for key in client.scan_iter(count=1000):
                    if key != _OWNER_KEY.encode():
                        client.delete(key)
                if client.get(_OWNER_KEY) == token.encode():
                    client.delete(_OWNER_KEY)
                client.close()
            return
        client.close()
    raise RuntimeError("no free Redis db number (1-15) for this test session")
