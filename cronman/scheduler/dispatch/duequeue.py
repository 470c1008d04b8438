"""Runs waiting for their due time, on one loop timer, taken highest priority
first and a bounded number per loop turn.

With a loop timer per run, a node that is behind runs every timer that has
expired in one loop turn, in due order: a raised-priority fire that fell due
waits behind the whole turn's low-priority fires, and the turn grows with
the backlog. Here the runs wait in a ``TimerHeap`` (by due time; the due
ones in lanes by priority); one loop timer is set for the earliest, and each
turn takes at most ``per_turn`` of the due runs, highest priority first
(within a priority, runs that were on time before a backlog handed over
already due). The rest wait for the next turn, after the answers and other
callbacks that came in meanwhile. A node that keeps up takes every due run
in the turn it falls due, as before.

Runs at or below the default priority start on a *dispatch tick*: the first
multiple of ``tick_ms`` (reference ms) at or after their due time, never
before it. The fires of a tick go out together, and their answers
come back close together, instead of each fire waking the loop twice (its
timer, its answer): on a node with fires spread over the second, a wake-up
costs more than the fire it serves (cold caches), and the tick trades up to
``tick_ms`` of lateness for a fifth of a fire's CPU. Raised priorities keep
their exact timer; runs already due go at once.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from cronman.scheduler.fires import ActiveRun
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.timers import Entry, TimerHeap
from cronman.vocabulary import DEFAULT_PRIORITY

# Due runs taken per loop turn, highest priority first.
DUE_PER_TURN = 64
# The loop timer aims this far past a due time (the loop's timers may run a
# hair early, and a callback must not go out before its scheduled time).
SCHEDULE_MARGIN_MS = 0.3


class DueHandle:
    """A run's place in the queue (its ``ActiveRun.handle`` while it waits).
    Cancelled, or replaced by another handle, it is skipped when it falls due."""

    __slots__ = ("ar",)

    def __init__(self, ar: ActiveRun) -> None:
        self.ar = ar

    def cancel(self) -> None:
        if self.ar.handle is self:
            self.ar.handle = None


def _waiting(entry: Entry) -> bool:
    handle: DueHandle = entry[4]
    return handle.ar.handle is handle


class DueRuns(Protocol):
    """What a run's due time goes on to (the dispatcher)."""

    def due(self, ar: ActiveRun) -> None:
        """``ar``'s due time has come (or its wait is over): go on with it."""


class DueQueue:
    """Calls ``runs.due(run)`` for each run at its due time (reference ms)."""

    def __init__(self, clock: ReferenceClock, runs: DueRuns, *,
                 per_turn: int = DUE_PER_TURN, tick_ms: int = 0) -> None:
        self._clock = clock
        self._due = runs.due  # bound once: called per fire
        self._per_turn = per_turn
        self._tick = max(0, int(tick_ms))  # 0: every run on its own exact timer
        self._heap = TimerHeap()
        self._seq = 0  # ties between equal due times, priorities and run ids
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0  # the reference ms the timer is set for (a due time or a tick)
        self._turn_queued = False  # a turn is queued (runs are due now)

    def __len__(self) -> int:
        """Entries held, including ones cancelled and not yet fallen due."""
        return len(self._heap)

    def at(self, ar: ActiveRun, at_ms: int) -> bool:
        """Call ``runs.due(ar)`` once the reference clock reaches ``at_ms``;
        whether that is still to come (False: in a coming loop turn)."""
        handle = DueHandle(ar)
        ar.handle = handle
        self._seq += 1
        now_ms = self._clock.now_ms()
        # Within a priority, runs that waited for their time go before runs
        # already due when handed over (a catch-up, a takeover): a backlog
        # does not make the fires that are on time late too.
        waits = at_ms > now_ms
        raised = ar.job.priority - DEFAULT_PRIORITY
        # The heap keeps entries above DEFAULT_PRIORITY apart (a run at the
        # default priority is pushed at it or one below): ``_next_wake``
        # rounds only the others to a tick.
        self._heap.push(at_ms, DEFAULT_PRIORITY + 2 * raised + waits - 1, ar.run_id, self._seq,
                        handle)
        self._wake_for(at_ms if raised > 0 else self._on_tick(at_ms, now_ms), now_ms)
        return waits

    def _on_tick(self, at_ms: int, now_ms: int) -> int:
        """When a run at or below the default priority due at ``at_ms`` goes:
        the first dispatch tick at or after it (at once when already due)."""
        tick = self._tick
        if not tick or at_ms <= now_ms:
            return at_ms
        return -(-at_ms // tick) * tick

    def _next_wake(self, now_ms: int) -> int | None:
        """When the next turn is due, by the runs held (None: none)."""
        plain, raised = self._heap.peek_due_split()
        if plain is not None:
            plain = self._on_tick(plain, now_ms)
            if raised is None or plain < raised:
                return plain
        return raised

    def _wake_for(self, at_ms: int, now_ms: int) -> None:
        """Make sure a turn runs once ``at_ms`` (reference ms) is reached."""
        if self._turn_queued:
            return
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        timer = self._timer
        if at_ms <= now_ms:
            if timer is not None:
                timer.cancel()
                self._timer = None
            self._turn_queued = True
            loop.call_soon(self._turn)
            return
        if timer is not None:
            if self._timer_at <= at_ms:
                return
            timer.cancel()
        self._timer_at = at_ms
        # At least a millisecond: the loop's timers have that resolution.
        delay = max(0.001, (at_ms + SCHEDULE_MARGIN_MS - now_ms) / 1000.0)
        self._timer = loop.call_at(loop.time() + delay, self._turn)

    def _turn(self) -> None:
        self._timer = None
        self._turn_queued = False
        now_ms = self._clock.now_ms()
        for entry in self._heap.pop_due(now_ms, _waiting, self._per_turn):
            handle: DueHandle = entry[4]
            ar = handle.ar
            if ar.handle is handle:  # an earlier run of this turn may have cancelled it
                self._due(ar)
        now_ms = self._clock.now_ms()  # the turn took its time
        nxt = self._next_wake(now_ms)
        if nxt is not None:
            self._wake_for(nxt, now_ms)

    def clear(self) -> None:
        """Forget every run (the node stops)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
