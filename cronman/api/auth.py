"""Bearer-token authentication and namespace authorisation of ``/v1`` calls.

While no token exists, the API is open. Once any token exists, every ``/v1``
call needs ``Authorization: Bearer <token>``: 401 without one or with an
unknown or revoked one; 403 for a namespace outside the token's namespaces
(admin tokens, made with ``--admin``, hold all namespaces).

Both lookups go to the TokenStore, which caches its answers briefly (see
``cronman.store.tokens``): a request does not pay a database round trip for
them, and a token made or revoked elsewhere takes effect within seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cronman.errors import Forbidden, Unauthorized


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a token (or nobody, while the API is open)."""

    token_id: str | None
    name: str | None
    namespaces: frozenset[str] | None  # None: every namespace

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


class TokenAuth:
    """Resolves the Authorization header of a request to a ``Principal``."""

    def __init__(self, tokens: Callable[[], Any]) -> None:
        self._tokens = tokens  # a callable: the store is opened lazily

    def authenticate(self, authorization: str | None) -> Principal:
        tokens = self._tokens()
        if not tokens.any_tokens():
            return OPEN
        if not authorization:
            raise Unauthorized("this API needs 'Authorization: Bearer <token>'")
        scheme, _, secret = authorization.strip().partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            raise Unauthorized("the Authorization header must be 'Bearer <token>'")
        record = tokens.find_token(secret)
        if record is None or record.get("revoked_at"):
            raise Unauthorized("unknown or revoked token")
        return principal_of(record)


def principal_of(record: dict[str, Any]) -> Principal:
    namespaces: Iterable[str] | None = record.get("namespaces")
    return Principal(
        token_id=record.get("id"),
        name=record.get("name"),
        namespaces=None if namespaces is None else frozenset(namespaces),
    )
