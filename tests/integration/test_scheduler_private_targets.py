"""A real `cronman scheduler` (private targets not allowed) fires an sqs target
whose ``endpoint_url`` is a loopback listener, with an sqs dead letter pointed
at another: both listeners must receive nothing, and the run must fail with
a clear error. (Found by probing: the node sent a signed SendMessage, its AWS
credentials in the Authorization header, and recorded the run succeeded.)
"""

from __future__ import annotations

import time
import urllib.request
from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.timeutil import format_rfc3339, utcnow
from tests.support.api import free_port
from tests.support.databases import migrated_pg_database
from tests.support.listener import LoopbackListener
from tests.support.moto import AWS_TEST_ENV
from tests.support.processes import Processes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_sqs_endpoints_on_loopback_get_nothing(tmp_path):
    port = free_port()
    with migrated_pg_database() as url, Processes(tmp_path) as procs, \
            LoopbackListener() as target_ear, LoopbackListener() as dlq_ear:
        client = make_app(Settings(database_url=url)).test_client()
        at = format_rfc3339((utcnow() + timedelta(seconds=2)).replace(microsecond=0))
        resp = client.post("/v1/jobs", json={
            "name": "to-loopback",
            "schedule": {"kind": "once", "at": at},
            "target": {"kind": "sqs", "region": "us-east-1", "body": "hello",
                       "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
                       "endpoint_url": target_ear.url()},
            "retry": {"max_attempts": 2, "min_backoff": 0.2, "max_backoff": 0.2},
            "dead_letter": {"kind": "sqs", "region": "us-east-1",
                            "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/d",
                            "endpoint_url": dlq_ear.url("localhost")},
        })
        assert resp.status_code == 201, resp.get_json()
        job = resp.get_json()
        node = procs.scheduler(url, "guarded-1", env={
            "CRONMAN_ALLOW_PRIVATE_TARGETS": "false", **AWS_TEST_ENV},
            extra_args=["--metrics-port", str(port), "--metrics-host", "127.0.0.1"])

        def failed_run():
            items = client.get(f"/v1/jobs/{job['id']}/runs").get_json()["items"]
            return items[0] if items and items[0]["status"] == "failed" else None

        run = wait_for(failed_run, 20, "the run failed",
                       alive=lambda: node.running() or pytest.fail(node.log_text()[-3000:]))
        assert run["attempt"] == 1  # a refusal is not retried
        assert run["error"].startswith(f"SQS endpoint 127.0.0.1:{target_ear.port}: target "
                                       "resolves to a loopback address 127.0.0.1")
        assert "CRONMAN_ALLOW_PRIVATE_TARGETS=true" in run["error"]

        def dead_letter_failed() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            return 'cronman_dead_letters_total{outcome="failed"} 1.0' in text

        wait_for(dead_letter_failed, 10, "the dead letter refused")
        time.sleep(0.5)
        assert (target_ear.connections, target_ear.data) == (0, b"")
        assert (dlq_ear.connections, dlq_ear.data) == (0, b"")
        assert "loopback" in node.log_text()
        node.stop()
