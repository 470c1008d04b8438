"""Creating the workload's jobs the way a user does: through the API.

The benchmark starts a private ``cronman api`` (gunicorn, a random loopback
port) on the run's scratch database, sends the job definitions through the
public Python client (``cronman.client.CronmanClient``, bulk requests of up
to 1,000 jobs, a few in flight at once) and stops the server before any
scheduler starts. Every job is thus validated by the API itself; the
benchmark holds no copy of the job spec's rules. Limits a scenario asks for
go in first, through the same server, with an admin token made with
database access (as ``cronman tokens create --admin`` does).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cronman.client import BULK_MAX, NO_RETRY, CronmanClient
from cronman_bench.procs import BenchError, ManagedProcess, cronman_command, free_port
from cronman_bench.workload import Jobs, cronman_definition

API_WORKERS = 2
IN_FLIGHT = 3  # bulk requests at once: enough to keep two workers and the database busy


class ApiServer:
    """A private ``cronman api`` on a scratch database, stopped by PID."""

    def __init__(self, database_url: str, workdir: Path, tag: str, *,
                 workers: int = API_WORKERS, env: dict[str, str] | None = None) -> None:
        """``env`` adds to the server's environment (the work-queue scenario's Redis)."""
        self.database_url = database_url
        self.workers = workers
        self.extra_env = dict(env or {})
        self.log_path = workdir / f"{tag}-api.log"
        self.port = 0
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0, attempts: int = 3) -> ApiServer:
        last = ""
        for _ in range(attempts):
            self.port = free_port()
            env = {
                "CRONMAN_DATABASE_URL": self.database_url,
                "CRONMAN_ALLOW_PRIVATE_TARGETS": "true",
                # A scratch database on loopback has no tokens: say so rather than rely
                # on the default.
                "CRONMAN_AUTH": "off",
                **self.extra_env,
            }
            self.proc = ManagedProcess(
                "cronman-api", [*cronman_command(), "api", "--bind", f"127.0.0.1:{self.port}",
                                "--workers", str(self.workers)],
                log_path=self.log_path, env=env, inherit_env=True)
            deadline = time.monotonic() + timeout
            with CronmanClient(self.url, retry=NO_RETRY, timeout=5) as client:
                while time.monotonic() < deadline and not self.proc.exited():
                    try:
                        if client.health():
                            return self
                    except Exception:  # noqa: BLE001 - not up yet
                        pass
                    time.sleep(0.2)
            last = self.proc.log_tail(1500)
            self.stop()
        raise BenchError(f"cronman api did not start: {last}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=20)
            self.proc = None


def create_jobs(database_url: str, w: Jobs, url: str, run_label: str, *, workdir: Path,
                tag: str = "jobs", progress: Callable[[int], None] | None = None,
                limits: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """Create ``limits``, then the workload's jobs, through the API; the job
    ids, index ``i`` at ``i``."""
    server = ApiServer(database_url, workdir, tag).start()
    try:
        if limits:
            _create_limits(database_url, server.url, limits)
        return _send(server.url, w, url, run_label, progress)
    finally:
        server.stop()


def _create_limits(database_url: str, api_url: str, limits: Sequence[Mapping[str, Any]]
                   ) -> None:
    from cronman.store import open_store

    store = open_store(database_url)
    try:
        token, _ = store.tokens.create_token("bench-admin", None)
    finally:
        store.close()
    with CronmanClient(api_url, token=token) as client:
        for spec in limits:
            client.create_limit(spec)
        if len(client.list_limits()) != len(limits):
            raise BenchError("the limits were not all made")


def _send(api_url: str, w: Jobs, url: str, run_label: str,
          progress: Callable[[int], None] | None) -> list[str]:
    chunks = [range(lo, min(lo + BULK_MAX, w.count)) for lo in range(0, w.count, BULK_MAX)]
    done = [0]
    lock = threading.Lock()

    def send(client: CronmanClient, chunk: range) -> list[str]:
        specs: list[dict[str, Any]] = [cronman_definition(w, i, url, run_label) for i in chunk]
        jobs = client.create_jobs(specs)
        if len(jobs) != len(specs):
            raise BenchError(f"the API created {len(jobs)} of {len(specs)} jobs")
        with lock:
            done[0] += len(jobs)
            if progress is not None:
                progress(done[0])
        return [str(j["id"]) for j in jobs]

    with CronmanClient(api_url, retry=NO_RETRY, timeout=120, pool_size=IN_FLIGHT) as client, \
            ThreadPoolExecutor(IN_FLIGHT) as pool:
        parts = list(pool.map(lambda c: send(client, c), chunks))
    return [job_id for part in parts for job_id in part]
