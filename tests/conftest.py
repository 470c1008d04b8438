"""Shared fixtures: real PostgreSQL and Redis, SQLite files, and the Store over both.

``store`` is parametrised over SQLite and PostgreSQL: behaviour the two share
is tested once, against both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.databases import (
    migrated_pg_database,
    temporary_pg_database,
    temporary_redis_db,
)


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A migrated PostgreSQL database for this test session."""
    with migrated_pg_database() as url:
        yield url


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """An empty (unmigrated) PostgreSQL database for one test."""
    with temporary_pg_database() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'cronman.db'}"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis db number of the machine's Redis, owned by this session."""
    with temporary_redis_db() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path) -> Iterator[str]:
    """A migrated, empty database of each kind."""
    from cronman.store.migrate import upgrade

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'cronman.db'}"
        upgrade(url)
        yield url
    else:
        url = request.getfixturevalue("pg_database_url")
        _truncate_pg(url)
        yield url


@pytest.fixture
def store(database_url) -> Iterator[object]:
    from cronman.store import open_store

    s = open_store(database_url)
    try:
        yield s
    finally:
        s.close()


def _truncate_pg(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE jobs, scheduled_jobs, api_tokens, token_history, maintenance, job_history, notification_rules, notifications, notification_events, notification_groups, notification_failing_jobs, notifier_cursors, job_edges, trigger_events, calendars, signing_keys, host_policies, work_items, work_workers, limits, namespace_quotas, idempotency_keys"))
    engine.dispose()


# Where serial tests may live: ops/test collects only these for its serial part.
SERIAL_DIRS = ("tests/cluster/", "tests/chaos/")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Multi-process cluster tests are ``serial`` (``ops/test`` runs them
    after the rest, three at a time and nothing else: their timing bounds
    assume the machine's cores are free), except those marked
    ``counts_only`` (no timing bound: they count lost and doubled fires),
    which run in the parallel part. Soak
    runs (``@pytest.mark.soak``) are left out unless ``-m`` names them
    (``pytest -m soak``): the default suite stays short.

    Modules holding a ``slow`` test are collected first, so pytest-xdist
    hands out the long tests before the short ones and no worker starts a
    long test while the others run out of work. Under ``--dist loadgroup``
    (ops/test) every test is a unit of its own, handed to whichever worker
    is free, except the tests of a module that share a module-scoped fixture
    (a server, a venv): they stay together on one worker, so it is made once."""
    for item in items:
        if item.get_closest_marker("counts_only"):
            continue
        if item.nodeid.startswith("tests/cluster/") or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.serial)
        if item.get_closest_marker("serial") and not item.nodeid.startswith(SERIAL_DIRS):
            raise pytest.UsageError(f"{item.nodeid} is serial: ops/test runs the serial "
                                    f"part from {', '.join(SERIAL_DIRS)} only")
    if "soak" not in (config.getoption("markexpr") or ""):
        kept, dropped = [], []
        for item in items:
            (dropped if item.get_closest_marker("soak") else kept).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    slow_modules = {item.nodeid.split("::")[0] for item in items
                    if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_modules)
    for item in items:
        if _uses_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _uses_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(
        d.scope in ("module", "class", "package")
        for defs in info.name2fixturedefs.values() for d in defs)
