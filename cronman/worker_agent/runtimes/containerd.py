"""The containerd runtime: containers through containerd's gRPC API.

Each run gets a container (the OCI spec of ``oci_spec``, runc v2 shim) on a
fresh overlay snapshot of its image, stdout and stderr kept apart in bounded
files under ``state_dir`` by a logging binary the shim runs (``logkeeper``,
``binary://`` stdio), and a cgroup of its own whose OOM-kill counter is read
after the exit. Nothing here shells out to ``ctr``.

containerd keeps tasks running when the agent dies, and the shims keep them
running while containerd itself restarts: ``wait`` retries a call that finds
containerd unreachable until it answers again, and works as well on a
container this runtime object did not start (after an agent restart). The
shim owns the logging binary, so a container's output while its agent is
down is kept: once the task exited, ``wait`` deletes it (the shim closes the
streams and waits for the logger to write the rest) and reads the tails from
the files. A container started by an older agent, with FIFOs, is read through
them (``fifo``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import stat
import sys
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from google.protobuf import any_pb2, empty_pb2
from grpc import aio

from cronman.logtail import LOG_TAIL_BYTES
from cronman.worker_agent.runtime import (
    DEFAULT_STOP_GRACE,
    ContainerExit,
    ContainerInfo,
    ContainerSpec,
    RuntimeError_,
    RuntimeUnavailable,
)
from cronman.worker_agent.runtimes.containerd_api.services.containers.v1 import containers_pb2
from cronman.worker_agent.runtimes.containerd_api.services.snapshots.v1 import snapshots_pb2
from cronman.worker_agent.runtimes.containerd_api.services.tasks.v1 import tasks_pb2
from cronman.worker_agent.runtimes.containerd_api.types.task import task_pb2
from cronman.worker_agent.runtimes.containerd_client import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    ContainerdClient,
    not_found,
    unavailable,
)
from cronman.worker_agent.runtimes.containerd_images import ImageStore
from cronman.worker_agent.runtimes.fifo import ContainerLogs
from cronman.worker_agent.runtimes.logkeeper import STREAMS, read_tail, write_wrapper
from cronman.worker_agent.runtimes.oci_spec import build_spec, cgroup_path

log = logging.getLogger(__name__)

SPEC_TYPE_URL = "types.containerd.io/opencontainers/runtime-spec/1/Spec"
RUNC_V2 = "io.containerd.runc.v2"
DEFAULT_SNAPSHOTTER = "overlayfs"
DEFAULT_STATE_DIR = "/run/cronman-agent"
CGROUP_ROOT = Path("/sys/fs/cgroup")
RECONNECT_DELAY = 0.2
RECONNECT_MAX_DELAY = 1.0
SIGTERM, SIGKILL = 15, 9


class ContainerdRuntime:
    """A ``ContainerRuntime`` on containerd (``address``: its gRPC socket)."""

    name = "containerd"

    def __init__(self, address: str = DEFAULT_ADDRESS, namespace: str = DEFAULT_NAMESPACE, *,
                 state_dir: str | Path = DEFAULT_STATE_DIR,
                 snapshotter: str = DEFAULT_SNAPSHOTTER,
                 log_tail_bytes: int = LOG_TAIL_BYTES) -> None:
        self.client = ContainerdClient(address, namespace)
        self.namespace = namespace
        self.snapshotter = snapshotter
        self.state_dir = Path(state_dir) / namespace
        self.log_tail_bytes = log_tail_bytes
        self.images = ImageStore(self.client, snapshotter)
        self._logs: dict[str, ContainerLogs] = {}  # FIFOs of an older agent's containers
        self._exited: dict[str, asyncio.Event] = {}
        self._keeper: Path | None = None

    def _log_uri(self, directory: Path) -> str:
        """The ``binary://`` stdio URI that keeps a task's output in ``directory``."""
        if self._keeper is None:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            keeper = self.state_dir / "logkeeper"
            write_wrapper(keeper, sys.executable)
            self._keeper = keeper
        return (f"binary://{quote(str(self._keeper))}?dir={quote(str(directory), safe='')}"
                f"&limit={self.log_tail_bytes}")

    def tails(self, container_id: str) -> tuple[str, str]:
        directory = self.state_dir / container_id
        out, err = (read_tail(directory, name, self.log_tail_bytes) for name in STREAMS)
        return _text(out), _text(err)

    async def import_image(self, archive: Path) -> list[str]:
        try:
            return await self.images.import_archive(archive)
        except aio.AioRpcError as exc:
            raise _translate(exc, "importing the image") from None

    async def start(self, spec: ContainerSpec) -> str:
        c = self.client
        cid = spec.name
        try:
            image = await self.images.resolve(spec.image)
        except aio.AioRpcError as exc:
            raise _translate(exc, f"resolving image {spec.image!r}") from None
        try:
            oci = build_spec(spec, image.config, namespace=self.namespace)
        except ValueError as exc:
            raise RuntimeError_(str(exc)) from None
        container = containers_pb2.Container(
            id=cid, labels=dict(spec.labels), image=image.name,
            runtime=containers_pb2.Container.Runtime(name=RUNC_V2),
            spec=any_pb2.Any(type_url=SPEC_TYPE_URL, value=json.dumps(oci).encode()),
            snapshotter=self.snapshotter, snapshot_key=cid)
        try:
            await c.containers.Create(containers_pb2.CreateContainerRequest(container=container),
                                      **c.kw())
            prepared = await c.snapshots.Prepare(snapshots_pb2.PrepareSnapshotRequest(
                snapshotter=self.snapshotter, key=cid, parent=image.chain_id), **c.kw())
            uri = self._log_uri(self.state_dir / cid)
            await c.tasks.Create(tasks_pb2.CreateTaskRequest(
                container_id=cid, rootfs=prepared.mounts, stdout=uri, stderr=uri), **c.kw())
            await c.tasks.Start(tasks_pb2.StartRequest(container_id=cid), **c.kw())
        except aio.AioRpcError as exc:
            with contextlib.suppress(Exception):
                await self.remove(cid)
            raise _translate(exc, "starting the container") from None
        return cid

    async def wait(self, container_id: str) -> ContainerExit:
        c = self.client
        logs = self._logs.get(container_id)
        fifo = self.state_dir / container_id / "stdout"
        if logs is None and fifo.exists() and stat.S_ISFIFO(fifo.stat().st_mode):
            logs = self._logs[container_id] = ContainerLogs(self.state_dir / container_id,
                                                           self.log_tail_bytes)
        exited = self._exited.setdefault(container_id, asyncio.Event())
        delay = RECONNECT_DELAY
        while True:
            try:
                reply = await c.tasks.Wait(tasks_pb2.WaitRequest(container_id=container_id),
                                           **c.kw(timeout=None))
                break
            except aio.AioRpcError as exc:
                if unavailable(exc):
                    log.warning("containerd unreachable while waiting for %s, retrying: %s",
                                container_id, exc.details())
                    await asyncio.sleep(delay)
                    delay = min(RECONNECT_MAX_DELAY, delay * 2)
                    continue
                exited.set()
                stdout, stderr = await self._finish(container_id, logs)
                if not_found(exc):
                    return ContainerExit(exit_code=-1, stdout=stdout, stderr=stderr,
                                         error="the container has no task in containerd (it "
                                               "never started, or was deleted)")
                raise _translate(exc, "waiting for the container") from None
        exited.set()
        oom = self._oom_killed(container_id)
        stdout, stderr = await self._finish(container_id, logs)
        finished = None
        if reply.HasField("exited_at") and reply.exited_at.seconds > 0:
            finished = reply.exited_at.ToDatetime(tzinfo=UTC)
        return ContainerExit(exit_code=int(reply.exit_status), oom_killed=oom, stdout=stdout,
                             stderr=stderr, finished_at=finished or datetime.now(UTC))

    async def _finish(self, container_id: str, logs: ContainerLogs | None) -> tuple[str, str]:
        """The tails of an exited container's output. Deleting its task first
        makes the shim close the streams and wait for the logging binary to
        write the rest (its cgroup, read for the OOM flag, goes with it)."""
        if logs is not None:
            return await logs.finish()
        c = self.client
        try:
            await c.tasks.Delete(tasks_pb2.DeleteTaskRequest(container_id=container_id),
                                 **c.kw())
        except aio.AioRpcError as exc:
            if not not_found(exc):
                log.warning("task of %s not deleted after its exit (its logs may miss their "
                            "last lines): %s", container_id, exc.details())
        return self.tails(container_id)

    def _oom_killed(self, container_id: str) -> bool:
        """Whether the kernel OOM-killed a process of the container's cgroup
        (cgroup v2 ``memory.events`` or v1 ``memory.oom_control``)."""
        rel = cgroup_path(self.namespace, container_id).lstrip("/")
        for path in (CGROUP_ROOT / rel / "memory.events",
                     CGROUP_ROOT / "memory" / rel / "memory.oom_control"):
            try:
                text = path.read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value or 0) > 0
        return False

    async def stop(self, container_id: str, grace: float = DEFAULT_STOP_GRACE) -> None:
        if not await self._kill(container_id, SIGTERM, all_processes=False):
            return
        exited = self._exited.get(container_id)
        if exited is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(exited.wait(), grace)
            if exited.is_set():
                return
        else:
            deadline = asyncio.get_running_loop().time() + grace
            while asyncio.get_running_loop().time() < deadline:
                if not await self._running(container_id):
                    return
                await asyncio.sleep(0.1)
        await self._kill(container_id, SIGKILL, all_processes=True)

    async def _kill(self, container_id: str, sig: int, *, all_processes: bool) -> bool:
        """Send ``sig``; False when there is no task (any more)."""
        c = self.client
        try:
            await c.tasks.Kill(tasks_pb2.KillRequest(container_id=container_id, signal=sig,
                                                     all=all_processes), **c.kw())
            return True
        except aio.AioRpcError as exc:
            if not_found(exc):
                return False
            if "process already finished" in (exc.details() or ""):
                return False
            raise _translate(exc, "signalling the container") from None

    async def _running(self, container_id: str) -> bool:
        c = self.client
        try:
            got = await c.tasks.Get(tasks_pb2.GetRequest(container_id=container_id), **c.kw())
        except aio.AioRpcError as exc:
            if not_found(exc):
                return False
            raise _translate(exc, "reading the task") from None
        return got.process.status in (task_pb2.RUNNING, task_pb2.CREATED, task_pb2.PAUSED,
                                      task_pb2.PAUSING)

    async def remove(self, container_id: str) -> None:
        c = self.client
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: c.tasks.Delete(tasks_pb2.DeleteTaskRequest(container_id=container_id),
                                   **c.kw()),
            lambda: c.containers.Delete(containers_pb2.DeleteContainerRequest(id=container_id),
                                        **c.kw()),
            lambda: c.snapshots.Remove(snapshots_pb2.RemoveSnapshotRequest(
                snapshotter=self.snapshotter, key=container_id), **c.kw()),
        ]
        for call in calls:
            try:
                await call()
            except aio.AioRpcError as exc:
                if not not_found(exc):
                    raise _translate(exc, "removing the container") from None
        logs = self._logs.pop(container_id, None)
        self._exited.pop(container_id, None)
        if logs is not None:
            logs.remove()
        else:
            ContainerLogs.remove_dir(self.state_dir / container_id)

    async def list(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        c = self.client
        selector = ",".join(f'labels."{k}"=={v}' for k, v in labels.items())
        try:
            reply = await c.containers.List(containers_pb2.ListContainersRequest(
                filters=[selector] if selector else []), **c.kw())
            out = []
            for container in reply.containers:
                out.append(ContainerInfo(id=container.id, labels=dict(container.labels),
                                         running=await self._running(container.id)))
        except aio.AioRpcError as exc:
            raise _translate(exc, "listing containers") from None
        return out

    async def ping(self) -> bool:
        c = self.client
        try:
            await c.version.Version(empty_pb2.Empty(), **c.kw(timeout=2.0))
            return True
        except aio.AioRpcError:
            return False

    async def close(self) -> None:
        for logs in self._logs.values():
            logs.close()
        self._logs.clear()
        await self.client.close()


def _text(data: bytes) -> str:
    """A tail as text (a multi-byte character cut at its start is dropped)."""
    return data.decode("utf-8", errors="replace").lstrip("\ufffd")


def _translate(exc: aio.AioRpcError, what: str) -> RuntimeError_:
    if unavailable(exc):
        return RuntimeUnavailable(f"containerd unreachable while {what}: {exc.details()}")
    return RuntimeError_(f"containerd refused {what}: {exc.code().name}: {exc.details()}")
