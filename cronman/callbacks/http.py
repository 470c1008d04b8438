"""The ``http`` target: one HTTP request per attempt, over a pooled aiohttp session.

Behaviour (SPEC §3): a 2xx answer is success; any other status, a redirect
(never followed: a 3xx is a failed attempt naming its ``Location``), a
timeout or a connection error is a failed attempt. Every request carries
``Cronman-Job-Id``, ``Cronman-Run-Id``, ``Cronman-Scheduled-For``,
``Cronman-Attempt`` and, with a signing secret, ``Cronman-Signature``
(see :mod:`cronman.callbacks.signing`). ``result`` holds ``http_status`` and,
when the answer had a body, ``response_snippet`` (its first KiB, decoded as
UTF-8 with replacement; no more than that is read).

The private-address guard (:mod:`cronman.callbacks.ssrf`) runs at connect
time through the session's resolver and, for IP-literal URLs, before the
request. Cookies are never stored (one target's cookies must not reach
another), proxies from the environment are ignored (a proxy would bypass the
guard).

The per-call path is kept lean, since the client's CPU per call bounds how
many fires a node dispatches: the parts of a request that depend only on the
job's target object (parsed URL, method, static headers, encoded body,
timeout, the IP-literal check) are prepared once per target object and
reused; target objects are treated as immutable (a job change yields a new
one). Only the per-run headers, and the signature, are built per call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Any

import aiohttp
from aiohttp.resolver import DefaultResolver
from yarl import URL

from cronman.callbacks.base import Delivery, Outcome
from cronman.callbacks.signing import Signer
from cronman.callbacks.ssrf import GuardedResolver, PrivateAddressError, literal_refusal
from cronman.config import Settings
from cronman.timeutil import format_rfc3339

log = logging.getLogger(__name__)

SNIPPET_BYTES = 1024
DEFAULT_POOL_LIMIT = 512
DEFAULT_KEEPALIVE = 30.0
DNS_CACHE_TTL = 10
PREPARED_CACHE_SIZE = 8192
SCHEDULED_TEXT_CACHE_SIZE = 4096
USER_AGENT = "cronman/0.1"


class _Prepared:
    """The parts of a request that depend only on the target object."""

    __slots__ = (
        "target",
        "url",
        "method",
        "headers",
        "body",
        "timeout",
        "timeout_label",
        "refusal",
    )

    def __init__(self, target: dict[str, Any], allow_private: bool) -> None:
        self.target = target  # kept so the cache key (its id) cannot be reused
        self.url = URL(target["url"])
        self.method: str = target.get("method") or "POST"
        self.headers: dict[str, str] = dict(target.get("headers") or {})
        body = target.get("body") or ""
        self.body: bytes | None = body.encode("utf-8") if body else None
        seconds = target.get("timeout") or 10
        self.timeout = aiohttp.ClientTimeout(total=seconds)
        self.timeout_label = f"{seconds:g}s"
        host = self.url.raw_host or ""
        self.refusal = None if allow_private else literal_refusal(host)


class HttpTarget:
    """Fires ``http`` targets. One instance per process, used from one event loop."""

    kind = "http"

    def __init__(
        self,
        settings: Settings,
        *,
        pool_limit: int = DEFAULT_POOL_LIMIT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE,
    ) -> None:
        self._signer = Signer(settings.signing_secret) if settings.signing_secret else None
        self._allow_private = settings.allow_private_targets
        self._pool_limit = pool_limit
        self._keepalive_timeout = keepalive_timeout
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._prepared: dict[int, _Prepared] = {}
        self._scheduled_text: dict[datetime, str] = {}

    def _open_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        resolver: Any = DefaultResolver()
        if not self._allow_private:
            resolver = GuardedResolver(resolver)
        connector = aiohttp.TCPConnector(
            limit=self._pool_limit,
            limit_per_host=0,
            keepalive_timeout=self._keepalive_timeout,
            ttl_dns_cache=DNS_CACHE_TTL,
            resolver=resolver,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            headers={"User-Agent": USER_AGENT},
            trust_env=False,
            raise_for_status=False,
        )
        self._loop = loop
        return self._session

    def _prepare(self, target: dict[str, Any]) -> _Prepared:
        key = id(target)
        prepared = self._prepared.get(key)
        if prepared is not None and prepared.target is target:
            return prepared
        prepared = _Prepared(target, self._allow_private)
        if len(self._prepared) >= PREPARED_CACHE_SIZE:
            del self._prepared[next(iter(self._prepared))]
        self._prepared[key] = prepared
        return prepared

    def _format_scheduled_for(self, when: datetime) -> str:
        # Many runs share a fire time (herds at the top of the minute): format each once.
        text = self._scheduled_text.get(when)
        if text is None:
            if len(self._scheduled_text) >= SCHEDULED_TEXT_CACHE_SIZE:
                self._scheduled_text.clear()
            text = self._scheduled_text[when] = format_rfc3339(when) or ""
        return text

    async def deliver(self, delivery: Delivery) -> Outcome:
        """Send one request; never raises for a delivery failure."""
        try:
            prepared = self._prepare(delivery.target)
        except Exception as exc:  # a target that escaped validation
            return Outcome(False, error=f"invalid http target: {exc}", retryable=False)
        if prepared.refusal is not None:
            return Outcome(False, error=prepared.refusal, retryable=False)

        headers = prepared.headers.copy()
        headers["Cronman-Job-Id"] = delivery.job_id
        headers["Cronman-Run-Id"] = delivery.run_id
        headers["Cronman-Scheduled-For"] = self._format_scheduled_for(delivery.scheduled_for)
        headers["Cronman-Attempt"] = str(delivery.attempt)
        if self._signer is not None:
            headers["Cronman-Signature"] = self._signer(prepared.body or b"", int(time.time()))

        session = self._session
        if session is None or self._loop is not asyncio.get_running_loop():
            session = self._open_session()
        try:
            async with session.request(
                prepared.method,
                prepared.url,
                headers=headers,
                data=prepared.body,
                timeout=prepared.timeout,
                allow_redirects=False,
            ) as resp:
                status = resp.status
                snippet = "" if resp.content.at_eof() else await _read_snippet(resp)
                location = resp.headers.get("Location") if 300 <= status < 400 else None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return _failure(exc, prepared)

        result: dict[str, Any] = {"http_status": status}
        if snippet:
            result["response_snippet"] = snippet
        if 200 <= status < 300:
            return Outcome(True, result)
        if location is not None:
            result["location"] = location
            return Outcome(
                False,
                result,
                f"HTTP {status} redirect to {location} (redirects are not followed)",
            )
        return Outcome(False, result, f"HTTP {status}")

    async def close(self) -> None:
        session, self._session = self._session, None
        self._prepared.clear()
        if session is not None and not session.closed:
            try:
                await session.close()
            except RuntimeError:  # its loop is gone
                pass


async def _read_snippet(resp: aiohttp.ClientResponse) -> str:
    """Up to SNIPPET_BYTES of the body; never reads more than that."""
    content = resp.content
    chunks: list[bytes] = []
    size = 0
    try:
        while size < SNIPPET_BYTES:
            chunk = await content.read(SNIPPET_BYTES - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
        pass  # the status is what counts; keep what arrived
    if not chunks:
        return ""
    return b"".join(chunks).decode("utf-8", errors="replace")


def _failure(exc: BaseException, prepared: _Prepared) -> Outcome:
    """A failed Outcome with a clear message for a client exception."""
    url = prepared.url
    where = f"{url.host}:{url.port}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, PrivateAddressError):
            return Outcome(False, error=str(os_error), retryable=False)
        if isinstance(exc, aiohttp.ClientConnectorDNSError):
            return Outcome(False, error=f"DNS lookup failed for {url.host}: {_reason(os_error)}")
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return Outcome(
                False, error=f"TLS certificate error for {where}: {exc.certificate_error}"
            )
        if isinstance(exc, aiohttp.ClientConnectorSSLError):
            return Outcome(False, error=f"TLS error connecting to {where}: {_reason(os_error)}")
        if isinstance(os_error, ConnectionRefusedError):
            return Outcome(False, error=f"connection refused: {where}")
        if isinstance(os_error, TimeoutError):
            return Outcome(
                False, error=f"timeout after {prepared.timeout_label} (connecting to {where})"
            )
        return Outcome(False, error=f"cannot connect to {where}: {_reason(os_error)}")
    if isinstance(exc, TimeoutError):
        return Outcome(False, error=f"timeout after {prepared.timeout_label}")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return Outcome(False, error=f"server {where} disconnected before answering")
    if isinstance(exc, aiohttp.InvalidURL):
        return Outcome(False, error=f"invalid URL: {exc}", retryable=False)
    if isinstance(exc, aiohttp.ClientResponseError):
        return Outcome(False, error=f"invalid HTTP response from {where}: {exc.message}")
    if isinstance(exc, aiohttp.ClientError):
        return Outcome(False, error=f"{type(exc).__name__}: {str(exc) or 'request failed'}")
    log.warning("http target: unexpected error for %s", url, exc_info=exc)
    return Outcome(False, error=f"unexpected error: {type(exc).__name__}: {exc}")


def _reason(err: BaseException) -> str:
    return getattr(err, "strerror", None) or str(err) or type(err).__name__
