"""``CallbackReceiver``: verify, deduplicate and handle cronman's HTTP callbacks.

    # key: your namespace's signing key; url: the URL your jobs call (public)
    receiver = CallbackReceiver(key, url="https://billing.example.com/hook",
                                dedup=MemoryDeduplicator())

    # a plain function, any framework:
    reply = receiver.handle(headers, raw_body, lambda cb: do_work(cb))
    return reply.status, reply.body

    # a WSGI app (the callback is in environ["cronman.callback"]):
    app = receiver.wsgi(app)

    # a Flask view (Flask is imported only when the view runs):
    @app.post("/hook")
    @receiver.flask
    def hook(callback): ...

The signature covers the URL cronman called: give it as ``url`` (behind a
proxy or a load balancer, the public URL the jobs hold). Without ``url``,
the WSGI and Flask forms use the URL the request arrived at (scheme,
``Host`` and raw path), which is right only when nothing between cronman
and the receiver rewrites it; ``handle`` and ``verify`` then need ``url=``.

The answers: 2xx once handled (or for a run already handled: a duplicate);
401 for a missing, bad or stale signature; 400 for missing ``Cronman-*``
headers; 409 while another delivery of the run is being handled (cronman
tries again later). A handler that fails (raises, or answers non-2xx)
releases the run id, so cronman's retry is handled.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from cronman.receiver.callback import Callback, Headers, InvalidCallback, verify_callback
from cronman.receiver.dedup import Claim, Deduplicator
from cronman.signing import DEFAULT_TOLERANCE, Secret

ENVIRON_KEY = "cronman.callback"
MAX_BODY_BYTES = 1024 * 1024  # cronman sends at most 64 KiB
IN_PROGRESS_RETRY_AFTER = "5"

F = TypeVar("F", bound=Callable[..., Any])
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class Reply:
    """What to answer cronman: ``status`` and a small JSON ``body``."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    callback: Callback | None = None
    result: Any = None

    @property
    def json(self) -> bytes:
        return json.dumps(self.body).encode("utf-8")


class CallbackReceiver:
    """Checks each callback's signature, deduplicates on its run id, then handles it."""

    def __init__(self, secret: Secret | Sequence[Secret] | None, *, url: str | None = None,
                 dedup: Deduplicator | None = None, tolerance: float = DEFAULT_TOLERANCE,
                 allow_unsigned: bool = False) -> None:
        if secret is None and not allow_unsigned:
            raise ValueError("a signing secret is required (allow_unsigned=True only for a "
                             "cronman that signs nothing)")
        self.secret = secret
        self.url = url
        self.dedup = dedup
        self.tolerance = tolerance

    # -- plain function --------------------------------------------------------

    def verify(self, headers: Headers, body: bytes, *, url: str | None = None) -> Callback:
        """The checked callback; raises ``InvalidCallback``. ``url``: the URL
        cronman called, when the receiver was not given one."""
        return verify_callback(self.secret, headers, body, url=self.url or url,
                               tolerance=self.tolerance)

    def begin(self, headers: Headers, body: bytes, *, url: str | None = None
              ) -> tuple[Reply | None, Callback | None]:
        """Verify and claim: (an answer to give at once, None) or (None, the callback to handle).

        After handling, call ``finish(callback, ok)``. ``handle`` does both.
        """
        try:
            callback = self.verify(headers, body, url=url)
        except InvalidCallback as exc:
            return Reply(exc.status, {"error": exc.reason}), None
        if self.dedup is not None:
            claim = self.dedup.claim(callback.run_id)
            if claim is Claim.DONE:
                return Reply(200, {"run_id": callback.run_id, "duplicate": True}, callback), None
            if claim is Claim.IN_PROGRESS:
                return Reply(409, {"run_id": callback.run_id,
                                   "error": "this run is being handled"}, callback), None
        return None, callback

    def finish(self, callback: Callback, ok: bool) -> None:
        """Record the end of a handling ``begin`` started."""
        if self.dedup is not None:
            if ok:
                self.dedup.complete(callback.run_id)
            else:
                self.dedup.release(callback.run_id)

    def handle(self, headers: Headers, body: bytes, handler: Callable[[Callback], Any], *,
               url: str | None = None) -> Reply:
        """Verify, deduplicate and run ``handler(callback)``; an exception releases the run."""
        early, callback = self.begin(headers, body, url=url)
        if early is not None:
            return early
        assert callback is not None
        try:
            result = handler(callback)
        except BaseException:
            self.finish(callback, False)
            raise
        self.finish(callback, True)
        return Reply(200, {"run_id": callback.run_id}, callback, result)

    # -- WSGI ------------------------------------------------------------------

    def wsgi(self, app: WsgiApp) -> WsgiApp:
        """Wrap a WSGI app: only verified, first deliveries reach it."""

        def middleware(environ: dict[str, Any], start_response: StartResponse
                       ) -> Iterable[bytes]:
            body = _read_body(environ)
            if body is None:
                return _answer(start_response, Reply(413, {"error": "body too large"}))
            early, callback = self.begin(_environ_headers(environ), body,
                                         url=request_url(environ))
            if early is not None:
                return _answer(start_response, early)
            assert callback is not None
            environ = {**environ, ENVIRON_KEY: callback, "wsgi.input": io.BytesIO(body),
                       "CONTENT_LENGTH": str(len(body))}
            status: list[int] = []

            def recording_start(status_line: str, headers: Any, exc_info: Any = None) -> Any:
                status[:] = [int(status_line.split(" ", 1)[0])]
                return start_response(status_line, headers, exc_info)

            try:
                result = app(environ, recording_start)
            except BaseException:
                self.finish(callback, False)
                raise
            return _Finishing(result, lambda failed: self.finish(
                callback, not failed and bool(status) and 200 <= status[0] < 300))

        return middleware

    # -- Flask -----------------------------------------------------------------

    def flask(self, view: F) -> F:
        """Decorate a Flask view; it is called with ``callback=`` the verified callback."""

        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from flask import jsonify, make_response, request

            early, callback = self.begin(request.headers, request.get_data(cache=True),
                                         url=request_url(request.environ))
            if early is not None:
                return make_response(jsonify(early.body), early.status)
            assert callback is not None
            try:
                response = make_response(view(*args, callback=callback, **kwargs))
            except BaseException:
                self.finish(callback, False)
                raise
            self.finish(callback, 200 <= response.status_code < 300)
            return response

        return wrapper  # type: ignore[return-value]


class _Finishing:
    """A WSGI response that reports, when closed, whether producing it failed."""

    def __init__(self, result: Iterable[bytes], done: Callable[[bool], None]) -> None:
        self._result = result
        self._done = done
        self._failed = False
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._result
        except BaseException:
            self._failed = True
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            self._done(self._failed)


def _read_body(environ: dict[str, Any]) -> bytes | None:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_BODY_BYTES:
        return None
    stream = environ.get("wsgi.input")
    if stream is None or length <= 0:
        return b""
    data: bytes = stream.read(length)
    return data


def request_url(environ: dict[str, Any]) -> str:
    """The URL a WSGI request arrived at: scheme, ``Host`` and the raw path and query."""
    scheme = environ.get("wsgi.url_scheme", "http")
    host = environ.get("HTTP_HOST")
    if not host:
        host = environ.get("SERVER_NAME", "")
        port = str(environ.get("SERVER_PORT", ""))
        if port and port != {"http": "80", "https": "443"}.get(scheme):
            host = f"{host}:{port}"
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if not raw:
        path = quote((environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))
                     .encode("latin-1"), safe="/;=,@:!$&'()*+~-._")
        query = environ.get("QUERY_STRING", "")
        raw = path + ("?" + query if query else "")
    return f"{scheme}://{host}{raw}"


def _environ_headers(environ: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            out.append((key[5:].replace("_", "-"), value))
    return out


def _answer(start_response: StartResponse, reply: Reply) -> list[bytes]:
    body = reply.json
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if reply.status == 409:
        headers.append(("Retry-After", IN_PROGRESS_RETRY_AFTER))
    start_response(f"{reply.status} {_REASONS.get(reply.status, 'Error')}", headers)
    return [body]


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 409: "Conflict",
            413: "Payload Too Large", 500: "Internal Server Error"}
