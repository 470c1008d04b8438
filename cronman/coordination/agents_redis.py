"""Redis agent directory: worker agents and run hand-overs (``agents.lua``).

Every operation is one call of ``agents.lua`` (the key layout is written at
its top), atomic on the server and judged on the server's clock. An agent's
inbox is a Redis list it pops with a short blocking ``BLPOP``.

All hand-over keys live on the *first* shard of ``CRONMAN_REDIS_URL`` (with
Sentinel, on the primary): a placement, its reservation and the agent's
inbox must change together, which one script on one server gives. When that
shard is down, container runs cannot be placed (they wait for room, then
fail with an error that says why) and agents keep their running containers
until it returns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

import redis

from cronman.config import Settings
from cronman.coordination.agents import AgentInfo, Capacity, Placement, agent_from_published
from cronman.coordination.redis_shards import Shard, first_shard
from cronman.errors import CoordinatorUnavailable
from cronman.timeutil import from_ms

_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
#: Longest blocking pop of an agent's inbox (below the clients' socket timeout).
MAX_BLOCK = 0.5


class RedisAgentDirectory:
    """An ``AgentDirectory`` on the first Redis shard of ``settings.redis_url``."""

    def __init__(self, settings: Settings, *, shard: Shard | None = None) -> None:
        self.shard = shard or first_shard(settings.redis_url, "RedisAgentDirectory")
        self.prefix = settings.redis_key_prefix
        source = files(__package__).joinpath("agents.lua").read_text(encoding="utf-8")
        self._script = self.shard.client.register_script(source)

    def _call(self, command: str, *args: Any) -> Any:
        try:
            reply = self._script(keys=[], args=[command, self.prefix, *args])
        except _ERRORS as exc:
            self.shard.failed(exc)
            raise CoordinatorUnavailable(
                f"Redis {self.shard.name} did not answer the agent hand-over ({command}): "
                f"{exc}") from None
        self.shard.succeeded()
        return reply

    def inbox_key(self, agent_id: str) -> str:
        return f"{self.prefix}:inbox:{agent_id}"

    # -- the agent's side -------------------------------------------------

    def agent_heartbeat(self, agent: AgentInfo, ttl_ms: int) -> None:
        cap = agent.capacity
        self._call("heartbeat", agent.id, max(1, int(ttl_ms)), agent.published(),
                   repr(float(cap.cpu)), int(cap.memory_mb), int(cap.slots))

    def agent_leave(self, agent_id: str) -> None:
        self._call("leave", agent_id)

    def next_messages(self, agent_id: str, timeout: float) -> list[dict[str, Any]]:
        key = self.inbox_key(agent_id)
        try:
            first = self.shard.client.blpop([key], timeout=max(0.01, min(timeout, MAX_BLOCK)))
            if first is None:
                return []
            pipe = self.shard.client.pipeline(transaction=True)
            pipe.lrange(key, 0, -1)
            pipe.delete(key)
            rest = pipe.execute()[0]
        except _ERRORS as exc:
            self.shard.failed(exc)
            raise CoordinatorUnavailable(f"Redis {self.shard.name} did not answer the "
                                         f"agent's inbox: {exc}") from None
        out = []
        for text in [first[1], *rest]:
            try:
                message = json.loads(text)
            except ValueError:
                continue
            if isinstance(message, dict):
                out.append(message)
        return out

    def ack(self, agent_id: str, run_id: str, attempt: int, lease_ms: int) -> bool:
        return bool(self._call("ack", agent_id, run_id, int(attempt), int(lease_ms)))

    def renew(self, agent_id: str, runs: Sequence[tuple[str, int]], lease_ms: int
              ) -> list[str]:
        if not runs:
            return []
        args: list[Any] = []
        for run_id, attempt in runs:
            args += [run_id, int(attempt)]
        return [str(r) for r in self._call("renew", agent_id, int(lease_ms), *args)]

    def finish(self, agent_id: str, run_id: str, attempt: int, outcome: dict[str, Any],
               keep_ms: int) -> bool:
        return bool(self._call("finish", agent_id, run_id, int(attempt),
                               json.dumps(outcome, separators=(",", ":")), int(keep_ms)))

    def release(self, agent_id: str, run_id: str, attempt: int) -> None:
        self._call("release", agent_id, run_id, int(attempt))

    def output_key(self, run_id: str) -> str:
        return f"{self.prefix}:output:{run_id}"

    def put_output(self, run_id: str, output: dict[str, Any], ttl_ms: int) -> None:
        text = json.dumps(output, separators=(",", ":"))
        self._plain("publishing a run's output", lambda c: c.set(
            self.output_key(run_id), text, px=max(1, int(ttl_ms))))

    def output(self, run_id: str) -> dict[str, Any] | None:
        text = self._plain("reading a run's output", lambda c: c.get(self.output_key(run_id)))
        try:
            found = json.loads(text) if text else None
        except ValueError:
            return None
        return found if isinstance(found, dict) else None

    def _plain(self, what: str, fn: Any) -> Any:
        """One plain command on the shard (not the hand-over's script: nothing else
        changes with it)."""
        try:
            reply = fn(self.shard.client)
        except _ERRORS as exc:
            self.shard.failed(exc)
            raise CoordinatorUnavailable(f"Redis {self.shard.name} did not answer {what}: "
                                         f"{exc}") from None
        self.shard.succeeded()
        return reply

    # -- the scheduler's side ---------------------------------------------

    def live_agents(self) -> list[AgentInfo]:
        reply = self._call("agents")
        out = []
        for i in range(1, len(reply) - 5, 6):
            agent_id, info, beat, cpu, mem, slots = reply[i:i + 6]
            used = Capacity(float(cpu), int(float(mem)), int(float(slots)))
            out.append(agent_from_published(agent_id, info, used,
                                            from_ms(int(beat)) if beat else None))
        out.sort(key=lambda a: a.id)
        return out

    def place(self, agent_id: str, run_id: str, attempt: int, cpu: float, memory_mb: int,
              message: dict[str, Any], offer_ms: int, keep_ms: int) -> str:
        return str(self._call("place", run_id, int(attempt), agent_id, repr(float(cpu)),
                              int(memory_mb), int(offer_ms), int(keep_ms),
                              json.dumps(message, separators=(",", ":"))))

    def placements(self, run_ids: Sequence[str]) -> list[Placement | None]:
        if not run_ids:
            return []
        reply = self._call("placements", *run_ids)
        out: list[Placement | None] = []
        for i, run_id in enumerate(run_ids):
            attempt, agent, state, remaining, has = reply[i * 5:i * 5 + 5]
            out.append(None if attempt == "" else Placement(
                run_id=run_id, attempt=int(attempt), agent_id=agent, state=state,
                remaining_ms=int(float(remaining)), has_outcome=has == "1"))
        return out

    def take(self, run_id: str) -> dict[str, Any] | None:
        text = self._call("take", run_id)
        if not text:
            return None
        try:
            outcome = json.loads(text)
        except ValueError:
            return {"ok": False, "error": "the agent's outcome could not be read"}
        return outcome if isinstance(outcome, dict) else None

    def mark_lost(self, run_id: str, attempt: int) -> str | None:
        return str(self._call("lost", run_id, int(attempt))) or None

    def request_stop(self, run_id: str, attempt: int) -> str | None:
        return str(self._call("stop", run_id, int(attempt))) or None

    def close(self) -> None:
        self.shard.close()
