"""The test-started Patroni cluster (``cronman_bench.patroni``, shared with the
benchmark's failover scenario) and the skip when it cannot run here."""

from __future__ import annotations

import pytest

from cronman_bench.patroni import PG_BIN, Member, PatroniCluster, unavailable

__all__ = ["PG_BIN", "Member", "PatroniCluster", "require_patroni"]


def require_patroni() -> None:
    """Skip unless patroni, etcd and PostgreSQL 15 are installed (ops/setup --dev)
    and this runs as root or postgres."""
    why = unavailable()
    if why:
        pytest.skip(why)
