"""``/v1/notification-rules`` (namespace-wide rules) and ``/v1/notifications``
(what was sent, is waiting, or failed).

A job's own rules are its ``notify`` field (``/v1/jobs``); the rules here
apply to every job of their namespace. Both kinds share one rule object
(:mod:`cronman.notify.rules`). Token scopes apply as for jobs: a rule or a
notification outside the token's namespaces is a 403, and lists are limited
to them. Webhook header values are shown redacted.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from cronman.api import validation as v
from cronman.api.common import MAX_BODY_BYTES, ApiView, json_response, principal, read_json
from cronman.api.context import api_context
from cronman.api.jobs import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX
from cronman.api.names import ID_RE, NAME_MAX, NAME_RE
from cronman.errors import NotFound, ValidationError
from cronman.notify.messages import event_json
from cronman.notify.rules import RULE_KEYS, redact_channel, validate_rule
from cronman.outbox.records import EventRecord, Notification, NotificationFilter, RuleRecord
from cronman.redaction import redact_value, restore_redacted
from cronman.timeutil import format_rfc3339
from cronman.vocabulary import (
    DEFAULT_NAMESPACE,
    NOTIFICATION_STATUSES,
    NOTIFY_EVENTS,
    NotificationKind,
)

bp = Blueprint("notifications", __name__, url_prefix="/v1")

RULE_READ_ONLY = ("id", "version", "created_at", "updated_at")
EVENTS_IN_LIST = 10
EVENTS_IN_ITEM = 100
EVENT_FILTERS = (*NOTIFY_EVENTS, NotificationKind.DIGEST.value)


def _store() -> Any:
    return api_context().store


# -- JSON ----------------------------------------------------------------------------


def rule_json(record: RuleRecord) -> dict[str, Any]:
    rule = record.rule
    return {"id": record.id, "namespace": record.namespace, "name": record.name,
            "events": rule["events"], "late_after": rule.get("late_after"),
            "channel": redact_channel(rule["channel"], redact_value),
            "digest_interval": rule["digest_interval"], "version": record.version,
            "created_at": format_rfc3339(record.created_at),
            "updated_at": format_rfc3339(record.updated_at)}


def notification_json(note: Notification, events: list[EventRecord]) -> dict[str, Any]:
    return {"id": note.id, "namespace": note.namespace, "job_id": note.job_id,
            "job_name": note.job_name, "rule": note.rule_key,
            "channel": redact_channel(note.channel, redact_value), "kind": note.kind,
            "event": note.event, "status": note.status, "attempts": note.attempts,
            "event_count": note.event_count, "due_at": format_rfc3339(note.due_at),
            "next_attempt_at": format_rfc3339(note.next_attempt_at),
            "last_error": note.last_error, "created_at": format_rfc3339(note.created_at),
            "updated_at": format_rfc3339(note.updated_at),
            "sent_at": format_rfc3339(note.sent_at),
            "events": [event_json(e) for e in events]}


# -- validation -------------------------------------------------------------------------


def _rule_body(body: Any, *, stored: RuleRecord | None) -> tuple[str, str, dict[str, Any]]:
    """(namespace, name, normalised rule) of a POST or PUT body."""
    obj = v.require_object(body, None)
    allowed = ("namespace", "name", *RULE_KEYS)
    for key in obj:
        if key in RULE_READ_ONLY:
            if stored is None:
                raise ValidationError(f"{key!r} is read-only; it is assigned by the server",
                                      field=key)
        elif key not in allowed:
            raise ValidationError(f"unknown key {key!r}", field=str(key))
    if stored is not None:
        if "id" in obj and obj["id"] != stored.id:
            raise ValidationError("does not match the rule id of the URL", field="id")
    name = obj.get("name")
    if name is None:
        raise ValidationError("is required", field="name")
    name = v.check_string(name, "name", max_len=NAME_MAX, pattern=NAME_RE,
                          what="name (letters, digits and . _ : / @ + -)")
    raw_namespace = obj.get("namespace")
    namespace = v.check_namespace(DEFAULT_NAMESPACE if raw_namespace is None else raw_namespace)
    spec = {k: obj[k] for k in RULE_KEYS if k in obj}
    if stored is not None and isinstance(spec.get("channel"), dict):
        spec["channel"] = restore_redacted(spec["channel"], stored.rule.get("channel"),
                                           "channel")
    rule = validate_rule(spec, "")
    return namespace, name, rule


def _version(body: Any) -> int | None:
    raw = body.get("version") if isinstance(body, dict) else None
    return None if raw is None else v.check_int(raw, "version", lo=0, hi=2**62)


def _load_rule(rule_id: str) -> RuleRecord:
    record: RuleRecord | None = (_store().notification_rules.get(rule_id)
                                 if ID_RE.match(rule_id) else None)
    if record is None:
        raise NotFound(f"no notification rule {rule_id!r}")
    principal().require(record.namespace)
    return record


def _page_args() -> tuple[int, str | None]:
    limit = v.parse_int_param(request.args.get("limit"), "limit", default=LIST_LIMIT_DEFAULT,
                              lo=1, hi=LIST_LIMIT_MAX)
    cursor = request.args.get("cursor") or None
    return limit, cursor


def _namespace_arg() -> str | None:
    namespace = request.args.get("namespace")
    if namespace is not None:
        v.check_namespace(namespace)
        principal().require(namespace, field="namespace")
    return namespace


def _choices(name: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for raw in request.args.getlist(name):
        for item in raw.split(","):
            item = item.strip()
            if not item:
                continue
            if item not in allowed:
                raise ValidationError(f"unknown {name} {item!r}; one of {', '.join(allowed)}",
                                      field=name)
            if item not in out:
                out.append(item)
    return tuple(out)


# -- views ------------------------------------------------------------------------------


class RuleCollection(ApiView):
    query_params = {"get": ("namespace", "limit", "cursor")}

    def get(self) -> Response:
        namespace = _namespace_arg()
        limit, cursor = _page_args()
        page = _store().notification_rules.list_rules(
            namespace=namespace, namespaces=principal().restriction(), limit=limit,
            cursor=cursor)
        return json_response({"items": [rule_json(r) for r in page.items],
                              "next_cursor": page.next_cursor})

    def post(self) -> Response:
        body = read_json(max_bytes=MAX_BODY_BYTES)
        namespace, name, rule = _rule_body(body, stored=None)
        principal().require(namespace, field="namespace")
        record = _store().notification_rules.create(namespace, name, rule)
        return json_response(rule_json(record), 201,
                             {"Location": f"/v1/notification-rules/{record.id}"})


class RuleItem(ApiView):
    def get(self, rule_id: str) -> Response:
        return json_response(rule_json(_load_rule(rule_id)))

    def put(self, rule_id: str) -> Response:
        body = read_json(max_bytes=MAX_BODY_BYTES)
        stored = _load_rule(rule_id)
        namespace, name, rule = _rule_body(body, stored=stored)
        principal().require(namespace, field="namespace")
        record = _store().notification_rules.replace(rule_id, namespace=namespace, name=name,
                                                     rule=rule, version=_version(body))
        return json_response(rule_json(record))

    def delete(self, rule_id: str) -> Response:
        _load_rule(rule_id)
        if not _store().notification_rules.delete(rule_id):
            raise NotFound(f"no notification rule {rule_id!r}")
        return Response(status=204)


class NotificationCollection(ApiView):
    query_params = {"get": ("namespace", "job_id", "status", "event", "limit", "cursor")}

    def get(self) -> Response:
        namespace = _namespace_arg()
        job_id = request.args.get("job_id")
        if job_id is not None and not ID_RE.match(job_id):
            raise ValidationError("must be a job id", field="job_id")
        statuses = _choices("status", NOTIFICATION_STATUSES)
        events = _choices("event", EVENT_FILTERS)
        limit, cursor = _page_args()
        flt = NotificationFilter(namespace=namespace, namespaces=principal().restriction(),
                                 job_id=job_id, statuses=statuses, events=events)
        history = _store().notifications
        page = history.list_notifications(flt, limit, cursor)
        events_of = history.events([n.id for n in page.items], EVENTS_IN_LIST)
        return json_response({"items": [notification_json(n, events_of[n.id])
                                        for n in page.items],
                              "next_cursor": page.next_cursor})


class NotificationItem(ApiView):
    def get(self, notification_id: str) -> Response:
        history = _store().notifications
        note = history.get(notification_id) if ID_RE.match(notification_id) else None
        if note is None:
            raise NotFound(f"no notification {notification_id!r}")
        principal().require(note.namespace)
        events = history.events([note.id], EVENTS_IN_ITEM)[note.id]
        return json_response(notification_json(note, events))


def _register() -> None:
    bp.add_url_rule("/notification-rules", view_func=RuleCollection.as_view("rules"))
    bp.add_url_rule("/notification-rules/<id:rule_id>", view_func=RuleItem.as_view("rule"))
    bp.add_url_rule("/notifications", view_func=NotificationCollection.as_view("list"))
    bp.add_url_rule("/notifications/<id:notification_id>",
                    view_func=NotificationItem.as_view("item"))


_register()
