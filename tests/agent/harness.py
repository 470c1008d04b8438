"""In-process worker agents and a container target, on real containerd and Redis.

``AgentRig`` runs ``WorkerAgent``s (containerd runtime, Redis directory) as
tasks of the test's event loop and builds ``ContainerTarget``s over the same
Redis directory, as a scheduler node does; ``delivery`` makes the Delivery a
dispatcher would hand the target.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from cronman.callbacks.base import Delivery
from cronman.callbacks.container import ContainerTarget
from cronman.config import Settings
from cronman.coordination.agents import Capacity
from cronman.coordination.agents_redis import RedisAgentDirectory
from cronman.host_policy import HostPolicy
from cronman.worker_agent.agent import WorkerAgent
from cronman.worker_agent.runtime import ContainerRuntime
from cronman.worker_agent.runtimes.containerd import ContainerdRuntime
from tests.support.containerd import TEST_IMAGE


class AgentRig:
    def __init__(self, containerd: Any, namespace: str, redis_url: str) -> None:
        self.containerd = containerd
        self.namespace = namespace
        self.settings = Settings(redis_url=redis_url,
                                 redis_key_prefix=f"t{uuid.uuid4().hex[:8]}")
        self.agents: dict[str, tuple[WorkerAgent, asyncio.Event, asyncio.Task[None]]] = {}
        self.targets: list[ContainerTarget] = []

    def runtime(self) -> ContainerdRuntime:
        return ContainerdRuntime(self.containerd.socket, self.namespace,
                                 state_dir=self.containerd.dir / "fifos")

    async def start_agent(self, agent_id: str, *, cpu: float = 2, memory_mb: int = 1024,
                          slots: int = 8, lease: float = 3.0, policy: HostPolicy | None = None,
                          runtime: ContainerRuntime | None = None, **labels: str
                          ) -> WorkerAgent:
        agent = WorkerAgent(agent_id, RedisAgentDirectory(self.settings),
                            runtime or self.runtime(),
                            capacity=Capacity(cpu, memory_mb, slots), labels=labels,
                            heartbeat_ttl=3.0, lease_seconds=lease, stop_grace=0.5,
                            policy=policy)
        stop = asyncio.Event()
        task = asyncio.create_task(agent.main(stop))
        await asyncio.wait_for(agent.ready.wait(), 10)
        self.agents[agent_id] = (agent, stop, task)
        return agent

    def target(self, placement_timeout: float = 10.0, offer_seconds: float = 5.0,
               grants: Any = None, settings: Settings | None = None) -> ContainerTarget:
        target = ContainerTarget(RedisAgentDirectory(self.settings), settings,
                                 placement_timeout=placement_timeout, poll=0.05,
                                 offer_seconds=offer_seconds, grants=grants)
        self.targets.append(target)
        return target

    async def close(self) -> None:
        for _, stop, _ in self.agents.values():
            stop.set()
        await asyncio.gather(*(t for _, _, t in self.agents.values()), return_exceptions=True)
        for target in self.targets:
            await target.close()
        rt = self.runtime()
        for info in await rt.list({}):
            await rt.stop(info.id, 0)
            await rt.wait(info.id)
            await rt.remove(info.id)
        await rt.close()


def delivery(command: list[str], *, run_id: str | None = None, attempt: int = 1,
             priority: int = 0, job_id: str = "job", namespace: str = "default",
             **target: Any) -> Delivery:
    spec = {"kind": "container", "image": TEST_IMAGE, "command": command, "env": {},
            "cpu": 1, "memory_mb": 64, "timeout": 30, "selector": {}, "network": "none",
            "user": None}
    spec.update(target)
    return Delivery(job_id=job_id, run_id=run_id or str(uuid.uuid4()),
                    scheduled_for=datetime.now(UTC), attempt=attempt, target=spec,
                    priority=priority, namespace=namespace)


async def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await check() if asyncio.iscoroutinefunction(check) else check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)
