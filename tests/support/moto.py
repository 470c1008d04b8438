"""A real moto SQS endpoint for tests: ``moto_server`` on a random loopback port.

moto runs as its own process (the venv's ``moto_server``), so the code under
test talks to it over HTTP exactly as it would to SQS. ``reset()`` empties it
between tests (``POST /moto-api/reset``). ``aws_test_env`` sets dummy
credentials so boto3's standard credential chain finds them and nothing real
is ever used.

    @pytest.fixture(scope="session")
    def moto():
        with moto_server() as server:
            yield server
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
_UNSET = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_ROLE_ARN")


# Loopback only: never through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _moto_command() -> list[str]:
    candidate = Path(sys.executable).with_name("moto_server")
    if candidate.exists():
        return [str(candidate)]
    found = shutil.which("moto_server")
    if found:
        return [found]
    raise RuntimeError("moto_server not found (pip install 'moto[server]')")


class MotoServer:
    """One ``moto_server`` process; stop it with ``stop()`` (by its pid)."""

    def __init__(self) -> None:
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> MotoServer:
        last_error = "not started"
        for _ in range(3):  # the port could be taken between choosing and binding it
            self.port = _free_port()
            # moto logs every request to stderr: a file, not a pipe that could fill up.
            self._log = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(
                [*_moto_command(), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **AWS_TEST_ENV},
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    self._log.seek(0)
                    last_error = self._log.read().decode(errors="replace")
                    self.stop()
                    break
                if self._ready():
                    return self
                time.sleep(0.1)
            else:
                self.stop()
                raise RuntimeError(f"moto_server did not start within {timeout}s")
        raise RuntimeError(f"moto_server failed to start: {last_error[-2000:]}")

    def _ready(self) -> bool:
        try:
            with _OPENER.open(f"{self.endpoint_url}/moto-api/data.json", timeout=1):
                return True
        except OSError:
            return False

    def reset(self) -> None:
        """Forget every queue and message."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with _OPENER.open(request, timeout=10):
            pass

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


def aws_test_env(environ: MutableMapping[str, str] | None = None, monkeypatch=None) -> None:
    """Point boto3's credential chain at dummy credentials (via ``monkeypatch`` if given)."""
    if monkeypatch is not None:
        for name in _UNSET:
            monkeypatch.delenv(name, raising=False)
        for name, value in AWS_TEST_ENV.items():
            monkeypatch.setenv(name, value)
        return
    env = os.environ if environ is None else environ
    for name in _UNSET:
        env.pop(name, None)
    env.update(AWS_TEST_ENV)
