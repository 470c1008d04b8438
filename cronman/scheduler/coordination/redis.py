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

The scripts beside this module (``heartbeat.lua``, ``members.lua``,
``claim.lua``, ``start.lua``, ``takeover.lua``, ``mark.lua``) make each
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
(and each outcome mark) goes to the highest-weighted reachable shard for its key (rendezvous hashing
over the shard positions, so every node must list the same shards in the same
order, and a dead shard's locks spread evenly over the others). When a shard
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
import uuid
from collections.abc import Callable, Iterable, Sequence
from importlib.resources import files
from typing import Any

import redis

from cronman.config import Settings
from cronman.errors import CoordinatorUnavailable
from cronman.scheduler.coordination.redis_shards import (
    DEFAULT_BACKOFF,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_SOCKET_TIMEOUT,
    Shard,
    build_shards,
)
from cronman.scheduler.coordinator import NodeInfo
from cronman.scheduler.ownership import job_hash, node_hash, score
from cronman.timeutil import from_ms, to_ms

log = logging.getLogger(__name__)

MEMBERS_KEY = "{prefix}:members"
MEMBER_KEY = "{prefix}:member:{node_id}"
LOCK_KEY = "{prefix}:lock:{job_id}:{fire_ms}"
OUTCOME_KEY = "{prefix}:outcome:{run_id}"

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
        self.shards: list[Shard] = build_shards(
            settings.redis_url,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            backoff=backoff,
            max_backoff=max_backoff,
        )
        # Rendezvous weights of the shards by position, for lock placement.
        self._shard_hashes = [node_hash(f"shard-{s.index}") for s in self.shards]
        sources = {name: _script(f"{name}.lua")
                   for name in ("heartbeat", "members", "claim", "start", "takeover", "mark")}
        self._scripts = [
            {name: s.client.register_script(src) for name, src in sources.items()}
            for s in self.shards
        ]
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

    def outcome_key(self, run_id: str) -> str:
        return OUTCOME_KEY.format(prefix=self._prefix, run_id=run_id)

    # -- membership ------------------------------------------------------

    def join(self, node: NodeInfo) -> None:
        self.heartbeat(node)

    def heartbeat(self, node: NodeInfo) -> None:
        args = [
            node.id,
            self._ttl_ms,
            node.address,
            "" if node.started_at is None else to_ms(node.started_at),
            json.dumps(node.stats, separators=(",", ":"), default=str),
        ]
        keys = [self._members_key, self.member_key(node.id)]
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
                pipe = shard.client.pipeline(transaction=True)
                pipe.zrem(self._members_key, node_id)
                pipe.delete(self.member_key(node_id))
                pipe.execute()
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
                info = _node_info(reply[i], reply[i + 1])
                seen = merged.get(info.id)
                if seen is None or _beat_ms(info) > _beat_ms(seen):
                    merged[info.id] = info
        if not answered:
            raise self._unavailable("the membership read")
        return [merged[k] for k in sorted(merged)]

    # -- locks -----------------------------------------------------------

    def claim_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        if ttl_ms <= 0:
            raise ValueError("ttl_ms must be > 0")
        if not keys:
            return []
        won, failovers = self._on_locks("claim", keys, [self._holder, int(ttl_ms)],
                                        "the fire claims")
        self._count(claim_batches=1, claim_keys=len(keys), claim_failovers=failovers)
        return won

    def start_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        if not keys:
            return []
        started, _ = self._on_locks("start", keys, [self._holder, max(1, int(ttl_ms))],
                                    "the fire starts")
        self._count(start_batches=1)
        return started

    def take_over_fires(self, keys: Sequence[tuple[str, int]], ttl_ms: int) -> list[bool]:
        if not keys:
            return []
        taken, _ = self._on_locks("takeover", keys, [self._holder], "the fire takeovers")
        self._count(takeovers=sum(taken))
        return taken

    def _on_locks(self, script_name: str, keys: Sequence[tuple[str, int]], args: list[Any],
                  what: str) -> tuple[list[bool], int]:
        """Run a lock script over the keys, each on the shard its lock lives on.
        Returns (the per-key answers == 1, keys placed off their first shard)."""
        names = [self.lock_key(job_id, fire_ms) for job_id, fire_ms in keys]

        def call(shard: Shard, members: list[int]) -> list[Any]:
            return self._script_on(shard, script_name, [names[i] for i in members], args)

        replies, failovers = self._on_shards(names, call, what)
        return [reply == 1 for reply in replies], failovers

    def _on_shards(self, names: list[str], call: Callable[[Shard, list[int]], list[Any]],
                   what: str) -> tuple[list[Any], int]:
        """``call(shard, indexes)`` for the names placed on each shard (the next
        reachable one in the name's order when that shard is down), one call
        per shard. Returns (the replies by name, names placed off their
        first shard)."""
        answers: list[Any] = [None] * len(names)
        pending = list(range(len(names)))
        hashes = [job_hash(n) for n in names] if len(self.shards) > 1 else None
        tried: set[int] = set()
        failovers = 0
        while pending:
            usable = [s.index for s in self.shards if s.index not in tried and s.available()]
            if not usable:
                raise self._unavailable(what)
            groups: dict[int, list[int]] = {}
            if hashes is None:
                groups[usable[0]] = pending
            else:
                everyone = len(usable) == len(self.shards)
                for i in pending:
                    target = self._place(hashes[i], usable)
                    if not everyone and target != self._place(hashes[i], range(len(self.shards))):
                        failovers += 1
                    groups.setdefault(target, []).append(i)
            pending = []
            for index, members in groups.items():
                shard = self.shards[index]
                try:
                    replies = call(shard, members)
                except _SHARD_ERRORS as e:
                    self._shard_failed(shard, e)
                    tried.add(index)
                    pending.extend(members)
                    continue
                shard.succeeded()
                for i, reply in zip(members, replies, strict=True):
                    answers[i] = reply
        return answers, failovers

    def _place(self, key_hash: int, candidates: Iterable[int]) -> int:
        """The candidate shard with the highest rendezvous weight for a lock key."""
        best_index, best_weight = -1, -1
        for index in candidates:
            weight = score(self._shard_hashes[index], key_hash)
            if weight > best_weight:
                best_index, best_weight = index, weight
        return best_index

    def _script_on(self, shard: Shard, script_name: str, names: list[str], args: list[Any]
                   ) -> list[int]:
        script = self._scripts[shard.index][script_name]
        if len(names) <= CLAIM_CHUNK:
            return list(script(keys=names, args=args))
        pipe = shard.client.pipeline(transaction=False)
        for start in range(0, len(names), CLAIM_CHUNK):
            script(keys=names[start : start + CLAIM_CHUNK], args=args, client=pipe)
        replies: list[int] = []
        for part in pipe.execute():
            replies.extend(part)
        return replies

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


def _beat_ms(info: NodeInfo) -> int:
    return -1 if info.last_heartbeat is None else to_ms(info.last_heartbeat)


def _node_info(node_id: str, flat: Sequence[str]) -> NodeInfo:
    fields = dict(zip(flat[0::2], flat[1::2], strict=True))
    stats: dict[str, Any] = {}
    if fields.get("stats"):
        try:
            loaded = json.loads(fields["stats"])
        except ValueError:
            log.warning("member %s published unreadable stats", node_id)
        else:
            if isinstance(loaded, dict):
                stats = loaded
    started = fields.get("started_at")
    beat = fields.get("last_heartbeat")
    return NodeInfo(
        id=node_id,
        address=fields.get("address", ""),
        started_at=from_ms(int(started)) if started else None,
        last_heartbeat=from_ms(int(beat)) if beat else None,
        stats=stats,
    )
