"""``RecordingTarget``: the in-process twin of a target, for tests of the dispatcher.

It records every delivery (with the monotonic time it arrived), answers with
scripted outcomes (or a function of the delivery), can take its time (a delay,
fixed or per delivery), and counts how many deliveries are in flight at once.

    target = RecordingTarget("http")
    target.script(Outcome(False, error="HTTP 503"), Outcome(True, {"http_status": 204}))
    registry = TargetRegistry([target])
    ...
    await target.wait_for(2)
    assert [d.attempt for d in target.deliveries] == [1, 2]
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from cronman.callbacks.base import Delivery, Outcome

DEFAULT_OUTCOME = Outcome(True, {"http_status": 204})


@dataclass(frozen=True, slots=True)
class Recorded:
    delivery: Delivery
    at: float  # time.monotonic() when deliver() was called
    wall: float  # time.time() when deliver() was called


class RecordingTarget:
    """Records deliveries; answers with scripted outcomes after an optional delay."""

    def __init__(
        self,
        kind: str = "http",
        *,
        outcome: Outcome | Callable[[Delivery], Outcome] = DEFAULT_OUTCOME,
        delay: float | Callable[[Delivery], float] = 0.0,
    ) -> None:
        self.kind = kind
        self.pool_limit: int | None = None
        self._outcome = outcome
        self._delay = delay
        self._script: deque[Outcome] = deque()
        self.records: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.closed = False
        self._changed: asyncio.Condition | None = None

    # -- configuration --------------------------------------------------------

    def script(self, *outcomes: Outcome) -> None:
        """Answer the next deliveries with these outcomes, in order, then the default."""
        self._script.extend(outcomes)

    # -- inspection -----------------------------------------------------------

    @property
    def deliveries(self) -> list[Delivery]:
        return [r.delivery for r in self.records]

    def run_ids(self) -> list[str]:
        return [r.delivery.run_id for r in self.records]

    async def wait_for(self, count: int, timeout: float = 5.0) -> list[Delivery]:
        """Wait until at least ``count`` deliveries were recorded; return them."""
        cond = self._condition()
        async with cond:
            await asyncio.wait_for(cond.wait_for(lambda: len(self.records) >= count), timeout)
        return self.deliveries

    # -- Target ---------------------------------------------------------------

    async def deliver(self, delivery: Delivery) -> Outcome:
        self.records.append(Recorded(delivery, time.monotonic(), time.time()))
        cond = self._condition()
        async with cond:
            cond.notify_all()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            delay = self._delay(delivery) if callable(self._delay) else self._delay
            if delay:
                await asyncio.sleep(delay)
            if self._script:
                return self._script.popleft()
            return self._outcome(delivery) if callable(self._outcome) else self._outcome
        finally:
            self.in_flight -= 1

    def hand_back(self) -> None:
        """Nothing outlives a delivery here."""

    async def close(self) -> None:
        self.closed = True

    def _condition(self) -> asyncio.Condition:
        # Created on first use so it binds to the loop that runs the test.
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed
