"""The systems a phase measures: cronman, and the APScheduler peers.

``CronmanSystem``: N ``cronman scheduler`` nodes on a scratch PostgreSQL
database and a private redis-server, jobs created through the API.
``PeerSystem``: APScheduler 3.x in one process (memory or SQLAlchemy job
store, see ``cronman_bench.peer``). ``Aps4System``: APScheduler 4 in N
processes sharing its PostgreSQL data store (``cronman_bench.peer_aps4``,
run from its own virtualenv). Each says which processes are its own and of
which kind, for the CPU meter (``cronman_bench.cost``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cronman.config import DEFAULT_HEARTBEAT_TTL, DEFAULT_LEASE_SECONDS
from cronman.timeutil import now_ms
from cronman_bench import nodemetrics, peer_venv
from cronman_bench.cost import PidSource
from cronman_bench.jobs import create_jobs
from cronman_bench.nodelog import NodeLog
from cronman_bench.peer import APS4_KIND, peer_argv, peer_key
from cronman_bench.procs import BenchError, ManagedProcess, cronman_command, free_port
from cronman_bench.services import DEFAULT_ADMIN_URL, PgBackends, PrivateRedis, ScratchDatabase
from cronman_bench.workload import Jobs

Echo = Callable[[str], None]


@dataclass
class BenchOptions:
    """Settings shared by every phase of a benchmark run."""

    nodes: int = 3
    replicas: int = 2
    heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    warmup: float = 5.0
    drain_max: float = 60.0
    drain_idle: float = 5.0
    startup_timeout: float = 120.0  # start-up until the first callback
    admin_url: str = DEFAULT_ADMIN_URL
    keep: bool = False
    p99_limit_ms: int = 100
    workdir: Path = field(default_factory=lambda: Path(__import__("tempfile").mkdtemp(
        prefix="cronman-bench-")))
    echo: Echo = print
    node_argv: list[str] | None = None  # how to start a node (default: the cronman command)
    # Called with a scenario's partial result (max-rate after each trial), to save it.
    checkpoint: Callable[[dict[str, Any]], None] | None = None
    # Extra environment per node id (the skew scenario's libfaketime).
    node_env: dict[str, dict[str, str]] = field(default_factory=dict)
    peer_processes: int = 3  # APScheduler 4: scheduler processes sharing its data store


class System(Protocol):
    name: str
    processes: list[ManagedProcess]
    notes: list[str]

    def prepare(self, w: Jobs, url: str) -> list[str]:
        """Create state and the workload's jobs; return the job keys by index."""

    def start(self) -> None:
        """Start the processes; return once they run."""

    def counters(self) -> dict[str, int]:
        """Cumulative counters of the shared services (commits, commands)."""

    def kill_one(self) -> ManagedProcess | None:
        """SIGKILL one process (the kill scenario); None if not applicable."""

    def ready_ms(self) -> dict[str, int | None]:
        """Per process: when it said it had loaded its jobs (Unix ms), None until then
        (cronman: the node's ready line, or its last ownership change after it)."""

    def cpu_sources(self) -> list[tuple[str, PidSource]]:
        """The system's processes by kind (scheduler, postgresql, redis), for the meter."""

    def probe(self) -> dict[str, nodemetrics.Scrape | None]:
        """Each node's metrics now (empty for a system without them)."""

    def teardown(self) -> None:
        """Stop what is still running and remove scratch state."""


def _live_pids(procs: list[ManagedProcess]) -> PidSource:
    return lambda: [p.pid for p in procs if not p.exited()]


class CronmanSystem:
    """N scheduler nodes on a scratch PostgreSQL database and a private Redis;
    ``limits`` (definitions as ``POST /v1/limits`` takes them) are made before
    the jobs."""

    name = "cronman"

    def __init__(self, opts: BenchOptions, tag: str,
                 limits: Sequence[Mapping[str, Any]] = ()) -> None:
        self.opts = opts
        self.tag = tag
        self.limits = list(limits)
        self.db = ScratchDatabase(opts.admin_url)
        self.redis = PrivateRedis()
        self.processes: list[ManagedProcess] = []
        self.logs: dict[str, NodeLog] = {}
        self.metrics_ports: dict[str, int] = {}
        self.notes: list[str] = []
        self.backends = PgBackends(opts.admin_url, [self.db.name])
        self._torn_down = False

    def prepare(self, w: Jobs, url: str) -> list[str]:
        from cronman.store.migrate import upgrade

        echo = self.opts.echo
        self.db.create()
        upgrade(self.db.url)
        self.redis.start()
        t0 = time.monotonic()
        last = [t0]

        def progress(n: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 1.0 or n == w.count:
                last[0] = now
                echo(f"  [{self.tag}] created {n:,}/{w.count:,} jobs through the API "
                     f"({n / max(now - t0, 1e-6):,.0f}/s)")

        return create_jobs(self.db.url, w, url, self.tag, workdir=self.opts.workdir,
                           tag=self.tag, progress=progress, limits=self.limits)

    def node_env(self, node_id: str) -> dict[str, str]:
        env = {
            "CRONMAN_DATABASE_URL": self.db.url,
            "CRONMAN_REDIS_URL": self.redis.url,
            "CRONMAN_REPLICAS": str(min(self.opts.replicas, self.opts.nodes)),
            "CRONMAN_HEARTBEAT_TTL": str(self.opts.heartbeat_ttl),
            "CRONMAN_LEASE_SECONDS": str(self.opts.lease_seconds),
            "CRONMAN_ALLOW_PRIVATE_TARGETS": "true",
            "CRONMAN_NODE_ID": node_id,
        }
        env.update(self.opts.node_env.get(node_id, {}))
        return env

    def start(self) -> None:
        argv = self.opts.node_argv or cronman_command()
        for n in range(1, self.opts.nodes + 1):
            node_id = f"bench-{n}"
            port = free_port()
            self.metrics_ports[node_id] = port
            proc = ManagedProcess(
                node_id, [*argv, "scheduler", "--node-id", node_id, "--metrics-port", str(port),
                          "--metrics-host", "127.0.0.1"],
                log_path=self.opts.workdir / f"{self.tag}-{node_id}.log",
                env=self.node_env(node_id), inherit_env=True,
            )
            self.processes.append(proc)
            self.logs[node_id] = NodeLog(proc.log_path, proc.log_offset)
        time.sleep(0.5)
        for p in self.processes:
            if p.exited():
                raise BenchError(f"{p.name} exited with {p.returncode}: {p.log_tail()}")

    def counters(self) -> dict[str, int]:
        return {"pg_commits": self.db.xact_commit(),
                "redis_commands": self.redis.total_commands()}

    def kill_one(self) -> ManagedProcess | None:
        victim = next((p for p in self.processes if not p.exited()), None)
        if victim is not None:
            victim.kill()
        return victim

    def ready_ms(self) -> dict[str, int | None]:
        for log in self.logs.values():
            log.read()
        return {name: log.loaded_ms for name, log in self.logs.items()}

    def cpu_sources(self) -> list[tuple[str, PidSource]]:
        redis = self.redis
        return [("scheduler", _live_pids(self.processes)),
                ("postgresql", self.backends.pids),
                ("redis", lambda: [redis.proc.pid] if redis.proc is not None else [])]

    def probe(self) -> dict[str, nodemetrics.Scrape | None]:
        return {p.name: nodemetrics.scrape(self.metrics_ports[p.name])
                for p in self.processes if not p.exited()}

    def teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        for p in self.processes:
            p.stop()
        self.redis.stop()
        self.backends.close()
        if self.opts.keep:
            self.notes.append(f"kept database {self.db.name}")
            self.opts.echo(f"  [{self.tag}] kept database {self.db.url}")
        else:
            self.db.drop()


def _ready_at(path: Path) -> int:
    try:
        return int(float(path.read_text().split()[0]) * 1000)
    except (IndexError, ValueError, OSError):  # caught between the file's creation and write
        return now_ms()


class PeerSystem:
    """APScheduler 3.x in one process (memory or SQLAlchemy job store)."""

    def __init__(self, kind: str, opts: BenchOptions, tag: str) -> None:
        self.name = kind
        self.opts = opts
        self.tag = tag
        self.db = ScratchDatabase(opts.admin_url, prefix="cronman_benchcli_aps") \
            if kind == "apscheduler-sqlalchemy" else None
        self.backends = PgBackends(opts.admin_url, [self.db.name]) if self.db else None
        self.processes: list[ManagedProcess] = []
        self._argv: list[str] = []
        self._count = 0
        self._ready_at: int | None = None
        self.notes: list[str] = []
        self._torn_down = False

    def prepare(self, w: Jobs, url: str) -> list[str]:
        if self.db is not None:
            self.db.create()
        self._count = w.count
        ready = self.opts.workdir / f"{self.tag}.ready"
        ready.unlink(missing_ok=True)
        self._ready = ready
        self._argv = peer_argv(self.name, w, url, self.db.url if self.db else None, ready)
        return [peer_key(i) for i in range(w.count)]

    def ready_ms(self) -> dict[str, int | None]:
        """The peer is ready once its jobs are added and the scheduler started."""
        return {self.name: self._ready_at}

    def start(self) -> None:
        proc = ManagedProcess(self.name, self._argv,
                              log_path=self.opts.workdir / f"{self.tag}.log")
        self.processes.append(proc)
        deadline = time.monotonic() + 60 + self._count / 500
        last_echo = time.monotonic()
        while not self._ready.exists():
            if proc.exited():
                raise BenchError(f"{self.name} exited with {proc.returncode}: {proc.log_tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name} did not schedule its jobs in time")
            if time.monotonic() - last_echo > 2:
                last_echo = time.monotonic()
                self.opts.echo(f"  [{self.tag}] adding {self._count:,} jobs to APScheduler ...")
            proc.sample()
            time.sleep(0.1)
        self._ready_at = _ready_at(self._ready)

    def counters(self) -> dict[str, int]:
        return {"pg_commits": self.db.xact_commit()} if self.db is not None else {}

    def kill_one(self) -> ManagedProcess | None:
        return None

    def cpu_sources(self) -> list[tuple[str, PidSource]]:
        out: list[tuple[str, PidSource]] = [("scheduler", _live_pids(self.processes))]
        if self.backends is not None:
            out.append(("postgresql", self.backends.pids))
        return out

    def probe(self) -> dict[str, nodemetrics.Scrape | None]:
        return {}

    def teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        for p in self.processes:
            p.stop()
        if self.backends is not None:
            self.backends.close()
        if self.db is not None:
            if self.opts.keep:
                self.opts.echo(f"  [{self.tag}] kept database {self.db.url}")
            else:
                self.db.drop()


def aps4_schedules(w: Jobs, now: int) -> list[dict[str, Any]]:
    """One APScheduler 4 schedule per job: its first fire time from ``now`` on
    (inside its window) and the window's end (inclusive, as cronman's end_at)."""
    out = []
    for i in range(w.count):
        g, j = w.local(i)
        first = g.first_fire_ms(j, max(now, g.start_ms or now))
        out.append({"key": peer_key(i), "every_s": g.every_ms // 1000, "first_ms": first,
                    "end_ms": None if g.end_ms is None else g.end_ms - 1})
    return out


class Aps4System:
    """APScheduler 4: N scheduler processes sharing one PostgreSQL data store."""

    name = APS4_KIND

    def __init__(self, opts: BenchOptions, tag: str) -> None:
        self.opts = opts
        self.tag = tag
        self.db = ScratchDatabase(opts.admin_url, prefix="cronman_benchcli_aps4")
        self.backends = PgBackends(opts.admin_url, [self.db.name])
        self.processes: list[ManagedProcess] = []
        self.notes: list[str] = []
        self._ready: dict[str, Path] = {}
        self._ready_at: dict[str, int | None] = {}
        self._python = Path()
        self._url = ""
        self._torn_down = False

    @property
    def async_url(self) -> str:
        return self.db.url.replace("postgresql+psycopg2://", "postgresql+asyncpg://", 1)

    def prepare(self, w: Jobs, url: str) -> list[str]:
        if not peer_venv.is_ready():
            self.opts.echo(f"  [{self.tag}] making APScheduler 4's virtualenv in "
                           f"{peer_venv.venv_dir()} ...")
        self._python = peer_venv.ensure()
        self.db.create()
        self._url = url
        spec = self.opts.workdir / f"{self.tag}.schedules.json"
        spec.write_text(json.dumps(aps4_schedules(w, now_ms())))
        t0 = time.monotonic()
        setup = ManagedProcess(f"{self.name}-setup", [
            str(self._python), str(peer_venv.PEER_SCRIPT), "--database-url", self.async_url,
            "--setup", str(spec)], log_path=self.opts.workdir / f"{self.tag}-setup.log")
        while not setup.exited():
            if time.monotonic() - t0 > 60 + w.count / 100:
                setup.stop()
                raise BenchError(f"{self.name}: adding the schedules took too long")
            time.sleep(0.2)
        if setup.returncode != 0:
            raise BenchError(f"{self.name} set-up exited with {setup.returncode}: "
                             f"{setup.log_tail()}")
        setup.stop()
        self.opts.echo(f"  [{self.tag}] {w.count:,} schedules added in "
                       f"{time.monotonic() - t0:.1f} s")
        return [peer_key(i) for i in range(w.count)]

    def start(self) -> None:
        for n in range(1, self.opts.peer_processes + 1):
            name = f"aps4-{n}"
            ready = self.opts.workdir / f"{self.tag}-{name}.ready"
            ready.unlink(missing_ok=True)
            self._ready[name] = ready
            self._ready_at[name] = None
            self.processes.append(ManagedProcess(name, [
                str(self._python), str(peer_venv.PEER_SCRIPT), "--database-url", self.async_url,
                "--run", "--identity", name, "--receiver", self._url, "--ready-file",
                str(ready)], log_path=self.opts.workdir / f"{self.tag}-{name}.log"))
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in self._ready.values()):
            for proc in self.processes:
                if proc.exited():
                    raise BenchError(f"{proc.name} exited with {proc.returncode}: "
                                     f"{proc.log_tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name}: the schedulers did not start in time")
            time.sleep(0.1)
        self._ready_at = {n: _ready_at(p) for n, p in self._ready.items()}

    def counters(self) -> dict[str, int]:
        return {"pg_commits": self.db.xact_commit()}

    def kill_one(self) -> ManagedProcess | None:
        return None

    def ready_ms(self) -> dict[str, int | None]:
        return dict(self._ready_at)

    def cpu_sources(self) -> list[tuple[str, PidSource]]:
        return [("scheduler", _live_pids(self.processes)), ("postgresql", self.backends.pids)]

    def probe(self) -> dict[str, nodemetrics.Scrape | None]:
        return {}

    def teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        for p in self.processes:
            p.stop()
        self.backends.close()
        if self.opts.keep:
            self.opts.echo(f"  [{self.tag}] kept database {self.db.url}")
        else:
            self.db.drop()


PEERS: Mapping[str, Callable[[str, BenchOptions, str], System]] = {
    "apscheduler-memory": lambda k, o, t: PeerSystem(k, o, t),
    "apscheduler-sqlalchemy": lambda k, o, t: PeerSystem(k, o, t),
    APS4_KIND: lambda _k, o, t: Aps4System(o, t),
}
PEER_CHOICES = (*PEERS, "none")


def make_peer(kind: str, opts: BenchOptions, tag: str) -> System:
    return PEERS[kind](kind, opts, tag)
