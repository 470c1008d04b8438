"""The ``sqs`` target: one ``SendMessage`` per attempt.

The message body is the target's ``body``; its message attributes are the
target's ``attributes`` (all of type String) plus three of cronman's own:

- ``cronman-job-id``: the job id
- ``cronman-run-id``: the run id (the same across retries; dedupe on it)
- ``cronman-scheduled-for``: the fire time, RFC 3339 in UTC

FIFO queues (the URL ends in ``.fifo``) get ``MessageGroupId`` (the target's
``message_group_id``, default: the job id) and ``MessageDeduplicationId`` =
the run id, so a retried send of the same run within SQS's 5-minute
deduplication window yields one message. A ``message_group_id`` set on a
standard queue is sent as well (fair queues).

boto3 is blocking: each send runs on this target's thread pool, never on the
event loop. Clients are cached per (region, endpoint_url) and created under a
lock (boto3 clients are thread-safe, sessions are not). Credentials come from
boto3's standard chain (environment, config files, instance role). Connect
(3 s) and read (5 s, to the first byte and between bytes) timeouts are
bounded, an answer is read to at most 1 MiB within 10 s
(:mod:`.bounded_answers`), botocore retries a throttled or
failed call once in its ``standard`` mode, and one attempt is cut off after
10 s; the run's own retry policy does the rest. ``result`` is ``{"message_id": ...}`` (plus ``sequence_number`` on
FIFO queues).

Unless ``CRONMAN_ALLOW_PRIVATE_TARGETS`` is true (or no settings are given:
fail closed), every connection goes through the private-address guard
(:mod:`.guarded_sockets`): an ``endpoint_url`` (or any host boto3 connects
to) that resolves to a loopback, private, link-local or metadata address
fails the attempt with a clear error, not retried, and nothing -- no signed
request, no credentials -- is sent there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from cronman.callbacks import bounded_answers
from cronman.callbacks.base import Delivery, Outcome
from cronman.callbacks.bounded_answers import AnswerTooLarge
from cronman.callbacks.guarded_sockets import PrivateAddressRefused, guard_client
from cronman.callbacks.target_fields import SQS_MAX_ATTRIBUTES
from cronman.config import Settings
from cronman.protocol import ATTR_JOB_ID, ATTR_RUN_ID, ATTR_SCHEDULED_FOR
from cronman.timeutil import format_rfc3339

log = logging.getLogger(__name__)
_E = TypeVar("_E", bound=BaseException)


DEFAULT_MAX_WORKERS = 16
DEFAULT_CONNECT_TIMEOUT = 3.0
DEFAULT_READ_TIMEOUT = 5.0
DEFAULT_MAX_ATTEMPTS = 2
# One attempt of an sqs target never takes longer than this (the dispatcher
# gives a target 10 s plus a margin when the target sets no timeout).
DEFAULT_DEADLINE = 10.0

# Errors that the same request will meet again: retrying them is pointless.
_PERMANENT_ERRORS = frozenset(
    {
        "InvalidMessageContents",
        "InvalidParameterValue",
        "InvalidAttributeName",
        "InvalidAttributeValue",
        "MissingParameter",
        "UnsupportedOperation",
        "InvalidAddress",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
    }
)


def is_fifo(queue_url: str) -> bool:
    return queue_url.rstrip("/").endswith(".fifo")


def build_send_kwargs(delivery: Delivery) -> dict[str, Any]:
    """The ``SendMessage`` parameters for one delivery (pure; exposed for tests)."""
    target = delivery.target
    attributes: dict[str, dict[str, str]] = {
        name: {"DataType": "String", "StringValue": value}
        for name, value in (target.get("attributes") or {}).items()
    }
    attributes[ATTR_JOB_ID] = {"DataType": "String", "StringValue": delivery.job_id}
    attributes[ATTR_RUN_ID] = {"DataType": "String", "StringValue": delivery.run_id}
    attributes[ATTR_SCHEDULED_FOR] = {
        "DataType": "String",
        "StringValue": format_rfc3339(delivery.scheduled_for) or "",
    }
    # The trace context where SQS's 10 attributes leave room (traceparent first).
    for name, value in delivery.trace:
        if len(attributes) >= SQS_MAX_ATTRIBUTES or name in attributes:
            break
        attributes[name] = {"DataType": "String", "StringValue": value}
    kwargs: dict[str, Any] = {
        "QueueUrl": target["queue_url"],
        "MessageBody": target["body"],
        "MessageAttributes": attributes,
    }
    group = target.get("message_group_id")
    if is_fifo(target["queue_url"]):
        kwargs["MessageGroupId"] = group or delivery.job_id
        kwargs["MessageDeduplicationId"] = delivery.run_id
    elif group:
        kwargs["MessageGroupId"] = group
    return kwargs


class SqsTarget:
    """Fires ``sqs`` targets with boto3 on a thread pool."""

    kind = "sqs"
    pool_limit: int | None = None  # calls wait for a thread of the executor instead

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        executor: ThreadPoolExecutor | None = None,
        max_workers: int = DEFAULT_MAX_WORKERS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        deadline: float = DEFAULT_DEADLINE,
    ) -> None:
        self._deadline = deadline
        self._guarded = settings is None or not settings.allow_private_targets
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="cronman-sqs"
        )
        self._config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            max_pool_connections=max_workers,
        )
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None
        self._clients: dict[tuple[str, str | None], Any] = {}

    def client(self, region: str, endpoint_url: str | None) -> Any:
        """The cached SQS client for (region, endpoint_url); blocking on first use."""
        key = (region, endpoint_url)
        client = self._clients.get(key)
        if client is None:
            with self._lock:
                client = self._clients.get(key)
                if client is None:
                    if self._session is None:
                        self._session = boto3.session.Session()
                    client = self._session.client(
                        "sqs", region_name=region, endpoint_url=endpoint_url, config=self._config
                    )
                    if self._guarded:
                        guard_client(client)
                    else:
                        bounded_answers.install(client)
                    self._clients[key] = client
        return client

    def _send(self, delivery: Delivery) -> dict[str, Any]:
        target = delivery.target
        client = self.client(target["region"], target.get("endpoint_url"))
        response: dict[str, Any] = client.send_message(**build_send_kwargs(delivery))
        return response

    async def deliver(self, delivery: Delivery) -> Outcome:
        """Send one message; never raises for a delivery failure."""
        loop = asyncio.get_running_loop()
        try:
            response = await asyncio.wait_for(
                loop.run_in_executor(self._executor, self._send, delivery), self._deadline
            )
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            return Outcome(
                False,
                error=f"SQS send timed out after {self._deadline:g}s (the message may still arrive)",
            )
        except Exception as exc:
            return _failure(exc, delivery)
        result: dict[str, Any] = {"message_id": response.get("MessageId")}
        if response.get("SequenceNumber"):
            result["sequence_number"] = response["SequenceNumber"]
        return Outcome(True, result)

    def hand_back(self) -> None:
        """Nothing outlives a delivery here."""

    async def close(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            try:
                client.close()
            except Exception:  # closing is best effort
                pass
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)


def _refusal(exc: BaseException) -> PrivateAddressRefused | None:
    """The guard's refusal behind a botocore error, if that is what it is."""
    return _behind(exc, PrivateAddressRefused)


def _behind(exc: BaseException, cls: type[_E]) -> _E | None:
    """The ``cls`` error behind a botocore error (or ``exc`` itself), if any."""
    seen: list[BaseException] = []
    pending: list[Any] = [exc]
    while pending and len(seen) < 10:
        current = pending.pop()
        if not isinstance(current, BaseException) or current in seen:
            continue
        if isinstance(current, cls):
            return current
        seen.append(current)
        kwargs = getattr(current, "kwargs", None)  # botocore keeps the cause here
        if isinstance(kwargs, dict):
            pending.append(kwargs.get("error"))
        pending += [current.__cause__, current.__context__]
    return None


def _failure(exc: BaseException, delivery: Delivery) -> Outcome:
    queue = delivery.target.get("queue_url")
    refused = _refusal(exc)
    if refused is not None:
        return Outcome(False, error=f"SQS endpoint {refused}", retryable=False)
    too_large = _behind(exc, AnswerTooLarge)
    if too_large is not None:
        return Outcome(False, error=f"SQS {too_large} (queue {queue})")
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code") or "Unknown"
        message = error.get("Message") or str(exc)
        short = code.rsplit(".", 1)[-1]
        if short in ("NonExistentQueue", "QueueDoesNotExist"):
            return Outcome(False, error=f"SQS queue does not exist: {queue} ({code})")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return Outcome(
            False,
            {"sqs_error_code": code, **({"http_status": status} if status else {})},
            f"SQS {code}: {message} (queue {queue})",
            retryable=short not in _PERMANENT_ERRORS,
        )
    if isinstance(exc, NoCredentialsError):
        return Outcome(False, error="no AWS credentials found (boto3 credential chain)")
    if isinstance(exc, (ConnectTimeoutError, ReadTimeoutError)):
        return Outcome(False, error=f"SQS timeout: {exc}")
    if isinstance(exc, EndpointConnectionError):
        return Outcome(False, error=f"cannot reach the SQS endpoint: {exc}")
    if isinstance(exc, BotoCoreError):
        return Outcome(False, error=f"SQS error: {exc}")
    if isinstance(exc, ValueError):  # e.g. an endpoint_url boto3 refuses
        return Outcome(False, error=f"invalid SQS target: {exc}", retryable=False)
    log.warning("sqs target: unexpected error for %s", queue, exc_info=exc)
    return Outcome(False, error=f"unexpected error: {type(exc).__name__}: {exc}")
