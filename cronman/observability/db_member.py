"""The database member a process writes to, for ``/metrics`` and ``/readyz``.

Under Patroni (a multi-host ``CRONMAN_DATABASE_URL``) every new connection
lands on the current primary; ``cronman.store.connect.MemberWatch`` records
which one (host:port as libpq connected) and since when. Exported as
``cronman_database_member{member="host:port"} 1`` and
``cronman_database_member_since_timestamp_seconds`` (the first connection, or
the last move to another member: a failover).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily


class MemberView(Protocol):
    @property
    def member(self) -> str: ...

    @property
    def since(self) -> float: ...


MemberSource = Callable[[], MemberView | None]


def member_json(current: MemberView | None) -> dict[str, Any] | None:
    """``{"member": "host:port", "since": ISO 8601}``, or None before a connection."""
    if current is None:
        return None
    since = datetime.fromtimestamp(current.since, UTC).isoformat().replace("+00:00", "Z")
    return {"member": current.member, "since": since}


class DatabaseMemberCollector:
    """The two samples above, read at scrape time (nothing before a connection)."""

    def __init__(self, current: MemberSource) -> None:
        self._current = current

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        current = self._current()
        if current is None:
            return
        family = GaugeMetricFamily("cronman_database_member",
                                   "The database member this process's connections write to",
                                   labels=["member"])
        family.add_metric([current.member], 1)
        yield family
        yield GaugeMetricFamily("cronman_database_member_since_timestamp_seconds",
                                "When this process's connections last moved to another "
                                "database member (or first connected)", value=current.since)
