"""One real `cronman scheduler` on PostgreSQL: no single run row stalls its writes.

Found by probing: a backfill of a fire time ~40 days old overflowed the
32-bit ``lateness_ms``; the writer retried its whole batch for ever, runs of
unrelated jobs stayed ``claimed`` and the node still said it was ready. Here
the same backfill is made next to a steady job, a receiver answers with a NUL
byte (which jsonb cannot hold), and a third job's results are refused by the
database (a CHECK constraint): the backfilled run is written (its lateness
counted from its request: manual runs are not lateness), the NUL stored as U+FFFD, the refused ones with an error, the
steady job's runs all get written, and the node's ``/readyz`` stays ready --
until its writes really are stuck (a lock holds the run table), which it
then says.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import timedelta

import psycopg2
import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.scheduler.record.writer import STUCK_AFTER
from cronman.timeutil import format_rfc3339, utcnow
from tests.support.api import free_port
from tests.support.databases import PG_HOST, PG_PORT, PG_USER, migrated_pg_database
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_one_bad_row_never_blocks_the_history(tmp_path):
    metrics_port = free_port()
    with migrated_pg_database() as url, Receiver() as rx, Processes(tmp_path) as procs:
        client = make_app(Settings(database_url=url)).test_client()

        def create(name: str, **spec) -> dict:
            body = {"name": name, "target": {"kind": "http", "url": rx.url(f"/{name}")},
                    **spec}
            resp = client.post("/v1/jobs", json=body)
            assert resp.status_code == 201, resp.get_json()
            return resp.get_json()

        steady = create("steady", schedule={"kind": "interval", "every": 1})
        # A receiver answering with a NUL byte: PostgreSQL stores no NUL in jsonb.
        rx.reply("/nul", status=200, body=b"before\x00after")
        nul = create("nul", schedule={"kind": "interval", "every": 1})
        poison = create("poison", schedule={"kind": "interval", "every": 1})
        old = create("old", schedule={"kind": "interval", "every": 3600,
                                      "anchor": "2026-01-01T00:00:00Z"})
        # The backfill first: it creates the day's partition, which must hold
        # the constraint below as well.
        since = utcnow() - timedelta(days=40, hours=1)
        resp = client.post(f"/v1/jobs/{old['id']}/backfill", json={
            "since": format_rfc3339(since),
            "until": format_rfc3339(since + timedelta(hours=2))})
        assert resp.status_code == 202 and resp.get_json()["requested"] == 2
        db = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER,
                              dbname=url.rsplit("/", 1)[1])
        db.autocommit = True
        with db.cursor() as cur:
            cur.execute("ALTER TABLE scheduled_jobs ADD CONSTRAINT poison CHECK "
                        "(job_id <> %s OR result IS NULL)", (poison["id"],))
        node = procs.scheduler(url, "poison-1",
                               extra_args=["--metrics-port", str(metrics_port),
                                           "--metrics-host", "127.0.0.1"])
        node_url = f"http://127.0.0.1:{metrics_port}"

        def runs(job: dict) -> list[dict]:
            return client.get(f"/v1/jobs/{job['id']}/runs?limit=1000").get_json()["items"]

        def alive() -> None:
            assert node.running(), node.log_text()[-3000:]

        backfilled = wait_for(
            lambda: (lambda rs: rs if len(rs) == 2 and all(
                r["status"] == "succeeded" for r in rs) else None)(runs(old)),
            30, "the backfilled runs written", alive=alive)
        # A backfill is a manual run: its lateness is counted from its request, not
        # from its 40-day-old fire time (which overflowed the 32-bit column).
        assert all(r["origin"] == "backfill" and 0 <= r["lateness_ms"] < 60_000
                   for r in backfilled)
        assert len(rx.requests_for("/old")) == 2
        wait_for(lambda: len([r for r in runs(poison) if r["status"] == "succeeded"]) >= 3,
                 20, "refused runs recorded", alive=alive)
        # Every steady run older than a few seconds is written as done.

        def settled() -> list[dict]:
            cut = format_rfc3339(utcnow() - timedelta(seconds=3))
            return [r for r in runs(steady) if r["scheduled_for"] < cut]

        wait_for(lambda: len(settled()) >= 6, 20, "steady runs", alive=alive)
        assert {r["status"] for r in settled()} == {"succeeded"}
        snippets = {r["result"]["response_snippet"] for r in runs(nul)
                    if r["status"] == "succeeded"}
        assert snippets == {"before\ufffdafter"}
        done = [r for r in runs(poison) if r["status"] == "succeeded"]
        assert all(r["result"] is None and "could not be recorded" in r["error"]
                   and "poison" in r["error"] for r in done)
        status, body = get(node_url + "/readyz")
        assert status == 200, body
        assert json.loads(body)["checks"] == {"loaded": "ok", "clock": "ok", "run_writes": "ok"}
        metrics = get(node_url + "/metrics")[1]
        assert 'cronman_run_writes_refused_total{outcome="cut"}' in metrics

        # Writes that really are stuck: a lock holds the run table.
        with db.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("LOCK TABLE scheduled_jobs IN ACCESS EXCLUSIVE MODE")
            try:
                stuck = wait_for(lambda: (lambda a: a if a[0] == 503 else None)(
                    get(node_url + "/readyz")), STUCK_AFTER + 10, "readyz saying stuck",
                    alive=alive)
            finally:
                cur.execute("ROLLBACK")
        checks = json.loads(stuck[1])["checks"]
        assert "waiting on the database" in checks["run_writes"]
        wait_for(lambda: get(node_url + "/readyz")[0] == 200, 15, "ready again", alive=alive)
        db.close()
        node.stop()
