"""``cronman.store.connect``: every URL form reaches libpq whole, the same for
the engine and for raw connections; libpq itself reads the result."""

from __future__ import annotations

import os

import psycopg2
import psycopg2.extensions
import pytest
from sqlalchemy import text

from cronman.audit.slot import connect as audit_connect
from cronman.notify.leadership import PgLeadership
from cronman.store.connect import (
    MemberWatch,
    connect,
    engine_connect_args,
    libpq_dsn,
    libpq_params,
    normalise_url,
)
from cronman.store.engine import Database
from tests.support.databases import PG_HOST, PG_PORT, PG_USER, temporary_pg_database

FORMS = [
    # (URL, the libpq keywords it must give)
    ("postgresql://u@h:5433/db",
     {"host": "h", "port": "5433", "user": "u", "dbname": "db"}),
    ("postgresql+psycopg2://postgres@/DB?host=10.0.0.1:5433&host=10.0.0.2:5434"
     "&target_session_attrs=read-write",
     {"host": "10.0.0.1,10.0.0.2", "port": "5433,5434", "user": "postgres", "dbname": "DB"}),
    ("postgresql://postgres@/DB?host=a,b&port=1,2",
     {"host": "a,b", "port": "1,2", "user": "postgres", "dbname": "DB"}),
    ("postgresql://postgres@/DB?host=a,b&port=5432",
     {"host": "a,b", "port": "5432,5432", "user": "postgres", "dbname": "DB"}),
    ("postgresql://postgres@10.0.0.1:5433,10.0.0.2:5434/DB?connect_timeout=2",
     {"host": "10.0.0.1,10.0.0.2", "port": "5433,5434", "dbname": "DB",
      "connect_timeout": "2"}),
    ("postgresql://postgres@[::1]:5433,[fe80::1]/DB",
     {"host": "::1,fe80::1", "port": "5433,", "dbname": "DB"}),
    ("postgresql://postgres@/DB?host=[::1]:5433&host=/run/pg",
     {"host": "::1,/run/pg", "port": "5433,"}),
    ("postgresql://postgres@/DB?host=/tmp/a&host=/tmp/b",
     {"host": "/tmp/a,/tmp/b", "dbname": "DB"}),
    ("postgresql://postgres@/DB?host=%2Fvar%2Frun%2Fpostgresql",
     {"host": "/var/run/postgresql"}),
    ("postgresql://u:p%40ss%3Aw%2Frd%20%27q%5C%3D@h/db?sslmode=require&options=-c%20a%3Db",
     {"password": "p@ss:w/rd 'q\\=", "sslmode": "require", "options": "-c a=b"}),
    ("postgres://u@h/db?target_session_attrs=primary",
     {"target_session_attrs": "primary"}),
]


@pytest.mark.parametrize(("raw", "expected"), FORMS)
def test_every_form_reaches_libpq_whole(raw: str, expected: dict[str, str]) -> None:
    url = normalise_url(raw)
    parsed = psycopg2.extensions.parse_dsn(libpq_dsn(url, application_name="t"))
    for key, value in expected.items():
        assert parsed[key] == value, key
    assert parsed["target_session_attrs"] in ("read-write", "primary")
    assert parsed["application_name"] == "t"
    # The engine hands psycopg2 the same keywords (its own defaults aside).
    engine_side = {**_dialect_params(url), **engine_connect_args(url, "t")}
    assert psycopg2.extensions.parse_dsn(psycopg2.extensions.make_dsn(**engine_side)) == {
        **parsed, **{k: v for k, v in engine_side.items() if k.startswith("keepalives")}}


def _dialect_params(url):
    from sqlalchemy.dialects.postgresql.psycopg2 import PGDialect_psycopg2

    return {k: str(v) for k, v in PGDialect_psycopg2().create_connect_args(url)[1].items()}


def test_the_urls_own_options_win_over_the_defaults() -> None:
    url = normalise_url("postgresql://u@h/db?connect_timeout=2&application_name=mine")
    params = libpq_params(url, application_name="cronman-feed", connect_timeout="9")
    assert params["connect_timeout"] == "2"
    assert params["application_name"] == "mine"
    assert "connect_timeout" not in engine_connect_args(url, "cronman")


@pytest.mark.parametrize("attrs", ["any", "read-only", "standby", "prefer-standby"])
def test_a_session_that_may_land_on_a_replica_is_refused(attrs: str) -> None:
    with pytest.raises(ValueError, match="target_session_attrs"):
        normalise_url(f"postgresql://u@/db?host=a:1&host=b:2&target_session_attrs={attrs}")


def test_ports_given_twice_are_refused() -> None:
    with pytest.raises(ValueError, match="ports twice"):
        normalise_url("postgresql://u@/db?host=a:1&host=b:2&port=3,4")


def test_sqlite_urls_pass_through() -> None:
    assert normalise_url("sqlite:///x,y.db").database == "x,y.db"


# -- against the real server ------------------------------------------------------


def _refused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


@pytest.fixture(scope="module")
def scratch_db():
    with temporary_pg_database("cronman_conn") as url:
        yield url.rsplit("/", 1)[1]


@pytest.mark.postgres
@pytest.mark.parametrize("form", ["repeated", "lists", "netloc"])
def test_every_connection_tries_the_next_member(form: str, scratch_db: str) -> None:
    """The raw connections (the exporter's, the notifier's lock) and the engine
    all take a multi-host URL whose first member is down."""
    dead, live, db = _refused_port(), PG_PORT, scratch_db
    raw = {
        "repeated": f"postgresql://{PG_USER}@/{db}?host={PG_HOST}:{dead}&host={PG_HOST}:{live}",
        "lists": f"postgresql://{PG_USER}@/{db}?host={PG_HOST},{PG_HOST}&port={dead},{live}",
        "netloc": f"postgresql://{PG_USER}@{PG_HOST}:{dead},{PG_HOST}:{live}/{db}",
    }[form]
    conn = audit_connect(raw, "cronman-test")
    try:
        assert int(conn.info.port) == live
        with conn.cursor() as cur:
            cur.execute("SELECT current_setting('application_name'), "
                        "current_setting('transaction_read_only')")
            assert cur.fetchone() == ("cronman-test", "off")
    finally:
        conn.close()
    lock = PgLeadership(raw, "n1")
    try:
        assert lock.acquire() is True
    finally:
        lock.release()
    database = Database(raw, pool_size=1)
    try:
        with database.read() as c:
            assert c.execute(text("SELECT inet_server_port()")).scalar_one() == live
        member = database.members.current
        assert member is not None and member.member == f"{PG_HOST}:{live}"
    finally:
        database.dispose()


@pytest.mark.postgres
def test_socket_directories_are_members_too() -> None:
    sockdir = "/var/run/postgresql"
    if not os.path.exists(f"{sockdir}/.s.PGSQL.{PG_PORT}"):
        pytest.skip("the server has no socket in /var/run/postgresql")
    conn = connect(f"postgresql://{PG_USER}@/test?host=/nonexistent-dir&host={sockdir}"
                   f"&port={PG_PORT},{PG_PORT}", "cronman-test")
    try:
        assert conn.info.host == sockdir
    finally:
        conn.close()


@pytest.mark.postgres
def test_a_read_only_member_is_never_used() -> None:
    """A member that refuses writes (a replica; here a read-only database) is
    skipped by every connection cronman makes: raw, pooled and the notifier's."""
    with temporary_pg_database("cronman_ro") as url:
        dbname = url.rsplit("/", 1)[1]
        admin = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="test")
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')
        admin.close()
        with pytest.raises(psycopg2.OperationalError, match="read-only|not accept"):
            connect(url, "cronman-test").close()
        db = Database(url, pool_size=1)
        try:
            assert db.ping() is False
        finally:
            db.dispose()
        lock = PgLeadership(url, "n1")
        assert lock.acquire() is False
        lock.release()


def test_member_watch_logs_a_change(caplog: pytest.LogCaptureFixture) -> None:
    watch = MemberWatch()
    watch.saw("127.0.0.1:1")
    first = watch.current
    watch.saw("127.0.0.1:1")
    assert watch.current == first
    watch.saw("127.0.0.1:2")
    assert watch.current is not None and watch.current.member == "127.0.0.1:2"
    assert "now writing to 127.0.0.1:2 (was 127.0.0.1:1)" in caplog.text


@pytest.mark.postgres
def test_the_api_names_the_member_it_writes_to(scratch_db: str) -> None:
    """``/readyz`` and ``/metrics`` name the member the API's connections landed on."""
    from cronman.config import Settings
    from cronman.processes.api import make_app

    dead = _refused_port()
    url = f"postgresql://{PG_USER}@/{scratch_db}?host={PG_HOST}:{dead}&host={PG_HOST}:{PG_PORT}"
    app = make_app(Settings(database_url=url))
    client = app.test_client()
    assert client.get("/metrics").status_code == 200  # opens no store
    body = client.get("/readyz").get_json()
    assert body["database_member"]["member"] == f"{PG_HOST}:{PG_PORT}", body
    assert body["database_member"]["since"].endswith("Z")
    text_ = client.get("/metrics").get_data(as_text=True)
    assert f'cronman_database_member{{member="{PG_HOST}:{PG_PORT}"}} 1.0' in text_
    assert "cronman_database_member_since_timestamp_seconds" in text_
    app.extensions["cronman"].close()


def test_sqlite_names_no_member(tmp_path) -> None:
    from cronman.store import open_store
    from cronman.store.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade(url)
    with open_store(url) as store:
        assert store.ping() and store.database_member() is None
