"""PostgreSQL under Patroni: one test-started etcd and two members in
synchronous mode on loopback serve every phase, in order (one cluster start:
each phase costs seconds, a cluster start ~15 s):

1. the leader's Patroni, postmaster and backends SIGKILLed;
2. the killed member started again, back as a replica (Patroni rejoins it,
   pg_rewind if its timeline went ahead) holding every acknowledged write;
3. a ``patronictl switchover`` back to it.

With two members a switchover needs a replica, so the rejoin comes before it.
Everything takes the one libpq multi-host URL: ``cronman migrate``, the real
API (a writer creating and updating jobs at a steady rate, every 2xx answer
recorded), three real scheduler nodes firing interval jobs at a receiver (one
of them the active notifier), the audit exporter (its slot a Patroni permanent
slot) and a LISTEN change feed. Counted at the end: every fire of the window
received once and one run row each; every 2xx write on the current primary
(and on the rejoined member); every failure notification delivered once, the
failures during the failover included; the audit trail holding every job
insert once, no gap.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
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
from cronman.models import RunFilter
from cronman.store import open_store
from cronman.timeutil import utcnow
from tests.support.api import http, running_api
from tests.support.notify import create_job, notifications, webhook_rule
from tests.support.patroni import Member, PatroniCluster, require_patroni
from tests.support.processes import (
    CRONMAN,
    READY_LINE,
    CronmanProcess,
    Processes,
    clean_env,
    free_port,
)
from tests.support.receiver import Receiver
from tests.support.store_data import job_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

ACTIVE = "is the active notifier"
SLOT = "cronman_audit"
FIRING_JOBS = 10  # every second each: 10 fires/s over three nodes
ENV = {"CRONMAN_NOTIFY_POLL_INTERVAL": "0.3", "CRONMAN_SIGNING_SECRET": "ha-secret",
       "CRONMAN_HEARTBEAT_TTL": "4"}
NO_RETRY = {"max_attempts": 1, "min_backoff": 1, "max_backoff": 1}


def _retry(fn: Any, timeout: float, what: str) -> Any:
    """``fn()`` until the database answers: writes fail fast while no member is primary."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (StoreUnavailable, psycopg2.Error):
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


class ApiWriter:
    """Creates a paused job and merges a label into one job, alternately, through
    the real API, ~10 writes/s; records every 2xx answer (an answer that never
    came is in doubt, never counted)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.created: dict[str, str] = {}  # job id -> name, answered 201
        self.updated = 0  # the highest label value answered 200
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, update_id: str) -> None:
        self.update_id = update_id
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.1):
            n += 1
            try:
                if n % 2:
                    name = f"api-{n}"
                    status, body, _ = http("POST", f"{self.base}/v1/jobs",
                                           job_spec(name, paused=True), timeout=5)
                    if status == 201:
                        self.created[body["id"]] = name
                        continue
                else:
                    status, _, _ = http("PATCH", f"{self.base}/v1/jobs/{self.update_id}",
                                        {"labels": {"v": str(n)}}, timeout=5)
                    if status == 200:
                        self.updated = n
                        continue
            except OSError:
                pass  # no answer: in doubt
            self.refused += 1


@dataclass
class HA:
    pg: PatroniCluster
    url: str
    rx: Receiver
    store: Any
    feed: Any
    nodes: list[CronmanProcess]
    metrics_port: int
    writer: ApiWriter
    trail: Path
    firing: list[Any]
    failing: Any
    window_start: datetime
    killed: Member | None = None
    outage: tuple[datetime, datetime] | None = None  # the kill .. the new leader
    phases: dict[str, float] = field(default_factory=dict)
    failed_at: dict[str, datetime] = field(default_factory=dict)

    def on_primary(self, sql: str, member: Member | None = None) -> list[tuple]:
        m = member or self.pg.leader()
        assert m is not None
        return _retry(lambda: self.pg.query(m, sql, "cronman"), 30, sql)

    def check_acknowledged(self, member: Member | None = None) -> None:
        """Every job create and update the API answered 2xx is on ``member``."""
        ids = {r[0] for r in self.on_primary("SELECT id FROM jobs", member)}
        missing = set(self.writer.created) - ids
        assert not missing, f"{len(missing)} acknowledged creates lost"
        ((labels,),) = self.on_primary(
            f"SELECT labels FROM jobs WHERE id = '{self.writer.update_id}'", member)
        labels = labels if isinstance(labels, dict) else json.loads(labels)
        assert int(labels.get("v", 0)) >= self.writer.updated, "an acknowledged update lost"

    def exported(self) -> Counter[str]:
        if not list(LocalSink(self.trail).keys("jobs/")):
            return Counter()
        rows = run_query("SELECT name, count(*) FROM jobs WHERE cdc_op = 'insert' "
                         "GROUP BY name", self.trail).rows
        return Counter(dict(rows))


@pytest.fixture(scope="module")
def ha(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HA]:
    require_patroni()
    tmp = tmp_path_factory.mktemp("patroni-ha")
    started = time.monotonic()
    with PatroniCluster(members=2) as pg, Receiver() as rx, Processes(tmp) as procs:
        pg.create_database("cronman")
        first = pg.wait_ready()
        url = pg.url("cronman")
        migrate = subprocess.run([*CRONMAN, "migrate", "--database-url", url],
                                 env=clean_env(), capture_output=True, text=True, timeout=60)
        assert migrate.returncode == 0, migrate.stderr
        assert "upgraded schema" in migrate.stdout

        # The trail starts at the slot: make it (and the publication) before
        # the first change, then declare it a Patroni permanent slot (a slot
        # Patroni made before the publication existed would fail every read).
        trail = tmp / "trail"
        conn = audit_connect(url, "test")
        ChangeSlot(conn, SLOT, SLOT, AUDITED_TABLES).ensure()
        conn.close()
        settings = AuditSettings(url=str(trail), slot=SLOT, publication=SLOT,
                                 flush_seconds=0.2, lock_retry_seconds=0.5)
        stop_export = threading.Event()
        exporter = threading.Thread(
            target=Exporter(url, settings, LocalSink(trail), exporter_id="ha").run,
            args=(stop_export,), daemon=True)
        exporter.start()
        store = open_store(url)
        feed = store.feed()
        rx.reply("/fail", status=500)
        target = {"kind": "http", "url": rx.url("/fire"), "method": "POST", "headers": {},
                  "body": "", "timeout": 5}
        firing = store.jobs.create_jobs([
            job_spec(f"fire-{i}", schedule={"kind": "interval", "every": 1}, target=target,
                     retry=NO_RETRY) for i in range(FIRING_JOBS)])
        failing = create_job(
            store, "failing", schedule={"kind": "interval", "every": 2},
            target={**target, "url": rx.url("/fail")}, retry=NO_RETRY,
            notify=[webhook_rule(rx.url("/hook"), events=("failed",), digest_interval=1)])
        metrics_port = free_port()
        nodes = [procs.scheduler(url, f"node-{i}", redis_url=redis_url, env=ENV, wait=False,
                                 extra_args=(["--metrics-port", str(metrics_port),
                                              "--metrics-host", "127.0.0.1"] if i == 0 else []))
                 for i in range(3)]
        # While the nodes start: Patroni copies the slot to the replica.
        pg.patch_config({"slots": {SLOT: {"type": "logical", "database": "cronman",
                                          "plugin": "pgoutput"}}})
        _wait_slot(pg, next(m for m in pg.members if m is not first))
        for node in nodes:
            node.wait_for_log(READY_LINE, timeout=30)
        wait_for(lambda: sum(n.log_text().count(ACTIVE) for n in nodes) >= 1, 20,
                 "an active notifier")
        with running_api(url, extra_env={"CRONMAN_AUTH": "off"}) as base:
            status, body, _ = http("POST", f"{base}/v1/jobs", job_spec("updated", paused=True))
            assert status == 201, body
            writer = ApiWriter(base)
            writer.start(body["id"])
            # Past the nodes' start: the window's fires are all due to a settled cluster.
            rx.wait_for(FIRING_JOBS * 2, timeout=20, path="/fire")
            window_start = utcnow() + timedelta(seconds=1)
            pg.wait_ready()
            state = HA(pg, url, rx, store, feed, nodes, metrics_port, writer, trail, firing,
                       failing, window_start)
            state.phases["setup"] = time.monotonic() - started
            try:
                yield state
            finally:
                writer.stop()
                stop_export.set()
                exporter.join(30)
                feed.close()
                store.close()
    print(f"\nphases (s): {state.phases}; module took {time.monotonic() - started:.1f}s")


def _wait_slot(pg: PatroniCluster, member: Member) -> None:
    """Patroni copies the permanent slot to ``member`` (restarting it once);
    in synchronous mode only the recorded synchronous standby is promoted, so
    wait for Patroni to record it again."""
    def has_slot() -> bool:
        try:
            return bool(pg.query(member, "SELECT 1 FROM pg_replication_slots "
                                 f"WHERE slot_name = '{SLOT}'", "cronman"))
        except psycopg2.Error:
            return False
    wait_for(has_slot, 40, f"the permanent slot on {member.name}")
    time.sleep(4)  # two loop_waits: the restarted member is recorded sync standby again
    pg.wait_ready()


def test_acknowledged_writes_and_the_stream_survive_sigkill_of_the_leader(ha: HA) -> None:
    t = time.monotonic()
    first = ha.pg.leader()
    assert first is not None
    ready = _get_json(f"http://127.0.0.1:{ha.metrics_port}/readyz")
    assert ready["database_member"]["member"] == f"127.0.0.1:{first.pg_port}", ready
    probe = create_job(ha.store, "probe-before", paused=True)
    assert _hears(ha.feed, probe.id, 5), "the feed hears a change on the first primary"
    time.sleep(2)  # a few fires, writes and a failure on the first primary
    written = {r[0] for r in ha.on_primary("SELECT id FROM scheduled_jobs", first)}
    acked = (dict(ha.writer.created), ha.writer.updated)

    ha.killed = ha.pg.kill_leader()
    killed_at, killed_wall = time.monotonic(), time.time()
    killed_dt = utcnow()
    second = ha.pg.wait_leader(other_than=ha.killed)
    ha.outage = (killed_dt, utcnow())

    # Every 2xx answered before the kill and every run row written then is on
    # the new primary (synchronous mode: the standby had each commit).
    ids = {r[0] for r in ha.on_primary("SELECT id FROM jobs", second)}
    assert set(acked[0]) <= ids, "an acknowledged create lost in the failover"
    assert written <= {r[0] for r in ha.on_primary("SELECT id FROM scheduled_jobs", second)}, \
        "a written run row lost in the failover"
    ha.check_acknowledged(second)
    wait_for(lambda: ha.writer.updated > acked[1] + 2, 30,
             "the API answering writes on the new primary")

    # The feed opened before the failover hears a change made on the new
    # primary (announcements made while it was away are only found by the
    # poll, hence one change per try).
    tries = iter(range(1000))

    def heard_on_new_primary() -> bool:
        name = f"probe-after-{next(tries)}"
        changed = _retry(lambda: create_job(ha.store, name, paused=True), 30,
                         "a job change on the new primary")
        return _hears(ha.feed, changed.id, 2)
    wait_for(heard_on_new_primary, 30, "the feed hearing the new primary")
    moved = wait_for(lambda: _member_metric(ha.metrics_port, second.pg_port), 15,
                     "the node's metric naming the new primary")
    assert moved >= killed_wall, "the member changed after the kill"
    # The notifier lost its lock with the old primary and took it again.
    wait_for(lambda: sum(n.log_text().count(ACTIVE) for n in ha.nodes) >= 2, 30,
             "the notifier active again on the new primary")
    ha.phases["kill"] = time.monotonic() - t
    ha.phases["writes back after kill"] = time.monotonic() - killed_at


def test_the_killed_leader_rejoins_as_a_replica(ha: HA) -> None:
    assert ha.killed is not None, "the kill phase ran"
    t = time.monotonic()
    ha.pg.start_member(ha.killed)
    wait_for(lambda: ha.killed.role() == "replica", 60, "the old leader back as a replica")
    _wait_slot(ha.pg, ha.killed)
    assert ha.pg.leader() is not ha.killed
    # What the API acknowledged (before, during and after the failover) is on
    # the rejoined member too: it follows the new timeline.
    # (Once: the writer goes on, and a create answered a moment later may not
    # have reached this member yet -- it is not the synchronous standby.)
    wait_for(lambda: _caught_up(ha), 30, "the rejoined member caught up")
    ha.phases["rejoin"] = time.monotonic() - t


def _caught_up(ha: HA) -> bool:
    assert ha.killed is not None
    try:
        ha.check_acknowledged(ha.killed)
    except (AssertionError, psycopg2.Error):
        return False
    return True


def test_a_switchover_moves_the_writes_and_the_stream_to_the_rejoined_member(ha: HA) -> None:
    assert ha.killed is not None, "the kill phase ran"
    t = time.monotonic()
    leader = ha.pg.leader()
    assert leader is not None and leader is not ha.killed
    ha.pg.switchover(leader, ha.killed)
    ha.pg.wait_leader(other_than=leader)
    assert ha.pg.leader() is ha.killed
    before = ha.writer.updated
    wait_for(lambda: ha.writer.updated > before + 4, 30, "API writes on the switched primary")
    wait_for(lambda: _member_metric(ha.metrics_port, ha.killed.pg_port), 15,
             "the node's metric naming the switched primary")
    ha.check_acknowledged()
    ha.phases["switchover"] = time.monotonic() - t


def test_every_fire_once_every_failure_notified_once_every_change_exported_once(
        ha: HA) -> None:
    t = time.monotonic()
    window_end = utcnow() - timedelta(seconds=1)
    time.sleep(2)  # the window's last fires answered and written
    ha.writer.stop()
    ha.check_acknowledged()

    # Fires: each of the window's fire times received once, one run row each.
    got = Counter((r.header("Cronman-Job-Id"), _at(r.header("Cronman-Scheduled-For")))
                  for r in ha.rx.requests_for("/fire"))
    rows: Counter[tuple[str, datetime]] = Counter()
    for job in ha.firing:
        runs = _retry(lambda j=job: ha.store.runs.list_runs(j.id, RunFilter(), 10_000,
                                                            None).items, 30, "the runs")
        rows.update((r.job_id, r.scheduled_for) for r in runs)
    due = {(j.id, ha.window_start.replace(microsecond=0) + timedelta(seconds=s))
           for j in ha.firing
           for s in range(1, int((window_end - ha.window_start).total_seconds()))}
    missed = [k for k in due if got[k] == 0]
    doubled = [k for k in due if got[k] > 1]
    assert not missed and not doubled, (len(missed), len(doubled), len(due))
    assert all(rows[k] == 1 for k in due), "one run row per fire"

    # Failures: every failed run of the failing job is notified once, the ones
    # due while no member was primary included; every notification sent once.
    def all_notified() -> list[Any] | None:
        failed = {r.id: r.scheduled_for for r in ha.store.runs.list_runs(
            ha.failing.id, RunFilter(), 10_000, None).items if r.status == "failed"}
        notes = notifications(ha.store)
        events = ha.store.notifications.events([n.id for n in notes], 100_000)
        seen = Counter(e.run_id for n in notes for e in events[n.id])
        sent = all(n.status == "sent" for n in notes)
        ha.failed_at = failed
        return notes if sent and seen and set(seen) == set(failed) and max(
            seen.values()) == 1 else None
    notes = wait_for(lambda: _retry(all_notified, 30, "notifications"), 30,
                     "every failure notified")
    assert ha.outage is not None
    lo, hi = ha.outage
    assert any(lo <= at <= hi for at in ha.failed_at.values()), "a failure due in the outage"
    assert len(ha.writer.created) > 20 and ha.writer.updated > 20, "the writer kept writing"
    copies = Counter(r.header("Cronman-Notification-Id") for r in ha.rx.requests_for("/hook"))
    assert set(copies) == {n.id for n in notes}
    assert all(n == 1 for n in copies.values()), copies

    # The audit trail: every job the API created, once; no gap (the slot was
    # a permanent one on each member promoted).
    names = set(ha.writer.created.values())
    wait_for(lambda: names <= set(ha.exported()), 40, "every created job exported")
    exported = ha.exported()
    assert all(n == 1 for n in exported.values()), [k for k, n in exported.items() if n > 1]
    assert not list(LocalSink(ha.trail).keys(f"{GAP_DIR}/")), "a permanent slot leaves no gap"
    assert all(n.running for n in ha.nodes)
    assert not any("could not translate host name" in n.log_text() for n in ha.nodes)
    ha.phases["counts"] = time.monotonic() - t


def _at(header: str | None) -> datetime:
    assert header is not None
    return datetime.fromisoformat(header.replace("Z", "+00:00"))
