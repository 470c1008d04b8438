"""The limits, quotas and forecast calls of ``CronmanClient`` (``/v1/limits``,
``/v1/namespaces/{ns}/quotas``, ``/v1/forecast``).

    with CronmanClient(url, token=admin_token) as api:
        api.create_limit({"name": "billing", "match": {"host": "billing.internal"},
                          "rate": 200, "concurrency": 50})
        api.put_quota("pay", {"max_jobs": 500, "concurrent_runs": 20})
        top = api.forecast(since="now", until="+1h")["seconds"]

Limits and setting quotas need an admin token; a namespace's token reads
its quota and forecasts its own jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cronman.client.transport import quote_segment


def _limit(name: str) -> str:
    return "/v1/limits/" + quote_segment(name)


def _quota(namespace: str) -> str:
    return f"/v1/namespaces/{quote_segment(namespace)}/quotas"


class LimitCalls:
    """Mixed into ``CronmanClient``; uses its ``request``."""

    request: Callable[..., Any]

    def list_limits(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", "/v1/limits")["items"]
        return items

    def get_limit(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.request("GET", _limit(name))
        return found

    def create_limit(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = self.request("POST", "/v1/limits", dict(spec))
        return made

    def replace_limit(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """``PUT``; a ``version`` in ``spec`` must be the stored one."""
        made: dict[str, Any] = self.request("PUT", _limit(name), dict(spec))
        return made

    def delete_limit(self, name: str) -> None:
        self.request("DELETE", _limit(name))

    def quota(self, namespace: str) -> dict[str, Any]:
        found: dict[str, Any] = self.request("GET", _quota(namespace))
        return found

    def put_quota(self, namespace: str, quota: Mapping[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = self.request("PUT", _quota(namespace), dict(quota))
        return made

    def delete_quota(self, namespace: str) -> None:
        self.request("DELETE", _quota(namespace))

    def forecast(self, *, since: str | None = None, until: str | None = None,
                 namespace: str | None = None, top: int | None = None) -> dict[str, Any]:
        """Fires per second ahead (``since``/``until``: RFC 3339, ``now``,
        ``+1h``, ``-10m``; the server's defaults: now, an hour later)."""
        query = [(k, str(v)) for k, v in (("from", since), ("to", until),
                                          ("namespace", namespace), ("top", top))
                 if v is not None]
        found: dict[str, Any] = self.request("GET", "/v1/forecast", query=query)
        return found

    def forecast_proposal(self, proposal: Mapping[str, Any], *, since: str | None = None,
                          until: str | None = None, namespace: str | None = None,
                          top: int | None = None) -> dict[str, Any]:
        """The forecast as ``proposal`` would leave the cluster (``jobs``: definitions
        made, or replacing the live job whose ``id`` they carry; ``delete_jobs``;
        ``limits``: the limits as they would be). Changes nothing."""
        window = {k: v for k, v in (("from", since), ("to", until), ("namespace", namespace),
                                    ("top", top)) if v is not None}
        found: dict[str, Any] = self.request("POST", "/v1/forecast", {**window, **proposal})
        return found
