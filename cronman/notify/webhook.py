"""The webhook sender (``notify.senders.Sender``): a notification as a signed POST.

The webhook is a POST of ``messages.webhook_body`` through the http
target's keep-alive client, with the private-address guard at connect time
(unless ``CRONMAN_ALLOW_PRIVATE_TARGETS``), signed like callbacks: with
``CRONMAN_SIGNING_SECRET`` set it carries ``Cronman-Signature: t=<unix>,v2=<hex>``
under the job's namespace's key, over the time, job id, notification id (in
the run id's place), an empty scheduled time, the URL and the body
(``cronman.signing``). Also
``Cronman-Notification-Id`` (deduplicate on it), ``Cronman-Event`` (the
event, or ``digest``) and ``Cronman-Job-Id``. A 2xx answer is success;
redirects are not followed. Answers are bounded as the client bounds them
(100 headers, 64 KiB of head, 1 KiB of body read, the channel's ``timeout``
for the whole exchange).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable, Sequence

from cronman.callbacks.httpclient import (
    ConnectError,
    ConnectTimeout,
    HttpClient,
    HttpClientError,
    PreparedRequest,
    RequestTimeout,
    Resolver,
    ResponseTooLarge,
    ServerDisconnected,
)
from cronman.callbacks.ssrf import PrivateAddressError, literal_refusal
from cronman.config import Settings
from cronman.errors import StoreUnavailable
from cronman.notify.messages import webhook_body
from cronman.notify.senders import SendError
from cronman.outbox.records import EventRecord, Notification
from cronman.signing import SIGNATURE_HEADER, context_tail
from cronman.signing_keys import KeyState, NamespaceSigners

USER_AGENT = "cronman-notify/0.1"
CONNECT_TIMEOUT = 10.0


class WebhookSender:
    """``{"kind": "webhook", "url", "headers", "timeout"}`` channels.

    ``key_state`` reads a namespace's signing key generation (the store's);
    without it every namespace signs with its first key. One sender (one per
    notifier process) holds one ``NamespaceSigners``: a namespace's signer is
    made once and kept while its key state does not change.
    """

    kind = "webhook"

    def __init__(self, settings: Settings, *, resolver: Resolver | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 key_state: Callable[[str], KeyState] | None = None) -> None:
        self.signers = NamespaceSigners(settings.signing_secret)
        self._key_state = key_state
        self._allow_private = settings.allow_private_targets
        self._resolver = resolver
        self._ssl_context = ssl_context
        self._client: HttpClient | None = None

    def _http(self) -> HttpClient:
        client = self._client
        if client is None or client.loop is not asyncio.get_running_loop():
            client = self._client = HttpClient(
                guard=not self._allow_private, pool_limit=16, connect_timeout=CONNECT_TIMEOUT,
                resolver=self._resolver, ssl_context=self._ssl_context)
        return client

    async def send(self, note: Notification, events: Sequence[EventRecord]) -> None:
        channel = note.channel
        body = webhook_body(note, events)
        headers = {"Content-Type": "application/json", **(channel.get("headers") or {})}
        try:
            request = PreparedRequest("POST", channel["url"], headers=headers, body=body,
                                      default_headers={"User-Agent": USER_AGENT,
                                                       "Accept": "*/*"})
        except (HttpClientError, KeyError, ValueError) as exc:
            raise SendError(f"invalid webhook: {exc}", permanent=True) from None
        if not self._allow_private:
            refusal = literal_refusal(request.origin.host)
            if refusal is not None:
                raise SendError(refusal, permanent=True)
        extra = [("Cronman-Notification-Id", note.id),
                 ("Cronman-Event", note.event or "digest"),
                 ("Cronman-Job-Id", note.job_id)]
        if self.signers.enabled:
            extra.append((SIGNATURE_HEADER, await self._signature(note, body)))
        timeout = float(channel.get("timeout") or 10)
        where = request.origin.where
        try:
            response = await self._http().request(request, extra, timeout=timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _failure(exc, where, timeout) from None
        if not 200 <= response.status < 300:
            location = response.header("Location") if 300 <= response.status < 400 else None
            hint = f" redirect to {location} (not followed)" if location else ""
            raise SendError(f"HTTP {response.status}{hint} from {where}")

    async def _signature(self, note: Notification, body: bytes) -> str:
        if self._key_state is not None:
            try:  # read per message: notifications are few, and a rotation shows at once
                state = await asyncio.to_thread(self._key_state, note.namespace)
            except StoreUnavailable as exc:
                raise SendError(f"cannot read the namespace's signing key: {exc}") from None
            self.signers.set_state(state)
        now = time.time()
        signer = self.signers.signer(note.namespace, now)
        assert signer is not None
        return signer.sign(int(now), note.job_id, note.id, "",
                           context_tail(note.channel["url"], body))

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and not client.loop.is_closed():
            await client.close()


def _failure(exc: BaseException, where: str, timeout: float) -> SendError:
    if isinstance(exc, ConnectError):
        cause = exc.cause
        if isinstance(cause, PrivateAddressError):
            return SendError(str(cause), permanent=True)
        if isinstance(exc, ConnectTimeout) or isinstance(cause, TimeoutError):
            return SendError(f"timeout connecting to {where}")
        if isinstance(cause, socket.gaierror):
            return SendError(f"DNS lookup failed for {where}: {cause.strerror or cause}")
        if isinstance(cause, ssl.SSLError):
            return SendError(f"TLS error connecting to {where}: {cause}")
        if isinstance(cause, ConnectionRefusedError):
            return SendError(f"connection refused: {where}")
        return SendError(f"cannot connect to {where}: {cause}")
    if isinstance(exc, (RequestTimeout, TimeoutError)):
        return SendError(f"timeout after {timeout:g}s waiting for {where}")
    if isinstance(exc, ServerDisconnected):
        return SendError(f"{where} disconnected before answering")
    if isinstance(exc, ResponseTooLarge):
        return SendError(f"{exc} from {where}")
    return SendError(f"{type(exc).__name__} sending to {where}: {exc}")
