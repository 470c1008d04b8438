"""Callback signatures: how cronman signs a request and how a receiver verifies it.

One implementation for both sides, in the light part of cronman (standard
library only): the server's http target signs with :class:`Signer`, and
receivers verify with :func:`verify_signature` (``pip install cronman`` is
enough; :mod:`cronman.receiver` builds on it).

When ``CRONMAN_SIGNING_SECRET`` is set, every HTTP callback carries::

    Cronman-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">

where ``<body>`` is the exact bytes of the request body (empty for a request
without one) and the HMAC key is the secret's UTF-8 bytes.

How a receiver verifies a callback:

1. Read the raw request body as bytes, before any JSON parsing.
2. Split the header on ``,`` into ``key=value`` pairs: one ``t`` and one or
   more ``v1`` (during a key rotation the sender may sign with several
   secrets; a receiver may likewise hold several).
3. Refuse the request if ``t`` is more than 5 minutes away from your clock
   (a replayed request).
4. Compute ``hex(HMAC-SHA256(secret, t + "." + body))`` and compare it, in
   constant time, with each ``v1`` value; accept if any matches.
5. Deduplicate on ``Cronman-Run-Id``: a retried attempt carries the same run id.

In Python, with cronman installed (the light package is enough)::

    from cronman.receiver import verify_signature

    ok = verify_signature(secret, request.headers["Cronman-Signature"], request.get_data())

Without it (the same steps by hand)::

    import hashlib, hmac, time

    def verify(secret: str, header: str, body: bytes, tolerance: int = 300) -> bool:
        pairs = [p.split("=", 1) for p in header.split(",") if "=" in p]
        ts = [v for k, v in pairs if k.strip() == "t"]
        sigs = [v.strip() for k, v in pairs if k.strip() == "v1"]
        if len(ts) != 1 or not ts[0].strip().isdigit() or not sigs:
            return False
        if abs(time.time() - int(ts[0])) > tolerance:
            return False
        mac = hmac.new(secret.encode(), ts[0].strip().encode() + b"." + body, hashlib.sha256)
        expected = mac.hexdigest()
        return any(hmac.compare_digest(expected, s) for s in sigs)
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence

SIGNATURE_HEADER = "Cronman-Signature"
DEFAULT_TOLERANCE = 300

Secret = str | bytes


def _key(secret: Secret) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else secret


def _keys(secrets: Secret | Sequence[Secret]) -> list[bytes]:
    if isinstance(secrets, (str, bytes)):
        return [_key(secrets)]
    return [_key(s) for s in secrets]


def signature_hex(secret: Secret, body: bytes, timestamp: int) -> str:
    """Hex HMAC-SHA256 of ``"<timestamp>.<body>"`` under ``secret``."""
    return hmac.new(_key(secret), b"%d." % timestamp + body, hashlib.sha256).hexdigest()


def sign(secret: Secret | Sequence[Secret], body: bytes, timestamp: int) -> str:
    """The ``Cronman-Signature`` header value for ``body`` sent at ``timestamp``.

    ``secret`` may be a sequence (new secret first) to sign with several keys
    during a rotation: the header then carries one ``v1=`` per key.
    """
    msg = b"%d." % timestamp + body
    sigs = ",".join("v1=" + hmac.new(k, msg, hashlib.sha256).hexdigest() for k in _keys(secret))
    return f"t={timestamp},{sigs}"


class Signer:
    """``sign`` with the keys prepared once (the HTTP target signs every request)."""

    __slots__ = ("_macs",)

    def __init__(self, secret: Secret | Sequence[Secret]) -> None:
        self._macs = [hmac.new(k, digestmod=hashlib.sha256) for k in _keys(secret)]

    def __call__(self, body: bytes, timestamp: int) -> str:
        msg = b"%d." % timestamp + body
        parts = [f"t={timestamp}"]
        for base in self._macs:
            mac = base.copy()
            mac.update(msg)
            parts.append("v1=" + mac.hexdigest())
        return ",".join(parts)


def verify_signature(
    secret: Secret | Sequence[Secret],
    header_value: str | None,
    body: bytes,
    *,
    tolerance: float | None = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether ``header_value`` is a valid, fresh signature of ``body``.

    ``secret`` may be one secret or several (any of them may have signed).
    The header may carry several ``v1=`` values; one match is enough. A
    timestamp more than ``tolerance`` seconds from ``now`` (default: the
    clock) is refused; ``tolerance=None`` turns that check off. Malformed
    headers give False, never an exception.
    """
    if not header_value or not isinstance(header_value, str):
        return False
    timestamps: list[str] = []
    candidates: list[str] = []
    for part in header_value.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            continue
        key = key.strip()
        value = value.strip()
        if key == "t":
            timestamps.append(value)
        elif key == "v1" and value and value.isascii():
            candidates.append(value.lower())
    if len(timestamps) != 1 or not candidates:
        return False
    ts_text = timestamps[0]
    if not ts_text.isascii() or not ts_text.isdigit() or len(ts_text) > 12:
        return False
    timestamp = int(ts_text)
    if tolerance is not None:
        current = time.time() if now is None else now
        if abs(current - timestamp) > tolerance:
            return False
    msg = b"%d." % timestamp + body
    matched = False
    for secret_key in _keys(secret):
        expected = hmac.new(secret_key, msg, hashlib.sha256).hexdigest()
        for candidate in candidates:
            # Compare every pair (no early exit), so timing says nothing about which matched.
            if hmac.compare_digest(expected, candidate):
                matched = True
    return matched
