"""The signing key calls of ``CronmanClient`` (``/v1/namespaces/{ns}/signing-key``).

    with CronmanClient(url, token=billing_token) as api:
        keys = api.signing_keys("billing")       # what the receivers should hold
        api.rotate_signing_key("billing", overlap=3600)

A token that may write to the namespace (admin, or the namespace's own and
not read-only) reads and rotates its keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, cast

from cronman.client.transport import quote_segment


class SigningKey(TypedDict):
    generation: int
    key: str
    signs_until: str | None  # None: the current key; else the previous one, retiring then


class SigningKeys(TypedDict):
    """The keys that sign a namespace's callbacks now (current first)."""

    namespace: str
    generation: int
    rotated_at: str | None
    keys: list[SigningKey]


def _path(namespace: str) -> str:
    return f"/v1/namespaces/{quote_segment(namespace)}/signing-key"


class SigningCalls:
    """Mixed into ``CronmanClient``; uses its ``request``."""

    request: Callable[..., Any]

    def signing_keys(self, namespace: str) -> SigningKeys:
        """``GET``: the namespace's signing keys (two during a rotation's overlap)."""
        return cast(SigningKeys, self.request("GET", _path(namespace)))

    def rotate_signing_key(self, namespace: str, *, overlap: int | None = None) -> SigningKeys:
        """``POST .../rotate``: a new key signs from now; the previous one alongside
        for ``overlap`` seconds (the server's default: a day; 0: retired at once)."""
        body: dict[str, Any] = {} if overlap is None else {"overlap": overlap}
        return cast(SigningKeys, self.request("POST", _path(namespace) + "/rotate", body))
