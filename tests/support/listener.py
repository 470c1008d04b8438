"""A bare TCP listener on loopback that records every connection and byte it gets.

For the private-address guard: a target pointed at it must leave it with
nothing -- no connection accepted, no byte read.
"""

from __future__ import annotations

import socket
import threading


class LoopbackListener:
    """``with LoopbackListener() as ear: ... ear.connections, ear.data``."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self.connections = 0
        self.data = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="loopback-listener",
                                        daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
            conn.settimeout(1.0)
            try:
                chunk = conn.recv(65536)
                with self._lock:
                    self.data += chunk
            except OSError:
                pass
            finally:
                conn.close()  # no answer: the sender sees a dropped connection

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"

    def __enter__(self) -> LoopbackListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout=2.0)
