"""The fault suite's TCP proxy: it forwards both ways, holds answers back
(a slow receiver) and does not carry on a connection its client gave up on
before the service took it."""

from __future__ import annotations

import socket
import threading
import time

from tests.chaos.proxy import DelayProxy


def echo_server() -> tuple[socket.socket, list[bytes]]:
    """A loopback server answering each connection's first chunk with it, uppercased."""
    srv = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(1024)
                got.append(data)
                conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return srv, got


def test_forwards_and_holds_answers_back():
    srv, got = echo_server()
    proxy = DelayProxy(srv.getsockname()).start()
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as c:
            c.sendall(b"ping")
            assert c.recv(16) == b"PING"
        proxy.set_delay(0.5)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as c:
            t = time.monotonic()
            c.sendall(b"slow")
            assert c.recv(16) == b"SLOW"
            assert time.monotonic() - t >= 0.45
        assert got == [b"ping", b"slow"]
    finally:
        proxy.stop()
        srv.close()


def test_a_connection_given_up_before_the_service_took_it_is_not_carried_on():
    # A service whose accept queue is full: connecting to it hangs (its SYNs
    # are not answered), as over a link that is down.
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(full.getsockname())
        fillers.append(f)
    proxy = DelayProxy(full.getsockname()).start()
    try:
        c = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        c.sendall(b"given up")
        c.close()
        time.sleep(0.6)  # the proxy's check runs every 0.2 s
        assert not proxy._writers  # noqa: SLF001 - its client side is let go
    finally:
        proxy.stop()
        for f in fillers:
            f.close()
        full.close()
