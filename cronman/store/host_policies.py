"""Per-namespace host policies (``/v1/namespaces/{namespace}/host-policy``).

A row holds only the keys an admin set (``host_policy.grant_keys``); the
caller reads them over the operator's live default (``host_policy.over``,
``CRONMAN_HOST_POLICY``); a namespace without a row has that default. ``get`` runs on every job write of a namespace token and
on every container run a node places, so its answers are cached for
``CACHE_SECONDS`` per Store; a grant set through the same Store takes effect
at once, through another process within ``CACHE_SECONDS``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, select

from cronman import host_policy
from cronman.store.engine import Database, Tx
from cronman.store.tables import host_policies
from cronman.timeutil import utcnow

CACHE_SECONDS = 2.0
_CACHE_MAX = 4096


class SqlHostPolicies:
    """The namespaces' host policy grants."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def get(self, namespace: str) -> dict[str, Any] | None:
        """The keys the namespace's grant sets, or None when it has none (the
        default applies)."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(namespace)
        if hit is not None and hit[0] > now:
            return dict(hit[1]) if hit[1] is not None else None
        with self._db.read() as conn:
            row = conn.execute(select(host_policies.c.policy)
                               .where(host_policies.c.namespace == namespace)).first()
        grant = None if row is None else host_policy.grant_keys(row[0])
        self._remember(namespace, grant)
        return dict(grant) if grant is not None else None

    def put(self, namespace: str, grant: Mapping[str, Any], *, by: str | None) -> None:
        """Set the namespace's grant: the keys given (``ValidationError`` for others)."""
        policy = host_policy.grant_keys(dict(grant))
        values: dict[str, Any] = {"policy": policy, "updated_at": utcnow(),
                                  "updated_by": by}

        def fn(tx: Tx) -> None:
            changed = tx.conn.execute(host_policies.update()
                                      .where(host_policies.c.namespace == namespace)
                                      .values(**values)).rowcount
            if not changed:
                tx.conn.execute(host_policies.insert().values(namespace=namespace, **values))

        self._db.write(fn)
        self._remember(namespace, policy)

    def delete(self, namespace: str) -> bool:
        """Drop the namespace's grant (the default applies again)."""
        deleted = self._db.write(lambda tx: tx.conn.execute(
            delete(host_policies).where(host_policies.c.namespace == namespace)).rowcount)
        self._remember(namespace, None)
        return bool(deleted)

    def _remember(self, namespace: str, policy: dict[str, Any] | None) -> None:
        with self._lock:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[namespace] = (time.monotonic() + CACHE_SECONDS, policy)
