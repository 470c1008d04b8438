"""Long-polling claims under ``cronman api`` (gunicorn, one worker of two
threads): one claim waits, the next answers at once, and the API's other
calls are answered meanwhile."""

from __future__ import annotations

import threading
import time

from cronman.cli.api_server import long_polls_for
from cronman.store.migrate import upgrade
from tests.support.api import http, running_api


def test_long_polls_leave_a_thread_free(tmp_path):
    assert [long_polls_for(t, 2) for t in (1, 2, 3, 8)] == [0, 1, 2, 2]
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    with running_api(url, workers=1, threads=2) as base:
        waited: list[tuple[int, float]] = []

        def waiting_claim() -> None:
            started = time.monotonic()
            status, _, _ = http("POST", f"{base}/v1/queues/q/claim",
                                {"worker_id": "w1", "wait": 2}, timeout=10)
            waited.append((status, time.monotonic() - started))

        first = threading.Thread(target=waiting_claim)
        first.start()
        time.sleep(0.5)
        started = time.monotonic()
        status, _, _ = http("POST", f"{base}/v1/queues/q/claim", {"worker_id": "w2", "wait": 2})
        assert status == 204 and time.monotonic() - started < 1.0  # beyond the cap: at once
        started = time.monotonic()
        status, _, _ = http("GET", f"{base}/v1/queues")
        assert status == 200 and time.monotonic() - started < 1.0
        first.join(10)
        assert waited[0][0] == 204 and waited[0][1] >= 1.9
