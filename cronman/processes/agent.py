"""The worker agent process: its runtime, its capacity and its directory in Redis.

``run_agent`` is what ``cronman agent`` runs until SIGTERM/SIGINT;
``cronman standalone`` runs a ``process`` agent of its own with
``host_capacity``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket

from cronman.config import Settings
from cronman.worker_agent.runtime import ContainerRuntime

log = logging.getLogger("cronman.agent")


def host_capacity() -> tuple[float, int]:
    """(cores, MiB of memory) of this host."""
    cores = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else os.cpu_count() or 1)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    return cores, int(memory)


def build_runtime(kind: str, settings: Settings) -> ContainerRuntime:
    """The agent's runtime: ``process`` (plain processes) or ``containerd``."""
    if kind == "process":
        from cronman.worker_agent.runtimes.process import ProcessRuntime

        try:
            return ProcessRuntime(state_dir=settings.agent_state_dir)
        except OSError as exc:
            log.warning("the process runtime cannot keep its runs in CRONMAN_AGENT_STATE_DIR "
                        "(%s): in a temporary directory instead, so a run does not outlive "
                        "this agent process (set CRONMAN_AGENT_STATE_DIR to a writable one)",
                        exc)
            return ProcessRuntime()
    from cronman.worker_agent.runtimes.containerd import ContainerdRuntime

    return ContainerdRuntime(settings.containerd_address, settings.containerd_namespace,
                             state_dir=settings.agent_state_dir)


async def run_agent(settings: Settings, runtime_kind: str) -> None:
    """Run a worker agent until SIGTERM/SIGINT (needs ``settings.redis_url``)."""
    from cronman.coordination.agents import Capacity
    from cronman.coordination.agents_redis import RedisAgentDirectory
    from cronman.worker_agent.agent import WorkerAgent

    cores, memory = host_capacity()
    capacity = Capacity(settings.agent_cpu or cores, settings.agent_memory_mb or memory,
                        settings.agent_slots)
    directory = RedisAgentDirectory(settings)
    runtime = build_runtime(runtime_kind, settings)
    worker = WorkerAgent(settings.agent_id, directory, runtime, capacity=capacity,
                         labels=settings.agent_label_map, heartbeat_ttl=settings.heartbeat_ttl,
                         lease_seconds=settings.lease_seconds, address=socket.gethostname(),
                         policy=settings.agent_policy(process_runtime=runtime.name == "process"))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("worker agent %s (pid %d) starting", settings.agent_id, os.getpid())
    try:
        await worker.main(stop)
    finally:
        directory.close()
