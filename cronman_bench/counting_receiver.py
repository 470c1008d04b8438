"""A receiver that takes its time, for the limit-accuracy scenario: each
request is answered 204 after ``--answer-ms``, and logged with its arrival
and its answer, so that the requests in flight at once can be counted (the
nginx receiver answers at once and logs arrivals only).

    python -m cronman_bench.counting_receiver --port P --log FILE --answer-ms 200

A process of its own (threads, HTTP/1.1 keep-alive), so that its work is
not the benchmark's. One line per request, written once it is answered:
``<arrived> <answered> <job id> <run id> <attempt>`` (Unix seconds, the
``Cronman-*`` headers, ``-`` when absent). ``CountingReceiver`` starts it,
stops it by PID and reads the log back.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType

from cronman_bench.procs import ManagedProcess, free_port, wait_port

PATH = "/herd"


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the receiver saw it (times in Unix seconds)."""

    arrived: float
    answered: float
    job_id: str
    run_id: str
    attempt: int


def parse_log(text: str) -> list[Request]:
    """The requests of a log, malformed lines (a line cut short) left out."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue
        try:
            out.append(Request(float(parts[0]), float(parts[1]), parts[2], parts[3],
                               int(parts[4]) if parts[4].isdigit() else 0))
        except ValueError:
            continue
    return out


class CountingReceiver:
    """The receiver's process: ``start()``, ``url``, ``requests()``, ``stop()``."""

    def __init__(self, workdir: Path, answer_ms: int) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "requests.log"
        self.answer_ms = answer_ms
        self.port = 0
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}"

    def start(self) -> CountingReceiver:
        self.port = free_port()
        self.proc = ManagedProcess(
            "counting-receiver",
            [sys.executable, "-m", "cronman_bench.counting_receiver", "--port", str(self.port),
             "--log", str(self.log_path), "--answer-ms", str(self.answer_ms)],
            log_path=self.log_path.with_name("receiver.out"))
        wait_port("127.0.0.1", self.port, timeout=20, proc=self.proc)
        return self

    def requests(self) -> list[Request]:
        """Every request answered so far."""
        try:
            return parse_log(self.log_path.read_text())
        except FileNotFoundError:
            return []

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=10)
            self.proc = None


def serve(port: int, log_path: Path, answer_s: float) -> None:
    lock = threading.Lock()
    log = open(log_path, "a", buffering=1, encoding="ascii")  # noqa: SIM115 - for the process

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            arrived = time.time()
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            time.sleep(answer_s)
            answered = time.time()  # no longer in flight: the answer goes out now
            self.send_response(204)
            self.end_headers()
            line = " ".join((f"{arrived:.6f}", f"{answered:.6f}",
                             *(self.headers.get(h) or "-" for h in (
                                 "Cronman-Job-Id", "Cronman-Run-Id", "Cronman-Attempt"))))
            with lock:
                log.write(line + "\n")

        do_POST = do_GET = do_PUT = _answer  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024  # a herd's connections arrive at once

    server = Server(("127.0.0.1", port), Handler)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--answer-ms", type=int, default=200)
    args = parser.parse_args()
    serve(args.port, args.log, args.answer_ms / 1000.0)


if __name__ == "__main__":
    main()
