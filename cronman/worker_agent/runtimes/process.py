"""The process runtime: a run's command as a child process of the agent.

The same contract as the containerd runtime without its isolation, for
``cronman standalone`` and hosts without containerd: the command runs on the
host (``image`` is not used, so a target must name a ``command``), with only
the target's ``env`` and the run's ``CRONMAN_*`` variables (plus ``PATH`` and
``HOME``: never the agent's own environment, its database URL or secrets), in
a working directory of its own (made for the run, removed with it, ``HOME``
too), in a process group of its own (so that stop reaches its children too),
stdout and stderr kept apart in ring buffers. When the agent runs as root,
the command runs as the target's ``user`` (default: nobody, 65534), with no
supplementary groups; otherwise as the agent's own user, which can read what
that user can (run such an agent as a user holding no secrets). There is no
network or filesystem isolation: which runs may come here is the host
policy's ``process`` grant (``cronman.host_policy``). ``cpu`` and
``memory_mb`` are not enforced (no cgroup), so no run is OOM-killed here.
Containers live as long as the agent process: ``list`` only knows the ones
this runtime object started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cronman.worker_agent.runtime import (
    DEFAULT_STOP_GRACE,
    LOG_TAIL_BYTES,
    ContainerExit,
    ContainerInfo,
    ContainerNotFound,
    ContainerSpec,
    LogTail,
    RuntimeError_,
    parse_user,
)

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
READ_CHUNK = 65536


@dataclass(slots=True, eq=False)
class _Child:
    proc: asyncio.subprocess.Process
    labels: dict[str, str]
    stdout: LogTail
    stderr: LogTail
    readers: list[asyncio.Task[None]] = field(default_factory=list)
    exit: ContainerExit | None = None
    workdir: str | None = None


class ProcessRuntime:
    """A ``ContainerRuntime`` whose containers are child processes."""

    name = "process"

    def __init__(self, *, log_tail_bytes: int = LOG_TAIL_BYTES) -> None:
        self.log_tail_bytes = log_tail_bytes
        self._children: dict[str, _Child] = {}

    async def import_image(self, archive: Path) -> list[str]:
        raise RuntimeError_("the process runtime runs commands on the host: it has no images "
                            "(use --runtime containerd)")

    async def start(self, spec: ContainerSpec) -> str:
        if not spec.command:
            raise RuntimeError_("the process runtime needs a command (it does not run images)")
        if spec.name in self._children:
            raise RuntimeError_(f"container {spec.name} exists already")
        user: int | None = None
        group: int | None = None
        if os.geteuid() == 0:
            user, group = parse_user(spec.user)
        workdir = tempfile.mkdtemp(prefix=f"{spec.name}-")
        if user is not None and group is not None:
            os.chown(workdir, user, group)
        env = {"PATH": DEFAULT_PATH, "HOME": workdir, **spec.env}
        try:
            proc = await asyncio.create_subprocess_exec(
                *spec.command, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, user=user, group=group,
                extra_groups=[] if user is not None else None, cwd=workdir)
        except OSError as exc:
            shutil.rmtree(workdir, ignore_errors=True)
            raise RuntimeError_(f"cannot start {spec.command[0]!r}: {exc.strerror or exc}"
                                ) from None
        child = _Child(proc, dict(spec.labels), LogTail(self.log_tail_bytes),
                       LogTail(self.log_tail_bytes), workdir=workdir)
        assert proc.stdout is not None and proc.stderr is not None
        child.readers = [asyncio.create_task(_drain(proc.stdout, child.stdout)),
                         asyncio.create_task(_drain(proc.stderr, child.stderr))]
        self._children[spec.name] = child
        return spec.name

    def _child(self, container_id: str) -> _Child:
        child = self._children.get(container_id)
        if child is None:
            raise ContainerNotFound(f"no process {container_id} (it ended with a former agent)")
        return child

    async def wait(self, container_id: str) -> ContainerExit:
        child = self._child(container_id)
        if child.exit is not None:
            return child.exit
        code = await child.proc.wait()
        await asyncio.gather(*child.readers, return_exceptions=True)
        if code < 0:
            code = 128 - code  # killed by signal N: 128 + N, as a shell reports it
        child.exit = ContainerExit(exit_code=code, stdout=child.stdout.text(),
                                   stderr=child.stderr.text(), finished_at=datetime.now(UTC))
        return child.exit

    async def stop(self, container_id: str, grace: float = DEFAULT_STOP_GRACE) -> None:
        child = self._children.get(container_id)
        if child is None or child.proc.returncode is not None:
            return
        _signal_group(child.proc.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(child.proc.wait()), grace)
        if child.proc.returncode is None:
            _signal_group(child.proc.pid, signal.SIGKILL)

    async def remove(self, container_id: str) -> None:
        child = self._children.pop(container_id, None)
        if child is not None and child.proc.returncode is None:
            _signal_group(child.proc.pid, signal.SIGKILL)
            await child.proc.wait()
        if child is not None and child.workdir is not None:
            shutil.rmtree(child.workdir, ignore_errors=True)

    async def list(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        return [ContainerInfo(id=cid, labels=dict(c.labels), running=c.proc.returncode is None)
                for cid, c in self._children.items()
                if all(c.labels.get(k) == v for k, v in labels.items())]

    async def close(self) -> None:
        for cid in list(self._children):
            await self.remove(cid)


async def _drain(stream: asyncio.StreamReader, tail: LogTail) -> None:
    while data := await stream.read(READ_CHUNK):
        tail.write(data)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
