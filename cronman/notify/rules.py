"""Notification rules: what to tell whom about which job events; pure, no I/O.

A rule is one JSON object, the same whether it is an item of a job's
``notify`` list or a namespace-wide rule (``/v1/notification-rules``)::

    {"events": ["failed", "lost", "recovered", "late", "paused"],
     "late_after": 300,
     "channel": {"kind": "email", "to": ["oncall@example.com"]},
     "digest_interval": 900}

- ``events`` (required): the events, one or more of ``failed``, ``lost``,
  ``recovered`` (the first success after failures) and ``late`` (a fire not
  started ``late_after`` seconds after its time).
- ``late_after`` (seconds): required with ``late``, refused without it.
- ``channel`` (required): ``{"kind": "email", "to": [addresses]}``, or
  ``{"kind": "webhook", "url", "headers", "timeout"}`` -- a POST of JSON,
  signed like callbacks, through the http target's client and its
  private-address guard. Header values are secrets (but for those that
  describe the request, ``Content-Type``...): the API shows them redacted
  (``redact_channel``), and a stored one stays with its URL's host only
  (``cronman.redaction.restore_redacted``).
- ``digest_interval`` (seconds, default 900): the rate limit. One message per
  rule and job, then at most one per interval: what happens in between is
  folded into one digest sent when the interval ends.

Every error is a ``ValidationError`` naming the dotted field
(``notify[1].channel.to[0]``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cronman.callbacks.validation import validate_target
from cronman.errors import ValidationError
from cronman.fieldspec import type_name
from cronman.redaction import is_secret
from cronman.vocabulary import (
    CHANNEL_KINDS,
    DEFAULT_DIGEST_INTERVAL,
    NOTIFY_EVENTS,
    ChannelKind,
    NotifyEvent,
)

MAX_JOB_RULES = 10
MAX_RECIPIENTS = 20
ADDRESS_MAX = 254
LATE_AFTER_MAX = 7 * 86_400
DIGEST_INTERVAL_MIN = 1
DIGEST_INTERVAL_MAX = 86_400
WEBHOOK_TIMEOUT_DEFAULT = 10
RULE_KEYS = ("events", "late_after", "channel", "digest_interval")
EMAIL_KEYS = ("kind", "to")
WEBHOOK_KEYS = ("kind", "url", "headers", "timeout")
# A plain addr-spec: no display names, comments or quoting (nothing that
# could smuggle a second recipient or a header into the message).
ADDRESS_RE = re.compile(
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$")

Redact = Callable[[Any], str]


# -- validation ------------------------------------------------------------------


def _at(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"must be an object, not {type_name(value)}", field=field or None)
    return value


def _unknown(obj: Mapping[str, Any], allowed: Sequence[str], field: str) -> None:
    for key in obj:
        if key not in allowed:
            raise ValidationError(f"unknown key {key!r} (allowed: {', '.join(allowed)})",
                                  field=_at(field, str(key)))


def _seconds(value: Any, field: str, *, lo: float, hi: float) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"must be a number of seconds, not {type_name(value)}",
                              field=field)
    if value != value or not lo <= value <= hi:  # NaN compares unequal to itself
        raise ValidationError(f"must be between {lo:g} and {hi:g} seconds", field=field)
    return int(value) if float(value).is_integer() else value


def validate_rule(value: Any, field: str) -> dict[str, Any]:
    """A rule object, normalised (defaults filled in); ``field`` prefixes errors."""
    obj = _object(value, field)
    _unknown(obj, RULE_KEYS, field)
    wanted = obj.get("events")
    if wanted is None:
        raise ValidationError(f"is required: one or more of {', '.join(NOTIFY_EVENTS)}",
                              field=_at(field, "events"))
    if not isinstance(wanted, list) or not wanted:
        raise ValidationError(f"must be a non-empty array of {', '.join(NOTIFY_EVENTS)}",
                              field=_at(field, "events"))
    events: list[str] = []
    for i, event in enumerate(wanted):
        if not isinstance(event, str) or event not in NOTIFY_EVENTS:
            raise ValidationError(f"must be one of {', '.join(NOTIFY_EVENTS)}",
                                  field=_at(field, f"events[{i}]"))
        if event in events:
            raise ValidationError("is listed twice", field=_at(field, f"events[{i}]"))
        events.append(str.__str__(event))
    late_after = obj.get("late_after")
    if NotifyEvent.LATE in events:
        if late_after is None:
            raise ValidationError("is required when `events` holds late",
                                  field=_at(field, "late_after"))
        late_after = _seconds(late_after, _at(field, "late_after"), lo=1, hi=LATE_AFTER_MAX)
    elif late_after is not None:
        raise ValidationError("only applies when `events` holds late", field=_at(field, "late_after"))
    if obj.get("channel") is None:
        raise ValidationError("is required", field=_at(field, "channel"))
    channel = validate_channel(obj["channel"], _at(field, "channel"))
    interval = obj.get("digest_interval")
    interval = DEFAULT_DIGEST_INTERVAL if interval is None else _seconds(
        interval, _at(field, "digest_interval"), lo=DIGEST_INTERVAL_MIN, hi=DIGEST_INTERVAL_MAX)
    return {"events": events, "late_after": late_after, "channel": channel,
            "digest_interval": interval}


def validate_channel(value: Any, field: str) -> dict[str, Any]:
    obj = _object(value, field)
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in CHANNEL_KINDS:
        raise ValidationError(f"must be one of {', '.join(CHANNEL_KINDS)}",
                              field=_at(field, "kind"))
    if kind == ChannelKind.EMAIL:
        _unknown(obj, EMAIL_KEYS, field)
        return {"kind": "email", "to": _recipients(obj.get("to"), _at(field, "to"))}
    _unknown(obj, WEBHOOK_KEYS, field)
    as_target = {"kind": "http", "method": "POST", "url": obj.get("url"),
                 "headers": obj.get("headers"), "timeout": obj.get("timeout")}
    try:
        target = validate_target(as_target, allowed_kinds=("http",))
    except ValidationError as exc:
        raise (exc.prefixed(field) if field else exc) from None
    return {"kind": "webhook", "url": target["url"], "headers": target["headers"],
            "timeout": target["timeout"]}


def _recipients(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise ValidationError("must be a non-empty array of email addresses", field=field)
    if len(value) > MAX_RECIPIENTS:
        raise ValidationError(f"at most {MAX_RECIPIENTS} recipients", field=field)
    out: list[str] = []
    for i, address in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(address, str):
            raise ValidationError(f"must be a string, not {type_name(address)}", field=where)
        if len(address) > ADDRESS_MAX or not ADDRESS_RE.match(address):
            raise ValidationError(f"is not an email address (name@domain): {address!r}",
                                  field=where)
        if address.lower() not in (a.lower() for a in out):
            out.append(address)
    return out


def validate_job_notify(value: Any, field: str = "notify") -> list[dict[str, Any]] | None:
    """A job's ``notify``: null (no rules) or a list of rules."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValidationError(f"must be an array of rules or null, not {type_name(value)}",
                              field=field)
    if len(value) > MAX_JOB_RULES:
        raise ValidationError(f"at most {MAX_JOB_RULES} rules per job", field=field)
    rules = [validate_rule(item, f"{field}[{i}]") for i, item in enumerate(value)]
    return rules or None


# -- redaction -------------------------------------------------------------------


def redact_channel(channel: Mapping[str, Any], redact: Redact) -> dict[str, Any]:
    """The channel as the API shows it: webhook header values redacted, but
    for those that hold no secret (``Content-Type``...), as in targets: what
    is shown in full is what a PUT of it back keeps (``restore_redacted``)."""
    out = dict(channel)
    headers = out.get("headers")
    if isinstance(headers, Mapping):
        out["headers"] = {k: redact(v) if is_secret("headers", k) else v
                          for k, v in headers.items()}
    return out


def redact_notify(notify: Sequence[Mapping[str, Any]] | None,
                  redact: Redact) -> list[dict[str, Any]] | None:
    if notify is None:
        return None
    out = []
    for rule in notify:
        shown = dict(rule)
        if isinstance(shown.get("channel"), Mapping):
            shown["channel"] = redact_channel(shown["channel"], redact)
        out.append(shown)
    return out
