"""The ``worker`` target: a run handed to a work queue, for workers to claim.

``deliver`` stores the run's item (``WorkQueueStore.enqueue``, on a thread of
its own: the store is synchronous) and answers ``handed_off``: the node
forgets the run, which stays ``running`` with no node while its queue and
its worker carry it (``cronman.store.work_queue``, ``cronman.api.work``).
A hand-off the database refuses or cannot take is a failed attempt, retried
by the node as any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from cronman.callbacks.base import Delivery, Outcome
from cronman.errors import StoreUnavailable
from cronman.store.base import WorkQueueStore
from cronman.store.work_records import WorkOrder
from cronman.timeutil import from_ms, utcnow
from cronman.vocabulary import DEFAULT_DELIVERY, default_retry

HAND_OFF_THREADS = 4


class WorkerTarget:
    """Hands runs of ``worker`` targets to their queues."""

    kind = "worker"

    def __init__(self, work: WorkQueueStore, node_id: str,
                 executor: ThreadPoolExecutor | None = None) -> None:
        self._work = work
        self._node_id = node_id
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(HAND_OFF_THREADS,
                                                        thread_name_prefix="cronman-work")

    @property
    def pool_limit(self) -> int | None:
        return None

    def order(self, d: Delivery) -> WorkOrder:
        """What the queue is handed for this attempt."""
        t = d.target
        capacity = t.get("capacity") or {}
        due: datetime = from_ms(d.due_ms) if d.due_ms is not None else utcnow()
        return WorkOrder(
            run_id=d.run_id, scheduled_for=d.scheduled_for, job_id=d.job_id,
            namespace=d.namespace, queue=str(t["queue"]), priority=d.priority, due_at=due,
            attempt=d.attempt, payload=t.get("payload"),
            heartbeat_timeout=int(t.get("heartbeat_timeout") or 60),
            timeout=int(t.get("timeout") or 3600),
            delivery=d.delivery_mode or DEFAULT_DELIVERY,
            retry=dict(d.retry or default_retry()), node_id=self._node_id,
            capacity_idle=capacity.get("idle_workers"), capacity_wait=capacity.get("wait"),
            trace=d.trace)

    async def deliver(self, delivery: Delivery) -> Outcome:
        order = self.order(delivery)
        loop = asyncio.get_running_loop()
        try:
            taken = await loop.run_in_executor(self._executor, self._work.enqueue, order)
        except StoreUnavailable as exc:
            return Outcome(False, error=f"cannot hand the run to queue {order.queue}: {exc}")
        if not taken:
            return Outcome(False, error=f"cannot hand the run to queue {order.queue}: its row "
                                        "is not this node's (not written yet, or taken over)")
        return Outcome(True, result={"queue": order.queue}, handed_off=True)

    def cancel(self, run_ids: Sequence[str], reason: str) -> asyncio.Future[int]:
        """Cancel runs of this kind that other nodes handed off (a ``replace``
        fire's predecessors), in the background: queued ones end, held ones
        are asked to stop on their next heartbeat."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, self._cancel_all, list(run_ids), reason)

    def _cancel_all(self, run_ids: list[str], reason: str) -> int:
        now = utcnow()
        return sum(1 for r in run_ids if self._work.cancel(r, reason, now=now) is not None)

    def hand_back(self) -> None:
        pass  # the queue holds its runs: nothing of them is on the node

    async def close(self) -> None:
        if self._own_executor:
            self._executor.shutdown(wait=False)
