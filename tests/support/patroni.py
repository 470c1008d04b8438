"""The test-started Patroni cluster (``cronman_bench.patroni``, shared with the
benchmark's failover scenario) and the skip when it cannot run here."""

from __future__ import annotations

import os
import pwd

import pytest

from cronman_bench.patroni import PG_BIN, Member, PatroniCluster

__all__ = ["PG_BIN", "Member", "PatroniCluster", "require_patroni"]


def require_patroni() -> None:
    """Skip unless patroni, etcd and PostgreSQL 15 are installed (ops/setup --dev)."""
    missing = [p for p in ("/usr/bin/patroni", "/usr/bin/etcd", f"{PG_BIN}/postgres")
               if not os.path.exists(p)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (ops/setup --dev installs them)")
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != "postgres":
        pytest.skip("the Patroni cluster runs as postgres: needs root (runuser) or postgres")
