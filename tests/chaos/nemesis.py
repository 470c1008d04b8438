"""The nemesis: a seeded, reproducible schedule of faults over a window
(``plan``: pure), and its application to a real cluster (``Nemesis``).

Fault kinds of this slice:

- ``pause_short`` / ``pause_long`` / ``pause_past_lock``: SIGSTOP of a
  node, SIGCONT after less than the heartbeat TTL, after more than the TTL
  and the lease, or after more than the fire lock's TTL (only in windows
  long enough to hold one);
- ``kill_node``: SIGKILL of a node, restarted under its node id;
- ``kill_api``: SIGKILL of the API (the gunicorn master and its workers,
  by PID), restarted on the same port;
- ``slow_receiver``: the receiver's answers held back seconds each
  (``proxy.DelayProxy``);
- ``partition_redis`` / ``partition_db`` / ``partition_receiver`` /
  ``partition_all``: the partition node, which runs in a network namespace
  of its own (``netns``) and reaches each backend over a link of its own,
  cut off from Redis, from PostgreSQL, from the receiver, or from all three
  (those links taken down: what it sends is lost);
- ``link_delay`` / ``link_loss``: the partition node's links to Redis,
  PostgreSQL and the receiver made slow (each answer held back a few hundred
  ms) or lossy (each chunk crossing ends its connection with a few percent
  chance);
- ``redis_failover``: the Redis primary SIGKILLed under Sentinel while the
  nodes hold fire locks on it, a replica promoted (``services.FailoverRedis``);
- ``pg_outage``: PostgreSQL gone for every node and the API (the run's
  database refuses connections and its open ones are terminated, as when
  the server stops; ``services.DatabaseOutage``);
- ``patroni_failover`` (only when the run's database is on Patroni): the
  primary member's Patroni, postmaster and backends SIGKILLed by PID, a
  replica promoted by the cluster itself, then the old member started again
  and back as a replica (``services.FailoverPostgres``);
- ``kill_agent`` / ``kill_worker``: SIGKILL of the container agent or of
  ``cronman worker`` while runs are under way, started again;
- ``clock_forward`` / ``clock_back``: the clock node stopped and started
  again with its clock off by seconds (libfaketime; monotonic time keeps
  its pace), then stopped and started right again;
- ``clock_jump_forward`` / ``clock_jump_back``: the clock node's wall clock
  stepped ahead or back while it runs, as NTP steps a host's clock, for a
  few seconds, then set right again. The node runs under the clock shim
  from its start (``tests/support/clockshim``: an ``LD_PRELOAD`` library
  offsetting only the wall clock, by an offset read from a file the
  nemesis rewrites in place); a third of the steps stay within
  ``CRONMAN_MAX_CLOCK_SKEW`` (the node corrects for them and claims on),
  the others go 2-30 s past it (the node steps out until set right).
  libfaketime cannot do this: a ``FAKETIME_TIMESTAMP_FILE`` changed at run
  time moves the monotonic clock too, and with
  ``FAKETIME_DONT_FAKE_MONOTONIC=1`` every ``time.sleep`` fails (EINVAL).

Node faults follow one another (never two nodes down at once: with two
replicas a job then keeps one owner); the backends' (Redis, PostgreSQL) are
planned on a timeline of their own but applied between the node faults,
never during one, ``BACKEND_SETTLE_S`` apart from them (``Nemesis``); the API, receiver, agent and worker faults
run on a third timeline, overlapping them. Every fault is over a few seconds
before the window ends. Each applied fault is logged with its wall times
(``checker.Fault``).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cronman.config import DEFAULT_MAX_CLOCK_SKEW
from cronman.scheduler.fires import LOCK_TTL_MS
from cronman.timeutil import now_ms
from tests.chaos.checker import Fault
from tests.chaos.netns import Namespace
from tests.chaos.proxy import DelayProxy
from tests.chaos.services import (
    ContainerAgent,
    DatabaseOutage,
    FailoverPostgres,
    FailoverRedis,
    WorkerProcess,
)
from tests.cluster.harness import Cluster
from tests.support.clockshim import Clock
from tests.support.processes import CronmanProcess, Processes

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

PARTITIONS = {"partition_redis": ("redis",), "partition_db": ("db",),
              "partition_receiver": ("receiver",),
              "partition_all": ("redis", "db", "receiver")}
LINKS = ("link_delay", "link_loss")  # the partition node's links made slow or lossy
JUMPS = ("clock_jump_forward", "clock_jump_back")  # the clock node's running clock stepped
NODE_KINDS = ("pause_short", "pause_long", "pause_past_lock", "kill_node", "clock_forward",
              "clock_back", *PARTITIONS, *LINKS, *JUMPS)
SERVICE_KINDS = ("kill_api", "slow_receiver", "kill_agent", "kill_worker")
BACKEND_KINDS = ("redis_failover", "pg_outage", "patroni_failover")
KINDS = NODE_KINDS + SERVICE_KINDS + BACKEND_KINDS
# The kinds of the short run in the test command: those it passes with on
# this machine (the others are drawn by ``cronman bench --scenario chaos``).
SHORT_KINDS = ("pause_short", "pause_long", "pause_past_lock", "kill_node", "clock_forward",
               "clock_back", *PARTITIONS, "kill_api", "slow_receiver", *JUMPS)
TARGETS = {"kill_api": "api", "slow_receiver": "receiver", "kill_agent": "agent",
           "kill_worker": "worker", "redis_failover": "redis", "pg_outage": "postgresql",
           "patroni_failover": "postgresql"}
END_MARGIN_S = 5.0  # every fault is over this long before the window ends
# A backend fault starts at least this long after the node or backend fault
# before it ended, and the one after it at least this long after it ended:
# the nodes write the run rows they kept through a database outage, and find
# a promoted Redis primary again, before the next failure (a Redis failover
# while a node still holds the rows of fires it sent under the Redis lock
# alone is two faults at once: another node, claiming through the database
# fence, finds no row and sends them again).
BACKEND_SETTLE_S = 5.0
MAX_SKEW_S = DEFAULT_MAX_CLOCK_SKEW  # the nodes' CRONMAN_MAX_CLOCK_SKEW (the suite keeps it)


@dataclass(frozen=True, slots=True)
class Planned:
    """A fault to apply: ``at_s`` into the window, for ``duration_s``."""

    kind: str
    target: str
    at_s: float
    duration_s: float
    amount: float = 0.0  # slow_receiver: seconds per answer; clock_*: offset seconds


def plan(seed: int, window_s: float, nodes: Sequence[str], *, kinds: Sequence[str] = KINDS,
         ttl_s: float, lease_s: float, clock_node: str | None = None,
         partition_node: str | None = None,
         gap_s: tuple[float, float] = (2.0, 6.0)) -> list[Planned]:
    """The faults of one run: the same seed, window, nodes and kinds give the
    same schedule. Node faults one after another with random gaps, each kind
    drawn in turn from a shuffled cycle of ``kinds`` (so every kind comes up
    before any repeats); the service faults on their own timeline."""
    rng = random.Random(seed)
    end = window_s - END_MARGIN_S
    lock_s = LOCK_TTL_MS / 1000
    node_kinds = [k for k in kinds if k in NODE_KINDS
                  and (k != "pause_past_lock" or window_s > lock_s + 30)
                  and (not k.startswith("clock") or clock_node is not None)
                  and (k not in (*PARTITIONS, *LINKS) or partition_node is not None)]
    service_kinds = [k for k in kinds if k in SERVICE_KINDS]
    backend_kinds = [k for k in kinds if k in BACKEND_KINDS]
    out: list[Planned] = []
    for timeline, chosen in ((node_kinds, True), (service_kinds, False),
                             (backend_kinds, False)):
        t = rng.uniform(1.0, 4.0)
        cycle: list[str] = []
        misses = 0
        while timeline and misses < 2 * len(timeline):
            if not cycle:
                cycle = list(timeline)
                rng.shuffle(cycle)
            kind = cycle.pop()
            duration, amount = _draw(rng, kind, ttl_s, lease_s, lock_s)
            if t + duration > end:
                misses += 1  # something shorter may still fit
                continue
            misses = 0
            if not chosen:
                target = TARGETS[kind]
            elif kind.startswith("clock"):
                target = clock_node
            elif kind in (*PARTITIONS, *LINKS):
                target = partition_node
            else:
                target = rng.choice(list(nodes))
            out.append(Planned(kind, str(target), round(t, 3), round(duration, 3),
                               round(amount, 3)))
            t += duration + rng.uniform(*gap_s)
    out.sort(key=lambda p: p.at_s)
    return out


def _draw(rng: random.Random, kind: str, ttl_s: float, lease_s: float, lock_s: float
          ) -> tuple[float, float]:
    """(duration, amount) of one fault of ``kind``."""
    if kind == "pause_short":
        return rng.uniform(0.3, max(0.4, ttl_s * 0.8)), 0.0
    if kind == "pause_long":
        return rng.uniform(max(ttl_s, lease_s) + 1.0, 2 * max(ttl_s, lease_s) + 2.0), 0.0
    if kind == "pause_past_lock":
        return rng.uniform(lock_s + 5.0, lock_s + 20.0), 0.0
    if kind == "kill_node":
        return rng.uniform(1.0, 4.0), 0.0
    if kind == "kill_api":
        return rng.uniform(0.5, 3.0), 0.0
    if kind == "slow_receiver":
        return rng.uniform(3.0, 8.0), rng.uniform(1.0, 4.0)
    if kind in PARTITIONS:
        return rng.uniform(2.0, max(ttl_s, lease_s) * 2 + 2.0), 0.0
    if kind == "link_delay":
        return rng.uniform(4.0, 10.0), rng.uniform(0.1, 0.5)
    if kind == "link_loss":
        return rng.uniform(4.0, 10.0), rng.uniform(0.01, 0.05)
    if kind in ("kill_agent", "kill_worker"):
        return rng.uniform(0.5, 3.0), 0.0
    if kind == "redis_failover":
        return 8.0, 0.0  # planned room; the failover takes what it takes
    if kind == "pg_outage":
        return rng.uniform(2.0, 8.0), 0.0
    if kind == "patroni_failover":
        # planned room: the promotion takes Patroni's ttl (10 s), the rejoin
        # a few seconds more (a pg_rewind); the failover takes what it takes
        return 30.0, 0.0
    if kind == "clock_forward":
        return rng.uniform(6.0, 12.0), rng.uniform(2.0, 30.0)
    if kind == "clock_back":
        return rng.uniform(6.0, 12.0), -rng.uniform(2.0, 30.0)
    if kind in JUMPS:
        within = rng.random() < 1 / 3  # corrected for, or past the bound
        by = rng.uniform(0.2, 0.9) * MAX_SKEW_S if within else rng.uniform(2.0, 30.0)
        return rng.uniform(4.0, 12.0), by if kind == "clock_jump_forward" else -by
    raise ValueError(f"unknown fault kind {kind!r}")


def _held(seconds: float, on: Callable[[], object], off: Callable[[], object]) -> None:
    """A fault held for ``seconds``: ``on()``, then ``off()`` whatever happens."""
    on()
    try:
        time.sleep(seconds)
    finally:
        off()


def faketime_env(offset_s: float) -> dict[str, str]:
    """The environment that runs a process with its clock ``offset_s`` off."""
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": f"{offset_s:+.3f}"}


class ApiProcess:
    """``cronman api`` on a fixed loopback port, killable by PID with its workers."""

    def __init__(self, procs: Processes, database_url: str, redis_url: str, port: int
                 ) -> None:
        self.procs = procs
        self.port = port
        self.args = ["api", "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "4",
                     "--database-url", database_url, "--redis-url", redis_url]
        self.proc: CronmanProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> ApiProcess:
        """Start it and wait until it listens (long on a loaded machine)."""
        self.proc = self.procs.start("api", self.args, {"TZ": "UTC"})
        self.proc.wait_for_log("cronman api listening on", timeout=timeout)
        return self

    def kill(self) -> None:
        """SIGKILL the master and every worker it forked, by PID."""
        if self.proc is None:
            return
        workers = _children(self.proc.pid)
        self.proc.kill()
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in workers:
            _wait_gone(pid)

    def stop(self) -> None:
        if self.proc is not None and self.proc.running():
            self.proc.stop(20.0)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(x) for x in task.read_text().split()]
        except OSError:
            continue
    return out


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):  # a zombie of a process we did not start: gone enough
            return
        time.sleep(0.05)


class Nemesis:
    """Applies a plan to a cluster, its API and the receiver's proxy, each
    fault on a thread of its own at its time; ``faults`` logs what was done."""

    def __init__(self, cluster: Cluster, *, api: ApiProcess | None, proxy: DelayProxy | None,
                 netns: Namespace | None = None,
                 link_proxies: Mapping[str, Sequence[DelayProxy]] | None = None,
                 redis: FailoverRedis | None = None, outage: DatabaseOutage | None = None,
                 agent: ContainerAgent | None = None, worker: WorkerProcess | None = None,
                 postgres: FailoverPostgres | None = None,
                 clock: Clock | None = None, log: list[str] | None = None) -> None:
        self.cluster = cluster
        self.api = api
        self.proxy = proxy
        # the partition node's namespace (its links: redis, db, receiver) and
        # the proxies on those links (redis: one per port)
        self.netns = netns
        self.link_proxies = {name: list(ps) for name, ps in (link_proxies or {}).items()}
        self.redis = redis
        self.outage = outage
        self.agent = agent
        self.worker = worker
        self.postgres = postgres
        self.clock = clock  # the clock node's wall clock (the shim's offset)
        self.faults: list[Fault] = []
        self.errors: list[str] = []
        self.log = log if log is not None else []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        # Node and backend faults never overlap (one node down at a time; a
        # Redis failover or a PostgreSQL outage is one failure, not one on top
        # of a node cut off from the other backend: SPEC's promise is for any
        # single failure), nor two faults of one service kind: one that comes
        # due while the one before it is still under way (a failover, a slow
        # restart) waits for it, and is left out if it could then not end in
        # the window. Next to a backend fault the node group keeps
        # ``BACKEND_SETTLE_S`` between one fault's end and the next one's start.
        self._serial = {k: threading.Lock() for k in ("node", *SERVICE_KINDS)}
        self._last: dict[str, Fault] = {}  # each group's latest fault applied
        self._end_ms = 0
        self.stopped: set[str] = set()  # nodes under SIGSTOP now

    def start(self, planned: Sequence[Planned], window_start_ms: int,
              window_end_ms: int | None = None) -> None:
        self._end_ms = window_end_ms or 0
        t = threading.Thread(target=self._run, args=(list(planned), window_start_ms),
                             name="nemesis", daemon=True)
        t.start()
        self._threads.append(t)

    def _run(self, planned: list[Planned], window_start_ms: int) -> None:
        for p in planned:
            wait = (window_start_ms + p.at_s * 1000 - now_ms()) / 1000
            if wait > 0:
                time.sleep(wait)
            t = threading.Thread(target=self._apply, args=(p,), name=f"fault-{p.kind}",
                                 daemon=True)
            t.start()
            with self._lock:
                self._threads.append(t)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"faults still under way: {[t.name for t in alive]}")
            alive[0].join(0.2)

    def _apply(self, p: Planned) -> None:
        group = "node" if p.kind in (*NODE_KINDS, *BACKEND_KINDS) else p.kind
        with self._serial[group]:
            last = self._last.get(group)
            if last is not None and (
                    last.kind in BACKEND_KINDS or p.kind in BACKEND_KINDS):
                settle = (last.end_ms + BACKEND_SETTLE_S * 1000 - now_ms()) / 1000
                if settle > 0:
                    time.sleep(settle)
            start = now_ms()
            if self._end_ms and start + (p.duration_s + END_MARGIN_S) * 1000 > self._end_ms:
                self.log.append(f"fault left out (its kind was busy until too late): {p}")
                return
            detail = ""
            try:
                detail = self._do(p)
            except Exception as exc:  # noqa: BLE001 - reported by the run
                self.errors.append(f"{p}: {type(exc).__name__}: {exc}")
            fault = Fault(p.kind, p.target, start, now_ms(), detail)
            self._last[group] = fault
        with self._lock:
            self.faults.append(fault)
        self.log.append(f"fault: {fault}")

    def _do(self, p: Planned) -> str:
        c = self.cluster
        if p.kind.startswith("pause"):
            pid = c.nodes[p.target].proc.pid
            self.stopped.add(p.target)
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(p.duration_s)
            finally:
                os.kill(pid, signal.SIGCONT)
                self.stopped.discard(p.target)
            return f"SIGSTOP/SIGCONT of pid {pid}"
        if p.kind == "kill_node":
            pid = c.nodes[p.target].proc.pid
            c.kill(p.target)
            time.sleep(p.duration_s)
            c.restart(p.target, wait=False)
            return f"SIGKILL of pid {pid}, restarted as pid {c.nodes[p.target].proc.pid}"
        if p.kind == "kill_api":
            api = self.api
            if api is None or api.proc is None:
                return "no API process"
            pid = api.proc.pid
            api.kill()
            time.sleep(p.duration_s)
            api.start()
            return f"SIGKILL of pid {pid} and its workers, restarted"
        if p.kind == "slow_receiver":
            if self.proxy is None:
                return "no proxy"
            proxy = self.proxy
            _held(p.duration_s, lambda: proxy.set_delay(p.amount), lambda: proxy.set_delay(0.0))
            return f"{p.amount:.1f} s per answer"
        if p.kind in PARTITIONS:
            if self.netns is None:
                return "no network namespace"
            names, netns = PARTITIONS[p.kind], self.netns
            _held(p.duration_s, lambda: netns.cut(names), lambda: netns.heal(names))
            return "links down: " + ", ".join(names)
        if p.kind in LINKS:
            links = [x for ps in self.link_proxies.values() for x in ps]
            if not links:
                return "no partition proxies"
            def worsen() -> None:
                for proxy in links:
                    (proxy.set_delay if p.kind == "link_delay" else proxy.set_loss)(p.amount)

            def mend() -> None:
                for proxy in links:
                    proxy.set_delay(0.0)
                    proxy.set_loss(0.0)

            _held(p.duration_s, worsen, mend)
            if p.kind == "link_delay":
                return f"{p.amount * 1000:.0f} ms per answer on its links"
            return (f"{p.amount:.1%} loss per chunk on its links "
                    f"({sum(x.dropped for x in links)} connections dropped so far)")
        if p.kind == "redis_failover":
            if not isinstance(self.redis, FailoverRedis):
                return "no Sentinel"
            return self.redis.failover()
        if p.kind == "patroni_failover":
            if self.postgres is None:
                return "no Patroni"
            return self.postgres.failover()
        if p.kind == "pg_outage":
            if self.outage is None:
                return "no database"
            outage, ended = self.outage, []
            _held(p.duration_s, lambda: ended.append(outage.begin()), outage.end)
            return f"the database refused connections, {ended[0]} open ones terminated"
        if p.kind in ("kill_agent", "kill_worker"):
            proc = self.agent if p.kind == "kill_agent" else self.worker
            if proc is None:
                return "not running"
            pid = proc.kill()
            time.sleep(p.duration_s)
            proc.start()
            return f"SIGKILL of pid {pid}, started again"
        if p.kind in JUMPS:
            if self.clock is None:
                return "no clock shim"
            clock = self.clock
            _held(p.duration_s, lambda: clock.set(p.amount), lambda: clock.set(0.0))
            return f"its running clock stepped {p.amount:+.1f} s, then set right"
        if p.kind.startswith("clock"):
            c.terminate(p.target)
            c.start_node(p.target, wait=False, env=faketime_env(p.amount))
            time.sleep(p.duration_s)
            c.terminate(p.target)
            c.start_node(p.target, wait=False)
            return f"restarted with its clock {p.amount:+.1f} s off, then restarted right"
        raise ValueError(f"unknown fault kind {p.kind!r}")

    def release(self) -> None:
        """SIGCONT every node still stopped, heal every partition, set the clock
        right (a run that ends early)."""
        if self.netns is not None:
            self.netns.heal()
        if self.outage is not None:
            self.outage.end()
        if self.clock is not None:
            self.clock.set(0.0)
        for node_id in list(self.stopped):
            try:
                os.kill(self.cluster.nodes[node_id].proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
