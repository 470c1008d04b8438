"""Helpers for services that receive cronman's callbacks (light: no server dependency).

- :class:`CallbackReceiver`: verify the signature (your namespace's key; bound
  to the job id, run id, fire time, the URL your jobs call -- given as
  ``url=``, required -- and the body; with the replay window), deduplicate
  on the run id, handle -- as a plain function (``handle``), a WSGI
  middleware (``wsgi``) or a Flask view decorator (``flask``);
- :func:`verify_callback` / :func:`verify_signature`: the checks alone;
  :func:`canonical_url`: the form of a URL that signatures cover;
- :func:`sqs_callback`: the callback in an SQS message's attributes;
- :func:`completion_lease`, :class:`CompletionReport`: a run answered with
  a 202 (``"completion": "callback"``), heartbeated and completed later;
- :class:`MemoryDeduplicator`, :class:`RedisDeduplicator`,
  :func:`process_once`: run-id deduplication.
"""

from __future__ import annotations

from cronman.receiver.callback import (
    Callback,
    InvalidCallback,
    header,
    sqs_callback,
    verify_callback,
)
from cronman.receiver.completion import CompletionLease, CompletionReport, completion_lease
from cronman.receiver.dedup import (
    Claim,
    Deduplicator,
    MemoryDeduplicator,
    RedisDeduplicator,
    process_once,
)
from cronman.receiver.receiver import ENVIRON_KEY, CallbackReceiver, Reply, UrlSource
from cronman.signing import DEFAULT_TOLERANCE, canonical_url, verify_signature

__all__ = [
    "DEFAULT_TOLERANCE",
    "ENVIRON_KEY",
    "Callback",
    "CallbackReceiver",
    "Claim",
    "CompletionLease",
    "CompletionReport",
    "Deduplicator",
    "InvalidCallback",
    "MemoryDeduplicator",
    "RedisDeduplicator",
    "Reply",
    "UrlSource",
    "canonical_url",
    "completion_lease",
    "header",
    "process_once",
    "sqs_callback",
    "verify_callback",
    "verify_signature",
]
