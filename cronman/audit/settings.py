"""Settings of the audit export and queries, from ``CRONMAN_AUDIT_*`` variables.

A CLI flag of the same name wins over the environment. Every default is a
named constant below.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

DEFAULT_AUDIT_URL = "./cronman-audit"
DEFAULT_SLOT = "cronman_audit"
DEFAULT_PUBLICATION = "cronman_audit"
DEFAULT_FLUSH_SECONDS = 1.0
DEFAULT_BATCH_CHANGES = 50_000
# Warn when the slot holds back more WAL than this (bytes): the database's
# disk keeps every WAL segment the slot has not confirmed.
DEFAULT_SLOT_WARN_BYTES = 1024 ** 3
DEFAULT_LOCK_RETRY_SECONDS = 2.0
# The tables whose changes are exported (scheduled_jobs: every daily partition;
# token_history: who created and revoked API tokens, never a secret or hash).
AUDITED_TABLES = ("jobs", "job_history", "scheduled_jobs", "token_history")


@dataclass(frozen=True)
class AuditSettings:
    """Where and how the change stream is exported (README, "Audit trail")."""

    # s3://bucket/prefix, file:///path, or a plain path (a local directory).
    url: str = DEFAULT_AUDIT_URL
    # S3-compatible endpoint (MinIO, moto...); unset: AWS (or AWS_ENDPOINT_URL).
    s3_endpoint_url: str | None = None
    slot: str = DEFAULT_SLOT
    publication: str = DEFAULT_PUBLICATION
    flush_seconds: float = DEFAULT_FLUSH_SECONDS
    batch_changes: int = DEFAULT_BATCH_CHANGES
    slot_warn_bytes: int = DEFAULT_SLOT_WARN_BYTES
    lock_retry_seconds: float = DEFAULT_LOCK_RETRY_SECONDS

    def __post_init__(self) -> None:
        for name in ("slot", "publication"):
            value = getattr(self, name)
            if not value.replace("_", "").isalnum() or not value.islower() or len(value) > 63:
                raise ValueError(f"CRONMAN_AUDIT_{name.upper()} must be lower-case letters, "
                                 "digits and _ (at most 63)")
        if self.flush_seconds <= 0:
            raise ValueError("CRONMAN_AUDIT_FLUSH_SECONDS must be > 0")
        if self.batch_changes < 1:
            raise ValueError("CRONMAN_AUDIT_BATCH_CHANGES must be >= 1")
        if self.slot_warn_bytes < 1:
            raise ValueError("CRONMAN_AUDIT_SLOT_WARN_BYTES must be >= 1")
        if self.lock_retry_seconds <= 0:
            raise ValueError("CRONMAN_AUDIT_LOCK_RETRY_SECONDS must be > 0")

    @classmethod
    def from_env(cls, overrides: Mapping[str, Any] | None = None,
                 environ: Mapping[str, str] | None = None) -> AuditSettings:
        """Settings from ``CRONMAN_AUDIT_<NAME>``; ``overrides`` (CLI flags) win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"CRONMAN_AUDIT_{f.name.upper()}")
            if raw is None or raw == "":
                continue
            kind = str(f.type)
            try:
                values[f.name] = (int(raw) if kind == "int" else
                                  float(raw) if kind == "float" else raw)
            except ValueError:
                raise ValueError(f"CRONMAN_AUDIT_{f.name.upper()}: cannot read {raw!r} "
                                 f"as {kind}") from None
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls(**values)
