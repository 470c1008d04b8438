"""What an SRE reads, on real processes: the scheduler's metrics port
(/healthz, /readyz, /metrics, 404 elsewhere), JSON logs carrying node, job,
run and namespace, bounded per-namespace series, and quiet starts of
``cronman scheduler`` and ``cronman api``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from tests.support.api import free_port, running_api
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:  # not listening yet
        return 0, ""


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def pg_url(pg_database_url):
    from tests.conftest import _truncate_pg

    _truncate_pg(pg_database_url)
    return pg_database_url


def test_scheduler_port_probes_metrics_and_json_logs(tmp_path, pg_url, redis_url):
    port = free_port()
    client = make_app(Settings(database_url=pg_url)).test_client()
    with Receiver() as rx, Processes(tmp_path) as procs:
        rx.reply("/fail", status=500)
        for ns, path in (("billing", "/ok"), ("search", "/fail")):
            resp = client.post("/v1/jobs", json={
                "name": f"{ns}-job", "namespace": ns,
                "schedule": {"kind": "interval", "every": 1},
                "target": {"kind": "http", "url": rx.url(path)},
                "retry": {"max_attempts": 1}})
            assert resp.status_code == 201, resp.get_json()
        failing_id = resp.get_json()["id"]
        node = procs.start("obs", ["scheduler", "--node-id", "obs-1", "--database-url", pg_url,
                                   "--redis-url", redis_url, "--metrics-port", str(port),
                                   "--metrics-host", "127.0.0.1"],
                           {"CRONMAN_LOG_FORMAT": "json", "CRONMAN_ALLOW_PRIVATE_TARGETS": "true",
                            "CRONMAN_METRICS_MAX_NAMESPACES": "1"})
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: get(base + "/healthz")[0] == 200, 20, "the node answering /healthz")
        node.wait_for_log("ready: owns")
        status, body = get(base + "/readyz")
        assert status == 200 and json.loads(body)["status"] == "ready"
        assert json.loads(get(base + "/healthz")[1]) == {"status": "ok", "node_id": "obs-1"}
        for path in ("/", "/metric", "/metrics/x", "/healthz/"):
            assert get(base + path)[0] == 404, path
        wait_for(lambda: {r.path for r in rx.requests} >= {"/ok", "/fail"}, 20, "fires")

        def metric_lines() -> list[str]:
            return [ln for ln in get(base + "/metrics")[1].splitlines()
                    if ln.startswith("cronman_")]

        wait_for(lambda: any(ln.startswith("cronman_namespace_failures_total")
                             for ln in metric_lines()), 20, "a failure counted")
        # The membership view is read at scrape time: on a busy machine it can
        # lag the node's own first pulse (what it read is in the failure).
        seen: list[str] = []

        def one_live_node() -> list[str] | None:
            got = metric_lines()
            seen[:] = [ln for ln in got if ln.startswith("cronman_live_nodes")]
            return got if "cronman_live_nodes 1.0" in got else None

        try:
            lines = wait_for(one_live_node, 15, "cronman_live_nodes 1.0")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the node showed {seen or 'no cronman_live_nodes'}"
                                 ) from None
        assert any(ln.startswith("cronman_build_info{") and 'component="scheduler"' in ln
                   for ln in lines)
        fired = [ln for ln in lines if ln.startswith("cronman_namespace_fires_total")]
        # One namespace of its own (the first seen), the other counted as "other".
        labels = {ln.split('namespace="')[1].split('"')[0] for ln in fired}
        assert len(labels) == 2 and "other" in labels, fired
        assert any(ln.startswith("cronman_namespace_fire_lateness_seconds_bucket")
                   for ln in lines)
        node.stop()
    records = json_lines(node.log_text())
    assert all(r["node_id"] == "obs-1" for r in records)
    failed = [r for r in records if "failed" in r["message"] and r.get("run_id")]
    assert failed, records
    assert failed[0]["job_id"] == failing_id and failed[0]["namespace"] == "search"
    assert failed[0]["level"] == "warning" and failed[0]["ts"].endswith("Z")
    # No library chatter: every INFO line is cronman's own.
    assert {r["logger"].split(".")[0] for r in records if r["level"] == "info"} == {"cronman"}


def test_api_starts_quietly_with_json_logs(pg_url, tmp_path):
    log_path = tmp_path / "api.log"
    with running_api(pg_url, workers=2, extra_env={"CRONMAN_LOG_FORMAT": "json"},
                     log_path=log_path) as base:
        status, body = get(base + "/metrics")
        assert status == 200 and 'cronman_build_info{' in body and 'component="api"' in body
        assert get(base + "/v1/jobs/0123/runs?since=x")[0] == 400
    records = json_lines(log_path.read_text())
    starts = [r for r in records if r["level"] == "info"]
    assert [r["logger"] for r in starts] == ["cronman.api"], records
    assert "2 workers x 4 threads" in starts[0]["message"]
