"""The Runtime contract: run one container for one run, on a worker agent.

Implementations: ``runtimes.containerd.ContainerdRuntime`` (containerd's gRPC
API: images, cgroup limits, no network, non-root) and
``runtimes.process.ProcessRuntime`` (a child process with the same contract
and no isolation, for ``cronman standalone`` and hosts without containerd).

A container is named by the runtime (``container_id``) and carries labels;
the agent labels each one with its own id, the run id and the attempt (the
fence token), so that an agent that restarts finds its containers again with
``list`` and either reattaches (``wait``) or kills them. Its stdout and stderr
are kept apart, each in a ring buffer of the last few KiB (``LogTail`` of the
pure core's ``cronman.logtail``: the bound the shipped ``cronman worker`` shares).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from cronman import host_policy
from cronman.errors import CronmanError

#: How long a stopped container may take to exit after SIGTERM before SIGKILL.
DEFAULT_STOP_GRACE = 2.0
#: The exit code a container killed by SIGKILL reports (128 + 9).
SIGKILL_EXIT = 137
#: The user a container runs as unless its target names one.
DEFAULT_USER = "65534:65534"

LABEL_AGENT = "cronman.agent"
LABEL_RUN = "cronman.run"
LABEL_ATTEMPT = "cronman.attempt"
LABEL_DEADLINE = "cronman.deadline"  # Unix ms by which the run's timeout stops it


class RuntimeError_(CronmanError):
    """A runtime could not do what was asked (base of the runtime errors)."""

    code = "runtime_error"


class RuntimeUnavailable(RuntimeError_):
    """The runtime's daemon cannot be reached (containerd down or restarting)."""

    code = "runtime_unavailable"


class ImageNotFound(RuntimeError_):
    """The image is not present in the agent's runtime (import it first)."""

    code = "image_not_found"


class ContainerNotFound(RuntimeError_):
    """No container of that id exists (any more)."""

    code = "container_not_found"


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """What to run: the container target of one run, resolved by the agent."""

    name: str  # the container id to use (unique per run attempt)
    image: str
    command: list[str] = field(default_factory=list)  # replaces the image's entrypoint + cmd
    env: dict[str, str] = field(default_factory=dict)
    cpu: float = 1.0  # cores: a CFS quota
    memory_mb: int = 256  # a hard limit; going over it is an OOM kill
    network: str = "none"  # "none" (loopback only) or "host"
    user: str | None = None  # "uid[:gid]" or "root"; None: DEFAULT_USER
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ContainerExit:
    """How a container ended."""

    exit_code: int
    oom_killed: bool = False
    stdout: str = ""  # the tail of its stdout
    stderr: str = ""
    error: str | None = None  # set when the runtime could not tell (the container vanished)
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """One container the runtime holds, as ``list`` finds it."""

    id: str
    labels: Mapping[str, str]
    running: bool


class ContainerRuntime(Protocol):
    """Runs containers; every method may raise ``RuntimeUnavailable``."""

    name: str

    async def import_image(self, archive: Path) -> list[str]:
        """Import an OCI image layout or Docker archive; returns the image names.
        Idempotent (content already present is not written again)."""

    async def start(self, spec: ContainerSpec) -> str:
        """Create and start the container; returns its id once it runs. Raises
        ``ImageNotFound`` for a missing image, ``RuntimeError_`` when it cannot start."""

    def tails(self, container_id: str) -> tuple[str, str]:
        """The tails of a container's stdout and stderr so far (running or not)."""

    async def wait(self, container_id: str) -> ContainerExit:
        """Wait for the container to exit (attaching to its logs if this
        runtime object did not start it, as after an agent restart). Survives
        a restart of the runtime's daemon: it reconnects and waits on."""

    async def stop(self, container_id: str, grace: float = DEFAULT_STOP_GRACE) -> None:
        """SIGTERM, then SIGKILL when still running after ``grace`` seconds.
        Returns at once; ``wait`` reports the exit. A gone container is no error."""

    async def remove(self, container_id: str) -> None:
        """Delete the exited container and everything it used. Idempotent."""

    async def list(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        """The containers carrying all of ``labels``."""

    async def close(self) -> None: ...


def parse_user(user: str | None) -> tuple[int, int]:
    """(uid, gid) of a target's ``user`` (``cronman.host_policy.parse_user``,
    the same reading the host policies check); ``RuntimeError_`` when it
    cannot be read."""
    try:
        return host_policy.parse_user(user)
    except ValueError as exc:
        raise RuntimeError_(str(exc)) from None
