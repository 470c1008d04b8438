"""An ``http`` target with ``"completion": "callback"``: the receiver accepts
the work with a 202 and reports later, through the worker calls.

``CallbackCompletion`` wraps the node's http target. A target without
``completion`` goes straight to it. One with it, before its request goes:
the run takes a lease in the work queues (``WorkQueueStore.hold``: an item
held from the start by the pseudo-worker ``http:<host>`` under a fresh
token, only its hash stored; the run row ``running`` with no node), and the
request carries ``Cronman-Completion-Url`` and ``Cronman-Heartbeat-Url``
(``{CRONMAN_PUBLIC_URL}/v1/runs/{id}/complete`` and ``/heartbeat``) and
``Cronman-Lease-Token``, signed as every request (the v2 signature covers
the ids, URL and body, not these headers). Then:

- a 202: the run is the queue's (``Outcome(handed_off=True)``): the receiver
  heartbeats and completes it as a worker does; missed heartbeats and
  ``completion_timeout`` end it as a worker run's lease and timeout do;
- any other answer, a timeout or a connection error: the held item goes and
  the row is the node's again (``release``), and the node records the
  attempt as any other (a retry takes a new lease); if the item was no
  longer held (the receiver completed already, or the lease ran out) the
  queue's outcome stands and the node forgets the run.

The first lease is the heartbeat timeout plus the request's own timeout:
the receiver's heartbeats start once it has answered.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from functools import partial
from urllib.parse import urlsplit

from cronman.callbacks.base import Delivery, Outcome, Target
from cronman.errors import StoreUnavailable
from cronman.protocol import HEADER_COMPLETION_URL, HEADER_HEARTBEAT_URL, HEADER_LEASE_TOKEN
from cronman.store.base import WorkQueueStore
from cronman.store.work_records import WorkOrder
from cronman.timeutil import from_ms, utcnow
from cronman.vocabulary import DEFAULT_DELIVERY, HttpCompletion, default_retry

log = logging.getLogger(__name__)

ACCEPTED = 202
LEASE_THREADS = 4
HOLDER_PREFIX = "http:"
MAX_QUEUE_CHARS = 64  # work_items.queue
NO_PUBLIC_URL = ('"completion": "callback" needs CRONMAN_PUBLIC_URL (the URL receivers '
                 "reach the API at), which is not set on node {node}")


def holder_of(url: str) -> str:
    """The pseudo-worker that holds an http target's runs: ``http:<host>``."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    return HOLDER_PREFIX + host


class CallbackCompletion:
    """The node's ``http`` target, with completion by callback (module docstring)."""

    kind = "http"

    def __init__(self, http: Target, work: WorkQueueStore, *, node_id: str,
                 public_url: str | None, lease_seconds: float,
                 executor: ThreadPoolExecutor | None = None) -> None:
        self.http = http
        self._start: Callable[[Delivery], Awaitable[Outcome]] = getattr(
            http, "start", http.deliver)
        self._work = work
        self._node_id = node_id
        self._public_url = public_url
        self._lease_seconds = lease_seconds
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(LEASE_THREADS,
                                                        thread_name_prefix="cronman-lease")

    @property
    def pool_limit(self) -> int | None:
        return self.http.pool_limit

    def start(self, delivery: Delivery) -> Awaitable[Outcome]:
        """The http target's ``start``, or the completion by callback."""
        if delivery.target.get("completion") != HttpCompletion.CALLBACK:
            return self._start(delivery)
        return self._by_callback(delivery)

    async def deliver(self, delivery: Delivery) -> Outcome:
        return await self.start(delivery)

    def order(self, d: Delivery) -> WorkOrder:
        """The lease's item for this attempt."""
        t = d.target
        return WorkOrder(
            run_id=d.run_id, scheduled_for=d.scheduled_for, job_id=d.job_id,
            namespace=d.namespace, queue=holder_of(str(t["url"]))[:MAX_QUEUE_CHARS],
            priority=d.priority,
            due_at=from_ms(d.due_ms) if d.due_ms is not None else utcnow(),
            attempt=d.attempt, payload=None,
            heartbeat_timeout=int(t["heartbeat_timeout"]), timeout=int(t["completion_timeout"]),
            delivery=d.delivery_mode or DEFAULT_DELIVERY,
            retry=dict(d.retry or default_retry()), node_id=self._node_id, trace=d.trace)

    async def _by_callback(self, d: Delivery) -> Outcome:
        if not self._public_url:
            return Outcome(False, error=NO_PUBLIC_URL.format(node=self._node_id),
                           retryable=False)
        try:
            order = self.order(d)
        except (KeyError, TypeError, ValueError) as exc:  # a target that escaped validation
            return Outcome(False, error=f"invalid http target: {exc!r}", retryable=False)
        token = secrets.token_urlsafe(32)
        first_lease = order.heartbeat_timeout + math.ceil(float(d.target.get("timeout") or 10))
        held = await self._call(partial(self._work.hold, order, holder_of(str(d.target["url"])),
                                        token, first_lease=first_lease))
        if not isinstance(held, bool):
            return Outcome(False, error=f"cannot take the run's completion lease: {held}")
        if not held:
            return Outcome(False, error="cannot take the run's completion lease: its row is "
                                        "not this node's (not written yet, or taken over)")
        base = f"{self._public_url}/v1/runs/{d.run_id}"
        outcome = await self._start(replace(d, headers=(
            *d.headers, (HEADER_COMPLETION_URL, f"{base}/complete"),
            (HEADER_HEARTBEAT_URL, f"{base}/heartbeat"), (HEADER_LEASE_TOKEN, token))))
        if outcome.ok and outcome.result.get("http_status") == ACCEPTED:
            return replace(outcome, handed_off=True)
        back = await self._call(partial(
            self._work.release, d.run_id, d.scheduled_for, token, node_id=self._node_id,
            lease_until=utcnow() + timedelta(seconds=self._lease_seconds)))
        if back is True:
            return outcome
        if back is not False:
            log.warning("run %s: cannot give its completion lease back (%s); it ends when "
                        "the lease runs out", d.run_id, back)
        # The queue has it: the receiver completed already, or the lease ran out.
        return Outcome(True, result=outcome.result, handed_off=True)

    async def _call(self, fn: Callable[[], bool]) -> bool | StoreUnavailable:
        """A store call on a thread of its own; a database out of reach is the answer."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except StoreUnavailable as exc:
            return exc

    def hand_back(self) -> None:
        self.http.hand_back()

    async def close(self) -> None:
        await self.http.close()
        if self._own_executor:
            self._executor.shutdown(wait=False)
