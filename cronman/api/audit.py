"""``GET /v1/audit``: the audit export's replication slot and its lag, for the dashboard.

Read from PostgreSQL itself (``pg_replication_slots``), not from the
exporter: a stopped or stuck exporter is exactly when the lag must show.
``warning`` is set when the slot holds back more WAL than
``CRONMAN_AUDIT_SLOT_WARN_BYTES`` or is close to ``max_slot_wal_keep_size``.
On SQLite (``cronman standalone``) there is no export: ``enabled`` is false.
"""

from __future__ import annotations

from flask import Blueprint, Response

from cronman.api.common import ApiView, json_response
from cronman.api.context import api_context

bp = Blueprint("audit", __name__, url_prefix="/v1")


class AuditStatus(ApiView):
    def get(self) -> Response:
        from cronman.audit.status import audit_status

        return json_response(audit_status(api_context().store))


bp.add_url_rule("/audit", view_func=AuditStatus.as_view("status"))
