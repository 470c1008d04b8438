"""``GET /v1/cluster``: the scheduler nodes the coordinator sees, the worker
agents, and the database member this API process writes to (``database_member``:
host:port and since when, as on ``/readyz``; under Patroni it moves on a failover).

An agent's ``running_runs`` lists only the runs of jobs in the caller's
namespaces (all of them for an admin token, or while no token is needed);
its counts (``running``, ``slots_used``) are the agent's, whoever asks.

Agents come from the agent directory (``coordination.agents``): the one the
app was given (``cronman standalone`` puts its in-process one in
``app.extensions[AGENTS_KEY]``), else a Redis one made on first use when
Redis is configured.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, current_app

from cronman.api.auth import OPEN, Principal
from cronman.api.common import ApiView, json_response, principal
from cronman.api.context import api_context
from cronman.api.serialize import queue_json
from cronman.coordination.agents import AgentDirectory, AgentInfo
from cronman.coordination.base import OVERLOADED_BEHIND_MS, NodeInfo
from cronman.errors import StoreUnavailable
from cronman.observability.db_member import member_json
from cronman.store.base import Store
from cronman.timeutil import format_rfc3339, utcnow

AGENTS_KEY = "cronman.agents"
_agents_lock = threading.Lock()

bp = Blueprint("cluster", __name__, url_prefix="/v1")

NODE_STATS = ("owned_jobs", "fires_last_minute", "lock_wins", "lock_losses", "backlog",
              "held_back", "behind_ms", "saturation_pct")


def node_json(node: NodeInfo, now: datetime) -> dict[str, Any]:
    age = None
    if node.last_heartbeat is not None:
        age = round(max(0.0, (now - node.last_heartbeat).total_seconds()), 3)
    out: dict[str, Any] = {
        "id": node.id,
        "address": node.address,
        "started_at": format_rfc3339(node.started_at),
        "last_heartbeat": format_rfc3339(node.last_heartbeat),
        "heartbeat_age_s": age,
    }
    for key in NODE_STATS:
        value = node.stats.get(key, 0)
        out[key] = int(value) if isinstance(value, (int, float)) else 0
    out["state"] = "overloaded" if out["behind_ms"] >= OVERLOADED_BEHIND_MS else "ok"
    return out


def agent_json(agent: AgentInfo, now: datetime,
               visible: Callable[[str], bool] = lambda _: True) -> dict[str, Any]:
    age = None
    if agent.last_heartbeat is not None:
        age = round(max(0.0, (now - agent.last_heartbeat).total_seconds()), 3)
    free = agent.free
    return {
        "id": agent.id,
        "address": agent.address,
        "runtime": agent.runtime,
        "labels": ",".join(f"{k}={v}" for k, v in sorted(agent.labels.items())),
        "started_at": format_rfc3339(agent.started_at),
        "last_heartbeat": format_rfc3339(agent.last_heartbeat),
        "heartbeat_age_s": age,
        "cpu": round(agent.capacity.cpu, 3),
        "cpu_used": round(agent.used.cpu, 3),
        "cpu_free": round(free.cpu, 3),
        "memory_mb": agent.capacity.memory_mb,
        "memory_mb_used": agent.used.memory_mb,
        "memory_mb_free": free.memory_mb,
        "slots": agent.capacity.slots,
        "slots_used": agent.used.slots,
        "slots_free": free.slots,
        "running": len(agent.running),
        "running_runs": [r for r in agent.running if visible(r)],
    }


def agent_directory() -> AgentDirectory | None:
    """The app's agent directory (made on first use when Redis is configured)."""
    extensions = current_app.extensions
    if AGENTS_KEY not in extensions:
        with _agents_lock:
            if AGENTS_KEY not in extensions:
                from cronman.coordination import make_agent_directory

                extensions[AGENTS_KEY] = make_agent_directory(api_context().settings)
    directory: AgentDirectory | None = extensions[AGENTS_KEY]
    return directory


def visible_runs(store: Store, who: Principal, run_ids: Sequence[str]) -> Callable[[str], bool]:
    """Whether the caller may see each of ``run_ids`` (its job in their namespaces)."""
    if who.is_admin or not run_ids:
        return lambda _: True
    runs = store.runs.get_runs(run_ids)
    namespace = {j.id: j.namespace for j in store.jobs.get_jobs(
        sorted({r.job_id for r in runs.values()}))}
    seen = {r.id for r in runs.values() if who.allows(namespace.get(r.job_id, ""))}
    return seen.__contains__


def cluster_json(who: Principal = OPEN) -> dict[str, Any]:
    """Raises ``CoordinatorUnavailable`` when the membership cannot be read."""
    ctx = api_context()
    coordinator = ctx.coordinator
    nodes: list[NodeInfo] = coordinator.live_members() if coordinator is not None else []
    directory = agent_directory()
    agents = directory.live_agents() if directory is not None else []
    visible = visible_runs(ctx.store, who, [r for a in agents for r in a.running])
    now = utcnow()
    return {
        "replicas": ctx.settings.replicas,
        "nodes": [node_json(n, now) for n in sorted(nodes, key=lambda n: n.id)],
        "agents": [agent_json(a, now, visible) for a in agents],
        "database_member": member_json(ctx.database_member()),
        "queues": _queues(ctx.store, who, now),
    }


def _queues(store: Store, who: Principal, now: datetime) -> list[dict[str, Any]] | None:
    """The work queues of the caller's namespaces; None while the database is away."""
    try:
        return [queue_json(q) for q in store.work.queues(who.restriction(), now=now)]
    except StoreUnavailable:
        return None


class Cluster(ApiView):
    def get(self) -> Response:
        return json_response(cluster_json(principal()))


bp.add_url_rule("/cluster", view_func=Cluster.as_view("cluster"))
