"""Fire http-target deliveries at a URL in this process and report its memory, as JSON.

    python -m tests.support.answer_memory URL TIMEOUT

Two deliveries on uvloop (the node's loop): the first (``?warm``) to open the
connection and settle the imports, then the measured one. Prints
``{"baseline_kib", "peak_kib", "after_kib", "error", "seconds"}``: peak RSS
(``ru_maxrss``) before and after the measured delivery, the RSS once it is
over, and the measured attempt's error.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from datetime import UTC, datetime

from cronman import eventloop
from cronman.callbacks import Delivery, validate_target
from cronman.callbacks.http import HttpTarget
from cronman.config import Settings

WHEN = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() // 1024


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(url: str, timeout: float) -> None:
    target = validate_target({"kind": "http", "url": url, "timeout": timeout})
    warm = validate_target({"kind": "http", "url": url + "?warm", "timeout": timeout})

    async def go() -> dict[str, object]:
        http = HttpTarget(Settings(allow_private_targets=True))
        try:
            await http.deliver(_delivery(warm, 1))
            baseline = _peak_kib()
            started = time.monotonic()
            outcome = await http.deliver(_delivery(target, 2))
            seconds = time.monotonic() - started
            return {"baseline_kib": baseline, "peak_kib": _peak_kib(), "after_kib": _rss_kib(),
                    "ok": outcome.ok, "error": outcome.error, "seconds": round(seconds, 3)}
        finally:
            await http.close()

    print(json.dumps(eventloop.run(go(), "uvloop")))


def _delivery(target: dict[str, object], attempt: int) -> Delivery:
    return Delivery(job_id="job-1", run_id="run-1", scheduled_for=WHEN, attempt=attempt,
                    target=target)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
