"""The audit export end to end: a private PostgreSQL with wal_level=logical, S3 as
moto's server on loopback, real ``cronman audit export`` processes SIGKILLed in the
middle of an upload and restarted, and the Parquet objects read back with DuckDB:
every change exactly once, in order per row."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from cronman.audit.exporter import Exporter
from cronman.audit.manifests import MANIFEST_DIR, Manifest
from cronman.audit.query import fetch, run_query
from cronman.audit.settings import AUDITED_TABLES, AuditSettings
from cronman.audit.sinks import LocalSink, S3Sink
from cronman.audit.slot import ChangeSlot, connect, parse_lsn, slot_status, try_lead
from cronman.cli import cli
from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.store import open_store
from cronman.store.migrate import upgrade
from tests.support import pg_server
from tests.support.audit_workload import Expected, run_workload
from tests.support.moto import AWS_TEST_ENV, aws_test_env, moto_server
from tests.support.processes import CronmanProcess, Processes, clean_env

pytestmark = [pytest.mark.postgres, pytest.mark.slow,
              pytest.mark.skipif(not pg_server.available(),
                                 reason="PostgreSQL server binaries are not installed")]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def logical_pg():
    with pg_server.private_postgres(settings={"wal_level": "logical",
                                              "max_slot_wal_keep_size": "1GB"}) as pg:
        yield pg


@pytest.fixture
def audit_db(logical_pg):
    """A migrated database of its own, a slot and publication name of its own."""
    name = f"audit_{uuid.uuid4().hex[:10]}"
    url = logical_pg.create_database(name)
    upgrade(url)
    yield url, name
    admin = logical_pg.admin()
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = %s AND NOT active", (name,))
    finally:
        admin.close()


@pytest.fixture(scope="module")
def s3():
    saved = dict(os.environ)
    aws_test_env()
    try:
        with moto_server() as server:
            yield server
    finally:
        os.environ.clear()
        os.environ.update(saved)


def new_bucket(s3) -> str:
    bucket = f"audit-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3.endpoint_url).create_bucket(Bucket=bucket)
    return bucket


def flush_lsn(url: str) -> int:
    conn = connect(url, "test")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_flush_lsn()::text")
            return parse_lsn(cur.fetchone()[0])
    finally:
        conn.close()


def confirmed(url: str, slot: str) -> int:
    conn = connect(url, "test")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                        "WHERE slot_name = %s", (slot,))
            row = cur.fetchone()
            return 0 if row is None or row[0] is None else parse_lsn(row[0])
    finally:
        conn.close()


def wait_drained(url: str, slot: str, timeout: float = 60.0) -> None:
    """Until the slot is confirmed past everything written so far."""
    target = flush_lsn(url)
    deadline = time.monotonic() + timeout
    while confirmed(url, slot) < target:
        assert time.monotonic() < deadline, "the export did not catch up"
        time.sleep(0.2)


def make_slot(url: str, slot: str) -> None:
    """The publication and slot, before any change the test checks (the trail starts there)."""
    conn = connect(url, "test")
    try:
        ChangeSlot(conn, slot, slot, AUDITED_TABLES).ensure()
    finally:
        conn.close()


def check_exactly_once(root: Path, expected: Expected) -> None:
    """Every change of the workload in the objects exactly once, in order per row."""
    runs = run_query("""
        SELECT id, list(attempt ORDER BY cdc_commit_lsn, cdc_seq) AS attempts,
               list(cdc_op ORDER BY cdc_commit_lsn, cdc_seq) AS ops
        FROM scheduled_jobs GROUP BY id""", root)
    got = {row[0]: (row[1], row[2]) for row in runs.rows}
    assert set(got) == set(expected.attempts)
    for run_id, last in expected.attempts.items():
        attempts, ops = got[run_id]
        assert attempts == list(range(last + 1)), run_id
        assert ops == ["insert"] + ["update"] * last, run_id
    jobs = run_query("""
        SELECT id, list(version ORDER BY cdc_commit_lsn, cdc_seq) FROM jobs
        WHERE cdc_op IN ('insert', 'update') GROUP BY id""", root)
    versions = dict(jobs.rows)
    assert set(versions) == set(expected.versions)
    for job_id, last in expected.versions.items():
        assert versions[job_id] == list(range(1, last + 1)), job_id
    (count, distinct), = run_query(
        "SELECT count(*), count(DISTINCT id) FROM job_history", root).rows
    assert count == distinct == expected.history_rows
    # Commits are in log order across the whole export, each change once.
    (dupes,), = run_query("""
        SELECT count(*) FROM (SELECT cdc_commit_lsn, cdc_seq FROM (
            SELECT cdc_commit_lsn, cdc_seq FROM jobs UNION ALL
            SELECT cdc_commit_lsn, cdc_seq FROM job_history UNION ALL
            SELECT cdc_commit_lsn, cdc_seq FROM scheduled_jobs)
          GROUP BY ALL HAVING count(*) > 1)""", root).rows
    assert dupes == 0


def torn_batches(sink: S3Sink) -> list[str]:
    """Manifests whose objects are not all stored (an upload cut short)."""
    torn = []
    for key in sink.keys(f"{MANIFEST_DIR}/"):
        manifest = Manifest.from_bytes(sink.get(key) or b"")
        if not all(sink.exists(obj) for obj in manifest.objects):
            torn.append(key)
    return torn


def exporter_env(url: str, slot: str, bucket: str, s3) -> dict[str, str]:
    return {**AWS_TEST_ENV, "CRONMAN_DATABASE_URL": url, "CRONMAN_AUDIT_SLOT": slot,
            "CRONMAN_AUDIT_PUBLICATION": slot, "CRONMAN_AUDIT_URL": f"s3://{bucket}/trail",
            "CRONMAN_AUDIT_S3_ENDPOINT_URL": s3.endpoint_url,
            "CRONMAN_AUDIT_FLUSH_SECONDS": "0.2", "CRONMAN_AUDIT_LOCK_RETRY_SECONDS": "0.5",
            "PYTHONPATH": str(REPO)}


def start_killer(procs: Processes, tmp_path: Path, env: dict[str, str],
                 die_in_batch: int) -> CronmanProcess:
    argv = [sys.executable, "-m", "tests.support.audit_killer", str(die_in_batch),
            "--exporter-id", f"killer-{die_in_batch}"]
    p = CronmanProcess(f"killer{die_in_batch}", argv, clean_env(env),
                       tmp_path / f"killer-{len(procs.started)}.log")
    procs.started.append(p)
    return p


def test_sigkill_mid_upload_and_restarts_lose_and_double_nothing(audit_db, s3, tmp_path):
    url, slot = audit_db
    bucket = new_bucket(s3)
    env = exporter_env(url, slot, bucket, s3)
    sink = S3Sink(bucket, "trail", endpoint_url=s3.endpoint_url)
    make_slot(url, slot)
    stop = threading.Event()
    result: list[Expected] = []
    writer = threading.Thread(target=lambda: result.append(run_workload(url, stop)))
    writer.start()
    torn_seen = 0
    rnd = random.Random(11)
    try:
        with Processes(tmp_path) as procs:
            # Killed by itself right after the first object of a batch of several.
            for die_in_batch in (2, 1, 3):
                killer = start_killer(procs, tmp_path, env, die_in_batch)
                assert killer.wait(60) == -signal.SIGKILL, killer.log_text()[-3000:]
                assert "audit_killer: SIGKILL after" in killer.log_text()
                torn = torn_batches(sink)
                assert len(torn) == 1, torn  # the one it cut (the last one's is whole again)
                torn_seen += len(torn)
                # The next exporter finishes the torn batch first.
            # Killed from outside at random moments.
            for _ in range(3):
                exporter = procs.start("exporter", ["audit", "export"], env)
                time.sleep(rnd.uniform(0.5, 2.0))
                exporter.kill()
                exporter.wait(10)
            stop.set()
            writer.join(60)
            final = procs.start("exporter", ["audit", "export"], env)
            wait_drained(url, slot)
            assert final.stop() == 0, final.log_text()[-3000:]
            log = "".join(p.log_text() for p in procs.started)
    finally:
        stop.set()
        writer.join(60)
    assert torn_seen == 3, "each self-kill left a batch with objects missing"
    assert "resumed from its manifest" in log
    assert torn_batches(sink) == []
    (expected,) = result
    assert len(expected.attempts) > 100
    cache = tmp_path / "cache"
    fetch(sink, cache)
    check_exactly_once(cache, expected)


def test_a_standby_takes_over_when_the_active_exporter_dies(audit_db, s3, tmp_path):
    url, slot = audit_db
    bucket = new_bucket(s3)
    env = exporter_env(url, slot, bucket, s3)
    make_slot(url, slot)
    stop = threading.Event()
    result: list[Expected] = []
    writer = threading.Thread(target=lambda: result.append(run_workload(url, stop)))
    writer.start()
    try:
        with Processes(tmp_path) as procs:
            a = procs.start("exporter-a", ["audit", "export", "--exporter-id", "a"], env)
            a.wait_for_log("is the active exporter", timeout=30)
            b = procs.start("exporter-b", ["audit", "export", "--exporter-id", "b"], env)
            b.wait_for_log("is standing by", timeout=30)
            time.sleep(1.5)
            a.kill()
            b.wait_for_log("is the active exporter", timeout=30)
            time.sleep(1.0)
            stop.set()
            writer.join(60)
            wait_drained(url, slot)
            assert b.stop() == 0
    finally:
        stop.set()
        writer.join(60)
    cache = tmp_path / "cache"
    fetch(S3Sink(bucket, "trail", endpoint_url=s3.endpoint_url), cache)
    check_exactly_once(cache, result[0])


def test_partitions_tables_and_queries_through_the_cli(audit_db, tmp_path, s3, monkeypatch):
    """Runs of every partition as scheduled_jobs rows; jobs rows redacted; audit query."""
    url, slot = audit_db
    settings = AuditSettings(url=str(tmp_path / "trail"), slot=slot, publication=slot)
    sink = LocalSink(tmp_path / "trail")
    store = open_store(url)
    try:
        client = make_app(Settings(database_url=url), store=store).test_client()
        conn = connect(url, "test")
        slot_obj = ChangeSlot(conn, slot, slot, AUDITED_TABLES)
        assert try_lead(conn)
        slot_obj.ensure()
        # Anchored at :30: the backfill's ten minutes hold ten fire times (the
        # default anchor, created_at, lands on :00 one time in 60: eleven).
        spec = {"name": "secretive", "schedule": {"kind": "interval", "every": 60,
                                                  "anchor": "2020-01-01T00:00:30Z"},
                "target": {"kind": "http", "url": "https://example.com/x",
                           "headers": {"Authorization": "Bearer topsecretvalue123"}}}
        job = client.post("/v1/jobs", json=spec).get_json()
        client.post(f"/v1/jobs/{job['id']}/pause")
        client.post(f"/v1/jobs/{job['id']}/resume")
        client.post(f"/v1/jobs/{job['id']}/backfill",
                    json={"since": "2020-01-01T00:00:00Z", "until": "2020-01-01T00:10:00Z"})
        client.post(f"/v1/jobs/{job['id']}/trigger")
        exporter = Exporter(url, settings, sink, exporter_id="t")
        while exporter.step(slot_obj) is not None:
            pass
        conn.close()
    finally:
        store.close()
    root = tmp_path / "trail"
    text = b"".join(p.read_bytes() for p in root.rglob("*.parquet"))
    assert b"topsecretvalue123" not in text
    runs = run_query("SELECT origin, count(*) FROM runs GROUP BY origin ORDER BY origin", root)
    assert runs.rows == [("backfill", 10), ("trigger", 1)]
    monkeypatch.setenv("CRONMAN_AUDIT_URL", str(root))
    out = CliRunner().invoke(cli, ["audit", "query", "-o", "json",
                                   "SELECT action, actor_name FROM job_history "
                                   "ORDER BY cdc_commit_lsn"])
    assert out.exit_code == 0, out.output
    import json

    assert [r["action"] for r in json.loads(out.output)] == [
        "create", "pause", "resume", "backfill", "trigger"]
    bad = CliRunner().invoke(cli, ["audit", "query", "SELECT * FROM nowhere"])
    assert bad.exit_code == 1 and "nowhere" in bad.output


def test_query_fetches_from_the_bucket_by_day(audit_db, s3, tmp_path, monkeypatch):
    url, slot = audit_db
    bucket = new_bucket(s3)
    sink = S3Sink(bucket, "p", endpoint_url=s3.endpoint_url)
    settings = AuditSettings(url=f"s3://{bucket}/p", slot=slot, publication=slot)
    run_workload(url, threading.Event(), max_rounds=5, prefix="before")
    conn = connect(url, "test")
    try:
        slot_obj = ChangeSlot(conn, slot, slot, AUDITED_TABLES)
        assert try_lead(conn)
        slot_obj.ensure()
        # The trail starts with the slot: the changes above are not in it.
        expected = run_workload(url, threading.Event(), max_rounds=5, seed=9, prefix="after")
        exporter = Exporter(url, settings, sink, exporter_id="t")
        while exporter.step(slot_obj) is not None:
            pass
    finally:
        conn.close()
    for name, value in {"CRONMAN_AUDIT_URL": f"s3://{bucket}/p",
                        "CRONMAN_AUDIT_S3_ENDPOINT_URL": s3.endpoint_url}.items():
        monkeypatch.setenv(name, value)
    cache = tmp_path / "cache"
    out = CliRunner().invoke(cli, ["audit", "query", "--cache-dir", str(cache), "-o", "csv",
                                   "--since", "2000-01-01", "--until", "2000-01-02",
                                   "SELECT count(*) AS n FROM runs"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == ["n", "0"]  # no object of those days was fetched
    out = CliRunner().invoke(cli, ["audit", "query", "--cache-dir", str(cache), "-o", "csv",
                                   "SELECT count(DISTINCT id) AS n FROM runs"])
    assert out.output.splitlines() == ["n", str(len(expected.attempts))]
    # Days as every time option takes them: relative to now (today's objects, fetched anew).
    out = CliRunner().invoke(cli, ["audit", "query", "--cache-dir", str(tmp_path / "cache2"),
                                   "-o", "csv", "--since", "-1d", "--until", "now",
                                   "SELECT count(DISTINCT id) AS n FROM runs"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == ["n", str(len(expected.attempts))]


def test_slot_lag_in_the_api_and_the_warning(audit_db, monkeypatch):
    url, slot = audit_db
    monkeypatch.setenv("CRONMAN_AUDIT_SLOT", slot)
    store = open_store(url)
    try:
        client = make_app(Settings(database_url=url), store=store).test_client()
        answer = client.get("/v1/audit").get_json()
        assert answer["enabled"] and not answer["exists"] and answer["warning"]
        conn = connect(url, "test")
        try:
            ChangeSlot(conn, slot, slot, AUDITED_TABLES).ensure()
            run_workload(url, threading.Event(), max_rounds=20)
            monkeypatch.setenv("CRONMAN_AUDIT_SLOT_WARN_BYTES", "1000")
            answer = client.get("/v1/audit").get_json()
            assert answer["exists"] and answer["plugin"] == "pgoutput"
            assert answer["lag_bytes"] > 1000 and answer["retained_wal_bytes"] > 1000
            assert answer["safe_wal_size"] > 0  # max_slot_wal_keep_size is set
            assert answer["max_slot_wal_keep_size"] == "1GB"
            assert "holds" in answer["warning"]
            with conn.cursor() as cur:
                assert slot_status(cur, slot, 10**8)["warning"] is None
                assert "left before" in slot_status(cur, slot, 10**12)["warning"]
        finally:
            conn.close()
    finally:
        store.close()


def test_token_changes_reach_the_trail_without_secrets(audit_db, tmp_path):
    """Tokens made and revoked through the API and the database side: token_history
    rows in the export, with their actors; no secret and no hash in any object."""
    url, slot = audit_db
    settings = AuditSettings(url=str(tmp_path / "trail"), slot=slot, publication=slot)
    store = open_store(url)
    try:
        conn = connect(url, "test")
        slot_obj = ChangeSlot(conn, slot, slot, AUDITED_TABLES)
        assert try_lead(conn)
        slot_obj.ensure()
        root, root_record = store.tokens.create_token("root", None)
        client = make_app(Settings(database_url=url), store=store).test_client()
        auth = {"Authorization": f"Bearer {root}"}
        made = client.post("/v1/tokens", json={"namespaces": ["billing"]}, headers=auth)
        assert made.status_code == 201
        assert client.delete(f"/v1/tokens/{made.get_json()['id']}",
                             headers=auth).status_code == 204
        exporter = Exporter(url, settings, LocalSink(tmp_path / "trail"), exporter_id="t")
        while exporter.step(slot_obj) is not None:
            pass
        conn.close()
    finally:
        store.close()
    root_dir = tmp_path / "trail"
    rows = run_query("SELECT action, token_name, actor_name, namespaces FROM token_history "
                     "ORDER BY cdc_commit_lsn, cdc_seq", root_dir).rows
    assert rows == [("create", "root", "database", None),
                    ("create", "billing", "root", '["billing"]'),
                    ("revoke", "billing", "root", '["billing"]')]
    text = b"".join(p.read_bytes() for p in root_dir.rglob("*.parquet"))
    for secret in (root, made.get_json()["token"]):
        assert secret.encode() not in text
        assert hashlib.sha256(secret.encode()).hexdigest().encode() not in text


def test_a_slot_made_anew_is_a_reported_gap(audit_db, tmp_path, caplog):
    """The slot gone (a failover to a member without it, here dropped): the
    exporter makes a new one and says what the trail misses -- a ``_gaps/``
    record, an error and ``cronman_audit_gaps`` -- before exporting on."""
    from cronman.audit import metrics
    from cronman.audit.gaps import GAP_DIR, Gap
    from tests.support.store_data import job_spec

    url, slot = audit_db
    sink = LocalSink(tmp_path / "trail")
    settings = AuditSettings(url=str(tmp_path / "trail"), slot=slot, publication=slot,
                             flush_seconds=0.2, lock_retry_seconds=0.2)
    store = open_store(url)

    def export_until_drained(exporter_id: str) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=Exporter(url, settings, sink,
                                                  exporter_id=exporter_id).run, args=(stop,))
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while confirmed(url, slot) < flush_lsn(url):
                assert time.monotonic() < deadline, "the export did not catch up"
                time.sleep(0.1)
        finally:
            stop.set()
            thread.join(30)

    try:
        make_slot(url, slot)
        store.jobs.create_jobs([job_spec("before-0"), job_spec("before-1")])
        export_until_drained("first")
        assert list(sink.keys(f"{MANIFEST_DIR}/")) and not list(sink.keys(f"{GAP_DIR}/"))
        last = Manifest.from_bytes(sink.get(max(sink.keys(f"{MANIFEST_DIR}/"))) or b"")

        conn = connect(url, "test")
        with conn.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        conn.close()
        store.jobs.create_jobs([job_spec("lost-0")])  # while no slot exists
        lost_upto = flush_lsn(url)
        gaps_before = metrics.GAPS._value.get()

        export_until_drained("second")
        store.jobs.create_jobs([job_spec("after-0")])
        export_until_drained("second")
    finally:
        store.close()
    (key,) = list(sink.keys(f"{GAP_DIR}/"))
    gap = Gap.from_bytes(sink.get(key) or b"")
    assert gap.from_lsn == last.end_lsn and gap.to_lsn >= lost_upto > gap.from_lsn
    assert gap.exporter == "second" and gap.slot == slot
    assert metrics.GAPS._value.get() == gaps_before + 1
    assert any(r.levelname == "ERROR" and "GAP in the trail" in r.getMessage()
               for r in caplog.records)
    names = {row[0] for row in run_query(
        "SELECT name FROM jobs WHERE cdc_op = 'insert'", tmp_path / "trail").rows}
    assert names == {"before-0", "before-1", "after-0"}  # lost-0 is in the gap, said so
