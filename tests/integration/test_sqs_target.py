"""SqsTarget against a real moto SQS server on a random loopback port (private
targets allowed), and the private-address guard against a loopback listener."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import boto3
import pytest

from cronman.callbacks import (
    Delivery,
    Outcome,
    bounded_answers,
    dead_letter_delivery,
    validate_target,
)
from cronman.callbacks.dead_letter import validate_dead_letter
from cronman.callbacks.sqs import SqsTarget
from cronman.config import Settings
from cronman.ids import run_id_for
from tests.support.listener import LoopbackListener
from tests.support.moto import MotoServer, aws_test_env, moto_server
from tests.support.raw_http import FLOOD_LIMIT, RawConnection, RawServer, flood
from tests.support.receiver import Receiver

# moto listens on loopback: the guard must let it through for these tests.
PRIVATE_OK = Settings(allow_private_targets=True)
GUARDED = Settings(allow_private_targets=False)

REGION = "us-east-1"
WHEN = datetime(2026, 11, 22, 7, 0, 0, 250000, tzinfo=UTC)


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


@pytest.fixture
def sqs(moto, monkeypatch):
    """A boto3 client of the moto server, emptied before each test."""
    aws_test_env(monkeypatch=monkeypatch)
    moto.reset()
    return boto3.client("sqs", region_name=REGION, endpoint_url=moto.endpoint_url)


def make(moto: MotoServer, queue_url: str, **fields) -> dict:
    return validate_target(
        {
            "kind": "sqs",
            "queue_url": queue_url,
            "region": REGION,
            "endpoint_url": moto.endpoint_url,
            "body": "hello",
            **fields,
        }
    )


def delivery(target: dict, *, job_id: str = "job-1", when: datetime = WHEN, attempt: int = 1):
    return Delivery(
        job_id=job_id,
        run_id=run_id_for(job_id, when),
        scheduled_for=when,
        attempt=attempt,
        target=target,
    )


def fire(*deliveries: Delivery, settings: Settings = PRIVATE_OK, **kwargs) -> list[Outcome]:
    async def go():
        target = SqsTarget(settings, **kwargs)
        try:
            return [await target.deliver(d) for d in deliveries]
        finally:
            await target.close()

    return asyncio.run(go())


def receive_all(sqs, queue_url: str) -> list[dict]:
    messages: list[dict] = []
    for _ in range(3):
        got = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not got and messages:
            break
        messages.extend(got)
    return messages


def test_standard_queue_body_and_attributes(moto, sqs):
    queue = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    d = delivery(make(moto, queue, body='{"kind":"digest"}', attributes={"team": "billing"}))
    [outcome] = fire(d)
    assert outcome.ok, outcome.error
    [message] = receive_all(sqs, queue)
    assert outcome.result == {"message_id": message["MessageId"]}
    assert message["Body"] == '{"kind":"digest"}'
    attrs = {k: (v["DataType"], v["StringValue"]) for k, v in message["MessageAttributes"].items()}
    assert attrs == {
        "team": ("String", "billing"),
        "cronman-job-id": ("String", "job-1"),
        "cronman-run-id": ("String", d.run_id),
        "cronman-scheduled-for": ("String", "2026-11-22T07:00:00.25Z"),
    }


def test_fifo_group_defaults_to_job_and_dedup_is_the_run(moto, sqs):
    queue = sqs.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    target = make(moto, queue)
    first = delivery(target, attempt=1)
    retry = delivery(target, attempt=2)  # same run: same deduplication id
    other = delivery(target, when=datetime(2026, 11, 22, 7, 5, tzinfo=UTC))
    outcomes = fire(first, retry, other)
    assert all(o.ok for o in outcomes), outcomes
    assert all(o.result.get("sequence_number") for o in outcomes)
    messages = receive_all(sqs, queue)
    assert len(messages) == 2  # the retry of the same run was deduplicated
    assert [m["Attributes"]["MessageGroupId"] for m in messages] == ["job-1", "job-1"]
    assert sorted(m["Attributes"]["MessageDeduplicationId"] for m in messages) == sorted(
        [first.run_id, other.run_id]
    )


def test_fifo_explicit_group(moto, sqs):
    queue = sqs.create_queue(QueueName="grouped.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    [outcome] = fire(delivery(make(moto, queue, message_group_id="tenant-7")))
    assert outcome.ok
    [message] = receive_all(sqs, queue)
    assert message["Attributes"]["MessageGroupId"] == "tenant-7"


def test_missing_queue_is_a_failed_outcome(moto, sqs):
    queue = f"{moto.endpoint_url}/123456789012/no-such-queue"
    [outcome] = fire(delivery(make(moto, queue)))
    assert not outcome.ok
    assert "does not exist" in outcome.error and queue in outcome.error


def test_unreachable_endpoint_is_a_failed_outcome(monkeypatch):
    aws_test_env(monkeypatch=monkeypatch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    target = validate_target(
        {
            "kind": "sqs",
            "queue_url": f"{endpoint}/1/q",
            "region": REGION,
            "endpoint_url": endpoint,
            "body": "x",
        }
    )
    [outcome] = fire(delivery(target), max_attempts=1)
    assert not outcome.ok and outcome.retryable
    assert "cannot reach the SQS endpoint" in outcome.error


def test_an_endpoint_that_hangs_is_cut_off_at_the_deadline(monkeypatch):
    aws_test_env(monkeypatch=monkeypatch)
    with Receiver() as slow:
        slow.reply("/", status=200, delay=3.0)
        target = validate_target(
            {
                "kind": "sqs",
                "queue_url": slow.url("/1/q"),
                "region": REGION,
                "endpoint_url": slow.url(""),
                "body": "x",
            }
        )
        started = time.monotonic()
        [outcome] = fire(delivery(target), deadline=0.5, max_attempts=1)
        elapsed = time.monotonic() - started
        assert len(slow.wait_for(1)) >= 1  # the request did reach the endpoint
    assert not outcome.ok and outcome.retryable
    assert outcome.error.startswith("SQS send timed out after 0.5s")
    assert elapsed < 2.5


def _raw_target(server: RawServer) -> dict:
    return validate_target({"kind": "sqs", "queue_url": server.url("/1/q"), "region": REGION,
                            "endpoint_url": server.url(""), "body": "x"})


@pytest.mark.parametrize("settings", [PRIVATE_OK, GUARDED], ids=["unguarded", "guarded"])
def test_an_endless_answer_is_cut_off_at_1_mib(monkeypatch, settings):
    # botocore reads an answer whole: here it stops at the bound, and the thread is free.
    from cronman.callbacks import guarded_sockets

    aws_test_env(monkeypatch=monkeypatch)
    monkeypatch.setattr(guarded_sockets, "address_refusal", lambda address: None)
    sent: list[int] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 999999999999\r\n\r\n"
    with RawServer(flood(head, b"<a>" * 20000, sent)) as server:
        started = time.monotonic()
        [outcome] = fire(delivery(_raw_target(server)), settings=settings, max_attempts=1)
        assert time.monotonic() - started < 5
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:
            time.sleep(0.02)
    assert not outcome.ok and outcome.retryable
    assert outcome.error == f"SQS answer over 1 MiB (queue {server.url('/1/q')})"
    assert sent and sent[0] < FLOOD_LIMIT


def test_a_drip_fed_answer_is_cut_off_in_time(monkeypatch):
    # A byte every 0.2 s never trips the read timeout; the answer's own bound does,
    # in the sending thread (before the attempt's deadline gives up waiting for it).
    aws_test_env(monkeypatch=monkeypatch)
    monkeypatch.setattr(bounded_answers, "ANSWER_SECONDS", 1.0)
    closed: list[float] = []

    def drip(conn: RawConnection) -> None:
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        started = time.monotonic()
        try:
            for _ in range(100):
                conn.sock.sendall(b"<")
                time.sleep(0.2)
        except OSError:
            closed.append(time.monotonic() - started)

    with RawServer(drip) as server:
        [outcome] = fire(delivery(_raw_target(server)), deadline=5, max_attempts=1)
        deadline = time.monotonic() + 5
        while not closed and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not outcome.ok and outcome.retryable
    assert outcome.error == f"SQS answer not complete in 1s (queue {server.url('/1/q')})"
    assert closed and closed[0] < 3


def test_sends_do_not_block_the_event_loop(moto, sqs):
    queue = sqs.create_queue(QueueName="busy")["QueueUrl"]
    target = make(moto, queue)

    async def go():
        sender = SqsTarget(PRIVATE_OK, max_workers=4)
        loop_thread = threading.get_ident()
        boto_threads: list[int] = []  # where boto3 made a client or sent a request
        sent_at: list[float] = []
        ticks: list[float] = []
        gaps: list[float] = []
        stop = asyncio.Event()
        client = sender.client

        def on_send(**_: object) -> None:  # None: botocore goes on and sends
            boto_threads.append(threading.get_ident())
            sent_at.append(time.monotonic())

        def watched_client(region: str, endpoint_url: str | None) -> object:
            boto_threads.append(threading.get_ident())
            c = client(region, endpoint_url)
            c.meta.events.register("before-send.sqs", on_send, unique_id="test-send-threads")
            return c

        sender.client = watched_client

        async def ticker():
            # The loop thread's own CPU time between turns: how long a turn
            # worked (a loaded machine that holds the thread off the CPU, or
            # boto3's threads holding the GIL, do not add to it).
            last = time.thread_time()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.thread_time()
                ticks.append(time.monotonic())
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        try:
            outcomes = await asyncio.gather(
                *(sender.deliver(delivery(target, job_id=f"j{i}")) for i in range(12))
            )
            done_at = time.monotonic()
        finally:
            stop.set()
            await tick
            await sender.close()
        during = [t for t in ticks if sent_at and sent_at[0] < t < done_at]
        return outcomes, gaps, loop_thread, boto_threads, len(sent_at), during

    outcomes, gaps, loop_thread, boto_threads, sends, during = asyncio.run(go())
    assert all(o.ok for o in outcomes)
    assert sends == 12
    # boto3 worked on its threads only, never on the loop's...
    assert boto_threads and loop_thread not in boto_threads
    # ...and the loop kept turning while it did.
    assert len(gaps) > 5 and during, (len(gaps), during)
    assert max(gaps) < 0.5


def test_dead_letter_to_sqs(moto, sqs):
    queue = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    spec = validate_dead_letter(
        {"kind": "sqs", "queue_url": queue, "region": REGION, "endpoint_url": moto.endpoint_url}
    )
    record = {
        "id": run_id_for("job-9", WHEN),
        "job_id": "job-9",
        "scheduled_for": "2026-11-22T07:00:00.25Z",
        "status": "lost",
        "attempt": 1,
        "error": "node died mid-flight",
        "result": None,
    }
    [outcome] = fire(dead_letter_delivery(spec, record))
    assert outcome.ok
    [message] = receive_all(sqs, queue)
    assert json.loads(message["Body"]) == record
    assert message["MessageAttributes"]["cronman-run-id"]["StringValue"] == record["id"]


def _sqs_to(endpoint: str, **fields) -> dict:
    return validate_target({"kind": "sqs", "region": REGION, "body": "hello",
                            "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q",
                            "endpoint_url": endpoint, **fields})


def test_private_endpoints_are_refused_and_receive_nothing(monkeypatch):
    """Found by probing: an sqs target (or dead letter) with endpoint_url
    http://127.0.0.1:PORT sent a signed SendMessage -- the node's AWS
    credentials in its Authorization header -- there, and the run succeeded."""
    aws_test_env(monkeypatch=monkeypatch)
    with LoopbackListener() as ear:
        dead_letter = validate_dead_letter({"kind": "sqs", "region": REGION,
                                            "queue_url": "https://sqs.us-east-1.amazonaws.com/1/d",
                                            "endpoint_url": ear.url()})
        record = {"id": run_id_for("job-1", WHEN), "job_id": "job-1",
                  "scheduled_for": "2026-11-22T07:00:00.25Z", "status": "failed",
                  "attempt": 1, "error": "HTTP 500", "result": None}
        outcomes = fire(delivery(_sqs_to(ear.url())),
                        delivery(_sqs_to(ear.url("localhost"))),  # a name, resolved then
                        dead_letter_delivery(dead_letter, record),
                        settings=GUARDED)
        time.sleep(0.3)
        assert (ear.connections, ear.data) == (0, b"")
    for outcome in outcomes:
        assert not outcome.ok and not outcome.retryable
        assert outcome.error.startswith("SQS endpoint ")
        assert "a loopback address 127.0.0.1" in outcome.error or \
            "a loopback address ::1" in outcome.error
        assert "CRONMAN_ALLOW_PRIVATE_TARGETS=true" in outcome.error


def test_the_listener_hears_an_unguarded_send(monkeypatch):
    """The control of the test above: with private targets allowed the same
    send reaches the listener, signed with the node's credentials."""
    aws_test_env(monkeypatch=monkeypatch)
    with LoopbackListener() as ear:
        [outcome] = fire(delivery(_sqs_to(ear.url())), settings=PRIVATE_OK, max_attempts=1)
        time.sleep(0.3)
        assert ear.connections >= 1 and b"AWS4-HMAC-SHA256" in ear.data
    assert not outcome.ok  # the listener hangs up without an answer


def test_guarded_sends_to_public_names_resolve_and_connect_as_usual(moto, sqs, monkeypatch):
    """The guard resolves and connects itself: a host it allows works as before
    (moto stands in for the public endpoint: its loopback address is let
    through only for this check of the connection code)."""
    from cronman.callbacks import guarded_sockets

    queue = sqs.create_queue(QueueName="guarded")["QueueUrl"]
    allowed = []

    def allow_loopback(address):
        allowed.append(address)
        return None

    monkeypatch.setattr(guarded_sockets, "address_refusal", allow_loopback)
    [outcome] = fire(delivery(make(moto, queue)), settings=GUARDED)
    assert outcome.ok, outcome.error
    assert allowed and set(allowed) <= {"127.0.0.1", "::1"}
    assert len(receive_all(sqs, queue)) == 1
