"""The state services of a benchmark run: a scratch PostgreSQL database and a
private redis-server, plus the counters read from them.

PostgreSQL is the running server (``--database-url`` names it; the benchmark
creates, migrates and drops its own database there). Redis is a private
``redis-server`` on a random loopback port, so that ``total_commands_processed``
counts the benchmark's commands and nobody else's.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from cronman_bench.procs import BenchError, ManagedProcess, free_port, wait_port

DEFAULT_ADMIN_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


def _psycopg2_kwargs(url: str) -> dict[str, object]:
    u = make_url(url)
    kw: dict[str, object] = {"dbname": u.database or "postgres"}
    if u.host:
        kw["host"] = u.host
    if u.port:
        kw["port"] = u.port
    if u.username:
        kw["user"] = u.username
    if u.password:
        kw["password"] = u.password
    return kw


def _admin_conn(admin_url: str) -> Any:
    import psycopg2

    conn = psycopg2.connect(connect_timeout=5, **_psycopg2_kwargs(admin_url))
    conn.autocommit = True
    return conn


def ensure_postgres(admin_url: str, repo_root: Path | None = None) -> None:
    """Check that PostgreSQL answers; start the machine's own with ops/services if not."""
    import psycopg2

    try:
        _admin_conn(admin_url).close()
        return
    except psycopg2.OperationalError as exc:
        first_error = exc
    script = (repo_root or Path(__file__).resolve().parents[1]) / "ops" / "services"
    if not script.exists():
        raise BenchError(f"PostgreSQL is not reachable at {admin_url}: {first_error}")
    subprocess.run([str(script)], check=False, timeout=120)
    try:
        _admin_conn(admin_url).close()
    except psycopg2.OperationalError as exc:
        raise BenchError(f"PostgreSQL is not reachable at {admin_url}: {exc}") from exc


class ScratchDatabase:
    """A database made for one run on the server of ``admin_url``; dropped unless kept."""

    def __init__(self, admin_url: str, prefix: str = "cronman_benchcli") -> None:
        self.admin_url = admin_url
        self.name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        self.url = make_url(admin_url).set(database=self.name).render_as_string(
            hide_password=False)
        self.created = False

    def create(self) -> ScratchDatabase:
        conn = _admin_conn(self.admin_url)
        try:
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{self.name}"')
        finally:
            conn.close()
        self.created = True
        return self

    def xact_commit(self) -> int:
        """Committed transactions in this database so far (pg_stat_database).

        Read over a connection to the admin database, so reading does not
        count. The statistics lag the truth by up to about a second.
        """
        conn = _admin_conn(self.admin_url)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_stat_clear_snapshot()")
                cur.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                            (self.name,))
                row = cur.fetchone()
        finally:
            conn.close()
        return int(row[0]) if row else 0

    def drop(self) -> None:
        if not self.created:
            return
        conn = _admin_conn(self.admin_url)
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            conn.close()
        self.created = False


class PgBackends:
    """The server processes (backends) connected to some databases, by pid.

    For the CPU meter: only the run's own scratch databases are named, so no
    other session's work is counted. One admin connection, kept open (to the
    admin database, whose backend is therefore never among the answers).
    """

    def __init__(self, admin_url: str, databases: list[str]) -> None:
        self.admin_url = admin_url
        self.databases = list(databases)
        self._conn: Any = None

    def pids(self) -> list[int]:
        if self._conn is None or self._conn.closed:
            self._conn = _admin_conn(self.admin_url)
        with self._conn.cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = ANY(%s)",
                        (self.databases,))
            return [int(r[0]) for r in cur.fetchall()]

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None


class PrivateRedis:
    """A redis-server of our own on a random loopback port (no persistence)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.host = host
        self.port = 0
        self.dir = Path(tempfile.mkdtemp(prefix="cronman-bench-redis-"))
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, attempts: int = 5) -> PrivateRedis:
        last = ""
        for _ in range(attempts):
            self.port = free_port(self.host)
            try:
                return self._launch()
            except BenchError as exc:
                last = str(exc)
        raise BenchError(f"redis-server did not start: {last}")

    def _launch(self) -> PrivateRedis:
        self.proc = ManagedProcess(
            "redis-server",
            [self.binary, "--bind", self.host, "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--daemonize", "no",
             "--maxclients", "10000"],
            log_path=self.dir / "redis.log",
        )
        try:
            wait_port(self.host, self.port, timeout=10, proc=self.proc)
        except BenchError:
            self.proc.stop(timeout=5)
            self.proc = None
            raise
        return self

    def kill(self) -> None:
        """SIGKILL by PID (a crash: with no persistence, every key is gone)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.stop()  # closes its log
            self.proc = None

    def restart(self) -> PrivateRedis:
        """Start again, empty, on the same port (after ``kill``)."""
        self.kill()
        return self._launch()

    def total_commands(self) -> int:
        """``total_commands_processed`` of INFO stats (this call adds one)."""
        import redis

        client = redis.Redis(host=self.host, port=self.port, socket_timeout=5)
        try:
            return int(client.info("stats")["total_commands_processed"])
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
