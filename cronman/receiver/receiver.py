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

The signature covers the URL cronman called, so ``url`` is required: the
URL your jobs hold (behind a proxy or a load balancer, the public one), in
any spelling -- its canonical form (:func:`cronman.signing.canonical_url`)
is compared. Every form checks that URL, whatever the request says.

``url=CallbackReceiver.FROM_REQUEST`` instead takes each request's own URL
(the WSGI and Flask forms rebuild it from the scheme, the ``Host`` header
and the raw path; ``handle``, ``begin`` and ``verify`` then need ``url=``
per call). **Warning**: the sender chooses the ``Host`` header, so such a
receiver accepts a callback signed for *any* URL of the namespace: one
captured at another of its receivers (``https://low.example/hook``) replays
here with ``Host: low.example``. Use it only where the namespace has this
one receiver, and nothing in front rewrites the URL.

The answers: 2xx once handled (or for a run already handled: a duplicate);
401 for a missing, bad or stale signature; 400 for missing ``Cronman-*``
headers (or, with ``FROM_REQUEST``, a request URL that is not one); 409
while another delivery of the run is being handled (cronman tries again
later). A handler that fails (raises, or answers non-2xx) releases the run
id, so cronman's retry is handled.
"""

from __future__ import annotations

import enum
import functools
import io
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar
from urllib.parse import quote

from cronman.receiver.callback import Callback, Headers, InvalidCallback, verify_callback
from cronman.receiver.dedup import Claim, Deduplicator
from cronman.signing import DEFAULT_TOLERANCE, Secret, canonical_url

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


class UrlSource(enum.Enum):
    """Where a receiver takes the URL it checks from, when it is not given one."""

    FROM_REQUEST = "from-request"


class CallbackReceiver:
    """Checks each callback's signature, deduplicates on its run id, then handles it.

    ``url`` (required with a secret): the URL your jobs call, or
    ``CallbackReceiver.FROM_REQUEST`` (read the module's warning first).
    """

    FROM_REQUEST: ClassVar[UrlSource] = UrlSource.FROM_REQUEST

    def __init__(self, secret: Secret | Sequence[Secret] | None, *,
                 url: str | UrlSource | None = None, dedup: Deduplicator | None = None,
                 tolerance: float = DEFAULT_TOLERANCE, allow_unsigned: bool = False) -> None:
        if secret is None and not allow_unsigned:
            raise ValueError("a signing secret is required (allow_unsigned=True only for a "
                             "cronman that signs nothing)")
        if secret is not None and url is None:
            raise ValueError("url= is required: the URL your jobs call (the signature covers "
                             "it); CallbackReceiver.FROM_REQUEST takes each request's own, "
                             "which any receiver of the namespace's callbacks can replay to")
        self.secret = secret
        # A URL that is not http(s) is refused here, not at the first callback.
        self.url = canonical_url(url) if isinstance(url, str) else url
        self.dedup = dedup
        self.tolerance = tolerance

    # -- plain function --------------------------------------------------------

    def verify(self, headers: Headers, body: bytes, *, url: str | None = None) -> Callback:
        """The checked callback; raises ``InvalidCallback``. ``url``: the URL the
        request arrived at, for a receiver made with ``FROM_REQUEST`` (ignored
        by one given its own URL, which is the one checked)."""
        return verify_callback(self.secret, headers, body, url=self._expected_url(url),
                               tolerance=self.tolerance)

    def _expected_url(self, url: str | None) -> str | None:
        if self.secret is None:
            return None
        if isinstance(self.url, str):
            return self.url
        if url is None:
            raise ValueError("this receiver takes each request's URL (FROM_REQUEST): "
                             "pass url=")
        try:
            return canonical_url(url)
        except ValueError:
            raise InvalidCallback("the URL the request arrived at is not an http(s) URL",
                                  status=400) from None

    def _request_url(self, environ: dict[str, Any]) -> str | None:
        return request_url(environ) if self.url is UrlSource.FROM_REQUEST else None

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
                                         url=self._request_url(environ))
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
                                         url=self._request_url(request.environ))
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
    """The URL a WSGI request arrived at: scheme, ``Host`` and the raw path and query.

    Only as trustworthy as the ``Host`` header, which the sender chooses
    (see ``CallbackReceiver.FROM_REQUEST``).
    """
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
