"""Completing a run later: the receiver side of an http target with
``"completion": "callback"``.

The request carries ``Cronman-Completion-Url``, ``Cronman-Heartbeat-Url``
and ``Cronman-Lease-Token``. Answer it with a 202, then heartbeat (within
the target's ``heartbeat_timeout``) and complete through the API, as a
worker does::

    lease = completion_lease(request.headers, api_url="https://cronman.internal")
    report = CompletionReport(lease, "https://cronman.internal", token=API_TOKEN)
    ...  # answer 202 now; later, from a thread of your own:
    if report.heartbeat(progress="half way", percent=50):
        ...  # a cancel was asked
    report.succeeded({"rows": 120})

``api_url`` is the API as you know it: the headers' URLs must be that API's
(``{api_url}/v1/runs/{run_id}/...``), so that a forged request cannot make
you send your API token elsewhere; reports go to ``api_url``. Check the
request's signature first (``verify_callback``): the v2 signature covers the
ids, URL and body, not these headers. A report whose lease is gone (it ran
out, or the run was completed) raises ``cronman.client.ConflictError`` (409,
``stale_lease``) and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cronman.client.api import CronmanClient
from cronman.client.types import Run
from cronman.protocol import (
    HEADER_COMPLETION_URL,
    HEADER_HEARTBEAT_URL,
    HEADER_LEASE_TOKEN,
    HEADER_RUN_ID,
)
from cronman.receiver.callback import Headers, InvalidCallback, header
from cronman.signing import canonical_url


@dataclass(frozen=True)
class CompletionLease:
    """What a request completed by callback says about its lease."""

    run_id: str
    lease_token: str
    complete_url: str
    heartbeat_url: str


def completion_lease(headers: Headers, *, api_url: str) -> CompletionLease:
    """The lease in a request's headers; ``InvalidCallback`` (400) when one is
    missing (the job does not complete by callback) or a URL is not
    ``api_url``'s for the request's run."""
    values = {name: header(headers, name) for name in (
        HEADER_RUN_ID, HEADER_LEASE_TOKEN, HEADER_COMPLETION_URL, HEADER_HEARTBEAT_URL)}
    missing = [name for name, value in values.items() if not value]
    if missing:
        raise InvalidCallback(f"missing header {', '.join(missing)}", status=400)
    run_id = str(values[HEADER_RUN_ID])
    base = f"{api_url.rstrip('/')}/v1/runs/{run_id}"
    for name, path in ((HEADER_COMPLETION_URL, "complete"), (HEADER_HEARTBEAT_URL, "heartbeat")):
        if not _same_url(str(values[name]), f"{base}/{path}"):
            raise InvalidCallback(f"{name} is not {base}/{path}", status=400)
    return CompletionLease(run_id, str(values[HEADER_LEASE_TOKEN]),
                           str(values[HEADER_COMPLETION_URL]),
                           str(values[HEADER_HEARTBEAT_URL]))


def _same_url(given: str, expected: str) -> bool:
    try:
        return canonical_url(given) == canonical_url(expected)
    except ValueError:
        return False


class CompletionReport:
    """Heartbeats and the completion of one run accepted with a 202, through
    the API at ``api_url`` with ``token`` (one covering the job's namespace,
    when the API needs tokens)."""

    def __init__(self, lease: CompletionLease, api_url: str, token: str | None = None, *,
                 client: CronmanClient | None = None) -> None:
        self.lease = lease
        self._api = client or CronmanClient(api_url, token)

    def heartbeat(self, progress: str | None = None, percent: float | None = None) -> bool:
        """Renew the lease (optional progress text and percent); True when a
        cancel was asked: stop, and report ``failed``."""
        ack = self._api.heartbeat(self.lease.run_id, self.lease.lease_token,
                                  progress=progress, percent=percent)
        return bool(ack["cancel_requested"])

    def succeeded(self, result: dict[str, Any] | None = None) -> Run:
        """The run succeeded (``result``: a JSON object ≤ 64 KiB); the run as recorded."""
        return self._api.complete(self.lease.run_id, self.lease.lease_token, "succeeded",
                                  result=result)

    def failed(self, error: str, result: dict[str, Any] | None = None) -> Run:
        """The attempt failed: retried (a new request, a new lease) as the job's
        retry policy says, or the run ends ``failed``."""
        return self._api.complete(self.lease.run_id, self.lease.lease_token, "failed",
                                  result=result, error=error)
