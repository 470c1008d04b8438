"""A thin asyncio client of containerd's gRPC API (the generated stubs).

One channel to the socket; every call carries the ``containerd-namespace``
header (and, while importing, ``containerd-lease``). gRPC reconnects the
channel by itself when containerd restarts; ``unavailable`` tells a caller
which errors mean "containerd is not answering right now".
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc import aio

from cronman.worker_agent.runtimes.containerd_api.services.containers.v1 import (
    containers_pb2_grpc,
)
from cronman.worker_agent.runtimes.containerd_api.services.content.v1 import content_pb2_grpc
from cronman.worker_agent.runtimes.containerd_api.services.diff.v1 import diff_pb2_grpc
from cronman.worker_agent.runtimes.containerd_api.services.images.v1 import images_pb2_grpc
from cronman.worker_agent.runtimes.containerd_api.services.leases.v1 import leases_pb2_grpc
from cronman.worker_agent.runtimes.containerd_api.services.snapshots.v1 import (
    snapshots_pb2_grpc,
)
from cronman.worker_agent.runtimes.containerd_api.services.tasks.v1 import tasks_pb2_grpc
from cronman.worker_agent.runtimes.containerd_api.services.version.v1 import version_pb2_grpc

DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
DEFAULT_NAMESPACE = "cronman"
#: A short call (create, start, kill, get) gives up after this long.
CALL_TIMEOUT = 10.0

_UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                grpc.StatusCode.DEADLINE_EXCEEDED)


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means that containerd did not answer (down, restarting)."""
    return isinstance(exc, aio.AioRpcError) and exc.code() in _UNAVAILABLE


def not_found(exc: BaseException) -> bool:
    return isinstance(exc, aio.AioRpcError) and exc.code() == grpc.StatusCode.NOT_FOUND


def already_exists(exc: BaseException) -> bool:
    return isinstance(exc, aio.AioRpcError) and exc.code() == grpc.StatusCode.ALREADY_EXISTS


class ContainerdClient:
    """Stubs of the services the agent uses, on one channel."""

    def __init__(self, address: str = DEFAULT_ADDRESS,
                 namespace: str = DEFAULT_NAMESPACE) -> None:
        self.address = address
        self.namespace = namespace
        target = address if "://" in address else f"unix://{address}"
        self.channel = aio.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            # Reconnect soon after a containerd restart (the default backs off to 2 min).
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ])
        self.containers = containers_pb2_grpc.ContainersStub(self.channel)
        self.content = content_pb2_grpc.ContentStub(self.channel)
        self.diff = diff_pb2_grpc.DiffStub(self.channel)
        self.images = images_pb2_grpc.ImagesStub(self.channel)
        self.leases = leases_pb2_grpc.LeasesStub(self.channel)
        self.snapshots = snapshots_pb2_grpc.SnapshotsStub(self.channel)
        self.tasks = tasks_pb2_grpc.TasksStub(self.channel)
        self.version = version_pb2_grpc.VersionStub(self.channel)

    def metadata(self, lease: str | None = None) -> tuple[tuple[str, str], ...]:
        md: tuple[tuple[str, str], ...] = (("containerd-namespace", self.namespace),)
        if lease:
            md += (("containerd-lease", lease),)
        return md

    def kw(self, lease: str | None = None, timeout: float | None = CALL_TIMEOUT
           ) -> dict[str, Any]:
        """Keyword arguments of a call: metadata and timeout."""
        return {"metadata": self.metadata(lease), "timeout": timeout}

    async def close(self) -> None:
        await self.channel.close()
