"""Target URLs: the ``url``-like fields of http and sqs targets.

A URL is an absolute http(s) URL with a valid host and no credentials,
returned unchanged. The host checks are code (JSON Schema cannot parse a
URL); the OpenAPI document carries ``HTTP_URL_PATTERN``, a narrower form
every accepted URL of the usual shapes matches.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any
from urllib.parse import urlsplit

from cronman.fieldspec import Rule, Str, any_case

MAX_URL_LENGTH = 2048
# Python's whitespace (str.isspace), spelled out for JSON Schema patterns too
# (JSON Schema's \s, ECMAScript's, is another set); a URL has none of these
# nor a control character.
PY_WHITESPACE = (r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f"
                 r"\u205f\u3000")
_SPACE_OR_CONTROL = re.compile(f"[{PY_WHITESPACE}\\x00-\\x1f\\x7f]")
NOT_A_URL = "must be an http or https URL"

_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_.])?$")
_NUMERIC_HOST = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]*))*\.?$", re.I)

_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LABEL = "[A-Za-z0-9_][A-Za-z0-9_-]{0,30}"
_HOST = (f"(?:(?:{_LABEL}\\.){{0,3}}[A-Za-z_](?:[A-Za-z0-9_-]{{0,29}}[A-Za-z0-9_])?"
         f"|(?:{_OCTET}\\.){{3}}{_OCTET})")
_PORT = ("(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
         "|[1-9][0-9]{0,3}))?")
HTTP_URL_PATTERN = f"^{any_case('http')}[Ss]?://{_HOST}{_PORT}(?:[/?#][!-~]*)?$"


def url_problem(value: str) -> str | None:
    """What is wrong with the (non-empty, short enough) URL ``value``, or None."""
    if _SPACE_OR_CONTROL.search(value):
        return "must not contain whitespace or control characters"
    try:
        parts = urlsplit(value)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        return f"is not a valid URL: {exc}"
    scheme = parts.scheme.lower()
    if not scheme:
        return "must be an absolute http or https URL"
    if scheme not in ("http", "https"):
        return f"unsupported URL scheme {parts.scheme!r}: only http and https are allowed"
    if not host:
        return "must name a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials; use an Authorization header instead"
    if port == 0:
        return "port 0 is not a valid port"
    return host_problem(host)


def host_problem(host: str) -> str | None:
    """What is wrong with a URL's host name or address, or None."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if ":" in host:
        return f"host {host!r} is not a valid IPv6 address"
    if _NUMERIC_HOST.match(host):
        try:
            socket.inet_aton(host.rstrip("."))
        except OSError:
            return f"host {host!r} is not a valid address"
        return f"host {host!r} is not a canonical IPv4 address (write a.b.c.d)"
    if host.isascii():
        ok = bool(_HOSTNAME.match(host)) and len(host) <= 253
    else:
        try:
            ok = len(host.encode("idna")) <= 253
        except UnicodeError:
            ok = False
    return None if ok else f"host {host!r} is not a valid host name"


def url_field(**kw: Any) -> Str:
    """A URL field (``required``, ``nullable``... as for any field)."""
    return Str(min_len=1, max_len=MAX_URL_LENGTH, type_message=NOT_A_URL,
               empty_message=NOT_A_URL,
               rules=[Rule(url_problem, {"pattern": HTTP_URL_PATTERN})],
               description="an http or https URL without credentials; host names and "
                           "IPv4 addresses as the pattern shows (IPv6 literals in brackets "
                           "and internationalised names are accepted too)", **kw)
