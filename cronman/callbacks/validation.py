"""Validation and normalisation of target objects (SPEC §3, "Targets").

Pure functions, no I/O: the API calls :func:`validate_target` on every job it
accepts and stores the normalised object it returns (defaults filled in), so
the targets only ever see normalised objects. A ``ValidationError`` names the
offending field *relative to the target object* (``url``, ``headers.X-Foo``,
``command[2]``); the caller prefixes it (``target.url``, ``dead_letter.url``).
Validating a normalised object again returns an equal object.

Decisions this module makes (and the README documents):

- http: credentials in the URL (``user:pass@host``) are refused -- put them in
  an ``Authorization`` header, which the API masks. Hosts written as
  non-canonical IPv4 numbers (``2130706433``, ``0x7f.1``) are refused.
  Headers that the client owns are refused: ``Cronman-*`` (set by cronman on
  every request), ``Host`` and the framing / hop-by-hop headers
  (``Content-Length``, ``Transfer-Encoding``, ``Connection``, ...), since
  letting them through would allow request smuggling towards the receiver.
- Private-address (SSRF) checks depend on the node's settings, so they are
  not made here but when the request is sent (``cronman.callbacks.http``).
- sqs: the body must be non-empty (SQS refuses empty messages) and may hold
  only the characters SQS accepts. Body plus attributes must fit in 256 KiB,
  the size every queue accepts (a queue configured for more is still held to
  256 KiB). cronman adds three attributes of its own, so a target may set at
  most 7 of the 10 SQS allows; names starting with ``cronman-``, ``AWS.`` or
  ``Amazon.`` are refused.
- container: validated here; placement and running belong to the worker agent.
  ``selector`` is a map of agent labels (an agent must carry every one);
  ``network`` is ``none`` (default: the container has loopback only) or
  ``host``; ``user`` is ``root``, ``nobody``, ``UID`` or ``UID:GID`` (null:
  the agent's default non-root user), numeric because the agent does not
  read the image's ``/etc/passwd``.
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from cronman.errors import ValidationError
from cronman.vocabulary import TARGET_KINDS

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DEFAULT_HTTP_METHOD = "POST"
DEFAULT_HTTP_TIMEOUT = 10
MAX_HTTP_TIMEOUT = 300
MAX_HTTP_BODY_BYTES = 64 * 1024
MAX_HEADERS = 64
MAX_HEADER_VALUE_BYTES = 8 * 1024
MAX_URL_LENGTH = 2048

MAX_SQS_MESSAGE_BYTES = 256 * 1024
SQS_MAX_ATTRIBUTES = 10
# cronman-job-id, cronman-run-id, cronman-scheduled-for (see cronman.callbacks.sqs).
SQS_RESERVED_ATTRIBUTES = 3
SQS_MAX_USER_ATTRIBUTES = SQS_MAX_ATTRIBUTES - SQS_RESERVED_ATTRIBUTES
# Room kept for cronman's own attributes when checking the total message size.
SQS_RESERVED_ATTRIBUTE_BYTES = 512
MAX_MESSAGE_GROUP_ID = 128

DEFAULT_CONTAINER_CPU = 1
DEFAULT_CONTAINER_MEMORY_MB = 256
DEFAULT_CONTAINER_TIMEOUT = 3600
MAX_CONTAINER_CPU = 256
MAX_CONTAINER_MEMORY_MB = 1024 * 1024
MAX_CONTAINER_TIMEOUT = 7 * 86400
MAX_COMMAND_ITEMS = 1024

# Headers the HTTP client owns (framing, hop-by-hop); Cronman-* is checked by prefix.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        "te",
        "trailer",
        "expect",
    }
)

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_BAD_HEADER_VALUE = re.compile(r"[\r\n\x00]")
_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_.])?$")
_NUMERIC_HOST = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]*))*\.?$", re.I)
# Characters SQS accepts in a message body and attribute values.
_SQS_BAD_CHARS = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SQS_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_SQS_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_MESSAGE_GROUP_ID = re.compile(r"^[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Python's whitespace (str.isspace), spelled out: the OpenAPI document repeats
# the pattern, and JSON Schema's \s (ECMAScript's) is another set.
WHITESPACE = (r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f"
              r"\u205f\u3000")
_IMAGE = re.compile(f"^[^{WHITESPACE}\\x00]{{1,512}}$")
# Those the OpenAPI document states (cronman.api.openapi_schemas).
HEADER_NAME_PATTERN = _TOKEN.pattern
SQS_REGION_PATTERN = _SQS_REGION.pattern
SQS_ATTRIBUTE_NAME_PATTERN = _SQS_ATTRIBUTE_NAME.pattern
MESSAGE_GROUP_ID_PATTERN = _MESSAGE_GROUP_ID.pattern
ENV_NAME_PATTERN = _ENV_NAME.pattern
IMAGE_PATTERN = _IMAGE.pattern

_HTTP_KEYS = ("kind", "url", "method", "headers", "body", "timeout")
_SQS_KEYS = (
    "kind",
    "queue_url",
    "region",
    "body",
    "attributes",
    "endpoint_url",
    "message_group_id",
)
_CONTAINER_KEYS = ("kind", "image", "command", "env", "cpu", "memory_mb", "timeout",
                   "selector", "network", "user")
CONTAINER_NETWORKS = ("none", "host")
DEFAULT_CONTAINER_NETWORK = "none"
MAX_SELECTOR_LABELS = 32
SELECTOR_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,127}$"
SELECTOR_VALUE_PATTERN = r"^[^\x00-\x1f,=]{0,256}$"
CONTAINER_USER_PATTERN = r"^(root|nobody|[0-9]{1,10}(:[0-9]{1,10})?)$"
_LABEL_KEY = re.compile(SELECTOR_KEY_PATTERN)
_LABEL_VALUE = re.compile(SELECTOR_VALUE_PATTERN)
_USER = re.compile(CONTAINER_USER_PATTERN)


def validate_target(spec: Any, *, allowed_kinds: tuple[str, ...] = TARGET_KINDS) -> dict[str, Any]:
    """Validate a target object and return its normalised form (defaults filled in).

    Raises ``ValidationError`` whose ``field`` is relative to the target object.
    """
    return _validate(spec, allowed_kinds, dead_letter=False)


def _validate(spec: Any, allowed_kinds: tuple[str, ...], *, dead_letter: bool) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise ValidationError("must be an object")
    kind = spec.get("kind")
    if kind is None:
        raise ValidationError(f"is required (one of: {', '.join(allowed_kinds)})", field="kind")
    if not isinstance(kind, str) or kind not in allowed_kinds:
        raise ValidationError(f"must be one of: {', '.join(allowed_kinds)}", field="kind")
    if kind == "http":
        _no_unknown_keys(spec, _HTTP_KEYS)
        return _validate_http(spec, dead_letter=dead_letter)
    if kind == "sqs":
        _no_unknown_keys(spec, _SQS_KEYS)
        return _validate_sqs(spec, dead_letter=dead_letter)
    _no_unknown_keys(spec, _CONTAINER_KEYS)
    return _validate_container(spec)


# -- http ---------------------------------------------------------------------


def _validate_http(spec: Mapping[str, Any], *, dead_letter: bool) -> dict[str, Any]:
    url = _url(spec.get("url"), "url", required=True)
    method = spec.get("method", DEFAULT_HTTP_METHOD)
    if method is None:
        method = DEFAULT_HTTP_METHOD
    if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
        raise ValidationError(f"must be one of: {', '.join(HTTP_METHODS)}", field="method")
    method = method.upper()
    if dead_letter and method == "GET":
        raise ValidationError(
            "a dead-letter target sends the run record as its body; use POST, PUT or PATCH",
            field="method",
        )
    headers = _headers(spec.get("headers"))
    body = _body(spec, MAX_HTTP_BODY_BYTES, dead_letter=dead_letter)
    timeout = _number(
        spec.get("timeout"), "timeout", default=DEFAULT_HTTP_TIMEOUT, maximum=MAX_HTTP_TIMEOUT
    )
    return {
        "kind": "http",
        "url": url,
        "method": method,
        "headers": headers,
        "body": body,
        "timeout": timeout,
    }


def _headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("must be an object of header names to string values", field="headers")
    if len(value) > MAX_HEADERS:
        raise ValidationError(f"at most {MAX_HEADERS} headers are allowed", field="headers")
    seen: set[str] = set()
    out: dict[str, str] = {}
    for name, val in value.items():
        field = f"headers.{name}"
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise ValidationError("is not a valid HTTP header name", field=field)
        low = name.lower()
        if low.startswith("cronman-"):
            raise ValidationError(
                "Cronman-* headers are set by cronman on every request", field=field
            )
        if low in RESERVED_HEADERS:
            raise ValidationError(f"the {name} header is set by the HTTP client", field=field)
        if low in seen:
            raise ValidationError("duplicate header (names are case-insensitive)", field=field)
        seen.add(low)
        if not isinstance(val, str):
            raise ValidationError("must be a string", field=field)
        if _BAD_HEADER_VALUE.search(val):
            raise ValidationError("must not contain CR, LF or NUL characters", field=field)
        if len(_utf8(val, field)) > MAX_HEADER_VALUE_BYTES:
            raise ValidationError(f"must be at most {MAX_HEADER_VALUE_BYTES} bytes", field=field)
        out[name] = val
    return out


# -- sqs ----------------------------------------------------------------------


def _validate_sqs(spec: Mapping[str, Any], *, dead_letter: bool) -> dict[str, Any]:
    queue_url = _url(spec.get("queue_url"), "queue_url", required=True)
    region = spec.get("region")
    if region is None:
        raise ValidationError("is required", field="region")
    if not isinstance(region, str) or not _SQS_REGION.match(region):
        raise ValidationError("must be an AWS region name such as us-east-1", field="region")
    if dead_letter:
        _body(spec, MAX_SQS_MESSAGE_BYTES, dead_letter=True)
        body = ""
    else:
        given = spec.get("body")
        if given is None:
            raise ValidationError("is required (SQS does not accept empty messages)", field="body")
        if not isinstance(given, str):
            raise ValidationError("must be a string", field="body")
        body = given
        if body == "":
            raise ValidationError(
                "must not be empty (SQS does not accept empty messages)", field="body"
            )
        _sqs_text(body, "body")
    attributes = _sqs_attributes(spec.get("attributes"))
    size = len(_utf8(body, "body")) + SQS_RESERVED_ATTRIBUTE_BYTES
    size += sum(len(k.encode()) + len(v.encode()) + len("String") for k, v in attributes.items())
    if size > MAX_SQS_MESSAGE_BYTES:
        raise ValidationError(
            "body and attributes together must be at most "
            f"{MAX_SQS_MESSAGE_BYTES - SQS_RESERVED_ATTRIBUTE_BYTES} bytes (256 KiB)",
            field="body",
        )
    endpoint_url = _url(spec.get("endpoint_url"), "endpoint_url", required=False)
    group = spec.get("message_group_id")
    if group is not None and (not isinstance(group, str) or not _MESSAGE_GROUP_ID.match(group)):
        raise ValidationError(
            "must be 1-128 letters, digits or punctuation characters", field="message_group_id"
        )
    return {
        "kind": "sqs",
        "queue_url": queue_url,
        "region": region,
        "body": body,
        "attributes": attributes,
        "endpoint_url": endpoint_url,
        "message_group_id": group,
    }


def _sqs_attributes(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("must be an object of names to string values", field="attributes")
    if len(value) > SQS_MAX_USER_ATTRIBUTES:
        raise ValidationError(
            f"at most {SQS_MAX_USER_ATTRIBUTES} attributes (SQS allows {SQS_MAX_ATTRIBUTES} "
            f"per message and cronman sets {SQS_RESERVED_ATTRIBUTES})",
            field="attributes",
        )
    out: dict[str, str] = {}
    for name, val in value.items():
        field = f"attributes.{name}"
        if (
            not isinstance(name, str)
            or not _SQS_ATTRIBUTE_NAME.match(name)
            or name.startswith(".")
            or name.endswith(".")
            or ".." in name
        ):
            raise ValidationError(
                "must be 1-256 letters, digits, '_', '-' or '.' (no leading, trailing or "
                "repeated '.')",
                field=field,
            )
        low = name.lower()
        if low.startswith(("cronman-", "aws.", "amazon.")):
            raise ValidationError(
                "names starting with cronman-, AWS. or Amazon. are reserved", field=field
            )
        if not isinstance(val, str):
            raise ValidationError("must be a string", field=field)
        if val == "":
            raise ValidationError(
                "must not be empty (SQS refuses empty attribute values)", field=field
            )
        _sqs_text(val, field)
        out[name] = val
    return out


def _sqs_text(value: str, field: str) -> None:
    bad = _SQS_BAD_CHARS.search(value)
    if bad:
        raise ValidationError(
            f"contains a character SQS does not accept (U+{ord(bad.group()):04X})", field=field
        )


# -- container ----------------------------------------------------------------


def _validate_container(spec: Mapping[str, Any]) -> dict[str, Any]:
    image = spec.get("image")
    if image is None:
        raise ValidationError("is required", field="image")
    if not isinstance(image, str) or not _IMAGE.match(image):
        raise ValidationError(
            "must be an image reference (no whitespace, ≤ 512 chars)", field="image"
        )
    command = spec.get("command")
    if command is None:
        command = []
    if not isinstance(command, list):
        raise ValidationError("must be a list of strings", field="command")
    if len(command) > MAX_COMMAND_ITEMS:
        raise ValidationError(f"at most {MAX_COMMAND_ITEMS} items", field="command")
    for i, item in enumerate(command):
        if not isinstance(item, str):
            raise ValidationError("must be a string", field=f"command[{i}]")
        if "\x00" in item:
            raise ValidationError("must not contain NUL characters", field=f"command[{i}]")
    env = spec.get("env")
    if env is None:
        env = {}
    if not isinstance(env, Mapping):
        raise ValidationError("must be an object of names to string values", field="env")
    for name, val in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ValidationError("is not a valid environment variable name", field=f"env.{name}")
        if not isinstance(val, str):
            raise ValidationError("must be a string", field=f"env.{name}")
        if "\x00" in val:
            raise ValidationError("must not contain NUL characters", field=f"env.{name}")
    cpu = _number(spec.get("cpu"), "cpu", default=DEFAULT_CONTAINER_CPU, maximum=MAX_CONTAINER_CPU)
    memory_mb = spec.get("memory_mb")
    if memory_mb is None:
        memory_mb = DEFAULT_CONTAINER_MEMORY_MB
    # 512.0 is 512: JSON does not tell integers from floats.
    if isinstance(memory_mb, float) and math.isfinite(memory_mb) and memory_mb.is_integer():
        memory_mb = int(memory_mb)
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int):
        raise ValidationError("must be an integer (MiB)", field="memory_mb")
    if not 0 < memory_mb <= MAX_CONTAINER_MEMORY_MB:
        raise ValidationError(
            f"must be greater than 0 and at most {MAX_CONTAINER_MEMORY_MB}", field="memory_mb"
        )
    timeout = _number(
        spec.get("timeout"),
        "timeout",
        default=DEFAULT_CONTAINER_TIMEOUT,
        maximum=MAX_CONTAINER_TIMEOUT,
    )
    network = spec.get("network")
    if network is None:
        network = DEFAULT_CONTAINER_NETWORK
    if network not in CONTAINER_NETWORKS:
        raise ValidationError(f"must be one of: {', '.join(CONTAINER_NETWORKS)}",
                              field="network")
    user = spec.get("user")
    if user is not None and (not isinstance(user, str) or not _USER.match(user)):
        raise ValidationError("must be root, nobody, UID or UID:GID", field="user")
    return {
        "kind": "container",
        "image": image,
        "command": list(command),
        "env": dict(env),
        "cpu": cpu,
        "memory_mb": memory_mb,
        "timeout": timeout,
        "selector": _selector(spec.get("selector")),
        "network": network,
        "user": user,
    }


def _selector(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("must be an object of agent label names to values",
                              field="selector")
    if len(value) > MAX_SELECTOR_LABELS:
        raise ValidationError(f"at most {MAX_SELECTOR_LABELS} labels", field="selector")
    for name, val in value.items():
        if not isinstance(name, str) or not _LABEL_KEY.match(name):
            raise ValidationError("is not a valid label name", field=f"selector.{name}")
        if not isinstance(val, str) or not _LABEL_VALUE.match(val):
            raise ValidationError("must be a string without control characters, ',' or '='",
                                  field=f"selector.{name}")
    return dict(value)


# -- shared -------------------------------------------------------------------


def _no_unknown_keys(spec: Mapping[str, Any], known: tuple[str, ...]) -> None:
    for key in spec:
        if key not in known:
            raise ValidationError(
                f"unknown field {key!r} for a {spec['kind']} target", field=str(key)
            )


def _body(spec: Mapping[str, Any], limit: int, *, dead_letter: bool) -> str:
    body = spec.get("body")
    if body is None:
        return ""
    if not isinstance(body, str):
        raise ValidationError("must be a string", field="body")
    if dead_letter:
        if body:
            raise ValidationError(
                "a dead-letter target's body is the run record; do not set one", field="body"
            )
        return ""
    if len(_utf8(body, "body")) > limit:
        raise ValidationError(
            f"must be at most {limit} bytes ({limit // 1024} KiB) of UTF-8", field="body"
        )
    return body


def _utf8(value: str, field: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("must be valid Unicode text", field=field) from None


def _number(value: Any, field: str, *, default: float, maximum: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError("must be a number", field=field)
    if not math.isfinite(value) or not 0 < value <= maximum:
        raise ValidationError(f"must be greater than 0 and at most {maximum:g}", field=field)
    return value


def _url(value: Any, field: str, *, required: bool) -> str | None:
    """An absolute http(s) URL with a host, returned unchanged."""
    if value is None:
        if required:
            raise ValidationError("is required", field=field)
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError("must be an http or https URL", field=field)
    if len(value) > MAX_URL_LENGTH:
        raise ValidationError(f"must be at most {MAX_URL_LENGTH} characters", field=field)
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValidationError("must not contain whitespace or control characters", field=field)
    try:
        parts = urlsplit(value)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise ValidationError(f"is not a valid URL: {exc}", field=field) from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise ValidationError("must be an absolute http or https URL", field=field)
    if scheme not in ("http", "https"):
        raise ValidationError(
            f"unsupported URL scheme {parts.scheme!r}: only http and https are allowed", field=field
        )
    if not host:
        raise ValidationError("must name a host", field=field)
    if parts.username is not None or parts.password is not None:
        raise ValidationError(
            "must not carry credentials; use an Authorization header instead", field=field
        )
    if port == 0:
        raise ValidationError("port 0 is not a valid port", field=field)
    _host(host, field)
    return value


def _host(host: str, field: str) -> None:
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if ":" in host:
        raise ValidationError(f"host {host!r} is not a valid IPv6 address", field=field)
    if _NUMERIC_HOST.match(host):
        try:
            socket.inet_aton(host.rstrip("."))
        except OSError:
            raise ValidationError(f"host {host!r} is not a valid address", field=field) from None
        raise ValidationError(
            f"host {host!r} is not a canonical IPv4 address (write a.b.c.d)", field=field
        )
    if host.isascii():
        ok = bool(_HOSTNAME.match(host)) and len(host) <= 253
    else:
        try:
            ok = len(host.encode("idna")) <= 253
        except UnicodeError:
            ok = False
    if not ok:
        raise ValidationError(f"host {host!r} is not a valid host name", field=field)
