"""The node loops' waits: a Wakeup and Lifecycle.sleep end on time, when set, when stopped."""

from __future__ import annotations

import asyncio
import time

import pytest

from cronman.eventloop import Wakeup
from cronman.scheduler.runtime.lifecycle import Lifecycle


def test_a_wakeup_ends_when_set_or_when_its_time_is_up() -> None:
    async def main() -> None:
        w = Wakeup()
        started = time.monotonic()
        assert await w.wait(0.05) is False
        assert time.monotonic() - started >= 0.04
        asyncio.get_running_loop().call_later(0.01, w.set)
        started = time.monotonic()
        assert await w.wait(5) is True
        assert time.monotonic() - started < 1
        assert await w.wait(5) is True  # still set: at once
        w.clear()
        assert not w.is_set() and await w.wait(0) is False

    asyncio.run(main())


def test_a_wakeup_is_waited_on_by_one_task_and_survives_a_cancelled_wait() -> None:
    async def main() -> None:
        w = Wakeup()
        first = asyncio.ensure_future(w.wait(5))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="one task"):
            await w.wait(1)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        asyncio.get_running_loop().call_soon(w.set)
        assert await w.wait(5) is True

    asyncio.run(main())


def test_stopping_wakes_every_sleeper_at_once() -> None:
    async def main() -> None:
        life = Lifecycle()
        life.bind(asyncio.get_running_loop())
        started = time.monotonic()
        sleepers = [asyncio.ensure_future(life.sleep(30)) for _ in range(3)]
        await asyncio.sleep(0.01)
        life.request_stop()
        assert await asyncio.gather(*sleepers) == [True, True, True]
        assert time.monotonic() - started < 1
        assert await life.sleep(30) is True  # stopped: no wait at all
        assert await Lifecycle().sleep(0.01) is False

    asyncio.run(main())
