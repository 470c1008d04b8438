"""The ``/v1/runs`` resources: one run, and replaying a finished one. A
worker run's JSON carries its queue's item while it has one (``worker``);
its worker's calls are ``cronman.api.work``'s. One run's JSON also holds its
earlier attempts (``earlier_attempts``), a running container's output so far
as its agent published it (``live_output``), the cancel an operator asked
of a container run in flight (``cancel_request``) and, when tracing is on,
its trace id. A replay's API call is a span in the run's trace, the parent
of the node's new ``cronman.run`` span."""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Response

from cronman.api.changes import change
from cronman.api.cluster import agent_directory
from cronman.api.common import MAX_BODY_BYTES, ApiView, json_response, principal
from cronman.api.context import api_context
from cronman.api.idempotency import idempotent
from cronman.api.names import ID_RE
from cronman.api.requested_spans import requested_span
from cronman.api.serialize import attempt_json, run_json
from cronman.errors import Conflict, CoordinatorUnavailable, NotFound
from cronman.models import Job, Run
from cronman.observability import logs, tracing
from cronman.store.base import Store
from cronman.store.work_records import WorkItem
from cronman.timeutil import utcnow
from cronman.vocabulary import FINAL_STATUSES, NODE_CANCELLED_KINDS, JobAction

bp = Blueprint("runs", __name__, url_prefix="/v1/runs")


def load_run(run_id: str) -> tuple[Run, Job | None]:
    """The run and its job (a deleted job's tombstone included); 404 / 403."""
    store = api_context().store
    run = store.runs.get_run(run_id) if ID_RE.match(run_id) else None
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    jobs = store.jobs.get_jobs([run.job_id])
    job = jobs[0] if jobs else None
    if job is None:
        # A run whose job row is gone entirely: only an all-namespace caller sees it.
        if not principal().is_admin:
            raise NotFound(f"no run {run_id!r}")
    else:
        principal().require(job.namespace)
    return run, job


def work_items(store: Store, runs: list[Run]) -> dict[str, WorkItem]:
    """The queue items of those runs that are with a work queue (in flight, no node)."""
    ids = [r.id for r in runs if r.status in ("running", "retrying") and r.node_id is None]
    return store.work.items(ids, now=utcnow()) if ids else {}


def live_output(run: Run, job: Job | None) -> dict[str, Any] | None:
    """A running container's output so far, as its agent last published it
    (``worker_agent.agent``: every 2 s); None when there is none to read."""
    if run.status != "running" or job is None or job.target.get("kind") != "container":
        return None
    directory = agent_directory()
    if directory is None:
        return None
    try:
        found = directory.output(run.id)
    except CoordinatorUnavailable:
        return None
    if found is None or found.get("attempt") != run.attempt:
        return None
    return {k: found.get(k) for k in ("agent_id", "stdout", "stderr", "at")}


class RunItem(ApiView):
    def get(self, run_id: str) -> Response:
        run, job = load_run(run_id)
        store = api_context().store
        out = run_json(run, work_items(store, [run]).get(run.id))
        live = live_output(run, job)
        if live is not None:
            out["live_output"] = live
        if (job is not None and job.target.get("kind") in NODE_CANCELLED_KINDS
                and run.status not in FINAL_STATUSES):
            asked = store.runs.cancel_request(run.id)
            if asked is not None:
                out["cancel_request"] = asked
        out["earlier_attempts"] = ([attempt_json(a) for a in store.runs.earlier_attempts(run.id)]
                                   if run.attempt > 1 else [])
        traces = tracing.active()
        if traces is not None:  # a run's trace id is derived from its id (observability.tracing)
            out["trace_id"] = traces.run_log_ids(run.id)[0]
        return json_response(out)


class RunReplay(ApiView):
    route = "/v1/runs/{run_id}/replay"

    @idempotent(MAX_BODY_BYTES)
    def post(self, run_id: str) -> Response:
        traces = tracing.active()
        started_ns = time.time_ns() if traces is not None else 0
        _, job = load_run(run_id)
        if job is None or job.deleted_at is not None:
            raise Conflict("the run's job was deleted; it cannot be replayed")
        run = api_context().store.runs.request_replay(run_id, change(JobAction.REPLAY))
        if traces is not None:  # the root of the replay's spans in the run's trace
            trace_id, span_id = traces.run_log_ids(run.id, requested=True,
                                                   replay_attempt=run.attempt)
            logs.bind(job_id=job.id, run_id=run.id, trace_id=trace_id, span_id=span_id)
            requested_span(traces, self.route, job, [run.id], started_ns,
                           replay_attempt=run.attempt)
        return json_response(run_json(run), 202)


bp.add_url_rule("/<id:run_id>", view_func=RunItem.as_view("item"))
bp.add_url_rule("/<id:run_id>/replay", view_func=RunReplay.as_view("replay"))
