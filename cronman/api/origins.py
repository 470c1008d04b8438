"""Cross-site requests: refused before anything else looks at them.

A page on another site can make a browser send a "simple" request (a POST
of ``text/plain`` or a form, no CORS preflight) to the API, with whatever
credentials the browser holds -- or none, which is enough while the API is
open (``CRONMAN_AUTH=off``, or loopback before the first token). Two checks
keep such requests out:

- **Origin.** A request with any method but GET, HEAD and OPTIONS whose
  ``Origin`` header (without one, its ``Referer``) is not the API's own
  origin nor one of ``CRONMAN_ALLOWED_ORIGINS`` is a 403. ``Origin: null``
  (sandboxed frames, ``data:`` pages) is refused too. A request with neither
  header is no browser's (the CLI, the client, curl) and passes. The API's
  own origin is the request's scheme and its ``Host`` header: behind a
  reverse proxy, the proxy must pass ``Host`` on (and ``X-Forwarded-Proto``,
  which gunicorn honours from the addresses in its ``forwarded_allow_ips``,
  loopback by default); ``X-Forwarded-Host`` is not trusted. An operator
  whose proxy rewrites ``Host`` lists the public origin in
  ``CRONMAN_ALLOWED_ORIGINS``.
- **Host (DNS rebinding).** While the API needs no token (``CRONMAN_AUTH=off``,
  or open before the first token), whatever it listens on, a request whose
  ``Host`` is none of the names it answers to is a 403, whatever its method:
  a name of the attacker's that resolves to the API's address would make the
  API same-origin with the attacker's page. It answers to loopback names
  (``localhost``, ``*.localhost``), any IP address (a page whose origin is an
  address was served from that address: no name is there to rebind), the host
  of its bind (``CRONMAN_API_BIND``) and of each allowed origin, and the names
  in ``CRONMAN_ALLOWED_HOSTS`` -- exactly those, not their subdomains. Once
  tokens are required any Host is served (a rebound page holds no token).

JSON bodies must also say so (``read_json``: 415 otherwise), which a
"simple" cross-site request cannot.

A console served from an allowed origin gets CORS answers: its preflights
(``OPTIONS`` with ``Access-Control-Request-Method``) a 204 before any token
is asked for, and every answer to it ``Access-Control-Allow-Origin`` (no
cookies are involved: the token goes in ``Authorization``). Other origins
get no CORS header at all, so a browser lets them read nothing.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from flask import Response, request

from cronman.api.auth import TokenAuth
from cronman.config import AUTH_OFF, AUTH_REQUIRED, Settings, is_loopback_address, origin_of
from cronman.errors import Forbidden

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SETTING = "CRONMAN_ALLOWED_ORIGINS"
HOSTS_SETTING = "CRONMAN_ALLOWED_HOSTS"
CORS_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE"
CORS_HEADERS = "Authorization, Content-Type, X-Request-Id"
CORS_EXPOSED = "Location, X-Request-Id, WWW-Authenticate"
CORS_MAX_AGE = "600"


def own_origin() -> str | None:
    """This request's idea of the API's origin: its scheme and Host header."""
    return origin_of(f"{request.scheme}://{request.host}") if request.host else None


def host_name(host: str) -> str:
    """The name of a Host header (lower case, port and brackets aside; "" if none)."""
    try:
        name = urlsplit(f"http://{host}").hostname
    except ValueError:
        return ""
    return (name or "").rstrip(".")


def is_loopback_name(name: str) -> bool:
    """Whether only loopback answers to ``name`` (RFC 6761 keeps *.localhost there)."""
    return name == "localhost" or name.endswith(".localhost") or is_loopback_address(name)


def is_address(name: str) -> bool:
    """Whether ``name`` (a Host header's, see ``host_name``) is an IP address literal."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def bind_host(bind: str) -> str:
    """The host name of a ``host:port`` bind, lower case ("" for a Unix socket)."""
    return "" if bind.startswith("unix:") else host_name(bind)


class OriginGuard:
    """Refuses cross-site writes and, while the API needs no token, foreign
    Host names (see the module docstring)."""

    def __init__(self, settings: Settings, auth: TokenAuth) -> None:
        self._allowed = settings.allowed_origin_set
        names = {host_name(o.partition("://")[2]) for o in self._allowed}
        names |= settings.allowed_host_set
        names.add(bind_host(settings.api_bind))
        self._allowed_names = frozenset(names - {""})
        self._auth = auth

    def check(self) -> None:
        """Raises ``Forbidden`` for a request the rules refuse."""
        self._check_host()
        if request.method.upper() in SAFE_METHODS:
            return
        sent = request.headers.get("Origin")
        what = "Origin"
        if sent is None:
            sent = request.headers.get("Referer")
            what = "Referer"
            if sent is None:
                return
        origin = origin_of(sent)
        mine = own_origin()
        if origin is not None and (origin == mine or origin in self._allowed):
            return
        raise Forbidden(f"cross-site request refused: its {what} {sent.strip()[:200]!r} is "
                        f"not this API's origin ({mine}); an operator may allow other "
                        f"origins with {SETTING}")

    def allowed_origin(self) -> str | None:
        """This request's Origin when it is one of CRONMAN_ALLOWED_ORIGINS."""
        sent = request.headers.get("Origin")
        origin = origin_of(sent) if sent else None
        return origin if origin in self._allowed else None

    def preflight(self) -> Response | None:
        """The answer to a CORS preflight from an allowed origin (None otherwise)."""
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return None
        origin = self.allowed_origin()
        if origin is None:
            return None
        resp = Response(status=204)
        resp.headers.update({"Access-Control-Allow-Origin": origin,
                             "Access-Control-Allow-Methods": CORS_METHODS,
                             "Access-Control-Allow-Headers": CORS_HEADERS,
                             "Access-Control-Max-Age": CORS_MAX_AGE, "Vary": "Origin"})
        return resp

    def add_cors(self, resp: Response) -> Response:
        """An answer to an allowed origin, readable by its pages."""
        origin = self.allowed_origin()
        if origin is not None and "Access-Control-Allow-Origin" not in resp.headers:
            resp.headers["Access-Control-Allow-Origin"] = origin
            resp.headers["Access-Control-Expose-Headers"] = CORS_EXPOSED
            resp.vary.add("Origin")
        return resp

    def _check_host(self) -> None:
        host = request.host
        name = host_name(host)
        if name and (is_loopback_name(name) or is_address(name)
                     or name in self._allowed_names):
            return
        mode = self._auth.state().mode
        if mode == AUTH_REQUIRED:
            return
        why = ("CRONMAN_AUTH=off" if mode == AUTH_OFF
               else "no API token has been created yet")
        fix = "require tokens (CRONMAN_AUTH=required)" if mode == AUTH_OFF else "create a token"
        named = f"list {name!r} in {HOSTS_SETTING}" if name else f"use a name of {HOSTS_SETTING}"
        raise Forbidden(f"Host {host[:200]!r} is not a name this API answers to while it needs "
                        f"no token ({why}): a request naming it could come from another "
                        f"site's page (DNS rebinding). Reach the API by a loopback name or "
                        f"an IP address, {named}, or {fix}")
