"""The OpenAPI description of the audit trail's calls (merged by ``openapi``)."""

from __future__ import annotations

from typing import Any

from cronman.api.openapi.parts import (
    CURSOR_TEXT,
    LIMIT,
    STRING,
    TIME,
    nullable,
    obj,
    ok,
    op,
    path_param,
    query,
    ref,
)
from cronman.store.history import HISTORY_CURSOR_PATTERN
from cronman.vocabulary import JOB_ACTIONS

_JSON_OBJECT = nullable({"type": "object"})
_INT = nullable({"type": "integer"})


def schemas() -> dict[str, Any]:
    entry = obj({
        "id": STRING, "job_id": STRING, "namespace": STRING, "job_name": STRING,
        "action": {"type": "string", "enum": [a.value for a in JOB_ACTIONS]},
        "job_version": {"type": "integer"},
        "actor": obj({"token_id": nullable(STRING), "name": STRING}, ("token_id", "name")),
        "request_id": nullable(STRING), "at": TIME,
        "changed": {"type": "array", "items": STRING},
        "before": _JSON_OBJECT, "after": _JSON_OBJECT, "details": _JSON_OBJECT,
    }, ("id", "job_id", "namespace", "job_name", "action", "job_version", "actor",
        "request_id", "at", "changed", "before", "after", "details"))
    status = obj({
        "enabled": {"type": "boolean"}, "slot": STRING, "exists": {"type": "boolean"},
        "reason": STRING, "plugin": nullable(STRING), "active": {"type": "boolean"},
        "exporter": nullable(STRING), "wal_status": nullable(STRING),
        "current_lsn": nullable(STRING), "confirmed_lsn": nullable(STRING),
        "restart_lsn": nullable(STRING), "lag_bytes": _INT, "retained_wal_bytes": _INT,
        "safe_wal_size": _INT, "max_slot_wal_keep_size": nullable(STRING),
        "warn_bytes": {"type": "integer"}, "warning": nullable(STRING),
    }, ("enabled", "slot"))
    return {
        "HistoryEntry": entry,
        "HistoryList": obj({"items": {"type": "array", "items": ref("HistoryEntry")},
                             "next_cursor": nullable(STRING)}, ("items", "next_cursor")),
        "AuditStatus": status,
    }


def paths() -> dict[str, Any]:
    return {
        "/v1/jobs/{job_id}/history": {
            "get": op("jobHistory", "Who changed a job, when, through which request "
                       "(newest first; a deleted job's too)",
                       ok("200", "HistoryList", "a page of changes"), "400 403 404",
                       [path_param("job_id"), LIMIT,
                        query("cursor", {"type": "string", "pattern": HISTORY_CURSOR_PATTERN},
                               CURSOR_TEXT)]),
        },
        "/v1/audit": {
            "get": op("auditStatus", "The audit export's replication slot and its lag",
                       ok("200", "AuditStatus", "the slot"), ""),
        },
    }
