"""One callback from cronman, read and checked: an HTTP request or an SQS message.

``verify_callback`` checks an HTTP callback's signature (bound to its job
id, run id, fire time, URL and body, with the replay window:
:mod:`cronman.signing`) and reads its ``Cronman-*`` headers;
``sqs_callback`` reads the ``cronman-*`` attributes of an SQS message as
boto3 returns it. Both give a :class:`Callback` or raise
:class:`InvalidCallback` saying what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cronman.protocol import (
    ATTR_JOB_ID,
    ATTR_RUN_ID,
    ATTR_SCHEDULED_FOR,
    HEADER_ATTEMPT,
    HEADER_JOB_ID,
    HEADER_RUN_ID,
    HEADER_SCHEDULED_FOR,
    HEADER_SIGNATURE,
)
from cronman.signing import DEFAULT_TOLERANCE, Secret, verify_signature

Headers = Mapping[str, str] | Iterable[tuple[str, str]]


class InvalidCallback(Exception):
    """Not a genuine, fresh cronman callback; ``reason`` says why (safe to log)."""

    def __init__(self, reason: str, status: int = 401) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Callback:
    """What cronman says about one delivery. ``run_id`` is the same across retries
    and re-dispatches of a run: deduplicate on it."""

    job_id: str
    run_id: str
    scheduled_for: str
    attempt: int | None
    body: bytes


def header(headers: Headers, name: str) -> str | None:
    """The value of a header, by case-insensitive name (None when absent).

    ``headers`` may be a dict, any object with ``items()`` (Flask's and
    werkzeug's headers), or a list of (name, value) pairs.
    """
    items = headers.items() if hasattr(headers, "items") else headers
    low = name.lower()
    for key, value in items:
        if isinstance(key, str) and key.lower() == low:
            return str(value)
    return None


def verify_callback(secret: Secret | Sequence[Secret] | None, headers: Headers, body: bytes,
                    *, url: str | None, tolerance: float = DEFAULT_TOLERANCE,
                    now: float | None = None) -> Callback:
    """The callback in an HTTP request, once its signature is checked.

    ``body`` must be the raw request body. ``secret`` (one, or several during
    a rotation) is your namespace's signing key (``GET
    /v1/namespaces/{ns}/signing-key``); ``None`` accepts unsigned callbacks
    -- only for a deployment that signs nothing. ``url`` is the URL cronman
    calls, the one your jobs' targets hold (behind a proxy: your public URL),
    in any spelling: its canonical form is compared
    (:func:`cronman.signing.canonical_url`; ``ValueError`` for a URL that is
    not http(s)). Give your own, never one rebuilt from the request's
    ``Host`` header, which the sender chooses. The signature must cover this
    request's job id, run id, fire time, that URL and the body, and be no
    older (or newer) than ``tolerance`` seconds.
    """
    job_id = header(headers, HEADER_JOB_ID)
    run_id = header(headers, HEADER_RUN_ID)
    scheduled_for = header(headers, HEADER_SCHEDULED_FOR)
    missing = [n for n, v in ((HEADER_JOB_ID, job_id), (HEADER_RUN_ID, run_id),
                              (HEADER_SCHEDULED_FOR, scheduled_for)) if not v]
    if secret is not None:
        if url is None:
            raise ValueError("verifying a signature needs the URL cronman calls (url=)")
        signature = header(headers, HEADER_SIGNATURE)
        if not signature:
            raise InvalidCallback(f"no {HEADER_SIGNATURE} header")
        if missing:
            raise InvalidCallback(f"missing header {', '.join(missing)}", status=400)
        assert job_id and run_id and scheduled_for
        if not verify_signature(secret, signature, body, job_id=job_id, run_id=run_id,
                                scheduled_for=scheduled_for, url=url, tolerance=tolerance,
                                now=now):
            raise InvalidCallback("bad or stale signature")
    if missing:
        raise InvalidCallback(f"missing header {', '.join(missing)}", status=400)
    assert job_id and run_id and scheduled_for
    return Callback(job_id, run_id, scheduled_for, _attempt(header(headers, HEADER_ATTEMPT)),
                    body)


def sqs_callback(message: Mapping[str, Any]) -> Callback:
    """The callback in an SQS message (a ``receive_message`` item).

    Receive with ``MessageAttributeNames=["All"]`` (or the three ``cronman-*``
    names). SQS messages carry no signature: who may send to the queue is up
    to its IAM policy.
    """
    attributes = message.get("MessageAttributes") or {}

    def attr(name: str) -> str | None:
        value = attributes.get(name)
        if not isinstance(value, Mapping) or value.get("DataType") != "String":
            return None
        text = value.get("StringValue")
        return text if isinstance(text, str) and text else None

    job_id, run_id, scheduled_for = attr(ATTR_JOB_ID), attr(ATTR_RUN_ID), attr(ATTR_SCHEDULED_FOR)
    missing = [n for n, v in ((ATTR_JOB_ID, job_id), (ATTR_RUN_ID, run_id),
                              (ATTR_SCHEDULED_FOR, scheduled_for)) if v is None]
    if missing:
        raise InvalidCallback(f"missing message attribute {', '.join(missing)}", status=400)
    assert job_id and run_id and scheduled_for
    body = message.get("Body") or ""
    return Callback(job_id, run_id, scheduled_for, None,
                    body.encode("utf-8") if isinstance(body, str) else bytes(body))


def _attempt(raw: str | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None
