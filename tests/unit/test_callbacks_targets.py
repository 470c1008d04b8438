"""TargetRegistry, RecordingTarget, dead-letter deliveries and SQS message parameters."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from cronman.callbacks import (
    Delivery,
    Outcome,
    TargetRegistry,
    build_targets,
    dead_letter_delivery,
    run_record,
    validate_target,
)
from cronman.callbacks.dead_letter import validate_dead_letter
from cronman.callbacks.recording import RecordingTarget
from cronman.callbacks.sqs import (
    ATTR_JOB_ID,
    ATTR_RUN_ID,
    ATTR_SCHEDULED_FOR,
    build_send_kwargs,
    is_fifo,
)
from cronman.config import Settings
from cronman.ids import new_job_id, run_id_for
from cronman.models import Job, Run

WHEN = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)
HTTP_TARGET = validate_target({"kind": "http", "url": "https://example.com/hook"})


def delivery(target=HTTP_TARGET, *, job_id="job-1", run_id="run-1", attempt=1, when=WHEN):
    return Delivery(
        job_id=job_id, run_id=run_id, scheduled_for=when, attempt=attempt, target=target
    )


# -- registry -------------------------------------------------------------------


def test_registry_routes_by_kind():
    http, sqs = (
        RecordingTarget("http"),
        RecordingTarget("sqs", outcome=Outcome(True, {"message_id": "m"})),
    )
    registry = TargetRegistry([http, sqs])
    assert set(registry) == {"http", "sqs"} and len(registry) == 2
    assert registry["sqs"] is sqs

    async def go():
        a = await registry.deliver(delivery())
        b = await registry.deliver(delivery({"kind": "sqs"}))
        return a, b

    a, b = asyncio.run(go())
    assert a.result == {"http_status": 204} and b.result == {"message_id": "m"}
    assert len(http.deliveries) == 1 and len(sqs.deliveries) == 1


def test_registry_unknown_kind_is_a_failed_outcome_not_an_error():
    registry = TargetRegistry([RecordingTarget("http")])
    outcome = asyncio.run(registry.deliver(delivery({"kind": "container", "image": "x"})))
    assert not outcome.ok and not outcome.retryable
    assert "container" in outcome.error


def test_registry_close_closes_every_target():
    targets = [RecordingTarget("http"), RecordingTarget("sqs")]
    asyncio.run(TargetRegistry(targets).close())
    assert all(t.closed for t in targets)


def test_build_targets_has_http_and_sqs_and_takes_extras():
    async def go():
        registry = build_targets(Settings())
        kinds = {kind: type(target).__name__ for kind, target in registry.items()}
        await registry.close()
        fake = RecordingTarget("http")
        registry = build_targets(Settings(), extra=[fake, RecordingTarget("container")])
        replaced = registry["http"] is fake and "container" in registry
        await registry.close()
        return kinds, replaced

    kinds, replaced = asyncio.run(go())
    assert kinds == {"http": "HttpTarget", "sqs": "SqsTarget"}
    assert replaced


# -- recording target -----------------------------------------------------------


def test_recording_target_scripts_outcomes_then_default():
    target = RecordingTarget()
    target.script(Outcome(False, error="HTTP 503"), Outcome(False, error="timeout after 10s"))

    async def go():
        return [await target.deliver(delivery(attempt=n)) for n in (1, 2, 3)]

    outcomes = asyncio.run(go())
    assert [o.ok for o in outcomes] == [False, False, True]
    assert [d.attempt for d in target.deliveries] == [1, 2, 3]
    assert target.run_ids() == ["run-1"] * 3


def test_recording_target_delay_concurrency_and_wait_for():
    target = RecordingTarget(delay=lambda d: 0.05, outcome=lambda d: Outcome(d.attempt == 1))

    async def go():
        waiter = asyncio.create_task(target.wait_for(5, timeout=2))
        outcomes = await asyncio.gather(
            *(target.deliver(delivery(run_id=f"r{i}")) for i in range(5))
        )
        return outcomes, await waiter

    outcomes, delivered = asyncio.run(go())
    assert all(o.ok for o in outcomes)
    assert len(delivered) == 5
    assert target.max_in_flight == 5 and target.in_flight == 0


def test_recording_target_wait_for_times_out():
    with pytest.raises(TimeoutError):
        asyncio.run(RecordingTarget().wait_for(1, timeout=0.05))


# -- dead letter ----------------------------------------------------------------


def _job_and_run():
    job_id = new_job_id()
    job = Job(
        id=job_id,
        namespace="billing",
        name="digest",
        version=1,
        schedule={"kind": "once", "at": "2026-11-22T07:00:00Z"},
        target=HTTP_TARGET,
        retry={},
        misfire={},
        delivery="at_least_once",
        concurrency="allow",
        priority=0,
        start_at=None,
        end_at=None,
        jitter=None,
        paused=False,
        labels={},
        dead_letter=None,
        created_at=WHEN,
        updated_at=WHEN,
    )
    when = datetime(2026, 11, 22, 7, 0, 0, 250000, tzinfo=UTC)
    run = Run(
        id=run_id_for(job_id, when),
        job_id=job_id,
        scheduled_for=when,
        status="failed",
        attempt=3,
        node_id="sched-2",
        finished_at=when,
        result={"http_status": 503},
        error="HTTP 503",
    )
    return job, run


def test_run_record_is_json_ready():
    job, run = _job_and_run()
    record = run_record(run, job=job)
    assert record["scheduled_for"] == "2026-11-22T07:00:00.25Z"
    assert record["status"] == "failed" and record["attempt"] == 3
    assert record["job"] == {"id": job.id, "namespace": "billing", "name": "digest"}
    assert json.loads(json.dumps(record)) == record


def test_dead_letter_http_delivery_posts_the_run_record():
    job, run = _job_and_run()
    spec = validate_dead_letter(
        {"kind": "http", "url": "https://dlq.example/runs", "headers": {"X-Token": "t"}}
    )
    record = run_record(run, job=job)
    d = dead_letter_delivery(spec, record, namespace="billing", job_name="digest")
    assert (d.job_id, d.run_id, d.scheduled_for) == (job.id, run.id, run.scheduled_for)
    assert d.target["method"] == "POST"
    assert d.target["headers"] == {"X-Token": "t", "Content-Type": "application/json"}
    assert json.loads(d.target["body"]) == record
    assert spec["body"] == ""  # the spec itself is left alone
    assert (d.namespace, d.job_name) == ("billing", "digest")


def test_dead_letter_keeps_the_targets_content_type():
    job, run = _job_and_run()
    spec = validate_dead_letter(
        {
            "kind": "http",
            "url": "https://dlq.example/",
            "method": "PUT",
            "headers": {"content-type": "application/vnd.x+json"},
        }
    )
    d = dead_letter_delivery(spec, run_record(run))
    assert d.target["headers"] == {"content-type": "application/vnd.x+json"}
    assert d.target["method"] == "PUT"


def test_dead_letter_sqs_and_oversized_records():
    job, run = _job_and_run()
    spec = validate_dead_letter(
        {
            "kind": "sqs",
            "queue_url": "https://sqs.us-east-1.amazonaws.com/1/dlq",
            "region": "us-east-1",
        }
    )
    small = dead_letter_delivery(spec, run_record(run))
    assert json.loads(small.target["body"])["id"] == run.id
    run.result = {"logs_tail": "x" * 300_000, "exit_code": 1}
    big = dead_letter_delivery(spec, run_record(run))
    body = json.loads(big.target["body"])
    assert len(big.target["body"].encode()) <= 256 * 1024
    assert body["result"] == {"truncated": True} and body["id"] == run.id
    assert body["error"] == "HTTP 503"


def test_dead_letter_accepts_text_times_and_rejects_other_kinds():
    record = {"id": "r", "job_id": "j", "scheduled_for": "2026-11-22T07:00:00Z", "status": "lost"}
    spec = validate_dead_letter({"kind": "http", "url": "https://dlq.example/"})
    assert dead_letter_delivery(spec, record).scheduled_for == WHEN
    with pytest.raises(ValueError):
        dead_letter_delivery({"kind": "container"}, record)


# -- sqs message parameters -----------------------------------------------------


SQS_STD = validate_target(
    {
        "kind": "sqs",
        "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/jobs",
        "region": "eu-west-1",
        "body": "payload",
        "attributes": {"team": "billing"},
    }
)


def test_sqs_standard_queue_parameters():
    kwargs = build_send_kwargs(
        delivery(SQS_STD, when=datetime(2026, 11, 22, 7, 0, 0, 500000, tzinfo=UTC))
    )
    assert kwargs["QueueUrl"] == SQS_STD["queue_url"]
    assert kwargs["MessageBody"] == "payload"
    assert kwargs["MessageAttributes"] == {
        "team": {"DataType": "String", "StringValue": "billing"},
        ATTR_JOB_ID: {"DataType": "String", "StringValue": "job-1"},
        ATTR_RUN_ID: {"DataType": "String", "StringValue": "run-1"},
        ATTR_SCHEDULED_FOR: {"DataType": "String", "StringValue": "2026-11-22T07:00:00.5Z"},
    }
    assert "MessageGroupId" not in kwargs and "MessageDeduplicationId" not in kwargs


def test_sqs_fifo_parameters():
    fifo = {**SQS_STD, "queue_url": SQS_STD["queue_url"] + ".fifo"}
    assert is_fifo(fifo["queue_url"]) and not is_fifo(SQS_STD["queue_url"])
    kwargs = build_send_kwargs(delivery(fifo))
    assert kwargs["MessageGroupId"] == "job-1"
    assert kwargs["MessageDeduplicationId"] == "run-1"
    kwargs = build_send_kwargs(delivery({**fifo, "message_group_id": "tenant-7"}))
    assert kwargs["MessageGroupId"] == "tenant-7"
