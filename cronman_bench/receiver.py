"""The callback receiver: a private nginx that answers 204 and logs arrivals.

The benchmark's numbers come from this log, not from the systems measured:
each line holds nginx's clock when the request was logged (``$msec``, ms
resolution) and the ``Cronman-*`` headers of the request. nginx buffers the
log (``buffer=``) and writes it out at least every ``flush=`` interval; the
final read happens after a graceful stop (SIGQUIT), which writes what is left.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cronman.timeutil import parse_rfc3339, to_ms
from cronman_bench.procs import BenchError, ManagedProcess, free_port, wait_port

LOG_FLUSH_SECONDS = 0.25
LOG_BUFFER = "256k"
LOG_FIELDS = ("msec", "job_id", "scheduled_for", "run_id", "attempt", "status")

_CONFIG = """\
daemon off;
master_process on;
worker_processes 1;
{user}
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    log_format cronman_bench '$msec $http_cronman_job_id $http_cronman_scheduled_for '
                             '$http_cronman_run_id $http_cronman_attempt $status';
    server {{
        listen {host}:{port} backlog=4096;
        access_log {prefix}/access.log cronman_bench buffer={buffer} flush={flush_ms}ms;
        location / {{ return 204; }}
    }}
}}
"""


@dataclass(frozen=True, slots=True)
class Arrival:
    """One logged callback: arrival (receiver clock) and what it claimed to be."""

    arrived_ms: int
    job_id: str
    scheduled_ms: int | None
    run_id: str
    attempt: int

    @property
    def lateness_ms(self) -> int | None:
        return None if self.scheduled_ms is None else self.arrived_ms - self.scheduled_ms


_sched_cache: dict[str, int | None] = {}


def _scheduled_ms(text: str) -> int | None:
    ms = _sched_cache.get(text, -1)
    if ms != -1:
        return ms
    try:
        value: int | None = to_ms(parse_rfc3339(text))
    except ValueError:
        value = None
    if len(_sched_cache) > 200_000:
        _sched_cache.clear()
    _sched_cache[text] = value
    return value


def parse_line(line: str) -> Arrival | None:
    """An ``Arrival`` from one access-log line; None for a malformed line."""
    parts = line.split()
    if len(parts) != len(LOG_FIELDS):
        return None
    msec, job_id, sched, run_id, attempt, _status = parts
    try:
        arrived_ms = int(round(float(msec) * 1000))
    except ValueError:
        return None
    try:
        att = int(attempt)
    except ValueError:
        att = 0
    return Arrival(arrived_ms=arrived_ms, job_id=job_id,
                   scheduled_ms=None if sched == "-" else _scheduled_ms(sched),
                   run_id=run_id, attempt=att)


class LogTail:
    """Reads new complete lines of a growing log file, incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> Iterator[Arrival]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            a = parse_line(raw.decode("utf-8", "replace"))
            if a is not None:
                yield a


class Receiver:
    """A private nginx on a random loopback port; start(), url, stop(), arrivals."""

    def __init__(self, workdir: Path | None = None, host: str = "127.0.0.1") -> None:
        self.nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(self.nginx):
            raise BenchError("nginx is not installed (apt-get install nginx)")
        self.host = host
        self._own_dir = workdir is None
        self.prefix = Path(workdir or tempfile.mkdtemp(prefix="cronman-bench-nginx-"))
        self.port = 0
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/callback"

    @property
    def log_path(self) -> Path:
        return self.prefix / "access.log"

    def start(self, attempts: int = 5) -> Receiver:
        (self.prefix / "tmp").mkdir(parents=True, exist_ok=True)
        last_error = ""
        for _ in range(attempts):
            self.port = free_port(self.host)
            conf = self.prefix / "nginx.conf"
            conf.write_text(_CONFIG.format(
                # nginx switches to "nobody" when started as root unless told otherwise.
                user="user root;" if os.geteuid() == 0 else "",
                prefix=self.prefix, host=self.host, port=self.port,
                buffer=LOG_BUFFER, flush_ms=int(LOG_FLUSH_SECONDS * 1000),
            ))
            self.proc = ManagedProcess(
                "nginx", [self.nginx, "-p", str(self.prefix), "-c", str(conf), "-e",
                          str(self.prefix / "error.log")],
                log_path=self.prefix / "nginx.out",
            )
            try:
                wait_port(self.host, self.port, timeout=10, proc=self.proc)
                return self
            except BenchError as exc:
                last_error = str(exc)
                self.proc.stop(timeout=5, sig=signal.SIGQUIT)
                self.proc = None
        raise BenchError(f"nginx receiver did not start: {last_error}")

    def wait_flush(self) -> None:
        """Sleep long enough for nginx to write out its buffered log."""
        time.sleep(LOG_FLUSH_SECONDS * 2 + 0.1)

    def stop(self) -> None:
        """Stop nginx gracefully (it writes out its log buffer on the way)."""
        if self.proc is not None:
            self.proc.stop(timeout=10, sig=signal.SIGQUIT)

    def arrivals(self) -> Iterator[Arrival]:
        """Every arrival in the log (call after ``stop()`` for the complete set)."""
        return LogTail(self.log_path).read()

    def cleanup(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.prefix, ignore_errors=True)
