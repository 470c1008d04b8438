"""The operator console's routes, gathered for the app factory: runs across
jobs and run statistics (``run_search``), the caller's access (``whoami``),
membership changes (``cluster_events``), the browsable API document
(``docs``), and the log context of each request (its job or run id on the
records it logs, and the run's trace when tracing is on: ``observability.logs``)."""

from __future__ import annotations

from flask import Blueprint, request

from cronman.api import cluster_events, docs, run_search, whoami
from cronman.api.whoami import require_write_access
from cronman.observability import logs, tracing

log_context = Blueprint("log_context", __name__)


@log_context.before_app_request
def _bind_request() -> None:
    args = request.view_args or {}
    run_id = args.get("run_id")
    traces = tracing.active()
    if traces is not None and run_id:  # the run's trace (observability.tracing)
        trace_id, span_id = traces.run_log_ids(str(run_id))
        logs.bind(job_id=args.get("job_id"), run_id=run_id, trace_id=trace_id,
                  span_id=span_id)
    else:
        logs.bind(job_id=args.get("job_id"), run_id=run_id)


CONSOLE_BLUEPRINTS = (run_search.bp, whoami.bp, cluster_events.bp, docs.bp, log_context)

__all__ = ["CONSOLE_BLUEPRINTS", "require_write_access"]
