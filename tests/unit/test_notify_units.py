"""The pure parts of notifications: rule validation and keys, the rate limit's
placement, late deadlines, event detection, messages, retry delays."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from cronman.errors import ValidationError
from cronman.models import Job
from cronman.notify import detect
from cronman.notify.delivery import retry_delay
from cronman.notify.late import LateWatch
from cronman.notify.messages import payload, subject, text
from cronman.notify.rules import (
    redact_notify,
    validate_job_notify,
    validate_rule,
)
from cronman.outbox.limiter import GroupState, Incoming, plan
from cronman.outbox.records import (
    EventRecord,
    FailingJob,
    FinishedRun,
    Notification,
    group_key,
    job_rules,
    namespace_rule,
)

T0 = datetime(2026, 11, 26, 7, 0, tzinfo=UTC)
MAIL = {"kind": "email", "to": ["oncall@example.com"]}


def _job(job_id="j1", notify=None, namespace="billing", **extra) -> Job:
    base = dict(id=job_id, namespace=namespace, name=f"name-{job_id}", version=1,
                schedule={"kind": "interval", "every": 60,
                          "anchor": "2026-11-26T00:00:00Z"},
                target={"kind": "http", "url": "https://x.example/"}, retry={}, misfire={},
                delivery="at_least_once", concurrency="allow", priority=0, start_at=None,
                end_at=None, jitter=None, paused=False, labels={}, dead_letter=None,
                created_at=T0 - timedelta(days=1), updated_at=T0 - timedelta(days=1),
                notify=notify)
    base.update(extra)
    return Job(**base)


# -- rules -------------------------------------------------------------------------------


def test_rule_defaults_and_normalisation():
    rule = validate_rule({"events": ["late", "failed"], "late_after": 90.0,
                          "channel": {"kind": "webhook", "url": "https://h.example/x"}}, "r")
    assert rule == {"events": ["late", "failed"], "late_after": 90, "digest_interval": 900,
                    "channel": {"kind": "webhook", "url": "https://h.example/x",
                                "headers": {}, "timeout": 10}}
    assert validate_rule(rule, "r") == rule  # validating the normal form changes nothing
    assert validate_job_notify(None) is None and validate_job_notify([]) is None


def test_recipients_are_plain_addresses_deduplicated():
    rule = validate_rule({"events": ["failed"], "channel": {
        "kind": "email", "to": ["a@x.example", "A@x.example", "b@x.example"]}}, "")
    assert rule["channel"]["to"] == ["a@x.example", "b@x.example"]
    for bad in ("Ops <ops@x.example>", "ops@x.example, evil@y.example", "no-at-sign", ""):
        with pytest.raises(ValidationError) as err:
            validate_rule({"events": ["failed"], "channel": {"kind": "email", "to": [bad]}}, "")
        assert err.value.field == "channel.to[0]"


def test_rule_keys_survive_reordering_and_name_their_scope():
    a = {"events": ["failed"], "channel": MAIL, "late_after": None, "digest_interval": 900}
    b = {"events": ["lost"], "channel": MAIL, "late_after": None, "digest_interval": 900}
    first = {r.key for r in job_rules("j1", [a, b])}
    assert first == {r.key for r in job_rules("j1", [b, a])}
    assert all(k.startswith("job:j1:") for k in first)
    assert len(job_rules("j1", [a, a])) == 1  # the same rule twice is one rule
    assert namespace_rule("r9", a).key == "ns:r9"
    rule = job_rules("j1", [a])[0]
    assert group_key(rule, "j1") != group_key(rule, "j2")


def test_redaction_hides_webhook_header_values_only():
    notify = [{"events": ["failed"], "channel": {"kind": "webhook", "url": "https://h.example",
                                                 "headers": {"X-Key": "0123456789"}}},
              {"events": ["failed"], "channel": MAIL}]
    shown = redact_notify(notify, lambda v: "***")
    assert shown[0]["channel"]["headers"] == {"X-Key": "***"} and shown[1] == notify[1]
    assert notify[0]["channel"]["headers"] == {"X-Key": "0123456789"}  # not changed in place


# -- the rate limit ----------------------------------------------------------------------


def _ids():
    counter = itertools.count()
    return lambda: f"n{next(counter)}"


def test_first_event_alone_then_one_digest_per_interval():
    now = T0
    p = plan([Incoming("g", 60)] * 3, {}, now, _ids())
    assert [(m.kind.value, m.due_at, m.event_count) for m in p.messages] == [
        ("event", now, 1), ("digest", now + timedelta(seconds=60), 2)]
    assert p.assigned == ["n0", "n1", "n1"]
    assert p.groups["g"] == GroupState("n1", now + timedelta(seconds=60), "n1")


def test_events_fold_into_the_stored_open_digest():
    state = {"g": GroupState("d1", T0 + timedelta(seconds=30), "d1")}
    p = plan([Incoming("g", 60), Incoming("g", 60)], state, T0, _ids())
    assert p.messages == [] and p.folded == {"d1": 2} and p.assigned == ["d1", "d1"]


def test_a_digest_being_sent_opens_the_next_one():
    # The stored digest is no longer pending (the outbox then reports no open digest).
    state = {"g": GroupState("d1", T0, None)}
    p = plan([Incoming("g", 60)], state, T0 + timedelta(seconds=5), _ids())
    [m] = p.messages
    assert m.kind.value == "digest" and m.due_at == T0 + timedelta(seconds=60)


def test_after_a_quiet_interval_an_event_goes_alone_and_groups_are_apart():
    state = {"g": GroupState("old", T0, None)}
    p = plan([Incoming("g", 60), Incoming("h", 60)], state, T0 + timedelta(seconds=61), _ids())
    assert [m.kind.value for m in p.messages] == ["event", "event"]


# -- late -----------------------------------------------------------------------------------


def _late_rule(late_after=30):
    spec = validate_rule({"events": ["late"], "late_after": late_after, "channel": MAIL}, "")
    return namespace_rule("r", spec)


def test_deadlines_are_due_time_plus_late_after_from_the_cursor_on():
    watch = LateWatch()
    watch.set_job(_job(), [_late_rule(30)], checked_through=T0)  # 06:59's deadline: checked
    assert watch.due(T0 + timedelta(seconds=29)) == []
    checks = watch.due(T0 + timedelta(seconds=150))
    assert [(c.fire_time, c.deadline) for c in checks] == [
        (T0, T0 + timedelta(seconds=30)),
        (T0 + timedelta(minutes=1), T0 + timedelta(seconds=90)),
        (T0 + timedelta(minutes=2), T0 + timedelta(seconds=150))]
    assert watch.due(T0 + timedelta(seconds=150)) == []


def test_paused_deleted_and_rule_less_jobs_are_not_watched():
    watch = LateWatch()
    watch.set_job(_job(paused=True), [_late_rule()], T0)
    watch.set_job(_job("j2", deleted_at=T0), [_late_rule()], T0)
    watch.set_job(_job("j3"), [], T0)
    assert len(watch) == 0
    watch.set_job(_job("j4"), [_late_rule()], T0)
    watch.set_job(_job("j4", paused=True), [_late_rule()], T0)  # paused since: dropped
    assert len(watch) == 0 and watch.due(T0 + timedelta(days=1)) == []


def test_fire_times_before_the_jobs_last_change_are_not_checked():
    watch = LateWatch()
    watch.set_job(_job(updated_at=T0 + timedelta(seconds=30)), [_late_rule(10)],
                  checked_through=T0 - timedelta(hours=1))
    [check] = watch.due(T0 + timedelta(seconds=80))
    assert check.fire_time == T0 + timedelta(minutes=1)


def test_catching_up_is_capped_per_pass():
    watch = LateWatch(max_checks_per_watcher=3)
    watch.set_job(_job(), [_late_rule(1)], checked_through=T0)
    checks = watch.due(T0 + timedelta(minutes=10, seconds=30))
    assert len(checks) == 3 and watch.skipped == 8  # 07:00 to 07:10: 11 deadlines passed
    [nxt] = watch.due(T0 + timedelta(minutes=11, seconds=1))
    assert nxt.fire_time == T0 + timedelta(minutes=11)


# -- detection --------------------------------------------------------------------------------


def _run(job_id, minute, status="failed", attempt=1):
    return FinishedRun(f"run-{job_id}-{minute}-{attempt}", job_id,
                       T0 + timedelta(minutes=minute), status, attempt, T0, "HTTP 500", "n1")


def test_failures_become_events_for_the_rules_that_listen():
    notify = validate_job_notify([{"events": ["failed", "recovered"], "channel": MAIL},
                                  {"events": ["lost"], "channel": MAIL}])
    jobs = {"j1": _job(notify=notify), "gone": _job("gone", deleted_at=T0)}
    ns = {"billing": [namespace_rule("r", validate_rule({"events": ["failed"],
                                                          "channel": MAIL}, ""))]}
    runs = [_run("j1", 1), _run("j1", 2, "lost"), _run("gone", 1), _run("missing", 1)]
    found = detect.failures(runs, jobs, ns, {}, now=T0, max_age=timedelta(hours=1))
    assert [(e.kind, e.rule.key.split(":")[0]) for e in found.events] == [
        ("failed", "job"), ("failed", "ns"), ("lost", "job")]
    assert found.events[0].event_key == "failed:run-j1-1-1:1"
    assert len(found.seen) == 4  # every run is read, wanted or not
    # Lost counts as a failure for the recovery (the job's rules listen to recovered).
    assert found.failing["j1"].last_failure_at == T0 + timedelta(minutes=2)
    assert found.failing["j1"].failures == 2 and "gone" not in found.failing


def test_old_failures_are_read_but_not_sent():
    jobs = {"j1": _job(notify=validate_job_notify([{"events": ["failed"], "channel": MAIL}]))}
    found = detect.failures([_run("j1", 1)], jobs, {}, {}, now=T0 + timedelta(days=2),
                            max_age=timedelta(hours=24))
    assert found.events == [] and found.too_old == 1 and len(found.seen) == 1


def test_recovery_is_the_first_success_since_the_latest_failure():
    notify = validate_job_notify([{"events": ["recovered"], "channel": MAIL}])
    jobs = {"j1": _job(notify=notify)}
    failing = {"j1": FailingJob("j1", T0, "run-f", 3, T0 - timedelta(hours=1))}
    success = _run("j1", 5, "succeeded")
    events, done = detect.recoveries(failing, {"j1": success}, jobs, {}, now=T0)
    [event] = events
    assert done == ["j1"] and event.kind == "recovered" and event.run_id == success.id
    assert event.detail["failures"] == 3


def test_a_job_that_paused_itself_is_a_paused_event_once_per_change():
    notify = validate_job_notify([{"events": ["paused"], "channel": MAIL},
                                  {"events": ["failed"], "channel": MAIL}])
    reason = "paused after 3 consecutive failed runs; last error: HTTP 500"
    paused = _job(notify=notify, paused=True, pause_reason=reason, failure_streak=3,
                  pause_after_failures=3, version=7, paused_at=T0)
    by_hand = _job("j2", notify=notify, paused=True, paused_at=T0)
    old = _job("j3", notify=notify, paused=True, pause_reason=reason,
               paused_at=T0 - timedelta(days=3))
    [event] = detect.self_paused([paused, by_hand, old], {}, now=T0 + timedelta(minutes=1),
                                 max_age=timedelta(hours=24))
    key = f"paused:j1:{int(T0.timestamp() * 1000)}"
    assert (event.kind, event.event_key, event.occurred_at) == ("paused", key, T0)
    # A later change of the paused job (a new version) is the same pause: the same key.
    [again] = detect.self_paused([_job(notify=notify, paused=True, pause_reason=reason,
                                       version=8, paused_at=T0)], {}, now=T0,
                                 max_age=timedelta(hours=24))
    assert again.event_key == key
    assert event.detail == {"reason": reason, "failure_streak": 3, "pause_after_failures": 3}
    note = _note("event", "paused")
    record = EventRecord(1, "n1", "ns:r", event.event_key, "paused", "j1", None, None, T0,
                         dict(event.detail), T0)
    assert subject(note, [record]) == f"[cronman] billing/export: {reason}"


# -- messages and retries ------------------------------------------------------------------------


def _note(kind="event", event="failed", count=1) -> Notification:
    return Notification("n1", "billing", "j1", "export", "ns:r", "g", dict(MAIL), kind, event,
                        "sending", 1, T0, T0, None, count, T0, T0, None)


def _event(kind="failed", i=0) -> EventRecord:
    return EventRecord(i, "n1", "ns:r", f"{kind}:{i}", kind, "j1", f"run-{i}", T0, T0,
                       {"attempt": 2, "error": "HTTP 500", "failures": 2, "late_after": 60}, T0)


def test_messages_say_what_happened():
    assert subject(_note(), [_event()]) == (
        "[cronman] billing/export: run failed (scheduled 2026-11-26T07:00:00Z, attempt 2)")
    digest = _note("digest", None, 150)
    events = [_event("failed", i) for i in range(99)] + [_event("recovered", 99)]
    assert subject(digest, events) == ("[cronman] billing/export: 150 events "
                                       "(99 failed, 1 recovered, 50 more)")
    body = text(digest, events)
    assert "HTTP 500" in body and "... and 50 more" in body
    data = payload(digest, events)
    assert data["event_count"] == 150 and len(data["events"]) == 100
    assert data["job"] == {"id": "j1", "namespace": "billing", "name": "export"}


def test_retry_delays_double_up_to_the_cap():
    assert [retry_delay(n) for n in (1, 2, 3)] == [30.0, 60.0, 120.0]
    assert retry_delay(20) == 3600.0
