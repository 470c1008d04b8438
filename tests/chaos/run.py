"""One chaos run end to end, for ``test_chaos`` and ``cronman bench --scenario chaos``.

``chaos_rig`` makes what a run needs (a migrated scratch database on the
machine's PostgreSQL, or on request on a test-started Patroni cluster whose
multi-host URL every process is given, Redis under Sentinel, the nginx
receiver behind the nemesis' proxy, ``cronman api`` on a loopback port, a
``Cluster`` of scheduler nodes, and on request ``cronman worker`` and a
container agent on a private containerd) and stops it all afterwards. ``run_chaos`` then starts the
nodes, writes the jobs -- a steady group spread evenly, a herd (many jobs
due on the same second), ``worker`` and container jobs when their processes
run, and ``at_most_once`` jobs -- waits for a warm-up (its last 3 s give the steady lateness), lets the nemesis apply its
seeded plan over the window while an API writer creates and updates jobs,
lets stragglers land, stops everything and hands the checker the fires
owed, the receiver's log, the run table, the faults and the writes
answered 2xx.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from cronman.store import open_store
from cronman.store.connect import normalise_url
from cronman.timeutil import format_rfc3339, now_ms, to_ms, utcnow
from cronman.vocabulary import DEFAULT_MIN_BACKOFF, IN_FLIGHT_STATUSES
from cronman_bench.patroni import TTL_S as PATRONI_TTL_S
from cronman_bench.receiver import Arrival
from cronman_bench.workload import BENCH_NAMESPACE, Mix, Workload
from tests.chaos.checker import Bounds, LogLine, Result, RunRow, Write, check, parse_log, report
from tests.chaos.nemesis import JUMPS, KINDS, ApiProcess, Nemesis, Planned, plan
from tests.chaos.netns import IP, Namespace, free_subnets
from tests.chaos.proxy import DelayProxy
from tests.chaos.services import (
    WORK_S,
    ContainerAgent,
    DatabaseOutage,
    FailoverPostgres,
    FailoverRedis,
    PlainRedis,
    WorkerProcess,
    container_target,
    failover_postgres,
    failover_redis,
    plain_redis,
    worker_target,
)
from tests.cluster.harness import TEST_LEASE_SECONDS, Cluster, Fires, node_env
from tests.cluster.scenario import sleep_until
from tests.support import clockshim
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes, free_port
from tests.support.store_jobs import create_jobs_in_store

API_NAMESPACE = "chaos-api"
BASELINE_MS = 3_000  # the fires due this long before the window: the steady state

SLACK_MS = 5_000  # the machine is shared: a loaded loop, a slow restart, a slow commit
REQUEST_TIMEOUT_S = 10.0  # the workload's HTTP targets' ``timeout``
WORKER_HEARTBEAT_TIMEOUT_S = 4.0  # ``services.worker_target``'s


def documented_bounds(ttl_s: float, lease_s: float) -> Bounds:
    """How late a fire may be near each fault kind, from the timings the
    README and docs/cluster.md document for the cluster's settings, plus
    ``SLACK_MS`` once (the checker adds each fault's own length, and sums
    the faults near a fire):

    - a node gone (paused past the TTL, killed, restarted with its clock
      off, cut off from a backend, a backend failing over): its replica
      fires after the heartbeat TTL; a request it had in flight is sent
      again once its lease lapsed and the next sweep (``lease / 3``, 0.5 to
      5 s) found it;
    - the receiver unreachable, slow or lossy: a request times out
      (``REQUEST_TIMEOUT_S``) and is retried after the first backoff;
    - ``cronman worker`` killed: its runs' leases lapse after their
      ``heartbeat_timeout`` and they are queued again (then a sweep, a
      claim, ``services.WORK_S`` of work);
    - the container agent killed: it reattaches when back, or its runs'
      leases lapse as a node's do.
    """
    sweep_s = max(0.5, min(5.0, lease_s / 3))
    takeover = int((ttl_s + lease_s + sweep_s) * 1000)
    resend = int((REQUEST_TIMEOUT_S + DEFAULT_MIN_BACKOFF) * 1000)
    requeue = int((WORKER_HEARTBEAT_TIMEOUT_S + sweep_s + WORK_S + 2.0) * 1000)
    late = {"pause_short": 0}
    late.update(dict.fromkeys(("pause_long", "pause_past_lock", "kill_node", "clock_forward",
                               "clock_back", "partition_redis", "partition_db",
                               "redis_failover", "pg_outage", "kill_agent"), takeover))
    late.update(dict.fromkeys(("slow_receiver", "partition_receiver", "link_delay",
                               "link_loss"), resend))
    late["partition_all"] = max(takeover, resend)
    late["kill_worker"] = requeue
    late.update(dict.fromkeys(("clock_jump_forward", "clock_jump_back"), takeover))
    # Patroni's ``ttl`` (the rig's: cronman_bench.patroni) without a primary:
    # worker runs wait for the queue's database meanwhile.
    late["patroni_failover"] = takeover + PATRONI_TTL_S * 1000
    # The API killed: a worker run claimed before loses its heartbeats and is
    # queued again; one waiting is claimed once the API is back.
    late["kill_api"] = requeue
    # A fire in flight when a fault hits is as near it as one due during it.
    before = int(REQUEST_TIMEOUT_S * 1000)
    return Bounds(early_ms=100, late_ms=SLACK_MS, late_by_kind=late, before_ms=before,
                  default_after_ms=15_000)


@dataclass(frozen=True)
class ChaosConfig:
    """One run's parameters; the seed makes its fault schedule."""

    seed: int
    window_s: float = 75.0
    nodes: int = 3
    steady_jobs: int = 400
    steady_every_s: int = 4
    herd_jobs: int = 300
    herd_every_s: int = 10
    # at_most_once jobs without retries: a kill records their runs lost instead
    # of sending them again, so none may ever arrive twice
    at_most_once_jobs: int = 100
    at_most_once_every_s: int = 5
    # worker jobs (taken by ``cronman worker``) and container jobs (run by the
    # agent); 0: that process is not started and its fault not drawn
    worker_jobs: int = 0
    worker_every_s: int = 5
    container_jobs: int = 0
    container_every_s: int = 10
    kinds: tuple[str, ...] = KINDS
    warmup_s: float = 5.0
    settle_s: float = 15.0
    settle_max_s: float = 60.0  # then longer while runs of the window are still in flight
    api_writes_per_s: float = 3.0
    bounds: Bounds | None = None  # None: ``documented_bounds`` of the cluster's TTL and lease

    @property
    def rate(self) -> float:
        return (self.steady_jobs / self.steady_every_s + self.herd_jobs / self.herd_every_s
                + self.at_most_once_jobs / self.at_most_once_every_s
                + self.worker_jobs / self.worker_every_s
                + self.container_jobs / self.container_every_s)


PARTITION_NODE = "n2"  # runs in a network namespace of its own, when root


@dataclass
class Rig:
    cluster: Cluster
    fires: Fires
    proxy: DelayProxy
    api: ApiProcess
    procs: Processes
    db_url: str
    outage: DatabaseOutage
    redis: FailoverRedis | PlainRedis
    # The partition node's namespace (None: no partitions) and the proxies on
    # its links (redis: one per port, db, receiver).
    netns: Namespace | None = None
    link_proxies: dict[str, list[DelayProxy]] = field(default_factory=dict)
    worker: WorkerProcess | None = None
    agent: ContainerAgent | None = None
    postgres: FailoverPostgres | None = None  # the database is on Patroni
    clock: clockshim.Clock | None = None  # the clock node's wall clock; None: no shim (gcc)

    def kinds(self, wanted: Sequence[str]) -> tuple[str, ...]:
        """The fault kinds of ``wanted`` this rig can apply."""
        missing = {"kill_worker": self.worker is None, "kill_agent": self.agent is None,
                   "redis_failover": not isinstance(self.redis, FailoverRedis),
                   "patroni_failover": self.postgres is None,
                   **{k: self.clock is None for k in JUMPS}}
        return tuple(k for k in wanted if not missing.get(k, False))


@dataclass
class ChaosOutcome:
    config: ChaosConfig
    planned: list[Planned]
    result: Result
    logs: list[LogLine]
    errors: list[str] = field(default_factory=list)  # the nemesis' and the writer's
    writes: int = 0
    write_failures: int = 0
    lines: list[str] = field(default_factory=list)  # the run's own log
    groups: dict[str, str] = field(default_factory=dict)  # job id -> its group's name

    def report(self, limit: int = 10) -> str:
        head = [f"seed {self.config.seed}, window {self.config.window_s:.0f} s, "
                f"{self.config.nodes} nodes, {self.config.rate:.0f} fires/s "
                f"(herd of {self.config.herd_jobs} every {self.config.herd_every_s} s, "
                f"{self.config.at_most_once_jobs} at_most_once jobs), "
                f"API writes answered 2xx {self.writes} (refused or unanswered "
                f"{self.write_failures})", *self.lines]
        if self.errors:
            head.append("errors: " + "; ".join(self.errors))
        return "\n".join(head) + "\n" + report(self.result, self.logs, limit)


@contextmanager
def chaos_rig(workdir: Path, nodes_env: dict[str, str] | None = None,
              partitions: bool = True, *, worker: bool = False, agent: bool = False,
              sentinel: bool = True, patroni: bool = False) -> Iterator[Rig]:
    """Everything a run needs, stopped and dropped afterwards. With
    ``partitions`` (and root), node ``PARTITION_NODE`` runs in a network
    namespace of its own and reaches the backends through proxies. ``worker``
    and ``agent``: run ``cronman worker`` and a container agent (root);
    ``sentinel``: Redis under Sentinel (else one redis-server); ``patroni``:
    the database on a Patroni cluster of three members in synchronous mode
    (root or postgres: ``tests.support.patroni``), else a scratch database of
    the machine's PostgreSQL."""
    workdir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        postgres = stack.enter_context(failover_postgres()) if patroni else None
        url = (postgres.url if postgres is not None
               else stack.enter_context(migrated_pg_database("cronman_chaos")))
        outage = DatabaseOutage(url)
        stack.callback(outage.end)
        redis = stack.enter_context(failover_redis() if sentinel else plain_redis())
        procs = stack.enter_context(Processes(workdir))
        fires = Fires(workdir / "nginx").start()
        stack.callback(fires.cleanup)
        proxy = DelayProxy(("127.0.0.1", fires.rx.port)).start()
        stack.callback(proxy.stop)
        api = ApiProcess(procs, url, redis.url, free_port())
        stack.callback(api.stop)
        env = {**node_env(), "TZ": "UTC", **(nodes_env or {})}
        cluster = Cluster(procs, url, redis.url, env)

        def kill_nodes() -> None:
            for node in cluster.running():
                node.proc.kill()

        stack.callback(kill_nodes)
        rig = Rig(cluster, fires, proxy, api, procs, url, outage, redis, postgres=postgres)
        if worker:
            rig.worker = WorkerProcess(procs, api.url, proxy.url, BENCH_NAMESPACE)
            stack.callback(rig.worker.stop)
        if agent:
            rig.agent = ContainerAgent(procs, workdir, redis.url, env)
            stack.callback(rig.agent.stop)
            rig.agent.start_containerd()
        if clockshim.unavailable() is None:
            rig.clock = stack.enter_context(clockshim.Clock(workdir / "clock-node.offset"))
        if partitions and os.geteuid() == 0 and os.path.exists(IP):
            links = ("receiver", "redis", "db")
            ns = Namespace(f"cmchaos-{os.getpid()}",
                           dict(zip(links, free_subnets(len(links), os.getpid() % 64),
                                    strict=True)))
            stack.callback(ns.delete)
            _partitionable(rig, ns.create(), workdir)
        yield rig


def _partitionable(rig: Rig, ns: Namespace, workdir: Path) -> None:
    """Put ``PARTITION_NODE`` in ``ns``, each backend over a link of its own
    through a proxy on its host end: each loopback port it is told of (the
    receiver's, the sentinels' and the Redis servers') forwarded inside to
    that proxy."""
    rig.netns = ns
    inside = {"receiver": [rig.proxy.port], "redis": rig.redis.ports}
    forwards: dict[int, tuple[str, int]] = {}
    for name, ports in inside.items():
        host_ip = ns.links[name].host_ip
        for port in ports:
            proxy = DelayProxy(("127.0.0.1", port), host=host_ip).start()
            rig.link_proxies.setdefault(name, []).append(proxy)
            forwards[port] = (host_ip, proxy.port)
    rig.link_proxies["db"] = [DelayProxy(member, host=ns.links["db"].host_ip).start()
                              for member in db_endpoints(rig.db_url)]
    log = workdir / "ns-forwarder.log"
    ns.forward(forwards, log)
    deadline = time.monotonic() + 20
    while (log.read_text() if log.exists() else "").count("forwarding") < len(forwards):
        if time.monotonic() > deadline:
            raise AssertionError(f"the namespace's forwarder did not start: {log.read_text()}")
        time.sleep(0.05)
    host_ip = ns.links["db"].host_ip
    db_url = with_db_endpoints(rig.db_url, [(host_ip, p.port) for p in rig.link_proxies["db"]])
    rig.cluster.add_node(PARTITION_NODE, database_url=db_url, prefix=ns.prefix)


def db_endpoints(database_url: str) -> list[tuple[str, int]]:
    """The (host, port) of each server the URL names, in its order (one, or
    each member of a multi-host URL)."""
    url = normalise_url(database_url)
    hosts = url.query.get("host")
    if not isinstance(hosts, str):
        return [(url.host or "127.0.0.1", url.port or 5432)]
    ports = url.query.get("port")
    listed = ports.split(",") if isinstance(ports, str) else []
    return [(h or "127.0.0.1", int(listed[i]) if i < len(listed) and listed[i] else 5432)
            for i, h in enumerate(hosts.split(","))]


def with_db_endpoints(database_url: str, endpoints: Sequence[tuple[str, int]]) -> str:
    """``database_url`` naming ``endpoints`` instead of its servers (one:
    in the netloc; several: ``host=h:p`` each, the URL's other options kept)."""
    url = normalise_url(database_url)
    query = {k: v for k, v in url.query.items() if k not in ("host", "port")}
    if len(endpoints) == 1:
        ((host, port),) = endpoints
        url = url.set(host=host, port=port, query=query)
    else:
        url = url.set(host=None, port=None,
                      query={**query, "host": tuple(f"{h}:{p}" for h, p in endpoints)})
    return url.render_as_string(hide_password=False)


def workload(config: ChaosConfig, base_ms: int, receiver_url: str) -> Mix:
    """The steady group, the herd, the worker and container groups, then the
    ``at_most_once`` group (all but the herd spread)."""
    groups = [
        Workload(count=config.steady_jobs, every_ms=config.steady_every_s * 1000,
                 base_ms=base_ms, name="steady"),
        Workload(count=config.herd_jobs, every_ms=config.herd_every_s * 1000,
                 base_ms=base_ms, spread=False, name="herd"),
    ]
    if config.worker_jobs:
        groups.append(Workload(count=config.worker_jobs, every_ms=config.worker_every_s * 1000,
                               base_ms=base_ms, name="work", target=worker_target()))
    if config.container_jobs:
        groups.append(Workload(count=config.container_jobs,
                               every_ms=config.container_every_s * 1000, base_ms=base_ms,
                               name="container", target=container_target(receiver_url)))
    if config.at_most_once_jobs:
        groups.append(Workload(count=config.at_most_once_jobs,
                               every_ms=config.at_most_once_every_s * 1000, base_ms=base_ms,
                               name="amo", delivery="at_most_once", max_attempts=1))
    return Mix(tuple(groups))


def run_chaos(rig: Rig, config: ChaosConfig,
              echo: Callable[[str], None] = lambda _line: None) -> ChaosOutcome:
    """Run ``config`` on ``rig`` and check it (see the module docstring)."""
    c = rig.cluster
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        echo(line)

    rig.api.start()
    kinds = rig.kinds(config.kinds)
    clock_node = f"n{config.nodes}"  # the last one started
    if rig.clock is not None and set(JUMPS) & set(kinds):
        # under the clock shim from its start, every incarnation
        (c.nodes.get(clock_node) or c.add_node(clock_node)).env.update(rig.clock.env())
    started = c.start(config.nodes)
    if rig.worker is not None:
        rig.worker.start()
    if rig.agent is not None:
        _allow_host_network(rig.db_url)
        rig.agent.start()
    node_ids = [n.node_id for n in started]
    lease_s = float(c.env.get("CRONMAN_LEASE_SECONDS", TEST_LEASE_SECONDS))
    planned = plan(config.seed, config.window_s, node_ids, kinds=kinds,
                   ttl_s=c.env_ttl(), lease_s=lease_s,
                   clock_node=clock_node,
                   partition_node=PARTITION_NODE if rig.netns else None)
    say("plan: " + "; ".join(f"{p.kind} {p.target} at +{p.at_s:.1f} s for {p.duration_s:.1f} s"
                             + (f" ({p.amount:+.1f})" if p.amount else "") for p in planned))
    base = (now_ms() // 1000 + 1) * 1000
    w = workload(config, base, rig.proxy.url)
    job_ids = create_jobs_in_store(rig.db_url, w, rig.proxy.url, "chaos")
    start = (now_ms() // 1000 + int(config.warmup_s)) * 1000
    end = start + int(config.window_s * 1000)
    nemesis = Nemesis(c, api=rig.api, proxy=rig.proxy, netns=rig.netns,
                      link_proxies=rig.link_proxies, redis=rig.redis,
                      outage=rig.outage, agent=rig.agent, worker=rig.worker,
                      postgres=rig.postgres, clock=rig.clock, log=lines)
    nemesis.start(planned, start, end)
    writer = ApiWriter(lambda: rig.api.url, config.api_writes_per_s, rig.proxy.url)
    sleep_until(start, c)
    writer.start()
    try:
        sleep_until(end, c)
    finally:
        writer.stop()
        try:
            nemesis.join(timeout=max(60.0, config.window_s))
        finally:
            nemesis.release()
    for node in c.running():
        c.wait_ready(node)
    time.sleep(config.settle_s)
    settle_in_flight(rig.db_url, start, end, config.settle_max_s)
    rows = read_runs(rig.db_url, start, end)
    jobs_now = read_versions(rig.db_url)
    c.stop_all()
    for proc in (rig.worker, rig.agent):
        if proc is not None:
            proc.stop()
    rig.api.stop()
    rig.fires.stop()
    owed = [(job_ids[i], t) for i, t in w.expected(start, end)]
    arrivals = rig.fires.arrivals()
    bounds = config.bounds or documented_bounds(c.env_ttl(), lease_s)
    result = check(owed, arrivals, rows, nemesis.faults, (start, end), bounds,
                   writes=writer.acked, jobs_now=jobs_now,
                   baseline_ms=baseline(arrivals, start - BASELINE_MS, start),
                   at_most_once={job_ids[i] for i in range(w.count)
                                 if w.local(i)[0].name == "amo"})
    logs = [ln for node in c.nodes.values() for p in node.incarnations
            for ln in parse_log(node.node_id, p.log_text())]
    # The API's, the worker's and the agent's too: a violation prints what
    # every process said around it, not only the nodes.
    nodes_procs = {id(p) for node in c.nodes.values() for p in node.incarnations}
    logs += [ln for p in rig.procs.started if id(p) not in nodes_procs
             for ln in parse_log(p.name, p.log_text())]
    logs.sort(key=lambda ln: ln.at_ms)
    groups = {job_ids[i]: w.local(i)[0].name for i in range(w.count)}
    return ChaosOutcome(config, planned, result, logs, nemesis.errors + writer.errors,
                        len(writer.acked), writer.failures, lines, groups)


def _allow_host_network(database_url: str) -> None:
    """The container jobs' namespace may ask for the host's network (their
    containers call the receiver on a loopback port)."""
    store = open_store(database_url)
    try:
        store.host_policies.put(BENCH_NAMESPACE, {"networks": ["none", "host"]}, by=None)
    finally:
        store.close()


def baseline(arrivals: list[Arrival], lo_ms: int, hi_ms: int) -> int | None:
    """The median lateness of the first arrivals of the fires due in [lo, hi):
    the steady state right before the nemesis starts."""
    first: dict[tuple[str, int], int] = {}
    for a in arrivals:
        if a.scheduled_ms is not None and lo_ms <= a.scheduled_ms < hi_ms:
            key = (a.job_id, a.scheduled_ms)
            first[key] = min(first.get(key, a.arrived_ms), a.arrived_ms)
    late = sorted(t - key[1] for key, t in first.items())
    return late[len(late) // 2] if late else None


def settle_in_flight(database_url: str, start_ms: int, end_ms: int, timeout: float) -> int:
    """Wait up to ``timeout`` s until no run of a fire due in [start, end) is
    in flight (claimed, running, retrying: a retry's backoff, a queued worker
    run); the number still in flight then."""
    deadline = time.monotonic() + timeout
    while True:
        rows = read_runs(database_url, start_ms, end_ms)
        busy = sum(1 for r in rows if r.status in IN_FLIGHT_STATUSES)
        if not busy or time.monotonic() > deadline:
            return busy
        time.sleep(1.0)


def read_runs(database_url: str, start_ms: int, end_ms: int) -> list[RunRow]:
    """The run table's rows of fires due in [start, end)."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text(
                "SELECT job_id, scheduled_for, id, status, attempt, error, node_id "
                "FROM scheduled_jobs WHERE scheduled_for >= to_timestamp(:lo) "
                "AND scheduled_for < to_timestamp(:hi)"),
                {"lo": start_ms / 1000, "hi": end_ms / 1000}).all()
    finally:
        engine.dispose()
    return [RunRow(r[0], to_ms(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in found]


def read_versions(database_url: str) -> dict[str, int]:
    """Job id -> version of the jobs the API writer wrote (deleted ones left out)."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text(
                "SELECT id, version FROM jobs WHERE namespace = :ns AND deleted_at IS NULL"),
                {"ns": API_NAMESPACE}).all()
    finally:
        engine.dispose()
    return {str(r[0]): int(r[1]) for r in found}


class ApiWriter:
    """Creates and updates jobs through the real API at a steady rate, keeping
    each write answered 2xx (``acked``); refused and unanswered ones are
    counted, never assumed lost or done. Its jobs fire a day from now."""

    def __init__(self, base: Callable[[], str], per_s: float, target_url: str) -> None:
        self._base = base
        self._every = 1.0 / per_s if per_s > 0 else 0.0
        self._target_url = target_url
        self.acked: list[Write] = []
        self.failures = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="api-writer", daemon=True)
        self._versions: dict[str, int] = {}

    def start(self) -> None:
        if self._every:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        k = 0
        while not self._stop.wait(self._every):
            k += 1
            try:
                if k % 2 and self._versions:
                    job_id = sorted(self._versions)[k % len(self._versions)]
                    self._update(job_id, k)
                else:
                    self._create(k)
            except (OSError, urllib.error.URLError, ValueError):
                self.failures += 1
            except Exception as exc:  # noqa: BLE001 - a bug of the writer: reported
                self.errors.append(f"API writer: {type(exc).__name__}: {exc}")
                return

    def _create(self, k: int) -> None:
        at = format_rfc3339((utcnow() + timedelta(days=1)).replace(microsecond=0))
        spec = {"name": f"w-{k}-{uuid.uuid4().hex[:6]}", "namespace": API_NAMESPACE,
                "schedule": {"kind": "once", "at": at},
                "target": {"kind": "http", "url": self._target_url}}
        status, body = self._call("POST", "/v1/jobs", spec)
        if status == 201:
            self._ack("create", body)
        else:
            self.failures += 1

    def _update(self, job_id: str, k: int) -> None:
        status, body = self._call("PATCH", f"/v1/jobs/{job_id}", {"labels": {"k": str(k)}})
        if status == 200:
            self._ack("update", body)
        else:
            self.failures += 1

    def _ack(self, op: str, body: Any) -> None:
        job_id, version = str(body["id"]), int(body["version"])
        self._versions[job_id] = version
        self.acked.append(Write(op, job_id, version, now_ms()))

    def _call(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        req = urllib.request.Request(self._base() + path, data=json.dumps(body).encode(),
                                     method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            exc.read()
            return exc.code, None
