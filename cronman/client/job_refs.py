"""Naming a job to the client: its id, ``namespace/name``, or a name in a namespace.

- A UUID-shaped reference is an id: it goes to the API as it is (no lookup).
- Without a namespace given, one with a ``/`` is ``namespace/name``, split at
  the first ``/`` (namespaces hold no ``/``, names may: ``billing/reports/daily``
  is ``reports/daily`` in ``billing``).
- With a namespace given (``-n billing``), a reference starting with that
  namespace and a ``/`` is split the same way; any other is the whole name in
  that namespace: ``-n billing reports/daily`` is ``reports/daily`` in
  ``billing``, and so is ``-n billing billing/reports/daily``.
- A bare name is looked up in ``namespace`` when one is given, else in every
  namespace the token may read, where it must be unique.

A name costs one ``GET /v1/jobs?name=`` (the API's exact-name filter); a job
that is not there is a ``NotFoundError`` naming what was asked ("no job named
daily-digest in namespace examples"), never the bare 404 of a path; one that
no job could be named is an ``InvalidRequest`` whose field is ``job``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from cronman.client.errors import InvalidRequest, NotFoundError

JOB_ID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
                       r"-[0-9a-fA-F]{12}$")
# How many namespaces an ambiguous bare name lists.
AMBIGUOUS_SHOWN = 5


def is_job_id(ref: str) -> bool:
    """Whether ``ref`` is shaped like a job id (a UUID)."""
    return JOB_ID_RE.match(ref) is not None


def split_ref(ref: str, namespace: str | None = None) -> tuple[str | None, str]:
    """(namespace, name) a name reference means (namespace None: any the token may read).

    ``namespace`` (``-n``) is where the job lives: ``ref`` is then its name,
    unless it starts with ``namespace/`` (names may hold ``/``: see the module
    docstring). Without one, ``ref`` is ``namespace/name`` or a bare name.
    """
    ns, sep, name = ref.partition("/")
    if not sep or (namespace is not None and ns != namespace):
        ns, name = namespace or "", ref
    if not name:
        raise InvalidRequest(400, "invalid", f"{ref!r} names no job: give a job id, "
                             "namespace/name, or a name and its namespace", field="job")
    return ns or None, name


def resolve_job(request: Callable[..., Any], ref: str, namespace: str | None = None) -> str:
    """The id of the job ``ref`` names (see the module docstring), through ``request``."""
    ref = ref.strip()
    if is_job_id(ref):
        return ref
    ns, name = split_ref(ref, namespace)
    query = [("name", name), ("limit", str(AMBIGUOUS_SHOWN + 1))]
    if ns is not None:
        query.append(("namespace", ns))
    try:
        items = request("GET", "/v1/jobs", query=query)["items"]
    except InvalidRequest as exc:  # a name no job can have: the reference is at fault
        if exc.field != "name":
            raise
        raise InvalidRequest(exc.status, exc.code, f"{ref!r} names no job: {exc.message}",
                             field="job") from None
    if len(items) == 1:
        return str(items[0]["id"])
    if not items:
        where = f"in namespace {ns}" if ns is not None else "in any namespace"
        raise NotFoundError(404, "not_found", f"no job named {name} {where}")
    shown = ", ".join(str(j["namespace"]) for j in items[:AMBIGUOUS_SHOWN])
    more = ", …" if len(items) > AMBIGUOUS_SHOWN else ""
    raise InvalidRequest(400, "ambiguous", f"jobs named {name} are in several namespaces "
                         f"({shown}{more}): give namespace/name", field="job")
