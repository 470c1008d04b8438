"""Alembic migrations yield exactly the schema of cronman.store.tables, on both databases."""

from __future__ import annotations

import multiprocessing
import threading
from datetime import timedelta

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import Column, Integer, MetaData, create_engine, text

from cronman.cli import cli
from cronman.store.engine import normalise_url
from cronman.store.migrate import (
    SchemaNotCurrent,
    alembic_config,
    check_schema_current,
    current_revision,
    head_revision,
    include_name,
    upgrade,
)
from cronman.store.partitions import partition_name
from cronman.store.tables import metadata
from cronman.timeutil import utcnow


def _diff(url: str, target: MetaData = metadata) -> list:
    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={
                "compare_type": True, "compare_server_default": True,
                "include_name": include_name})
            return compare_metadata(ctx, target)
    finally:
        engine.dispose()


def _altered_metadata() -> MetaData:
    """The models plus one column: the comparison must notice it."""
    copy = MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(copy)
    copy.tables["maintenance"].append_column(Column("extra", Integer))
    return copy


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("fresh_pg_url")


def test_upgrade_yields_the_models_schema(fresh_url):
    assert current_revision(fresh_url) is None
    report = upgrade(fresh_url)
    assert report.before is None and report.after == head_revision()
    assert _diff(fresh_url) == []
    assert _diff(fresh_url, _altered_metadata()) != []  # the comparison does compare


def test_upgrade_twice_is_a_no_op(fresh_url):
    upgrade(fresh_url)
    report = upgrade(fresh_url)
    assert not report.changed and report.partitions_created == []
    assert _diff(fresh_url) == []
    assert check_schema_current(fresh_url) == head_revision()


def test_postgres_partitions_and_sequence(fresh_pg_url):
    report = upgrade(fresh_pg_url)
    today = utcnow().date()
    expected = [partition_name(today + timedelta(days=i)) for i in range(8)]
    assert report.partitions_created == expected
    engine = create_engine(fresh_pg_url)
    try:
        with engine.connect() as conn:
            kind = conn.execute(text("SELECT relkind FROM pg_class "
                                     "WHERE relname = 'scheduled_jobs'")).scalar_one()
            children = set(conn.execute(text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'scheduled_jobs'::regclass")).scalars())
            default = conn.execute(text(
                "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c "
                "WHERE relname = 'scheduled_jobs_default'")).scalar_one()
            bound = conn.execute(text(
                "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c "
                "WHERE relname = :n"), {"n": expected[0]}).scalar_one()
            seq = conn.execute(text("SELECT nextval('jobs_change_seq')")).scalar_one()
    finally:
        engine.dispose()
    assert kind == "p"
    assert children == set(expected) | {"scheduled_jobs_default"}
    assert default == "DEFAULT"
    assert f"FROM ('{today.isoformat()} 00:00:00+00')" in bound
    assert seq == 1


def test_jobs_leave_room_for_their_cursor_updates(fresh_pg_url):
    upgrade(fresh_pg_url)
    engine = create_engine(fresh_pg_url)
    try:
        with engine.connect() as conn:
            options = conn.execute(text("SELECT reloptions FROM pg_class "
                                        "WHERE relname = 'jobs'")).scalar_one()
    finally:
        engine.dispose()
    assert options == ["fillfactor=80"]


def _upgrade_quietly(url: str, out) -> None:
    try:
        upgrade(url)
        out.put(None)
    except BaseException as exc:  # reported to the parent
        out.put(repr(exc))


def test_concurrent_upgrades_serialise(fresh_pg_url):
    """Several processes starting at once against an empty database."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_upgrade_quietly, args=(fresh_pg_url, out)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(10)
    assert results == [None, None, None]
    assert current_revision(fresh_pg_url) == head_revision()
    assert _diff(fresh_pg_url) == []


def test_upgrades_from_threads_of_one_process(fresh_url):
    errors: list[BaseException] = []

    def run() -> None:
        try:
            upgrade(fresh_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert current_revision(fresh_url) == head_revision()


def test_schema_checks_refuse_missing_and_unknown_revisions(fresh_url):
    with pytest.raises(SchemaNotCurrent, match="no cronman schema"):
        check_schema_current(fresh_url)
    upgrade(fresh_url)
    engine = create_engine(normalise_url(fresh_url))
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    finally:
        engine.dispose()
    with pytest.raises(SchemaNotCurrent, match="newer version"):
        check_schema_current(fresh_url)
    with pytest.raises(SchemaNotCurrent):
        upgrade(fresh_url)


def test_downgrade_to_base_and_back(fresh_url):
    upgrade(fresh_url)
    command.downgrade(alembic_config(fresh_url), "base")
    assert current_revision(fresh_url) is None
    upgrade(fresh_url)
    assert _diff(fresh_url) == []


def test_cli_migrate_is_idempotent(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    first = runner.invoke(cli, ["migrate", "--database-url", url])
    assert first.exit_code == 0, first.output
    assert f"upgraded schema (empty) -> {head_revision()}" in first.output
    second = runner.invoke(cli, ["migrate", "--database-url", url])
    assert second.exit_code == 0 and f"already at {head_revision()}" in second.output


def test_cli_migrate_postgres(fresh_pg_url):
    result = CliRunner().invoke(cli, ["migrate", "--database-url", fresh_pg_url])
    assert result.exit_code == 0, result.output
    assert "created partitions: scheduled_jobs_" in result.output
    again = CliRunner().invoke(cli, ["migrate", "--database-url", fresh_pg_url])
    assert "nothing to do" in again.output and "created partitions" not in again.output


def test_upgrade_from_0001_keeps_runs_and_widens_the_figures(fresh_url):
    """A database made by 0001, with a job and a run in it, upgraded to 64-bit figures."""
    command.upgrade(alembic_config(fresh_url), "0001")
    engine = create_engine(normalise_url(fresh_url))
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text(
                    "CREATE TABLE scheduled_jobs_old PARTITION OF scheduled_jobs "
                    "FOR VALUES FROM ('2026-01-01') TO ('2026-01-02')"))
            conn.execute(text(
                "INSERT INTO jobs (id, namespace, name, version, schedule, target, retry, "
                "misfire, delivery, concurrency, priority, paused, labels, created_at, "
                "updated_at, change_seq, skipped_pending) VALUES ('j1', 'default', 'n', 1, "
                "'{}', '{}', '{}', '{}', 'at_least_once', 'allow', 0, false, '{}', "
                "'2026-01-01 00:00:00+00', '2026-01-01 00:00:00+00', 1, 7)"))
            conn.execute(text(
                "INSERT INTO scheduled_jobs (id, job_id, scheduled_for, status, attempt, "
                "origin, lateness_ms, duration_ms, skipped_before) VALUES ('r1', 'j1', "
                "'2026-01-01 07:00:00+00', 'succeeded', 1, 'schedule', 12, 34, 5)"))
        upgrade(fresh_url)
        assert _diff(fresh_url) == []
        with engine.begin() as conn:
            row = conn.execute(text("SELECT lateness_ms, duration_ms, skipped_before "
                                    "FROM scheduled_jobs WHERE id = 'r1'")).one()
            assert tuple(row) == (12, 34, 5)
            conn.execute(text("UPDATE scheduled_jobs SET lateness_ms = 3456000000, "
                              "skipped_before = 3000000000 WHERE id = 'r1'"))
            conn.execute(text("UPDATE jobs SET skipped_pending = 3000000000"))
            assert conn.execute(text("SELECT lateness_ms FROM scheduled_jobs")).scalar() \
                == 3_456_000_000
    finally:
        engine.dispose()
