"""A private PostgreSQL server for tests that take the database down.

The machine's PostgreSQL (port 5432) is shared with other test runs and is
never stopped. A test that needs a database outage starts its own instance
with Debian's binaries: ``initdb`` into a temp dir, ``pg_ctl start`` on a
random loopback port with the unix socket in that dir, and later ``stop``
(``fast`` or ``immediate``, a crash) and ``start`` again on the same port and
data, so clients see the very server they lost come back.

PostgreSQL refuses to run as root, so every server command runs as the
``postgres`` user (``runuser -u postgres --``) on a temp dir chowned to it.

    with private_postgres() as pg:
        url = pg.url("cronman")        # database created by pg.create_database
        pg.stop()                      # connections refused from now on
        pg.start()                     # same port, same data
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg2

PG_BIN = Path(os.environ.get("CRONMAN_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_OS_USER = "postgres"
LOOPBACK = "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def available() -> bool:
    """Whether a private server can be started here (binaries and OS user present)."""
    try:
        pwd.getpwnam(PG_OS_USER)
    except KeyError:
        return False
    return (PG_BIN / "initdb").exists() and (PG_BIN / "pg_ctl").exists()


class PrivatePostgres:
    """One private PostgreSQL server (data dir, port and socket dir of its own)."""

    def __init__(self, base: Path | None = None, port: int | None = None,
                 settings: dict[str, str] | None = None) -> None:
        self.base = Path(base or tempfile.mkdtemp(prefix="cronman-pg-"))
        self.data = self.base / "data"
        self.sockets = self.base / "run"
        self.log_path = self.base / "server.log"
        self.port = port or _free_port()
        self._own_base = base is None
        self.initialised = False
        # Extra server settings (``{"wal_level": "logical"}``), as -c options.
        self.settings = dict(settings or {})

    # -- commands ---------------------------------------------------------

    def _as_postgres(self, args: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        cmd = ["runuser", "-u", PG_OS_USER, "--", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL, cwd=self.base)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({res.returncode}):\n"
                               f"{res.stdout}\n{res.stderr}\n{self.log_tail()}")
        return res

    def init(self) -> PrivatePostgres:
        """``initdb`` (trust auth, no sync of the new files: a test server)."""
        self.sockets.mkdir(parents=True, exist_ok=True)
        pw = pwd.getpwnam(PG_OS_USER)
        for path in (self.base, self.sockets):
            os.chown(path, pw.pw_uid, pw.pw_gid)
        self._as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres",
                           "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"])
        self.initialised = True
        return self

    def start(self, timeout: float = 30.0) -> PrivatePostgres:
        """Start on ``self.port`` (again, after a stop) and wait until it answers."""
        if not self.initialised:
            self.init()
        # fsync off: what is written survives a crash of the server (the OS
        # keeps it), which is all a test outage needs. synchronous_commit
        # stays on: with it off, ``stop("immediate")`` would lose the last
        # commits the clients were told about.
        opts = (f"-p {self.port} -k {self.sockets} -c listen_addresses={LOOPBACK} "
                "-c fsync=off -c full_page_writes=off "
                "-c max_connections=200 -c shared_buffers=64MB")
        opts += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l",
                           str(self.log_path), "-o", opts, "-w", "-t", str(int(timeout)),
                           "start"], timeout=timeout + 10)
        deadline = time.monotonic() + timeout
        while not self.answers():
            if time.monotonic() > deadline:
                raise TimeoutError(f"private PostgreSQL on port {self.port} does not answer:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.1)
        return self

    def stop(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """``pg_ctl stop -m fast`` (clean) or ``immediate`` (a crash: no
        checkpoint, recovery at the next start). Connections are refused after."""
        if not self.running():
            return
        self._as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w",
                           "-t", str(int(timeout)), "stop"], timeout=timeout + 10)
        deadline = time.monotonic() + timeout
        while _port_open(self.port):
            if time.monotonic() > deadline:
                raise TimeoutError(f"port {self.port} still open after pg_ctl stop")
            time.sleep(0.05)

    def running(self) -> bool:
        """Whether the postmaster of our data dir is alive (by its PID file)."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def pid(self) -> int | None:
        try:
            first = (self.data / "postmaster.pid").read_text().splitlines()[0]
            return int(first)
        except (OSError, IndexError, ValueError):
            return None

    def answers(self) -> bool:
        try:
            conn = psycopg2.connect(host=LOOPBACK, port=self.port, user="postgres",
                                    dbname="postgres", connect_timeout=2)
        except psycopg2.OperationalError:
            return False
        conn.close()
        return True

    # -- databases --------------------------------------------------------

    def admin(self):
        conn = psycopg2.connect(host=LOOPBACK, port=self.port, user="postgres",
                                dbname="postgres", connect_timeout=5)
        conn.autocommit = True
        return conn

    def create_database(self, name: str) -> str:
        conn = self.admin()
        try:
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg2://postgres@{LOOPBACK}:{self.port}/{dbname}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def cleanup(self) -> None:
        """Stop (immediately) whatever still runs and remove the directory."""
        try:
            if self.running():
                self.stop("immediate")
        finally:
            if self._own_base:
                shutil.rmtree(self.base, ignore_errors=True)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def private_postgres(attempts: int = 3,
                     settings: dict[str, str] | None = None) -> Iterator[PrivatePostgres]:
    """A started private PostgreSQL; stopped and removed afterwards. Retries on
    another port when the chosen one was taken in the meantime."""
    server: PrivatePostgres | None = None
    for attempt in range(attempts):
        server = PrivatePostgres(settings=settings)
        try:
            server.start()
            break
        except (RuntimeError, TimeoutError):
            server.cleanup()
            if attempt == attempts - 1:
                raise
    assert server is not None
    try:
        yield server
    finally:
        server.cleanup()
