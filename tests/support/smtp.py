"""A real local SMTP server for the notification tests (aiosmtpd), with STARTTLS.

    with SmtpServer() as mx:                      # plain SMTP on a free loopback port
        ... send to 127.0.0.1:mx.port ...
        [mail] = mx.wait_for(1)

    with SmtpServer(tls=True, credentials=("cronman", "s3cret")) as mx:
        # STARTTLS required, with a certificate of a CA made for this server
        # (mx.ca: trust it with mx.client_context() or SSL_CERT_FILE=mx.ca_file),
        # and AUTH (only after STARTTLS) with these credentials.

``refuse`` makes the server answer 550 to those recipients; ``fail_data``
makes it answer 451 (try again later) to the next N messages.
"""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Mail:
    mail_from: str
    rcpt_tos: list[str]
    message: Message
    tls: bool
    authenticated_as: str | None
    arrived: float

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    def header(self, name: str) -> str | None:
        value = self.message[name]
        return None if value is None else str(value)

    @property
    def body(self) -> str:
        payload = self.message.get_payload(decode=True)
        return payload.decode() if isinstance(payload, bytes) else str(payload)


class _Handler:
    def __init__(self, server: SmtpServer) -> None:
        self.server = server

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if address in self.server.refuse:
            return "550 5.1.1 no such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        s = self.server
        with s._cond:
            if s.fail_data > 0:
                s.fail_data -= 1
                return "451 4.3.0 try again later"
            auth = session.auth_data
            s._mails.append(Mail(
                mail_from=envelope.mail_from, rcpt_tos=list(envelope.rcpt_tos),
                message=message_from_bytes(envelope.content),
                tls=session.ssl is not None,
                authenticated_as=auth.login.decode() if isinstance(auth, LoginPassword)
                else None,
                arrived=time.time()))
            s._cond.notify_all()
        return "250 OK queued"


class SmtpServer:
    """aiosmtpd on 127.0.0.1 (see the module doc)."""

    def __init__(self, *, tls: bool = False, credentials: tuple[str, str] | None = None,
                 refuse: tuple[str, ...] = ()) -> None:
        self.port = _free_port()
        self.refuse = set(refuse)
        self.fail_data = 0
        self.credentials = credentials
        self._mails: list[Mail] = []
        self._cond = threading.Condition()
        self._tmp = tempfile.TemporaryDirectory(prefix="cronman-smtp-")
        self.ca: trustme.CA | None = None
        self.ca_file: str | None = None
        kwargs: dict[str, Any] = {}
        if tls:
            self.ca = trustme.CA()
            cert = self.ca.issue_cert("127.0.0.1", "localhost")
            server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            cert.configure_cert(server_ctx)
            self.ca_file = str(Path(self._tmp.name) / "ca.pem")
            self.ca.cert_pem.write_to_path(self.ca_file)
            kwargs.update(tls_context=server_ctx, require_starttls=True)
        if credentials is not None:
            kwargs.update(authenticator=self._authenticate, auth_required=True,
                          auth_require_tls=tls)
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port,
                                      **kwargs)

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str,
                      auth_data: Any) -> AuthResult:
        ok = (isinstance(auth_data, LoginPassword) and self.credentials is not None
              and (auth_data.login.decode(), auth_data.password.decode()) == self.credentials)
        return AuthResult(success=ok, handled=False, auth_data=auth_data)

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this server's certificate."""
        ctx = ssl.create_default_context()
        if self.ca is not None:
            self.ca.configure_trust(ctx)
        return ctx

    def start(self) -> SmtpServer:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()
        self._tmp.cleanup()

    def __enter__(self) -> SmtpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def mails(self) -> list[Mail]:
        with self._cond:
            return list(self._mails)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Mail]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._mails) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"expected {count} mails, got {len(self._mails)}")
                self._cond.wait(left)
            return list(self._mails)
