"""The worker calls of ``CronmanClient``: claim a run from a work queue, heartbeat, complete.

    claim = api.claim("spark", "host-1", namespace="ml", wait=20)
    if claim is not None:
        run_id, token = claim["run"]["id"], claim["lease_token"]
        if api.heartbeat(run_id, token, progress="epoch 3", percent=30)["cancel_requested"]:
            ...
        api.complete(run_id, token, "succeeded", result={"rows": 120})

    for claim in api.claim_many("spark", "host-1", most=8, namespace="ml"):
        ...  # up to 8 runs in one call, each with its own lease token

A heartbeat or a completion whose lease is gone (expired, re-queued, ended)
is refused with ``ConflictError`` (409, code ``stale_lease``) and changes
nothing. :class:`cronman.client.worker.Worker` does all of this for a handler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from cronman.client.transport import RetryPolicy, quote_segment
from cronman.client.types import Claim, Heartbeat, Run

#: The API's bounds (SPEC §5, the worker calls).
CLAIM_WAIT_MAX = 30.0
CLAIM_MAX_RUNS = 100
PROGRESS_MAX_CHARS = 1024
ERROR_MAX_CHARS = 4096
RESULT_MAX_BYTES = 64 * 1024
#: How much longer than its ``wait`` a claim's answer may take to arrive.
CLAIM_TIMEOUT_MARGIN = 10.0
STALE_LEASE = "stale_lease"

Outcome = Literal["succeeded", "failed"]


class QueueCalls:
    """Mixed into ``CronmanClient``; uses its ``request``."""

    request: Callable[..., Any]

    def claim(self, queue: str, worker_id: str, *, namespace: str = "default",
              wait: float = 20.0, slots: int = 1,
              retry: RetryPolicy | None = None) -> Claim | None:
        """The next run of ``namespace``'s queue ``queue``, held by ``worker_id``; None
        when none came within ``wait`` seconds (0..30, a long-poll). ``slots`` is
        how many runs this worker holds at most (the API counts idle workers by it).
        The request's timeout is ``wait`` plus a margin."""
        if not 0 <= wait <= CLAIM_WAIT_MAX:
            raise ValueError(f"wait must be 0..{CLAIM_WAIT_MAX:g} seconds")
        body = {"worker_id": worker_id, "namespace": namespace, "wait": wait, "slots": slots}
        answer = self.request("POST", "/v1/queues/" + quote_segment(queue) + "/claim", body,
                              timeout=wait + CLAIM_TIMEOUT_MARGIN, retry=retry)
        return None if answer is None else cast(Claim, answer)

    def claim_many(self, queue: str, worker_id: str, *, most: int,
                   namespace: str = "default", wait: float = 20.0, slots: int = 1,
                   retry: RetryPolicy | None = None) -> list[Claim]:
        """As ``claim``, up to ``most`` runs (1..100) in one call, each under a lease
        token of its own; answered as soon as one is there (empty: none came)."""
        if not 0 <= wait <= CLAIM_WAIT_MAX:
            raise ValueError(f"wait must be 0..{CLAIM_WAIT_MAX:g} seconds")
        if not 1 <= most <= CLAIM_MAX_RUNS:
            raise ValueError(f"most must be 1..{CLAIM_MAX_RUNS}")
        body = {"worker_id": worker_id, "namespace": namespace, "wait": wait, "slots": slots,
                "max": most}
        answer = self.request("POST", "/v1/queues/" + quote_segment(queue) + "/claim", body,
                              timeout=wait + CLAIM_TIMEOUT_MARGIN, retry=retry)
        return [] if answer is None else cast(list[Claim], answer["claims"])

    def heartbeat(self, run_id: str, lease_token: str, *, progress: str | None = None,
                  percent: float | None = None, output: dict[str, str] | None = None,
                  retry: RetryPolicy | None = None,
                  timeout: float | None = None,
                  trace: Mapping[str, str] | None = None) -> Heartbeat:
        """Renew a held run's lease, with optional progress (text ≤ 1024 characters,
        a percent 0..100) and output so far (``{"stdout", "stderr"}``, each ≤ 4096
        characters, shown on the run); the answer says whether a cancel was asked.
        ``trace`` (here and for ``complete``): the ``traceparent``/``tracestate``
        headers to send, e.g. the claim's (``trace_headers``), so the API's span
        of the call joins the run's trace."""
        body: dict[str, Any] = {"lease_token": lease_token}
        if output is not None:
            body["output"] = output
        if progress is not None:
            body["progress"] = progress
        if percent is not None:
            body["percent"] = percent
        return cast(Heartbeat, self.request("POST", _run(run_id) + "/heartbeat", body,
                                            retry=retry, timeout=timeout, headers=trace))

    def complete(self, run_id: str, lease_token: str, status: Outcome, *,
                 result: dict[str, Any] | None = None, error: str | None = None,
                 retry: RetryPolicy | None = None, timeout: float | None = None,
                 trace: Mapping[str, str] | None = None) -> Run:
        """Report a held run's end: ``succeeded`` or ``failed``, a result (a JSON
        object ≤ 64 KiB) and an error (≤ 4096 characters); the run as recorded.
        ``timeout`` (here and for ``heartbeat``) replaces the client's for the call."""
        body: dict[str, Any] = {"lease_token": lease_token, "status": status}
        if result is not None:
            body["result"] = result
        if error is not None:
            body["error"] = error
        return cast(Run, self.request("POST", _run(run_id) + "/complete", body, retry=retry,
                                      timeout=timeout, headers=trace))


def trace_headers(traceparent: str | None, tracestate: str | None) -> dict[str, str]:
    """The W3C trace context headers of a claim's ``traceparent``/``tracestate``."""
    return {name: value for name, value in (("traceparent", traceparent),
                                            ("tracestate", tracestate)) if value}


def _run(run_id: str) -> str:
    return "/v1/runs/" + quote_segment(run_id)
