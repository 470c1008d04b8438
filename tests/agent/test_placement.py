"""Container runs placed on worker agents: capacity, selector, waiting for room,
priority, timeout, cancellation and adoption (in-process agents, real
containerd and Redis)."""

from __future__ import annotations

import asyncio
import time

from cronman.host_policy import HostPolicy
from cronman.timeutil import parse_rfc3339
from tests.agent.harness import AgentRig, delivery, wait_until


def run_rig(containerd, namespace, redis_url, body):
    async def main():
        rig = AgentRig(containerd, namespace, redis_url)
        try:
            await body(rig)
        finally:
            await rig.close()

    asyncio.run(main())


def test_placed_by_selector_and_free_capacity(containerd, namespace, redis_url):
    async def body(rig):
        await rig.start_agent("small", cpu=1, zone="a")
        await rig.start_agent("big", cpu=2, zone="b")
        target = rig.target()
        out = await target.deliver(delivery(["echo", "hi"], selector={"zone": "b"}))
        assert out.ok and out.result["agent_id"] == "big", out
        assert out.result["logs_tail"] == {"stdout": "hi\n", "stderr": ""}
        out = await target.deliver(delivery(["true"], cpu=1.5))
        assert out.ok and out.result["agent_id"] == "big"
        out = await target.deliver(delivery(["sh", "-c", "exit 3"], selector={"zone": "a"}))
        assert not out.ok and out.retryable and out.result["agent_id"] == "small"
        assert out.result["exit_code"] == 3 and "exited with code 3" in out.error
        missing = await target.deliver(delivery(["true"], image="nope:1"))
        assert not missing.ok and not missing.retryable
        assert "not in containerd namespace" in missing.error

    run_rig(containerd, namespace, redis_url, body)


def test_no_agent_with_room_fails_after_the_placement_deadline(containerd, namespace,
                                                               redis_url):
    async def body(rig):
        await rig.start_agent("a", cpu=1, zone="a")
        target = rig.target(placement_timeout=1.0)
        t0 = time.monotonic()
        out = await target.deliver(delivery(["true"], selector={"zone": "c"}))
        assert not out.ok and 0.9 < time.monotonic() - t0 < 3
        assert "no worker agent with room" in out.error
        assert "none of the 1 live agents matches the selector" in out.error
        out = await target.deliver(delivery(["true"], cpu=4))
        assert "bigger than any matching agent" in out.error

    run_rig(containerd, namespace, redis_url, body)


def test_runs_wait_for_room_higher_priority_first(containerd, namespace, redis_url):
    async def body(rig):
        await rig.start_agent("one", cpu=1, slots=1)
        target = rig.target()
        first = asyncio.ensure_future(target.deliver(delivery(["sleep", "1"])))
        await wait_until(lambda: rig.agents["one"][0].held, 5, "the first run to start")
        low = asyncio.ensure_future(target.deliver(delivery(["true"], priority=1)))
        await asyncio.sleep(0.2)
        high = asyncio.ensure_future(target.deliver(delivery(["true"], priority=5)))
        results = await asyncio.gather(first, low, high)
        assert all(r.ok for r in results), results
        started = [parse_rfc3339(r.result["container_started_at"]) for r in results]
        finished = parse_rfc3339(results[0].result["container_finished_at"])
        assert started[2] < started[1]  # higher priority first
        assert started[2] >= finished.replace(microsecond=0)  # only once the slot was free

    run_rig(containerd, namespace, redis_url, body)


def test_timeout_stops_the_container(containerd, namespace, redis_url):
    async def body(rig):
        await rig.start_agent("a")
        t0 = time.monotonic()
        out = await rig.target().deliver(delivery(["sh", "-c", "echo begun; sleep 30"],
                                                  timeout=1))
        assert not out.ok and out.error.startswith("timeout")
        assert out.result["exit_code"] == 137 and out.result["logs_tail"]["stdout"] == "begun\n"
        assert time.monotonic() - t0 < 4  # 1 s, then SIGKILL after the 0.5 s grace

    run_rig(containerd, namespace, redis_url, body)


def test_oom_fails_with_137_and_says_oom(containerd, namespace, redis_url):
    async def body(rig):
        await rig.start_agent("a")
        out = await rig.target().deliver(delivery(
            ["sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1"], memory_mb=16))
        assert not out.ok and out.result["exit_code"] == 137 and out.result["oom_killed"]
        assert "OOM" in out.error

    run_rig(containerd, namespace, redis_url, body)


def test_a_cancelled_delivery_stops_its_container(containerd, namespace, redis_url):
    async def body(rig):
        agent = await rig.start_agent("a")
        target = rig.target()
        d = delivery(["sleep", "30"])
        task = asyncio.ensure_future(target.deliver(d))
        await wait_until(lambda: any(h.container_id for h in agent.held.values()), 5,
                         "the container to start")
        t0 = time.monotonic()
        task.cancel()
        # The next delivery of the same job waits until the old container is gone.
        out = await target.deliver(delivery(["true"], job_id=d.job_id))
        assert out.ok and time.monotonic() - t0 < 5
        await wait_until(lambda: not agent.held, 3, "the agent to let go of both runs")
        assert await rig.runtime().list({"cronman.run": d.run_id}) == []

    run_rig(containerd, namespace, redis_url, body)


def test_a_redispatched_run_adopts_its_live_container(containerd, namespace, redis_url):
    async def body(rig):
        agent = await rig.start_agent("a")
        d1 = delivery(["sh", "-c", "sleep 1; echo once"])
        # Attempt 1 was placed by a node that died right after.
        directory = rig.target().directory
        assert directory.place("a", d1.run_id, 1, 1.0, 64,
                               {"kind": "start", "run_id": d1.run_id, "attempt": 1,
                                "namespace": "default", "host_policy": HostPolicy().to_dict(),
                                "target": d1.target, "timeout": 30}, 5000, 60000) == "placed"
        await wait_until(lambda: agent.held, 5, "the container to start")
        again = delivery(d1.target["command"], run_id=d1.run_id, attempt=2)
        out = await rig.target().deliver(again)
        assert out.ok and out.result["logs_tail"]["stdout"] == "once\n"
        assert agent.reported == 1  # one container, reported once

    run_rig(containerd, namespace, redis_url, body)


def test_offers_a_dead_agent_lets_lapse_go_to_a_live_one(containerd, namespace, redis_url):
    from cronman.coordination.agents import AgentInfo, Capacity

    async def body(rig):
        await rig.start_agent("alive")
        target = rig.target(offer_seconds=0.5)
        # An agent that died a moment ago: its heartbeat has not expired yet.
        target.directory.agent_heartbeat(AgentInfo(id="ghost", capacity=Capacity(64, 65536, 64)),
                                         60_000)
        t0 = time.monotonic()
        outs = [await target.deliver(delivery(["true"])) for _ in range(6)]
        assert all(o.ok and o.result["agent_id"] == "alive" for o in outs), outs
        assert time.monotonic() - t0 < 6  # at most one lapsed offer, then the ghost comes last

    run_rig(containerd, namespace, redis_url, body)
