"""The contract of the limits' shared counters (``cronman.limits``): starts
per window, a token bucket and the slots in flight of each limit, for every
node together.

Implementations: ``coordination.redis_limits.RedisLimitCounters`` (on the
first Redis shard, ``limits.lua``) and ``coordination.limits_memory.
LocalLimitCounters`` (one process: ``cronman standalone``, and each node's
fair share while Redis is away).

A slot is a lease: held by ``{node id}|{token}`` until released, or until
its lease runs out -- a node renews its slots with its heartbeats, so the
slots of a node that died are given back within a lease.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

#: ``Answer.wait_ms`` when the limit's slots are all in flight: until one is released.
UNTIL_RELEASED = -1
#: ``Answer.used`` of a refusal while the counters' new epoch is in quarantine.
QUARANTINED = -1
#: ``Answer.used`` of a refusal while the counters do not answer (the caller's own).
UNANSWERED = -2
#: ``Answer.used`` of a refusal because another node's fires of a higher priority wait.
OUTRANKED = -3


class CountersRestarted(Exception):
    """The shared counters began a new epoch (Redis restarted empty) since the
    caller last told them what it holds: ``restore``, then ask again."""


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """What one limit allows, as the counters apply it (0: that bound is off)."""

    name: str
    count: int = 0  # starts within ``window_ms``
    window_ms: int = 0
    burst: int = 0  # the token bucket's size
    per_ms: float = 0.0  # its refill, tokens per ms
    concurrency: int = 0


@dataclass(frozen=True, slots=True)
class Ask:
    """One attempt asking to start: ``token`` names it (unique per attempt, so
    that a batch asked again is never counted twice), ``limits`` the indexes
    of the specs it is held to."""

    token: str
    limits: tuple[int, ...]
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Answer:
    """Granted, or refused by spec ``limit``: ``used`` of its bound taken
    (starts in its window, or slots in flight), ``wait_ms`` until it may
    allow one (``UNTIL_RELEASED``: when a slot is released)."""

    granted: bool
    limit: int = -1
    used: int = 0
    wait_ms: int = 0


GRANTED = Answer(True)


class LimitCounters(Protocol):
    @property
    def shared(self) -> bool:
        """Whether other processes count on the same counters (Redis)."""

    @property
    def retry_ms(self) -> int:
        """The longest this caller goes without asking again once a call
        failed (its back-off): a new epoch's quarantine outlasts it, so that
        every node has told what it holds before anything is granted."""

    async def take(self, node_id: str, specs: Sequence[LimitSpec], asks: Sequence[Ask], *,
                   lease_ms: int, margin_ms: int, quarantine_ms: int = 0,
                   waiting: Mapping[str, int] | None = None) -> list[Answer]:
        """Grant or refuse each ask, in order, in one round trip: an ask is
        granted when every one of its limits allows it, and then takes a
        start from each (and a slot, leased for ``lease_ms``); once a limit
        refused an ask, it refuses the later asks of the batch too (the order
        is the caller's priority order). Rate windows are ``margin_ms``
        longer than they say, for the spread of the deliveries' own times.
        For ``quarantine_ms`` after the counters began anew, everything is
        refused (``QUARANTINED``): the nodes tell them what they hold first.
        ``waiting``: per limit name, the highest priority of the caller's
        fires waiting on it; an ask of a lower priority than another node's
        waiting fires is refused (``OUTRANKED``), so that priority holds
        across the nodes.
        Raises ``CountersRestarted`` (nothing taken) and
        ``CoordinatorUnavailable``."""

    async def release(self, node_id: str, held: Sequence[tuple[str, str]]) -> None:
        """Give back the slots of (limit name, token). Raises ``CoordinatorUnavailable``."""

    async def renew(self, node_id: str, held: Sequence[tuple[str, str]], lease_ms: int
                    ) -> None:
        """Extend the leases of the slots held (a slot the counters lost is
        held again). Raises ``CountersRestarted`` (the slots are held all the
        same) and ``CoordinatorUnavailable``."""

    async def restore(self, node_id: str, held: Sequence[tuple[str, str, str, int]],
                      lease_ms: int) -> None:
        """Tell the counters again what the node holds, after they were away
        (they may have restarted empty): (``s``, limit, token, ms ago) per
        recent start, (``c``, limit, token, 0) per slot; the caller is of
        their epoch from then on. Raises ``CoordinatorUnavailable``."""

    def usage(self, names: Sequence[str], windows_ms: Sequence[int]) -> list[tuple[int, int]]:
        """Per limit name: (slots in flight, starts within its window), for
        the API. Raises ``CoordinatorUnavailable``."""

    async def aclose(self) -> None: ...

    def close(self) -> None: ...
