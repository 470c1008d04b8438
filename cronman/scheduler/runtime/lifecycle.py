"""What every part of a node shares: its stop signal and its worker threads.

The event loop owns the job table, the dispatcher and every delivery; it
never blocks on I/O. Blocking calls go to a small set of thread pools, each
for one kind of work, so that a slow kind never holds back another:

- **claim**: ``claim_batch`` and ``take_over_batch`` (a Redis pipeline, then
  one database commit per batch);
- **write**: the result writer's flushes;
- **misc**: the other database calls (sync reads, sweeper, requested runs,
  partition upkeep);
- **lease**: lease renewal (never behind a sweeper waiting for an
  unreachable coordinator: this node's own leases would lapse and be taken);
- **beat**: membership calls (a slow database must never hold back the
  heartbeat, or live nodes drop out of the membership);
- **start**: start marks, right before each first attempt (never behind a
  claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from cronman.eventloop import PerLoop, wait_at_most, wake

log = logging.getLogger(__name__)
T = TypeVar("T")


class Lifecycle:
    """A node's stop signal, and loops that run until it is given."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sleepers: set[asyncio.Future[None]] = set()
        self._sleep_loop: PerLoop[asyncio.AbstractEventLoop] = PerLoop()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the node runs on (``request_stop`` reaches it from any thread)."""
        self._loop = loop

    @property
    def bound_loop(self) -> asyncio.AbstractEventLoop | None:
        """The node's loop once it runs, else None."""
        return self._loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "the node is not running"
        return self._loop

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop (on the loop)."""
        self._stop.set()
        for sleeper in list(self._sleepers):
            wake(sleeper)

    def request_stop(self) -> None:
        """Stop, from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.stop)

    async def wait(self) -> None:
        """Until the node stops."""
        await self._stop.wait()

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True when the node is stopping. (One future
        and one timer: the node's periodic loops sleep many times a second.)"""
        if self._stop.is_set():
            return True
        loop = self._sleep_loop.get(asyncio.get_running_loop)
        sleeper = loop.create_future()
        self._sleepers.add(sleeper)
        try:
            await wait_at_most(loop, sleeper, seconds)
        finally:
            self._sleepers.discard(sleeper)
        return self._stop.is_set()

    async def forever(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        """Run a loop until the node stops; an unexpected error is logged and
        the loop restarted a second later."""
        while not self._stop.is_set():
            try:
                await fn()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler %s loop failed; restarting it in 1 s", name)
                await self.sleep(1.0)


class Pool:
    """One thread pool, awaited from the event loop."""

    def __init__(self, name: str, threads: int) -> None:
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix=f"cronman-{name}")

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the pool."""
        return await asyncio.get_running_loop().run_in_executor(self.executor,
                                                                partial(fn, *args))

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class Pools:
    """The node's thread pools (see the module docstring)."""

    def __init__(self) -> None:
        self.claim = Pool("claim", 1)
        self.write = Pool("write", 1)
        self.misc = Pool("misc", 3)
        self.beat = Pool("beat", 1)
        self.start = Pool("start", 1)
        self.lease = Pool("lease", 1)

    def shutdown(self) -> None:
        for pool in (self.claim, self.write, self.misc, self.beat, self.start, self.lease):
            pool.shutdown()
