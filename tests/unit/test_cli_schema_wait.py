"""A server command started while the database is unreachable waits for it
(a Patroni cluster has no primary for ~ttl seconds after a failover), and
exits at once on a missing schema. ``cronman api`` used to exit at once with
"run `cronman migrate` first" for an unreachable database too (found by the
chaos suite's Patroni failover: the API, restarted while no member accepted
writes, stayed down)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import cronman.store.migrate
from cronman.cli import api_server, schema_wait
from cronman.cli.group import RET_ERROR, cli
from cronman.errors import StoreUnavailable
from cronman.store.migrate import SchemaNotCurrent

URL = "postgresql+psycopg2://cronman@/cronman?host=127.0.0.1:1&host=127.0.0.1:2"
ENV = ("CRONMAN_DATABASE_URL", "CRONMAN_REDIS_URL", "CRONMAN_API_BIND",
       "CRONMAN_API_LONG_POLLS", api_server.ACCESS_LOG_ENV, api_server.OWNED_METRICS_DIR_ENV)


class Exec(Exception):
    """``os.execv`` reached: gunicorn would start now."""


@pytest.fixture
def api_cmd(monkeypatch, tmp_path):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(api_server.METRICS_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(schema_wait, "RETRY_SECONDS", 0.0)

    def execv(_path, _argv):
        raise Exec

    monkeypatch.setattr(api_server.os, "execv", execv)
    return lambda: CliRunner().invoke(cli, ["api", "--database-url", URL,
                                            "--bind", "127.0.0.1:0"])


def answers(monkeypatch, *outcomes):
    """``check_schema_current`` raising each exception of ``outcomes`` in turn, then passing."""
    calls = []

    def check(url):
        calls.append(url)
        if len(calls) <= len(outcomes):
            raise outcomes[len(calls) - 1]
        return "head"

    monkeypatch.setattr(cronman.store.migrate, "check_schema_current", check)
    return calls


def test_the_api_waits_for_an_unreachable_database_then_starts(monkeypatch, api_cmd):
    down = StoreUnavailable("database unavailable: connection refused")
    calls = answers(monkeypatch, down, down, down)
    res = api_cmd()
    assert isinstance(res.exception, Exec), res.output
    assert len(calls) == 4
    assert "cronman migrate" not in res.output


def test_the_api_exits_at_once_on_a_missing_schema(monkeypatch, api_cmd):
    calls = answers(monkeypatch, SchemaNotCurrent("the database has no cronman schema: "
                                                  "run `cronman migrate`"))
    res = api_cmd()
    assert res.exit_code == RET_ERROR and len(calls) == 1
    assert "cronman api: the database has no cronman schema" in res.output
