"""Membership records as Redis holds them, read back into the coordinator's
types: a member's hash, and the entries of the membership change stream."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from cronman.coordination.base import MembershipChange, NodeInfo
from cronman.timeutil import from_ms, to_ms

log = logging.getLogger(__name__)


def membership_change(entry: Sequence[Any]) -> MembershipChange | None:
    """A stream entry (id, [field, value, ...]) as a change; None if malformed."""
    try:
        flat = entry[1]
        fields = dict(zip(flat[0::2], flat[1::2], strict=True))
        started = fields.get("started_at") or ""
        return MembershipChange(node_id=fields["node"], kind=fields["kind"],
                                at=from_ms(int(float(fields["at"]))),
                                started_at=from_ms(int(started)) if started else None,
                                address=fields.get("address", ""))
    except (KeyError, ValueError, IndexError, TypeError):
        log.warning("ignoring a malformed membership change entry: %r", entry)
        return None


def dedupe_changes(changes: list[MembershipChange], window_ms: int) -> list[MembershipChange]:
    """Newest first, one change per (node, kind, process start) within
    ``window_ms`` of each other: shards date the same change by their own clocks."""
    out: list[MembershipChange] = []
    last: dict[tuple[str, str, datetime | None], datetime] = {}
    window = timedelta(milliseconds=max(1, window_ms))
    for change in sorted(changes, key=lambda c: c.at, reverse=True):
        key = (change.node_id, change.kind, change.started_at)
        seen = last.get(key)
        if seen is not None and seen - change.at < window:
            continue
        last[key] = change.at
        out.append(change)
    return out


def beat_ms(info: NodeInfo) -> int:
    return -1 if info.last_heartbeat is None else to_ms(info.last_heartbeat)


def node_info(node_id: str, flat: Sequence[str]) -> NodeInfo:
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
