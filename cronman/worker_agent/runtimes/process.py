"""The process runtime: a run's command as a child process of the agent.

The same contract as the containerd runtime without its isolation, for
``cronman standalone`` and hosts without containerd: the command runs on the
host (``image`` is not used, so a target must name a ``command``), with only
the target's ``env`` and the run's ``CRONMAN_*`` variables (plus ``PATH`` and
``HOME``: never the agent's own environment, its database URL or secrets), in
a working directory of its own (made for the run, removed with it, ``HOME``
too), in a process group of its own (so that stop reaches its children too),
stdout and stderr kept apart. When the agent runs as root,
the command runs as the target's ``user`` (default: nobody, 65534), with no
supplementary groups; otherwise as the agent's own user, which can read what
that user can (run such an agent as a user holding no secrets). There is no
network or filesystem isolation: which runs may come here is the host
policy's ``process`` grant (``cronman.host_policy``). ``cpu`` and
``memory_mb`` are not enforced (no cgroup), so no run is OOM-killed here.

Each command runs under a supervisor of its own (``logkeeper.supervise``, a
small stdlib-only Python process in a session of its own), not as the
agent's child: it keeps the output in bounded files and writes the exit code
under ``state_dir``, so a command outlives an agent that is SIGKILLed (no
SIGPIPE, no blocked write) and an agent back with the same state dir finds
it with ``list`` and reads its tail and exit code with ``wait``. A runtime
without a state dir keeps its runs in a temporary one: they are not found
again. ``close`` (a graceful stop) kills the commands it knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cronman.logtail import LOG_TAIL_BYTES
from cronman.worker_agent.runtime import (
    DEFAULT_STOP_GRACE,
    ContainerExit,
    ContainerInfo,
    ContainerNotFound,
    ContainerSpec,
    RuntimeError_,
    parse_user,
)
from cronman.worker_agent.runtimes import logkeeper

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Where under the agent's state dir the process runtime keeps its runs (a
#: name no containerd namespace can have).
STATE_SUBDIR = "_process"
META_FILE = "meta.json"  # labels, working directory, supervisor pid: what a restart needs
POLL = 0.1  # how often a run another agent process started is checked for its end
START_TIMEOUT = 30.0


@dataclass(slots=True, eq=False)
class _Run:
    directory: Path
    labels: dict[str, str]
    workdir: str | None
    supervisor: asyncio.subprocess.Process | None = None  # None: a former agent's
    supervisor_pid: int = 0
    exit: ContainerExit | None = None


class ProcessRuntime:
    """A ``ContainerRuntime`` whose containers are supervised processes."""

    name = "process"

    def __init__(self, *, state_dir: str | Path | None = None,
                 log_tail_bytes: int = LOG_TAIL_BYTES) -> None:
        self.log_tail_bytes = log_tail_bytes
        self._temporary = state_dir is None
        if state_dir is not None:
            self.state_dir = Path(state_dir) / STATE_SUBDIR
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        else:
            self.state_dir = Path(tempfile.mkdtemp(prefix="cronman-process-"))
        self._runs: dict[str, _Run] = {}

    async def import_image(self, archive: Path) -> list[str]:
        raise RuntimeError_("the process runtime runs commands on the host: it has no images "
                            "(use --runtime containerd)")

    async def start(self, spec: ContainerSpec) -> str:
        if not spec.command:
            raise RuntimeError_("the process runtime needs a command (it does not run images)")
        directory = self.state_dir / spec.name
        if spec.name in self._runs or directory.exists():
            raise RuntimeError_(f"container {spec.name} exists already")
        user: int | None = None
        group: int | None = None
        if os.geteuid() == 0:
            user, group = parse_user(spec.user)
        directory.mkdir(mode=0o700)
        workdir = tempfile.mkdtemp(prefix=f"{spec.name}-")
        if user is not None and group is not None:
            os.chown(workdir, user, group)
        env = {"PATH": DEFAULT_PATH, "HOME": workdir, **spec.env}
        run = _Run(directory, dict(spec.labels), workdir)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", logkeeper.__file__, "supervise", str(directory),
                str(self.log_tail_bytes), "-" if user is None else str(user),
                "-" if group is None else str(group), "--", *spec.command,
                env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True, cwd=workdir)
            run.supervisor, run.supervisor_pid = proc, proc.pid
            _write_meta(run)
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT)).decode()
        except (OSError, TimeoutError) as exc:
            self._discard(run)
            raise RuntimeError_(f"cannot start {spec.command[0]!r}: the supervisor did not "
                                f"start it: {exc!r}") from None
        kind, _, detail = line.strip().partition(" ")
        if kind != "started":
            await proc.wait()
            self._discard(run)
            raise RuntimeError_(f"cannot start {spec.command[0]!r}: "
                                f"{detail or 'the supervisor ended without starting it'}")
        self._runs[spec.name] = run
        return spec.name

    def _discard(self, run: _Run) -> None:
        shutil.rmtree(run.directory, ignore_errors=True)
        if run.workdir is not None:
            shutil.rmtree(run.workdir, ignore_errors=True)

    def _run(self, container_id: str) -> _Run:
        run = self._runs.get(container_id)
        if run is None:
            run = _read_meta(self.state_dir / container_id)
            if run is None:
                raise ContainerNotFound(f"no process {container_id} (it ended with a former "
                                        "agent, or was removed)")
            self._runs[container_id] = run
        return run

    def tails(self, container_id: str) -> tuple[str, str]:
        directory = self._run(container_id).directory
        out, err = (_text(logkeeper.read_tail(directory, name, self.log_tail_bytes))
                    for name in logkeeper.STREAMS)
        return out, err

    async def wait(self, container_id: str) -> ContainerExit:
        run = self._run(container_id)
        if run.exit is not None:
            return run.exit
        if run.supervisor is not None:
            await run.supervisor.wait()
        else:  # a former agent's: not our child, so its end is read from its files
            while not (run.directory / logkeeper.EXIT_FILE).exists() and _alive(
                    run.supervisor_pid):
                await asyncio.sleep(POLL)
        out, err = self.tails(container_id)
        try:
            code, at = (run.directory / logkeeper.EXIT_FILE).read_text().split()
        except (OSError, ValueError):
            run.exit = ContainerExit(exit_code=-1, stdout=out, stderr=err,
                                     error="the process's supervisor ended without telling "
                                           "how the process ended",
                                     finished_at=datetime.now(UTC))
            return run.exit
        run.exit = ContainerExit(exit_code=int(code), stdout=out, stderr=err,
                                 finished_at=datetime.fromtimestamp(int(at) / 1000, UTC))
        return run.exit

    def _running(self, run: _Run) -> bool:
        return (not (run.directory / logkeeper.EXIT_FILE).exists()
                and _alive(run.supervisor_pid))

    def _signal(self, run: _Run, sig: int) -> None:
        try:
            pid = int((run.directory / logkeeper.PID_FILE).read_text())
        except (OSError, ValueError):
            return
        if self._running(run):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)

    async def _ended(self, run: _Run, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._running(run):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(min(POLL, timeout))
        return True

    async def stop(self, container_id: str, grace: float = DEFAULT_STOP_GRACE) -> None:
        try:
            run = self._run(container_id)
        except ContainerNotFound:
            return
        if not self._running(run):
            return
        self._signal(run, signal.SIGTERM)
        if not await self._ended(run, grace):
            self._signal(run, signal.SIGKILL)

    async def remove(self, container_id: str) -> None:
        try:
            run = self._run(container_id)
        except ContainerNotFound:
            return
        self._runs.pop(container_id, None)
        if self._running(run):
            self._signal(run, signal.SIGKILL)
            await self._ended(run, 5.0)
        if run.supervisor is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.supervisor.wait(), 5.0)
        self._discard(run)

    async def list(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        found = []
        for directory in sorted(self.state_dir.iterdir()):
            try:
                run = self._runs.get(directory.name) or self._run(directory.name)
            except ContainerNotFound:
                continue
            if all(run.labels.get(k) == v for k, v in labels.items()):
                found.append(ContainerInfo(id=directory.name, labels=dict(run.labels),
                                           running=self._running(run)))
        return found

    async def close(self) -> None:
        for cid in list(self._runs):
            await self.remove(cid)
        if self._temporary:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _write_meta(run: _Run) -> None:
    logkeeper.write_atomically(run.directory / META_FILE, json.dumps(
        {"labels": run.labels, "workdir": run.workdir, "supervisor": run.supervisor_pid}))


def _read_meta(directory: Path) -> _Run | None:
    try:
        meta = json.loads((directory / META_FILE).read_text())
    except (OSError, ValueError):
        return None
    return _Run(directory, dict(meta.get("labels") or {}), meta.get("workdir"),
                supervisor_pid=int(meta.get("supervisor") or 0))


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped does not)."""
    if pid <= 0:
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in ("Z", "X")


def _text(data: bytes) -> str:
    """A tail as text (a multi-byte character cut at its start is dropped)."""
    return data.decode("utf-8", errors="replace").lstrip("\ufffd")
