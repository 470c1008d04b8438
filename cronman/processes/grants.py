"""The namespaces' host policy grants, as the scheduler nodes read them.

A node stamps each container run it places with its namespace's policy (the
keys an admin token granted over the operator's default, ``CRONMAN_HOST_POLICY``:
``host_policy.over``): ``cronman.callbacks.container`` refuses a run that asks
for more and offers runs to ``process`` agents only when it allows that
runtime. ``cronman standalone`` (a single-user setup) allows
the process runtime by default while the API needs no token (auth off, or
open before the first token): every caller is then the operator. Once tokens
are required, a namespace runs on it only with a grant that says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from cronman import host_policy
from cronman.host_policy import HostPolicy
from cronman.store.base import Store

Grants = Callable[[str], HostPolicy]


def store_grants(store: Store, default: HostPolicy,
                 open_default: Callable[[], HostPolicy | None] | None = None) -> Grants:
    """``namespace -> grant`` from ``store``; ``open_default`` may replace the
    default for the moment (standalone, while no token is needed)."""

    def grant(namespace: str) -> HostPolicy:
        own = store.host_policies.get(namespace)
        override = open_default() if open_default is not None else None
        return host_policy.over(own, override if override is not None else default)

    return grant


def standalone_open_default(default: HostPolicy, auth_required: Callable[[], bool]
                            ) -> Callable[[], HostPolicy | None]:
    """The default of ``cronman standalone``: the process runtime allowed while
    the API needs no token."""

    def current() -> HostPolicy | None:
        return None if auth_required() else dataclasses.replace(default, process=True)

    return current
