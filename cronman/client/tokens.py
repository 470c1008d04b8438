"""The API token calls of ``CronmanClient`` (``/v1/tokens``; admin tokens only).

    with CronmanClient(url, token=admin_secret) as api:
        made = api.create_token(namespaces=["billing"], name="billing-ci")
        print(made["token"])                     # the secret: shown this once
        for token in api.iter_tokens():
            ...
        api.revoke_token(made["id"])             # refused everywhere once this returns

The first admin token cannot be made through the API (no call is allowed
without one): ``cronman tokens create --admin`` makes it with database access.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypedDict, cast

from cronman.client.transport import quote_segment
from cronman.client.types import Page, follow_pages

PAGE_MAX = 1000


class ApiToken(TypedDict):
    """An API token as ``GET /v1/tokens`` shows it (never its secret)."""

    id: str
    name: str
    namespaces: list[str] | None  # None: every namespace (an admin token)
    admin: bool
    read_only: bool
    created_at: str
    revoked_at: str | None


class CreatedToken(ApiToken):
    """The answer of ``POST /v1/tokens``: the token and its secret (``token``)."""

    token: str


class TokenCalls:
    """Mixed into ``CronmanClient``; uses its ``request`` and ``_page``."""

    request: Callable[..., Any]
    _page: Callable[..., Page[Any]]

    def create_token(self, *, namespaces: Iterable[str] | None = None, admin: bool = False,
                     read_only: bool = False, name: str | None = None) -> CreatedToken:
        """``POST /v1/tokens``: a token for ``namespaces``, or for all with ``admin``
        (one or the other); ``read_only`` tokens may only read. The answer's
        ``token`` is the secret, never shown again."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if namespaces is not None:
            body["namespaces"] = list(namespaces)
        if admin:
            body["admin"] = True
        if read_only:
            body["read_only"] = True
        return cast(CreatedToken, self.request("POST", "/v1/tokens", body))

    def list_tokens(self, *, limit: int = 100, cursor: str | None = None) -> Page[ApiToken]:
        """One page of tokens, revoked ones too, oldest first."""
        return self._page("/v1/tokens", [("limit", str(limit))], cursor)

    def iter_tokens(self, *, page_size: int = PAGE_MAX) -> Iterator[ApiToken]:
        """Every token, oldest first."""
        return follow_pages(lambda cursor: self.list_tokens(limit=page_size, cursor=cursor))

    def revoke_token(self, token_id: str) -> None:
        """``DELETE /v1/tokens/{id}``: once this returns, every API process refuses the
        token (the API waits out its caches, about 1.5 s). Revoking a revoked token
        is no error."""
        self.request("DELETE", "/v1/tokens/" + quote_segment(token_id))
