"""Email notifications through a real local SMTP server (aiosmtpd): plain SMTP,
STARTTLS with a certificate made by the test and AUTH, a server without
STARTTLS when it is required, refused recipients, temporary failures."""

from __future__ import annotations

import pytest

from cronman.notify.email import EmailSender
from tests.support.notify import (
    create_job,
    email_rule,
    finish_run,
    notify_settings,
    running_notifier,
    wait_notifications,
)
from tests.support.smtp import SmtpServer
from tests.support.store_data import base_time


def _settings(database_url, mx, **changes):
    return notify_settings(database_url, smtp_host="127.0.0.1", smtp_port=mx.port,
                           smtp_from="cronman@example.com", **changes)


def test_plain_smtp(store, database_url):
    with SmtpServer() as mx:
        job = create_job(store, "nightly-export", namespace="billing",
                         notify=[email_rule("oncall@example.com", "lead@example.com")])
        run = finish_run(store, job.id, base_time(), "failed", error="HTTP 500: boom")
        with running_notifier(store, _settings(database_url, mx)):
            [mail] = mx.wait_for(1)
            [note] = wait_notifications(store, 1, status="sent")
    assert mail.rcpt_tos == ["oncall@example.com", "lead@example.com"]
    assert mail.mail_from == "cronman@example.com" and not mail.tls
    assert mail.subject.startswith("[cronman] billing/nightly-export: run failed")
    assert mail.header("Message-ID") == f"<{note.id}@cronman>"
    assert mail.header("X-Cronman-Notification-Id") == note.id
    assert run.id in mail.body and "HTTP 500: boom" in mail.body


def test_starttls_and_auth(store, database_url):
    with SmtpServer(tls=True, credentials=("cronman", "s3cret")) as mx:
        job = create_job(store, "secure", notify=[email_rule("oncall@example.com")])
        finish_run(store, job.id, base_time(), "failed")
        settings = _settings(database_url, mx, smtp_starttls=True, smtp_username="cronman",
                             smtp_password="s3cret")
        sender = EmailSender(settings, ssl_context=mx.client_context())
        with running_notifier(store, settings, senders={"email": sender}):
            [mail] = mx.wait_for(1)
            wait_notifications(store, 1, status="sent")
    assert mail.tls and mail.authenticated_as == "cronman"


def test_an_untrusted_certificate_is_refused_and_retried(store, database_url):
    with SmtpServer(tls=True) as mx:
        job = create_job(store, "mitm", notify=[email_rule("oncall@example.com")])
        finish_run(store, job.id, base_time(), "failed")
        settings = _settings(database_url, mx, smtp_starttls=True)
        with running_notifier(store, settings):  # the system's CAs: the test CA is unknown
            [note] = wait_notifications(store, 1)
            note = _wait_error(store)
        assert "TLS" in (note.last_error or "") and note.status != "sent"
        assert mx.mails == []


def test_starttls_required_but_not_offered_sends_nothing_in_the_clear(store, database_url):
    with SmtpServer() as mx:
        job = create_job(store, "cleartext", notify=[email_rule("oncall@example.com")])
        finish_run(store, job.id, base_time(), "failed")
        with running_notifier(store, _settings(database_url, mx, smtp_starttls=True)):
            note = _wait_error(store)
        assert "does not offer STARTTLS" in (note.last_error or "")
        assert mx.mails == []


def test_refused_recipients_fail_at_once_and_4xx_is_retried(store, database_url):
    with SmtpServer(refuse=("nobody@example.com",)) as mx:
        mx.fail_data = 1
        refused = create_job(store, "refused", notify=[email_rule("nobody@example.com")])
        retried = create_job(store, "retried", notify=[email_rule("oncall@example.com")])
        finish_run(store, refused.id, base_time(), "failed")
        finish_run(store, retried.id, base_time(), "failed")
        with running_notifier(store, _settings(database_url, mx)):
            mx.wait_for(1)
            wait_notifications(store, 1, status="failed")
            wait_notifications(store, 1, status="sent")
        by_job = {n.job_id: n for n in store.notifications.list_notifications(
            _flt(), 10, None).items}
    assert by_job[refused.id].status == "failed" and by_job[refused.id].attempts == 1
    assert "550" in (by_job[refused.id].last_error or "")
    assert by_job[retried.id].status == "sent" and by_job[retried.id].attempts == 2


def test_credentials_need_starttls():
    from cronman.config import Settings

    with pytest.raises(ValueError, match="STARTTLS"):
        Settings(smtp_host="mx", smtp_starttls=False, smtp_username="u", smtp_password="p")


def _flt():
    from cronman.outbox.records import NotificationFilter

    return NotificationFilter()


def _wait_error(store):
    from tests.support.waiting import wait_for

    def check():
        notes = store.notifications.list_notifications(_flt(), 10, None).items
        return notes[0] if notes and notes[0].last_error else None

    return wait_for(check, 10, "a failed attempt")
