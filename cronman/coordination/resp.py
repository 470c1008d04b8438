"""A lean asyncio Redis connection for the scripts the event loop runs per fire.

Every fire's start mark, and every few fires' outcome marks, is one script
call from the node's event loop. redis-py's asyncio client spends about
130 µs of CPU per such call here (its connection pool, retry and
observability layers, a timeout context per read); this connection spends
about 55 µs (``ops/bench/redis_client_bench.py``). It writes each call on one
socket as it comes (pipelined: Redis answers a connection's commands in
order, so a FIFO of futures matches the replies), parses with hiredis's C
reader, and watches every reply's deadline with one timer.

It serves plain ``redis://`` TCP shards (``resp_settings`` says which); TLS,
Unix sockets and Sentinel keep redis-py's client. Errors are redis-py's own
exception types, so the shard set's back-off and failover treat both alike.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import hiredis
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

# URL query options this connection honours; any other keeps redis-py's client.
_OPTIONS = {"host", "port", "db", "username", "password", "socket_timeout",
            "socket_connect_timeout"}


@dataclass(frozen=True, slots=True)
class RespSettings:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    connect_timeout: float
    socket_timeout: float


def resp_settings(url: str, *, connect_timeout: float,
                  socket_timeout: float) -> RespSettings | None:
    """The settings of a plain ``redis://`` TCP URL, or None when it asks for
    anything else (TLS, a Unix socket, other client options)."""
    if not url.startswith("redis://"):
        return None
    try:
        kwargs = parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError:
        return None
    if set(kwargs) - _OPTIONS:
        return None
    return RespSettings(
        host=str(kwargs.get("host") or "localhost"), port=int(kwargs.get("port") or 6379),
        db=int(kwargs.get("db") or 0), username=kwargs.get("username"),
        password=kwargs.get("password"),
        connect_timeout=float(kwargs.get("socket_connect_timeout") or connect_timeout),
        socket_timeout=float(kwargs.get("socket_timeout") or socket_timeout))


def pack(args: Sequence[Any]) -> bytes:
    """One command in the Redis protocol (hiredis's encoder, in C, for the
    usual strings, numbers and bytes)."""
    try:
        return cast(bytes, hiredis.pack_command(tuple(args)))
    except TypeError:
        return _pack(args)


def _pack(args: Sequence[Any]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            b = a.encode()
        elif isinstance(a, bytes):
            b = a
        else:
            b = str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


class _Protocol(asyncio.Protocol):
    """One socket's replies, matched in order to the calls' futures."""

    def __init__(self, loop: asyncio.AbstractEventLoop, socket_timeout: float) -> None:
        self._loop = loop
        self._timeout = socket_timeout
        self._reader = hiredis.Reader(encoding="utf-8", errors="replace")
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance.
        self._transport = cast(asyncio.Transport, transport)

    def call(self, command: bytes) -> asyncio.Future[Any]:
        """Send ``command``; its reply (or error) comes on the returned future."""
        fut: asyncio.Future[Any] = self._loop.create_future()
        if self.closed or self._transport is None:
            fut.set_exception(RedisConnectionError("Connection closed."))
            return fut
        deadline = self._loop.time() + self._timeout
        self._waiting.append((fut, deadline))
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._check_deadline)
        self._transport.write(command)
        return fut

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        try:
            reader.feed(data)
            while True:
                reply = reader.gets()
                if reply is False:
                    return
                if not self._waiting:  # a reply nobody asked for: the stream is out of step
                    self._abort(RedisConnectionError("unexpected reply from the server"))
                    return
                fut = self._waiting.popleft()[0]
                if fut.done():  # the caller was cancelled: the reply is dropped
                    continue
                if isinstance(reply, hiredis.ReplyError):
                    text = str(reply)
                    fut.set_exception(NoScriptError(text) if text.startswith("NOSCRIPT")
                                      else ResponseError(text))
                else:
                    fut.set_result(reply)
        except hiredis.ProtocolError as e:
            self._abort(RedisConnectionError(f"protocol error: {e}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(
            "Connection closed by server." if exc is None else f"Connection lost: {exc}"))

    def _check_deadline(self) -> None:
        self._timer = None
        if not self._waiting:
            return
        deadline = self._waiting[0][1]
        if deadline <= self._loop.time():
            self._abort(RedisTimeoutError("Timeout reading from the server"))
        else:
            self._timer = self._loop.call_at(deadline, self._check_deadline)

    def _abort(self, error: Exception) -> None:
        self._fail(error)
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, error: Exception) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting:
            fut = self._waiting.popleft()[0]
            if not fut.done():
                fut.set_exception(error)

    def close(self) -> None:
        self._fail(RedisConnectionError("Connection closed."))
        if self._transport is not None:
            self._transport.close()


class RespConnection:
    """One pipelined connection to a Redis server, for script calls from one
    event loop; it connects on first use and again after any error."""

    def __init__(self, settings: RespSettings) -> None:
        self.settings = settings
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Task[_Protocol] | None = None
        self._closed = False

    async def evalsha(self, source: str, sha: str, keys: Sequence[str],
                      args: Sequence[Any]) -> Any:
        """Run a script by its SHA-1, loading it (``EVAL``) when the server
        does not know it (a restarted server, ``SCRIPT FLUSH``)."""
        proto = self._proto
        if proto is None or proto.closed:
            proto = await self._connect()
        try:
            return await proto.call(pack(("EVALSHA", sha, len(keys), *keys, *args)))
        except NoScriptError:
            return await proto.call(pack(("EVAL", source, len(keys), *keys, *args)))

    async def _connect(self) -> _Protocol:
        """The connection, opened by a task of its own that every caller
        waits on: a caller cancelled meanwhile cancels neither the connect
        nor the other callers."""
        if self._closed:
            raise RedisConnectionError("Connection closed.")
        task = self._connecting
        if task is None:
            task = self._connecting = asyncio.get_running_loop().create_task(self._open())
            task.add_done_callback(self._connected)
        return await asyncio.shield(task)

    def _connected(self, task: asyncio.Task[_Protocol]) -> None:
        self._connecting = None
        if task.cancelled() or task.exception() is not None:
            return
        proto = task.result()
        if self._closed:  # closed while connecting: nobody is to use it
            proto.close()
        else:
            self._proto = proto

    async def _open(self) -> _Protocol:
        s = self.settings
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(s.connect_timeout):
                _, proto = await loop.create_connection(
                    lambda: _Protocol(loop, s.socket_timeout), s.host, s.port)
        except TimeoutError as e:
            raise RedisTimeoutError(f"Timeout connecting to {s.host}:{s.port}") from e
        except OSError as e:
            raise RedisConnectionError(f"Error connecting to {s.host}:{s.port}: {e}") from e
        try:
            if s.password is not None:
                auth = ("AUTH", s.password) if s.username is None else (
                    "AUTH", s.username, s.password)
                await proto.call(pack(auth))
            if s.db:
                await proto.call(pack(("SELECT", s.db)))
        except BaseException:
            proto.close()
            raise
        return proto

    async def aclose(self) -> None:
        """Close the connection; calls made after this fail."""
        self._closed = True
        proto, self._proto = self._proto, None
        if proto is not None:
            proto.close()


class RespScript:
    """A script on a ``RespConnection``, called like redis-py's ``AsyncScript``."""

    def __init__(self, connection: RespConnection, source: str) -> None:
        self._connection = connection
        self._source = source
        self._sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, keys: Sequence[str] = (), args: Sequence[Any] = ()) -> Any:
        return await self._connection.evalsha(self._source, self._sha, keys, args)

