"""Fixtures of the worker agent tests: a private containerd with the test image.

One containerd per test session (its own config, root, state and socket
under a temp dir; stopped by PID at the end), the busybox image built by
``tests.support.containerd`` and imported through the agent's own runtime.
Each test gets a containerd namespace of its own.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.containerd import (
    TEST_IMAGE,
    ContainerdServer,
    build_busybox_image,
    containerd_available,
)


@pytest.fixture(scope="session")
def image_archive(tmp_path_factory) -> Path:
    return build_busybox_image(tmp_path_factory.mktemp("image") / "busybox.tar", TEST_IMAGE)


@pytest.fixture(scope="session")
def containerd(tmp_path_factory) -> Iterator[ContainerdServer]:
    why = containerd_available()
    if why:
        pytest.fail(f"the agent tests need a private containerd: {why}")
    server = ContainerdServer(Path(tmp_path_factory.mktemp("containerd")))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def namespace(containerd, image_archive) -> Iterator[str]:
    """A fresh containerd namespace holding the test image; whatever
    containers a test leaves in it are killed and removed afterwards."""
    from cronman.worker_agent.runtimes.containerd import ContainerdRuntime

    ns = f"t{uuid.uuid4().hex[:10]}"

    def runtime() -> ContainerdRuntime:
        return ContainerdRuntime(containerd.socket, ns, state_dir=containerd.dir / "fifos")

    async def load() -> None:
        rt = runtime()
        try:
            await rt.import_image(image_archive)
        finally:
            await rt.close()

    async def clean() -> None:
        rt = runtime()
        try:
            for info in await rt.list({}):
                await rt.stop(info.id, 0)
                await asyncio.wait_for(rt.wait(info.id), 10)
                await rt.remove(info.id)
        finally:
            await rt.close()

    asyncio.run(load())
    yield ns
    asyncio.run(clean())
