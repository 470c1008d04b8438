"""Job definition validation (cronman.api.validation): defaults, types, fields."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronman.api import validation as v
from cronman.errors import Conflict, ValidationError

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
JOB_ID = "0190a1b2-c3d4-7e5f-8a9b-0123456789ab"


def job(**overrides):
    spec = {
        "name": "daily-digest",
        "schedule": {"kind": "cron", "cron": "0 7 * * *", "timezone": "Europe/Berlin"},
        "target": {"kind": "http", "url": "https://billing.example.com/digest"},
    }
    spec.update(overrides)
    return {k: val for k, val in spec.items() if val is not DROP}


DROP = object()


def validate(spec, **kw):
    kw.setdefault("job_id", JOB_ID)
    kw.setdefault("now", NOW)
    return v.validate_job(spec, **kw)


def field_of(spec, **kw) -> str | None:
    with pytest.raises(ValidationError) as info:
        validate(spec, **kw)
    return info.value.field


def test_minimal_job_gets_the_documented_defaults():
    out = validate(job())
    assert set(out) == set(v.DEFINITION_KEYS)
    assert out["namespace"] == "default"
    assert out["retry"] == {"max_attempts": 3, "min_backoff": 1, "max_backoff": 60}
    assert out["misfire"] == {"policy": "fire_once", "grace": 300}
    assert out["delivery"] == "at_least_once"
    assert out["concurrency"] == "allow"
    assert out["priority"] == 0
    assert out["paused"] is False
    assert out["labels"] == {}
    assert out["start_at"] is None and out["end_at"] is None
    assert out["jitter"] is None and out["dead_letter"] is None
    assert out["schedule"]["kind"] == "cron"
    assert out["target"]["method"] == "POST"  # normalised by the target module


def test_full_job_is_kept():
    out = validate(job(
        namespace="billing",
        retry={"max_attempts": 5},
        misfire={"policy": "skip"},
        delivery="at_most_once",
        concurrency="forbid",
        priority=-7,
        start_at="2026-07-01T00:00:00+02:00",
        end_at="2027-01-01T00:00:00Z",
        jitter=2.5,
        paused=True,
        labels={"team": "billing", "tier": "1"},
        dead_letter={"kind": "http", "url": "https://dlq.example.com/x"},
    ))
    assert out["namespace"] == "billing"
    assert out["retry"] == {"max_attempts": 5, "min_backoff": 1, "max_backoff": 60}
    assert out["misfire"] == {"policy": "skip", "grace": 300}
    assert out["start_at"] == datetime(2026, 6, 30, 22, tzinfo=UTC)
    assert out["end_at"] == datetime(2027, 1, 1, tzinfo=UTC)
    assert out["jitter"] == 2.5 and out["paused"] is True and out["priority"] == -7
    assert out["labels"] == {"team": "billing", "tier": "1"}
    assert out["dead_letter"]["kind"] == "http"


def test_validating_a_normalised_job_again_is_stable():
    first = validate(job(retry={"max_attempts": 2}, labels={"a": "b"}))
    again = dict(first)
    again["start_at"] = None
    assert validate(again) == first


@pytest.mark.parametrize("key", ["name", "schedule", "target"])
def test_required_keys(key):
    assert field_of(job(**{key: DROP})) == key
    assert field_of(job(**{key: None})) == key


@pytest.mark.parametrize("spec, field", [
    (job(colour="blue"), "colour"),
    (job(retry={"max_attempts": 2, "backoff": 3}), "retry.backoff"),
    (job(misfire={"policy": "skip", "when": 1}), "misfire.when"),
    (job(schedule={"kind": "cron", "cron": "* * * * *", "tz": "UTC"}), "schedule.tz"),
    (job(target={"kind": "http", "url": "https://a.example.com", "verb": "GET"}),
     "target.verb"),
])
def test_unknown_keys_are_refused_with_their_path(spec, field):
    assert field_of(spec) == field


@pytest.mark.parametrize("key", v.READ_ONLY_KEYS)
def test_read_only_keys_are_refused_in_a_new_definition(key):
    assert field_of(job(**{key: "x"})) == key
    # ... but skipped when the caller checked them (PUT/PATCH).
    validate(job(**{key: "x"}), allow_read_only=True)


@pytest.mark.parametrize("overrides, field", [
    ({"name": 12}, "name"),
    ({"name": ""}, "name"),
    ({"name": "x" * 257}, "name"),
    ({"name": "has space"}, "name"),
    ({"namespace": 3}, "namespace"),
    ({"namespace": "bad ns"}, "namespace"),
    ({"schedule": "0 7 * * *"}, "schedule"),
    ({"target": ["http"]}, "target"),
    ({"retry": 3}, "retry"),
    ({"retry": {"max_attempts": True}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": "3"}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": 0}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": 1.5}}, "retry.max_attempts"),
    ({"retry": {"min_backoff": -1}}, "retry.min_backoff"),
    ({"retry": {"min_backoff": 10, "max_backoff": 5}}, "retry.max_backoff"),
    ({"retry": {"min_backoff": float("nan")}}, "retry.min_backoff"),
    ({"misfire": {"policy": "later"}}, "misfire.policy"),
    ({"misfire": {"grace": "300"}}, "misfire.grace"),
    ({"misfire": {"grace": False}}, "misfire.grace"),
    ({"delivery": "exactly_once"}, "delivery"),
    ({"delivery": 1}, "delivery"),
    ({"concurrency": "queue"}, "concurrency"),
    ({"priority": True}, "priority"),
    ({"priority": "1"}, "priority"),
    ({"priority": 10**12}, "priority"),
    ({"priority": 0.5}, "priority"),
    ({"paused": 1}, "paused"),
    ({"paused": "false"}, "paused"),
    ({"labels": ["a"]}, "labels"),
    ({"labels": {"team": 1}}, "labels.team"),
    ({"labels": {"a:b": "c"}}, "labels.a:b"),
    ({"labels": {"": "c"}}, "labels."),
    ({"jitter": -1}, "jitter"),
    ({"jitter": True}, "jitter"),
    ({"jitter": "5"}, "jitter"),
    ({"start_at": "tomorrow"}, "start_at"),
    ({"start_at": 1700000000}, "start_at"),
    ({"end_at": "2026-07-01T00:00:00"}, "end_at"),  # no offset
    ({"start_at": "2026-07-02T00:00:00Z", "end_at": "2026-07-01T00:00:00Z"}, "end_at"),
    ({"start_at": "0500-01-01T00:00:00Z"}, "start_at"),
    ({"end_at": "9999-12-31T23:59:59Z"}, "end_at"),
    ({"dead_letter": "https://x.example.com"}, "dead_letter"),
    ({"dead_letter": {"kind": "container", "image": "busybox"}}, "dead_letter.kind"),
])
def test_wrong_types_and_values_name_the_field(overrides, field):
    assert field_of(job(**overrides)) == field


def test_priority_accepts_integral_floats():
    assert validate(job(priority=3.0))["priority"] == 3


@pytest.mark.parametrize("schedule, field", [
    ({"kind": "cron", "cron": "61 * * * *"}, "schedule.cron"),
    ({"kind": "cron", "cron": "not a cron"}, "schedule.cron"),
    ({"kind": "cron", "cron": "0 7 * * *", "timezone": "Mars/Olympus_Mons"},
     "schedule.timezone"),
    ({"kind": "weekly"}, "schedule.kind"),
    ({"cron": "* * * * *"}, "schedule.kind"),
    ({"kind": "interval", "every": 0}, "schedule.every"),
    ({"kind": "interval", "every": "5m"}, "schedule.every"),
    ({"kind": "once", "at": "soon"}, "schedule.at"),
    ({"kind": "once", "at": "2026-06-01T11:59:59Z"}, "schedule.at"),  # in the past
    ({"kind": "once", "at": "9500-01-01T00:00:00Z"}, "schedule.at"),
    ({"kind": "interval", "every": 60, "anchor": "0005-01-01T00:00:00Z"}, "schedule.anchor"),
    ({"kind": "interval", "every": 60, "anchor": "0001-01-01T00:00:00+01:00"},
     "schedule.anchor"),
])
def test_schedule_errors(schedule, field):
    assert field_of(job(schedule=schedule)) == field


def test_once_in_the_future_is_accepted_and_normalised():
    out = validate(job(schedule={"kind": "once", "at": "2026-06-01T14:00:00+02:00"}))
    assert out["schedule"] == {"kind": "once", "at": "2026-06-01T12:00:00Z"}


def test_past_once_schedule_may_be_sent_back_unchanged():
    stored = {"kind": "once", "at": "2026-05-01T00:00:00Z"}
    out = validate(job(schedule=dict(stored)), previous_schedule=stored)
    assert out["schedule"] == stored
    # A changed one is checked again.
    assert field_of(job(schedule={"kind": "once", "at": "2026-05-02T00:00:00Z"}),
                    previous_schedule=stored) == "schedule.at"


def test_interval_anchor_defaults_to_creation_time():
    out = validate(job(schedule={"kind": "interval", "every": 300}),
                   created_at=NOW + timedelta(microseconds=700_000))
    assert out["schedule"]["anchor"] == "2026-06-01T12:00:00Z"


@pytest.mark.parametrize("target, field", [
    ({"kind": "http", "url": "ftp://files.example.com/x"}, "target.url"),
    ({"kind": "http", "url": "file:///etc/passwd"}, "target.url"),
    ({"kind": "http", "url": "https://a.example.com", "method": "BREW"}, "target.method"),
    ({"kind": "http", "url": "https://a.example.com", "headers": {"X": 1}}, "target.headers.X"),
    ({"kind": "http", "url": "https://a.example.com", "timeout": True}, "target.timeout"),
    ({"kind": "http"}, "target.url"),
    ({"kind": "pigeon"}, "target.kind"),
    ({"kind": "sqs", "queue_url": "https://sqs.example.com/1/q"}, "target.region"),
])
def test_target_errors_are_prefixed(target, field):
    assert field_of(job(target=target)) == field


def test_body_over_64_kib_is_refused():
    big = "x" * (64 * 1024 + 1)
    target = {"kind": "http", "url": "https://a.example.com", "body": big}
    assert field_of(job(target=target)) == "target.body"
    target["body"] = "x" * (64 * 1024)
    assert validate(job(target=target))["target"]["body"] == target["body"]
    # Multi-byte characters count as bytes.
    target["body"] = "é" * (32 * 1024 + 1)
    assert field_of(job(target=target)) == "target.body"


def test_prefix_is_put_before_every_field():
    spec = job(schedule={"kind": "cron", "cron": "* * * * *", "timezone": "Nowhere/Land"})
    assert field_of(spec, prefix="jobs[1]") == "jobs[1].schedule.timezone"
    assert field_of(job(name=DROP), prefix="jobs[0]") == "jobs[0].name"
    assert field_of(job(colour="x"), prefix="jobs[2]") == "jobs[2].colour"
    assert field_of("not an object", prefix="jobs[3]") == "jobs[3]"


def test_not_an_object():
    with pytest.raises(ValidationError) as info:
        validate(["a"])
    assert info.value.field is None


def test_check_read_only():
    created = datetime(2026, 1, 1, tzinfo=UTC)
    ok = {"id": JOB_ID, "version": 4, "created_at": "2026-01-01T00:00:00Z",
          "updated_at": "2020-05-05T05:05:05Z", "next_fire_at": None, "last_run": {"x": 1}}
    v.check_read_only(ok, job_id=JOB_ID, version=4, created_at=created)
    # The ignored ones are ignored only in the form the API writes them.
    for key, value in (("updated_at", "whatever"), ("next_fire_at", 5), ("last_run", "x")):
        with pytest.raises(ValidationError) as info:
            v.check_read_only({**ok, key: value}, job_id=JOB_ID, version=4, created_at=created)
        assert info.value.field == key
    with pytest.raises(ValidationError) as info:
        v.check_read_only({"id": "other"}, job_id=JOB_ID, version=4, created_at=created)
    assert info.value.field == "id"
    with pytest.raises(ValidationError) as info:
        v.check_read_only({"created_at": "2026-01-02T00:00:00Z"}, job_id=JOB_ID, version=4,
                          created_at=created)
    assert info.value.field == "created_at"
    with pytest.raises(Conflict) as conflict:
        v.check_read_only({"version": 3}, job_id=JOB_ID, version=4, created_at=created)
    assert conflict.value.field == "version"
    with pytest.raises(ValidationError):
        v.check_read_only({"version": "4"}, job_id=JOB_ID, version=4, created_at=created)


@pytest.mark.parametrize("body, field", [
    ([], None),
    ({}, "jobs"),
    ({"jobs": []}, "jobs"),
    ({"jobs": {}}, "jobs"),
    ({"jobs": [{}] * 1001}, "jobs"),
    ({"jobs": [{}], "atomic": True}, "atomic"),
])
def test_bulk_envelope(body, field):
    with pytest.raises(ValidationError) as info:
        v.validate_bulk(body)
    assert info.value.field == field


def test_backfill_body():
    since, until = v.validate_backfill(
        {"since": "2026-05-01T00:00:00Z", "until": "2026-07-01T00:00:00Z"}, now=NOW)
    assert since == datetime(2026, 5, 1, tzinfo=UTC)
    assert until == NOW  # clamped: the future is the scheduler's
    for body, field in [({"since": "2026-05-01T00:00:00Z"}, "until"),
                        ({"until": "2026-05-01T00:00:00Z"}, "since"),
                        ({"since": "x", "until": "2026-05-01T00:00:00Z"}, "since"),
                        ({"since": "2026-05-02T00:00:00Z", "until": "2026-05-01T00:00:00Z"},
                         "since"),
                        ({"since": "2026-05-01T00:00:00Z", "until": "2026-05-02T00:00:00Z",
                          "step": 1}, "step")]:
        with pytest.raises(ValidationError) as info:
            v.validate_backfill(body, now=NOW)
        assert info.value.field == field


def test_query_parameter_helpers():
    assert v.parse_label_filter(["team:billing", "url:http://x"]) == (
        ("team", "billing"), ("url", "http://x"))
    with pytest.raises(ValidationError):
        v.parse_label_filter(["team"])
    assert v.parse_bool_param("True", "paused") is True
    assert v.parse_bool_param("0", "paused") is False
    with pytest.raises(ValidationError):
        v.parse_bool_param("maybe", "paused")
    assert v.parse_int_param(None, "limit", default=100, lo=1, hi=1000) == 100
    for raw in ("0", "1001", "ten", "1.5"):
        with pytest.raises(ValidationError) as info:
            v.parse_int_param(raw, "limit", default=100, lo=1, hi=1000)
        assert info.value.field == "limit"
