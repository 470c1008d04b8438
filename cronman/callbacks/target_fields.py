"""The target objects, declared once (SPEC §3, "Targets"): http, sqs, container,
worker, and the dead-letter forms of http and sqs.

``TARGET`` and ``DEAD_LETTER`` validate (see :mod:`cronman.callbacks.validation`
for the decisions) and give the OpenAPI component schemas. Errors name fields
relative to the target object (``url``, ``headers.X-Foo``, ``command[2]``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from cronman.callbacks.urls import PY_WHITESPACE, url_field
from cronman.errors import ValidationError
from cronman.fieldspec import (
    Choice,
    Const,
    Custom,
    Field,
    Int,
    ListOf,
    MapOf,
    Num,
    Obj,
    OneOf,
    Rule,
    Str,
    any_case,
)

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DEFAULT_HTTP_METHOD = "POST"
DEFAULT_HTTP_TIMEOUT = 10
MAX_HTTP_TIMEOUT = 300
MAX_HTTP_BODY_BYTES = 64 * 1024
MAX_HEADERS = 64
MAX_HEADER_VALUE_BYTES = 8 * 1024

MAX_SQS_MESSAGE_BYTES = 256 * 1024
SQS_MAX_ATTRIBUTES = 10
# cronman-job-id, cronman-run-id, cronman-scheduled-for (see cronman.callbacks.sqs).
SQS_RESERVED_ATTRIBUTES = 3
SQS_MAX_USER_ATTRIBUTES = SQS_MAX_ATTRIBUTES - SQS_RESERVED_ATTRIBUTES
# Room kept for cronman's own attributes when checking the total message size.
SQS_RESERVED_ATTRIBUTE_BYTES = 512

DEFAULT_CONTAINER_CPU = 1
DEFAULT_CONTAINER_MEMORY_MB = 256
DEFAULT_CONTAINER_TIMEOUT = 3600
MAX_CONTAINER_CPU = 256
MAX_CONTAINER_MEMORY_MB = 1024 * 1024
MAX_CONTAINER_TIMEOUT = 7 * 86400
MAX_COMMAND_ITEMS = 1024
CONTAINER_NETWORKS = ("none", "host")
DEFAULT_CONTAINER_NETWORK = "none"
MAX_SELECTOR_LABELS = 32

WORK_QUEUE_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
MAX_WORK_PAYLOAD_BYTES = 64 * 1024
DEFAULT_HEARTBEAT_TIMEOUT = 60
MAX_HEARTBEAT_TIMEOUT = 3600
DEFAULT_WORK_TIMEOUT = 3600
MAX_WORK_TIMEOUT = 7 * 86400
MAX_IDLE_WORKERS = 1000
DEFAULT_CAPACITY_WAIT = 600
MAX_CAPACITY_WAIT = 86400

# An http target's completion (vocabulary.HttpCompletion).
COMPLETION_RESPONSE = "response"
COMPLETION_CALLBACK = "callback"
COMPLETIONS = (COMPLETION_RESPONSE, COMPLETION_CALLBACK)
DEFAULT_HTTP_HEARTBEAT_TIMEOUT = 300
DEFAULT_COMPLETION_TIMEOUT = 3600
ONLY_WITH_CALLBACK = 'only applies with "completion": "callback"'

# Headers the HTTP client owns (framing, hop-by-hop); Cronman-* is checked by prefix.
RESERVED_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive",
    "proxy-connection", "upgrade", "te", "trailer", "expect",
})

HEADER_NAME_PATTERN = r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$"
SQS_REGION_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
SQS_ATTRIBUTE_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,256}$"
MESSAGE_GROUP_ID_PATTERN = r"^[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
WHITESPACE = PY_WHITESPACE
IMAGE_PATTERN = f"^[^{WHITESPACE}\\x00]{{1,512}}$"
SELECTOR_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,127}$"
SELECTOR_VALUE_PATTERN = r"^[^\x00-\x1f,=]{0,256}$"
CONTAINER_USER_PATTERN = r"^(root|nobody|[0-9]{1,10}(:[0-9]{1,10})?)$"

_BAD_HEADER_VALUE = re.compile(r"[\r\n\x00]")
# Characters SQS accepts in a message body and attribute values; SQS_TEXT is
# the same set for JSON Schema (lone surrogates cannot be sent at all).
_SQS_BAD_CHARS = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
SQS_TEXT = "[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\ufffe\\uffff]"
# NUL is refused in every request body (cronman.api.common); free text says so.
NO_NUL = {"pattern": "^[^\\u0000]*$"}
POSITIVE = "must be greater than 0 and at most {hi:g}"
A_STRING = "must be a string"


def utf8(value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("must be valid Unicode text") from None


def _header_name(name: str) -> str | None:
    low = name.lower()
    if low.startswith("cronman-"):
        return "Cronman-* headers are set by cronman on every request"
    if low in RESERVED_HEADERS:
        return f"the {name} header is set by the HTTP client"
    return None


def _header_value(value: str) -> str | None:
    if _BAD_HEADER_VALUE.search(value):
        return "must not contain CR, LF or NUL characters"
    if len(utf8(value)) > MAX_HEADER_VALUE_BYTES:
        return f"must be at most {MAX_HEADER_VALUE_BYTES} bytes"
    return None


def _http_body(value: str) -> str | None:
    if len(utf8(value)) > MAX_HTTP_BODY_BYTES:
        return f"must be at most {MAX_HTTP_BODY_BYTES} bytes (64 KiB) of UTF-8"
    return None


def sqs_text(value: str) -> str | None:
    bad = _SQS_BAD_CHARS.search(value)
    return None if bad is None else \
        f"contains a character SQS does not accept (U+{ord(bad.group()):04X})"


_ATTRIBUTE_NAME = ("must be 1-256 letters, digits, '_', '-' or '.' (no leading, trailing or "
                   "repeated '.')")


def _attribute_name(name: str) -> str | None:
    if name.startswith(".") or name.endswith(".") or ".." in name:
        return _ATTRIBUTE_NAME
    if name.lower().startswith(("cronman-", "aws.", "amazon.")):
        return "names starting with cronman-, AWS. or Amazon. are reserved"
    return None


def _sqs_size(out: dict[str, Any]) -> None:
    """Body plus attributes fit the size every queue accepts (256 KiB)."""
    try:
        size = len(utf8(out["body"])) + SQS_RESERVED_ATTRIBUTE_BYTES
    except ValidationError as exc:
        raise ValidationError(exc.message, field="body") from None
    size += sum(len(k.encode()) + len(v.encode()) + len("String")
                for k, v in out["attributes"].items())
    if size > MAX_SQS_MESSAGE_BYTES:
        raise ValidationError(
            "body and attributes together must be at most "
            f"{MAX_SQS_MESSAGE_BYTES - SQS_RESERVED_ATTRIBUTE_BYTES} bytes (256 KiB)",
            field="body")


def _no_nul(value: str) -> str | None:
    return "must not contain NUL characters" if "\x00" in value else None


def _one_message(pattern: str, message: str, **kw: Any) -> Str:
    """A string matching ``pattern``: one message for any failure."""
    return Str(pattern=pattern, type_message=message, pattern_message=message, **kw)


NUL_FREE = Str(type_message=A_STRING, rules=[Rule(_no_nul, NO_NUL)])
HEADERS = MapOf(
    _one_message(HEADER_NAME_PATTERN, "is not a valid HTTP header name", rules=[Rule(
        _header_name, {"not": {"pattern": "^(?:" + "|".join(
            [any_case("cronman-") + ".*", *(any_case(h) for h in sorted(RESERVED_HEADERS))])
            + ")$"}})]),
    Str(type_message=A_STRING, rules=[Rule(_header_value, {
        "pattern": "^[^\\r\\n\\u0000]*$", "maxLength": MAX_HEADER_VALUE_BYTES})]),
    max_items=MAX_HEADERS, type_message="must be an object of header names to string values",
    count_message="at most {max} headers are allowed",
    unique_ci="duplicate header (names are case-insensitive)", nullable=True, default={},
    description="values are shown redacted in answers, but for Content-Type, Accept and "
                "other headers that hold no secret")
ATTRIBUTES = MapOf(
    _one_message(SQS_ATTRIBUTE_NAME_PATTERN, _ATTRIBUTE_NAME, rules=[Rule(
        _attribute_name, {"not": {"pattern": f"^(?:{any_case('cronman-')}|{any_case('aws.')}|"
                                             f"{any_case('amazon.')})|^\\.|\\.$|\\.\\."}})]),
    Str(min_len=1, type_message=A_STRING,
        empty_message="must not be empty (SQS refuses empty attribute values)",
        rules=[Rule(sqs_text, {"pattern": f"^{SQS_TEXT}+$"})]),
    max_items=SQS_MAX_USER_ATTRIBUTES, type_message="must be an object of names to string values",
    count_message=f"at most {{max}} attributes (SQS allows {SQS_MAX_ATTRIBUTES} per message "
                  f"and cronman sets {SQS_RESERVED_ATTRIBUTES})", nullable=True, default={})
DEAD_LETTER_BODY = Str(
    max_len=0, type_message=A_STRING, nullable=True, default="",
    long_message="a dead-letter target's body is the run record; do not set one",
    description="none: a dead letter's body is the run record")


def _positive(hi: float, default: float) -> Num:
    return Num(lo=0, lo_open=True, hi=hi, type_message="must be a number",
               finite_message=POSITIVE, range_message=POSITIVE, nullable=True, default=default)


def _variant(kind: str, name: str, fields: dict[str, Field], **kw: Any) -> Obj:
    return Obj({"kind": Const(kind), **fields}, name=name,
               unknown_message=f"unknown field {{key!r}} for a {kind} target", **kw)


def _http(name: str, method: Choice, body: Str, more: dict[str, Field] | None = None,
          **kw: Any) -> Obj:
    return _variant("http", name, {
        "url": url_field(required=True), "method": method, "headers": HEADERS, "body": body,
        "timeout": _positive(MAX_HTTP_TIMEOUT, DEFAULT_HTTP_TIMEOUT), **(more or {})}, **kw)


def _sqs(name: str, body: Str) -> Obj:
    return _variant("sqs", name, {
        "queue_url": url_field(required=True),
        "region": _one_message(SQS_REGION_PATTERN, "must be an AWS region name such as "
                               "us-east-1", required=True),
        "body": body, "attributes": ATTRIBUTES,
        "endpoint_url": url_field(nullable=True),
        "message_group_id": _one_message(
            MESSAGE_GROUP_ID_PATTERN, "must be 1-128 letters, digits or punctuation characters",
            nullable=True),
    }, after={"attributes": _sqs_size})


def _completion(out: dict[str, Any]) -> None:
    """``heartbeat_timeout`` and ``completion_timeout`` go with ``"completion":
    "callback"`` (defaults filled in then); a plain http target keeps none of
    the three keys, so its normalised form is as before they existed."""
    if out["completion"] == COMPLETION_CALLBACK:
        out["heartbeat_timeout"] = out["heartbeat_timeout"] or DEFAULT_HTTP_HEARTBEAT_TIMEOUT
        out["completion_timeout"] = out["completion_timeout"] or DEFAULT_COMPLETION_TIMEOUT
        return
    for key in ("heartbeat_timeout", "completion_timeout"):
        if out[key] is not None:
            raise ValidationError(ONLY_WITH_CALLBACK, field=key)
    for key in ("completion", "heartbeat_timeout", "completion_timeout"):
        del out[key]


COMPLETION_FIELDS: dict[str, Field] = {
    "completion": Choice(COMPLETIONS, message="must be one of: {choices}", nullable=True,
                         default=COMPLETION_RESPONSE,
                         description="response: the answer ends the attempt; callback: a 202 "
                                     "leaves the run running under a lease, and the receiver "
                                     "heartbeats and completes it through the API (the "
                                     "request carries Cronman-Completion-Url, "
                                     "Cronman-Heartbeat-Url and Cronman-Lease-Token; needs "
                                     "CRONMAN_PUBLIC_URL)"),
    "heartbeat_timeout": Int(
        lo=1, hi=MAX_HEARTBEAT_TIMEOUT, type_message="must be an integer (seconds)",
        range_message="must be between {lo} and {hi} seconds", nullable=True,
        description=f"completion callback only (default {DEFAULT_HTTP_HEARTBEAT_TIMEOUT}): "
                    "the lease is lost when no heartbeat or completion comes for this long"),
    "completion_timeout": Int(
        lo=1, hi=MAX_WORK_TIMEOUT, type_message="must be an integer (seconds)",
        range_message="must be between {lo} and {hi} seconds", nullable=True,
        description=f"completion callback only (default {DEFAULT_COMPLETION_TIMEOUT}): how "
                    "long the receiver may take to complete, heartbeats or not"),
}

METHOD = Choice(HTTP_METHODS, message="must be one of: {choices}", upper=True, nullable=True,
                default=DEFAULT_HTTP_METHOD)
HTTP = _http("HttpTarget", METHOD, Str(
    type_message=A_STRING, rules=[Rule(_http_body, {"maxLength": MAX_HTTP_BODY_BYTES})],
    extra=NO_NUL, nullable=True, default="", description="at most 64 KiB of UTF-8"),
    COMPLETION_FIELDS, after={"completion_timeout": _completion})
SQS = _sqs("SqsTarget", Str(
    min_len=1, type_message=A_STRING, required=True,
    required_message="is required (SQS does not accept empty messages)",
    empty_message="must not be empty (SQS does not accept empty messages)",
    rules=[Rule(sqs_text, {"pattern": f"^{SQS_TEXT}+$"})],
    # The API holds every target body to 64 KiB (cronman.api.job_fields).
    extra={"maxLength": MAX_HTTP_BODY_BYTES}, description="at most 64 KiB of UTF-8"))
CONTAINER = _variant("container", "ContainerTarget", {
    "image": _one_message(IMAGE_PATTERN, "must be an image reference (no whitespace, ≤ 512 "
                          "chars)", required=True),
    "command": ListOf(NUL_FREE, max_items=MAX_COMMAND_ITEMS,
                      type_message="must be a list of strings", nullable=True, default=[]),
    "env": MapOf(_one_message(ENV_NAME_PATTERN, "is not a valid environment variable name"),
                 NUL_FREE, type_message="must be an object of names to string values",
                 nullable=True, default={}, description="values are shown redacted in answers"),
    "cpu": _positive(MAX_CONTAINER_CPU, DEFAULT_CONTAINER_CPU),
    "memory_mb": Int(lo=1, hi=MAX_CONTAINER_MEMORY_MB, type_message="must be an integer (MiB)",
                     range_message="must be greater than 0 and at most {hi}", nullable=True,
                     default=DEFAULT_CONTAINER_MEMORY_MB),
    "timeout": _positive(MAX_CONTAINER_TIMEOUT, DEFAULT_CONTAINER_TIMEOUT),
    "network": Choice(CONTAINER_NETWORKS, message="must be one of: {choices}", nullable=True,
                      default=DEFAULT_CONTAINER_NETWORK,
                      description="host: only where the namespace's host policy allows it"),
    "user": _one_message(CONTAINER_USER_PATTERN, "must be root, nobody, UID or UID:GID",
                         nullable=True, description="default: 65534 (nobody); root (uid or "
                                                    "gid 0) only where the namespace's host "
                                                    "policy allows it"),
    "selector": MapOf(
        _one_message(SELECTOR_KEY_PATTERN, "is not a valid label name"),
        _one_message(SELECTOR_VALUE_PATTERN,
                     "must be a string without control characters, ',' or '='"),
        max_items=MAX_SELECTOR_LABELS, count_message="at most {max} labels",
        type_message="must be an object of agent label names to values", nullable=True,
        default={}, description="agent labels an agent must carry to run it"),
})



def json_size(value: Any) -> int:
    """The bytes of ``value`` as compact JSON (what is stored and sent)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _payload(value: Any, key: str, out: dict[str, Any], ctx: Any) -> Any:
    try:
        size = json_size(value)
    except (TypeError, ValueError, UnicodeEncodeError):
        raise ValidationError("must be JSON text", field=key) from None
    if size > MAX_WORK_PAYLOAD_BYTES:
        raise ValidationError(f"must be at most {MAX_WORK_PAYLOAD_BYTES} bytes (64 KiB) "
                              "encoded as JSON", field=key)
    return value


def _seconds(lo: int, hi: int, default: int | None = None, **kw: Any) -> Int:
    return Int(lo=lo, hi=hi, type_message="must be an integer (seconds)",
               range_message="must be between {lo} and {hi} seconds", nullable=True,
               default=default, **kw)


WORK_QUEUE = _one_message(WORK_QUEUE_PATTERN, "must be 1-64 letters, digits, '.', '_' or '-'",
                          required=True, description="the queue's name, within the job's "
                                                     "namespace")
CAPACITY = Obj({
    "idle_workers": Int(lo=1, hi=MAX_IDLE_WORKERS, type_message="must be an integer",
                        range_message="must be between {lo} and {hi}", required=True,
                        description="idle workers the queue must have before the run is "
                                    "handed out"),
    "wait": _seconds(1, MAX_CAPACITY_WAIT, DEFAULT_CAPACITY_WAIT,
                     description="how long the run waits for them before its attempt fails"),
}, unknown_message="unknown field {key!r} of capacity", nullable=True,
    description="what the queue must have before the run is claimed")
WORKER = _variant("worker", "WorkerTarget", {
    "queue": WORK_QUEUE,
    "payload": Custom(_payload, {"description": "any JSON, at most 64 KiB encoded; handed "
                                                "to the worker that claims the run"}),
    "heartbeat_timeout": _seconds(1, MAX_HEARTBEAT_TIMEOUT, DEFAULT_HEARTBEAT_TIMEOUT,
                                  description="a claim's lease: lost when no heartbeat "
                                              "comes for this long"),
    "timeout": _seconds(1, MAX_WORK_TIMEOUT, DEFAULT_WORK_TIMEOUT,
                        description="how long a claimed attempt may take, heartbeats or not"),
    "capacity": CAPACITY,
})

TARGET = OneOf([HTTP, SQS, CONTAINER, WORKER], name="Target")
DEAD_LETTER = OneOf([
    _http("DeadLetterHttpTarget", METHOD.but(refused={"GET": (
        "a dead-letter target sends the run record as its body; use POST, PUT or PATCH")}),
        DEAD_LETTER_BODY),
    _sqs("DeadLetterSqsTarget", DEAD_LETTER_BODY),
], name="DeadLetterTarget")
