"""The OpenAPI description of notifications (merged by ``openapi``): the rule
object shared by a job's ``notify`` field and namespace rules, and the calls
of ``cronman.api.notifications``."""

from __future__ import annotations

from typing import Any

from cronman.api.names import ID_PATTERN, NAME_MAX, NAME_RE, NAMESPACE_MAX, NAMESPACE_RE
from cronman.api.openapi.parts import (
    CURSOR_TEXT,
    JOB_CURSOR,
    LIMIT,
    NAMESPACE_QUERY,
    STRING,
    TIME,
    collection_paths,
    nullable,
    obj,
    ok,
    op,
    path_param,
    query,
    ref,
)
from cronman.api.openapi.targets import TARGETS
from cronman.notify.rules import (
    DIGEST_INTERVAL_MAX,
    DIGEST_INTERVAL_MIN,
    LATE_AFTER_MAX,
    MAX_JOB_RULES,
    MAX_RECIPIENTS,
)
from cronman.vocabulary import (
    DEFAULT_DIGEST_INTERVAL,
    DEFAULT_NAMESPACE,
    NOTIFICATION_STATUSES,
    NOTIFY_EVENTS,
    NotificationKind,
)

_EVENTS = [*NOTIFY_EVENTS]
_KINDS = [k.value for k in NotificationKind]


_HTTP = TARGETS["HttpTarget"]["properties"]


def _rule_props() -> dict[str, Any]:
    return {
        "events": {"type": "array", "minItems": 1, "uniqueItems": True,
               "items": {"enum": _EVENTS},
               "description": "failed, lost, recovered (the first success after failures), "
                              "late (not started late_after seconds after its time)"},
        "late_after": {"type": ["number", "null"], "minimum": 1, "maximum": LATE_AFTER_MAX,
                       "description": "seconds; required with late, refused without it"},
        "channel": ref("NotifyChannel"),
        "digest_interval": {"type": ["number", "null"], "minimum": DIGEST_INTERVAL_MIN,
                            "maximum": DIGEST_INTERVAL_MAX,
                            "default": DEFAULT_DIGEST_INTERVAL,
                            "description": "the rate limit: one message per rule and job, "
                                           "then at most one (a digest) per interval"},
    }


def job_notify_schema() -> dict[str, Any]:
    """The ``notify`` key of a job definition."""
    return {"type": ["array", "null"], "maxItems": MAX_JOB_RULES, "items": ref("NotifyRule"),
            "description": "the job's notification rules (null: none)"}


def schemas() -> dict[str, Any]:
    event = obj({
        "event": {"enum": _EVENTS}, "run_id": nullable(STRING), "scheduled_for": nullable(TIME),
        "occurred_at": TIME, "detail": {"type": "object"},
    }, ("event", "run_id", "scheduled_for", "occurred_at", "detail"))
    name = {"type": "string", "minLength": 1, "maxLength": NAME_MAX,
            "pattern": NAME_RE.pattern}
    namespace = {"type": ["string", "null"], "minLength": 1, "maxLength": NAMESPACE_MAX,
                 "pattern": NAMESPACE_RE.pattern, "default": DEFAULT_NAMESPACE}
    rule_write = {"namespace": namespace, "name": name, **_rule_props()}
    rule_read = {"id": STRING, **rule_write, "namespace": STRING, "name": STRING,
                 "version": {"type": "integer", "minimum": 1}, "created_at": TIME,
                 "updated_at": TIME}
    replace = {**rule_write, "id": STRING, "version": {"type": "integer", "minimum": 1},
               "created_at": TIME, "updated_at": TIME}
    return {
        "EmailChannel": obj({
            "kind": {"const": "email"},
            "to": {"type": "array", "minItems": 1, "maxItems": MAX_RECIPIENTS,
                   "items": {"type": "string", "format": "email"}},
        }, ("kind", "to")),
        # Validated as an http target (url, headers, timeout): the same schema.
        "WebhookChannel": obj({
            "kind": {"const": "webhook"},
            **{key: _HTTP[key] for key in ("url", "headers", "timeout")},
        }, ("kind", "url")),
        "NotifyChannel": {"oneOf": [ref("EmailChannel"), ref("WebhookChannel")]},
        "NotifyRule": obj(_rule_props(), ("events", "channel")),
        "NotificationRuleCreate": obj(rule_write, ("name", "events", "channel"),
                                       description="A namespace-wide rule"),
        "NotificationRuleReplace": obj(replace, ("name", "events", "channel"), description=(
            "The whole rule. Read-only keys may be sent back: id must match, version must "
            "be the current one (else 409).")),
        "NotificationRule": obj(rule_read, ("id", "namespace", "name", "events", "late_after",
                                             "channel", "digest_interval", "version",
                                             "created_at", "updated_at")),
        "NotificationRuleList": obj({"items": {"type": "array",
                                                "items": ref("NotificationRule")},
                                      "next_cursor": nullable(STRING)},
                                     ("items", "next_cursor")),
        "NotificationEvent": event,
        "Notification": obj({
            "id": STRING, "namespace": STRING, "job_id": STRING, "job_name": STRING,
            "rule": STRING, "channel": {"type": "object"}, "kind": {"enum": _KINDS},
            "event": {"enum": [*_EVENTS, None]},
            "status": {"enum": list(NOTIFICATION_STATUSES)},
            "attempts": {"type": "integer", "minimum": 0},
            "event_count": {"type": "integer", "minimum": 1},
            "due_at": TIME, "next_attempt_at": TIME, "last_error": nullable(STRING),
            "created_at": TIME, "updated_at": TIME, "sent_at": nullable(TIME),
            "events": {"type": "array", "items": ref("NotificationEvent")},
        }, ("id", "namespace", "job_id", "job_name", "rule", "channel", "kind", "event",
            "status", "attempts", "event_count", "due_at", "next_attempt_at", "last_error",
            "created_at", "updated_at", "sent_at", "events")),
        "NotificationList": obj({"items": {"type": "array", "items": ref("Notification")},
                                  "next_cursor": nullable(STRING)}, ("items", "next_cursor")),
    }


def _list_pattern(words: list[str]) -> str:
    one = "(?:" + "|".join(words) + ")"
    return f"^(?:{one}(?:,{one})*)?$"


def paths() -> dict[str, Any]:
    return {
        **collection_paths(
            "/v1/notification-rules", "rule_id", "NotificationRule", noun="rule",
            plural="rules", list_summary="Namespace-wide notification rules",
            create_summary="A rule for every job of a namespace",
            get_summary="A namespace rule", replace_summary="Replace a namespace rule",
            delete_summary="Delete a namespace rule"),
        "/v1/notifications": {
            "get": op("listNotifications",
                       "Notifications sent, waiting or failed, newest first",
                       ok("200", "NotificationList", "a page of notifications"), "400 403", [
                           NAMESPACE_QUERY,
                           query("job_id", {"type": "string", "pattern": f"^{ID_PATTERN}$"},
                                  "only this job's"),
                           query("status", {"type": "array", "items": {
                               "type": "string",
                               "pattern": _list_pattern(list(NOTIFICATION_STATUSES))}},
                                  "only these statuses (pending, sending, sent, failed)",
                                  style="form", explode=True),
                           query("event", {"type": "array", "items": {
                               "type": "string",
                               "pattern": _list_pattern([*_EVENTS, "digest"])}},
                                  "only these events (digest: the digests)",
                                  style="form", explode=True),
                           LIMIT, query("cursor", JOB_CURSOR, CURSOR_TEXT)]),
        },
        "/v1/notifications/{notification_id}": {
            "get": op("getNotification", "A notification, with its events",
                       ok("200", "Notification", "the notification"), "403 404",
                       [path_param("notification_id")]),
        },
    }
