"""Redis endpoints of the coordinator: URL parsing, clients, and per-shard back-off.

``CRONMAN_REDIS_URL`` is either one or more comma-separated ``redis://`` /
``rediss://`` / ``unix://`` URLs (independent shards), or one
``redis+sentinel://[[user]:password@]host:port[,host:port...]/service[?db=N]``
URL (a Sentinel-managed primary; also ``redis+sentinels://``). Query options of
a Sentinel URL: ``db``, ``sentinel_password`` (when the sentinels themselves
require one), ``socket_timeout``, ``socket_connect_timeout``.

Every client gets short socket timeouts and at most one immediate retry (a
pooled connection may have gone stale), so a dead shard costs one timeout, not
redis-py's default ten retries. After an error a shard sits out a short,
growing back-off, so the calls that follow do not each pay the timeout.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from cronman.coordination.resp import RespConnection, RespSettings, resp_settings
from cronman.eventloop import PerLoop

log = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT = 0.5
DEFAULT_SOCKET_TIMEOUT = 1.0
DEFAULT_BACKOFF = 0.25
DEFAULT_MAX_BACKOFF = 2.0
_SENTINEL_SCHEMES = ("redis+sentinel", "redis+sentinels")


@dataclass(frozen=True)
class SentinelSpec:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    ssl: bool = False
    options: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
        return f"sentinel://{hosts}/{self.service}/{self.db}"


def is_sentinel_url(value: str) -> bool:
    return value.strip().split("://", 1)[0].lower() in _SENTINEL_SCHEMES


def split_shard_urls(value: str) -> list[str]:
    """The shard URLs of a non-Sentinel ``CRONMAN_REDIS_URL``, in order."""
    return [u.strip() for u in value.split(",") if u.strip()]


def parse_sentinel_url(value: str) -> SentinelSpec:
    """Parse ``redis+sentinel://[[user]:password@]h:p[,h:p...]/service[?db=N]``."""
    parts = urlsplit(value.strip())
    if parts.scheme.lower() not in _SENTINEL_SCHEMES:
        raise ValueError(f"not a Sentinel URL: {value!r}")
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, _, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) or None
    sentinels: list[tuple[str, int]] = []
    for item in hostlist.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):  # [::1]:26379
            host, _, port = item[1:].partition("]:")
        else:
            host, _, port = item.rpartition(":")
            if not host:
                host, port = item, ""
        try:
            sentinels.append((host, int(port) if port else 26379))
        except ValueError:
            raise ValueError(f"bad sentinel address {item!r} in CRONMAN_REDIS_URL") from None
    if not sentinels:
        raise ValueError("a Sentinel URL needs at least one host:port")
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError("a Sentinel URL needs the service name as its path")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    db = path[1] if len(path) > 1 else query.pop("db", "0")
    query.pop("db", None)
    options: dict[str, float] = {}
    for key in ("socket_timeout", "socket_connect_timeout"):
        if key in query:
            options[key] = float(query.pop(key))
    sentinel_password = query.pop("sentinel_password", None)
    if query:
        raise ValueError(f"unknown Sentinel URL options: {', '.join(sorted(query))}")
    return SentinelSpec(
        sentinels=sentinels,
        service=unquote(path[0]),
        db=int(db),
        username=username,
        password=password,
        sentinel_password=sentinel_password,
        ssl=parts.scheme.lower() == "redis+sentinels",
        options=options,
    )


def _no_retry_async() -> AsyncRetry:
    return AsyncRetry(NoBackoff(), 0)


def _no_retry() -> Retry:
    # One immediate retry: enough to replace a stale pooled connection.
    return Retry(NoBackoff(), 1)


class Shard:
    """One Redis endpoint (a plain server or a Sentinel-managed primary).

    ``available()`` is False during the back-off after an error; the back-off
    doubles with each consecutive error up to ``max_backoff`` and ends with the
    first success.
    """

    def __init__(
        self,
        index: int,
        name: str,
        client: redis.Redis,
        *,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
        extra_clients: tuple[redis.Redis, ...] = (),
        make_async: Callable[[], aredis.Redis] | None = None,
        make_resp: Callable[[], RespConnection] | None = None,
    ) -> None:
        self.index = index
        self.name = name
        self.client = client
        self._extra = extra_clients
        self._make_async = make_async
        self._async: PerLoop[aredis.Redis] = PerLoop()
        self._make_resp = make_resp
        self._resp: PerLoop[RespConnection] = PerLoop()
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._clock = clock
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._failures = 0

    def __repr__(self) -> str:
        return f"Shard({self.index}, {self.name!r})"

    def available(self) -> bool:
        return self._clock() >= self._down_until

    @property
    def max_backoff(self) -> float:
        """The longest back-off after an error, in seconds."""
        return self._max_backoff

    @property
    def down(self) -> bool:
        return self._failures > 0

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self._failures += 1
            delay = min(self._backoff * 2 ** (self._failures - 1), self._max_backoff)
            self._down_until = self._clock() + delay
            first = self._failures == 1
        if first:
            log.warning("redis shard %s unavailable: %s", self.name, error)
        else:
            log.debug("redis shard %s still unavailable: %s", self.name, error)

    def succeeded(self) -> None:
        if self._failures:
            with self._lock:
                was = self._failures
                self._failures = 0
                self._down_until = 0.0
            if was:
                log.info("redis shard %s reachable again", self.name)

    def aclient(self) -> aredis.Redis:
        """This shard's asyncio client, for the running event loop (made on first use)."""
        make = self._make_async
        if make is None:
            raise RuntimeError(f"shard {self.name} has no asyncio client")
        return self._async.get(make)

    def aresp(self) -> RespConnection | None:
        """This shard's lean connection for the running event loop (made on
        first use), or None when its URL needs redis-py's client."""
        make = self._make_resp
        return None if make is None else self._resp.get(make)

    async def aclose(self) -> None:
        """Close the asyncio clients (on the loop they were made for)."""
        resp, here = self._resp.take()
        if resp is not None and here:
            await resp.aclose()
        client, here = self._async.take()
        if client is not None and here:
            with contextlib.suppress(redis.RedisError, OSError):
                await client.aclose()

    def close(self) -> None:
        for client in (self.client, *self._extra):
            try:
                client.close()
            except redis.RedisError:  # closing a broken client must not fail shutdown
                pass


def build_shards(
    url: str,
    *,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
    backoff: float = DEFAULT_BACKOFF,
    max_backoff: float = DEFAULT_MAX_BACKOFF,
    clock: Callable[[], float] = time.monotonic,
) -> list[Shard]:
    """The shards of a ``CRONMAN_REDIS_URL`` value, with their clients.

    No connection is made here; a shard that is down is found out on first use.
    """
    common: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "retry": _no_retry(),
        "decode_responses": True,
    }

    def shard(index: int, name: str, client: redis.Redis, make_async: Callable[[], aredis.Redis],
              extra: tuple[redis.Redis, ...] = (),
              resp: RespSettings | None = None) -> Shard:
        return Shard(index, name, client, backoff=backoff, max_backoff=max_backoff,
                     clock=clock, extra_clients=extra, make_async=make_async,
                     make_resp=None if resp is None else functools.partial(RespConnection, resp))

    async_common = {**common, "retry": _no_retry_async()}

    if is_sentinel_url(url):
        spec = parse_sentinel_url(url)
        conn = {**common, **spec.options}
        sentinel_conn = {
            "socket_connect_timeout": conn["socket_connect_timeout"],
            "socket_timeout": conn["socket_timeout"],
            "retry": _no_retry(),
            "decode_responses": True,
        }
        if spec.sentinel_password:
            sentinel_conn["password"] = spec.sentinel_password
        if spec.ssl:
            sentinel_conn["ssl"] = True
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            spec.sentinels,
            sentinel_kwargs=sentinel_conn,
            username=spec.username,
            password=spec.password,
            db=spec.db,
            ssl=spec.ssl,
            **conn,
        )
        client = sentinel.master_for(spec.service)  # type: ignore[no-untyped-call]

        def sentinel_async() -> aredis.Redis:
            return aredis.Sentinel(  # type: ignore[no-any-return,no-untyped-call]
                spec.sentinels,
                sentinel_kwargs={**sentinel_conn, "retry": _no_retry_async()},
                username=spec.username, password=spec.password, db=spec.db, ssl=spec.ssl,
                **{**conn, "retry": _no_retry_async()},
            ).master_for(spec.service)

        return [shard(0, spec.name, client, sentinel_async, tuple(sentinel.sentinels))]
    urls = split_shard_urls(url)
    if not urls:
        raise ValueError("CRONMAN_REDIS_URL holds no URL")
    shards = []
    for index, shard_url in enumerate(urls):
        # Query options of the URL (socket_timeout=...) win over these defaults.
        client = redis.Redis.from_url(shard_url, **common)
        shards.append(shard(index, _redact(shard_url), client,
                            functools.partial(aredis.Redis.from_url, shard_url, **async_common),
                            resp=resp_settings(shard_url, connect_timeout=connect_timeout,
                                               socket_timeout=socket_timeout)))
    return shards


def _redact(url: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}" if host else url


def first_shard(url: str | None, owner: str) -> Shard:
    """The first shard of a ``CRONMAN_REDIS_URL`` value (the others' clients
    closed): where the cluster keeps what lives on one shard only (the agents'
    directory, the limits' counters). ``owner`` names the caller in the
    error when no URL is set."""
    if not url:
        raise ValueError(f"{owner} needs CRONMAN_REDIS_URL")
    shards = build_shards(url)
    for other in shards[1:]:
        other.close()
    return shards[0]
