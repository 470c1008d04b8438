"""`cronman worker` end to end on `cronman standalone` (SQLite): the cases of
tests/e2e/worker_cases.py."""

from __future__ import annotations

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
from tests.support.processes import Processes

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("worker-sqlite")
    with Processes(logs) as procs:
        node = procs.standalone(f"sqlite:///{logs / 'cronman.db'}")
        yield Cluster(node.url, procs)  # type: ignore[attr-defined]
