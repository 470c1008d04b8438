"""The notification calls of ``CronmanClient``: namespace rules and what was sent.

    for note in api.iter_notifications(statuses=["failed"]):
        print(note["job_name"], note["last_error"])
    rule = api.create_notification_rule({
        "namespace": "billing", "name": "oncall", "events": ["failed", "lost"],
        "channel": {"kind": "email", "to": ["oncall@example.com"]}})

A job's own rules are its ``notify`` field (``create_job``, ``update_job``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypedDict, cast

from cronman.client.transport import quote_segment
from cronman.client.types import Page, follow_pages

PAGE_MAX = 1000


class NotificationRule(TypedDict):
    """A namespace-wide notification rule (``/v1/notification-rules``)."""

    id: str
    namespace: str
    name: str
    events: list[str]
    late_after: float | None
    channel: dict[str, Any]
    digest_interval: float
    version: int
    created_at: str
    updated_at: str


class NotificationEvent(TypedDict):
    event: str
    run_id: str | None
    scheduled_for: str | None
    occurred_at: str
    detail: dict[str, Any]


class Notification(TypedDict):
    """One message of the outbox: an event alone, or a digest of several."""

    id: str
    namespace: str
    job_id: str
    job_name: str
    rule: str
    channel: dict[str, Any]
    kind: str
    event: str | None
    status: str
    attempts: int
    event_count: int
    due_at: str
    next_attempt_at: str
    last_error: str | None
    created_at: str
    updated_at: str
    sent_at: str | None
    events: list[NotificationEvent]


class NotificationCalls:
    """Mixed into ``CronmanClient``; uses its ``request`` and ``_page``."""

    request: Callable[..., Any]
    _page: Callable[..., Page[Any]]
    # CronmanClient's: the id of a job named by id, namespace/name, or a name.
    resolve_job: Callable[[str, str | None], str]

    # -- namespace rules ---------------------------------------------------------

    def create_notification_rule(self, rule: Mapping[str, Any]) -> NotificationRule:
        """``POST /v1/notification-rules``; 409 when the name is taken in its namespace."""
        return cast(NotificationRule, self.request("POST", "/v1/notification-rules",
                                                   dict(rule)))

    def list_notification_rules(self, *, namespace: str | None = None, limit: int = 100,
                                cursor: str | None = None) -> Page[NotificationRule]:
        query = [("limit", str(limit))]
        if namespace is not None:
            query.append(("namespace", namespace))
        return self._page("/v1/notification-rules", query, cursor)

    def iter_notification_rules(self, *, namespace: str | None = None,
                                page_size: int = PAGE_MAX) -> Iterator[NotificationRule]:
        return follow_pages(lambda cursor: self.list_notification_rules(
            namespace=namespace, limit=page_size, cursor=cursor))

    def get_notification_rule(self, rule_id: str) -> NotificationRule:
        return cast(NotificationRule, self.request("GET", _rule(rule_id)))

    def replace_notification_rule(self, rule_id: str, rule: Mapping[str, Any], *,
                                  version: int | None = None) -> NotificationRule:
        """``PUT``: the whole rule; with ``version``, a ``ConflictError`` if it changed."""
        body = dict(rule)
        if version is not None:
            body["version"] = version
        return cast(NotificationRule, self.request("PUT", _rule(rule_id), body))

    def delete_notification_rule(self, rule_id: str) -> None:
        self.request("DELETE", _rule(rule_id))

    # -- notifications -------------------------------------------------------------

    def list_notifications(self, *, namespace: str | None = None, job_id: str | None = None,
                           statuses: Iterable[str] = (), events: Iterable[str] = (),
                           limit: int = 100, cursor: str | None = None) -> Page[Notification]:
        """One page of ``GET /v1/notifications``, newest first (``events``: failed,
        lost, recovered, late, digest; ``job_id``: a job's id, ``namespace/name``,
        or a name in ``namespace``)."""
        query = [("limit", str(limit))]
        if namespace is not None:
            query.append(("namespace", namespace))
        if job_id is not None:
            query.append(("job_id", self.resolve_job(job_id, namespace)))
        query += [("status", s) for s in statuses]
        query += [("event", e) for e in events]
        return self._page("/v1/notifications", query, cursor)

    def iter_notifications(self, *, namespace: str | None = None, job_id: str | None = None,
                           statuses: Iterable[str] = (), events: Iterable[str] = (),
                           page_size: int = PAGE_MAX) -> Iterator[Notification]:
        wanted_statuses, wanted_events = tuple(statuses), tuple(events)
        if job_id is not None:
            job_id = self.resolve_job(job_id, namespace)
        return follow_pages(lambda cursor: self.list_notifications(
            namespace=namespace, job_id=job_id, statuses=wanted_statuses,
            events=wanted_events, limit=page_size, cursor=cursor))

    def get_notification(self, notification_id: str) -> Notification:
        """One notification with its events (the first 100)."""
        return cast(Notification, self.request(
            "GET", "/v1/notifications/" + quote_segment(notification_id)))


def _rule(rule_id: str) -> str:
    return "/v1/notification-rules/" + quote_segment(rule_id)

