"""A node's place in the cluster: join, heartbeat, the live members, leave.

The node heartbeats into the coordinator several times per TTL and reads the
live membership back each time. A change is handed to the ``MembershipListener``
(the job sync, which recomputes ownership). A member that has missed a few
heartbeats is reported as *silent* before it is gone, so that the jobs its
departure would hand over can be prepared ahead.

When the coordinator cannot be reached, the node keeps its last view of the
membership (at first: itself alone) and says so in the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from cronman.coordination.base import Coordinator, NodeInfo
from cronman.errors import CoordinatorUnavailable
from cronman.scheduler.runtime.clock import ReferenceClock
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.metrics import NodeMetrics
from cronman.scheduler.runtime.ratelog import RateLimitedLog

log = logging.getLogger(__name__)

SETTLE_STEP = 1.0  # start: how long the membership must hold still before loading
SETTLE_MAX = 5.0  # start: the longest wait for it
SILENT_BEATS = 2.5  # heartbeat intervals without a beat before a member counts as silent


class MembershipListener(Protocol):
    def members_changed(self, members: list[str]) -> None:
        """The live membership is now ``members`` (sorted, this node included)."""

    def member_silent(self, member: str | None) -> None:
        """``member`` has missed heartbeats (None: no single member is silent)."""


class HeartbeatStats(Protocol):
    def heartbeat_stats(self) -> dict[str, Any]:
        """What the node publishes with each heartbeat (its load, its counts)."""


class Membership:
    """Joins the cluster, heartbeats, and reports membership changes."""

    def __init__(self, node_id: str, coordinator: Coordinator, *, heartbeat_ttl: float,
                 address: str, stats: HeartbeatStats, clock: ReferenceClock,
                 pool: Pool,
                 lifecycle: Lifecycle, metrics: NodeMetrics,
                 listener: MembershipListener) -> None:
        self.node_id = node_id
        self.coordinator = coordinator
        self.address = address
        self._clock = clock
        self.started_at = clock.now()
        self.interval = max(0.2, heartbeat_ttl / 5)
        self._stats = stats
        self._pool = pool
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._listener = listener
        self._members = [node_id]
        self._out = False  # stepped out (its clock is not to be trusted): no heartbeats
        self._ratelog = RateLimitedLog(log)

    @property
    def members(self) -> list[str]:
        """The live membership as this node last saw it (its own id included)."""
        return list(self._members)

    def info(self) -> NodeInfo:
        """What this node publishes with each heartbeat."""
        return NodeInfo(id=self.node_id, address=self.address, started_at=self.started_at,
                        last_heartbeat=self._clock.now(), stats=self._stats.heartbeat_stats())

    async def start(self) -> None:
        """Join, then wait for the membership to hold still (nodes of a cluster
        started together join within a moment of each other: the first load
        should read only this node's share, not every job to drop most of
        them again when the others show up)."""
        if self._out:
            log.error("not joining the cluster: this host's clock is off (see above)")
            return
        try:
            await self._pool(self.coordinator.join, self.info())
            self._set(await self._pool(self.coordinator.live_members))
            if self.coordinator.shared:
                settle_until = time.monotonic() + SETTLE_MAX
                while time.monotonic() < settle_until:
                    if await self._lifecycle.sleep(SETTLE_STEP):
                        return
                    before = self._members
                    self._set(await self._pool(self.coordinator.live_members))
                    if self._members == before:
                        break
        except CoordinatorUnavailable as exc:
            self._metrics.coordinator_errors.labels("join").inc()
            log.error("coordinator unreachable at start (%s): acting on a membership of one "
                      "until it answers", exc)

    async def heartbeat_loop(self) -> None:
        while not await self._lifecycle.sleep(self.interval):
            if self._out:
                continue
            try:
                await self._pool(self.coordinator.heartbeat, self.info())
                members = await self._pool(self.coordinator.live_members)
            except CoordinatorUnavailable as exc:
                self._metrics.coordinator_errors.labels("heartbeat").inc()
                self._ratelog.error("heartbeat", "coordinator unreachable, keeping the last "
                                    "membership view: %s", exc)
                continue
            self._ratelog.clear("heartbeat")
            self._set(members)
            self._listener.member_silent(self._silent(members))

    async def step_out(self) -> None:
        """Leave the cluster until ``step_in``: the other members take this
        node's jobs over (its clock is not to be trusted)."""
        if self._out:
            return
        self._out = True
        log.error("node %s steps out of the cluster until its clock is corrected",
                  self.node_id)
        await self.leave(2.0)

    async def step_in(self) -> None:
        """Join again after ``step_out``."""
        if not self._out:
            return
        self._out = False
        log.warning("node %s joins the cluster again", self.node_id)
        try:
            await self._pool(self.coordinator.join, self.info())
            self._set(await self._pool(self.coordinator.live_members))
        except CoordinatorUnavailable as exc:
            self._metrics.coordinator_errors.labels("join").inc()
            log.error("coordinator unreachable when joining again (%s)", exc)

    async def leave(self, timeout: float) -> None:
        """Leave the membership at once (graceful stop); it expires otherwise."""
        try:
            await asyncio.wait_for(self._pool(self.coordinator.leave, self.node_id), timeout)
        except Exception as exc:
            log.warning("could not leave the membership (it will expire): %s", exc)

    def _set(self, members: list[NodeInfo]) -> None:
        ids = sorted({m.id for m in members} | {self.node_id})
        if ids == self._members:
            return
        log.info("membership changed: %s", ", ".join(ids))
        self._members = ids
        self._listener.members_changed(ids)

    def _silent(self, members: list[NodeInfo]) -> str | None:
        """The one other member that has missed heartbeats, if exactly one has."""
        now = self._clock.now()
        silent = [m.id for m in members if m.id != self.node_id
                  and _silent_since(m.last_heartbeat, now, SILENT_BEATS * self.interval)]
        return silent[0] if len(silent) == 1 else None


def _silent_since(last: datetime | None, now: datetime, limit: float) -> bool:
    return last is not None and (now - last).total_seconds() > limit


def view_key(members: Sequence[str]) -> str:
    """A short name for a membership view (nodes agree on ownership when they
    see the same one)."""
    return format(zlib.crc32(",".join(sorted(members)).encode()), "08x")
