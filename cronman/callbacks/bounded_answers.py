"""Bounded answers for botocore's connections (sqs targets and sqs dead letters).

botocore reads an answer whole into memory. ``http.client`` under it bounds
the head (100 headers, 64 KiB a line) but not the body, and botocore's read
timeout bounds each read of the socket, not the answer: a tenant's
``endpoint_url`` answering an endless body, or one byte every few seconds,
would hold a thread of the target's pool and grow its memory for as long as
it likes (the attempt's own deadline ends the wait, not the thread).

Here every byte of an answer, head and body, is read through a reader that
fails the answer past :data:`MAX_ANSWER_BYTES` or :data:`ANSWER_SECONDS`
after the request was sent, with :class:`AnswerTooLarge` (``answer over
1 MiB``, ``answer not complete in 10s``); urllib3 then closes the
connection. Reads go through ``read1``/``readinto1``/``peek``, one read of
the socket at a time (each bounded by botocore's read timeout), so a
drip-fed answer is cut off on time as well.

:func:`install` puts the pool classes into one boto3 client (the guarded
ones of :mod:`.guarded_sockets` are bounded too).
"""

from __future__ import annotations

import http.client
import time
from typing import Any

from botocore.awsrequest import (
    AWSHTTPConnection,
    AWSHTTPConnectionPool,
    AWSHTTPSConnection,
    AWSHTTPSConnectionPool,
)

from cronman.callbacks.httpclient.errors import byte_size

# An SQS answer (SendMessage) is a few hundred bytes; an error a few KiB.
MAX_ANSWER_BYTES = 1024 * 1024
# Time from the request sent to the answer read whole (the sqs target's deadline).
ANSWER_SECONDS = 10.0


class AnswerTooLarge(Exception):
    """An answer went over its size or time bound; the connection is dropped.

    Not an ``OSError`` or ``HTTPException`` on purpose: urllib3 would retry
    or wrap those; this way the target's error handling sees it.
    """


class BoundedReader:
    """A buffered reader of one answer that counts what it gives and watches the clock."""

    def __init__(self, fp: Any, limit: int, seconds: float) -> None:
        self._fp = fp
        self._limit = limit
        self._left = limit
        self._seconds = seconds
        self._deadline = time.monotonic() + seconds

    def _took(self, n: int) -> None:
        self._left -= n
        if self._left < 0:
            raise AnswerTooLarge(f"answer over {byte_size(self._limit)}")
        if time.monotonic() > self._deadline:
            raise AnswerTooLarge(f"answer not complete in {self._seconds:g}s")

    def read1(self, n: int = -1) -> bytes:
        data: bytes = self._fp.read1(n)
        self._took(len(data))
        return data

    def read(self, n: int | None = -1) -> bytes:
        parts: list[bytes] = []
        got = 0
        while n is None or n < 0 or got < n:
            chunk = self.read1(65536 if n is None or n < 0 else n - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        got = 0
        while got < len(view):
            n = self._fp.readinto1(view[got:])
            if not n:
                break
            self._took(n)
            got += n
        return got

    def readline(self, limit: int | None = -1) -> bytes:
        limit = -1 if limit is None else limit
        parts: list[bytes] = []
        got = 0
        while limit < 0 or got < limit:
            buffered: bytes = self._fp.peek(1)  # at most one read of the socket
            if not buffered:
                break
            want = len(buffered) if limit < 0 else min(len(buffered), limit - got)
            end = buffered.find(b"\n", 0, want)
            chunk: bytes = self._fp.read(end + 1 if end >= 0 else want)  # from the buffer
            self._took(len(chunk))
            parts.append(chunk)
            got += len(chunk)
            if end >= 0:
                break
        return b"".join(parts)

    def peek(self, n: int = 0) -> bytes:
        data: bytes = self._fp.peek(n)
        return data

    def __getattr__(self, name: str) -> Any:  # close, flush, fileno, closed, ...
        return getattr(self._fp, name)


class BoundedResponse(http.client.HTTPResponse):
    """``http.client``'s answer, read through a :class:`BoundedReader`."""

    def __init__(self, sock: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = BoundedReader(  # type: ignore[assignment]  # read as a BufferedReader is
            self.fp, MAX_ANSWER_BYTES, ANSWER_SECONDS)


class BoundedHTTPConnection(AWSHTTPConnection):  # type: ignore[misc]
    response_class = BoundedResponse


class BoundedHTTPSConnection(AWSHTTPSConnection):  # type: ignore[misc]
    response_class = BoundedResponse


class BoundedHTTPConnectionPool(AWSHTTPConnectionPool):  # type: ignore[misc]
    ConnectionCls = BoundedHTTPConnection


class BoundedHTTPSConnectionPool(AWSHTTPSConnectionPool):  # type: ignore[misc]
    ConnectionCls = BoundedHTTPSConnection


def install(client: Any, http_pool: type = BoundedHTTPConnectionPool,
            https_pool: type = BoundedHTTPSConnectionPool) -> None:
    """Make every connection of a new boto3 ``client`` one of these pools'.

    It reaches into botocore's HTTP session (the dict of pool classes its
    pool managers share); on a botocore where that is not there, it raises
    rather than leave the client as it was.
    """
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    pools = getattr(session, "_pool_classes_by_scheme", None)
    shared = getattr(getattr(session, "_manager", None), "pool_classes_by_scheme", None)
    if shared is not pools or not isinstance(pools, dict):
        raise RuntimeError("cannot install bounded, guarded connections in this botocore's "
                           "HTTP session; refusing to send through it")
    pools["http"] = http_pool
    pools["https"] = https_pool
