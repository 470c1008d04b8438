"""A PostgreSQL HA cluster started for a test or a benchmark: one etcd and Patroni members on loopback.

Everything runs as the ``postgres`` user (PostgreSQL refuses root) in a temp
dir of its own (owned by postgres, mode 700), each daemon in a session of its
own (``setsid``) with its pid recorded by the daemon itself (``runuser``
forks), and is stopped by pid. Ports are the test's own: never the machine's
5432. Timing as /work/shared/ENVIRONMENT.md measured it: ttl 10, loop_wait 2,
retry_timeout 4 (a SIGKILLed leader is replaced in ~10 s); synchronous mode
unless told otherwise, so an acknowledged commit is on the replica too.

    with PatroniCluster(members=2) as pg:
        pg.wait_ready()
        url = pg.url("cronman")          # the libpq multi-host URL
        pg.kill_leader()                 # Patroni, postmaster and backends
        pg.wait_leader(other_than=...)
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg2

from cronman_bench.procs import free_port

PG_BIN = "/usr/lib/postgresql/15/bin"
TTL_S = 10  # the DCS ``ttl``: how long a cluster may be without a primary
T = TypeVar("T")


@dataclass
class Member:
    name: str
    pg_port: int
    api_port: int
    data_dir: Path
    config: Path
    pid_file: Path

    def patroni_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def role(self) -> str | None:
        """``primary``, ``replica``, or None (the REST API does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/patroni",
                                        timeout=1) as resp:
                state = json.load(resp)
        except (urllib.error.HTTPError) as exc:
            state = json.loads(exc.read() or b"{}")
        except (OSError, ValueError):
            return None
        if state.get("state") != "running":
            return None
        return "primary" if state.get("role") in ("master", "primary") else "replica"


class PatroniCluster:
    """etcd plus ``members`` Patroni members; a context manager that stops them all."""

    def __init__(self, members: int = 2, scope: str = "cronman-test",
                 logical_slots: dict[str, str] | None = None,
                 synchronous_mode: bool = True) -> None:
        """``logical_slots``: Patroni permanent slots (pgoutput), slot name -> database."""
        self.scope = scope
        self.logical_slots = logical_slots or {}
        self.count = members
        self.synchronous_mode = synchronous_mode
        self.dir = Path(tempfile.mkdtemp(prefix="cronman-patroni-"))
        self._as_postgres = os.geteuid() == 0
        self.members: list[Member] = []
        self._pids: list[int] = []  # every daemon started, newest last
        self._popens: list[subprocess.Popen[bytes]] = []
        self._pg = pwd.getpwnam("postgres")

    # -- start and stop ---------------------------------------------------------

    def __enter__(self) -> PatroniCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        os.chown(self.dir, self._pg.pw_uid, self._pg.pw_gid)
        os.chmod(self.dir, 0o700)
        client, peer = free_port(), free_port()
        self.etcd_port = client
        self._daemon("etcd", [
            "/usr/bin/etcd", "--name", "e1", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e1=http://127.0.0.1:{peer}",
            "--log-level", "warn"])
        self._wait(lambda: _http_ok(f"http://127.0.0.1:{client}/health"), 20, "etcd up")
        for i in range(1, self.count + 1):
            m = Member(f"m{i}", free_port(), free_port(), self.dir / f"m{i}",
                       self.dir / f"m{i}.yml", self.dir / f"m{i}.pid")
            self.members.append(m)
            self._write(m.config, self._config(m))
        for m in self.members:
            self.start_member(m)

    def start_member(self, m: Member) -> None:
        self._daemon(m.name, ["/usr/bin/patroni", str(m.config)], pid_file=m.pid_file)

    def _daemon(self, name: str, argv: list[str], pid_file: Path | None = None) -> None:
        pid_file = pid_file or self.dir / f"{name}.pid"
        pid_file.unlink(missing_ok=True)
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (the daemon keeps it)
        script = f'echo $$ > {pid_file}; exec "$@"'
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        self._popens.append(subprocess.Popen(
            [*prefix, "sh", "-c", script, "sh", *argv], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.dir))
        log.close()
        self._wait(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 10,
                   f"{name} started")
        self._pids.append(int(pid_file.read_text().strip()))

    def close(self) -> None:
        """SIGKILL every daemon (and postmaster) started, by pid, then remove the dir."""
        for m in self.members:
            self._kill_member(m)
        for pid in reversed(self._pids):
            _kill(pid)
        for popen in self._popens:  # runuser, left when its child went
            try:
                popen.wait(5)
            except subprocess.TimeoutExpired:
                popen.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- what the test uses -------------------------------------------------------

    def url(self, dbname: str, **query: str) -> str:
        """The libpq multi-host SQLAlchemy URL every cronman process is given."""
        hosts = "&".join(f"host=127.0.0.1:{m.pg_port}" for m in self.members)
        extra = "".join(f"&{k}={v}" for k, v in query.items())
        return (f"postgresql+psycopg2://postgres@/{dbname}?{hosts}"
                f"&target_session_attrs=read-write{extra}")

    def leader(self) -> Member | None:
        for m in self.members:
            if m.role() == "primary":
                return m
        return None

    def wait_ready(self, timeout: float = 60.0) -> Member:
        """A leader with a streaming replica (in synchronous mode: a synchronous
        one, so writes can commit, that Patroni has recorded as its synchronous
        standby: only that one may be promoted, a replica that just restarted
        is not)."""
        sync = "AND sync_state = 'sync' " if self.synchronous_mode else ""

        def ready() -> Member | None:
            leader = self.leader()
            if leader is None or (self.synchronous_mode and not any(
                    _http_ok(f"http://127.0.0.1:{m.api_port}/synchronous")
                    for m in self.members if m is not leader)):
                return None
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=leader.pg_port, user="postgres",
                                        dbname="postgres", connect_timeout=2)
            except psycopg2.Error:
                return None
            try:
                with conn.cursor() as cur:
                    # The base backup looks like a streaming replica while it runs.
                    cur.execute("SELECT count(*) FROM pg_stat_replication WHERE state = "
                                f"'streaming' {sync}AND application_name <> 'pg_basebackup'")
                    row = cur.fetchone()
                    return leader if row is not None and row[0] >= 1 else None
            finally:
                conn.close()
        return self._wait(ready, timeout, "a leader with a synchronous replica")

    def wait_leader(self, other_than: Member, timeout: float = 40.0) -> Member:
        def promoted() -> Member | None:
            leader = self.leader()
            return leader if leader is not None and leader is not other_than else None
        return self._wait(promoted, timeout, f"a leader other than {other_than.name}")

    def kill_leader(self) -> Member:
        """SIGKILL the leader's Patroni, its postmaster and the postmaster's children."""
        leader = self.leader()
        assert leader is not None, "no leader to kill"
        self._kill_member(leader)
        return leader

    def switchover(self, leader: Member, candidate: Member) -> None:
        """``patronictl switchover`` from ``leader`` to ``candidate``, as an operator does."""
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        done = subprocess.run(
            [*prefix, "/usr/bin/patronictl", "-c", str(leader.config), "switchover",
             "--leader", leader.name, "--candidate", candidate.name, "--force"],
            capture_output=True, text=True, timeout=60, cwd=self.dir)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"

    def _kill_member(self, m: Member) -> None:
        patroni, postmaster = m.patroni_pid(), m.postmaster_pid()
        if patroni is not None:
            _kill(patroni)
        if postmaster is not None and _is_postgres(postmaster):
            children = _children(postmaster)
            _kill(postmaster)
            for pid in children:
                _kill(pid)

    def create_database(self, name: str, timeout: float = 30.0) -> None:
        """``CREATE DATABASE`` on the leader, then wait until every member has
        replayed it: libpq does not try the next host of a multi-host URL after
        a member answers 'database does not exist' (a FATAL at startup, before
        ``target_session_attrs`` is checked), and a synchronous standby has the
        commit flushed, not necessarily replayed."""
        leader = self.wait_ready()
        self.admin_sql(leader, f'CREATE DATABASE "{name}"')

        def everywhere() -> bool:
            try:
                return all(self.query(m, "SELECT 1 FROM pg_database WHERE datname = "
                                      f"'{name}'") for m in self.members)
            except psycopg2.Error:
                return False
        self._wait(everywhere, timeout, f"database {name} on every member")

    def admin_sql(self, member: Member, sql: str, dbname: str = "postgres") -> None:
        """Run one statement that returns no rows (``CREATE DATABASE`` …)."""
        self._run(member, sql, dbname, rows=False)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                         for p in sorted(self.dir.glob("*.log")))

    # -- helpers ---------------------------------------------------------------------

    def _config(self, m: Member) -> str:
        return f"""scope: {self.scope}
name: {m.name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{m.api_port}
  connect_address: 127.0.0.1:{m.api_port}
etcd3:
  hosts: 127.0.0.1:{self.etcd_port}
bootstrap:
  dcs:
    ttl: {TTL_S}
    loop_wait: 2
    retry_timeout: 4
    synchronous_mode: {"true" if self.synchronous_mode else "false"}
{self._slots_yaml()}    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: logical
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
        hot_standby_feedback: "on"
        # A member SIGKILLed and started again rewinds and streams from
        # where it stood: the leader keeps that much WAL for it (an hour's
        # chaos run at 500 fires/s outran the default, and the member never
        # streamed again).
        wal_keep_size: 1GB
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{m.pg_port}
  connect_address: 127.0.0.1:{m.pg_port}
  data_dir: {m.data_dir}
  bin_dir: {PG_BIN}
  pgpass: {self.dir}/{m.name}.pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: {self.dir}
    fsync: "off"
"""

    def patch_config(self, changes: dict[str, object]) -> None:
        """Change the cluster's dynamic configuration (``PATCH /config``, what
        ``patronictl edit-config`` does)."""
        leader = self.leader()
        assert leader is not None, "no leader to configure"
        req = urllib.request.Request(f"http://127.0.0.1:{leader.api_port}/config",
                                     data=json.dumps(changes).encode(), method="PATCH",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200

    def _slots_yaml(self) -> str:
        if not self.logical_slots:
            return ""
        lines = ["    slots:"]
        for name, db in self.logical_slots.items():
            lines += [f"      {name}:", "        type: logical", f"        database: {db}",
                      "        plugin: pgoutput"]
        return "\n".join(lines) + "\n"

    def query(self, member: Member, sql: str, dbname: str = "postgres") -> list[tuple[object, ...]]:
        return self._run(member, sql, dbname, rows=True)

    @staticmethod
    def _run(member: Member, sql: str, dbname: str, *, rows: bool) -> list[tuple[object, ...]]:
        conn = psycopg2.connect(host="127.0.0.1", port=member.pg_port, user="postgres",
                                dbname=dbname, connect_timeout=5)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall() if rows else []
        finally:
            conn.close()

    def _write(self, path: Path, text: str) -> None:
        path.write_text(text)
        os.chown(path, self._pg.pw_uid, self._pg.pw_gid)

    def _wait(self, check: Callable[[], T | None], timeout: float, what: str) -> T:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{self.logs()}")


def unavailable() -> str | None:
    """Why no cluster can be started here (None: it can): patroni, etcd and
    PostgreSQL 15 installed (ops/setup --dev), and root (runuser) or postgres."""
    missing = [p for p in ("/usr/bin/patroni", "/usr/bin/etcd", f"{PG_BIN}/postgres")
               if not os.path.exists(p)]
    if missing:
        return f"not installed: {', '.join(missing)} (ops/setup --dev installs them)"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != "postgres":
        return "the Patroni cluster runs as postgres: needs root (runuser) or postgres"
    return None


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except (OSError, ValueError):
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _is_postgres(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found
