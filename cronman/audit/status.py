"""The audit trail's state as the API reports it (``GET /v1/audit``): whether
it can run here, and the replication slot's lag."""

from __future__ import annotations

from typing import Any

from cronman.audit.settings import AuditSettings
from cronman.audit.slot import slot_status
from cronman.store import SqlStore
from cronman.store.base import Store


def audit_status(store: Store) -> dict[str, Any]:
    settings = AuditSettings.from_env()
    if not isinstance(store, SqlStore) or store.dialect != "postgresql":
        return {"enabled": False, "slot": settings.slot,
                "reason": "the audit export needs PostgreSQL"}
    with store.db.read() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        cur = raw.cursor()
        try:
            status = slot_status(cur, settings.slot, settings.slot_warn_bytes)
        finally:
            cur.close()
    return {"enabled": True, **status}
