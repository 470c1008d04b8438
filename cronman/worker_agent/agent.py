"""The worker agent: takes container runs handed to it and runs them.

One asyncio loop; the directory (Redis) calls go to a small thread pool.

- **Membership**: a heartbeat every third of ``CRONMAN_HEARTBEAT_TTL``
  publishes the agent's capacity, labels and running runs.
- **Inbox**: ``start`` messages are acknowledged (which takes the run's
  lease) *before* anything is started; then the container is started,
  waited for (``timeout``: SIGTERM, SIGKILL after a grace, failed
  "timeout") and its outcome recorded with ``finish``; then it is removed.
  ``stop`` messages stop a held run's container (SIGTERM, then SIGKILL).
- **Leases**: every third of the lease, one ``renew`` for every held run.
  ``STOP``: stop the container and report. ``FENCED`` (the run was placed
  elsewhere, or recorded lost, while this agent was away): kill the
  container and report nothing.
- **Output**: every ``OUTPUT_PERIOD`` the tails of each running container's
  stdout and stderr, when they changed, go to the directory (``put_output``,
  kept a few periods): the run's page shows them while it runs.
- **Reattach**: on start, the agent lists the containers labelled with its
  id (containerd keeps them running while the agent is down) and renews each
  one's lease: held ones are waited for again and reported once; fenced ones
  are killed.

- **Host policy** (``cronman.host_policy``, ``CRONMAN_AGENT_HOST_POLICY``):
  before starting anything the agent checks the run -- root, network mode,
  and on the ``process`` runtime its consent -- against both its own policy
  and the run's namespace grant carried by the message (a message without
  one, from a node older than the agent, is refused: upgrade the nodes
  first), and records a refused run failed (not retried) with the reason,
  whatever the run's stored definition says. Default: non-root, network
  ``none``.

A graceful stop leaves the membership and, on containerd, leaves the
containers running for the agent's return (their leases run on until then);
on the process runtime it stops the commands and reports them failed. Either
runtime's runs outlive an agent that is killed (their output kept in files
under the state dir, by the shim's logger or the command's supervisor), and
the agent back with the same id reattaches to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from cronman import host_policy
from cronman.coordination.agents import FENCED, STOP, AgentDirectory, AgentInfo, Capacity
from cronman.errors import CoordinatorUnavailable, ValidationError
from cronman.host_policy import DEFAULT as DEFAULT_POLICY
from cronman.host_policy import HostPolicy
from cronman.timeutil import format_rfc3339, now_ms, utcnow
from cronman.worker_agent.runtime import (
    DEFAULT_STOP_GRACE,
    LABEL_AGENT,
    LABEL_ATTEMPT,
    LABEL_DEADLINE,
    LABEL_RUN,
    SIGKILL_EXIT,
    ContainerExit,
    ContainerRuntime,
    ContainerSpec,
    ImageNotFound,
    RuntimeError_,
    RuntimeUnavailable,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long a finished run's outcome is kept for its waiter (or an adopter).
OUTCOME_KEEP_MS = 3600 * 1000
INBOX_POLL = 0.5
#: Seconds between publications of the running containers' output; each is kept 5 times as long.
OUTPUT_PERIOD = 2.0


def container_name(run_id: str, attempt: int) -> str:
    return f"cronman-{run_id}-{attempt}"


def run_env(held: HeldRun, message: dict[str, Any]) -> dict[str, str]:
    """What a container learns of its run (as the Cronman-* headers of a callback),
    and its trace context as ``TRACEPARENT``/``TRACESTATE`` when tracing is on."""
    env = {"CRONMAN_JOB_ID": str(message.get("job_id") or ""),
           "CRONMAN_RUN_ID": held.run_id, "CRONMAN_ATTEMPT": str(held.attempt),
           "CRONMAN_SCHEDULED_FOR": str(message.get("scheduled_for") or "")}
    trace = message.get("trace")
    if isinstance(trace, dict):
        for name in ("traceparent", "tracestate"):
            value = trace.get(name)
            if isinstance(value, str) and value and value.isprintable():
                env[name.upper()] = value
    return env


@dataclass(slots=True, eq=False)
class HeldRun:
    """A run this agent holds the lease of."""

    run_id: str
    attempt: int
    container_id: str | None = None
    stop_reason: str | None = None  # set once a stop was asked for
    fenced: bool = False
    task: asyncio.Task[None] | None = None
    started_at: datetime | None = None
    stopping: asyncio.Task[None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    output_sent: tuple[str, str] | None = None  # the tails published last


class WorkerAgent:
    """One worker agent. ``await main(stop)`` runs it until ``stop`` is set."""

    def __init__(self, agent_id: str, directory: AgentDirectory, runtime: ContainerRuntime, *,
                 capacity: Capacity, labels: dict[str, str] | None = None,
                 heartbeat_ttl: float = 30.0, lease_seconds: float = 30.0,
                 stop_grace: float = DEFAULT_STOP_GRACE, address: str = "",
                 policy: HostPolicy | None = None) -> None:
        self.agent_id = agent_id
        if policy is None:  # choosing the process runtime is consent to run on this host
            policy = HostPolicy(process=True) if runtime.name == "process" else DEFAULT_POLICY
        self.policy = policy
        self.directory = directory
        self.runtime = runtime
        self.capacity = capacity
        self.labels = dict(labels or {})
        self.heartbeat_ttl = heartbeat_ttl
        self.lease_ms = int(lease_seconds * 1000)
        self.stop_grace = stop_grace
        self.address = address
        self.started_at = utcnow()
        self.held: dict[tuple[str, int], HeldRun] = {}  # by (run id, attempt)
        self.ready = asyncio.Event()
        self.reported = 0  # outcomes recorded (for tests and the log)
        self._pool = ThreadPoolExecutor(4, thread_name_prefix=f"agent-{agent_id}")
        self._stopping = False

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """A directory call, on the pool."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def info(self) -> AgentInfo:
        return AgentInfo(id=self.agent_id, capacity=self.capacity, labels=self.labels,
                         address=self.address, runtime=self.runtime.name,
                         started_at=self.started_at,
                         running=sorted({run_id for run_id, _ in self.held}))

    # -- running ----------------------------------------------------------

    async def main(self, stop: asyncio.Event) -> None:
        await self._beat()
        await self._reattach()
        tasks = [asyncio.create_task(self._heartbeat_loop(stop)),
                 asyncio.create_task(self._inbox_loop(stop)),
                 asyncio.create_task(self._lease_loop(stop)),
                 asyncio.create_task(self._output_loop(stop))]
        self.ready.set()
        log.info("agent %s ready (%s runtime, capacity %s, labels %s)", self.agent_id,
                 self.runtime.name, self.capacity.to_dict(), self.labels or "none")
        try:
            await stop.wait()
        finally:
            self._stopping = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._shutdown()

    async def _shutdown(self) -> None:
        with contextlib.suppress(Exception):
            await self.call(self.directory.agent_leave, self.agent_id)
        runs = [h for h in self.held.values() if h.task is not None]
        if self.runtime.name == "process":
            for held in runs:
                self._stop(held, "the agent stopped")
            if runs:
                await asyncio.wait([h.task for h in runs if h.task], timeout=self.stop_grace + 3)
        for held in runs:
            if held.task is not None and not held.task.done():
                held.task.cancel()
        stopping = [h.stopping for h in runs if h.stopping is not None]
        if stopping:
            await asyncio.wait(stopping, timeout=self.stop_grace + 3)
        await self.runtime.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("agent %s stopped (%d runs left to their leases)", self.agent_id,
                 sum(1 for h in runs if h.task is not None and h.task.cancelled()))

    async def _beat(self) -> None:
        ping = getattr(self.runtime, "ping", None)
        if ping is not None and not await ping():
            # No new runs while the runtime is away (containerd restarting):
            # the heartbeat lapses after its TTL; held runs keep their leases.
            log.warning("agent %s: the %s runtime does not answer: heartbeat skipped",
                        self.agent_id, self.runtime.name)
            return
        try:
            await self.call(self.directory.agent_heartbeat, self.info(),
                            int(self.heartbeat_ttl * 1000))
        except CoordinatorUnavailable as exc:
            log.warning("agent heartbeat failed: %s", exc)

    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _sleep_or_stop(stop, self.heartbeat_ttl / 3)
            await self._beat()

    async def _inbox_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                messages = await self.call(self.directory.next_messages, self.agent_id,
                                           INBOX_POLL)
            except CoordinatorUnavailable as exc:
                log.warning("agent inbox unreachable: %s", exc)
                await _sleep_or_stop(stop, 1.0)
                continue
            for message in messages:
                self._on_message(message)

    def _on_message(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        run_id = str(message.get("run_id") or "")
        attempt = int(message.get("attempt") or 0)
        held = self.held.get((run_id, attempt))
        if kind == "stop":
            if held is not None:
                self._stop(held, str(message.get("reason") or "stopped by the scheduler"))
            return
        if kind != "start" or not run_id:
            log.warning("agent %s: ignoring message %r", self.agent_id, message)
            return
        if held is not None:
            return  # a duplicate
        for older in [h for (r, a), h in self.held.items() if r == run_id and a < attempt]:
            self._fence(older)  # the run was placed again: the old container must go
        held = HeldRun(run_id, attempt)
        self.held[(run_id, attempt)] = held
        held.task = asyncio.create_task(self._run(held, message))

    async def _lease_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _sleep_or_stop(stop, self.lease_ms / 3000)
            await self.renew_once()

    async def renew_once(self) -> None:
        runs = [h for h in self.held.values() if h.container_id is not None or h.started_at]
        if not runs:
            return
        try:
            answers = await self.call(self.directory.renew, self.agent_id,
                                      [(h.run_id, h.attempt) for h in runs], self.lease_ms)
        except CoordinatorUnavailable as exc:
            log.warning("agent %s cannot renew %d leases: %s", self.agent_id, len(runs), exc)
            return
        for held, answer in zip(runs, answers, strict=True):
            if answer == FENCED:
                self._fence(held)
            elif answer == STOP:
                self._stop(held, "stopped by the scheduler")

    async def _output_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _sleep_or_stop(stop, OUTPUT_PERIOD)
            await self.publish_output()

    async def publish_output(self) -> None:
        """The tails of each held run's container, when they changed since last."""
        for held in list(self.held.values()):
            if held.container_id is None:
                continue
            try:
                tails = await self.call(self.runtime.tails, held.container_id)
                if tails == held.output_sent:
                    continue
                await self.call(self.directory.put_output, held.run_id, {
                    "attempt": held.attempt, "agent_id": self.agent_id, "stdout": tails[0],
                    "stderr": tails[1], "at": format_rfc3339(utcnow())},
                    int(OUTPUT_PERIOD * 5000))
                held.output_sent = tails
            except (CoordinatorUnavailable, RuntimeError_) as exc:
                log.debug("run %s: output not published: %s", held.run_id, exc)
                return

    # -- one run ----------------------------------------------------------

    async def _run(self, held: HeldRun, message: dict[str, Any]) -> None:
        try:
            if not await self.call(self.directory.ack, self.agent_id, held.run_id, held.attempt,
                                   self.lease_ms):
                log.info("run %s attempt %d was withdrawn before it started", held.run_id,
                         held.attempt)
                return
            held.started_at = utcnow()
            outcome = await self._start_and_wait(held, message)
            await self._report(held, outcome)
        except CoordinatorUnavailable as exc:
            log.error("run %s: the directory is unreachable: %s", held.run_id, exc)
        except Exception:
            log.exception("run %s failed in the agent", held.run_id)
            await self._discard(held)
        finally:
            self.held.pop((held.run_id, held.attempt), None)

    async def _discard(self, held: HeldRun) -> None:
        """Kill and remove the container of a run the agent lost track of (its
        lease lapses, and the run is re-dispatched or recorded lost)."""
        if held.container_id is None:
            return
        try:
            await self.runtime.stop(held.container_id, 0.0)
            await self.runtime.wait(held.container_id)
            await self.runtime.remove(held.container_id)
        except Exception as exc:
            log.error("container %s could not be removed: %r", held.container_id, exc)

    def refusal(self, message: dict[str, Any]) -> str | None:
        """Why the run of ``message`` may not run here (None: it may): what its
        target asks beyond this agent's own policy, or beyond its namespace's
        grant carried by the message (a message without one is refused)."""
        target = message.get("target")
        if not isinstance(target, dict):
            return "the run names no container target"
        refused = self.policy.refusals(target)
        if refused:
            field, why = refused[0]
            return f"target.{field}: {why}"
        if self.runtime.name == "process" and not self.policy.process:
            return ("the process runtime runs commands on this agent's host without "
                    "isolation, which this agent's host policy does not allow")
        namespace = message.get("namespace")
        try:
            grant = host_policy.from_dict(message.get("host_policy"))
        except ValidationError:
            return (f"the message carries no host policy of namespace {namespace!r} (a "
                    "scheduler node older than this agent?), so nothing is granted")
        refused = grant.refusals(target)
        if refused:
            field, why = refused[0]
            return f"target.{field}: namespace {namespace!r}, by its grant: {why}"
        if self.runtime.name == "process" and not grant.process:
            return ("the process runtime runs commands on this agent's host without "
                    f"isolation, which the host policy of namespace {namespace!r} does not "
                    "allow")
        return None

    async def _start_and_wait(self, held: HeldRun, message: dict[str, Any]) -> dict[str, Any]:
        target = dict(message.get("target") or {})
        refused = self.refusal(message)
        if refused is not None:
            log.warning("run %s attempt %d refused by the host policy of agent %s: %s",
                        held.run_id, held.attempt, self.agent_id, refused)
            return self._failure(f"refused by the host policy of worker agent "
                                 f"{self.agent_id}: {refused}", retryable=False)
        timeout = float(message.get("timeout") or target.get("timeout") or 3600)
        spec = ContainerSpec(
            name=container_name(held.run_id, held.attempt), image=str(target.get("image", "")),
            command=[str(c) for c in target.get("command") or []],
            env={**{str(k): str(v) for k, v in (target.get("env") or {}).items()},
                 **run_env(held, message)},
            cpu=float(target.get("cpu") or 1), memory_mb=int(target.get("memory_mb") or 256),
            network=str(target.get("network") or "none"), user=target.get("user"),
            labels={LABEL_AGENT: self.agent_id, LABEL_RUN: held.run_id,
                    LABEL_ATTEMPT: str(held.attempt),
                    LABEL_DEADLINE: str(now_ms() + int(timeout * 1000)),
                    "cronman.job": str(message.get("job_id") or "")})
        try:
            held.container_id = await self.runtime.start(spec)
        except ImageNotFound as exc:
            return self._failure(str(exc), retryable=False)
        except RuntimeUnavailable as exc:
            return self._failure(str(exc))
        except RuntimeError_ as exc:
            return self._failure(f"the container could not start: {exc}", retryable=False)
        started = utcnow()
        log.info("run %s attempt %d: container %s started", held.run_id, held.attempt,
                 held.container_id)
        if held.fenced:  # fenced while it was starting
            held.fenced = False
            self._fence(held)
        elif held.stop_reason is not None:  # a stop came while it was starting
            self._stop(held, held.stop_reason)
        return await self._wait(held, timeout, started)

    async def _wait(self, held: HeldRun, timeout: float | None, started: datetime | None
                    ) -> dict[str, Any]:
        assert held.container_id is not None
        waiting = asyncio.ensure_future(self.runtime.wait(held.container_id))
        timed_out = False
        if timeout is not None:
            done, _ = await asyncio.wait([waiting], timeout=max(0.0, timeout))
            if not done and held.stop_reason is None:
                timed_out = True
                held.stop_reason = "timeout: the container was still running at its timeout"
                await self.runtime.stop(held.container_id, self.stop_grace)
        try:
            end = await waiting
        except RuntimeError_ as exc:
            return self._failure(f"lost track of the container: {exc}")
        return self._outcome(held, end, started, timed_out)

    def _outcome(self, held: HeldRun, end: ContainerExit, started: datetime | None,
                 timed_out: bool) -> dict[str, Any]:
        result: dict[str, Any] = {
            "exit_code": end.exit_code, "agent_id": self.agent_id,
            "logs_tail": {"stdout": end.stdout, "stderr": end.stderr},
        }
        if started is not None:
            result["container_started_at"] = format_rfc3339(started)
        if end.finished_at is not None:
            result["container_finished_at"] = format_rfc3339(end.finished_at)
        if end.oom_killed:
            result["oom_killed"] = True
        error = None
        if end.error is not None:
            error = end.error
        elif timed_out:
            error = held.stop_reason
        elif held.stop_reason is not None:
            error = f"{held.stop_reason} (exit code {end.exit_code})"
        elif end.oom_killed:
            error = (f"OOM: the container went over its memory limit and was killed "
                     f"(exit code {end.exit_code})")
        elif end.exit_code != 0:
            error = f"the container exited with code {end.exit_code}"
        if end.oom_killed and end.exit_code != SIGKILL_EXIT:
            result["exit_code"] = SIGKILL_EXIT
        return {"ok": error is None, "result": result, "error": error, "retryable": True}

    def _failure(self, error: str, *, retryable: bool = True) -> dict[str, Any]:
        return {"ok": False, "result": {"agent_id": self.agent_id}, "error": error,
                "retryable": retryable}

    async def _report(self, held: HeldRun, outcome: dict[str, Any]) -> None:
        """Record the outcome (unless fenced), then remove the container."""
        if not held.fenced:
            for delay in (0.2, 0.5, 1.0, 2.0, 5.0, 5.0, 10.0):
                try:
                    recorded = await self.call(self.directory.finish, self.agent_id,
                                               held.run_id, held.attempt, outcome,
                                               OUTCOME_KEEP_MS)
                    break
                except CoordinatorUnavailable as exc:
                    log.warning("run %s: cannot record the outcome yet: %s", held.run_id, exc)
                    await asyncio.sleep(delay)
            else:
                recorded = False
            if recorded:
                self.reported += 1
            else:
                log.warning("run %s attempt %d: outcome not recorded (the run was placed "
                            "elsewhere or recorded lost meanwhile)", held.run_id, held.attempt)
        if held.container_id is not None:
            try:
                await self.runtime.remove(held.container_id)
            except RuntimeError_ as exc:
                log.warning("container %s not removed: %s", held.container_id, exc)

    def _stop(self, held: HeldRun, reason: str) -> None:
        if held.stop_reason is None:
            held.stop_reason = reason
        if held.container_id is not None and held.stopping is None:
            log.info("run %s: stopping container %s (%s)", held.run_id, held.container_id,
                     reason)
            held.stopping = asyncio.create_task(
                self._stop_container(held.container_id, self.stop_grace))

    def _fence(self, held: HeldRun) -> None:
        if held.fenced:
            return
        held.fenced = True
        log.warning("run %s attempt %d is no longer this agent's (placed elsewhere or "
                    "recorded lost): killing its container", held.run_id, held.attempt)
        if held.container_id is not None:
            held.stopping = asyncio.create_task(self._stop_container(held.container_id, 0.0))

    async def _stop_container(self, container_id: str, grace: float) -> None:
        try:
            await self.runtime.stop(container_id, grace)
        except RuntimeError_ as exc:
            log.warning("container %s could not be stopped: %s", container_id, exc)
        except Exception:
            if not self._stopping:
                log.exception("container %s could not be stopped", container_id)

    # -- after a restart --------------------------------------------------

    async def _reattach(self) -> None:
        """Find this agent's containers (left running while it was away)."""
        try:
            found = await self.runtime.list({LABEL_AGENT: self.agent_id})
        except RuntimeError_ as exc:
            log.error("agent %s cannot list its containers: %s", self.agent_id, exc)
            return
        if not found:
            return
        pairs = []
        for info in found:
            try:
                pairs.append((info, info.labels[LABEL_RUN], int(info.labels[LABEL_ATTEMPT])))
            except (KeyError, ValueError):
                continue
        try:
            answers = await self.call(self.directory.renew, self.agent_id,
                                      [(run, attempt) for _, run, attempt in pairs],
                                      self.lease_ms)
        except CoordinatorUnavailable as exc:
            log.error("agent %s cannot check its containers' leases: %s", self.agent_id, exc)
            answers = ["ok"] * len(pairs)
        for (info, run_id, attempt), answer in zip(pairs, answers, strict=True):
            held = HeldRun(run_id, attempt, container_id=info.id, started_at=utcnow())
            with contextlib.suppress(KeyError, ValueError):
                held.extra["deadline_ms"] = int(info.labels[LABEL_DEADLINE])
            if answer == FENCED:
                held.fenced = True
                log.warning("container %s (run %s attempt %d) is fenced: killing it",
                            info.id, run_id, attempt)
                await self._stop_container(info.id, 0.0)
                held.task = asyncio.create_task(self._drop(held))
            else:
                log.info("reattached to container %s (run %s attempt %d)", info.id, run_id,
                         attempt)
                if answer == STOP:
                    held.stop_reason = "stopped by the scheduler"
                held.task = asyncio.create_task(self._resume(held))
            self.held[(run_id, attempt)] = held
        for held in list(self.held.values()):
            if held.stop_reason is not None and held.stopping is None:
                self._stop(held, held.stop_reason)

    async def _resume(self, held: HeldRun) -> None:
        try:
            deadline = held.extra.get("deadline_ms")
            timeout = None if deadline is None else max(0.0, (deadline - now_ms()) / 1000)
            outcome = await self._wait(held, timeout, None)
            await self._report(held, outcome)
        except Exception:
            log.exception("run %s: reattaching failed", held.run_id)
        finally:
            self.held.pop((held.run_id, held.attempt), None)

    async def _drop(self, held: HeldRun) -> None:
        try:
            if held.container_id is not None:
                with contextlib.suppress(RuntimeError_):
                    await self.runtime.wait(held.container_id)
                await self.runtime.remove(held.container_id)
        except Exception:
            log.exception("run %s: removing a fenced container failed", held.run_id)
        finally:
            self.held.pop((held.run_id, held.attempt), None)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
