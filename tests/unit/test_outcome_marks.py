"""Outcome marks: their encoding, and the marker that batches them to the coordinator."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from cronman.coordination.memory import InProcessCoordinator
from cronman.models import RunUpdate
from cronman.scheduler.record.outcome_marks import (
    MAX_ERROR_CHARS,
    RESULT_TEXT_CHARS,
    OutcomeMark,
    OutcomeMarker,
)
from cronman.scheduler.runtime.metrics import NodeMetrics

T0 = datetime(2026, 11, 22, 7, 0, 0, tzinfo=UTC)


def finished(run_id: str = "run-1", status: str = "succeeded", attempt: int = 1,
             **fields) -> RunUpdate:
    fields.setdefault("result", {"http_status": 204})
    fields.setdefault("finished_at", T0 + timedelta(milliseconds=40))
    return RunUpdate(id=run_id, scheduled_for=T0, status=status, attempt=attempt,
                     started_at=T0 + timedelta(milliseconds=3), lateness_ms=3,
                     duration_ms=37, **fields)


def test_a_mark_holds_what_the_run_row_needs_compactly():
    u = finished()
    text = OutcomeMark.of_update(u, "n2").encode()
    assert len(text) < 120, text
    mark = OutcomeMark.decode(text)
    assert mark == OutcomeMark.of_update(u, "n2")
    assert mark.final and mark.node_id == "n2"
    back = mark.update("run-1", T0)
    assert back == RunUpdate(id="run-1", scheduled_for=T0, status="succeeded", attempt=1,
                             started_at=u.started_at, finished_at=u.finished_at, lateness_ms=3,
                             duration_ms=37, result={"http_status": 204})


def test_a_retrying_mark_carries_the_next_attempt_time():
    u = finished(status="retrying", attempt=2, result=None, error="HTTP 503",
                 next_attempt_at=T0 + timedelta(seconds=4), finished_at=None,
                 lease_expires_at=T0 + timedelta(seconds=30))
    mark = OutcomeMark.decode(OutcomeMark.of_update(u, "n1").encode())
    assert not mark.final
    back = mark.update("run-1", T0)
    assert (back.status, back.attempt, back.error, back.next_attempt_at, back.finished_at) == (
        "retrying", 2, "HTTP 503", T0 + timedelta(seconds=4), None)
    assert back.lease_expires_at is None  # the sweeper's take sets the lease


def test_long_errors_and_results_are_cut_to_a_snippet():
    logs = "".join(f"line {i}\n" for i in range(5000))
    u = finished(status="failed", error="x" * 10_000,
                 result={"exit_code": 3, "agent_id": "agent-1", "logs_tail": logs,
                         "nested": {"big": "y" * 5000}})
    mark = OutcomeMark.decode(OutcomeMark.of_update(u, "n1").encode())
    assert mark.error == "x" * MAX_ERROR_CHARS
    assert mark.result == {"exit_code": 3, "agent_id": "agent-1",
                           "logs_tail": logs[-RESULT_TEXT_CHARS:]}
    assert len(mark.encode()) < 1000


@pytest.mark.parametrize("u", [
    finished(), finished(status="retrying", attempt=2, result=None, error="HTTP 503",
                         next_attempt_at=T0 + timedelta(seconds=4), finished_at=None),
    finished(status="failed", error="x" * 10_000, result={"logs_tail": "z" * 5000}),
    RunUpdate(id="run-1", scheduled_for=T0, status="skipped", error=""),
])
def test_the_marker_encodes_an_update_as_its_mark_would(u):
    assert OutcomeMark.encode_update(u, "n1") == OutcomeMark.of_update(u, "n1").encode()


@pytest.mark.parametrize("text", ["", "{", "[]", '{"s": "succeeded"}', '{"a": 1}',
                                  '{"s": "succeeded", "a": "one"}', '"succeeded"'])
def test_unreadable_marks_decode_to_none(text):
    assert OutcomeMark.decode(text) is None


def make_marker(coord: InProcessCoordinator) -> tuple[OutcomeMarker, NodeMetrics]:
    metrics = NodeMetrics(CollectorRegistry())
    return OutcomeMarker(coord, "n1", 5000, metrics), metrics


def test_the_marker_sends_a_burst_as_one_batch_off_the_loop():
    coord = InProcessCoordinator(ttl=5)
    marker, _ = make_marker(coord)

    async def main():
        for i in range(200):
            marker.add(finished(f"run-{i}"))
        # The same run marked twice in a batch: its latest mark goes.
        marker.add(finished("run-7", status="failed", error="HTTP 500"))
        assert marker.pending == 200
        await marker.flush(2.0)
        assert marker.pending == 0 and marker.sent == 200
        assert coord.stats()["outcome_batches"] == 1
        marker.add(finished("run-200"))
        await asyncio.sleep(0.1)  # sent on its own after the marker's short delay
        assert marker.sent == 201

    try:
        asyncio.run(main())
    finally:
        marker.close()
    texts = coord.read_outcomes(["run-0", "run-7", "run-200", "run-x"])
    marks = [None if t is None else OutcomeMark.decode(t) for t in texts]
    assert [m and (m.status, m.attempt) for m in marks] == [
        ("succeeded", 1), ("failed", 1), ("succeeded", 1), None]


def test_a_batch_the_coordinator_refuses_is_counted_and_dropped():
    coord = InProcessCoordinator(ttl=5)
    handle = coord.handle()
    marker, metrics = make_marker(handle)

    async def main():
        handle.set_available(False)
        marker.add(finished("run-1"))
        await marker.flush(2.0)
        handle.set_available(True)
        marker.add(finished("run-2"))
        await marker.flush(2.0)

    try:
        asyncio.run(main())
    finally:
        marker.close()
    assert metrics.coordinator_errors.labels("mark_outcomes")._value.get() == 1
    assert coord.read_outcomes(["run-1", "run-2"])[0] is None
    assert coord.read_outcomes(["run-2"])[0] is not None
