"""Email notifications over SMTP (``CRONMAN_SMTP_*``).

One connection per message, in a worker thread (``smtplib``; notifications
are few): EHLO, STARTTLS when ``CRONMAN_SMTP_STARTTLS`` (the default; the
server's certificate is checked against the system's CAs -- or
``SSL_CERT_FILE`` -- and its name), then AUTH with
``CRONMAN_SMTP_USERNAME``/``_PASSWORD`` when set (only ever over TLS: the
settings refuse credentials without STARTTLS). A server that does not offer
STARTTLS when it is required fails the attempt: nothing is sent in the clear.

The message is plain text (``messages.subject``/``text``) with
``Message-ID: <notification id@cronman>`` and ``X-Cronman-Notification-Id``,
so a copy sent again after a sender died mid-send is recognisable.
Refused recipients and 5xx answers to the message are permanent failures;
connection problems, 4xx answers and authentication failures are retried.
"""

from __future__ import annotations

import asyncio
import smtplib
import socket
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate

from cronman.config import Settings
from cronman.notify.messages import subject, text
from cronman.notify.senders import SendError
from cronman.outbox.records import EventRecord, Notification

SMTP_TIMEOUT = 30.0


def default_sender() -> str:
    return f"cronman@{socket.gethostname()}"


class EmailSender:
    """``{"kind": "email", "to": [...]}`` channels."""

    kind = "email"

    def __init__(self, settings: Settings, *, ssl_context: ssl.SSLContext | None = None,
                 timeout: float = SMTP_TIMEOUT) -> None:
        self._host = settings.smtp_host
        self._port = settings.smtp_port
        self._starttls = settings.smtp_starttls
        self._username = settings.smtp_username
        self._password = settings.smtp_password
        self._from = settings.smtp_from or default_sender()
        self._ssl_context = ssl_context
        self._timeout = timeout

    def message(self, note: Notification, events: Sequence[EventRecord]) -> EmailMessage:
        msg = EmailMessage()
        msg["Subject"] = subject(note, events)
        msg["From"] = self._from
        msg["To"] = ", ".join(note.channel.get("to") or ())
        msg["Date"] = formatdate(localtime=False, usegmt=True)
        msg["Message-ID"] = f"<{note.id}@cronman>"
        msg["X-Cronman-Notification-Id"] = note.id
        msg["X-Cronman-Event"] = note.event or "digest"
        msg.set_content(text(note, events))
        return msg

    async def send(self, note: Notification, events: Sequence[EventRecord]) -> None:
        if not self._host:
            raise SendError("email is not configured on this node: CRONMAN_SMTP_HOST is not set")
        recipients = list(note.channel.get("to") or ())
        if not recipients:
            raise SendError("no recipients", permanent=True)
        msg = self.message(note, events)
        await asyncio.to_thread(self._deliver, msg, recipients)

    async def close(self) -> None:
        pass  # one connection per message: nothing kept open

    def _deliver(self, msg: EmailMessage, recipients: list[str]) -> None:
        where = f"{self._host}:{self._port}"
        try:
            with smtplib.SMTP(self._host or "", self._port, timeout=self._timeout) as smtp:
                smtp.ehlo()
                if self._starttls:
                    if not smtp.has_extn("starttls"):
                        raise SendError(f"{where} does not offer STARTTLS "
                                        "(CRONMAN_SMTP_STARTTLS is true)")
                    smtp.starttls(context=self._ssl_context or ssl.create_default_context())
                    smtp.ehlo()
                if self._username:
                    smtp.login(self._username, self._password or "")
                smtp.send_message(msg, to_addrs=recipients)
        except SendError:
            raise
        except smtplib.SMTPRecipientsRefused as exc:
            refused = ", ".join(f"{a} ({code} {_text(reply)})"
                                for a, (code, reply) in exc.recipients.items())
            raise SendError(f"{where} refused every recipient: {refused}",
                            permanent=True) from None
        except smtplib.SMTPAuthenticationError as exc:
            raise SendError(f"{where} refused the credentials: {exc.smtp_code} "
                            f"{_text(exc.smtp_error)}") from None
        except smtplib.SMTPResponseException as exc:
            raise SendError(f"{where} answered {exc.smtp_code} {_text(exc.smtp_error)}",
                            permanent=500 <= exc.smtp_code < 600) from None
        except ssl.SSLError as exc:
            raise SendError(f"TLS with {where} failed: {exc}") from None
        except (OSError, smtplib.SMTPException) as exc:
            raise SendError(f"cannot send through {where}: {exc or type(exc).__name__}") from None


def _text(reply: bytes | str) -> str:
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
