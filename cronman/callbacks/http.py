"""The ``http`` target: one HTTP request per attempt, over a pooled keep-alive client.

Behaviour (SPEC §3): a 2xx answer is success; any other status, a redirect
(never followed: a 3xx is a failed attempt naming its ``Location``), a
timeout or a connection error is a failed attempt. Every request carries
``Cronman-Job-Id``, ``Cronman-Run-Id``, ``Cronman-Scheduled-For``,
``Cronman-Attempt``, ``traceparent``/``tracestate`` when tracing is on
(``observability.tracing``) and, with a signing secret, ``Cronman-Signature``
(``v2``, under the job's namespace's key, over the time, ids, fire time,
URL -- in its canonical form, the one on the request line and ``Host`` --
and body: see :mod:`cronman.signing`). ``result`` holds ``http_status`` and,
when the answer had a body, ``response_snippet`` (its first KiB, decoded as
UTF-8 with replacement; no more than that is read: the connection is then
closed). An answer's head is bounded (100 headers, 64 KiB: the client's
``MAX_HEADERS`` and ``MAX_HEADER_BYTES``); over either the attempt fails
(``answer headers over 64 KiB from host:port``, retried per the job's
policy). The target's ``timeout`` bounds the whole exchange, the time to
the first byte of the answer included.

Requests go through :mod:`cronman.callbacks.httpclient` (asyncio protocols,
llhttp parsing, a bounded keep-alive pool by scheme, host and port). The
private-address guard (:mod:`cronman.callbacks.ssrf`) runs in that client at
connect time, on the resolved addresses it connects to, and, for IP-literal
URLs, here before the request. Cookies are never stored (one target's
cookies must not reach another), proxies from the environment are ignored (a
proxy would bypass the guard).

The per-call path is kept lean, since the client's CPU per call bounds how
many fires a node dispatches: the parts of a request that depend only on the
job's target object (encoded request line and headers, body, timeout, the
IP-literal check) are prepared once per target object and reused; target
objects are treated as immutable (a job change yields a new one). Only the
per-run headers, and the signature (the body's digest and the URL are
prepared with the target, so a fire hashes ~200 bytes whatever the body's
size), are built per call.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Generator
from datetime import datetime
from typing import Any

from cronman.callbacks.base import Answered, Delivery, Outcome
from cronman.callbacks.httpclient import (
    ClientClosed,
    ConnectError,
    ConnectTimeout,
    HttpClient,
    HttpClientError,
    InvalidResponse,
    InvalidURL,
    PoolTimeout,
    PreparedRequest,
    RequestTimeout,
    Resolver,
    Response,
    ResponseTooLarge,
    ServerDisconnected,
)
from cronman.callbacks.signing import NamespaceSigners, context_tail
from cronman.callbacks.ssrf import PrivateAddressError, literal_refusal
from cronman.config import Settings
from cronman.eventloop import PerLoop
from cronman.timeutil import format_rfc3339

log = logging.getLogger(__name__)

SNIPPET_BYTES = 1024
DEFAULT_POOL_LIMIT = 512
DEFAULT_KEEPALIVE = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
PREPARED_CACHE_SIZE = 8192
SCHEDULED_TEXT_CACHE_SIZE = 4096
USER_AGENT = "cronman/0.1"
DEFAULT_HEADERS = {"User-Agent": USER_AGENT, "Accept": "*/*"}
# Job and run ids are UUIDs; anything else is refused before it reaches a header.
_SAFE_VALUE = re.compile(r"[0-9A-Za-z._:-]{1,128}")
# W3C trace context: a name and a visible-ASCII value (tracestate has ``,``,
# ``=``, spaces); anything else is left out rather than sent.
_TRACE_NAME = re.compile(r"traceparent|tracestate")
_TRACE_VALUE = re.compile(r"[\x20-\x7e]{1,512}")


def trace_lines(trace: tuple[tuple[str, str], ...]) -> bytes:
    """The header lines of an attempt's trace context (``Delivery.trace``)."""
    return "".join(f"{name}: {value}\r\n" for name, value in trace
                   if _TRACE_NAME.fullmatch(name) and _TRACE_VALUE.fullmatch(value)).encode()


class _Prepared:
    """The parts of a request that depend only on the target object."""

    __slots__ = ("target", "request", "body", "sign_tail", "timeout", "timeout_label",
                 "refusal")

    def __init__(self, target: dict[str, Any], allow_private: bool) -> None:
        self.target = target  # kept so the cache key (its id) cannot be reused
        body = target.get("body") or ""
        self.body: bytes = body.encode("utf-8") if body else b""
        url = target["url"]
        self.request = PreparedRequest(
            target.get("method") or "POST",
            url,
            headers=target.get("headers") or {},
            body=self.body or None,
            default_headers=DEFAULT_HEADERS,
        )
        self.sign_tail = context_tail(url, self.body)
        seconds = target.get("timeout") or 10
        self.timeout = float(seconds)
        self.timeout_label = f"{seconds:g}s"
        self.refusal = None if allow_private else literal_refusal(self.request.origin.host)


class HttpTarget:
    """Fires ``http`` targets. One instance per process, used from one event loop.

    ``resolver`` and ``ssl_context`` replace the system resolver and the
    default TLS context (certificates checked against the system's CAs).
    ``signers`` holds the namespaces' keys (the node keeps their rotations
    current); by default every namespace at its first key.
    """

    kind = "http"

    def __init__(
        self,
        settings: Settings,
        *,
        pool_limit: int = DEFAULT_POOL_LIMIT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        signers: NamespaceSigners | None = None,
    ) -> None:
        self.signers = signers or NamespaceSigners(settings.signing_secret)
        self._allow_private = settings.allow_private_targets
        self.pool_limit = pool_limit
        self._keepalive_timeout = keepalive_timeout
        self._connect_timeout = connect_timeout
        self._resolver = resolver
        self._ssl_context = ssl_context
        self._client: PerLoop[HttpClient] = PerLoop()
        self._prepared: dict[int, _Prepared] = {}
        self._scheduled_text: dict[datetime, str] = {}

    def _open_client(self) -> HttpClient:
        return HttpClient(
            guard=not self._allow_private,
            pool_limit=self.pool_limit,
            keepalive_timeout=self._keepalive_timeout,
            connect_timeout=self._connect_timeout,
            body_limit=SNIPPET_BYTES,
            resolver=self._resolver,
            ssl_context=self._ssl_context,
        )

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
        return await self.start(delivery)

    def start(self, delivery: Delivery) -> Awaitable[Outcome]:
        """``deliver``, with the request written before this returns when a
        pooled connection is idle (otherwise the awaitable connects first).
        Nothing else waits on the caller: what is left is awaited."""
        try:
            prepared = self._prepare(delivery.target)
        except Exception as exc:  # a target that escaped validation
            return Answered(Outcome(False, error=f"invalid http target: {exc}", retryable=False))
        if prepared.refusal is not None:
            return Answered(Outcome(False, error=prepared.refusal, retryable=False))

        job_id, run_id = delivery.job_id, delivery.run_id
        if not (_SAFE_VALUE.fullmatch(job_id) and _SAFE_VALUE.fullmatch(run_id)):
            return Answered(Outcome(False, error="invalid job or run id for a header",
                                    retryable=False))
        scheduled = self._format_scheduled_for(delivery.scheduled_for)
        # Encoded here at once: ids checked above, a time and a number.
        lines = (f"Cronman-Job-Id: {job_id}\r\nCronman-Run-Id: {run_id}\r\n"
                 f"Cronman-Scheduled-For: {scheduled}"
                 f"\r\nCronman-Attempt: {int(delivery.attempt)}\r\n").encode()
        if delivery.trace:
            lines += trace_lines(delivery.trace)
        if delivery.headers:  # the caller's own: a completion by callback's (http_completion)
            lines += "".join(f"{k}: {v}\r\n" for k, v in delivery.headers).encode()
        headers: tuple[tuple[str, str], ...] = ()
        now = time.time()
        signer = self.signers.signer(delivery.namespace, now)
        if signer is not None:
            headers = (("Cronman-Signature",
                        signer.sign(int(now), job_id, run_id, scheduled, prepared.sign_tail)),)

        client = self._client.get(self._open_client)
        try:
            waiter = client.start(prepared.request, headers, timeout=prepared.timeout,
                                  lines=lines)
        except Exception as exc:
            return Answered(_failure(exc, prepared, self._connect_timeout))
        if waiter is None:
            return self._exchange(client, prepared, headers, lines)
        return _Answer(waiter, prepared, self._connect_timeout)

    async def _exchange(self, client: HttpClient, prepared: _Prepared,
                        headers: tuple[tuple[str, str], ...], lines: bytes) -> Outcome:
        """The request on a connection the client opens (or waits for)."""
        try:
            response = await client.request(prepared.request, headers, timeout=prepared.timeout,
                                            lines=lines)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return _failure(exc, prepared, self._connect_timeout)
        return _outcome(response)

    def hand_back(self) -> None:
        """Nothing outlives a delivery here."""

    async def close(self) -> None:
        client, _ = self._client.take()
        self._prepared.clear()
        if client is not None and not client.loop.is_closed():
            await client.close()


class _Answer:
    """The answer to a request already written: awaited in the caller's task
    (an object, not a coroutine, so a task cancelled before its first step
    leaves no coroutine never awaited; the client settles the connection)."""

    __slots__ = ("_waiter", "_prepared", "_connect_timeout")

    def __init__(self, waiter: asyncio.Future[Response], prepared: _Prepared,
                 connect_timeout: float) -> None:
        self._waiter = waiter
        self._prepared = prepared
        self._connect_timeout = connect_timeout

    def __await__(self) -> Generator[Any, None, Outcome]:
        try:
            response = yield from self._waiter
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return _failure(exc, self._prepared, self._connect_timeout)
        return _outcome(response)


def _outcome(response: Response) -> Outcome:
    """A 2xx is success; any other answer a failed attempt (3xx naming its ``Location``)."""
    status = response.status
    result: dict[str, Any] = {"http_status": status}
    if response.body:
        result["response_snippet"] = response.body.decode("utf-8", errors="replace")
    if 200 <= status < 300:
        return Outcome(True, result)
    location = response.header("Location") if 300 <= status < 400 else None
    if location is not None:
        result["location"] = location
        return Outcome(
            False,
            result,
            f"HTTP {status} redirect to {location} (redirects are not followed)",
        )
    return Outcome(False, result, f"HTTP {status}")


def _failure(exc: BaseException, prepared: _Prepared, connect_timeout: float) -> Outcome:
    """A failed Outcome with a clear message for a client exception."""
    where = prepared.request.origin.where
    if isinstance(exc, ConnectError):
        cause = exc.cause
        if isinstance(cause, PrivateAddressError):
            return Outcome(False, error=str(cause), retryable=False)
        if isinstance(exc, ConnectTimeout) or isinstance(cause, TimeoutError):
            label = prepared.timeout_label
            if connect_timeout < prepared.timeout:
                label = f"{connect_timeout:g}s"
            return Outcome(False, error=f"timeout after {label} (connecting to {where})")
        if isinstance(cause, socket.gaierror):
            host = prepared.request.origin.host
            return Outcome(False, error=f"DNS lookup failed for {host}: {_reason(cause)}")
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = cause.verify_message or _reason(cause)
            return Outcome(False, error=f"TLS certificate error for {where}: {reason}")
        if isinstance(cause, ssl.SSLError):
            return Outcome(False, error=f"TLS error connecting to {where}: {_reason(cause)}")
        if isinstance(cause, ConnectionRefusedError):
            return Outcome(False, error=f"connection refused: {where}")
        return Outcome(False, error=f"cannot connect to {where}: {_reason(cause)}")
    if isinstance(exc, PoolTimeout):
        return Outcome(
            False,
            error=f"timeout after {prepared.timeout_label} "
            f"(waiting for a free connection; pool limit {exc.limit})",
        )
    if isinstance(exc, (RequestTimeout, TimeoutError)):
        return Outcome(False, error=f"timeout after {prepared.timeout_label}")
    if isinstance(exc, ServerDisconnected):
        return Outcome(False, error=f"server {where} disconnected before answering")
    if isinstance(exc, InvalidURL):
        return Outcome(False, error=f"invalid URL: {exc}", retryable=False)
    if isinstance(exc, ResponseTooLarge):
        return Outcome(False, error=f"{exc} from {where}")
    if isinstance(exc, InvalidResponse):
        return Outcome(False, error=f"invalid HTTP response from {where}: {exc}")
    if isinstance(exc, ClientClosed):
        return Outcome(False, error="the HTTP client was closed")
    if isinstance(exc, HttpClientError):
        return Outcome(False, error=f"{type(exc).__name__}: {str(exc) or 'request failed'}")
    log.warning("http target: unexpected error for %s", prepared.request.url, exc_info=exc)
    return Outcome(False, error=f"unexpected error: {type(exc).__name__}: {exc}")


def _reason(err: BaseException) -> str:
    reason = getattr(err, "strerror", None) or getattr(err, "reason", None)
    return str(reason or err) or type(err).__name__
