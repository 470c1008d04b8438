"""Redis coordinator: membership, fire locks and outcome marks on one or more
Redis shards or Sentinel.

Key layout (``P`` = ``settings.redis_key_prefix``, ``cronman`` by default)::

    P:members                    sorted set   node id -> heartbeat deadline, Unix ms of
                                              the Redis server's clock (last beat + ttl)
    P:member:{node_id}           hash         id, address, started_at (Unix ms or ""),
                                              last_heartbeat (server Unix ms), ttl_ms,
                                              stats (JSON); PEXPIRE ttl
    P:lock:{job_id}:{fire_ms}    string       holder "{node_id}/{instance token}" once
                                              claimed (SET NX PX lock ttl), "!" + holder
                                              once started (start.lua, takeover.lua)
    P:outcome:{run_id}           string       "{attempt}|{mark}": how the run's latest
                                              attempt ended (outcome_marks), PX a few
                                              leases (mark.lua keeps the latest attempt)
    P:pulse:{node_id}            string       "{server Unix ms}|{payload}": the node's
                                              latest pulse (several a second), PX a
                                              few pulses; on every shard (pulse.lua)
    P:membership                 stream       the membership changes: kind (joined, left,
                                              expired), node, at (server ms), started_at,
                                              address; XADD MAXLEN ~ 1000 by heartbeat.lua,
                                              leave.lua and changes.lua; on every shard

The scripts beside this module (``heartbeat.lua``, ``members.lua``, ``leave.lua``,
``changes.lua``, ``claim.lua``, ``start.lua``, ``takeover.lua``, ``mark.lua``,
``pulse.lua``) make each
operation one atomic round trip per shard. They touch keys they build from ARGV, so they suit plain Redis and Sentinel, not Redis
Cluster. Redis >= 5 is required (scripts that read TIME and then write).

Clocks: every timestamp is the Redis server's ``TIME``, read inside the script.
A node's own clock never decides whether a member is live, so nodes with
skewed clocks still agree; the deadline is stored per member, so a node whose
TTL is configured differently is judged by its own TTL.

Shards (several comma-separated URLs): membership is written to every
reachable shard and read as the union, a member being live when any reachable
shard holds a fresh heartbeat (the latest one wins). A node that left while a
shard was down may show up there again until its deadline passes. Each lock
(and each outcome mark) goes to the highest-weighted reachable shard for its
key (``redis_placement``). When a shard
is down its locks move to the next shard in the key's order: during that
window two nodes may disagree on where a lock lives and both win it; the run
row's uniqueness in the database is what prevents the double fire then.
A Redis restart or a Sentinel failover may likewise drop locks not yet
persisted or replicated, with the same fence behind them.

``CoordinatorUnavailable`` is raised when no shard answered; callers keep
their last membership view and fall back on the database fence.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime
from importlib.resources import files
from typing import Any

import redis
from redis.commands.core import AsyncScript

from cronman.config import Settings
from cronman.coordination.base import (
    MEMBERSHIP_LOG_MAX,
    TAKEN,
    MembershipChange,
    NodeInfo,
    Pulse,
    PulseReading,
)
from cronman.coordination.redis_placement import ShardOrder
from cronman.coordination.redis_records import beat_ms, dedupe_changes, membership_change, node_info
from cronman.coordination.redis_shards import (
    DEFAULT_BACKOFF,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_SOCKET_TIMEOUT,
    Shard,
    build_shards,
)
from cronman.errors import CoordinatorUnavailable
from cronman.timeutil import to_ms

log = logging.getLogger(__name__)

MEMBERS_KEY = "{prefix}:members"
MEMBER_KEY = "{prefix}:member:{node_id}"
LOCK_KEY = "{prefix}:lock:{job_id}:{fire_ms}"
OUTCOME_KEY = "{prefix}:outcome:{run_id}"
PULSE_KEY = "{prefix}:pulse:{node_id}"
MEMBERSHIP_KEY = "{prefix}:membership"

#: Keys per claim script call; a bigger batch is split (in one pipeline) so
#: that no single script keeps the server busy for long.
CLAIM_CHUNK = 1000

# Errors that mean "this shard cannot serve us now": connection refused or
# reset, timeouts, no primary known to Sentinel (MasterNotFoundError is a
# ConnectionError), a demoted primary (ReadOnlyError), a server still loading.
# Any other server error (auth, a foreign key of the wrong type under our
# prefix) is treated alike: logged, the shard sits out its back-off, and the
# cluster carries on with the others or on the database fence.
_SHARD_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)


def _script(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


class RedisCoordinator:
    """A ``Coordinator`` on the Redis shards (or Sentinel) of ``settings.redis_url``.

    Thread-safe: the scheduler may heartbeat and claim from different threads.
    """

    shared = True

    def __init__(
        self,
        settings: Settings,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
    ) -> None:
        if not settings.redis_url:
            raise ValueError("RedisCoordinator needs CRONMAN_REDIS_URL")
        self._prefix = settings.redis_key_prefix
        self._ttl_ms = max(1, int(settings.heartbeat_ttl * 1000))
        self._holder = f"{settings.node_id}/{uuid.uuid4().hex[:12]}"
        self._members_key = MEMBERS_KEY.format(prefix=self._prefix)
        self._member_prefix = MEMBER_KEY.format(prefix=self._prefix, node_id="")
        self._membership_key = MEMBERSHIP_KEY.format(prefix=self._prefix)
        self.shards: list[Shard] = build_shards(
            settings.redis_url,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            backoff=backoff,
            max_backoff=max_backoff,
        )
        # Rendezvous weights of the shards by position, for lock placement.
        self._order = ShardOrder(self.shards)
        self._sources = {name: _script(f"{name}.lua")
                         for name in ("heartbeat", "members", "leave", "changes", "claim",
                                      "start", "takeover", "mark", "pulse")}
        self._scripts = [
            {name: s.client.register_script(src) for name, src in self._sources.items()}
            for s in self.shards
        ]
        self._async_scripts: dict[tuple[int, str], tuple[Any, AsyncScript]] = {}
        self._counter_lock = threading.Lock()
        self._counters = {
            "heartbeats": 0,
            "heartbeat_failures": 0,
            "claim_batches": 0,
            "claim_keys": 0,
            "claim_failovers": 0,
            "start_batches": 0,
            "takeovers": 0,
            "outcome_batches": 0,
            "outcome_marks": 0,
            "outcome_reads": 0,
            "pulses": 0,
            "shard_errors": 0,
            "unavailable": 0,
        }

    def __repr__(self) -> str:
        return f"RedisCoordinator(shards={[s.name for s in self.shards]!r})"

    # -- helpers ---------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        with self._counter_lock:
            for name, delta in deltas.items():
                self._counters[name] += delta

    def _shard_failed(self, shard: Shard, error: BaseException) -> None:
        shard.failed(error)
        self._count(shard_errors=1)

    def _unavailable(self, what: str) -> CoordinatorUnavailable:
        self._count(unavailable=1)
        names = ", ".join(s.name for s in self.shards)
        return CoordinatorUnavailable(f"no Redis shard answered {what} ({names})")

    def member_key(self, node_id: str) -> str:
        return MEMBER_KEY.format(prefix=self._prefix, node_id=node_id)

    def lock_key(self, job_id: str, fire_ms: int) -> str:
        return LOCK_KEY.format(prefix=self._prefix, job_id=job_id, fire_ms=int(fire_ms))

    def pulse_key(self, node_id: str) -> str:
        return PULSE_KEY.format(prefix=self._prefix, node_id=node_id)

    def outcome_key(self, run_id: str) -> str:
        return OUTCOME_KEY.format(prefix=self._prefix, run_id=run_id)

    # -- membership ------------------------------------------------------

    def join(self, node: NodeInfo) -> None:
        self.heartbeat(node)

    def heartbeat(self, node: NodeInfo) -> None:
        args: list[str | int] = [
            node.id,
            self._ttl_ms,
            node.address,
            "" if node.started_at is None else to_ms(node.started_at),
            json.dumps(node.stats, separators=(",", ":"), default=str),
            MEMBERSHIP_LOG_MAX,
        ]
        keys = [self._members_key, self.member_key(node.id), self._membership_key]
        written = 0
        for shard in self.shards:
            if not shard.available():
                continue
            try:
                self._scripts[shard.index]["heartbeat"](keys=keys, args=args)
            except _SHARD_ERRORS as e:
                self._shard_failed(shard, e)
                continue
            shard.succeeded()
            written += 1
        if not written:
            self._count(heartbeat_failures=1)
            raise self._unavailable("the heartbeat")
        self._count(heartbeats=1)

    def leave(self, node_id: str) -> None:
        answered = 0
        for shard in self.shards:
            if not shard.available():
                continue
            try:
                self._scripts[shard.index]["leave"](
                    keys=[self._members_key, self.member_key(node_id), self._membership_key],
                    args=[node_id, MEMBERSHIP_LOG_MAX])
            except _SHARD_ERRORS as e:
                self._shard_failed(shard, e)
                continue
            shard.succeeded()
            answered += 1
        if not answered:
            raise self._unavailable("leave")

    def live_members(self) -> list[NodeInfo]:
        merged: dict[str, NodeInfo] = {}
        answered = 0
        for shard in self.shards:
            if not shard.available():
                continue
            try:
                reply = self._scripts[shard.index]["members"](
                    keys=[self._members_key], args=[self._member_prefix]
                )
            except _SHARD_ERRORS as e:
                self._shard_failed(shard, e)
                continue
            shard.succeeded()
            answered += 1
            for i in range(1, len(reply) - 1, 2):
                info = node_info(reply[i], reply[i + 1])
                seen = merged.get(info.id)
                if seen is None or beat_ms(info) > beat_ms(seen):
                    merged[info.id] = info
        if not answered:
            raise self._unavailable("the membership read")
        return [merged[k] for k in sorted(merged)]

    def membership_changes(self, since: datetime) -> list[MembershipChange]:
        """Every shard's log merged: a change the shards recorded alike (one
        heartbeat or leave goes to each) is shown once."""
        found: list[MembershipChange] = []
        answered = 0
        for shard in self.shards:
            if not shard.available():
                continue
            try:
                reply = self._scripts[shard.index]["changes"](
                    keys=[self._members_key, self._membership_key], args=[MEMBERSHIP_LOG_MAX])
            except _SHARD_ERRORS as e:
                self._shard_failed(shard, e)
                continue
            shard.succeeded()
            answered += 1
            found.extend(c for c in map(membership_change, reply[1])
                         if c is not None and c.at >= since)
        if not answered:
            raise self._unavailable("the membership changes")
        return dedupe_changes(found, window_ms=self._ttl_ms)

    # -- locks -----------------------------------------------------------

    def claim_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    max_ahead_ms: int | None = None) -> list[int]:
        if ttl_ms <= 0:
            raise ValueError("ttl_ms must be > 0")
        if not keys:
            return []
        ahead = "" if max_ahead_ms is None else int(max_ahead_ms)
        won, failovers = self._lock_replies("claim", keys, [self._holder, int(ttl_ms), ahead],
                                            "the fire claims")
        self._count(claim_batches=1, claim_keys=len(keys), claim_failovers=failovers)
        return [int(w) for w in won]

    def start_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                    due_ms: Sequence[int] | None = None,
                    early_ms: int | None = None) -> list[int]:
        if not keys:
            return []
        args: list[Any] = [self._holder, max(1, int(ttl_ms))]
        per_key = None
        if due_ms is not None and early_ms is not None:
            args.append(int(early_ms))
            per_key = [int(d) for d in due_ms]
        started, _ = self._lock_replies("start", keys, args, "the fire starts", per_key)
        self._count(start_batches=1)
        return [int(s) for s in started]

    def take_over_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                        alive: Collection[str] = (), report_absent: bool = False) -> list[int]:
        if not keys:
            return []
        args = [self._holder, max(1, int(ttl_ms)), "1" if report_absent else "0", *alive]
        answers, _ = self._lock_replies("takeover", keys, args, "the fire takeovers")
        taken = [int(a) for a in answers]
        self._count(takeovers=taken.count(TAKEN))
        return taken

    def _on_locks(self, script_name: str, keys: Sequence[tuple[str, int]], args: list[Any],
                  what: str) -> tuple[list[bool], int]:
        """Run a lock script over the keys, each on the shard its lock lives on.
        Returns (the per-key answers == 1, keys placed off their first shard)."""
        replies, failovers = self._lock_replies(script_name, keys, args, what)
        return [reply == 1 for reply in replies], failovers

    def _lock_replies(self, script_name: str, keys: Sequence[tuple[str, int]],
                      args: list[Any], what: str,
                      per_key: Sequence[Any] | None = None) -> tuple[list[Any], int]:
        """A lock script's replies per key (``per_key``: one more argument per
        key, appended after ``args`` in key order)."""
        names = [self.lock_key(job_id, fire_ms) for job_id, fire_ms in keys]

        def call(shard: Shard, members: list[int]) -> list[Any]:
            extra = None if per_key is None else [per_key[i] for i in members]
            return self._script_on(shard, script_name, [names[i] for i in members], args,
                                   extra)

        return self._on_shards(names, call, what)

    def _on_shards(self, names: list[str], call: Callable[[Shard, list[int]], list[Any]],
                   what: str) -> tuple[list[Any], int]:
        """``call(shard, indexes)`` for the names placed on each shard (the next
        reachable one in the name's order when that shard is down), one call
        per shard. Returns (the replies by name, names placed off their
        first shard)."""
        placing = self._order.placing(names, lambda: self._unavailable(what))
        while placing.pending:
            for index, members in placing.groups():
                shard = self.shards[index]
                try:
                    replies = call(shard, members)
                except _SHARD_ERRORS as e:
                    self._shard_failed(shard, e)
                    placing.failed(index, members)
                    continue
                shard.succeeded()
                placing.answered(members, replies)
        return placing.answers, placing.failovers

    async def _aon_shards(self, names: list[str],
                          call: Callable[[Shard, list[int]], Awaitable[list[Any]]],
                          what: str) -> tuple[list[Any], int]:
        """``_on_shards`` on the event loop, through the shards' asyncio clients."""
        placing = self._order.placing(names, lambda: self._unavailable(what))
        while placing.pending:
            for index, members in placing.groups():
                shard = self.shards[index]
                try:
                    replies = await call(shard, members)
                except _SHARD_ERRORS as e:
                    self._shard_failed(shard, e)
                    placing.failed(index, members)
                    continue
                shard.succeeded()
                placing.answered(members, replies)
        return placing.answers, placing.failovers

    def _script_on(self, shard: Shard, script_name: str, names: list[str], args: list[Any],
                   per_key: list[Any] | None = None) -> list[int]:
        script = self._scripts[shard.index][script_name]
        if len(names) <= CLAIM_CHUNK:
            return list(script(keys=names, args=args + (per_key or [])))
        pipe = shard.client.pipeline(transaction=False)
        for start in range(0, len(names), CLAIM_CHUNK):
            end = start + CLAIM_CHUNK
            script(keys=names[start:end], args=args + (per_key or [])[start:end], client=pipe)
        replies: list[int] = []
        for part in pipe.execute():
            replies.extend(part)
        return replies

    # -- on the event loop -----------------------------------------------

    async def astart_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int, *,
                           due_ms: Sequence[int] | None = None,
                           early_ms: int | None = None) -> list[int]:
        if not keys:
            return []
        args: list[Any] = [self._holder, max(1, int(ttl_ms))]
        per_key: list[int] | None = None
        if due_ms is not None and early_ms is not None:
            args.append(int(early_ms))
            per_key = [int(d) for d in due_ms]
        names = [self.lock_key(job_id, fire_ms) for job_id, fire_ms in keys]

        async def call(shard: Shard, members: list[int]) -> list[Any]:
            extra = [] if per_key is None else [per_key[i] for i in members]
            return list(await self._ascript(shard, "start")(
                keys=[names[i] for i in members], args=args + extra))

        replies, _ = await self._aon_shards(names, call, "the fire starts")
        self._count(start_batches=1)
        return [int(r) for r in replies]

    async def amark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        if not marks:
            return
        names = [self.outcome_key(run_id) for run_id, _, _ in marks]
        values = [f"{int(attempt)}|{mark}" for _, attempt, mark in marks]
        ttl = max(1, int(ttl_ms))

        async def call(shard: Shard, members: list[int]) -> list[Any]:
            await self._ascript(shard, "mark")(keys=[names[i] for i in members],
                                               args=[ttl, *[values[i] for i in members]])
            return [1] * len(members)

        await self._aon_shards(names, call, "the outcome marks")
        self._count(outcome_batches=1, outcome_marks=len(marks))

    def _ascript(self, shard: Shard, name: str) -> AsyncScript:
        client = shard.aclient()
        cached = self._async_scripts.get((shard.index, name))
        if cached is None or cached[0] is not client:
            cached = (client, client.register_script(self._sources[name]))
            self._async_scripts[(shard.index, name)] = cached
        return cached[1]

    async def aclose(self) -> None:
        self._async_scripts.clear()
        for shard in self.shards:
            await shard.aclose()

    # -- pulses ----------------------------------------------------------

    def pulse(self, node_id: str, payload: str, ttl_ms: int,
              peers: Sequence[str]) -> PulseReading:
        keys = [self.pulse_key(node_id), *(self.pulse_key(p) for p in peers)]
        args: list[str | int] = [payload, max(1, int(ttl_ms))]
        reading: PulseReading | None = None
        found: dict[str, Pulse] = {}
        for shard in self.shards:  # every shard: a pulse must survive any one of them
            if not shard.available():
                continue
            sent = time.time()
            try:
                reply = self._scripts[shard.index]["pulse"](keys=keys, args=args)
            except _SHARD_ERRORS as e:
                self._shard_failed(shard, e)
                continue
            received = time.time()
            shard.succeeded()
            for peer, value in zip(peers, reply[1:], strict=True):
                if value:
                    at, _, text = value.partition("|")
                    seen = found.get(peer)
                    if seen is None or int(at) > seen.at_ms:
                        found[peer] = Pulse(peer, int(at), text)
            if reading is None:  # the first reachable shard's clock is the reference
                reading = PulseReading(int(reply[0]), sent, received, found)
        if reading is None:
            raise self._unavailable("the pulse")
        self._count(pulses=1)
        return reading

    # -- outcome marks ---------------------------------------------------

    def mark_outcomes(self, marks: Sequence[tuple[str, int, str]], ttl_ms: int) -> None:
        if not marks:
            return
        names = [self.outcome_key(run_id) for run_id, _, _ in marks]
        values = [f"{int(attempt)}|{mark}" for _, attempt, mark in marks]
        ttl = max(1, int(ttl_ms))

        def call(shard: Shard, members: list[int]) -> list[Any]:
            script = self._scripts[shard.index]["mark"]
            chunks = [members[i:i + CLAIM_CHUNK] for i in range(0, len(members), CLAIM_CHUNK)]
            if len(chunks) == 1:
                script(keys=[names[i] for i in members],
                       args=[ttl, *[values[i] for i in members]])
            else:
                pipe = shard.client.pipeline(transaction=False)
                for part in chunks:
                    script(keys=[names[i] for i in part], args=[ttl, *[values[i] for i in part]],
                           client=pipe)
                pipe.execute()
            return [1] * len(members)

        self._on_shards(names, call, "the outcome marks")
        self._count(outcome_batches=1, outcome_marks=len(marks))

    def read_outcomes(self, run_ids: Sequence[str]) -> list[str | None]:
        if not run_ids:
            return []
        names = [self.outcome_key(run_id) for run_id in run_ids]

        def call(shard: Shard, members: list[int]) -> list[Any]:
            return list(shard.client.mget([names[i] for i in members]))

        values, _ = self._on_shards(names, call, "the outcome reads")
        self._count(outcome_reads=len(names))
        return [None if v is None else v.partition("|")[2] for v in values]

    # -- the rest --------------------------------------------------------

    def ping(self) -> bool:
        up = False
        for shard in self.shards:
            try:
                shard.client.ping()
            except _SHARD_ERRORS as e:
                self._shard_failed(shard, e)
                continue
            shard.succeeded()
            up = True
        return up

    def stats(self) -> dict[str, int]:
        with self._counter_lock:
            counters = dict(self._counters)
        counters["shards"] = len(self.shards)
        counters["shards_up"] = sum(not s.down for s in self.shards)
        return counters

    def close(self) -> None:
        for shard in self.shards:
            shard.close()
