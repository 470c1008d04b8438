"""Bearer-token authentication and namespace authorisation of ``/v1`` calls.

Authentication is an explicit state (``AuthState``), shown on ``/readyz`` and
on the dashboard:

- ``required``: every ``/v1`` call needs ``Authorization: Bearer <token>``.
  So it is when ``CRONMAN_AUTH=required``; when the API listens on an
  address other than loopback (``CRONMAN_API_BIND``, or a request that came
  in on such an address); and, whatever else, once any token has ever been
  created -- revoking every token does not open the API again.
- ``off``: only when ``CRONMAN_AUTH=off`` says so (a warning is logged at
  start).
- ``open``: CRONMAN_AUTH unset, loopback only, and no token created yet.

A Bearer token that is sent is always checked, whatever the state: an
unknown or revoked one is 401. A valid one limits the call to its
namespaces: 403 for any other (admin tokens, made with ``--admin``, hold
them all).

Both lookups go to the TokenStore, which caches its answers briefly (see
``cronman.store.tokens``): a request does not pay a database round trip for
them, and a token made or revoked elsewhere takes effect within seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app

from cronman.config import AUTH_OFF, AUTH_REQUIRED, Settings, is_loopback_address
from cronman.errors import Forbidden, Unauthorized

log = logging.getLogger(__name__)

AUTH_OPEN = "open"
EXTENSION_KEY = "cronman_auth"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a token (or nobody, while the API does not require one)."""

    token_id: str | None
    name: str | None
    namespaces: frozenset[str] | None  # None: every namespace
    read_only: bool = False  # a read-only token: GET and HEAD only

    @property
    def is_admin(self) -> bool:
        return self.namespaces is None

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def require(self, namespace: str, *, field: str | None = None) -> None:
        if not self.allows(namespace):
            raise Forbidden(f"this token has no access to namespace {namespace!r}",
                            field=field)

    def restriction(self) -> tuple[str, ...] | None:
        """The namespaces a list answer is limited to (None: no limit)."""
        return None if self.namespaces is None else tuple(sorted(self.namespaces))


OPEN = Principal(token_id=None, name=None, namespaces=None)


@dataclass(frozen=True, slots=True)
class AuthState:
    """Whether ``/v1`` calls need a token (``mode``), and why."""

    mode: str  # AUTH_REQUIRED, AUTH_OFF or AUTH_OPEN
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"mode": self.mode, "reason": self.reason}


class TokenAuth:
    """Decides the auth state and resolves a request's Authorization header."""

    def __init__(self, settings: Settings, tokens: Callable[[], Any]) -> None:
        self._tokens = tokens  # a callable: the store is opened lazily
        self._configured = settings.auth
        self._exposed_on: str | None = None if settings.api_on_loopback else settings.api_bind
        if self._configured == AUTH_OFF:
            log.warning("CRONMAN_AUTH=off: /v1 calls without a token are accepted from anyone "
                        "who can reach %s", settings.api_bind)

    def note_local_address(self, address: str | None) -> None:
        """A request came in on ``address`` (this end of its connection): an
        API reachable beyond loopback requires tokens from then on, whatever
        CRONMAN_API_BIND said (``gunicorn wsgi:app --bind 0.0.0.0:80``)."""
        if self._exposed_on is None and address and not is_loopback_address(address):
            self._exposed_on = address
            log.warning("a request came in on %s, not a loopback address: /v1 calls need "
                        "a token from now on (unless CRONMAN_AUTH=off)", address)

    @property
    def exposed(self) -> bool:
        """Whether the API is (or has been) reachable beyond loopback."""
        return self._exposed_on is not None

    def state(self) -> AuthState:
        """The current state; may read the token table (cached)."""
        if self._configured == AUTH_OFF:
            return AuthState(AUTH_OFF, "CRONMAN_AUTH=off")
        if self._configured == AUTH_REQUIRED:
            return AuthState(AUTH_REQUIRED, "CRONMAN_AUTH=required")
        if self._exposed_on is not None:
            return AuthState(AUTH_REQUIRED,
                             f"the API listens on {self._exposed_on}, not only on loopback")
        if self._tokens().any_token_created():
            return AuthState(AUTH_REQUIRED, "an API token has been created")
        return AuthState(AUTH_OPEN, "no API token has been created yet and the API listens "
                                    "on loopback only; creating a token requires one for good")

    def authenticate(self, authorization: str | None) -> Principal:
        scheme, _, secret = (authorization or "").strip().partition(" ")
        secret = secret.strip()
        if scheme.lower() == "bearer" and secret:
            record = self._tokens().find_token(secret)
            if record is None or record.get("revoked_at"):
                raise Unauthorized("unknown or revoked token")
            return principal_of(record)
        if self.state().mode != AUTH_REQUIRED:
            return OPEN
        if not authorization:
            raise Unauthorized("this API needs 'Authorization: Bearer <token>'")
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")


def token_auth(app: Flask | None = None) -> TokenAuth:
    """The app's ``TokenAuth``."""
    auth: TokenAuth = (app or current_app).extensions[EXTENSION_KEY]
    return auth


def principal_of(record: dict[str, Any]) -> Principal:
    namespaces: Iterable[str] | None = record.get("namespaces")
    return Principal(
        token_id=record.get("id"),
        name=record.get("name"),
        namespaces=None if namespaces is None else frozenset(namespaces),
        read_only=bool(record.get("read_only")),
    )
