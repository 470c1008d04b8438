"""The target schemas of ``/openapi.json``: HTTP, SQS and container
targets, and the dead letter targets, with the patterns the validation
modules enforce."""

from __future__ import annotations

from typing import Any

from cronman.api import validation as v
from cronman.api.openapi_parts import TEXT, nullable, obj
from cronman.callbacks import validation as tv


def _ci(word: str) -> str:
    """A regex matching ``word`` in any case (JSON Schema has no flags)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else "\\" + c if c in ".-" else c
                   for c in word)


_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LABEL = "[A-Za-z0-9_][A-Za-z0-9_-]{0,30}"
_HOST = (f"(?:(?:{_LABEL}\\.){{0,3}}[A-Za-z_](?:[A-Za-z0-9_-]{{0,29}}[A-Za-z0-9_])?"
         f"|(?:{_OCTET}\\.){{3}}{_OCTET})")
_PORT = ("(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
         "|[1-9][0-9]{0,3}))?")
HTTP_URL_PATTERN = f"^{_ci('http')}[Ss]?://{_HOST}{_PORT}(?:[/?#][!-~]*)?$"
HTTP_URL = {"type": "string", "maxLength": tv.MAX_URL_LENGTH, "pattern": HTTP_URL_PATTERN,
            "description": "an http or https URL without credentials; host names and "
                           "IPv4 addresses as the pattern shows (IPv6 literals in brackets "
                           "and internationalised names are accepted too)"}
# Characters SQS takes (lone surrogates cannot be sent at all).
SQS_TEXT = "[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\ufffe\\uffff]"
HEADER_NAME = {
    "pattern": tv.HEADER_NAME_PATTERN,
    "not": {"pattern": "^(?:" + "|".join([_ci("cronman-") + ".*",
                                           *(_ci(h) for h in sorted(tv.RESERVED_HEADERS))])
                       + ")$"},
}


def _http_target(*, dead_letter: bool) -> dict[str, Any]:
    methods = [m for m in tv.HTTP_METHODS if not (dead_letter and m == "GET")]
    body = ({"type": ["string", "null"], "maxLength": 0,
             "description": "none: a dead letter's body is the run record"} if dead_letter
            else {**nullable(TEXT), "maxLength": tv.MAX_HTTP_BODY_BYTES,
                  "description": "at most 64 KiB of UTF-8"})
    return obj({
        "kind": {"const": "http"},
        "url": HTTP_URL,
        "method": {"enum": [*methods, None], "default": tv.DEFAULT_HTTP_METHOD},
        "headers": {
            "type": ["object", "null"], "maxProperties": tv.MAX_HEADERS,
            "propertyNames": HEADER_NAME,
            "additionalProperties": {"type": "string", "pattern": "^[^\\r\\n\\u0000]*$",
                                     "maxLength": tv.MAX_HEADER_VALUE_BYTES},
            "description": "values are shown redacted in answers, but for Content-Type, "
                           "Accept and other headers that hold no secret"},
        "body": body,
        "timeout": {"type": ["number", "null"], "exclusiveMinimum": 0,
                    "maximum": tv.MAX_HTTP_TIMEOUT, "default": tv.DEFAULT_HTTP_TIMEOUT},
    }, ("kind", "url"))


def _sqs_target(*, dead_letter: bool) -> dict[str, Any]:
    body = ({"type": ["string", "null"], "maxLength": 0,
             "description": "none: a dead letter's body is the run record"} if dead_letter
            else {"type": "string", "minLength": 1, "maxLength": v.TARGET_BODY_MAX,
                  "pattern": f"^{SQS_TEXT}+$", "description": "at most 64 KiB of UTF-8"})
    return obj({
        "kind": {"const": "sqs"},
        "queue_url": HTTP_URL,
        "region": {"type": "string", "pattern": tv.SQS_REGION_PATTERN},
        "body": body,
        "attributes": {
            "type": ["object", "null"], "maxProperties": tv.SQS_MAX_USER_ATTRIBUTES,
            "propertyNames": {
                "pattern": tv.SQS_ATTRIBUTE_NAME_PATTERN,
                "not": {"pattern": f"^(?:{_ci('cronman-')}|{_ci('aws.')}|{_ci('amazon.')})"
                                   "|^\\.|\\.$|\\.\\."}},
            "additionalProperties": {"type": "string", "pattern": f"^{SQS_TEXT}+$"}},
        "endpoint_url": nullable(HTTP_URL),
        "message_group_id": {"type": ["string", "null"],
                             "pattern": tv.MESSAGE_GROUP_ID_PATTERN},
    }, ("kind", "queue_url", "region", *(() if dead_letter else ("body",))))


TARGETS = {
    "HttpTarget": _http_target(dead_letter=False),
    "SqsTarget": _sqs_target(dead_letter=False),
    "ContainerTarget": obj({
        "kind": {"const": "container"},
        "image": {"type": "string", "pattern": tv.IMAGE_PATTERN},
        "command": {"type": ["array", "null"], "items": TEXT,
                    "maxItems": tv.MAX_COMMAND_ITEMS},
        "env": {"type": ["object", "null"],
                "propertyNames": {"pattern": tv.ENV_NAME_PATTERN},
                "additionalProperties": TEXT,
                "description": "values are shown redacted in answers"},
        "cpu": {"type": ["number", "null"], "exclusiveMinimum": 0,
                "maximum": tv.MAX_CONTAINER_CPU},
        "memory_mb": {"type": ["integer", "null"], "minimum": 1,
                      "maximum": tv.MAX_CONTAINER_MEMORY_MB},
        "timeout": {"type": ["number", "null"], "exclusiveMinimum": 0,
                    "maximum": tv.MAX_CONTAINER_TIMEOUT},
        "selector": {"type": ["object", "null"], "maxProperties": tv.MAX_SELECTOR_LABELS,
                     "propertyNames": {"pattern": tv.SELECTOR_KEY_PATTERN},
                     "additionalProperties": {"type": "string",
                                              "pattern": tv.SELECTOR_VALUE_PATTERN},
                     "description": "agent labels an agent must carry to run it"},
        "network": {"enum": [*tv.CONTAINER_NETWORKS, None],
                    "default": tv.DEFAULT_CONTAINER_NETWORK},
        "user": {"type": ["string", "null"], "pattern": tv.CONTAINER_USER_PATTERN,
                 "description": "default: a non-root user"},
    }, ("kind", "image")),
}
DEAD_LETTER_TARGETS = {
    "DeadLetterHttpTarget": _http_target(dead_letter=True),
    "DeadLetterSqsTarget": _sqs_target(dead_letter=True),
}

