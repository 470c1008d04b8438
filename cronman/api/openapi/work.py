"""The OpenAPI description of the work queues and the worker calls (merged by
``openapi``): claim, heartbeat, complete, cancel, the queues list
(``cronman.api.work``); the request bodies come from ``api.work_fields``."""

from __future__ import annotations

from typing import Any

from cronman.api.openapi.parts import (
    CURSOR_TEXT,
    JSON,
    LIMIT,
    NAMESPACE_QUERY,
    STRING,
    TIME,
    nullable,
    obj,
    ok,
    op,
    path_param,
    query,
    ref,
)
from cronman.api.work import QUEUE_CURSOR_PATTERN
from cronman.api.work_fields import CANCEL, CLAIM, COMPLETE, HEARTBEAT, SEMANTIC_RULES
from cronman.callbacks.target_fields import WORK_QUEUE_PATTERN
from cronman.vocabulary import WORK_STATES

QUEUE_PARAM = {"name": "queue", "in": "path", "required": True,
               "schema": {"type": "string", "pattern": WORK_QUEUE_PATTERN}}
STALE = {"description": "stale_lease: the token is not the run's current lease (it expired, "
                        "the run was re-queued or completed); nothing changed",
         "content": {"application/json": {"schema": ref("Error")}}}

__all__ = ["SEMANTIC_RULES", "paths", "run_cancel_request", "run_worker", "schemas"]


def run_worker() -> dict[str, Any]:
    """The ``worker`` of a run's JSON, while the run is with its queue."""
    return obj({
        "queue": STRING,
        "state": {"enum": list(WORK_STATES)},
        "worker_id": nullable(STRING),
        "claimed_at": nullable(TIME),
        "last_heartbeat": nullable(TIME),
        "lease_expires_at": nullable(TIME),
        "progress": nullable(STRING),
        "percent": {"type": ["number", "null"]},
        "heartbeats": {"type": "integer", "minimum": 0,
                       "description": "heartbeats of the attempt so far"},
        "output": {"anyOf": [obj({"stdout": nullable(STRING), "stderr": nullable(STRING)}),
                             {"type": "null"}],
                   "description": "the tails of stdout and stderr as the latest heartbeat "
                                  "that carried them reported them"},
        "cancel_requested": {"type": "boolean"},
        "waiting_for": {**nullable(STRING),
                        "description": "while the state is waiting_capacity: the room it "
                                       "waits for, e.g. \"capacity on queue spark: 0 of 2 "
                                       "idle\""},
    }, ("queue", "state", "worker_id", "claimed_at", "last_heartbeat", "lease_expires_at",
        "progress", "percent", "heartbeats", "output", "cancel_requested", "waiting_for"),
        description="where the run stands with its work queue (worker targets only, "
                    "while the run is with the queue; the worker id stays in "
                    "result.worker_id after)")


def run_cancel_request() -> dict[str, Any]:
    """The ``cancel_request`` of a container run's JSON, once a cancel was asked."""
    return obj({
        "by": {**STRING, "description": "who asked: token <name>, or an operator when the "
                                        "API requires no token"},
        "reason": nullable(STRING),
        "at": TIME,
    }, ("by", "reason", "at"), description=(
        "POST /v1/runs/{run_id}/cancel's answer and GET /v1/runs/{run_id}, while a container "
        "run is in flight: the cancel recorded on it, which the node holding the run carries "
        "out at its next lease renewal"))


def schemas() -> dict[str, Any]:
    worker = obj({"id": STRING, "last_seen": TIME, "held": {"type": "integer", "minimum": 0},
                  "slots": {"type": "integer", "minimum": 1}},
                 ("id", "last_seen", "held", "slots"))
    queue = obj({
        "namespace": STRING, "queue": STRING,
        "depth": {"type": "integer", "minimum": 0, "description": "runs waiting for a worker"},
        "held": {"type": "integer", "minimum": 0, "description": "runs held by workers"},
        "oldest_wait_s": {"type": ["number", "null"],
                          "description": "how long the oldest claimable run has waited"},
        "workers": {"type": "array", "items": worker,
                    "description": "workers seen in the last 10 minutes"},
    }, ("namespace", "queue", "depth", "held", "oldest_wait_s", "workers"))
    return {
        "ClaimRequest": CLAIM.definition(),
        "HeartbeatRequest": HEARTBEAT.definition(),
        "CompleteRequest": COMPLETE.definition(),
        "CancelRequest": CANCEL.definition(),
        "Claimed": obj({
            "run": ref("Run"), "payload": {"description": "the worker target's payload"},
            "attempt": {"type": "integer", "minimum": 1},
            "lease_token": {**STRING, "description": "shown once: heartbeats and the report "
                                                     "carry it"},
            "heartbeat_timeout": {"type": "integer", "minimum": 1},
            "timeout": {"type": "integer", "minimum": 1},
            "deadline_at": TIME,
            "traceparent": {**nullable(STRING), "description": (
                "the W3C trace context the run was handed over with (null when tracing "
                "is off): the worker's spans join the run's trace under it, and its "
                "heartbeats and report may send it as their traceparent header")},
            "tracestate": {**nullable(STRING), "description": "the W3C tracestate with it"},
        }, ("run", "payload", "attempt", "lease_token", "heartbeat_timeout", "timeout",
            "deadline_at", "traceparent", "tracestate")),
        "ClaimedMany": obj({"claims": {"type": "array", "items": ref("Claimed"), "minItems": 1,
                                       "description": "in claim order, each under a lease "
                                                      "token of its own"}}, ("claims",)),
        "ClaimAnswer": {"oneOf": [ref("Claimed"), ref("ClaimedMany")],
                        "description": "a claim without `max`: the run's claim; with it: "
                                       "`claims`, up to `max` of them"},
        "HeartbeatAck": obj({"cancel_requested": {"type": "boolean"},
                             "lease_expires_at": TIME},
                            ("cancel_requested", "lease_expires_at")),
        "Queue": queue,
        "QueueList": obj({"items": {"type": "array", "items": ref("Queue")},
                          "next_cursor": nullable(STRING)}, ("items", "next_cursor")),
    }


def paths() -> dict[str, Any]:
    run = [path_param("run_id")]
    cancel = op("cancelRun", "Cancel a run in flight: a worker's (or an http run completed by "
                "callback) through its queue, a container's through its node",
                ok("202", "Run", "the run, its cancel asked (or, queued, ended)"),
                "400 403 404 409 413 415", run)
    cancel["description"] = (
        "A worker run still queued ends at once (failed, `cancelled: <reason>`); a held one's "
        "worker is told on its next heartbeat (`cancel_requested`) and reports its end. A "
        "container run's cancel is recorded on the run (`cancel_request`, in the statement "
        "that finds it in flight); the node holding it reads it at its next lease renewal "
        "(every third of CRONMAN_LEASE_SECONDS) and has the agent stop the container "
        "(SIGTERM, then SIGKILL after the agent's grace), or ends the run at once while it "
        "waits (for room, a retry, a limit); the run ends failed, not retried, its error "
        "`cancelled by <who>: <reason> (exit code N)`, its output kept. 409: the run already "
        "ended, or it is of a kind nothing can stop once sent (a plain http request, an sqs "
        "message), the message saying why.")
    cancel["requestBody"] = {"required": False,
                             "content": {JSON: {"schema": ref("CancelRequest")}}}
    return {
        "/v1/queues": {
            "get": op("listQueues", "Work queues: depth, runs held, oldest wait, workers",
                      ok("200", "QueueList", "a page of queues, (namespace, queue) order"),
                      "400 403", [
                          NAMESPACE_QUERY, LIMIT,
                          query("cursor", {"type": "string",
                                           "pattern": f"^(?:{QUEUE_CURSOR_PATTERN})?$"},
                                CURSOR_TEXT)]),
        },
        "/v1/queues/{queue}/claim": {
            "post": op("claimRun", "Claim the queue's next run, or up to `max` of them (a "
                       "long-poll of up to `wait` seconds, answered once one is there)",
                       {**ok("200", "ClaimAnswer", "runs, under leases"),
                                    "204": {"description": "nothing came within the wait"}},
                       "400 403 413", [QUEUE_PARAM], body="ClaimRequest"),
        },
        "/v1/runs/{run_id}/heartbeat": {
            "post": op("heartbeatRun", "Renew a claimed run's lease (says whether a cancel "
                       "was asked)", ok("200", "HeartbeatAck", "the lease, renewed"),
                       "400 403 404 413", run, body="HeartbeatRequest", extra={"409": STALE}),
        },
        "/v1/runs/{run_id}/complete": {
            "post": op("completeRun", "A worker's report: the run's outcome",
                       ok("200", "Run", "the run: final, or retrying as its next attempt"),
                       "400 403 404 413", run, body="CompleteRequest", extra={"409": STALE}),
        },
        "/v1/runs/{run_id}/cancel": {"post": cancel},
    }
