"""Fixtures of the multi-process cluster tests.

Every test gets its own scratch PostgreSQL database on the machine's server
(migrated), its own redis-server on a random loopback port (so it can be
killed and restarted), a private nginx receiver, and a ``Cluster`` that
starts real ``cronman scheduler`` processes and kills them by PID. Whatever
still runs at the end of a test is stopped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.harness import Cluster, Fires, node_env
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes
from tests.support.redis_servers import RedisProcess, redis_servers


@pytest.fixture
def cluster_db() -> Iterator[str]:
    """A migrated scratch database on the machine's PostgreSQL."""
    with migrated_pg_database("cronman_cluster") as url:
        yield url


@pytest.fixture
def cluster_redis() -> Iterator[RedisProcess]:
    """A private redis-server (killable, restartable on the same port)."""
    with redis_servers(1) as servers:
        yield servers[0]


@pytest.fixture
def fires(tmp_path) -> Iterator[Fires]:
    f = Fires(tmp_path / "nginx").start()
    try:
        yield f
    finally:
        f.cleanup()


@pytest.fixture
def procs(tmp_path) -> Iterator[Processes]:
    with Processes(tmp_path) as p:
        yield p


@pytest.fixture
def cluster(procs, cluster_db, cluster_redis) -> Iterator[Cluster]:
    """Scheduler nodes (none started yet) on the scratch database and private Redis."""
    c = Cluster(procs, cluster_db, cluster_redis.url, node_env())
    try:
        yield c
    finally:
        for node in c.running():
            node.proc.kill()
