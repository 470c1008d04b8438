"""`cronman api` under real gunicorn on a free port: a create/get round trip over HTTP."""

from __future__ import annotations

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
