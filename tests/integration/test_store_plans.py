"""Keyed run updates stay key lookups on PostgreSQL whatever its statistics say.

New run rows' times are always past the statistics' histogram, and their
status changes by the thousand each second, so the planner's estimates for
the hot partition are guesses. These statements must still probe each key
through the primary key: with a time range, the planner once expected one
row and compared every row of the day's partition with every key.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text, update

from cronman.models import RunUpdate
from cronman.store import open_store, run_bulk
from cronman.store.run_bulk import by_keys, key_lookups
from cronman.store.tables import IN_FLIGHT_STATUSES
from cronman.store.tables import scheduled_jobs as sj


def _fill(conn, start: datetime, count: int, status: str) -> list[tuple[str, datetime]]:
    rows = [(f"run-{status}-{i}", f"job-{i % 500}", start + timedelta(milliseconds=i))
            for i in range(count)]
    conn.execute(text(
        "INSERT INTO scheduled_jobs (id, job_id, scheduled_for, status, attempt, node_id, "
        "origin) SELECT id, job_id, t, :status, 1, 'n1', 'schedule' "
        "FROM unnest(CAST(:ids AS text[]), CAST(:jobs AS text[]), "
        "CAST(:times AS timestamptz[])) AS r(id, job_id, t)"),
        {"status": status, "ids": [r[0] for r in rows], "jobs": [r[1] for r in rows],
         "times": [r[2] for r in rows]})
    return [(r[0], r[2]) for r in rows]


def test_keyed_updates_probe_the_primary_key(pg_database_url, monkeypatch) -> None:
    store = open_store(pg_database_url)
    db = store.runs._db  # type: ignore[attr-defined]
    noon = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    partition = f"scheduled_jobs_{noon:%Y%m%d}"
    try:
        with db.engine.begin() as conn:
            _fill(conn, noon - timedelta(hours=1), 2000, "succeeded")
            conn.execute(text(f"ANALYZE {partition}"))
            keys = _fill(conn, noon, 20_000, "claimed")[-1000:]
        plans: list[str] = []

        def explain(conn, sql: str, params: dict | None = None) -> list[tuple[str]]:
            if params is None:
                sql = sql.replace("%", "%%")  # rendered: no placeholders left
            plans.append("\n".join(r[0] for r in conn.exec_driver_sql(
                "EXPLAIN " + sql, params or {}).all()))
            return []

        def renew_plan(tx) -> None:
            with key_lookups(tx):
                stmt = (update(sj).where(sj.c.node_id == "n1",
                                         *by_keys(keys, IN_FLIGHT_STATUSES))
                        .values(lease_expires_at=noon))
                compiled = stmt.compile(dialect=tx.conn.dialect,
                                        compile_kwargs={"render_postcompile": True})
                explain(tx.conn, str(compiled), dict(compiled.params))

        db.write(renew_plan)
        # The result writer's statement, prepared as it sends it: its plan
        # for these arguments, and the generic plan the server may keep.
        real_execute_prepared = run_bulk.execute_prepared

        def explain_prepared(conn, name, statement, types, args):
            result = real_execute_prepared(conn, name, statement, types, args)
            casts = ", ".join(f"%s::{t}" for t in types)
            for mode in ("force_custom_plan", "force_generic_plan"):
                conn.exec_driver_sql(f"SET LOCAL plan_cache_mode = {mode}")
                plans.append("\n".join(r[0] for r in conn.exec_driver_sql(
                    f"EXPLAIN EXECUTE {name} ({casts})", tuple(args)).all()))
            conn.exec_driver_sql("SET LOCAL plan_cache_mode TO DEFAULT")
            return result

        monkeypatch.setattr(run_bulk, "execute_prepared", explain_prepared)
        store.runs.write_run_updates(
            [RunUpdate(id=k[0], scheduled_for=k[1], status="succeeded", attempt=1)
             for k in keys], node_id="n1")
        assert len(plans) == 3
        renew, *writes = plans
        for plan in plans:
            assert "Seq Scan" not in plan and "Bitmap" not in plan, plan
            assert "lease_expires_at_idx" not in plan, plan  # the in-flight index
        # The result writer's batch: each key probed through the primary key.
        for write in writes:
            assert write.index("Function Scan on v") < write.index(
                f"Index Scan using {partition}_pkey"), write
            assert "Index Cond: (((id)::text = " in write, write
        # The lease renewal: the ids probed through the primary key.
        assert f"Index Scan using {partition}_pkey" in renew, renew
        assert "Index Cond: ((id)::text = ANY " in renew, renew
        assert "Values Scan" not in renew, renew
    finally:
        with db.engine.begin() as conn:  # the database is the session's: leave it as found
            conn.execute(text("DELETE FROM scheduled_jobs WHERE id LIKE 'run-%'"))
        store.close()


def test_key_lookups_set_the_planner_for_their_statements_only(pg_database_url) -> None:
    store = open_store(pg_database_url)
    db = store.runs._db  # type: ignore[attr-defined]
    names = ("enable_seqscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin")

    def settings(conn) -> list[str]:
        return [conn.exec_driver_sql(f"SELECT current_setting('{n}')").scalar() for n in names]

    def fn(tx) -> tuple[list[str], list[str], list[str]]:
        before = settings(tx.conn)
        with key_lookups(tx):
            inside = settings(tx.conn)
        return before, inside, settings(tx.conn)

    try:
        before, inside, after = db.write(fn)
    finally:
        store.close()
    assert before == ["on"] * 4
    assert inside == ["off"] * 4
    assert after == before
