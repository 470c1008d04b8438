"""A small keep-alive HTTP/1.1 client for callbacks: asyncio protocols, llhttp parsing.

Made for the ``http`` target's one job -- send a request, read the status and
the first KiB of the answer -- at a small, steady CPU cost per call:

- :mod:`.request`: the origin of a URL; a request encoded once, rendered per call;
- :mod:`.connection`: one connection, an asyncio protocol fed to httptools'
  ``HttpResponseParser`` (llhttp); Content-Length, chunked and close-delimited
  bodies, HEAD/1xx/204/304 answers without a body;
- :mod:`.pool`: the bounded keep-alive pool, by (scheme, host, port);
- :mod:`.connect`: lookup, the private-address guard at connect time, TCP, TLS;
- :mod:`.client`: :class:`HttpClient`, which puts them together;
- :mod:`.errors`: what can go wrong, by phase.

    client = HttpClient(guard=False)
    request = PreparedRequest("POST", "http://127.0.0.1:8080/hook", body=b"{}")
    response = await client.request(request, [("X-Attempt", "1")], timeout=10)
    response.status, response.body  # 204, b""
"""

from __future__ import annotations

from cronman.callbacks.httpclient.client import HttpClient
from cronman.callbacks.httpclient.connect import Address, Resolver, SystemResolver
from cronman.callbacks.httpclient.connection import Response
from cronman.callbacks.httpclient.errors import (
    ClientClosed,
    ConnectError,
    ConnectTimeout,
    HttpClientError,
    InvalidRequest,
    InvalidResponse,
    InvalidURL,
    PoolTimeout,
    RequestTimeout,
    ResponseTooLarge,
    ServerDisconnected,
)
from cronman.callbacks.httpclient.request import Origin, PreparedRequest

__all__ = [
    "Address",
    "ClientClosed",
    "ConnectError",
    "ConnectTimeout",
    "HttpClient",
    "HttpClientError",
    "InvalidRequest",
    "InvalidResponse",
    "InvalidURL",
    "Origin",
    "PoolTimeout",
    "PreparedRequest",
    "RequestTimeout",
    "Resolver",
    "ResponseTooLarge",
    "Response",
    "ServerDisconnected",
    "SystemResolver",
]
