"""What to send: the origin of a URL and a request prepared once, rendered per call.

A :class:`PreparedRequest` holds the bytes that do not change between calls
(request line, ``Host``, the caller's fixed headers, framing, body);
:meth:`PreparedRequest.render` adds the per-call headers. Header names and
values are checked here: a CR, LF or NUL in either, or a name that is not an
HTTP token, would let a value end the header block early (request smuggling),
so it raises :class:`InvalidRequest` instead.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cronman.callbacks.httpclient.errors import InvalidRequest, InvalidURL
from cronman.signing import wire_url

# Methods whose requests carry no Content-Length when they have no body.
BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_valid_names: set[str] = set()


@dataclass(frozen=True, slots=True)
class Origin:
    """Where connections go: scheme, host (IDNA name or bare IP) and port. The pool's key."""

    scheme: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def where(self) -> str:
        """``host:port``, for messages."""
        return f"{self.host}:{self.port}"

    @property
    def is_ip_literal(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True


def parse_url(url: str) -> tuple[Origin, str, str]:
    """``(origin, Host header value, request target)`` of an absolute http(s) URL.

    The wire form is :func:`cronman.signing.wire_url`'s, the one callback
    signatures cover, so that what is signed is what is sent.
    """
    try:
        wire = wire_url(url)
    except ValueError as exc:
        raise InvalidURL(str(exc)) from None
    return Origin(wire.scheme, wire.host, wire.port), wire.host_header, wire.target


def header_line(name: str, value: str) -> bytes:
    """``name: value\\r\\n`` as bytes, refusing anything that could break the framing."""
    if name not in _valid_names:
        if not _TOKEN.match(name):
            raise InvalidRequest(f"invalid header name {name!r}")
        if len(_valid_names) < 4096:  # per-call names are a handful; keep their check
            _valid_names.add(name)
    if "\r" in value or "\n" in value or "\0" in value:
        raise InvalidRequest(f"invalid value for header {name}: CR, LF and NUL are not allowed")
    return f"{name}: {value}\r\n".encode()


class PreparedRequest:
    """One method + URL + fixed headers + body, encoded once; render it per call.

    ``default_headers`` are sent unless ``headers`` names the same header
    (case-insensitively). A request with a body and no ``Content-Type`` is
    sent as ``application/octet-stream``.
    """

    __slots__ = ("origin", "method", "url", "head", "_fixed", "_tail")

    def __init__(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        method = method.upper()
        if not _TOKEN.match(method):
            raise InvalidRequest(f"invalid method {method!r}")
        self.origin, host_header, target = parse_url(url)
        self.method = method
        self.url = url
        self.head = method == "HEAD"
        given = dict(headers or {})
        names = {name.lower() for name in given}
        lines = [f"{method} {target} HTTP/1.1\r\n".encode("ascii"), header_line("Host", host_header)]
        for name, value in (default_headers or {}).items():
            if name.lower() not in names:
                lines.append(header_line(name, value))
        for name, value in given.items():
            lines.append(header_line(name, value))
        if body:
            if "content-type" not in names:
                lines.append(b"Content-Type: application/octet-stream\r\n")
            lines.append(b"Content-Length: %d\r\n" % len(body))
        elif method not in BODYLESS_METHODS:
            lines.append(b"Content-Length: 0\r\n")
        self._fixed = b"".join(lines)
        self._tail = b"\r\n" + (body or b"")

    def render(self, headers: Iterable[tuple[str, str]] = (), lines: bytes = b"") -> bytes:
        """The request's bytes with ``headers`` (per-call) added, and ``lines``:
        header lines the caller encoded itself from values that cannot break
        the framing (``name: value\r\n`` each; not checked here)."""
        return b"".join((self._fixed, lines, *(header_line(n, v) for n, v in headers),
                         self._tail))
