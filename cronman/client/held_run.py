"""One claimed run's lease: heartbeats from a thread while its handler works, then its report.

The lease is renewed every ``heartbeat_timeout / 3`` seconds. A 409 (or 404)
on a heartbeat means the lease is gone (expired, re-queued, ended): the run
is cancelled and never reported, since another worker may hold it now. A
heartbeat that fails for a transient reason (no answer, 5xx) is tried again
sooner, with backoff, until the lease would have expired by this host's
clock; then the run is treated as lost too. A completion is tried until it
is accepted, refused (409) or the lease would have expired.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cronman.client.errors import ApiError, ConflictError, InvalidRequest, NotFoundError
from cronman.client.queues import ERROR_MAX_CHARS, RESULT_MAX_BYTES, Outcome
from cronman.client.run_context import (
    CANCEL_REQUESTED,
    LEASE_LOST,
    TIMED_OUT,
    RunContext,
    without_nul,
)
from cronman.client.transport import NO_RETRY, RetryPolicy
from cronman.client.types import Heartbeat, Run

# Waits between tries of a heartbeat or completion that failed for a transient reason.
BACKOFF = RetryPolicy(attempts=1, backoff=0.25, max_backoff=4.0)
HEARTBEATS_PER_TIMEOUT = 3
# Bounds of one heartbeat's or completion's wait for its answer (seconds).
MIN_CALL_TIMEOUT = 1.0
MAX_CALL_TIMEOUT = 30.0

log = logging.getLogger("cronman.worker")


class LeaseCalls(Protocol):
    """The API calls a held run makes (``CronmanClient``'s)."""

    def heartbeat(self, run_id: str, lease_token: str, *, progress: str | None = None,
                  percent: float | None = None, output: dict[str, str] | None = None,
                  retry: RetryPolicy | None = None,
                  timeout: float | None = None,
                  trace: Mapping[str, str] | None = None) -> Heartbeat: ...

    def complete(self, run_id: str, lease_token: str, status: Outcome, *,
                 result: dict[str, Any] | None = None, error: str | None = None,
                 retry: RetryPolicy | None = None, timeout: float | None = None,
                 trace: Mapping[str, str] | None = None) -> Run: ...

    def get_run(self, run_id: str) -> Run: ...


@dataclass(frozen=True)
class RunReport:
    """How a held run ended for its worker: what it reported and whether the API took it."""

    run_id: str
    status: Outcome | None  # what was reported; None: nothing (the lease was gone)
    error: str | None
    accepted: bool
    note: str | None = None  # why it was not accepted, or not reported
    result: dict[str, Any] | None = None


def transient(exc: ApiError) -> bool:
    """An error worth trying again: no answer, or the API (or a proxy) failing."""
    return exc.status == 0 or exc.status >= 500 or exc.status == 429


class HeldRun:
    """The lease of one claimed run (``lease_token``), kept until ``finish``."""

    def __init__(self, api: LeaseCalls, ctx: RunContext, lease_token: str,
                 heartbeat_timeout: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.ctx = ctx
        self.token = lease_token
        self.heartbeat_timeout = heartbeat_timeout
        self.interval = heartbeat_timeout / HEARTBEATS_PER_TIMEOUT
        self._clock = clock
        self.lease_expires = clock() + heartbeat_timeout
        self.lost = False
        self._done = threading.Event()
        self._reported = threading.Lock()
        self.report_: RunReport | None = None
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name=f"heartbeat-{ctx.run_id}")

    def start(self) -> None:
        self._thread.start()

    # -- heartbeats ------------------------------------------------------------

    def _beat(self) -> None:
        wait = self.interval
        failures = 0
        timed_out = False
        while not self._done.wait(wait if timed_out else
                                  max(min(wait, self.ctx.remaining()), 0.0)):
            if not timed_out and self.ctx.remaining() <= 0:
                timed_out = True
                self.ctx.cancel(TIMED_OUT)
            wait = self.interval
            pending = self.ctx.take_progress()
            output = self.ctx.take_output()
            sent_at = self._clock()
            try:
                answer = self.api.heartbeat(
                    self.ctx.run_id, self.token, retry=NO_RETRY, timeout=self._call_timeout(),
                    trace=self.ctx.trace_headers(),
                    progress=None if pending is None else pending[0],
                    percent=None if pending is None else pending[1], output=output)
            except (ConflictError, NotFoundError) as exc:
                if not self._done.is_set():  # else: refused as the report took the lease
                    self._lose(f"{LEASE_LOST}: {exc}")
                return
            except ApiError as exc:
                if pending is not None:
                    self.ctx.restore_progress(pending)
                if output is not None:
                    self.ctx.restore_output()
                if self._clock() >= self.lease_expires:
                    self._lose(f"{LEASE_LOST}: no heartbeat answered for "
                               f"{self.heartbeat_timeout:g} s ({exc})")
                    return
                failures += 1
                if transient(exc):
                    wait = min(BACKOFF.delay(failures), self.interval)
                log.warning("run %s: heartbeat failed (%s); lease left %.1f s",
                            self.ctx.run_id, exc, self.lease_expires - self._clock())
                continue
            failures = 0
            self.lease_expires = sent_at + self.heartbeat_timeout
            if answer.get("cancel_requested"):
                self.ctx.cancel(CANCEL_REQUESTED)

    def _recorded(self, status: Outcome) -> bool:
        """Whether the run reads as this worker's report recorded: that status, this
        attempt, this worker's id in the result (the API adds it)."""
        try:
            run = self.api.get_run(self.ctx.run_id)
        except ApiError:
            return False
        return (run.get("status") == status and run.get("attempt") == self.ctx.attempt
                and (run.get("result") or {}).get("worker_id") == self.ctx.worker_id)

    def _call_timeout(self) -> float:
        """A call waits no longer than the lease has left (but a second at least)."""
        return min(max(self.lease_expires - self._clock(), MIN_CALL_TIMEOUT), MAX_CALL_TIMEOUT)

    def _lose(self, why: str) -> None:
        self.lost = True
        self.ctx.cancel(LEASE_LOST)
        log.warning("run %s: %s; it will not be reported", self.ctx.run_id, why)

    def abandon(self) -> None:
        """Stop the heartbeats without a report: the lease runs out, the run comes back."""
        self._done.set()

    # -- the report ------------------------------------------------------------

    def finish(self, status: Outcome, result: Any, error: str | None) -> RunReport:
        """Stop the heartbeats and report the run's end (once: a second call returns
        the first report)."""
        with self._reported:
            if self.report_ is None:
                self._done.set()
                self.report_ = self._report(status, result, error)
            return self.report_

    def _report(self, status: Outcome, raw: Any, error: str | None) -> RunReport:
        run_id = self.ctx.run_id
        if self.lost:
            return RunReport(run_id, None, error, False, self.ctx.cancel_reason)
        result, error, problem = bounded(raw, error)
        if problem:
            status = "failed"
        if status == "failed" and not error:
            error = "failed"
        unanswered = False
        failures = 0
        while True:
            try:
                self.api.complete(run_id, self.token, status, result=result, error=error,
                                  retry=NO_RETRY, timeout=self._call_timeout(),
                                  trace=self.ctx.trace_headers())
                return RunReport(run_id, status, error, True, result=result)
            except ConflictError as exc:
                if unanswered and self._recorded(status):
                    return RunReport(run_id, status, error, True,
                                     "recorded by a try that got no answer", result)
                note = f"refused: {exc}"
                if unanswered:
                    note += " (an earlier try got no answer: it may have been recorded)"
                return RunReport(run_id, status, error, False, note, result)
            except InvalidRequest as exc:
                if result is None:
                    return RunReport(run_id, status, error, False, f"refused: {exc}")
                # Reported again without the result the API refused, saying why.
                status, error = "failed", _cut(f"{error or 'succeeded'}; result refused: {exc}")
                result = None
                continue
            except ApiError as exc:
                if not transient(exc):
                    return RunReport(run_id, status, error, False, f"refused: {exc}", result)
                unanswered = unanswered or exc.status == 0
                failures += 1
                left = self.lease_expires - self._clock()
                if left <= 0:
                    return RunReport(run_id, status, error, False,
                                     f"not accepted before the lease expired: {exc}", result)
                log.warning("run %s: completion failed (%s); trying again", run_id, exc)
                time.sleep(min(BACKOFF.delay(failures), left))


def bounded(result: Any, error: str | None) -> tuple[dict[str, Any] | None, str | None, bool]:
    """``result`` and ``error`` within the API's bounds, and whether the result was
    wrong: one that is no JSON object or larger than 64 KiB is dropped (the run
    fails), and the error says why."""
    why = None
    if result is not None:
        why = None
        if not isinstance(result, dict):
            why = f"the handler returned {type(result).__name__}, not a dict"
        else:
            try:
                size = len(json.dumps(result, ensure_ascii=False).encode("utf-8"))
            except (TypeError, ValueError) as exc:
                why = f"the result is not JSON: {exc}"
            else:
                if size > RESULT_MAX_BYTES:
                    why = f"the result is {size} bytes, more than {RESULT_MAX_BYTES}"
        if why is not None:
            result, error = None, (f"{error}; {why}" if error else why)
    return result, None if error is None else _cut(error), why is not None


def _cut(text: str) -> str:
    """An error as the API takes it: UTF-8 (a lone surrogate replaced), no NUL, bounded."""
    text = without_nul(text.encode("utf-8", "replace").decode("utf-8"))
    return text if len(text) <= ERROR_MAX_CHARS else text[:ERROR_MAX_CHARS - 1] + "…"
