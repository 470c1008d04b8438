"""The workflow calls of ``CronmanClient``: a job's dependencies, exclusion calendars.

    deps = api.job_dependencies(job_id)
    print([e["name"] for e in deps["downstream"]])
    api.create_calendar({"namespace": "billing", "name": "de-holidays",
                         "timezone": "Europe/Berlin", "dates": ["--12-25", "2026-04-03"]})

A job's own upstreams are its ``depends_on`` and ``after`` schedule
(``create_job``); a run's ``gate`` says what it waited for or why it was skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypedDict, cast

from cronman.client.transport import quote_segment
from cronman.client.types import Page

PAGE_MAX = 1000


class JobEdge(TypedDict):
    """A job at the other end of a dependency (namespace and name are None
    outside the token's namespaces)."""

    job_id: str
    kind: str  # depends_on or after
    namespace: str | None
    name: str | None
    deleted: bool


class JobDependencies(TypedDict):
    upstream: list[JobEdge]
    downstream: list[JobEdge]


class Calendar(TypedDict):
    """A named exclusion calendar (``/v1/calendars``)."""

    id: str
    namespace: str
    name: str
    timezone: str
    dates: list[str]
    version: int
    created_at: str
    updated_at: str


class WorkflowCalls:
    """Mixed into ``CronmanClient``; uses its ``request`` and ``_page``."""

    request: Callable[..., Any]
    _page: Callable[..., Page[Any]]
    # CronmanClient's: a job path from an id, namespace/name, or a name in a namespace.
    _job: Callable[[str, str | None], str]

    def job_dependencies(self, job: str, *, namespace: str | None = None) -> JobDependencies:
        """The job's upstream jobs and the jobs downstream of it."""
        return cast(JobDependencies,
                    self.request("GET", self._job(job, namespace) + "/dependencies"))

    def next_fires(self, job: str, count: int = 10, *,
                   namespace: str | None = None) -> dict[str, Any]:
        """``GET /v1/jobs/{id}/next``: ``fire_times`` and, of them, the ``excluded``
        ones ({fire_time, calendar}) an exclusion calendar skips."""
        return cast(dict[str, Any], self.request(
            "GET", self._job(job, namespace) + "/next", query=[("count", str(count))]))

    def delete_job_forced(self, job: str, *, namespace: str | None = None) -> None:
        """``DELETE`` even though other jobs depend on it (they are left as they are)."""
        self.request("DELETE", self._job(job, namespace), query=[("force", "true")])

    # -- calendars ---------------------------------------------------------------

    def create_calendar(self, calendar: Mapping[str, Any]) -> Calendar:
        return cast(Calendar, self.request("POST", "/v1/calendars", dict(calendar)))

    def list_calendars(self, *, namespace: str | None = None, limit: int = 100,
                       cursor: str | None = None) -> Page[Calendar]:
        query = [("limit", str(min(limit, PAGE_MAX)))]
        if namespace is not None:
            query.append(("namespace", namespace))
        return self._page("/v1/calendars", query, cursor)

    def iter_calendars(self, *, namespace: str | None = None) -> Iterator[Calendar]:
        cursor: str | None = None
        while True:
            page = self.list_calendars(namespace=namespace, limit=PAGE_MAX, cursor=cursor)
            yield from page.items
            cursor = page.next_cursor
            if not cursor:
                return

    def get_calendar(self, calendar_id: str) -> Calendar:
        return cast(Calendar, self.request("GET", _calendar(calendar_id)))

    def replace_calendar(self, calendar_id: str, calendar: Mapping[str, Any], *,
                         version: int | None = None) -> Calendar:
        body = dict(calendar)
        if version is not None:
            body["version"] = version
        return cast(Calendar, self.request("PUT", _calendar(calendar_id), body))

    def delete_calendar(self, calendar_id: str, *, force: bool = False) -> None:
        query = [("force", "true")] if force else None
        self.request("DELETE", _calendar(calendar_id), query=query)


def _calendar(calendar_id: str) -> str:
    return f"/v1/calendars/{quote_segment(calendar_id)}"
