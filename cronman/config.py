"""Settings: one typed, validated object per process, read from CRONMAN_* variables.

A CLI flag of the same name wins over the environment (``Settings.from_env(overrides)``).
Every default is a named constant below.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

DEFAULT_DATABASE_URL = "sqlite:///cronman.db"
DEFAULT_REPLICAS = 2
DEFAULT_HEARTBEAT_TTL = 30.0
DEFAULT_HISTORY_RETENTION_DAYS = 45
DEFAULT_API_BIND = "127.0.0.1:8080"
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_SYNC_POLL_INTERVAL = 2.0
DEFAULT_MAX_IN_FLIGHT = 2000
DEFAULT_PARTITIONS_AHEAD_DAYS = 7
DEFAULT_REDIS_KEY_PREFIX = "cronman"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Settings:
    """Configuration of one cronman process (see README, "Configuration")."""

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    node_id: str = field(default_factory=default_node_id)
    replicas: int = DEFAULT_REPLICAS
    heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL
    history_retention_days: int = DEFAULT_HISTORY_RETENTION_DAYS
    signing_secret: str | None = None
    allow_private_targets: bool = False
    api_bind: str = DEFAULT_API_BIND
    # Tuning knobs, not part of the public contract (documented in README).
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    sync_poll_interval: float = DEFAULT_SYNC_POLL_INTERVAL
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    partitions_ahead_days: int = DEFAULT_PARTITIONS_AHEAD_DAYS
    redis_key_prefix: str = DEFAULT_REDIS_KEY_PREFIX

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("CRONMAN_REPLICAS must be >= 1")
        if self.heartbeat_ttl <= 0:
            raise ValueError("CRONMAN_HEARTBEAT_TTL must be > 0")
        if self.history_retention_days < 1:
            raise ValueError("CRONMAN_HISTORY_RETENTION_DAYS must be >= 1")
        if self.lease_seconds <= 0:
            raise ValueError("CRONMAN_LEASE_SECONDS must be > 0")
        if ":" not in self.api_bind:
            raise ValueError("CRONMAN_API_BIND must be host:port")

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def redis_urls(self) -> list[str]:
        if not self.redis_url:
            return []
        if self.redis_url.startswith("redis+sentinel://"):
            return [self.redis_url]  # one Sentinel URL lists several sentinel hosts
        return [u.strip() for u in self.redis_url.split(",") if u.strip()]

    @classmethod
    def from_env(
        cls,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        **defaults: Any,
    ) -> Settings:
        """Settings from ``CRONMAN_<NAME>`` variables; ``overrides`` (CLI flags) win.

        ``defaults`` replace the built-in defaults (``standalone`` allows private
        targets by default, for instance) but not the environment.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = dict(defaults)
        for f in fields(cls):
            raw = env.get(f"CRONMAN_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _convert(f.name, f.type, raw)
        for name, value in (overrides or {}).items():
            if value is not None:
                values[name] = value
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def _convert(name: str, type_name: Any, raw: str) -> Any:
    t = str(type_name)
    try:
        if t.startswith("bool"):
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(raw)
        if t.startswith("int"):
            return int(raw)
        if t.startswith("float"):
            return float(raw)
    except ValueError:
        raise ValueError(f"CRONMAN_{name.upper()}: cannot read {raw!r} as {t}") from None
    if t.startswith("str | None"):
        return raw or None
    return raw
