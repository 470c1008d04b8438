"""PostgreSQL under Patroni: a test-started etcd and two members in synchronous
mode on loopback. Everything takes the one libpq multi-host URL
(``host=P1&host=P2&target_session_attrs=read-write``): ``cronman migrate``,
a real scheduler node (its notifier's lock connection), the test's store and a
LISTEN change feed. The leader's Patroni and postmaster are SIGKILLed; with no
restart of anything, the feed hears a job change made on the new primary, a
failure after the failover is notified to a real webhook receiver, once, and
the node's /readyz and /metrics name the member it writes to before and after.
The audit exporter's slot, declared a Patroni permanent slot, survives the
same kill: the trail goes on from the new primary with no gap and no change
twice.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg2
import pytest

from cronman.audit.exporter import Exporter
from cronman.audit.gaps import GAP_DIR
from cronman.audit.query import run_query
from cronman.audit.settings import AUDITED_TABLES, AuditSettings
from cronman.audit.sinks import LocalSink
from cronman.audit.slot import ChangeSlot
from cronman.audit.slot import connect as audit_connect
from cronman.errors import StoreUnavailable
from cronman.store import open_store
from tests.support.notify import create_job, finish_run, notifications, webhook_rule
from tests.support.patroni import PatroniCluster, require_patroni
from tests.support.processes import CRONMAN, Processes, clean_env, free_port
from tests.support.receiver import Receiver
from tests.support.store_data import base_time, job_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

ACTIVE = "is the active notifier"
ENV = {"CRONMAN_NOTIFY_POLL_INTERVAL": "0.3", "CRONMAN_SIGNING_SECRET": "ha-secret"}


def _retry(fn: Any, timeout: float, what: str) -> Any:
    """``fn()`` until the database answers: writes fail fast while no member is primary."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise AssertionError(f"no database for {timeout:g}s: {what}") from None
            time.sleep(0.2)


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        return json.load(exc)


def _member_metric(metrics_port: int, pg_port: int) -> float | None:
    """The node's ``..._since`` once its member metric names ``pg_port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    if f'cronman_database_member{{member="127.0.0.1:{pg_port}"}} 1.0' not in text:
        return None
    (line,) = [x for x in text.splitlines()
               if x.startswith("cronman_database_member_since_timestamp_seconds ")]
    return float(line.split()[1])


def _hears(feed: Any, job_id: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job_id in feed.wait(max(0.0, deadline - time.monotonic())):
            return True
    return False


def test_the_notifier_and_the_change_feed_follow_the_new_primary(redis_url, tmp_path):
    require_patroni()
    started = time.monotonic()
    with PatroniCluster(members=2) as pg, Receiver() as rx, Processes(tmp_path) as procs:
        first = pg.wait_ready()
        pg.admin_sql(first, "CREATE DATABASE cronman")
        url = pg.url("cronman")
        migrate = subprocess.run([*CRONMAN, "migrate", "--database-url", url],
                                 env=clean_env(), capture_output=True, text=True, timeout=60)
        assert migrate.returncode == 0, migrate.stderr
        assert "upgraded schema" in migrate.stdout

        store = open_store(url)
        feed = store.feed()
        try:
            job = create_job(store, "ha-job", paused=True, notify=[webhook_rule(
                rx.url("/hook"), events=("failed",), digest_interval=1)])
            metrics_port = free_port()
            node = procs.scheduler(url, "node-a", redis_url=redis_url, env=ENV, extra_args=[
                "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"])
            node.wait_for_log(ACTIVE, timeout=20)
            ready = _get_json(f"http://127.0.0.1:{metrics_port}/readyz")
            assert ready["database_member"]["member"] == f"127.0.0.1:{first.pg_port}", ready
            t0 = base_time()
            before = finish_run(store, job.id, t0, "failed")
            rx.wait_for(1, timeout=15, path="/hook")
            probe = create_job(store, "probe-before", paused=True)
            assert _hears(feed, probe.id, 5), "the feed hears a change on the first primary"

            killed = pg.kill_leader()
            killed_at, killed_wall = time.monotonic(), time.time()
            second = pg.wait_leader(other_than=killed)
            assert second is not first

            # A change made on the new primary is heard by the feed opened before
            # the failover (it reconnects by itself; announcements made while it
            # was away are only found by the poll, hence one change per try).
            tries = iter(range(1000))

            def heard_on_new_primary() -> bool:
                name = f"probe-after-{next(tries)}"
                changed = _retry(lambda: create_job(store, name, paused=True), 30,
                                 "a job change on the new primary")
                return _hears(feed, changed.id, 2)
            wait_for(heard_on_new_primary, 30, "the feed hearing the new primary")

            after = _retry(lambda: finish_run(store, job.id, t0 + timedelta(minutes=1),
                                              "failed"), 30, "a failed run after failover")

            def both_sent() -> list[Any] | None:
                notes = _retry(lambda: notifications(store), 30, "the notifications")
                sent = [n for n in notes if n.status == "sent"]
                return sent if sum(n.event_count for n in sent) >= 2 else None
            notes = wait_for(both_sent, 30, "both failures notified after the failover")
            recovered = time.monotonic() - killed_at
            # The node says it now writes to the new primary, and since when.
            moved = wait_for(lambda: _member_metric(metrics_port, second.pg_port), 10,
                             "the node's metric naming the new primary")
            assert moved >= killed_wall, "the member changed after the kill"
            stored = store.notifications.events([n.id for n in notes], 10_000)
        finally:
            feed.close()
            store.close()

        # The notifier took its lock through the multi-host URL, lost it with the
        # old primary and took it again on the new one, with no restart.
        log = node.log_text()
        assert "could not translate host name" not in log
        assert log.count(ACTIVE) >= 2, log[-3000:]
        assert node.running
        events = [e for n in notes for e in stored[n.id]]
        assert Counter(e.run_id for e in events) == Counter([before.id, after.id])
        got = rx.requests_for("/hook")
        copies = Counter(r.header("Cronman-Notification-Id") for r in got)
        assert set(copies) == {n.id for n in notes}
        assert all(n == 1 for n in copies.values()), copies  # delivered once each
    print(f"failover recovered in {recovered:.1f}s; test took {time.monotonic() - started:.1f}s")



def test_the_audit_slot_survives_failover_as_a_patroni_permanent_slot(tmp_path):
    """The exporter's slot declared a Patroni permanent slot: Patroni keeps a copy
    on the replica, so after SIGKILL of the leader the exporter (on the same
    multi-host URL, not restarted) goes on from the new primary's copy: no gap,
    every job's insert in the trail once (a batch read again is resumed from
    its manifest, never stored twice).

    The slot is declared once the exporter has made its publication (and
    slot): a permanent slot Patroni makes as soon as the database exists starts
    before the publication, and pgoutput then fails on every read with
    'publication "cronman_audit" does not exist'."""
    require_patroni()
    slot = "cronman_audit"
    with PatroniCluster(members=2) as pg:
        first = pg.wait_ready()
        pg.admin_sql(first, "CREATE DATABASE cronman")
        url = pg.url("cronman")
        migrate = subprocess.run([*CRONMAN, "migrate", "--database-url", url],
                                 env=clean_env(), capture_output=True, text=True, timeout=60)
        assert migrate.returncode == 0, migrate.stderr
        replica = next(m for m in pg.members if m is not first)
        sink = LocalSink(tmp_path / "trail")
        settings = AuditSettings(url=str(tmp_path / "trail"), slot=slot, publication=slot,
                                 flush_seconds=0.2, lock_retry_seconds=0.5)
        stop = threading.Event()
        exporter = threading.Thread(target=Exporter(url, settings, sink, exporter_id="ha").run,
                                    args=(stop,), daemon=True)
        store = open_store(url)
        names: list[str] = []

        def create(name: str) -> None:
            _retry(lambda: store.jobs.create_jobs([job_spec(name)]), 30, f"creating {name}")
            names.append(name)

        def exported() -> set[str]:
            rows = run_query("SELECT name FROM jobs WHERE cdc_op = 'insert'",
                             tmp_path / "trail").rows if list(sink.keys("jobs/")) else []
            return {r[0] for r in rows}

        try:
            # The trail starts at the slot: make it before the first change.
            conn = audit_connect(url, "test")
            ChangeSlot(conn, slot, slot, AUDITED_TABLES).ensure()
            conn.close()
            exporter.start()
            for i in range(5):
                create(f"before-{i}")
            wait_for(lambda: exported() >= set(names), 30, "the first jobs exported")
            pg.patch_config({"slots": {slot: {"type": "logical", "database": "cronman",
                                              "plugin": "pgoutput"}}})
            # Patroni copies the slot to the replica (restarting it once) and
            # moves it along there.
            def on_replica() -> bool:
                try:
                    return bool(pg.query(replica, "SELECT 1 FROM pg_replication_slots "
                                         f"WHERE slot_name = '{slot}'", "cronman"))
                except psycopg2.Error:
                    return False
            wait_for(on_replica, 40, "the permanent slot on the replica")
            # Copying it restarted the replica, which is then no longer the
            # synchronous standby for a moment -- and in synchronous mode only
            # that one is promoted. Two loop_waits for Patroni to settle.
            time.sleep(4)
            pg.wait_ready()
            pg.kill_leader()
            pg.wait_leader(other_than=first)
            for i in range(5):
                create(f"after-{i}")
            wait_for(lambda: exported() >= set(names), 40, "the later jobs exported")
        finally:
            stop.set()
            exporter.join(30)
            store.close()
    assert not list(sink.keys(f"{GAP_DIR}/")), "a permanent slot leaves no gap"
    rows = run_query("SELECT name, count(*) FROM jobs WHERE cdc_op = 'insert' GROUP BY name",
                     tmp_path / "trail").rows
    assert dict(rows) == {n: 1 for n in names}  # every insert once
