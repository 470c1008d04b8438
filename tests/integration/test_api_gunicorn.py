"""`cronman api` under real gunicorn on a free port: a create/get round trip over HTTP."""

from __future__ import annotations

import http.client as http_client
import json
import re

import pytest

from cronman.cli.api_server import app_spec, gunicorn_argv
from tests.support.api import http, job_spec, running_api

pytestmark = pytest.mark.slow


def test_gunicorn_argv():
    argv = gunicorn_argv(bind="127.0.0.1:1", workers=3, threads=2, timeout=30,
                         access_log=False)
    assert argv[-1] == "wsgi:app" == app_spec()[0]
    joined = " ".join(argv)
    for part in ("--bind 127.0.0.1:1", "--workers 3", "--worker-class gthread",
                 "--threads 2", "--no-control-socket"):
        assert part in joined


def test_round_trip_over_http(database_url):
    with running_api(database_url, workers=2) as base:
        status, job, headers = http("POST", base + "/v1/jobs", job_spec("live"))
        assert status == 201, job
        assert headers["Location"] == f"/v1/jobs/{job['id']}"
        status, got, _ = http("GET", base + f"/v1/jobs/{job['id']}")
        assert status == 200
        assert got["name"] == "live" and got["last_run"] is None
        assert got["target"]["headers"]["Authorization"] == "Bear…"
        status, err, _ = http("POST", base + "/v1/jobs", job_spec("live"))
        assert status == 409 and err["error"]["field"] == "name"
        status, ready, _ = http("GET", base + "/readyz")
        assert status == 200 and ready["checks"]["database"] == "ok"
        # Metrics are summed over the workers: make enough calls to reach both.
        for _ in range(20):
            http("GET", base + "/healthz")
        status, text, _ = http("GET", base + "/metrics")
        m = re.search(r'cronman_api_requests_total\{method="GET",route="/healthz",'
                      r'status="200"\} ([0-9.]+)', text)
        assert m and float(m.group(1)) >= 21
        assert re.search(r"^cronman_jobs 1\.0$", text, re.M)


def test_refuses_an_unmigrated_database(tmp_path):
    with pytest.raises(RuntimeError, match="cronman migrate"):
        with running_api(f"sqlite:///{tmp_path / 'empty.db'}", startup_timeout=20):
            pass


def _post_chunked(base: str, path: str, body: bytes) -> tuple[int, dict]:
    """POST ``body`` with Transfer-Encoding: chunked (no Content-Length)."""
    host, port = base.removeprefix("http://").split(":")
    conn = http_client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        try:
            for i in range(0, len(body), 65536):
                chunk = body[i:i + 65536]
                conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server may answer and hang up before taking it all
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_chunked_bodies_are_held_to_the_size_caps(database_url):
    """Found by probing: a chunked body over 1 MiB was cut at 1 MiB and parsed
    (JSON followed by spaces made a job)."""
    with running_api(database_url, workers=1) as base:
        job = json.dumps(job_spec("padded")).encode()
        status, body = _post_chunked(base, "/v1/jobs", job + b" " * 2_000_000)
        assert status == 413, body
        assert body["error"]["code"] == "too_large" and "1048576" in body["error"]["message"]
        bulk = json.dumps({"jobs": [job_spec("bulk-padded")]}).encode()
        status, body = _post_chunked(base, "/v1/jobs/bulk", bulk + b" " * (17 * 1024 * 1024))
        assert status == 413 and "16777216" in body["error"]["message"]
        assert http("GET", base + "/v1/jobs")[1]["items"] == []
        # Within the caps, chunked bodies are taken.
        status, body = _post_chunked(base, "/v1/jobs", job + b" " * 500_000)
        assert status == 201, body
        status, body = _post_chunked(base, "/v1/jobs/bulk", bulk + b" " * 3_000_000)
        assert status == 201, body
