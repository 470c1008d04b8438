"""A real cronman cluster for tests: N ``cronman scheduler`` processes on one
PostgreSQL database and a private redis-server, firing interval jobs at a
private nginx that logs every arrival.

Nodes are real processes, killed with SIGKILL by PID and restarted under the
same node id. Each node serves its Prometheus metrics on a port of its own,
so the test can read ``cronman_double_fires_total`` and friends from every
live node; the log files of every incarnation stay on disk for post-mortems.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cronman.config import Settings
from cronman.timeutil import now_ms
from cronman_bench.receiver import Arrival
from cronman_bench.receiver import Receiver as NginxReceiver
from cronman_bench.workload import Workload
from tests.support.api import http
from tests.support.processes import CronmanProcess, Processes, free_port
from tests.support.store_jobs import create_jobs_in_store
from tests.support.waiting import wait_for

# Fast failure detection for tests; kills must not delay fires whatever it is.
TEST_HEARTBEAT_TTL = 3.0
TEST_LEASE_SECONDS = 6.0

_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([-+0-9.eEinfaN]+)$")


def node_env(ttl: float = TEST_HEARTBEAT_TTL, lease: float = TEST_LEASE_SECONDS,
             replicas: int = 2, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        "CRONMAN_HEARTBEAT_TTL": str(ttl),
        "CRONMAN_LEASE_SECONDS": str(lease),
        "CRONMAN_REPLICAS": str(replicas),
        "CRONMAN_ALLOW_PRIVATE_TARGETS": "true",
    }
    env.update(extra or {})
    return env


@dataclass
class Node:
    """One node id and the processes that ran under it (the last one current)."""

    node_id: str
    metrics_port: int
    incarnations: list[CronmanProcess] = field(default_factory=list)
    killed_at_ms: list[int] = field(default_factory=list)
    expected_down: bool = False  # killed or stopped on purpose
    # How this node reaches the backends, when not as the others do (a node
    # in a network namespace of its own: through proxies), and the command
    # its process runs under (``ip netns exec NS``); kept for its restarts.
    database_url: str | None = None
    redis_url: str | None = None
    prefix: tuple[str, ...] = ()
    # Added to the cluster's environment for every process of this node id
    # (a node under the clock shim from its start: tests/support/clockshim).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def proc(self) -> CronmanProcess:
        return self.incarnations[-1]

    def running(self) -> bool:
        return bool(self.incarnations) and self.proc.running()

    def logs(self) -> str:
        return "\n".join(p.log_text() for p in self.incarnations)


class Cluster:
    """Scheduler nodes on ``database_url`` and ``redis_url``."""

    def __init__(self, procs: Processes, database_url: str, redis_url: str,
                 env: Mapping[str, str] | None = None) -> None:
        self.procs = procs
        self.database_url = database_url
        self.redis_url = redis_url
        self.env = dict(env or node_env())
        self.nodes: dict[str, Node] = {}

    # -- processes --------------------------------------------------------

    def start(self, count: int, prefix: str = "n", wait: bool = True) -> list[Node]:
        started = [self.start_node(f"{prefix}{i}", wait=False) for i in range(1, count + 1)]
        if wait:
            for node in started:
                self.wait_ready(node)
        return started

    def add_node(self, node_id: str, *, database_url: str | None = None,
                 redis_url: str | None = None, prefix: tuple[str, ...] = (),
                 env: Mapping[str, str] | None = None) -> Node:
        """Declare ``node_id`` with backends or an environment of its own
        (started by ``start_node``)."""
        node = self.nodes[node_id] = Node(node_id, free_port(), database_url=database_url,
                                          redis_url=redis_url, prefix=prefix,
                                          env=dict(env or {}))
        return node

    def start_node(self, node_id: str, wait: bool = True,
                   env: Mapping[str, str] | None = None) -> Node:
        """Start (or restart) ``node_id``; ``env`` adds to the cluster's and the node's
        environment."""
        node = self.nodes.get(node_id)
        if node is None:
            node = self.add_node(node_id)
        args = ["scheduler", "--node-id", node_id,
                "--database-url", node.database_url or self.database_url,
                "--redis-url", node.redis_url or self.redis_url,
                "--metrics-port", str(node.metrics_port), "--metrics-host", "127.0.0.1"]
        node.incarnations.append(self.procs.start(node_id, args,
                                                  {**self.env, **node.env, **(env or {})},
                                                  prefix=node.prefix))
        node.expected_down = False
        if wait:
            self.wait_ready(node)
        return node

    def start_api(self, name: str, port: int | None = None) -> tuple[CronmanProcess, str]:
        """A ``cronman api`` process on the cluster's backends (on ``port``, e.g. to
        start one again where a killed one listened); its base URL once it answers."""
        port = port or free_port()
        proc = self.procs.start(name, ["api", "--bind", f"127.0.0.1:{port}", "--workers", "1",
                                       "--threads", "8"],
                                {"CRONMAN_DATABASE_URL": self.database_url,
                                 "CRONMAN_REDIS_URL": self.redis_url})
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            if not proc.running():
                raise AssertionError(f"{name} exited:\n{proc.log_text()[-4000:]}")
            try:
                return http("GET", base + "/healthz", timeout=1)[0] == 200
            except OSError:
                return False

        wait_for(up, 30, f"{name} answers")
        return proc, base

    def wait_ready(self, node: Node, timeout: float = 60.0) -> None:
        node.proc.wait_for_log("ready: owns", timeout=timeout)

    def kill(self, node_id: str) -> int:
        """SIGKILL the node's process by PID; returns the wall-clock ms of the kill."""
        node = self.nodes[node_id]
        at = now_ms()
        node.expected_down = True
        node.proc.kill()
        node.killed_at_ms.append(at)
        return at

    def restart(self, node_id: str, wait: bool = True) -> Node:
        return self.start_node(node_id, wait=wait)

    def signal_stop(self, node_id: str) -> None:
        """Send SIGTERM (a graceful stop) without waiting."""
        node = self.nodes[node_id]
        node.expected_down = True
        node.proc.terminate()

    def terminate(self, node_id: str, timeout: float = 15.0) -> int:
        """SIGTERM (graceful stop) and wait for the exit; returns its exit code."""
        self.nodes[node_id].expected_down = True
        return self.nodes[node_id].proc.stop(timeout)

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.running():
                node.proc.stop(20.0)

    def running(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.running()]

    def assert_all_running(self) -> None:
        for node in self.nodes.values():
            if node.incarnations and not node.running() and not node.expected_down:
                raise AssertionError(f"{node.node_id} exited "
                                     f"({node.proc.proc.returncode}):\n"
                                     f"{node.proc.log_text()[-4000:]}")

    # -- observation ------------------------------------------------------

    def metrics(self, node_id: str) -> dict[str, float]:
        """The node's metrics (sum over label sets, by metric name)."""
        port = self.nodes[node_id].metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            m = _METRIC_LINE.match(line)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
        return out

    def metric_total(self, name: str) -> float:
        """``name`` summed over the live nodes."""
        return sum(self.metrics(n.node_id).get(name, 0.0) for n in self.running())

    def log_count(self, text: str) -> int:
        """Occurrences of ``text`` in the logs of every incarnation of every node."""
        return sum(n.logs().count(text) for n in self.nodes.values())

    def members(self) -> list[str]:
        """The live membership as the cluster's own coordinator code reads it."""
        from cronman.coordination.redis import RedisCoordinator

        coord = RedisCoordinator(Settings(redis_url=self.redis_url, node_id="observer",
                                          heartbeat_ttl=self.env_ttl()))
        try:
            return [m.id for m in coord.live_members()]
        finally:
            coord.close()

    def env_ttl(self) -> float:
        return float(self.env.get("CRONMAN_HEARTBEAT_TTL", TEST_HEARTBEAT_TTL))

    def wait_members(self, expected: set[str], timeout: float) -> float:
        """Wait until the membership is exactly ``expected``; returns the seconds it took."""
        t0 = time.monotonic()
        last: list[str] = []
        while time.monotonic() - t0 < timeout:
            try:
                last = self.members()
            except Exception as exc:  # Redis still down: keep waiting
                last = [f"<{type(exc).__name__}>"]
            if set(last) == expected:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise AssertionError(f"membership {sorted(last)} is not {sorted(expected)} "
                             f"after {timeout} s")

    def describe(self) -> str:
        """Log tails of every node, for assertion messages."""
        parts = []
        for n in self.nodes.values():
            parts.append(f"--- {n.node_id} ---\n{n.logs()[-2500:]}")
        return "\n".join(parts)


class Fires:
    """The nginx receiver of a cluster test and the workload it is owed."""

    def __init__(self, workdir: Path) -> None:
        self.rx = NginxReceiver(workdir)
        self.workload: Workload | None = None
        self.job_ids: list[str] = []
        self._stopped = False

    def start(self) -> Fires:
        self.rx.start()
        return self

    def create_jobs(self, database_url: str, count: int, every_s: int, label: str = "cluster"
                    ) -> Workload:
        """``count`` interval jobs every ``every_s`` s, their anchors spread evenly."""
        base = (now_ms() // 1000 + 1) * 1000
        self.workload = Workload(count=count, every_ms=every_s * 1000, base_ms=base)
        self.job_ids = create_jobs_in_store(database_url, self.workload, self.rx.url, label)
        return self.workload

    def arrivals(self) -> list[Arrival]:
        """Every arrival logged so far (complete once ``stop()`` was called)."""
        if not self._stopped:
            self.rx.wait_flush()
        return list(self.rx.arrivals())

    def stop(self) -> None:
        if not self._stopped:
            self.rx.stop()
            self._stopped = True

    def cleanup(self) -> None:
        self.stop()
