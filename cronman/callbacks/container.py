"""The ``container`` target: one attempt of a run, on a worker agent.

``deliver`` hands the run to an agent through the ``AgentDirectory`` and
waits for its outcome:

1. **Adopt** first: when the run already has a live placement (its node died
   and this is the sweeper's re-dispatch, or a replica's take-over), wait for
   that container instead of starting a second one; an outcome recorded while
   nobody waited is taken as it is.
2. **Place**: otherwise queue the run in the node's ``Placer`` until an
   agent has room (higher priority first), at most ``placement_timeout``
   seconds (and never past the attempt's ``timeout``); then the attempt fails
   with an error that says so. The attempt number is the fence token.
3. **Wait** (``Watcher``): the agent acknowledges (taking a lease), runs the
   container, stops it at the run's ``timeout`` (SIGTERM, SIGKILL after a
   grace) and records the outcome. An offer never acknowledged is placed
   again; a lease the agent stopped renewing is ``lost`` (``Outcome.lost``:
   the job's ``delivery`` decides between a new attempt and ``lost``).

Host policy (``cronman.host_policy``): before placing a run the node reads
its namespace's grant (``grants``: the store's over the operator's default)
and fails the run, not retried, when its target asks for more (root, the
host's network) -- a job stored before its grant was narrowed keeps firing
but does not run. When the grant cannot be read (the database away) the last
one read for that namespace serves, else the attempt fails retryable: never
a broader policy than the namespace's own. Each message carries the
namespace and its grant; runs are offered to ``process`` agents only when
the grant allows that runtime, and every agent checks each run against the
grant and against its own policy, whatever the stored row says.

``timeout`` bounds the whole attempt: waiting for room, starting and
running. The result is ``exit_code``, ``agent_id`` and ``logs_tail``
(``stdout`` and ``stderr`` apart); a non-zero exit code is a failed attempt,
an OOM kill is exit code 137 with an error that says OOM.

An operator's cancel (``stop_run``) asks the agent to stop the container
and the delivery answers with its exit, as at its ``timeout``.

A cancelled ``deliver`` (``concurrency: replace``, the dispatcher's
watchdog) asks the agent to stop the container (SIGTERM, then SIGKILL),
except once the node handed its runs back (``hand_back``: a graceful stop),
when the container keeps running for the node that re-dispatches the run
to adopt; a later delivery of the same job on this node waits (a few
seconds at most) until that container is gone before placing its own, so
that ``replace`` stops the previous run before it starts the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from cronman.callbacks.base import Delivery, Outcome
from cronman.callbacks.container_placement import Placer, Request, Watcher
from cronman.config import Settings
from cronman.coordination.agents import (
    CANCELLED,
    DONE,
    FENCED,
    LIVE,
    LOST,
    OFFERED,
    PLACED,
    TAKEN,
    AgentDirectory,
)
from cronman.errors import CoordinatorUnavailable
from cronman.host_policy import DEFAULT as DEFAULT_POLICY
from cronman.host_policy import HostPolicy
from cronman.timeutil import format_rfc3339

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_PLACEMENT_TIMEOUT = 60.0
#: How long an agent has to acknowledge an offer before it is placed elsewhere.
OFFER_SECONDS = 5.0
#: How long a placement (and the outcome in it) is kept in the directory.
KEEP_SECONDS = 3600.0
#: Namespaces whose last read grant a target keeps (for a database outage).
KNOWN_GRANTS_MAX = 4096
#: How long a replacing run waits for the container it replaces to be gone.
STOP_WAIT = 10.0


class ContainerTarget:
    """Fires ``container`` targets on worker agents (see the module docstring)."""

    kind = "container"
    pool_limit: int | None = None  # runs wait for room on an agent, not for a connection

    def __init__(self, directory: AgentDirectory, settings: Settings | None = None, *,
                 placement_timeout: float | None = None, offer_seconds: float = OFFER_SECONDS,
                 poll: float = 0.1, executor: ThreadPoolExecutor | None = None,
                 grants: Callable[[str], HostPolicy] | None = None) -> None:
        self.directory = directory
        self.default_grant = (settings.host_policy_default if settings is not None
                              else DEFAULT_POLICY)
        self.grants = grants
        self._known_grants: dict[str, HostPolicy] = {}  # namespace -> its last read grant
        if placement_timeout is None:
            placement_timeout = (settings.agent_placement_timeout if settings is not None
                                 else DEFAULT_PLACEMENT_TIMEOUT)
        self.placement_timeout = placement_timeout
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(4, thread_name_prefix="cronman-agents")
        self.placer = Placer(directory, self.call, offer_ms=int(offer_seconds * 1000),
                             keep_ms=int(KEEP_SECONDS * 1000), poll=max(poll, 0.25))
        self.watcher = Watcher(directory, self.call, poll=poll, on_end=self.placer.kick,
                               on_unacknowledged=self.placer.suspect)
        self._stops: dict[str, set[asyncio.Task[None]]] = {}  # job id -> stops under way
        self._handed_back = False

    def hand_back(self) -> None:
        """The node hands its runs back (graceful stop): from now on a
        cancelled delivery leaves its container running, for the sweeper of
        another node to adopt."""
        self._handed_back = True

    async def call(self, fn: Any, *args: Any) -> Any:
        """A directory call on this target's threads (never on the event loop)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def deliver(self, delivery: Delivery) -> Outcome:
        loop = asyncio.get_running_loop()
        timeout = float(delivery.target.get("timeout") or 3600)
        deadline = loop.time() + timeout
        # One loop turn first: a delivery of this job cancelled right before
        # this one (``concurrency: replace``) registers its stop meanwhile.
        await asyncio.sleep(0)
        await self._after_stops(delivery.job_id)
        fence: list[int] = []  # the attempt whose placement this delivery waits on
        queued: list[Request] = []  # its request while it waits for room
        try:
            return await self._deliver(delivery, deadline, fence, queued)
        except asyncio.CancelledError:
            if not fence and queued and _placed(queued[-1]):
                fence.append(queued[-1].attempt)  # placed, but not yet resumed here
            if fence and not self._handed_back:
                self._stop_later(delivery, fence[0])
            elif fence:
                log.info("run %s: its container is left running for the run's next holder",
                         delivery.run_id)
            raise
        except CoordinatorUnavailable as exc:
            return Outcome(False, error=f"cannot hand the run to a worker agent: {exc}")

    async def _deliver(self, d: Delivery, deadline: float, fence: list[int],
                       queued: list[Request]) -> Outcome:
        loop = asyncio.get_running_loop()
        found = None
        if d.attempt > 1:  # a first attempt has no past placement (``place`` tells of a live one)
            (found,) = await self.call(self.directory.placements, [d.run_id])
        if found is not None and found.live and found.attempt <= d.attempt:
            log.info("run %s: adopting its container on agent %s (attempt %d) instead of "
                     "starting another", d.run_id, found.agent_id, found.attempt)
            fence.append(found.attempt)
        elif found is not None and found.state == DONE and found.attempt < d.attempt:
            outcome = await self.call(self.directory.take, d.run_id)
            if outcome is not None:
                return _outcome(outcome)
        place_until = min(deadline, loop.time() + self.placement_timeout)
        while True:
            if not fence:
                answer = await self._place(d, deadline, place_until, queued)
                if isinstance(answer, Outcome):
                    return answer
                fence.append(answer)
            kind, value = await self.watcher.wait(d.run_id, fence[0])
            if kind == DONE:
                return _outcome(value)
            if kind == LOST and value == OFFERED and loop.time() < place_until:
                fence.clear()  # never acknowledged: nothing started, place it again
                continue
            if kind == LOST:
                return Outcome(False, error=f"lost: the worker agent running it stopped "
                                            f"renewing its lease ({value})", lost=True)
            if kind == CANCELLED:
                return Outcome(False, error="the run's container was stopped before it started")
            if kind == TAKEN:
                return Outcome(False, error="the outcome was taken by another scheduler node "
                                            "(the run is held there)")
            if kind == FENCED:
                return Outcome(False, error=f"superseded: attempt {value} of the run was placed "
                                            "since", retryable=False)
            return Outcome(False, error="the run's placement vanished from the coordinator "
                                        "(Redis restarted?)", lost=True)

    async def _place(self, d: Delivery, deadline: float, place_until: float,
                     queued: list[Request]) -> int | Outcome:
        """Queue the run until it is placed; returns the fence (its attempt)."""
        loop = asyncio.get_running_loop()
        target = d.target
        cpu = float(target.get("cpu") or 1)
        memory_mb = int(target.get("memory_mb") or 256)
        selector = {str(k): str(v) for k, v in (target.get("selector") or {}).items()}
        grant = await self._grant(d.namespace)
        if isinstance(grant, Outcome):
            return grant
        refused = grant.refusals(target)
        if refused:
            field, why = refused[0]
            return Outcome(False, error=f"refused by the host policy of namespace "
                                        f"{d.namespace!r} (its grant): target.{field}: {why}",
                           retryable=False)
        message = {"kind": "start", "run_id": d.run_id, "attempt": d.attempt,
                   "job_id": d.job_id, "scheduled_for": format_rfc3339(d.scheduled_for),
                   "namespace": d.namespace, "host_policy": grant.to_dict(),
                   "target": target, "timeout": max(0.1, deadline - loop.time())}
        if d.trace:
            message["trace"] = dict(d.trace)
        request = Request(d.run_id, d.attempt, d.priority, cpu, memory_mb, selector, message,
                          loop.create_future(), process_ok=grant.process)
        queued.append(request)
        wait = max(0.0, place_until - loop.time())
        try:
            answer, agent_id = await asyncio.wait_for(self.placer.place(request), wait)
        except TimeoutError:
            return Outcome(False, error=self._no_room(request, wait))
        if answer == FENCED:
            return Outcome(False, error="superseded: a later attempt of the run was placed",
                           retryable=False)
        if answer == LIVE:
            log.info("run %s: a live placement appeared meanwhile: adopting it", d.run_id)
            (found,) = await self.call(self.directory.placements, [d.run_id])
            return found.attempt if found is not None else d.attempt
        assert answer == PLACED
        return d.attempt

    async def _grant(self, namespace: str) -> HostPolicy | Outcome:
        """The namespace's grant; when it cannot be read, the last one read for
        the namespace, else a failed (retryable) attempt."""
        if self.grants is None:
            return self.default_grant
        try:
            grant: HostPolicy = await self.call(self.grants, namespace)
        except Exception as exc:
            known = self._known_grants.get(namespace)
            if known is not None:
                log.warning("cannot read the host policy of namespace %r (%s): its last "
                            "known grant serves", namespace, exc)
                return known
            return Outcome(False, error=f"cannot read the host policy of namespace "
                                        f"{namespace!r}: {exc}")
        if len(self._known_grants) >= KNOWN_GRANTS_MAX and namespace not in self._known_grants:
            self._known_grants.clear()
        self._known_grants[namespace] = grant
        return grant

    def _no_room(self, request: Request, waited: float) -> str:
        cpu, memory_mb, selector = request.cpu, request.memory_mb, request.selector
        agents = self.placer.last_agents
        matching = [a for a in agents if a.matches(selector)]
        allowed = [a for a in matching if request.admits(a)]
        wanted = f"cpu {cpu:g}, memory_mb {memory_mb}"
        if selector:
            wanted += ", selector " + ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        if not agents:
            why = "no worker agent is live"
        elif not matching:
            why = f"none of the {len(agents)} live agents matches the selector"
        elif not allowed:
            why = (f"the {len(matching)} matching agents run the process runtime (commands "
                   "on their host, no isolation), which the host policy of namespace "
                   f"{request.message.get('namespace')!r} does not allow")
        elif not any(a.capacity.holds(cpu, memory_mb) for a in allowed):
            why = "the run is bigger than any matching agent's whole capacity"
        else:
            why = f"the {len(allowed)} matching agents stayed full"
        return f"no worker agent with room for the run ({wanted}) within {waited:g} s: {why}"

    # -- stopping ----------------------------------------------------------

    async def stop_run(self, run_id: str) -> bool:
        """Ask the agent running the run's container to stop it (an
        operator's cancel: ``callbacks.base.Stoppable``): the delivery waiting
        on it answers with the container's exit. False when the run has no
        live placement (it still waits for room, or it ended)."""
        (found,) = await self.call(self.directory.placements, [run_id])
        if found is None or not found.live:
            return False
        state = await self.call(self.directory.request_stop, run_id, found.attempt)
        log.info("run %s: its container was asked to stop (%s)", run_id, state)
        return state is not None

    def _stop_later(self, d: Delivery, attempt: int) -> None:
        task = asyncio.get_running_loop().create_task(self._stop(d.run_id, attempt))
        stops = self._stops.setdefault(d.job_id, set())
        stops.add(task)

        def done(t: asyncio.Task[None]) -> None:
            stops.discard(t)
            if not stops:
                self._stops.pop(d.job_id, None)

        task.add_done_callback(done)

    async def _stop(self, run_id: str, attempt: int) -> None:
        """Ask for the container to be stopped and wait (bounded) until it is gone."""
        try:
            state = await self.call(self.directory.request_stop, run_id, attempt)
            if state is None or state == CANCELLED:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.watcher.wait(run_id, attempt), STOP_WAIT)
        except CoordinatorUnavailable as exc:
            log.warning("run %s: could not ask for its container to stop: %s", run_id, exc)
        except Exception:
            log.exception("run %s: stopping its container failed", run_id)

    async def _after_stops(self, job_id: str) -> None:
        stops = self._stops.get(job_id)
        if stops:
            await asyncio.wait(list(stops), timeout=STOP_WAIT)

    async def close(self) -> None:
        pending = [t for ts in self._stops.values() for t in ts]
        if pending:
            await asyncio.wait(pending, timeout=STOP_WAIT)
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)


def _placed(request: Request) -> bool:
    future = request.future
    return future.done() and not future.cancelled() and future.result()[0] == PLACED


def _outcome(data: dict[str, Any]) -> Outcome:
    result = data.get("result")
    return Outcome(ok=bool(data.get("ok")), result=result if isinstance(result, dict) else {},
                   error=data.get("error"), retryable=bool(data.get("retryable", True)))
