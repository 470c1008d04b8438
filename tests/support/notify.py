"""Helpers of the notification tests: jobs with rules, finished runs, a notifier on a thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from cronman.api.validation import validate_job
from cronman.config import Settings
from cronman.ids import new_job_id, run_id_for
from cronman.models import Job, Run, RunUpdate
from cronman.notify.notifier import Notifier
from cronman.processes.notifier import NotifierThread
from cronman.timeutil import utcnow
from tests.support.waiting import wait_for


def create_job(store: Any, name: str, *, notify: list[dict[str, Any]] | None = None,
               namespace: str = "default", schedule: dict[str, Any] | None = None,
               **extra: Any) -> Job:
    """A job as the API would store it (validated), with these rules."""
    job_id = new_job_id()
    body = {"name": name, "namespace": namespace,
            "schedule": schedule or {"kind": "cron", "cron": "0 7 * * *"},
            "target": {"kind": "http", "url": "http://127.0.0.1:9/hook"},
            "notify": notify, **extra}
    spec = validate_job(body, job_id=job_id, now=utcnow())
    (job,) = store.jobs.create_jobs([{"id": job_id, **spec}])
    return job


def finish_run(store: Any, job_id: str, at: datetime, status: str = "failed", *,
               attempt: int = 1, error: str | None = "HTTP 500",
               started_at: datetime | None = None, origin: str = "schedule") -> Run:
    """A run of ``job_id`` at ``at`` that ended ``status`` (written as a node would)."""
    started = started_at or at
    run = Run(id=run_id_for(job_id, at), job_id=job_id, scheduled_for=at, status="running",
              attempt=attempt, node_id="n1", origin=origin, claimed_at=at, started_at=started,
              # A live lease: a scheduler's sweeper running beside the test
              # must not take the run between its two writes.
              lease_expires_at=utcnow() + timedelta(seconds=30))
    store.runs.claim_runs([run])
    store.runs.write_run_updates([RunUpdate(
        id=run.id, scheduled_for=at, status=status, attempt=attempt, started_at=started,
        finished_at=utcnow(), duration_ms=5,
        error=error if status != "succeeded" else None,
        result={"http_status": 500 if status == "failed" else 204})])
    return run


def webhook_rule(url: str, *, events: tuple[str, ...] = ("failed", "lost", "recovered"),
                 digest_interval: float = 900, late_after: float | None = None,
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"events": list(events), "digest_interval": digest_interval,
                            "channel": {"kind": "webhook", "url": url,
                                        "headers": headers or {}}}
    if late_after is not None:
        rule["late_after"] = late_after
    return rule


def email_rule(*to: str, events: tuple[str, ...] = ("failed",),
               digest_interval: float = 900) -> dict[str, Any]:
    return {"events": list(events), "digest_interval": digest_interval,
            "channel": {"kind": "email", "to": list(to)}}


def notify_settings(database_url: str, **changes: Any) -> Settings:
    base = Settings(database_url=database_url, allow_private_targets=True,
                    signing_secret="notify-secret", smtp_starttls=False)
    return base.with_(**changes)


@contextmanager
def running_notifier(store: Any, settings: Settings, **kwargs: Any) -> Iterator[Notifier]:
    """A notifier on its own thread (fast intervals), stopped at the end."""
    kwargs.setdefault("registry", None)
    kwargs.setdefault("poll_interval", 0.2)
    kwargs.setdefault("lock_retry", 0.2)
    kwargs.setdefault("release_grace", 0.5)
    kwargs.setdefault("late_settle", 0.3)
    kwargs.setdefault("retry_base", 0.3)
    notifier = Notifier(settings, store, **kwargs)
    thread = NotifierThread(notifier).start()
    try:
        yield notifier
    finally:
        thread.stop()


def notifications(store: Any, **filters: Any) -> list[Any]:
    from cronman.outbox.records import NotificationFilter

    page = store.notifications.list_notifications(NotificationFilter(**filters), 1000, None)
    return list(page.items)


def wait_notifications(store: Any, count: int, *, status: str | None = None,
                       timeout: float = 10.0) -> list[Any]:
    def check() -> list[Any]:
        got = [n for n in notifications(store) if status is None or n.status == status]
        return got if len(got) >= count else []

    return wait_for(check, timeout, f"{count} notifications ({status or 'any status'})")
