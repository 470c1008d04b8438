"""A scripted HTTP server on loopback: each connection runs a test's handler on raw bytes.

For client behaviour a well-behaved server never shows: chunked answers,
closing kept-alive connections, answers that stall, lie or break. Every
accepted connection runs ``handler(conn)`` in its own thread; the handler
reads requests with :meth:`RawConnection.read_request` and writes whatever
bytes it likes. With ``tls`` (an ``ssl.SSLContext`` for the server side) the
connection is wrapped first, and the SNI name the client sent is recorded.

    def handler(conn):
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 204 No Content\\r\\n\\r\\n")

    with RawServer(handler) as server:
        ... fire at server.url("/x") ...
        assert server.connections == 1
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RawRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # which accepted connection (0, 1, ...) it came on


@dataclass
class RawConnection:
    """One accepted connection, as the handler sees it."""

    sock: socket.socket
    index: int
    server: RawServer
    _buffer: bytes = b""
    requests: list[RawRequest] = field(default_factory=list)

    def read_request(self, timeout: float = 10.0) -> RawRequest | None:
        """The next request on this connection; None when the client closed it or went quiet."""
        try:
            self.sock.settimeout(timeout)
            while b"\r\n\r\n" not in self._buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return None
                self._buffer += chunk
            head, _, rest = self._buffer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _version = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            while len(rest) < length:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return None
                rest += chunk
            self._buffer = rest[length:]
        except (TimeoutError, OSError):
            return None
        request = RawRequest(method, path, headers, rest[:length], self.index)
        self.requests.append(request)
        self.server._record(request)
        return request

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    def wait_closed_by_client(self, timeout: float) -> bool:
        """Read (and drop) whatever comes until the client closes; whether it did in ``timeout``."""
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                self.sock.settimeout(left)
                if self.sock.recv(65536) == b"":
                    return True
        except (TimeoutError, OSError):
            pass
        return False


class RawServer:
    """Loopback TCP (or TLS) server; ``handler(conn)`` runs per connection in a thread."""

    def __init__(
        self,
        handler: Callable[[RawConnection], None],
        *,
        tls: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.handler = handler
        self.tls = tls
        self.host = host
        self.port = 0
        self.connections = 0
        self.requests: list[RawRequest] = []
        self.sni_names: list[str | None] = []
        self.handshake_errors: list[str] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._socks: list[socket.socket] = []
        self._stopping = False
        if tls is not None:
            tls.sni_callback = self._on_sni

    def url(self, path: str = "/", host: str | None = None) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host or self.host}:{self.port}{path}"

    def start(self) -> RawServer:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept_loop, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> RawServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_requests(self, count: int, timeout: float = 5.0) -> list[RawRequest]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.01)
        raise TimeoutError(f"expected {count} requests, got {len(self.requests)}")

    def _record(self, request: RawRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _on_sni(self, sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, ctx: object) -> None:
        with self._lock:
            self.sni_names.append(name)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                index = self.connections
                self.connections += 1
                self._socks.append(sock)
            threading.Thread(target=self._serve, args=(sock, index), daemon=True).start()

    def _serve(self, sock: socket.socket, index: int) -> None:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            if self.tls is not None:
                sock.settimeout(10)
                try:
                    sock = self.tls.wrap_socket(sock, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    with self._lock:
                        self.handshake_errors.append(str(exc))
                    return
                with self._lock:
                    self._socks.append(sock)
            self.handler(RawConnection(sock, index, self))
        finally:
            with self._lock:
                self.active -= 1
            try:
                sock.close()
            except OSError:
                pass


def respond(
    status: int = 200,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    reason: str = "OK",
    length: bool = True,
) -> bytes:
    """A response's bytes: status line, headers, ``Content-Length`` (unless ``length=False``), body."""
    lines = [f"HTTP/1.1 {status} {reason}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def serve_forever(reply: bytes) -> Callable[[RawConnection], None]:
    """A handler answering every request on a connection with ``reply`` (keep-alive)."""

    def handler(conn: RawConnection) -> None:
        while conn.read_request() is not None:
            conn.send(reply)

    return handler


FLOOD_LIMIT = 400 * 1024 * 1024


def flood(head: bytes, piece: bytes, sent: list[int], *, warm: bool = False,
          limit: int = FLOOD_LIMIT) -> Callable[[RawConnection], None]:
    """A handler answering with ``head`` and then ``piece`` again and again, up to
    ``limit`` bytes or until the client closes (streamed: it holds one piece);
    ``sent`` gets the bytes written. With ``warm``, a request whose path ends in
    ``?warm`` gets a 204 first."""

    def handler(conn: RawConnection) -> None:
        while (request := conn.read_request()) is not None:
            if warm and request.path.endswith("?warm"):
                conn.send(respond(204))
                continue
            total = 0
            try:
                conn.sock.sendall(head)
                while total < limit:
                    conn.sock.sendall(piece)
                    total += len(piece)
            except OSError:
                pass
            sent.append(total)
            return

    return handler
