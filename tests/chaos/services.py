"""The chaos run's fallible services besides the nodes and the API:

- ``FailoverRedis``: Redis under Sentinel (``PlainRedis``: one redis-server) (a primary, a replica, three
  sentinels on loopback); ``failover()`` SIGKILLs the primary, waits until
  the sentinels agree on the replica, then starts the old one again as the
  new primary's replica, so that the next failover finds one;
- ``FailoverPostgres``: the run's database on a test-started Patroni
  cluster (etcd and three members in synchronous mode on loopback);
  ``failover()`` SIGKILLs the primary member (its Patroni, postmaster and
  backends), waits until the cluster promotes a replica, then starts the old
  member again so that it rejoins as a replica;
- ``DatabaseOutage``: the run's PostgreSQL database taken away from every
  client (connections refused, the open ones terminated) and given back;
- ``WorkerProcess``: ``cronman worker`` taking the ``worker`` jobs' runs from
  the API, each command calling the receiver with the run's headers;
- ``ContainerAgent``: a private containerd holding the busybox test image and
  ``cronman agent`` in front of it, each container (host network) calling
  the receiver the same way.

The commands call the receiver after a second's work, so a SIGKILL of the
worker or the agent lands mid-run. Each kill is by PID, of a process started
here.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg2
import redis

from cronman.store.connect import libpq_params, normalise_url
from cronman.store.migrate import upgrade
from cronman_bench.patroni import Member, PatroniCluster
from tests.support.containerd import (
    TEST_IMAGE,
    ContainerdServer,
    build_busybox_image,
    containerd_available,
)
from tests.support.processes import CronmanProcess, Processes
from tests.support.redis_servers import (
    LOOPBACK,
    RedisProcess,
    SentinelSetup,
    redis_servers,
    sentinel_setup,
    wait_until,
)

WORK_S = 1  # each worker command's and container's work before it calls the receiver
QUEUE = "chaos"
HEADERS = (("Cronman-Job-Id", "CRONMAN_JOB_ID"), ("Cronman-Scheduled-For", "CRONMAN_SCHEDULED_FOR"),
           ("Cronman-Run-Id", "CRONMAN_RUN_ID"), ("Cronman-Attempt", "CRONMAN_ATTEMPT"))


def call_receiver(url: str, tool: str) -> str:
    """The shell command that works ``WORK_S`` s, then sends the run's headers
    to ``url`` with ``curl`` (host) or ``wget`` (busybox)."""
    if tool == "curl":
        hdrs = " ".join(f'-H "{h}: ${v}"' for h, v in HEADERS)
        send = f"curl -sS -o /dev/null -X POST --max-time 30 {hdrs} {url}"
    else:
        hdrs = " ".join(f'--header "{h}: ${v}"' for h, v in HEADERS)
        # No ``-T``: Debian's static busybox 1.35 wget dies of SIGSEGV with a
        # timeout set (exit 139); the job's own ``timeout`` bounds it.
        send = f"wget -q -O /dev/null --post-data= {hdrs} {url}"
    return f"sleep {WORK_S}; {send}"


def worker_target(heartbeat_timeout: int = 4) -> str:
    return json.dumps({"kind": "worker", "queue": QUEUE, "heartbeat_timeout": heartbeat_timeout,
                       "timeout": 60})


def container_target(url: str) -> str:
    return json.dumps({"kind": "container", "image": TEST_IMAGE, "network": "host",
                       "command": ["sh", "-c", call_receiver(url, "wget")], "cpu": 0.1,
                       "memory_mb": 32, "timeout": 60})


class FailoverRedis:
    """A Sentinel setup whose primary can be failed over again and again."""

    def __init__(self, setup: SentinelSetup, stack: ExitStack) -> None:
        self.setup = setup
        self._stack = stack
        assert setup.primary is not None and setup.replica is not None
        self.servers = {setup.primary.port: setup.primary, setup.replica.port: setup.replica}

    @property
    def url(self) -> str:
        return self.setup.url

    @property
    def ports(self) -> list[int]:
        """Every port a client may be sent to: the sentinels' and the servers'."""
        return [s.port for s in self.setup.sentinels] + sorted(self.servers)

    def failover(self, timeout: float = 60.0) -> str:
        old = self.setup.primary_port()
        if old is None:
            raise RuntimeError("the sentinels disagree on the primary")
        (new,) = [p for p in self.servers if p != old]
        self.servers[old].kill()
        wait_until(lambda: self.setup.primary_port() == new, timeout,
                   f"the sentinels to promote {new}")
        back = RedisProcess(self.servers[old].workdir, port=old,
                            args=["--replicaof", LOOPBACK, str(new)])
        self._stack.callback(back.stop)
        self.servers[old] = back.start()

        def synced() -> bool:
            # The sentinels may fail over again meanwhile (a primary slow to
            # answer on a loaded machine looks down to them): whichever
            # server they name, the other must replicate it.
            primary = self.setup.primary_port()
            if primary not in self.servers:
                return False
            (other,) = [p for p in self.servers if p != primary]
            try:
                with self.servers[other].client(decode_responses=True) as c:
                    info = c.info("replication")
            except redis.RedisError:
                return False
            return bool(info.get("master_link_status") == "up"
                        and int(info.get("master_port", 0)) == primary)

        try:
            wait_until(synced, timeout, f"a replica to follow the primary after {old}'s kill",
                       0.1)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; {old}'s log: {back.log_tail()}; {new}'s log: "
                               f"{self.servers[new].log_tail()}") from exc
        now = self.setup.primary_port()
        again = "" if now == new else f", then the sentinels failed over again to {now}"
        return (f"SIGKILL of primary {old}, {new} promoted, {old} back as its replica"
                f"{again}")


class PlainRedis:
    """One redis-server, nothing to fail over (the short run's Redis)."""

    def __init__(self, server: RedisProcess) -> None:
        self.server = server

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def ports(self) -> list[int]:
        return [self.server.port]


@contextmanager
def plain_redis() -> Iterator[PlainRedis]:
    with redis_servers(1) as servers:
        yield PlainRedis(servers[0])


@contextmanager
def failover_redis() -> Iterator[FailoverRedis]:
    with ExitStack() as stack:
        setup = stack.enter_context(sentinel_setup(down_after_ms=1000, failover_timeout_ms=3000))
        yield FailoverRedis(setup, stack)


PATRONI_DATABASE = "cronman_chaos"


class FailoverPostgres:
    """The run's database on a Patroni cluster whose primary can be failed
    over again and again (``synchronous_mode``, as docs/cluster.md advises:
    only the synchronous standby is promoted, so no acknowledged commit is
    lost)."""

    def __init__(self, cluster: PatroniCluster) -> None:
        self.cluster = cluster
        self.url = cluster.url(PATRONI_DATABASE)

    def failover(self, timeout: float = 90.0) -> str:
        """SIGKILL the primary member by PID, wait for the cluster's new
        leader, start the old member again and wait until it streams from
        that leader and a synchronous standby is recorded (the next
        failover's candidate)."""
        pg = self.cluster
        old = pg.wait_ready(timeout)
        pids = (old.patroni_pid(), old.postmaster_pid())
        started = time.monotonic()
        pg.kill_leader()
        new = pg.wait_leader(other_than=old, timeout=timeout)
        promoted = time.monotonic() - started
        pg.start_member(old)
        wait_until(lambda: _streams_from(pg, new, old), timeout,
                   f"{old.name} to stream from {new.name}", 0.2)
        pg.wait_ready(timeout)
        back = time.monotonic() - started - promoted
        return (f"SIGKILL of primary {old.name} (patroni pid {pids[0]}, postmaster pid "
                f"{pids[1]}), {new.name} promoted after {promoted:.1f} s, {old.name} back "
                f"as its replica {back:.1f} s later")


def _streams_from(pg: PatroniCluster, leader: Member, member: Member) -> bool:
    if member.role() != "replica":
        return False
    try:
        return bool(pg.query(leader, "SELECT 1 FROM pg_stat_replication WHERE "
                             f"application_name = '{member.name}' AND state = 'streaming'"))
    except psycopg2.Error:
        return False


@contextmanager
def failover_postgres(members: int = 3) -> Iterator[FailoverPostgres]:
    """A Patroni cluster of ``members`` with the run's database, migrated."""
    with PatroniCluster(members=members, scope="cronman-chaos") as pg:
        pg.create_database(PATRONI_DATABASE)
        db = FailoverPostgres(pg)
        upgrade(db.url)
        pg.wait_ready()
        yield db


class DatabaseOutage:
    """PostgreSQL gone for every node and the API, as when the server stops:
    the database refuses new connections (``ALLOW_CONNECTIONS false``) and
    its open ones are terminated; ``end()`` lets them in again. Only the
    run's own database is touched, nothing in the data path is a proxy.
    On Patroni the statements go to the primary (the run's multi-host URL,
    ``target_session_attrs=read-write``); the flag replicates to the
    replicas, so a member promoted meanwhile refuses the database too."""

    def __init__(self, database_url: str) -> None:
        url = normalise_url(database_url)
        self.name = url.database
        self._admin = {**libpq_params(url), "dbname": "postgres"}

    def _sql(self, *statements: str) -> int:
        conn = psycopg2.connect(**self._admin)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql, {"name": self.name})
                return cur.rowcount
        finally:
            conn.close()

    def begin(self) -> int:
        """Take the database away; the number of connections terminated."""
        return self._sql(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false',
                         "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %(name)s AND pid <> pg_backend_pid()")

    def end(self) -> None:
        self._sql(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')


class _Killable:
    """A process of the run that the nemesis SIGKILLs and starts again."""

    proc: CronmanProcess | None = None

    def kill(self) -> int:
        """SIGKILL by PID; the PID."""
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.kill()
        return pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.running():
            self.proc.stop(20.0)


class WorkerProcess(_Killable):
    """``cronman worker`` on the chaos queue, SIGKILLed and started again."""

    def __init__(self, procs: Processes, api_url: str, receiver_url: str, namespace: str,
                 concurrency: int = 16) -> None:
        self.procs = procs
        self.args = ["worker", "--queue", QUEUE, "--namespace", namespace, "--url", api_url,
                     "--worker-id", "w1",
                     "--concurrency", str(concurrency), "--wait", "2", "--kill-after", "1",
                     "--", "sh", "-c", call_receiver(receiver_url, "curl")]
        self.proc: CronmanProcess | None = None

    def start(self) -> WorkerProcess:
        self.proc = self.procs.start("worker", self.args)
        self.proc.wait_for_log("claiming from", timeout=60.0)
        return self



class ContainerAgent(_Killable):
    """A private containerd with the test image, and ``cronman agent`` on it."""

    def __init__(self, procs: Processes, workdir: Path, redis_url: str,
                 env: dict[str, str]) -> None:
        self.procs = procs
        self.redis_url = redis_url
        (workdir / "containerd").mkdir(parents=True, exist_ok=True)
        self.server = ContainerdServer(workdir / "containerd")
        self.env = {**env, "CRONMAN_CONTAINERD_ADDRESS": self.server.socket,
                    "CRONMAN_CONTAINERD_NAMESPACE": "chaos",
                    "CRONMAN_AGENT_STATE_DIR": str(self.server.dir / "fifos"),
                    # the containers call the receiver on a host loopback port
                    "CRONMAN_AGENT_HOST_POLICY": json.dumps({"networks": ["none", "host"]})}
        self.image = workdir / "busybox.tar"
        self.proc: CronmanProcess | None = None

    def start_containerd(self) -> None:
        why = containerd_available()
        if why:
            raise RuntimeError(f"the agent faults need a private containerd: {why}")
        self.server.start()
        build_busybox_image(self.image, TEST_IMAGE)
        from cronman.worker_agent.runtimes.containerd import ContainerdRuntime

        async def load() -> None:
            rt = ContainerdRuntime(self.server.socket, "chaos",
                                   state_dir=self.server.dir / "fifos")
            try:
                await rt.import_image(self.image)
            finally:
                await rt.close()

        asyncio.run(load())

    def start(self, wait: bool = True) -> ContainerAgent:
        self.proc = self.procs.agent("a1", redis_url=self.redis_url, env=self.env, wait=False)
        if wait:
            self.proc.wait_for_log("agent a1 ready", timeout=60.0)
        return self

    def stop(self) -> None:
        super().stop()
        self.server.stop()
