"""Validation and normalisation of target objects (SPEC §3, "Targets").

The objects are declared in :mod:`cronman.callbacks.target_fields` (which
also gives their OpenAPI schemas). Pure, no I/O: the API calls :func:`validate_target` on every job it
accepts and stores the normalised object it returns (defaults filled in), so
the targets only ever see normalised objects. A ``ValidationError`` names the
offending field *relative to the target object* (``url``, ``headers.X-Foo``,
``command[2]``); the caller prefixes it (``target.url``, ``dead_letter.url``).
Validating a normalised object again returns an equal object.

Decisions this module makes (and the README documents):

- http: credentials in the URL (``user:pass@host``) are refused -- put them in
  an ``Authorization`` header, which the API masks. Hosts written as
  non-canonical IPv4 numbers (``2130706433``, ``0x7f.1``) are refused.
  Headers that the client owns are refused: ``Cronman-*`` (set by cronman on
  every request), ``Host`` and the framing / hop-by-hop headers
  (``Content-Length``, ``Transfer-Encoding``, ``Connection``, ...), since
  letting them through would allow request smuggling towards the receiver.
- Private-address (SSRF) checks depend on the node's settings, so they are
  not made here but when the request is sent (``cronman.callbacks.http``).
- sqs: the body must be non-empty (SQS refuses empty messages) and may hold
  only the characters SQS accepts. Body plus attributes must fit in 256 KiB,
  the size every queue accepts (a queue configured for more is still held to
  256 KiB). cronman adds three attributes of its own, so a target may set at
  most 7 of the 10 SQS allows; names starting with ``cronman-``, ``AWS.`` or
  ``Amazon.`` are refused.
- container: validated here; placement and running belong to the worker agent.
  ``selector`` is a map of agent labels (an agent must carry every one);
  ``network`` is ``none`` (default: the container has loopback only) or
  ``host``; ``user`` is ``root``, ``nobody``, ``UID`` or ``UID:GID`` (null:
  the agent's default non-root user, 65534), numeric because the agent does
  not read the image's ``/etc/passwd``. What a namespace token may ask for
  (root, the host's network) is its namespace's host policy grant, checked by
  the API after this (``cronman.api.host_policies``) and by every agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cronman.callbacks.target_fields import TARGET
from cronman.vocabulary import TARGET_KINDS


def validate_target(spec: Any, *, allowed_kinds: Sequence[str] = TARGET_KINDS) -> dict[str, Any]:
    """Validate a target object and return its normalised form (defaults filled in).

    Raises ``ValidationError`` whose ``field`` is relative to the target object.
    """
    out: dict[str, Any] = TARGET.restricted(allowed_kinds).check(spec)
    return out

