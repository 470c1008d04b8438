"""The event loop a scheduler node runs on: uvloop when it is installed, asyncio's otherwise.

uvloop (libuv underneath) spends less CPU per callback, per socket read and
per timer than asyncio's pure-Python loop, and a node's CPU per fire is
mostly event-loop work (one HTTP request per fire). ``CRONMAN_EVENT_LOOP``
chooses: ``auto`` (the default: uvloop if importable), ``uvloop`` (required:
an error if it is missing) or ``asyncio``.

One difference to know: uvloop's ``loop.time()`` and timers have millisecond
resolution (asyncio's: the monotonic clock's).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

EVENT_LOOPS = ("auto", "uvloop", "asyncio")
DEFAULT_EVENT_LOOP = "auto"

T = TypeVar("T")


def loop_factory(choice: str = DEFAULT_EVENT_LOOP) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop for ``choice`` (one of :data:`EVENT_LOOPS`)."""
    if choice not in EVENT_LOOPS:
        raise ValueError(f"event loop must be one of {', '.join(EVENT_LOOPS)}, not {choice!r}")
    if choice == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise RuntimeError("CRONMAN_EVENT_LOOP=uvloop, but uvloop is not installed") from None
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: str = DEFAULT_EVENT_LOOP) -> T:
    """``asyncio.run(main)`` on the loop ``choice`` names."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)


class LoopBinding:
    """The running loop an object was made for, and whether it still is the
    running one, told without ``asyncio.get_running_loop()``: on Python 3.11
    that checks the process id with a system call each time, which the
    per-fire paths (each HTTP callback, each start mark) would pay."""

    __slots__ = ("loop", "_thread")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def here(self) -> bool:
        """Whether this loop is the one running now (one loop runs in a
        thread at a time, so: it runs, and on this thread)."""
        return self._thread == threading.get_ident() and self.loop.is_running()


class PerLoop(Generic[T]):
    """An object made for the running event loop (a client, a connection),
    made again when another loop runs (tests run several, one after another).

    ``get`` tells the loop through a :class:`LoopBinding`, so the per-fire
    paths that ask for their client pay no system call."""

    __slots__ = ("_value", "_binding")

    def __init__(self) -> None:
        self._value: T | None = None
        self._binding: LoopBinding | None = None

    def get(self, make: Callable[[], T]) -> T:
        """The object for the running loop, made by ``make`` on first use there."""
        value, binding = self._value, self._binding
        if value is None or binding is None or not binding.here():
            self._binding = LoopBinding()  # first: raises when no loop runs
            value = self._value = make()
        return value

    def take(self) -> tuple[T | None, bool]:
        """Forget the object; return it (None if none was made) and whether
        it was made for the running loop (only there can it be closed
        cleanly)."""
        value, binding = self._value, self._binding
        self._value = self._binding = None
        return value, value is not None and binding is not None and binding.here()


class Wakeup:
    """A flag that one task at a time waits on, with a timeout.

    What ``asyncio.wait_for(event.wait(), timeout)`` does for the node's
    polling loops (the claimer, the standby, the result writer), without the
    task, the cancellation and the running-loop look-ups that costs per wait:
    one future and one timer. ``set`` and ``clear`` are for the loop's thread
    (as ``asyncio.Event``'s are).
    """

    __slots__ = ("_set", "_waiter", "_loop")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None
        self._loop: PerLoop[asyncio.AbstractEventLoop] = PerLoop()

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout: float | None = None) -> bool:
        """Until set, or ``timeout`` seconds passed; whether it is set."""
        if self._set:
            return True
        if self._waiter is not None:
            raise RuntimeError("a Wakeup is waited on by one task at a time")
        loop = self._loop.get(asyncio.get_running_loop)
        waiter = self._waiter = loop.create_future()
        try:
            await wait_at_most(loop, waiter, timeout)
        finally:
            self._waiter = None
        return self._set


def wake(waiter: asyncio.Future[None]) -> None:
    """Resolve ``waiter`` (with None) unless it is done already."""
    if not waiter.done():
        waiter.set_result(None)


async def wait_at_most(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None],
                       timeout: float | None) -> None:
    """Until ``waiter`` is resolved, or ``timeout`` seconds passed (None: no
    bound), when it is resolved by ``wake``: one timer, no task."""
    timer = None if timeout is None else loop.call_later(max(0.0, timeout), wake, waiter)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
