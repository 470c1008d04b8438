"""`cronman worker` end to end on `cronman api` and a `cronman scheduler` node
(PostgreSQL, Redis), with API tokens (the workers' of the jobs' namespace only): the
cases of tests/e2e/worker_cases.py, and a worker whose token is another namespace's."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from tests.e2e.worker_cases import (  # noqa: F401  (the cases and their fixture, collected here)
    Cluster,
    cluster,
    test_a_cancel_reaches_the_command_as_sigterm,
    test_a_fired_run_runs_its_command_and_the_exit_and_output_are_recorded,
    test_a_runs_timeout_ends_it_and_its_command,
    test_a_sigkilled_workers_run_comes_back_as_attempt_2_with_one_success,
    test_a_worker_stopped_past_its_lease_is_refused_and_the_rerun_stands,
    test_an_idle_worker_is_the_capacity_a_job_asks_for,
    test_replace_cancels_the_held_run_and_its_command,
    test_the_clients_worker_runs_a_python_handler_with_progress,
)
from tests.support.api import running_api
from tests.support.databases import migrated_pg_database, temporary_redis_db
from tests.support.processes import CRONMAN, Processes, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("worker-postgres")
    with Processes(logs) as procs, migrated_pg_database() as db, \
            temporary_redis_db() as redis:
        procs.scheduler(db, "n1", redis_url=redis)
        admin = token(db, "--admin")
        with running_api(db, threads=8, extra_env={"CRONMAN_REDIS_URL": redis},
                         log_path=logs / "api.log") as url:
            made = Cluster(url, procs, admin_token=admin)
            made.worker_token = token_of(made, "default")
            yield made


def token(db: str, *scope: str) -> str:
    """A new API token (``cronman tokens create``)."""
    out = subprocess.run([*CRONMAN, "tokens", "create", *scope, "--json", "--database-url", db],
                         capture_output=True, text=True, env=clean_env(), timeout=60,
                         check=True)
    return str(json.loads(out.stdout)["token"])


def test_a_worker_with_another_namespaces_token_stops_with_the_refusal(backend):
    other = token_of(backend, "other")  # a claim on namespace default: 403
    worker = backend.worker("q-refused", "w-other", "true", token=other)
    try:
        assert worker.wait(20) == 1
    finally:
        backend.workers.remove(worker)
    assert "HTTP 403" in worker.log_text()


def token_of(where: Cluster, namespace: str) -> str:
    return where.api.create_token(namespaces=[namespace], name=f"worker-{namespace}")["token"]
