"""HTTP for the API client: JSON over a urllib3 connection pool, with retries.

What is retried, and why (``RetryPolicy``):

- a 503 (or 502/504 from a proxy) answer, for every method: the API answers
  503 when its database or Redis is unreachable, before anything is written;
- a failure to connect (refused, DNS, connect timeout), for every method:
  the request never left;
- a connection lost after the request was sent (reset, read timeout) for
  GET and HEAD, and for the calls sent with an ``Idempotency-Key``
  (``keyed``: create, bulk create, trigger, replay, backfill): the API
  answers a repeat with the same key with its first answer, so the write is
  made once. Any other write may have been applied, so repeating it could
  change a job twice; the error says so. A keyed repeat that finds the first
  attempt still running on the server (409 ``idempotency_in_progress``) is
  tried again too.

One key is made per call, and every attempt of the call sends it; a key of
the caller's own (``idempotency_key``) is sent instead, so that a call made
again later -- by a process that never heard the first answer -- is
answered as the first was.

Waits double from ``backoff`` up to ``max_backoff``, with jitter; a
``Retry-After`` answer header is honoured within the same cap.
"""

from __future__ import annotations

import html
import json
import random
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)

from cronman import __version__
from cronman.client.errors import ApiError, error_for

RETRY_STATUSES = frozenset({502, 503, 504})
IDEMPOTENCY_HEADER = "Idempotency-Key"
# The code of a keyed repeat's 409 while the first attempt still runs.
IN_PROGRESS = "idempotency_in_progress"
SAFE_METHODS = frozenset({"GET", "HEAD"})
# How much of an answer that is not the API's error envelope an error quotes.
EXCERPT_CHARS = 160
_TITLE_RE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_DROPPED_RE = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG_RE = re.compile(r"<[^>]*>")
Query = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how long apart, a failed request is tried again."""

    attempts: int = 4
    backoff: float = 0.5
    max_backoff: float = 8.0

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff)
        base = min(self.backoff * 2.0 ** (retry - 1), self.max_backoff)
        return base / 2 + random.uniform(0, base / 2)


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(attempts=1)


def quote_segment(value: str) -> str:
    """``value`` as one path segment (``/`` and ``?`` escaped)."""
    return quote(value, safe="")


class Transport:
    """Sends one JSON request and returns the decoded answer, or raises ``ApiError``.

    Thread-safe: the pool hands each thread its own connection (``pool_size``
    connections are kept alive per host).
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 connect_timeout: float = 5.0, retry: RetryPolicy = DEFAULT_RETRY,
                 pool_size: int = 8, sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.retry = retry
        self._sleep = sleep
        self._connect_timeout = connect_timeout
        self._timeout = urllib3.Timeout(connect=min(connect_timeout, timeout), read=timeout)
        self._pool = urllib3.PoolManager(num_pools=4, maxsize=pool_size, block=False,
                                         retries=False, timeout=self._timeout)
        self._headers = {"Accept": "application/json",
                         "User-Agent": f"cronman-client/{__version__}"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def close(self) -> None:
        self._pool.clear()

    def request(self, method: str, path: str, body: Any = None, *,
                query: Query | None = None, timeout: float | None = None,
                retry: RetryPolicy | None = None, keyed: bool = False,
                idempotency_key: str | None = None,
                headers: Mapping[str, str] | None = None) -> Any:
        """The decoded JSON answer (None for an empty one); raises ``ApiError``.

        ``timeout`` replaces the read timeout for this request (a long-poll
        waits longer than a call), ``retry`` the transport's policy;
        ``keyed``: send an ``Idempotency-Key`` (the call may then be retried
        whatever became of an attempt), ``idempotency_key`` if given (it
        implies ``keyed``), else a new one; ``headers``: more headers to send.
        """
        policy = retry or self.retry
        read = None if timeout is None else urllib3.Timeout(
            connect=min(self._connect_timeout, timeout), read=timeout)
        url = self.url + path
        if query:
            url += "?" + urlencode(list(query))
        sent = {**self._headers, **(headers or {})}
        keyed = keyed or idempotency_key is not None
        if keyed:
            sent[IDEMPOTENCY_HEADER] = idempotency_key or uuid.uuid4().hex
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            sent["Content-Type"] = "application/json"
        tries = 0
        while True:
            try:
                return self._once(method, url, data, sent, read)
            except ApiError as exc:
                retryable = self._retryable(method, exc, keyed)
                tries += 1
                if not retryable or tries >= policy.attempts:
                    raise
                self._sleep(policy.delay(tries, exc.retry_after))

    def _retryable(self, method: str, exc: ApiError, keyed: bool = False) -> bool:
        if exc.status in RETRY_STATUSES:
            return True
        if exc.code == "unreachable":
            return True
        if keyed and exc.code in ("connection_lost", IN_PROGRESS):
            return True
        return exc.code == "connection_lost" and method in SAFE_METHODS

    def _once(self, method: str, url: str, data: bytes | None,
              headers: Mapping[str, str], timeout: urllib3.Timeout | None = None) -> Any:
        try:
            resp = self._pool.request(method, url, body=data, headers=dict(headers),
                                      redirect=False, preload_content=True,
                                      timeout=timeout or self._timeout)
        except (NewConnectionError, ConnectTimeoutError) as exc:
            raise error_for(0, "unreachable", f"cannot reach {self.url}: {_reason(exc)}") from None
        except (ReadTimeoutError, ProtocolError) as exc:
            what = ("" if method in SAFE_METHODS or IDEMPOTENCY_HEADER in headers
                    else " (the request may have been applied)")
            raise error_for(0, "connection_lost",
                            f"{method} {url}: connection lost: {_reason(exc)}{what}") from None
        except HTTPError as exc:
            raise error_for(0, "unreachable", f"cannot reach {self.url}: {_reason(exc)}") from None
        raw = resp.data
        if 200 <= resp.status < 300:
            if not raw.strip():
                return None
            try:
                return json.loads(raw)
            except ValueError as exc:
                raise ApiError(resp.status, "bad_answer",
                               f"the API answered with invalid JSON: {exc}") from None
        raise _error_from(resp.status, raw, resp.reason or "", resp.headers.get("Retry-After"),
                          resp.headers.get("Content-Type") or "")


def _error_from(status: int, raw: bytes, reason: str, retry_after: str | None,
                content_type: str = "") -> ApiError:
    wait: float | None = None
    if retry_after:
        try:
            wait = float(retry_after)
        except ValueError:
            wait = None
    try:
        err = json.loads(raw)["error"]
        return error_for(status, str(err.get("code") or "error"),
                         str(err.get("message") or reason), err.get("field"), retry_after=wait)
    except (ValueError, KeyError, TypeError, AttributeError):
        text = excerpt(raw, content_type)
        return error_for(status, "error", text or reason or f"HTTP {status}", retry_after=wait)


def excerpt(raw: bytes, content_type: str = "") -> str:
    """A short one-line excerpt of an answer that is not the API's JSON: an HTML
    page (a proxy's 502, say) by its title, or else its text without tags."""
    text = raw.decode("utf-8", "replace")
    is_html = "html" in content_type.lower() or text.lstrip()[:1] == "<"
    if is_html:
        title = _TITLE_RE.search(text)
        text = title.group(1) if title else _TAG_RE.sub(" ", _DROPPED_RE.sub(" ", text))
        text = html.unescape(text)
    text = " ".join(text.split())
    if len(text) > EXCERPT_CHARS:
        text = text[:EXCERPT_CHARS - 1].rstrip() + "…"
    if is_html and text:
        return f"{text} (an HTML page, not the API's JSON)"
    return text


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc)
