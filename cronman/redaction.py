"""Secrets in targets, redacted wherever they leave the service.

Secrets never leave the API (or the audit export) in full: every value of a
target's (and a dead letter target's, and a notification webhook's)
``headers`` and of a container target's ``env`` is shown redacted -- the
first 4 characters and "…" for values longer than 8 characters, "***"
otherwise. Headers known to carry no secret (``PUBLIC_HEADERS``:
``Content-Type``, ``Accept``...) are shown in full; every other header is
taken for a secret (fail closed).

Because a client may PUT back what it read, ``restore_redacted`` puts the
stored value back where a request carries exactly the redacted form of it --
but only while the object keeps its destination (``destination``: scheme,
host and port of an http target's or a webhook channel's URL; queue,
endpoint and region of an sqs target; image and command of a container,
which could print its env). A stored secret never follows a changed
destination: there a redacted value is refused (400 naming it) and must be
given again. This is the one rule for every kind that holds secrets
(targets, dead letters, a job's notification channels, namespace rules):
a kind ``DESTINATIONS`` does not know has no destination, and no stored
secret is ever restored into it (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from cronman.errors import ValidationError

REDACTED_SHORT = "***"
REDACTED_KEEP = 4
REDACTED_MIN_LEN = 8
# The maps inside a target whose values are secrets.
SECRET_MAPS = ("headers", "env")
# Headers shown in full (lower case): they describe the request, they hold no secret.
PUBLIC_HEADERS = frozenset({
    "accept", "accept-charset", "accept-encoding", "accept-language", "cache-control",
    "content-encoding", "content-language", "content-type", "user-agent",
})
DEFAULT_PORTS = {"http": 80, "https": 443}


def redact_value(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if len(text) > REDACTED_MIN_LEN:
        return text[:REDACTED_KEEP] + "…"
    return REDACTED_SHORT


def is_secret(map_name: str, key: Any) -> bool:
    """Whether the value under ``key`` of a target's ``map_name`` map is redacted."""
    return not (map_name == "headers" and isinstance(key, str)
                and key.lower() in PUBLIC_HEADERS)


def redact_target(target: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if target is None:
        return None
    out = dict(target)
    for key in SECRET_MAPS:
        values = out.get(key)
        if isinstance(values, Mapping):
            out[key] = {k: redact_value(v) if is_secret(key, k) else v
                        for k, v in values.items()}
    return out


def _http(target: Mapping[str, Any]) -> tuple[Any, ...]:
    return (_url_destination(target.get("url")),)


def _sqs(target: Mapping[str, Any]) -> tuple[Any, ...]:
    return (_url_destination(target.get("queue_url")),
            _url_destination(target.get("endpoint_url")), target.get("region"))


def _container(target: Mapping[str, Any]) -> tuple[Any, ...]:
    command = target.get("command")
    return (target.get("image"), tuple(command) if isinstance(command, list) else command)


# Where each kind's secrets go, by ``kind``: targets and dead letters (http,
# sqs, container) and notification channels (webhook; email holds none).
DESTINATIONS: dict[str, Callable[[Mapping[str, Any]], tuple[Any, ...]]] = {
    "http": _http, "webhook": _http, "sqs": _sqs, "container": _container,
}


def destination(target: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Where a target's (or channel's) secrets go: what must not change for
    them to stay; None for a kind without a known destination."""
    kind = target.get("kind")
    where = DESTINATIONS.get(kind) if isinstance(kind, str) else None
    return None if where is None else (kind, *where(target))


def _url_destination(url: Any) -> tuple[Any, ...] | None:
    """(scheme, host, port) of a URL; the URL itself when it does not parse."""
    if url is None:
        return None
    if not isinstance(url, str):
        return ("?", repr(url))
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        return (scheme, (parts.hostname or "").rstrip("."),
                parts.port or DEFAULT_PORTS.get(scheme))
    except ValueError:
        return ("?", url)


def restore_redacted(given: Any, stored: Mapping[str, Any] | None, field: str = "target") -> Any:
    """``given`` (a target from a request) with redacted secrets restored.

    A value equal to the redacted form of the stored value under the same key
    (header names compared case-insensitively) is replaced by the stored one,
    if the target keeps its ``destination``; if the destination changed (or
    the kind has none), such a value is a ``ValidationError`` naming it
    (``field`` is the target's path: ``target``, ``dead_letter``,
    ``notify[0].channel``, ``channel``). Anything else -- a new value, a new
    key -- is taken as sent.
    """
    if not isinstance(given, dict) or not isinstance(stored, Mapping):
        return given
    before = destination(stored)
    moved = before is None or destination(given) != before
    out = dict(given)
    for key in SECRET_MAPS:
        new, old = out.get(key), stored.get(key)
        if not isinstance(new, dict) or not isinstance(old, Mapping):
            continue
        fold = key == "headers"
        old_by_key = {(k.lower() if fold else k): v for k, v in old.items()}
        restored = {}
        refused: list[str] = []
        for k, v in new.items():
            prev = old_by_key.get(k.lower() if fold and isinstance(k, str) else k)
            if (prev is not None and isinstance(v, str) and v != prev and is_secret(key, k)
                    and v == redact_value(prev)):
                refused.append(str(k))
                v = prev
            restored[k] = v
        if moved and refused:
            refused.sort(key=str.lower)
            raise ValidationError(
                f"is the redacted form of a stored secret, and the {field}'s destination "
                f"changed: give the value again (a stored secret is never sent to a new "
                f"destination; redacted here: {', '.join(refused)})",
                field=f"{field}.{key}.{refused[0]}")
        out[key] = restored
    return out


def restore_redacted_notify(given: Any, stored: list[dict[str, Any]] | None) -> Any:
    """A ``notify`` list from a request with the webhook header values it
    carries redacted put back from the stored rule at the same place."""
    if not isinstance(given, list) or not stored:
        return given
    out = []
    for i, rule in enumerate(given):
        old = stored[i] if i < len(stored) else None
        if isinstance(rule, dict) and isinstance(old, Mapping):
            rule = {**rule, "channel": restore_redacted(rule.get("channel"), old.get("channel"),
                                                        f"notify[{i}].channel")}
        out.append(rule)
    return out
