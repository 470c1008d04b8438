"""The containerd runtime against a real containerd (private instance, test image)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from cronman.worker_agent.runtime import ContainerSpec, ImageNotFound
from cronman.worker_agent.runtimes.containerd import ContainerdRuntime
from tests.support.containerd import TEST_IMAGE, busybox_layer


def runtime_for(containerd, namespace) -> ContainerdRuntime:
    return ContainerdRuntime(containerd.socket, namespace, state_dir=containerd.dir / "fifos")


def spec(command, **kw) -> ContainerSpec:
    return ContainerSpec(name=f"c-{uuid.uuid4().hex[:12]}", image=TEST_IMAGE, command=command,
                         **kw)


async def run_once(rt: ContainerdRuntime, s: ContainerSpec):
    cid = await rt.start(s)
    try:
        return await rt.wait(cid)
    finally:
        await rt.remove(cid)


def test_command_env_exit_codes_and_logs_apart(containerd, namespace):
    async def main():
        rt = runtime_for(containerd, namespace)
        try:
            end = await run_once(rt, spec(
                ["sh", "-c", "echo out $GREETING; echo err >&2; id -u; exit 7"],
                env={"GREETING": "hello"}))
            assert end.exit_code == 7 and not end.oom_killed
            assert end.stdout == "out hello\n65534\n"  # a non-root user by default
            assert end.stderr == "err\n"
            end = await run_once(rt, spec(["id", "-u"], user="root"))
            assert (end.exit_code, end.stdout) == (0, "0\n")
            s = spec(["sh", "-c", "yes 0123456789 | head -c 100000"])
            cid = await rt.start(s)
            end = await rt.wait(cid)
            assert end.exit_code == 0 and len(end.stdout) == 4096  # the tail only
            kept = sum(f.stat().st_size for f in (rt.state_dir / cid).iterdir())
            assert 4096 <= kept <= 2 * 4096  # bounded on disk too
            await rt.remove(cid)
            assert not (rt.state_dir / cid).exists()
        finally:
            await rt.close()

    asyncio.run(main())


def test_network_off_by_default_and_limits_in_the_cgroup(containerd, namespace):
    async def main():
        rt = runtime_for(containerd, namespace)
        try:
            end = await run_once(rt, spec(["ls", "/sys/class/net"]))
            assert end.stdout.split() == ["lo"]
            end = await run_once(rt, spec(["ls", "/sys/class/net"], network="host"))
            assert len(end.stdout.split()) > 1
            s = spec(["sleep", "5"], cpu=0.5, memory_mb=32)
            cid = await rt.start(s)
            try:
                cg = f"cronman/{namespace}/{cid}"
                quota = _first(f"/sys/fs/cgroup/cpu/{cg}/cpu.cfs_quota_us",
                               f"/sys/fs/cgroup/{cg}/cpu.max")
                assert quota.split()[0] == "50000"
                limit = _first(f"/sys/fs/cgroup/memory/{cg}/memory.limit_in_bytes",
                               f"/sys/fs/cgroup/{cg}/memory.max")
                assert int(limit) == 32 * 1024 * 1024
            finally:
                await rt.stop(cid, 0.2)
                await rt.wait(cid)
                await rt.remove(cid)
        finally:
            await rt.close()

    asyncio.run(main())


def test_oom_is_exit_137_with_the_oom_flag(containerd, namespace):
    async def main():
        rt = runtime_for(containerd, namespace)
        try:
            end = await run_once(rt, spec(
                ["sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1"], memory_mb=16))
            assert end.exit_code == 137 and end.oom_killed
        finally:
            await rt.close()

    asyncio.run(main())


def test_stop_sends_sigterm_then_sigkill_after_the_grace(containerd, namespace):
    async def main():
        rt = runtime_for(containerd, namespace)
        try:
            # sh as PID 1 ignores SIGTERM: SIGKILL after the grace.
            cid = await rt.start(spec(["sh", "-c", "sleep 30"]))
            waiting = asyncio.ensure_future(rt.wait(cid))
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            await rt.stop(cid, 0.5)
            end = await waiting
            assert end.exit_code == 137 and 0.4 < time.monotonic() - t0 < 3
            await rt.remove(cid)
            # A process that handles SIGTERM exits with its own code at once.
            cid = await rt.start(spec(["sh", "-c", "trap 'echo bye; exit 4' TERM; "
                                                   "while true; do sleep 0.05; done"]))
            waiting = asyncio.ensure_future(rt.wait(cid))
            await asyncio.sleep(0.3)
            await rt.stop(cid, 5)
            end = await waiting
            assert (end.exit_code, end.stdout) == (4, "bye\n")
            await rt.remove(cid)
        finally:
            await rt.close()

    asyncio.run(main())


def test_missing_image_is_a_clear_error(containerd, namespace):
    async def main():
        rt = runtime_for(containerd, namespace)
        try:
            with pytest.raises(ImageNotFound, match="not in containerd namespace"):
                await rt.start(ContainerSpec(name="missing", image="nope:1", command=["true"]))
            assert await rt.list({}) == []
        finally:
            await rt.close()

    asyncio.run(main())


def test_reattach_from_another_runtime_object_and_list_by_label(containerd, namespace):
    async def main():
        first = runtime_for(containerd, namespace)
        cid = await first.start(spec(["sh", "-c", "echo early; sleep 1; echo late; "
                                                  "echo err >&2"],
                                     labels={"cronman.agent": "a1"}))
        await asyncio.sleep(0.3)
        await first.close()  # the agent went away; the container keeps running
        second = runtime_for(containerd, namespace)
        try:
            (info,) = await second.list({"cronman.agent": "a1"})
            assert info.id == cid and info.running
            assert await second.list({"cronman.agent": "other"}) == []
            end = await second.wait(cid)
            # What it wrote before, and while, no agent watched it is kept.
            assert (end.exit_code, end.stdout, end.stderr) == (0, "early\nlate\n", "err\n")
            await second.remove(cid)
            assert await second.list({"cronman.agent": "a1"}) == []
        finally:
            await second.close()

    asyncio.run(main())


def test_wait_survives_a_containerd_restart(containerd, namespace):
    async def main():
        rt = runtime_for(containerd, namespace)
        try:
            cid = await rt.start(spec(["sh", "-c", "sleep 2; echo through; exit 5"]))
            waiting = asyncio.ensure_future(rt.wait(cid))
            await asyncio.sleep(0.3)
            await asyncio.to_thread(containerd.restart)
            end = await asyncio.wait_for(waiting, 20)
            assert (end.exit_code, end.stdout) == (5, "through\n")
            await rt.remove(cid)
        finally:
            await rt.close()

    asyncio.run(main())


def test_import_is_idempotent_and_reads_docker_archives(containerd, namespace, tmp_path):
    layer = busybox_layer()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Cmd": ["echo", "from docker"], "Env": ["PATH=/bin"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    archive = tmp_path / "docker.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in [("cfg.json", config), ("l1/layer.tar", layer),
                           ("manifest.json", json.dumps([{
                               "Config": "cfg.json", "RepoTags": ["dockertest:1"],
                               "Layers": ["l1/layer.tar"]}]).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    async def main():
        rt = runtime_for(containerd, namespace)
        try:
            assert await rt.import_image(archive) == ["docker.io/library/dockertest:1"]
            assert await rt.import_image(archive) == ["docker.io/library/dockertest:1"]
            end = await run_once(rt, ContainerSpec(name="dock", image="docker.io/library/"
                                                   "dockertest:1"))
            assert (end.exit_code, end.stdout) == (0, "from docker\n")
        finally:
            await rt.close()

    asyncio.run(main())


def _first(*paths: str) -> str:
    for path in paths:
        if Path(path).exists():
            return Path(path).read_text().strip()
    raise AssertionError(f"none of {paths} exists")
