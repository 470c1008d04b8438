"""The worker calls and the queues (SPEC §5): ``POST /v1/queues/{queue}/claim``,
``POST /v1/runs/{id}/heartbeat``, ``/complete``, ``/cancel``, ``GET /v1/queues``.

A claim takes the queue's next run at once or waits for one (the
long-poll): up to its ``wait``, bounded by ``CRONMAN_CLAIM_WAIT_MAX``, and
only while this process holds fewer than ``CRONMAN_API_LONG_POLLS`` of them
(beyond that a claim answers at once: long-polls never take every thread
of the API). The store wakes one waiting claim per run enqueued (``waiting``).
Heartbeats and reports go by the claim's lease token: a stale one is a 409
``stale_lease`` and changes nothing. The claim answers with the trace
context the run was handed over with; with tracing on, each claim,
heartbeat and report is a span in the run's trace (``observability.tracing``). Every call needs a token covering the
queue's (or the run's) namespace, as every ``/v1`` call.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from flask import Blueprint, Flask, Response, current_app, request

from cronman.api import validation as v
from cronman.api.common import ApiView, json_response, principal, read_json
from cronman.api.context import api_context
from cronman.api.jobs import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX
from cronman.api.metrics import METRICS_KEY, ApiMetrics
from cronman.api.names import ID_RE
from cronman.api.run_cancel import cancelled_by, not_cancellable
from cronman.api.runs import load_run, work_items
from cronman.api.serialize import queue_json, run_json
from cronman.api.work_fields import CANCEL, CLAIM, COMPLETE, HEARTBEAT, QUEUE
from cronman.errors import Conflict, NotFound, StaleLease, ValidationError
from cronman.models import Run
from cronman.observability import tracing
from cronman.store.base import Store
from cronman.store.work_records import Claim, WorkItem
from cronman.timeutil import format_rfc3339, utcnow
from cronman.vocabulary import FINAL_STATUSES, NODE_CANCELLED_KINDS

bp = Blueprint("work", __name__, url_prefix="/v1")

LONG_POLLS_KEY = "cronman.long_polls"
# The spans of the worker calls in their run's trace (observability.tracing).
CLAIM_SPAN = "POST /v1/queues/{queue}/claim"
HEARTBEAT_SPAN = "POST /v1/runs/{run_id}/heartbeat"
COMPLETE_SPAN = "POST /v1/runs/{run_id}/complete"
QUEUE_CURSOR_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}/[A-Za-z0-9._-]{1,64}"
_long_polls_lock = threading.Lock()


def _check(spec: Any, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = spec.check(value)
    return out


def _store() -> Store:
    return api_context().store


def _long_polls(app: Flask) -> threading.BoundedSemaphore | None:
    """This process's room for long-polls (``CRONMAN_API_LONG_POLLS``; None: none)."""
    if LONG_POLLS_KEY not in app.extensions:
        with _long_polls_lock:
            if LONG_POLLS_KEY not in app.extensions:
                room = api_context(app).settings.api_long_polls
                app.extensions[LONG_POLLS_KEY] = (
                    threading.BoundedSemaphore(room) if room > 0 else None)
    polls: threading.BoundedSemaphore | None = app.extensions[LONG_POLLS_KEY]
    return polls


def claim_json(claim: Claim) -> dict[str, Any]:
    item = claim.item
    return {"run": run_json(claim.run, item), "payload": item.payload, "attempt": item.attempt,
            "lease_token": claim.lease_token, "heartbeat_timeout": item.heartbeat_timeout,
            "timeout": item.timeout, "deadline_at": format_rfc3339(item.deadline_at),
            "traceparent": item.traceparent, "tracestate": item.tracestate}


def _traced(name: str, run_id: str, started_ns: int, attributes: dict[str, str | int],
            handed: WorkItem | None = None) -> None:
    """The call's span in the run's trace, when tracing is on (``RunTraces.run_call``)."""
    traces = tracing.active()
    if traces is None:
        return
    carrier = {} if handed is None else {
        k: v for k, v in (("traceparent", handed.traceparent),
                          ("tracestate", handed.tracestate)) if v}
    route = name.partition(" ")[2]
    traces.run_call(name, run_id, started_ns, dict(request.headers.items()),
                    {"http.request.method": "POST", "http.route": route, **attributes},
                    handed=carrier)


def _queue_name(queue: str) -> str:
    try:
        name: str = QUEUE.check(queue)
    except ValidationError as exc:
        raise ValidationError(exc.message, field="queue") from None
    return name


class QueueClaim(ApiView):
    def post(self, queue: str) -> Response:
        started_ns = time.time_ns()
        queue = _queue_name(queue)
        body = _check(CLAIM, read_json())
        namespace = body["namespace"]
        principal().require(namespace, field="namespace")
        settings = api_context().settings
        wait = max(0.0, min(float(body["wait"]), settings.claim_wait_max))
        work = _store().work
        worker, slots, many = body["worker_id"], body["slots"], body["max"]

        def take(first: bool = False) -> list[Claim]:
            return work.claim_many(namespace, queue, worker, slots=slots, now=utcnow(),
                                   seen=first, limit=many or 1)

        with work.waiting(namespace, queue) as waiter:
            claims = take(first=True)
            if not claims and wait > 0:
                polls = _long_polls(current_app)
                if polls is not None and polls.acquire(blocking=False):
                    try:
                        deadline = time.monotonic() + wait
                        while not claims and (left := deadline - time.monotonic()) > 0:
                            waiter.wait(left)
                            claims = take()
                    finally:
                        polls.release()
        if not claims:
            return current_app.response_class(status=204)
        metrics: ApiMetrics = current_app.extensions[METRICS_KEY]
        for claim in claims:
            waited = max(0.0, ((claim.item.claimed_at or utcnow())
                               - claim.item.available_at).total_seconds())
            metrics.claimed(namespace, queue, waited)
            _traced(CLAIM_SPAN, claim.item.run_id, started_ns,
                    {"cronman.queue": queue, "cronman.namespace": namespace,
                     "cronman.worker.id": worker, "cronman.attempt": claim.item.attempt,
                     "cronman.queue.wait_ms": int(waited * 1000)}, handed=claim.item)
        if many is None:
            return json_response(claim_json(claims[0]))
        return json_response({"claims": [claim_json(c) for c in claims]})


def _authorise(store: Store, run_id: str) -> None:
    """The caller may act on the run: its queue's namespace (a key lookup), or,
    for a run with no queue, its job's (``load_run``: 404 for no such run)."""
    namespace = store.work.namespace_of(run_id) if ID_RE.match(run_id) else None
    if namespace is None:
        load_run(run_id)
    else:
        principal().require(namespace)


class RunHeartbeat(ApiView):
    def post(self, run_id: str) -> Response:
        started_ns = time.time_ns()
        store = _store()
        # One statement, limited to the token's namespaces; a refusal says why
        # as every worker call does (403 for another namespace's run first).
        try:
            body = _check(HEARTBEAT, read_json())
        except ValidationError:
            _authorise(store, run_id)
            raise
        try:
            ack = store.work.heartbeat(run_id, body["lease_token"], progress=body["progress"],
                                       percent=body["percent"], output=body["output"],
                                       now=utcnow(), namespaces=principal().namespaces)
        except (StaleLease, NotFound):
            _authorise(store, run_id)
            raise
        _traced(HEARTBEAT_SPAN, run_id, started_ns,
                {"cronman.cancel_requested": ack.cancel_requested})
        return json_response({"cancel_requested": ack.cancel_requested,
                              "lease_expires_at": format_rfc3339(ack.lease_expires_at)})


class RunComplete(ApiView):
    def post(self, run_id: str) -> Response:
        started_ns = time.time_ns()
        store = _store()
        _authorise(store, run_id)
        body = _check(COMPLETE, read_json())
        run = store.work.complete(run_id, body["lease_token"], status=body["status"],
                                  result=body["result"], error=body["error"], now=utcnow())
        _traced(COMPLETE_SPAN, run_id, started_ns,
                {"cronman.report.status": body["status"], "cronman.run.status": run.status,
                 "cronman.attempt": run.attempt})
        return json_response(run_json(run, _item_of(store, run)))


class RunCancel(ApiView):
    """An operator's cancel: a worker run (or an http run completed by
    callback) through its work queue; a container run on its row, for the
    node holding it to stop (``cronman.scheduler.dispatch.cancels``)."""

    def post(self, run_id: str) -> Response:
        run, job = load_run(run_id)
        raw = read_json(required=False)
        body = _check(CANCEL, {} if raw is None else raw)
        if run.status in FINAL_STATUSES:
            raise Conflict(f"the run already ended ({run.status})")
        store = _store()
        kind = str((job.target if job is not None else {}).get("kind", "unknown"))
        if kind in NODE_CANCELLED_KINDS:
            return _cancel_on_the_row(store, run, body["reason"])
        item = store.work.cancel(run_id, body["reason"], now=utcnow())
        if item is None:
            raise Conflict(not_cancellable(kind, job))
        after = store.runs.get_run(run_id) or run
        return json_response(run_json(after, _item_of(store, after)), 202)


def _cancel_on_the_row(store: Store, run: Run, reason: str | None) -> Response:
    request = {"by": cancelled_by(principal()), "reason": reason,
               "at": format_rfc3339(utcnow())}
    after = store.runs.request_cancel(run.id, request)
    if after is None:  # it ended since it was read
        ended = store.runs.get_run(run.id) or run
        raise Conflict(f"the run already ended ({ended.status})")
    out = run_json(after)
    out["cancel_request"] = request
    return json_response(out, 202)


def _item_of(store: Store, run: Run) -> WorkItem | None:
    return work_items(store, [run]).get(run.id)


class Queues(ApiView):
    query_params = {"get": ("namespace", "limit", "cursor")}

    def get(self) -> Response:
        args = request.args
        namespace = args.get("namespace")
        namespaces: tuple[str, ...] | None
        if namespace is not None:
            v.check_namespace(namespace)
            principal().require(namespace, field="namespace")
            namespaces = (namespace,)
        else:
            namespaces = principal().restriction()
        limit = v.parse_int_param(args.get("limit"), "limit", default=LIST_LIMIT_DEFAULT,
                                  lo=1, hi=LIST_LIMIT_MAX)
        after = _decode_cursor(args.get("cursor") or None)
        found = _store().work.queues(namespaces, now=utcnow(), limit=limit, after=after)
        nxt = f"{found[-1].namespace}/{found[-1].queue}" if len(found) == limit else None
        return json_response({"items": [queue_json(q) for q in found], "next_cursor": nxt})


def _decode_cursor(cursor: str | None) -> tuple[str, str] | None:
    if cursor is None:
        return None
    if not re.fullmatch(QUEUE_CURSOR_PATTERN, cursor):
        raise ValidationError("invalid cursor: pass back the next_cursor of the previous page",
                              field="cursor")
    namespace, _, queue = cursor.partition("/")
    return namespace, queue


bp.add_url_rule("/queues", view_func=Queues.as_view("queues"))
bp.add_url_rule("/queues/<queue>/claim", view_func=QueueClaim.as_view("claim"))
bp.add_url_rule("/runs/<id:run_id>/heartbeat", view_func=RunHeartbeat.as_view("heartbeat"))
bp.add_url_rule("/runs/<id:run_id>/complete", view_func=RunComplete.as_view("complete"))
bp.add_url_rule("/runs/<id:run_id>/cancel", view_func=RunCancel.as_view("cancel"))
