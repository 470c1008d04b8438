"""A 20 s PostgreSQL outage under a firing cluster (SPEC §6).

The cluster runs on a private PostgreSQL server (the machine's shared one is
never stopped), which is stopped -- ``pg_ctl stop -m immediate``, a crash --
for 20 s and started again on the same port and data. Fires must go on
during the outage, deduplicated by the Redis lock alone; their run rows must
be written once the database is back (one row per fire, none lost, no
double fire found when they go through the fence).

A private server rather than a proxy in front of the shared one: the nodes
then see what a real outage looks like (connections reset, then refused,
then a server in crash recovery), not a proxy's idea of it.
"""

from __future__ import annotations

import contextlib

import pytest
from sqlalchemy import create_engine, text

from tests.cluster.counting import describe_missing, pct
from tests.cluster.harness import Cluster, node_env
from tests.cluster.scenario import run_scenario
from tests.support import pg_server

pytestmark = [pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.skipif(not pg_server.available(),
                                 reason="no PostgreSQL server binaries to start a private one")]

OUTAGE_S = 20.0


@pytest.fixture
def private_pg():
    with pg_server.private_postgres() as pg:
        yield pg


@contextlib.contextmanager
def _connection(url: str):
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _rows(url: str, start_ms: int, end_ms: int) -> dict[str, int]:
    with _connection(url) as conn:
        found = conn.execute(text(
            "SELECT status, count(*) FROM scheduled_jobs "
            "WHERE scheduled_for >= to_timestamp(:lo / 1000.0) "
            "AND scheduled_for < to_timestamp(:hi / 1000.0) GROUP BY status"),
            {"lo": start_ms, "hi": end_ms}).all()
        dup = conn.execute(text(
            "SELECT count(*) FROM (SELECT job_id, scheduled_for FROM scheduled_jobs "
            "GROUP BY job_id, scheduled_for HAVING count(*) > 1) d")).scalar_one()
    out = {status: n for status, n in found}
    out["_duplicates"] = dup
    return out


def _fires_without_rows(url: str, fires, start_ms: int, end_ms: int) -> list[tuple[int, int]]:
    """Fires owed in the window (job index, ms) that have no run row."""
    with _connection(url) as conn:
        rows = conn.execute(text(
            "SELECT job_id, (extract(epoch from scheduled_for) * 1000)::bigint "
            "FROM scheduled_jobs WHERE scheduled_for >= to_timestamp(:lo / 1000.0) "
            "AND scheduled_for < to_timestamp(:hi / 1000.0)"),
            {"lo": start_ms, "hi": end_ms}).all()
    index = {j: i for i, j in enumerate(fires.job_ids)}
    have = {(index.get(j), int(ms)) for j, ms in rows}
    return sorted(set(fires.workload.expected(start_ms, end_ms)) - have, key=lambda k: k[1])


def test_database_outage_of_20s(procs, cluster_redis, fires, private_pg):
    from cronman.store.migrate import upgrade

    url = private_pg.create_database("cronman")
    upgrade(url)
    cluster = Cluster(procs, url, cluster_redis.url, node_env())
    try:
        out = run_scenario(cluster, fires, nodes=3, window_s=6 + OUTAGE_S + 6, actions=[
            (6.0, "database stopped", lambda: private_pg.stop("immediate")),
            (6.0 + OUTAGE_S, "database back", private_pg.start),
        ], settle_s=6.0)
    finally:
        for node in cluster.running():
            node.proc.kill()
    print(out.describe("database"))
    t = out.tally
    assert not t.double_fires, f"fired twice: {t.double_fires[:10]}"
    assert not t.unexpected, t.unexpected[:5]
    assert not t.missing, (f"{len(t.missing)} fires never arrived:\n"
                           f"{describe_missing(t, fires.job_ids)}")
    assert not t.redeliveries, f"delivered more than once: {t.redeliveries[:10]}"
    # Fires went on during the outage, on time, under the Redis lock alone.
    down, up = out.at("database stopped"), out.at("database back")
    during = t.lateness(down + 1000, up)
    assert len(during) >= 0.9 * fires.workload.rate * (up - down - 1000) / 1000
    assert pct(during, 99) < 1000, f"fires during the outage: p99 {pct(during, 99)} ms"
    # Every fire of the window has exactly one run row, finished.
    rows = _rows(url, out.start_ms, out.end_ms)
    print(f"[database] run rows of the window by status: {rows}")
    assert rows.pop("_duplicates") == 0
    if sum(rows.values()) != t.expected:
        gone = _fires_without_rows(url, fires, out.start_ms, out.end_ms)
        raise AssertionError(f"{len(gone)} fires have no run row, e.g. "
                             f"{[(i, ms - out.start_ms) for i, ms in gone[:10]]} "
                             f"(ms into the window; outage from {down - out.start_ms} to "
                             f"{up - out.start_ms}); rows: {rows}")
    assert rows.get("succeeded", 0) == t.expected, rows
    assert out.metrics["cronman_double_fires_total"] == 0
    assert cluster.log_count("double fire:") == 0
