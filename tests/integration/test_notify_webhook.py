"""Webhook notifications against a real local receiver: signed like callbacks,
retried and visible when the receiver fails, refused by the private-address
guard; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from cronman import signing_keys
from cronman.errors import StoreUnavailable
from cronman.notify.webhook import WebhookSender
from cronman.signing import namespace_key, verify_signature
from cronman.timeutil import utcnow
from tests.support.notify import (
    create_job,
    finish_run,
    notify_settings,
    running_notifier,
    wait_notifications,
    webhook_rule,
)
from tests.support.raw_http import FLOOD_LIMIT, RawServer, flood
from tests.support.receiver import Receiver
from tests.support.signing import notification_verifies
from tests.support.store_data import base_time


def test_a_failed_run_is_posted_signed_once(store, database_url):
    with Receiver() as rx:
        job = create_job(store, "nightly-export", notify=[webhook_rule(rx.url("/hook"),
                         headers={"Authorization": "Bearer hook-token-123"})])
        run = finish_run(store, job.id, base_time(), "failed", error="HTTP 503")
        with running_notifier(store, notify_settings(database_url)):
            [req] = rx.wait_for(1, timeout=10)
            [note] = wait_notifications(store, 1, status="sent")
        url = rx.url("/hook")
        assert notification_verifies("notify-secret", "default", req, url)
        assert not notification_verifies("other-secret", "default", req, url)
        assert not notification_verifies("notify-secret", "other", req, url)
        assert req.header("Authorization") == "Bearer hook-token-123"
        assert req.header("Content-Type") == "application/json"
        assert req.header("Cronman-Notification-Id") == note.id
        assert req.header("Cronman-Event") == "failed"
        body = json.loads(req.body)
        assert body["id"] == note.id and body["kind"] == "event" and body["event"] == "failed"
        assert body["job"] == {"id": job.id, "namespace": "default", "name": "nightly-export"}
        [event] = body["events"]
        assert event["run_id"] == run.id and event["detail"]["error"] == "HTTP 503"
        assert note.attempts == 1 and note.last_error is None and note.sent_at is not None
    assert len(rx.requests) == 1  # nothing sent again


def test_one_signer_per_namespace_is_kept_across_messages_and_follows_a_rotation(
        store, database_url, monkeypatch):
    """The notifier's webhook sender shares one NamespaceSigners: a namespace's keys are
    prepared once for its messages (not once per message), and a rotation read at the
    next message is signed with at once (new and previous key)."""
    made: list[int] = []

    class CountingSigner(signing_keys.Signer):
        def __init__(self, key) -> None:  # type: ignore[no-untyped-def]
            made.append(1)
            super().__init__(key)

    monkeypatch.setattr(signing_keys, "Signer", CountingSigner)
    settings = notify_settings(database_url)
    sender = WebhookSender(settings, key_state=store.signing_keys.state)
    with Receiver() as rx:
        url = rx.url("/hook")
        jobs = [create_job(store, f"job-{i}", notify=[webhook_rule(url)]) for i in range(3)]
        with running_notifier(store, settings, senders={"webhook": sender}):
            for i, job in enumerate(jobs[:2]):
                finish_run(store, job.id, base_time(), "failed")
                rx.wait_for(i + 1, timeout=10)
            assert len(made) == 1  # two messages, one signer
            now = utcnow()
            store.signing_keys.rotate("default", now=now,
                                      previous_until=now + timedelta(seconds=600))
            finish_run(store, jobs[2].id, base_time(), "failed")
            requests = rx.wait_for(3, timeout=10)
    assert len(made) == 2  # made again for the new key state only
    assert all(notification_verifies("notify-secret", "default", r, url) for r in requests)
    last = requests[2]
    new_key = namespace_key("notify-secret", "default", 1)
    assert last.header("Cronman-Signature").count("v2=") == 2
    assert verify_signature(new_key, last.header("Cronman-Signature"), last.body,
                            job_id=jobs[2].id, run_id=last.header("Cronman-Notification-Id"),
                            scheduled_for="", url=url)


def test_a_failing_receiver_is_retried_and_each_attempt_is_visible(store, database_url):
    with Receiver() as rx:
        rx.reply("/hook", status=500, body="down")
        job = create_job(store, "flaky", notify=[webhook_rule(rx.url("/hook"), events=("lost",))])
        finish_run(store, job.id, base_time(), "lost", error="node gone")
        with running_notifier(store, notify_settings(database_url)):
            rx.wait_for(2, timeout=10)
            [note] = wait_notifications(store, 1)
            assert note.status in ("pending", "sending")
            assert note.last_error and "HTTP 500" in note.last_error
            rx.reply("/hook", status=204)
            [note] = wait_notifications(store, 1, status="sent", timeout=10)
        assert note.attempts >= 3 and note.last_error is None
        ids = {r.header("Cronman-Notification-Id") for r in rx.requests}
        assert ids == {note.id}  # every attempt is the same notification


def test_a_notification_that_cannot_be_sent_ends_failed_with_its_error(store, database_url):
    with Receiver() as rx:
        rx.reply("/hook", status=502)
        job = create_job(store, "doomed", notify=[webhook_rule(rx.url("/hook"))])
        finish_run(store, job.id, base_time(), "failed")
        settings = notify_settings(database_url, notify_max_attempts=3)
        with running_notifier(store, settings):
            [note] = wait_notifications(store, 1, status="failed", timeout=15)
        assert note.attempts == 3 and "HTTP 502" in (note.last_error or "")
        assert len(rx.requests) == 3


def test_an_answer_with_endless_headers_is_a_failed_attempt(store, database_url):
    sent: list[int] = []
    with RawServer(flood(b"HTTP/1.1 204 No Content\r\n", b"X-Pad: p\r\n" * 1000, sent)) as server:
        job = create_job(store, "flooded", notify=[webhook_rule(server.url("/hook"))])
        finish_run(store, job.id, base_time(), "failed")
        settings = notify_settings(database_url, notify_max_attempts=1)
        with running_notifier(store, settings):
            [note] = wait_notifications(store, 1, status="failed", timeout=15)
    assert note.last_error == f"answer has over 100 headers from 127.0.0.1:{server.port}"
    assert sent and sent[0] < FLOOD_LIMIT


def test_private_addresses_are_refused_for_good_unless_allowed(store, database_url):
    with Receiver() as rx:
        job = create_job(store, "guarded", notify=[webhook_rule(rx.url("/hook"))])
        finish_run(store, job.id, base_time(), "failed")
        settings = notify_settings(database_url, allow_private_targets=False)
        with running_notifier(store, settings):
            [note] = wait_notifications(store, 1, status="failed")
        assert note.attempts == 1
        assert "loopback" in (note.last_error or "")
        assert rx.requests == []


def test_a_message_whose_sender_stopped_mid_send_is_sent_by_the_next_notifier(
        store, database_url):
    with Receiver() as rx:
        rx.reply("/hook", status=204, delay=3.0)  # the first notifier stops while waiting
        job = create_job(store, "interrupted", notify=[webhook_rule(rx.url("/hook"))])
        finish_run(store, job.id, base_time(), "failed")
        settings = notify_settings(database_url)
        with running_notifier(store, settings):
            rx.wait_for(1, timeout=10)
            [note] = wait_notifications(store, 1, status="sending")
        rx.reply("/hook", status=204)
        with running_notifier(store, settings):
            [note] = wait_notifications(store, 1, status="sent", timeout=10)
        assert note.attempts == 2
        assert [r.header("Cronman-Notification-Id") for r in rx.requests] == [note.id] * 2


class _RefusingOutbox:
    """The real outbox, except that its first ``refusals`` records of a sent message
    fail as they do while the database fails over."""

    def __init__(self, outbox: Any, refusals: int) -> None:
        self._outbox = outbox
        self.refusals = refusals

    def __getattr__(self, name: str) -> Any:
        return getattr(self._outbox, name)

    def mark_sent(self, note: Any, now: datetime) -> bool:
        if self.refusals:
            self.refusals -= 1
            raise StoreUnavailable("the database is failing over (injected)")
        return bool(self._outbox.mark_sent(note, now))


def test_a_sent_message_the_database_could_not_record_is_recorded_not_sent_again(
        store, database_url):
    with Receiver() as rx:
        job = create_job(store, "failover", notify=[webhook_rule(rx.url("/hook"))])
        finish_run(store, job.id, base_time(), "failed")
        outbox = _RefusingOutbox(store.notify_outbox, refusals=3)
        refusing = SimpleNamespace(notify_outbox=outbox, jobs=store.jobs,
                                   notification_rules=store.notification_rules,
                                   signing_keys=store.signing_keys)
        with running_notifier(refusing, notify_settings(database_url)):
            rx.wait_for(1, timeout=10)
            [note] = wait_notifications(store, 1, status="sent", timeout=10)
            time.sleep(1.0)  # rounds after it: nothing goes out again
        assert outbox.refusals == 0
        assert note.attempts == 1 and note.last_error is None
        assert [r.header("Cronman-Notification-Id") for r in rx.requests] == [note.id]
