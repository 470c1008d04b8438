"""``GET /v1/cluster``: the scheduler nodes the coordinator sees, and the worker agents."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Blueprint, Response

from cronman.api.common import ApiView, json_response
from cronman.api.context import api_context
from cronman.scheduler.coordinator import NodeInfo
from cronman.timeutil import format_rfc3339, utcnow

bp = Blueprint("cluster", __name__, url_prefix="/v1")

NODE_STATS = ("owned_jobs", "fires_last_minute", "lock_wins", "lock_losses")


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
    return out


def cluster_json() -> dict[str, Any]:
    """Raises ``CoordinatorUnavailable`` when the membership cannot be read."""
    ctx = api_context()
    coordinator = ctx.coordinator
    nodes: list[NodeInfo] = coordinator.live_members() if coordinator is not None else []
    agents: list[dict[str, Any]] = []
    # Worker agents are listed by coordinators that track them.
    live_agents = getattr(coordinator, "live_agents", None)
    if callable(live_agents):
        agents = [dict(a) for a in live_agents()]
    now = utcnow()
    return {
        "replicas": ctx.settings.replicas,
        "nodes": [node_json(n, now) for n in sorted(nodes, key=lambda n: n.id)],
        "agents": agents,
    }


class Cluster(ApiView):
    def get(self) -> Response:
        return json_response(cluster_json())


bp.add_url_rule("/cluster", view_func=Cluster.as_view("cluster"))
