"""The process runtime: the same contract as containerd's, as child processes."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from cronman.worker_agent.runtime import ContainerSpec, RuntimeError_
from cronman.worker_agent.runtimes.process import ProcessRuntime


def test_command_env_exit_code_logs_apart_and_labels():
    async def main():
        rt = ProcessRuntime()
        try:
            cid = await rt.start(ContainerSpec(
                name="p1", image="", command=["sh", "-c", "echo out $A; echo err >&2; exit 3"],
                env={"A": "b"}, labels={"cronman.agent": "x"}))
            assert [c.id for c in await rt.list({"cronman.agent": "x"})] == ["p1"]
            end = await rt.wait(cid)
            assert (end.exit_code, end.stdout, end.stderr) == (3, "out b\n", "err\n")
            await rt.remove(cid)
            assert await rt.list({}) == []
            if os.geteuid() == 0:  # the default user is not root
                cid = await rt.start(ContainerSpec(name="p2", image="", command=["id", "-u"]))
                assert (await rt.wait(cid)).stdout == "65534\n"
                await rt.remove(cid)
            with pytest.raises(RuntimeError_, match="needs a command"):
                await rt.start(ContainerSpec(name="p3", image="busybox"))
            with pytest.raises(RuntimeError_, match="cannot start"):
                await rt.start(ContainerSpec(name="p4", image="", command=["/no/such/thing"]))
        finally:
            await rt.close()

    asyncio.run(main())


def test_stop_reaches_the_process_group_and_kills_after_the_grace():
    async def main():
        rt = ProcessRuntime()
        try:
            cid = await rt.start(ContainerSpec(
                name="p", image="", command=["sh", "-c", "trap '' TERM; sleep 30 & wait"]))
            waiting = asyncio.ensure_future(rt.wait(cid))
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            await rt.stop(cid, 0.5)
            end = await asyncio.wait_for(waiting, 5)
            assert end.exit_code == 137 and 0.4 < time.monotonic() - t0 < 3
        finally:
            await rt.close()

    asyncio.run(main())


def test_a_run_outlives_its_runtime_and_is_found_again_with_its_output(tmp_path):
    """An agent SIGKILLed leaves its runtime object behind unclosed: the
    command carries on under its supervisor (no SIGPIPE, no blocked write),
    and a runtime on the same state dir finds it, stops it, reads its end."""
    command = "echo early; sleep 1; echo late; echo err >&2; exit 3"

    async def first():
        rt = ProcessRuntime(state_dir=tmp_path)  # never closed: its agent died
        await rt.start(ContainerSpec(name="p", image="", command=["sh", "-c", command],
                                     labels={"cronman.agent": "a1"}))
        await rt.start(ContainerSpec(name="q", image="", command=["sleep", "30"],
                                     labels={"cronman.agent": "a1"}))
        await asyncio.sleep(0.3)

    async def second():
        rt = ProcessRuntime(state_dir=tmp_path)
        try:
            found = {c.id: c.running for c in await rt.list({"cronman.agent": "a1"})}
            assert found == {"p": True, "q": True}
            end = await asyncio.wait_for(rt.wait("p"), 10)
            assert (end.exit_code, end.stdout, end.stderr) == (3, "early\nlate\n", "err\n")
            await rt.stop("q", 0.5)
            assert (await asyncio.wait_for(rt.wait("q"), 10)).exit_code == 143
            await rt.remove("p")
            await rt.remove("q")
            assert await rt.list({}) == []
        finally:
            await rt.close()

    asyncio.run(first())
    asyncio.run(second())


def test_output_is_bounded_on_disk():
    async def main():
        rt = ProcessRuntime()
        try:
            cid = await rt.start(ContainerSpec(
                name="big", image="", command=["sh", "-c", "yes 0123456789 | head -c 100000"]))
            end = await rt.wait(cid)
            assert end.exit_code == 0 and len(end.stdout) == 4096
            kept = sum(f.stat().st_size for f in (rt.state_dir / cid).glob("stdout*"))
            assert 4096 <= kept <= 2 * 4096
        finally:
            await rt.close()

    asyncio.run(main())


def test_the_tails_are_read_while_the_process_runs():
    async def main():
        rt = ProcessRuntime()
        try:
            cid = await rt.start(ContainerSpec(name="t1", image="", command=[
                "sh", "-c", "echo first; echo warn >&2; sleep 30"]))
            deadline = time.monotonic() + 10
            while rt.tails(cid) != ("first\n", "warn\n") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert rt.tails(cid) == ("first\n", "warn\n")
            await rt.stop(cid, 0.5)
            end = await rt.wait(cid)
            assert (end.stdout, end.stderr) == ("first\n", "warn\n")
            await rt.remove(cid)
        finally:
            await rt.close()

    asyncio.run(main())
