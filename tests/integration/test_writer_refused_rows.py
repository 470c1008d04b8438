"""The result writer against rows the database refuses, on SQLite and PostgreSQL.

Found by probing: one run whose lateness overflowed a 32-bit column made the
writer retry its whole batch for ever -- runs of unrelated jobs stayed
``claimed`` and the node still called itself ready. Here the database itself
refuses chosen rows (a CHECK constraint on PostgreSQL, a trigger on SQLite):
the writer must commit the rest, record the refused run with an error (or
drop it when even that is refused), count it, and stay healthy; and it must
say so when its writes are really stuck.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import text

from cronman.models import RunUpdate
from cronman.scheduler.record import writer as writer_module
from cronman.scheduler.record.writer import ResultWriter
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.store import open_store
from cronman.timeutil import utcnow
from tests.support.api import free_port
from tests.support.store_data import base_time, job_spec, make_run


def refuse(store, name: str, condition: str) -> None:
    """Make the database refuse run rows for which ``condition`` (SQL) holds;
    ``HAS_RESULT`` in it stands for "the row carries a result"."""
    with store.engine.begin() as conn:
        pg = conn.dialect.name == "postgresql"
        # SQLite keeps a missing result as JSON null (the text 'null').
        condition = condition.replace(
            "HAS_RESULT", "(result IS NOT NULL AND result <> 'null'" + ("::jsonb)" if pg else ")"))
        if pg:
            conn.execute(text(f"ALTER TABLE scheduled_jobs ADD CONSTRAINT {name} "
                              f"CHECK (NOT ({condition}))"))
        else:
            when = condition
            for column in ("job_id", "result", "status", "skipped_before"):
                when = when.replace(column, f"NEW.{column}")
            for event in ("INSERT", "UPDATE"):
                conn.execute(text(
                    f"CREATE TRIGGER {name}_{event.lower()} BEFORE {event} ON scheduled_jobs "
                    f"WHEN {when} BEGIN SELECT RAISE(ABORT, '{name}: refused'); END"))


@pytest.fixture
def setup(store):
    jobs = store.jobs.create_jobs([job_spec(f"job-{i}") for i in range(4)])
    t0 = base_time()
    runs = {j.name: [make_run(j.id, t0 + timedelta(seconds=k)) for k in range(5)]
            for j in jobs}
    store.runs.claim_runs([r for rs in runs.values() for r in rs])
    yield store, {j.name: j for j in jobs}, runs
    with store.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE scheduled_jobs DROP CONSTRAINT IF EXISTS poison"))
            conn.execute(text("ALTER TABLE scheduled_jobs DROP CONSTRAINT IF EXISTS deadly"))
            conn.execute(text("ALTER TABLE scheduled_jobs DROP CONSTRAINT IF EXISTS claims"))


def done(run, **fields) -> RunUpdate:
    now = utcnow()
    return RunUpdate(id=run.id, scheduled_for=run.scheduled_for, status="succeeded",
                     attempt=1, started_at=now, finished_at=now, lateness_ms=3,
                     duration_ms=5, result={"http_status": 204}, **fields)


class ClaimsSeen:
    """The writer's ``ClaimsWritten``: what it told, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[set[str], set[str]]] = []

    def claims_written(self, inserted: set[str], foreign: set[str]) -> None:
        self.seen.append((inserted, foreign))


def flush(store, fill, told: ClaimsSeen | None = None
          ) -> tuple[ResultWriter, NodeMetrics, bool]:
    metrics = NodeMetrics(CollectorRegistry())
    with ThreadPoolExecutor(1) as pool:
        writer = ResultWriter(store.runs, pool, metrics, node_id="n1", clock=ReferenceClock(),
                              claims_written=told)
        fill(writer)
        ok = asyncio.run(writer.flush())
    return writer, metrics, ok


def refused(metrics: NodeMetrics, outcome: str) -> float:
    return metrics.writes_refused.labels(outcome)._value.get()


def test_a_refused_update_is_cut_and_the_rest_written(setup):
    store, jobs, runs = setup
    refuse(store, "poison", f"job_id = '{jobs['job-1'].id}' AND HAS_RESULT")

    def fill(writer):
        for rs in runs.values():
            for r in rs:
                writer.update(done(r))

    writer, metrics, ok = flush(store, fill)
    assert ok and writer.pending == 0 and writer.health() is None
    for name, rs in runs.items():
        for r in rs:
            got = store.runs.get_run(r.id)
            assert got.status == "succeeded", (name, got)
            if name == "job-1":
                assert got.result is None and got.lateness_ms is None
                assert "could not be recorded" in got.error and "poison" in got.error
            else:
                assert got.result == {"http_status": 204} and got.lateness_ms == 3
                assert got.error is None
    assert refused(metrics, "cut") == 5 and refused(metrics, "dropped") == 0


def test_a_row_refused_even_cut_is_dropped_alone(setup):
    store, jobs, runs = setup
    refuse(store, "deadly", f"job_id = '{jobs['job-2'].id}' AND status = 'succeeded'")

    def fill(writer):
        for rs in runs.values():
            for r in rs:
                writer.update(done(r))

    writer, metrics, ok = flush(store, fill)
    assert ok and writer.pending == 0
    for name, rs in runs.items():
        statuses = {store.runs.get_run(r.id).status for r in rs}
        assert statuses == ({"claimed"} if name == "job-2" else {"succeeded"}), name
    assert refused(metrics, "dropped") == 5 and refused(metrics, "cut") == 0


def test_refused_claims_written_late_are_cut(setup):
    store, jobs, _ = setup
    refuse(store, "claims", f"job_id = '{jobs['job-3'].id}' AND skipped_before > 0")
    t1 = base_time() + timedelta(minutes=10)
    late = {j.name: make_run(j.id, t1, skipped_before=4) for j in jobs.values()}
    cursors = [(j.id, t1, 4) for j in jobs.values()]
    told = ClaimsSeen()

    def fill(writer):
        writer.insert_later(list(late.values()), cursors)

    writer, metrics, ok = flush(store, fill, told)
    assert ok and writer.pending == 0
    assert told.seen == [({r.id for r in late.values()}, set())]  # none taken for a double fire
    for name, run in late.items():
        got = store.runs.get_run(run.id)
        assert got is not None, name
        if name == "job-3":
            assert got.skipped_before == 0 and "record was cut" in got.error
        else:
            assert got.skipped_before == 4 and got.error is None
    assert all(store.jobs.get_job(j.id).last_fire_at == t1 for j in jobs.values())
    assert refused(metrics, "cut") == 1


def test_stuck_writes_are_reported(monkeypatch, tmp_path):
    """Unreachable: every flush fails; health() says so after STUCK_AFTER."""
    monkeypatch.setattr(writer_module, "STUCK_AFTER", 0.3)
    down = open_store(f"postgresql+psycopg2://postgres@127.0.0.1:{free_port()}/none")
    metrics = NodeMetrics(CollectorRegistry())
    t = base_time()
    run = make_run("j", t)

    async def main():
        writer = ResultWriter(down.runs, pool, metrics, node_id="n1", clock=ReferenceClock())
        writer.update(done(run))
        assert not await writer.flush()
        assert writer.health() is None  # not for long enough yet
        await asyncio.sleep(0.4)
        assert not await writer.flush()
        return writer

    try:
        with ThreadPoolExecutor(1) as pool:
            writer = asyncio.run(main())
    finally:
        down.close()
    problem = writer.health()
    assert problem is not None and problem.startswith("run writes failing for")
    assert "database unavailable" in problem and "1 waiting" in problem
    assert metrics.writes_failing._value.get() > 0.3
    assert writer.pending == 1  # kept for when the database is back
