"""PostgreSQL under Patroni: a test-started etcd and two members in synchronous
mode on loopback. Everything takes the one libpq multi-host URL
(``host=P1&host=P2&target_session_attrs=read-write``): ``cronman migrate``,
a real scheduler node (its notifier's lock connection), the test's store and a
LISTEN change feed. The leader's Patroni and postmaster are SIGKILLed; with no
restart of anything, the feed hears a job change made on the new primary, a
failure after the failover is notified to a real webhook receiver, once, and
the node's /readyz and /metrics name the member it writes to before and after.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from cronman.errors import StoreUnavailable
from cronman.store import open_store
from tests.support.notify import create_job, finish_run, notifications, webhook_rule
from tests.support.patroni import PatroniCluster, require_patroni
from tests.support.processes import CRONMAN, Processes, clean_env, free_port
from tests.support.receiver import Receiver
from tests.support.store_data import base_time
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.postgres, pytest.mark.redis]

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

