"""Callback signatures: how cronman signs a request and how a receiver verifies it.

One implementation for both sides, in the light part of cronman (standard
library only): the server's http target signs with :class:`Signer`, and
receivers verify with :func:`verify_signature` (``pip install cronman`` is
enough; :mod:`cronman.receiver` builds on it).

When ``CRONMAN_SIGNING_SECRET`` is set, every HTTP callback carries::

    Cronman-Signature: t=<unix seconds>,v2=<hex HMAC-SHA256 of the signed string>

keyed by the job's **namespace's own signing key** (never the cluster
secret itself), over this signed string (fields joined by ``\\n``, no
trailing newline, all ASCII/UTF-8)::

    v2
    <t>                        the same digits as in the header
    <Cronman-Job-Id>
    <Cronman-Run-Id>
    <Cronman-Scheduled-For>    exactly as in the header, e.g. 2026-11-22T07:00:00Z
    <url>                      the job's target URL in its canonical form (below)
    <hex SHA-256 of the body>  of the exact body bytes (empty body: e3b0c442...b855)

The canonical form of a URL is the one the request is sent with
(:func:`canonical_url`): ``<scheme>://<Host header><request target>``, that
is scheme and host in lower case (a non-ASCII host name in IDNA, ``xn--``;
an IPv6 address in brackets), the port only when it is not the scheme's
default (80, 443), the path (``/`` when empty) and the query (none when
empty) with every character outside ``A-Za-z0-9-._~!$&'()*+,;=:@/%`` (and
``?`` in the query) percent-encoded as UTF-8 -- existing ``%XX`` escapes are
kept as written -- and no fragment nor credentials. So
``HTTP://Billing.example.com:443/caf\u00e9#top`` and
``https://billing.example.com/caf%C3%A9`` sign the same string:
``https://billing.example.com/caf%C3%A9``.

A signature is therefore valid for one namespace, one job, one run, one
fire time, one URL and one body: a tenant who sends itself a callback
learns nothing that another tenant's receiver (another key, another URL)
or another of its jobs (another job id) would accept. ``v1`` (the body
alone, under the cluster secret) is no longer sent nor accepted.

Keys: a namespace's key is a 64-character hex string; the HMAC key is its
ASCII bytes. An operator or the namespace's own token reads it with
``GET /v1/namespaces/{ns}/signing-key`` and rotates it with ``POST
/v1/namespaces/{ns}/signing-key/rotate``. Each node signs with the
previous key alone until its next poll of the key generations (a few
seconds), then, until the overlap window given there ends, carries two
``v2`` values (new key and previous key), then the new key's alone: a
receiver holds both keys (it may hold several) from the rotation to the
window's end. A rotation inside the window drops the older previous key at
once: at most two keys sign.

How a receiver verifies a callback:

1. Read the raw request body as bytes, before any JSON parsing.
2. Split the header on ``,`` into ``key=value`` pairs: one ``t`` and one or
   more ``v2``.
3. Refuse the request if ``t`` is more than 5 minutes away from your clock.
4. Build the signed string from ``t``, the request's own ``Cronman-Job-Id``,
   ``Cronman-Run-Id`` and ``Cronman-Scheduled-For`` headers, the canonical
   form of the URL your jobs call -- your own configured, public URL, never
   one rebuilt from the request's ``Host`` header (a sender chooses that
   header: a callback captured at another receiver of the namespace would
   replay with its ``Host``) -- and the body's SHA-256; compute its
   HMAC-SHA256 under your key and compare it, in constant time, with each
   ``v2`` value.
5. Deduplicate on ``Cronman-Run-Id``: a retried attempt carries the same run id.

In Python, with cronman installed (the light package is enough)::

    from cronman.receiver import verify_callback

    callback = verify_callback(key, request.headers, request.get_data(),
                               url="https://billing.example.com/hook")

Without it (the same steps by hand)::

    import hashlib, hmac, time
    from urllib.parse import quote, urlsplit

    def canonical(url: str) -> str:
        p = urlsplit(url)
        scheme, host = p.scheme.lower(), p.hostname or ""
        if not host.isascii():
            host = host.encode("idna").decode("ascii")
        if ":" in host:
            host = f"[{host}]"
        if p.port is not None and p.port != {"http": 80, "https": 443}[scheme]:
            host += f":{p.port}"
        safe = "/%:@!$&'()*+,;=-._~"
        target = quote(p.path or "/", safe=safe)
        if p.query:
            target += "?" + quote(p.query, safe=safe + "?")
        return f"{scheme}://{host}{target}"

    def verify(key: str, url: str, headers, body: bytes, tolerance: int = 300) -> bool:
        pairs = [p.split("=", 1) for p in headers["Cronman-Signature"].split(",") if "=" in p]
        ts = [v.strip() for k, v in pairs if k.strip() == "t"]
        sigs = [v.strip() for k, v in pairs if k.strip() == "v2"]
        if len(ts) != 1 or not ts[0].isdigit() or not sigs:
            return False
        if abs(time.time() - int(ts[0])) > tolerance:
            return False
        signed = "\\n".join(["v2", ts[0], headers["Cronman-Job-Id"], headers["Cronman-Run-Id"],
                            headers["Cronman-Scheduled-For"], canonical(url),
                            hashlib.sha256(body).hexdigest()])
        expected = hmac.new(key.encode(), signed.encode(), hashlib.sha256).hexdigest()
        return any(hmac.compare_digest(expected, s) for s in sigs)

Failure notifications (webhook channels) are signed the same way, under the
job's namespace's key, with ``Cronman-Notification-Id`` in the run id's
place and an empty scheduled time (so a notification's signature is never a
valid callback's).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

SIGNATURE_HEADER = "Cronman-Signature"
SIGNATURE_VERSION = "v2"
DEFAULT_TOLERANCE = 300
_KEY_CONTEXT = b"cronman-namespace-signing-key"

Secret = str | bytes

DEFAULT_PORTS = {"http": 80, "https": 443}
# Characters a path or query is sent with as they are: RFC 3986 unreserved,
# sub-delims, ':' '@' '/' ('?' in a query), and '%' so that existing escapes
# survive; every other character is sent percent-encoded (UTF-8).
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


@dataclass(frozen=True, slots=True)
class WireURL:
    """An http(s) URL as a request puts it on the wire (cronman's HTTP client sends this)."""

    scheme: str  # "http" or "https"
    host: str  # lower case; IDNA (xn--) for a non-ASCII name; an IPv6 address bare
    port: int
    host_header: str  # the Host header: host ([v6] in brackets), ":port" unless the default
    target: str  # the request target: path ("/" when empty), then "?query" when not empty

    @property
    def canonical(self) -> str:
        """``scheme://host_header`` + ``target``: the URL a ``v2`` signature covers."""
        return f"{self.scheme}://{self.host_header}{self.target}"


def wire_url(url: str) -> WireURL:
    """How a request to the absolute http(s) ``url`` is sent; ``ValueError`` if it cannot be.

    Credentials and the fragment are not sent, so they are not part of it.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname  # lower-cased by urlsplit
    except ValueError as exc:
        raise ValueError(f"invalid URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} in {url!r}")
    if not host:
        raise ValueError(f"no host in URL {url!r}")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise ValueError(f"invalid host name in {url!r}: {exc}") from None
    if port is None:
        port = DEFAULT_PORTS[scheme]
    host_header = f"[{host}]" if ":" in host else host
    if port != DEFAULT_PORTS[scheme]:
        host_header = f"{host_header}:{port}"
    target = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_QUERY_SAFE)
    return WireURL(scheme, host, port, host_header, target)


def canonical_url(url: str) -> str:
    """The form of ``url`` that signatures cover (the module docstring's rules).

    Any two spellings of one request's URL (``HTTP://Host:80/caf\u00e9#x``
    and ``http://host/caf%C3%A9``) have the same canonical form; it is
    idempotent. ``ValueError`` for a URL no request can be sent to.
    """
    return wire_url(url).canonical


def _key(secret: Secret) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else secret


def _keys(secrets: Secret | Sequence[Secret]) -> list[bytes]:
    if isinstance(secrets, (str, bytes)):
        return [_key(secrets)]
    return [_key(s) for s in secrets]


def namespace_key(cluster_secret: Secret, namespace: str, generation: int = 0) -> str:
    """The signing key of ``namespace`` at ``generation`` (0 until its first rotation).

    Derived, not stored: hex HMAC-SHA256 of ``"cronman-namespace-signing-key
    \\n<generation>\\n<namespace>"`` under the cluster secret. One namespace's
    key tells nothing about another's, nor about the cluster secret.
    """
    msg = b"%s\n%d\n%s" % (_KEY_CONTEXT, generation, namespace.encode("utf-8"))
    return hmac.new(_key(cluster_secret), msg, hashlib.sha256).hexdigest()


def body_digest(body: bytes) -> bytes:
    """The body's part of the signed string: its hex SHA-256, as ASCII bytes."""
    return hashlib.sha256(body).hexdigest().encode("ascii")


def context_tail(url: str, body: bytes) -> bytes:
    """The end of the signed string that depends only on the target:
    ``\\n<canonical url>\\n<sha256>`` (``ValueError`` for a URL that cannot be sent)."""
    return b"\n" + canonical_url(url).encode("ascii") + b"\n" + body_digest(body)


def signed_string(timestamp: int, job_id: str, run_id: str, scheduled_for: str, url: str,
                  body: bytes) -> bytes:
    """The exact bytes a ``v2`` signature is the HMAC of (see the module docstring)."""
    return _head(timestamp, job_id, run_id, scheduled_for) + context_tail(url, body)


def _head(timestamp: int, job_id: str, run_id: str, scheduled_for: str) -> bytes:
    return b"v2\n%d\n%s\n%s\n%s" % (timestamp, job_id.encode("utf-8"),
                                     run_id.encode("utf-8"), scheduled_for.encode("utf-8"))


def sign(key: Secret | Sequence[Secret], timestamp: int, *, job_id: str, run_id: str,
         scheduled_for: str, url: str, body: bytes) -> str:
    """The ``Cronman-Signature`` header value of one request sent at ``timestamp``.

    ``key`` may be a sequence (new key first) during a rotation: the header
    then carries one ``v2=`` per key.
    """
    return Signer(key).sign(timestamp, job_id, run_id, scheduled_for,
                            context_tail(url, body))


class Signer:
    """``sign`` with the keys prepared once (the HTTP target signs every request).

    The caller prepares ``context_tail(url, body)`` once per target: per
    request only the short head (time, ids, fire time) is hashed with it.
    """

    __slots__ = ("_macs",)

    def __init__(self, key: Secret | Sequence[Secret]) -> None:
        self._macs = [hmac.new(k, digestmod=hashlib.sha256) for k in _keys(key)]

    def sign(self, timestamp: int, job_id: str, run_id: str, scheduled_for: str,
             tail: bytes) -> str:
        msg = _head(timestamp, job_id, run_id, scheduled_for) + tail
        parts = [f"t={timestamp}"]
        for base in self._macs:
            mac = base.copy()
            mac.update(msg)
            parts.append("v2=" + mac.hexdigest())
        return ",".join(parts)


def verify_signature(
    key: Secret | Sequence[Secret],
    header_value: str | None,
    body: bytes,
    *,
    job_id: str,
    run_id: str,
    scheduled_for: str,
    url: str,
    tolerance: float | None = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether ``header_value`` is a valid, fresh ``v2`` signature of this request.

    ``job_id``, ``run_id`` and ``scheduled_for`` are the request's own
    ``Cronman-*`` headers; ``url`` is the URL the receiver expects cronman to
    call (the job's target URL, in any spelling: its canonical form is
    compared; ``ValueError`` if it is not an http(s) URL). ``key`` may be one key or several (any of
    them may have signed); the header may carry several ``v2=`` values, one
    match is enough. A timestamp more than ``tolerance`` seconds from ``now``
    (default: the clock) is refused; ``tolerance=None`` turns that check
    off. Malformed headers give False, never an exception.
    """
    if not header_value or not isinstance(header_value, str):
        return False
    timestamps: list[str] = []
    candidates: list[str] = []
    for part in header_value.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            continue
        name = name.strip()
        value = value.strip()
        if name == "t":
            timestamps.append(value)
        elif name == SIGNATURE_VERSION and value and value.isascii():
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
    msg = signed_string(timestamp, job_id, run_id, scheduled_for, url, body)
    matched = False
    for secret_key in _keys(key):
        expected = hmac.new(secret_key, msg, hashlib.sha256).hexdigest()
        for candidate in candidates:
            # Compare every pair (no early exit), so timing says nothing about which matched.
            if hmac.compare_digest(expected, candidate):
                matched = True
    return matched
