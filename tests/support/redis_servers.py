"""Private redis-server and redis-sentinel processes for tests.

Each server runs on a random free loopback port with its own temp dir, as a
child of the test process, and is stopped by its PID. Readiness and death are
judged by the port (and PING), never by ``ps``: a killed daemon may linger as
``<defunct>``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import redis

LOOPBACK = "127.0.0.1"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_SENTINEL = shutil.which("redis-sentinel") or "/usr/bin/redis-sentinel"
SERVICE = "cronman-test"


def free_port() -> int:
    """A TCP port nobody listens on right now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class RedisProcess:
    """One redis-server (or, with ``conf``, redis-sentinel) child process."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        args: Sequence[str] = (),
        sentinel_conf: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.args = list(args)
        self.sentinel_conf = sentinel_conf
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis(host=LOOPBACK, port=self.port, socket_timeout=2, **kwargs)

    def _command(self) -> list[str]:
        log = str(self.workdir / "server.log")
        if self.sentinel_conf is not None:
            conf = self.workdir / "sentinel.conf"
            conf.write_text(
                f"port {self.port}\nbind {LOOPBACK}\ndir {self.workdir}\n"
                f"logfile {log}\ndaemonize no\n{self.sentinel_conf}"
            )
            return [REDIS_SENTINEL, str(conf)]
        return [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", LOOPBACK,
            "--dir", str(self.workdir),
            "--logfile", log,
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            *self.args,
        ]  # fmt: skip

    def start(self, timeout: float = 10.0) -> RedisProcess:
        """Start on ``self.port`` and wait until it answers PING."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis on port {self.port} exited: {self.log_tail()}")
            if not port_open(self.port):
                return False
            try:
                with self.client() as c:
                    return bool(c.ping())
            except redis.RedisError:
                return False

        wait_until(ready, timeout, f"redis on port {self.port}")
        return self

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL by PID (a crash), reap it and wait until the port is closed."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=timeout)
        wait_until(lambda: not port_open(self.port), timeout, f"port {self.port} to close")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by PID, SIGKILL if it does not exit in time."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=timeout)
        self.proc = None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.workdir / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@contextmanager
def _tempdir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def redis_servers(count: int) -> Iterator[list[RedisProcess]]:
    """``count`` fresh redis-servers on random loopback ports; stopped afterwards."""
    with ExitStack() as stack:
        base = stack.enter_context(_tempdir("cronman-redis-"))
        servers = []
        for i in range(count):
            server = _start_with_retry(lambda i=i: RedisProcess(base / f"shard-{i}"))
            stack.callback(server.stop)
            servers.append(server)
        yield servers


def _start_with_retry(make, attempts: int = 3) -> RedisProcess:
    """Start a server; another process may grab the free port first, so retry."""
    for attempt in range(attempts):
        server = make()
        try:
            return server.start()
        except (RuntimeError, TimeoutError):
            server.stop()
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


class SentinelSetup:
    """A primary, a replica and three sentinels (quorum 2) for ``SERVICE``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.primary: RedisProcess | None = None
        self.replica: RedisProcess | None = None
        self.sentinels: list[RedisProcess] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"{LOOPBACK}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def primary_port(self) -> int | None:
        """The primary port the sentinels agree on now (None while they disagree)."""
        seen = set()
        for s in self.sentinels:
            try:
                with s.client(decode_responses=True) as c:
                    host, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                    seen.add(int(port))
            except (redis.RedisError, TypeError, ValueError):
                return None
        return seen.pop() if len(seen) == 1 else None

    def wait_primary(self, port: int, timeout: float = 10.0) -> None:
        """Until every sentinel names `port` as the primary.

        After a failover the sentinels learn the new configuration one by
        one, so a client can reach the new primary before all of them agree.
        """
        wait_until(lambda: self.primary_port() == port, timeout, f"sentinels agree on {port}")

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Until every sentinel knows the replica and the two other sentinels."""

        def ready() -> bool:
            for s in self.sentinels:
                try:
                    with s.client(decode_responses=True) as c:
                        fields = _as_dict(c.execute_command("SENTINEL MASTER", SERVICE))
                except redis.RedisError:
                    return False
                if int(fields.get("num-slaves", 0)) < 1:
                    return False
                if int(fields.get("num-other-sentinels", 0)) < 2:
                    return False
            with self.replica.client(decode_responses=True) as c:
                return c.info("replication").get("master_link_status") == "up"

        wait_until(ready, timeout, "sentinels to see the replica and each other", 0.1)


def _as_dict(reply) -> dict:
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[0::2], reply[1::2], strict=True))


@contextmanager
def sentinel_setup(
    down_after_ms: int = 1000, failover_timeout_ms: int = 3000
) -> Iterator[SentinelSetup]:
    """Start the primary, the replica and three sentinels; stop all afterwards."""
    with ExitStack() as stack:
        base = stack.enter_context(_tempdir("cronman-sentinel-"))
        setup = SentinelSetup(base)
        setup.primary = _start_with_retry(lambda: RedisProcess(base / "primary"))
        stack.callback(setup.primary.stop)
        primary_port = setup.primary.port
        setup.replica = _start_with_retry(
            lambda: RedisProcess(
                base / "replica", args=["--replicaof", LOOPBACK, str(primary_port)]
            )
        )
        stack.callback(setup.replica.stop)
        conf = (
            f"sentinel monitor {SERVICE} {LOOPBACK} {primary_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        for i in range(3):
            sentinel = _start_with_retry(
                lambda i=i: RedisProcess(base / f"sentinel-{i}", sentinel_conf=conf)
            )
            stack.callback(sentinel.stop)
            setup.sentinels.append(sentinel)
        setup.wait_ready()
        yield setup
