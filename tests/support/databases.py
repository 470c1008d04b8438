"""Throw-away PostgreSQL databases and Redis db numbers on the machine's servers.

CI shares the machine's servers with other runs, so each test session makes
its own database and takes a Redis db number nobody else holds, and cleans up.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import redis

PG_HOST = os.environ.get("CRONMAN_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("CRONMAN_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("CRONMAN_TEST_PG_USER", "postgres")
PG_ADMIN_DB = os.environ.get("CRONMAN_TEST_PG_DB", "test")
REDIS_HOST = os.environ.get("CRONMAN_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("CRONMAN_TEST_REDIS_PORT", "6379"))
_OWNER_KEY = "__cronman_test_owner__"
_REPO = Path(__file__).resolve().parents[2]
_TEMPLATE_PREFIX = "cronman_tpl"


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
    with _database(prefix, template=None) as url:
        yield url


@contextmanager
def migrated_pg_database(prefix: str = "cronman_t") -> Iterator[str]:
    """Like ``temporary_pg_database`` followed by ``upgrade``, made by
    copying a template database that one ``upgrade`` made (CREATE DATABASE
    ... TEMPLATE): ~0.25 s here instead of 1-2 s for the migrations and the
    partitions. The template is named after the migrations, the store's code
    and today's date (``upgrade`` makes the partitions from today on), so a
    changed migration or a new day makes a new one; earlier days' are dropped."""
    with _database(prefix, template=_template_database()) as url:
        yield url


@contextmanager
def _database(prefix: str, template: str | None) -> Iterator[str]:
    """A new database (a copy of ``template``, or empty), synchronous_commit
    off; dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    conn = _admin()
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"{copy}')
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


def _template_key() -> tuple[str, str]:
    """(today's date, a digest of the migrations and the store's code)."""
    digest = hashlib.sha256()
    for root in (_REPO / "migrations", _REPO / "cronman" / "store"):
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(_REPO)).encode())
            digest.update(path.read_bytes())
    return datetime.now(UTC).strftime("%Y%m%d"), digest.hexdigest()[:12]


def _template_database() -> str:
    """The name of today's migrated template database, made if missing.

    Sessions (xdist workers, other checkouts) race to make it: an advisory
    lock on the key serialises them, and the template appears under its
    name only once migrated (made under a scratch name, then renamed)."""
    from cronman.store.migrate import upgrade

    day, digest = _template_key()
    template = f"{_TEMPLATE_PREFIX}_{day}_{digest}"
    conn = _admin()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(hashtext(%s))", (template,))
            try:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (template,))
                if cur.fetchone() is None:
                    scratch = f"{_TEMPLATE_PREFIX}_new_{uuid.uuid4().hex[:12]}"
                    cur.execute(f'CREATE DATABASE "{scratch}"')
                    try:
                        upgrade(pg_url(scratch))
                        # A copy needs its template without sessions.
                        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                    "WHERE datname = %s AND pid <> pg_backend_pid()", (scratch,))
                        cur.execute(f'ALTER DATABASE "{scratch}" RENAME TO "{template}"')
                    except BaseException:
                        cur.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
                        raise
                    cur.execute("SELECT datname FROM pg_database WHERE datname ~ %s "
                                "AND datname <> %s AND datname NOT LIKE %s",
                                (f"^{_TEMPLATE_PREFIX}_[0-9]{{8}}_", template,
                                 f"{_TEMPLATE_PREFIX}_{day}%"))
                    for (old,) in cur.fetchall():
                        cur.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
            finally:
                cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", (template,))
    finally:
        conn.close()
    return template


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
