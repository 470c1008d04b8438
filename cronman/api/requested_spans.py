"""The span of an API call that asked for runs (trigger, backfill, replay):
the root of each run's trace, or of a replay's part of it
(``observability.tracing``)."""

from __future__ import annotations

from flask import request

from cronman.models import Job
from cronman.observability import tracing


def requested_span(traces: tracing.RunTraces, route: str, job: Job, run_ids: list[str],
                   started_ns: int, *, replay_attempt: int | None = None) -> None:
    """The call's span in each run's trace (``RunTraces.api_call``), from
    ``started_ns`` until now."""
    traces.api_call(f"POST {route}", run_ids, started_ns, dict(request.headers.items()),
                    {"http.request.method": "POST", "http.route": route,
                     "cronman.job.id": job.id, "cronman.namespace": job.namespace},
                    replay_attempt=replay_attempt)
