"""The pure parts of workflows: ``after`` schedules, ``depends_on`` and
``calendars`` validation, calendar references, the graph's links and cycle
path, a run's gate in words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronman.api.validation import validate_job
from cronman.api.workflow_validation import check_calendar_refs, check_depends_on
from cronman.cli.output import gate_text
from cronman.errors import ValidationError
from cronman.models import Job
from cronman.schedules import JobTimes, parse_schedule
from cronman.schedules.calendars import reference_key
from cronman.store.dag import _path_back, links_of
from cronman.vocabulary import DEFAULT_DEPENDENCY_WAIT

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
TARGET = {"kind": "http", "url": "https://hooks.example.com/x"}


def fails(field: str, fn, *args, **kwargs) -> str:
    with pytest.raises(ValidationError) as info:
        fn(*args, **kwargs)
    assert info.value.field == field, (info.value.field, info.value.message)
    return info.value.message


def test_an_after_schedule_has_no_fire_times():
    s = parse_schedule({"kind": "after", "jobs": ["a", "ns/b", "a"]}, job_id="j",
                       created_at=NOW)
    assert s.to_dict() == {"kind": "after", "jobs": ["a", "ns/b"], "mode": "all"}
    times = JobTimes(s, job_id="j", start_at=None, end_at=None, jitter=None)
    assert times.next_fire_after(NOW) is None
    assert times.fire_times(NOW, 10) == []
    assert times.fire_times_between(NOW, NOW.replace(year=2027), 100) == []
    assert times.next_fire_ms_after(0) is None


@pytest.mark.parametrize(("spec", "field"), [
    ({"kind": "after"}, "jobs"),
    ({"kind": "after", "jobs": []}, "jobs"),
    ({"kind": "after", "jobs": "a"}, "jobs"),
    ({"kind": "after", "jobs": ["a", 3]}, "jobs[1]"),
    ({"kind": "after", "jobs": ["-a"]}, "jobs[0]"),
    ({"kind": "after", "jobs": ["a"] * 51}, "jobs"),
    ({"kind": "after", "jobs": ["a"], "mode": "most"}, "mode"),
    ({"kind": "after", "jobs": ["a"], "every": 3}, "every"),
])
def test_after_schedules_are_validated(spec, field):
    fails(field, parse_schedule, spec, job_id="j", created_at=NOW)


def test_depends_on_is_normalised():
    assert check_depends_on(None, "depends_on") is None
    assert check_depends_on([], "depends_on") is None
    assert check_depends_on([{"job": "a", "within": 3600.0}], "depends_on") == [
        {"job": "a", "within": 3600, "wait": DEFAULT_DEPENDENCY_WAIT}]
    assert check_depends_on([{"job": "ns/a", "within": 1.5, "wait": 0}], "d") == [
        {"job": "ns/a", "within": 1.5, "wait": 0}]


@pytest.mark.parametrize(("value", "field"), [
    ({"job": "a"}, "depends_on"),
    ([{"within": 60}], "depends_on[0].job"),
    ([{"job": "a"}], "depends_on[0].within"),
    ([{"job": "a", "within": 0}], "depends_on[0].within"),
    ([{"job": "a", "within": True}], "depends_on[0].within"),
    ([{"job": "a", "within": 60, "wait": 8 * 86400}], "depends_on[0].wait"),
    ([{"job": "a", "within": 60, "every": 1}], "depends_on[0].every"),
    ([{"job": "", "within": 60}], "depends_on[0].job"),
    (["a"], "depends_on[0]"),
])
def test_depends_on_is_validated(value, field):
    fails(field, check_depends_on, value, "depends_on")


def test_calendar_references_keep_names_of_the_jobs_namespace():
    assert check_calendar_refs(["de", "billing/de", "ops/de", "de"], "calendars",
                               "billing") == ["de", "ops/de"]
    assert check_calendar_refs([], "calendars", "x") is None
    assert fails("calendars[1]", check_calendar_refs, ["a", "a/b/c"], "calendars", "x")
    assert reference_key("de", "billing") == ("billing", "de")
    assert reference_key("ops/de", "billing") == ("ops", "de")


def test_a_job_definition_carries_its_workflow_keys():
    spec = validate_job({"name": "t", "namespace": "ml", "target": TARGET,
                         "schedule": {"kind": "after", "jobs": ["features"], "mode": "any"},
                         "depends_on": [{"job": "ml/export", "within": 60}],
                         "calendars": ["ml/holidays"]}, job_id="j", now=NOW)
    assert spec["schedule"] == {"kind": "after", "jobs": ["features"], "mode": "any"}
    assert spec["depends_on"] == [{"job": "ml/export", "within": 60, "wait": 600}]
    assert spec["calendars"] == ["holidays"]
    fails("jobs[2].depends_on[0].within", validate_job,
          {"name": "t", "target": TARGET, "schedule": {"kind": "interval", "every": 1},
           "depends_on": [{"job": "a"}]}, job_id="j", now=NOW, prefix="jobs[2]")


def test_the_graph_links_of_a_definition_and_the_path_of_a_cycle():
    spec = {"depends_on": [{"job": "u1", "within": 5}],
            "schedule": {"kind": "after", "jobs": ["u2", "u3"]}}
    assert links_of(spec) == [("u1", "depends_on", "depends_on[0].job"),
                              ("u2", "after", "schedule.jobs[0]"),
                              ("u3", "after", "schedule.jobs[1]")]
    # up[x] = the jobs x depends on
    up = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set()}
    assert _path_back(up, "a") == ["a", "b", "c", "a"]
    assert _path_back({"a": {"b"}, "b": {"c"}}, "a") is None
    assert _path_back({"a": {"a"}}, "a") == ["a", "a"]


def test_a_gate_in_words():
    assert gate_text(None) is None
    assert gate_text({"calendar": "de"}) == "calendar de"
    assert gate_text({"upstream": [{}, {}]}) == "after 2 upstream run(s)"
    assert gate_text({"waiting_for": ["x"], "waiting_since": "t"}) == \
        "waiting for 1 upstream job(s)"
    assert gate_text({"waiting_for": ["x"], "waited_for": ["x"], "waited_ms": 2500,
                      "stale": ["x"]}) == "waited 2.5 s; stale: 1 upstream job(s)"
    assert gate_text({"depends_on": [{}], "waited_ms": 0}) == \
        "waited 0.0 s; 1 upstream(s) fresh"
    assert gate_text({"limit": {"name": "billing", "waited_ms": 840}}) == "limit billing 0.8 s"
    assert gate_text({"limit": {"name": "billing", "since": "t"}}) == "limit billing (waiting)"


def test_a_job_without_workflow_keys_is_unchanged():
    job = Job(id="j", namespace="n", name="x", version=1, schedule={}, target=TARGET,
              retry={}, misfire={}, delivery="at_least_once", concurrency="allow",
              priority=0, start_at=None, end_at=None, jitter=None, paused=False, labels={},
              dead_letter=None, created_at=NOW, updated_at=NOW)
    assert job.depends_on is None and job.calendars is None
