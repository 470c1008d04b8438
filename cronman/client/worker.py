"""``Worker``: take runs from a work queue, run a handler for each, keep their leases, report.

    from cronman.client import CronmanClient, Worker

    def retrain(payload, ctx):
        for epoch in range(payload["epochs"]):
            if ctx.cancelled.is_set():          # a cancel, a lost lease, the timeout
                raise RuntimeError(ctx.cancel_reason)
            train_one(epoch)
            ctx.progress(f"epoch {epoch}", percent=100 * epoch / payload["epochs"])
        return {"accuracy": 0.93}               # the run's result

    Worker(CronmanClient.from_env(), "spark", retrain, namespace="ml", concurrency=2).run()

``run()`` claims while a slot is free (``concurrency`` runs at once; every
free slot asked for in one call), each run in a thread of its own with its lease kept by heartbeats
(:mod:`cronman.client.held_run`). A handler that returns reports the run
``succeeded`` with the dict it returned; one that raises reports it
``failed`` with the exception's message (``RunFailed`` carries a result too).

``stop()``, SIGTERM or SIGINT: no more claims (a long-poll in flight is
waited for, so that no run is claimed by a worker that left: one it brings
is reported failed "worker stopped" at once), the held runs may finish for
up to ``grace`` seconds, then they are cancelled (``ctx.cancelled``) and
reported failed "worker stopped". A second signal cuts the grace short.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Protocol

from cronman.client.errors import ApiError
from cronman.client.held_run import BACKOFF, HeldRun, LeaseCalls, RunReport, transient
from cronman.client.queues import CLAIM_WAIT_MAX
from cronman.client.run_context import (
    CANCEL_REQUESTED,
    TIMED_OUT,
    WORKER_STOPPED,
    Handler,
    RunContext,
    RunFailed,
)
from cronman.client.transport import NO_RETRY, RetryPolicy
from cronman.client.types import Claim
from cronman.timeutil import parse_rfc3339

DEFAULT_GRACE = 30.0
#: How long a handler cancelled at the end of the grace has to return before
#: its run is reported without waiting for it any longer.
CANCEL_WAIT = 15.0
REPORTS_KEPT = 100
#: The pause after a claim answered "nothing" long before its wait was over.
EARLY_PAUSE = 1.0

log = logging.getLogger("cronman.worker")


class QueueApi(LeaseCalls, Protocol):
    """The API calls a worker makes (``CronmanClient``'s)."""

    def claim(self, queue: str, worker_id: str, *, namespace: str = "default",
              wait: float = 20.0, slots: int = 1,
              retry: RetryPolicy | None = None) -> Claim | None: ...

    def claim_many(self, queue: str, worker_id: str, *, most: int,
                   namespace: str = "default", wait: float = 20.0, slots: int = 1,
                   retry: RetryPolicy | None = None) -> list[Claim]: ...


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Worker:
    """Claims runs of ``namespace``'s queue ``queue`` and hands each to ``handler``."""

    def __init__(self, client: QueueApi, queue: str, handler: Handler, *,
                 namespace: str = "default", concurrency: int = 1,
                 worker_id: str | None = None, wait: float = 20.0,
                 grace: float = DEFAULT_GRACE, cancel_wait: float = CANCEL_WAIT) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 <= wait <= CLAIM_WAIT_MAX:
            raise ValueError(f"wait must be 0..{CLAIM_WAIT_MAX:g} seconds")
        self.client = client
        self.queue = queue
        self.handler = handler
        self.namespace = namespace
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        self.wait = wait
        self.grace = grace
        self.cancel_wait = cancel_wait
        self.reports: deque[RunReport] = deque(maxlen=REPORTS_KEPT)  # the latest
        self._stopping = threading.Event()
        self._grace_over = threading.Event()
        self._lock = threading.Lock()
        self._held: dict[str, tuple[HeldRun, threading.Thread]] = {}
        self._slots = threading.Semaphore(concurrency)

    # -- control ---------------------------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; held runs get the grace (``now``: none)."""
        self._stopping.set()
        if now:
            self._grace_over.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def held(self) -> list[str]:
        """The ids of the runs held now."""
        with self._lock:
            return list(self._held)

    # -- the loops -------------------------------------------------------------

    def run(self) -> None:
        """Claim and work until ``stop()`` (or SIGTERM/SIGINT in the main thread), then
        let the held runs end as the module docstring says. A claim refused for
        good (a wrong token, say) stops the worker and raises its ``ApiError``."""
        restore = self._handle_signals()
        log.info("worker %s: claiming from %s/%s, %d at once", self.worker_id,
                 self.namespace, self.queue, self.concurrency)
        try:
            self._claim_loop()
        finally:
            self._stopping.set()
            self._drain()
            restore()
            log.info("worker %s: stopped", self.worker_id)

    def run_once(self) -> RunReport | None:
        """Claim one run (waiting up to ``wait``) and work it to its end here; its
        report, or None when nothing came."""
        claim = self.client.claim(self.queue, self.worker_id, namespace=self.namespace,
                                  wait=self.wait, slots=self.concurrency, retry=NO_RETRY)
        if claim is None:
            return None
        held = self._hold(claim)
        return self._work(held)

    def _claim_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            if not self._slots.acquire(timeout=0.2):
                continue
            free = 1  # every free slot is asked for in one claim
            while free < self.concurrency and self._slots.acquire(blocking=False):
                free += 1
            asked = time.monotonic()
            try:
                claims = self._take(free)
            except ApiError as exc:
                self._release(free)
                if not transient(exc):
                    log.error("worker %s: claim refused: %s", self.worker_id, exc)
                    raise
                failures += 1
                delay = BACKOFF.delay(failures)
                log.warning("worker %s: claim failed (%s); again in %.1f s",
                            self.worker_id, exc, delay)
                self._stopping.wait(delay)
                continue
            failures = 0
            self._release(free - len(claims))
            if not claims:
                # An API with no long-poll to spare answers at once: no busy loop.
                if time.monotonic() - asked < self.wait / 2:
                    self._stopping.wait(random.uniform(EARLY_PAUSE / 2, EARLY_PAUSE)
                                        if self.wait >= EARLY_PAUSE else self.wait)
                continue
            for claim in claims:
                held = self._hold(claim)
                if self._stopping.is_set():
                    self._slots.release()
                    self._log_end(held.finish("failed", None, WORKER_STOPPED), 0.0)
                    continue
                thread = threading.Thread(target=self._work_in_slot, args=(held,),
                                          daemon=True, name=f"run-{held.ctx.run_id}")
                with self._lock:
                    self._held[held.ctx.run_id] = (held, thread)
                thread.start()

    def _take(self, free: int) -> list[Claim]:
        """Claim for ``free`` slots: one run, or up to ``free`` in one call."""
        if free == 1:
            claim = self.client.claim(self.queue, self.worker_id, namespace=self.namespace,
                                      wait=self.wait, slots=self.concurrency, retry=NO_RETRY)
            return [] if claim is None else [claim]
        return self.client.claim_many(self.queue, self.worker_id, most=free,
                                      namespace=self.namespace, wait=self.wait,
                                      slots=self.concurrency, retry=NO_RETRY)

    def _release(self, slots: int) -> None:
        for _ in range(slots):
            self._slots.release()

    def _work_in_slot(self, held: HeldRun) -> None:
        try:
            self._work(held)
        except Exception:  # a bug here must not pass unseen: the run is left to its lease
            log.exception("run %s: the worker failed to work or report it", held.ctx.run_id)
            held.abandon()
        finally:
            with self._lock:
                self._held.pop(held.ctx.run_id, None)
            self._slots.release()

    def _hold(self, claim: Claim) -> HeldRun:
        run = claim["run"]
        ctx = RunContext(run=run, payload=claim.get("payload"),
                         attempt=int(claim.get("attempt") or run["attempt"]),
                         queue=self.queue, worker_id=self.worker_id,
                         deadline=_deadline(claim), traceparent=claim.get("traceparent"),
                         tracestate=claim.get("tracestate"))
        held = HeldRun(self.client, ctx, claim["lease_token"],
                       float(claim["heartbeat_timeout"]))
        held.start()
        return held

    def _work(self, held: HeldRun) -> RunReport:
        ctx = held.ctx
        log.info("run %s started: job %s, attempt %d, queue %s/%s", ctx.run_id,
                 ctx.run["job_id"], ctx.attempt, self.namespace, self.queue)
        started = time.monotonic()
        report = held.finish(*self._call(held))
        self._log_end(report, time.monotonic() - started)
        return report

    def _call(self, held: HeldRun) -> tuple[Any, Any, str | None]:
        """The handler's outcome as (status, result, error)."""
        ctx = held.ctx
        try:
            result = self.handler(ctx.payload, ctx)
        except RunFailed as exc:
            return "failed", exc.result, _because(ctx, str(exc))
        except Exception as exc:  # noqa: BLE001 (any failure of the handler fails the run)
            log.debug("run %s: the handler raised", ctx.run_id, exc_info=True)
            return "failed", None, _because(ctx, str(exc) or type(exc).__name__)
        if ctx.cancel_reason == WORKER_STOPPED:
            return "failed", result, WORKER_STOPPED
        return "succeeded", result, None

    def _log_end(self, report: RunReport, took: float) -> None:
        with self._lock:
            self.reports.append(report)
        if report.status is None:
            log.warning("run %s ended after %.1f s, not reported: %s", report.run_id, took,
                        report.note)
        elif not report.accepted:
            log.warning("run %s %s after %.1f s%s, not recorded: %s", report.run_id,
                        report.status, took, _error(report.error), report.note)
        else:
            log.info("run %s %s after %.1f s%s", report.run_id, report.status, took,
                     _error(report.error))

    # -- stopping --------------------------------------------------------------

    def _drain(self) -> None:
        """Wait for the held runs up to the grace, cancel what is left, report it."""
        held = self._held_now()
        if held:
            log.info("worker %s: stopping; %d run(s) held, %g s to finish", self.worker_id,
                     len(held), self.grace)
        deadline = time.monotonic() + self.grace
        for _, thread in held:
            while thread.is_alive() and not self._grace_over.is_set():
                thread.join(min(0.2, max(deadline - time.monotonic(), 0.0)))
                if time.monotonic() >= deadline:
                    self._grace_over.set()
        left = self._held_now()
        for run, _ in left:
            run.ctx.cancel(WORKER_STOPPED)
        cutoff = time.monotonic() + self.cancel_wait
        for _, thread in left:
            thread.join(max(cutoff - time.monotonic(), 0.0))
        for run, thread in left:
            if thread.is_alive():  # the handler ignores its cancel: reported without it
                self._log_end(run.finish("failed", None, WORKER_STOPPED), 0.0)

    def _held_now(self) -> list[tuple[HeldRun, threading.Thread]]:
        with self._lock:
            return list(self._held.values())

    def _handle_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            again = self._stopping.is_set()
            log.info("worker %s: %s: %s", self.worker_id, signal.Signals(signum).name,
                     "no grace left" if again else "stopping")
            self.stop(now=again)

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, handler in previous.items():
                signal.signal(s, handler)

        return restore


def _deadline(claim: Claim) -> float:
    """The run's timeout as a ``time.monotonic()`` time: its ``deadline_at`` by this
    host's clock, and never later than ``timeout`` from now."""
    timeout = float(claim.get("timeout") or 0) or float("inf")
    left = timeout
    deadline_at = claim.get("deadline_at")
    if deadline_at:
        try:
            left = min(timeout, (parse_rfc3339(deadline_at) - datetime.now(UTC))
                       .total_seconds())
        except ValueError:
            pass
    return time.monotonic() + left


def _because(ctx: RunContext, error: str) -> str:
    """A failed run's error, saying why it was cancelled if it was."""
    reason = ctx.cancel_reason
    if reason == WORKER_STOPPED:
        return WORKER_STOPPED
    if reason in (CANCEL_REQUESTED, TIMED_OUT) and not error.startswith(reason):
        return f"{reason}: {error}"
    return error


def _error(error: str | None) -> str:
    return f": {error}" if error else ""
