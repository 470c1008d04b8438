"""``GET /v1/cluster/events``: membership changes (nodes joining, leaving,
expiring), newest first.

The history lives beside the membership in the coordinator: a capped Redis
stream per shard (``P:membership``, the last 1,000 changes, written by the
heartbeat and leave scripts), or a bounded list in memory for ``cronman
standalone``. Without a coordinator (no Redis configured) the list is empty.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask import Blueprint, Response, request

from cronman.api.common import ApiView, json_response
from cronman.api.context import api_context
from cronman.api.timeparams import parse_time_or_relative
from cronman.coordination.base import MembershipChange
from cronman.timeutil import format_rfc3339, utcnow

bp = Blueprint("cluster_events", __name__, url_prefix="/v1")

DEFAULT_WINDOW = timedelta(hours=1)


def change_json(change: MembershipChange) -> dict[str, Any]:
    return {
        "node_id": change.node_id,
        "kind": change.kind,
        "at": format_rfc3339(change.at),
        "started_at": format_rfc3339(change.started_at),
        "address": change.address,
    }


class ClusterEvents(ApiView):
    query_params = {"get": ("since",)}

    def get(self) -> Response:
        now = utcnow()
        since = parse_time_or_relative(request.args.get("since"), "since", now=now)
        coordinator = api_context().coordinator
        changes: list[MembershipChange] = []
        if coordinator is not None:
            changes = coordinator.membership_changes(since or now - DEFAULT_WINDOW)
        return json_response({"items": [change_json(c) for c in changes],
                              "next_cursor": None})


bp.add_url_rule("/cluster/events", view_func=ClusterEvents.as_view("events"))
